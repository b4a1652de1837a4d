"""An operation column: rows that say themselves whether they are upserts or deletes.

Databricks' AUTO CDC ``apply_as_deletes``, AWS DMS's ``Op`` column and most change
exports (CSV, Avro, Parquet, JSON rows) carry one column that names each row's
operation. With format config ``operation_column: <name>`` the csv, avro, parquet and
json (``update_format: raw``) formats read that column and turn it into the change
column :data:`~airflow_connectors.changes.OP`:

- a value in ``delete_values`` (default ``D``, ``d``, ``delete``, ``DELETE``): a
  :data:`~airflow_connectors.changes.DELETE` of the row's key;
- a value in ``truncate_values`` (default none): a
  :data:`~airflow_connectors.changes.TRUNCATE` (every row the table holds before it goes);
- any other value, and a null: an :data:`~airflow_connectors.changes.UPSERT` (so ``I``,
  ``U``, ``insert``, ``update`` or a value of the user's own are all whole rows).

Values are compared exactly (case and blanks count) after reading them as text. The
operation column is not a table column: it is dropped once read. A file without the
column (a full load before the changes) is all upserts. Only a table with a
``primary_key`` takes an operation column (refused at spec load otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from airflow_connectors.spec.config import StrictConfig

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.spec.models import TableSpec

DEFAULT_DELETE_VALUES = ("D", "d", "delete", "DELETE")


class OperationConfig(StrictConfig):
    """The operation-column settings shared by the csv, avro, parquet and json formats."""

    operation_column: str | None = Field(
        default=None,
        min_length=1,
        description="A field of each record naming its operation (Databricks' "
        "apply_as_deletes, AWS DMS's Op): a value in delete_values makes the row a delete "
        "of its key, a value in truncate_values a truncate, any other value (or null) an "
        "upsert. The field is not a table column. Needs a table with a primary_key.",
    )
    delete_values: tuple[str, ...] = Field(
        default=DEFAULT_DELETE_VALUES,
        description="Values of operation_column that mean delete (compared exactly).",
    )
    truncate_values: tuple[str, ...] = Field(
        default=(),
        description="Values of operation_column that mean truncate: every row the table "
        "holds before it goes (compared exactly; none by default).",
    )

    @model_validator(mode="after")
    def _disjoint(self) -> OperationConfig:
        both = sorted(set(self.delete_values) & set(self.truncate_values))
        if both:
            raise ValueError(
                f"delete_values and truncate_values both hold {', '.join(map(repr, both))}; "
                "a value names one operation"
            )
        return self


def check_operation_column(config: OperationConfig, table: TableSpec) -> None:
    """Raise ``ValueError`` (one line) when ``table`` cannot take ``config``'s operation
    column: the table has no primary key, or the column is one of the table's."""
    name = config.operation_column
    if name is None:
        return
    if not table.keyed:
        raise ValueError(
            f"table {table.name}: format config operation_column {name!r} makes deletes, "
            "which need a table with a primary_key; declare the table's primary_key or "
            "remove operation_column"
        )
    if name in table.column_names:
        raise ValueError(
            f"table {table.name}: operation_column {name!r} is a column of the table; the "
            "operation column is read and dropped, so name a field that is not a column"
        )


def apply_operation_column(data: pa.Table, config: OperationConfig) -> pa.Table:
    """``data`` with its operation column (``config.operation_column``) turned into
    :data:`~airflow_connectors.changes.OP` and dropped; ``data`` as it is when no
    operation column is configured or ``data`` lacks it (all upserts)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from airflow_connectors.changes import DELETE, OP, TRUNCATE, UPSERT, op_type
    from airflow_connectors.formats._conform import RowError, show

    name = config.operation_column
    if name is None or name not in data.column_names:
        return data
    values = data.column(name)
    if pa.types.is_dictionary(values.type):
        values = pc.cast(values, values.type.value_type)
    if not pa.types.is_string(values.type):
        try:
            values = pc.cast(values, pa.string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            first = values.drop_null()
            got = show(first[0].as_py(), values.type) if len(first) else str(values.type)
            raise RowError(
                f"operation column {name!r}: expected text naming the operation, got {got}"
            ) from None
    deletes = pc.fill_null(
        pc.is_in(values, value_set=pa.array(config.delete_values, pa.string())), False
    )
    ops = pc.if_else(deletes, pa.scalar(DELETE, op_type()), pa.scalar(UPSERT, op_type()))
    if config.truncate_values:
        truncates = pc.fill_null(
            pc.is_in(values, value_set=pa.array(config.truncate_values, pa.string())), False
        )
        ops = pc.if_else(truncates, pa.scalar(TRUNCATE, op_type()), ops)
    out = data.drop_columns([name])
    if OP in out.column_names:
        out = out.drop_columns([OP])
    return out.append_column(pa.field(OP, op_type()), ops)
