"""Change records: how a format or a transport says insert, update and delete.

A table with a ``primary_key`` takes changes, not only rows. A format (json's
``update_format: insert_delete`` or ``debezium``) or a transport that reads a change log
(``postgres_cdc_input``) yields, besides the table's columns, the column :data:`OP`:

- :data:`UPSERT` (0): the record is a whole row; it inserts the key's row or replaces it.
- :data:`DELETE` (1): the key columns name the row to delete; other columns may be null.
- :data:`UPDATE` (2): a partial row (Feldera's ``update``): the columns named in the
  record's :data:`SET` list take the record's values, the others keep the row's; the key
  columns must be given. An update of a key the table does not hold changes nothing.
- :data:`TRUNCATE` (3): every row the table holds before this change goes (PostgreSQL's
  ``TRUNCATE``, Debezium's ``op: t``); the record's other columns are ignored.

A block without an :data:`OP` column is all upserts (into a keyed table) or appends
(into a table without a key). A delete or update into a table without a key is that
record's error: never appended.

The engine adds :data:`ORDER` to each staged change: ``(item index in the batch plan <<
32) | record number within the item``, the order the source holds the changes in. The
sink collapses several changes to one key by ``sequence_by`` (when the table declares
it), then by batch and :data:`ORDER` (``sinks/changes.py``).

Nothing here imports pyarrow at import time (the spec imports this module).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

#: The operation of a change record (int8): :data:`UPSERT`, :data:`DELETE`, :data:`UPDATE`.
OP = "__op"
#: The columns an :data:`UPDATE` sets (list<string>); null for the other operations.
SET = "__set"
#: Where the change stands in its batch (int64), added by the engine when staging.
ORDER = "__order"

UPSERT = 0
DELETE = 1
UPDATE = 2
TRUNCATE = 3
OP_NAMES = {UPSERT: "upsert", DELETE: "delete", UPDATE: "update", TRUNCATE: "truncate"}

#: The change columns, in the order they follow the table's columns in a staged part.
CHANGE_COLUMNS = (OP, SET, ORDER)


def op_type() -> pa.DataType:
    """The Arrow type of :data:`OP`."""
    import pyarrow as pa

    return pa.int8()


def set_type() -> pa.DataType:
    """The Arrow type of :data:`SET`."""
    import pyarrow as pa

    return pa.list_(pa.string())


def change_fields() -> list[pa.Field]:
    """The change columns as Arrow fields (staged parts of a keyed table end with them)."""
    import pyarrow as pa

    return [
        pa.field(OP, op_type(), nullable=False),
        pa.field(SET, set_type()),
        pa.field(ORDER, pa.int64(), nullable=False),
    ]
