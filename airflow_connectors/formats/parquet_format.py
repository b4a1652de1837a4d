"""``parquet``: Parquet objects; columns matched by name and cast to the table's types.

With ``operation_column`` (:mod:`._changes`), that column of the file names each row's
operation (delete values make deletes of the row's key) and is not stored; a file
without it is all upserts."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from airflow_connectors.formats._changes import (
    OperationConfig,
    apply_operation_column,
    check_operation_column,
)
from airflow_connectors.formats.base import (
    Decoded,
    Format,
    NewFields,
    clip,
    conform_evolving,
    isolate,
)
from airflow_connectors.formats.inference import InferredFields
from airflow_connectors.spec.config import StrictConfig

if TYPE_CHECKING:
    from airflow_connectors.spec.models import TableSpec


class ParquetConfig(OperationConfig):
    """Feldera's parquet parser takes no settings; ``operation_column`` and its values
    are this package's (see :mod:`._changes`)."""


class ParquetFormat(Format):
    """The ``parquet`` format: columns matched by name and cast to the table's types."""

    name = "parquet"
    Config = ParquetConfig
    config: ParquetConfig
    infers_schema = True
    infers_from_whole_objects = True

    @classmethod
    def check_table(cls, config: StrictConfig, table: TableSpec) -> None:
        """An ``operation_column`` needs a table with a primary key."""
        assert isinstance(config, ParquetConfig)
        check_operation_column(config, table)

    @classmethod
    def infer_fields(
        cls, config: StrictConfig, data: bytes, key: str, fields: InferredFields
    ) -> None:
        """The file's own schema (its footer), columns in file order."""
        import pyarrow.parquet as pq

        fields.add_arrow(pq.ParquetFile(io.BytesIO(data)).schema_arrow, key)

    def decode(
        self,
        chunks: Iterator[bytes],
        *,
        final: bool,
        first_record: int,
        at_start: bool,
        first_line: int | None = None,
    ) -> Iterator[Decoded]:
        """Reads the whole object, one row group at a time; a row group that does not
        convert is split so only its bad rows become dead letters. Not line oriented:
        reading starts at the start of the object."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = self.table.arrow_schema()
        data = b"".join(chunks)
        # Pages written with a CRC are checked: a flipped byte is an unreadable object
        # (skipped and counted under errors.tolerance: all), never a wrong value.
        pf = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True)
        # Under schema_evolution other than none, the file's other columns are read too
        # (to fail on them, rescue them or add them to the table).
        operation = self.config.operation_column
        columns = (
            list(pf.schema_arrow.names)
            if self.evolution.detects
            else [
                c
                for c in [*self.table.column_names, operation]
                if c is not None and c in pf.schema_arrow.names
            ]
        )
        evolution = self.evolution
        if evolution.mode == "fail_on_new_columns":
            known = {*self.table.column_names, operation}
            new = [n for n in pf.schema_arrow.names if n not in known]
            if new:
                raise NewFields(new)
        record = first_record
        for group in range(pf.num_row_groups):
            try:
                raw = pf.read_row_group(group, columns=columns)
            except OSError as e:
                if "checksum" not in str(e).lower():
                    raise
                raise OSError(
                    f"row group {group}: a page does not match its CRC checksum ({e}): the "
                    "file is damaged; write it again"
                ) from None
            try:
                table = conform_evolving(
                    apply_operation_column(raw, self.config), self.table, schema, evolution
                )
                out = Decoded(table, [], raw.num_rows, 0)
            except Exception:

                def convert(rs: Sequence[int], raw: pa.Table = raw) -> pa.Table:
                    part = apply_operation_column(raw.slice(rs[0], len(rs)), self.config)
                    return conform_evolving(part, self.table, schema, evolution)

                # The dead letter shows the whole row as the file holds it, also the
                # columns the table does not have (a file of another schema).
                whole = pf.read_row_group(group)

                def text(i: int, whole: pa.Table = whole) -> str:
                    return clip(json.dumps(whole.slice(i, 1).to_pylist()[0], default=str))

                tables, errors = isolate(range(raw.num_rows), convert, record, text)
                out = Decoded(
                    pa.concat_tables(tables) if tables else schema.empty_table(),
                    errors,
                    raw.num_rows,
                    0,
                )
            record += out.records
            yield out
        yield Decoded(schema.empty_table(), [], 0, len(data))
