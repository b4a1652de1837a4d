"""``csv``: delimited text, columns by position (as in Feldera), decoded with pyarrow."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from airflow_connectors.formats.base import (
    Decoded,
    Format,
    RecordError,
    clip,
    conform,
    isolate,
    line_blocks,
    split_records,
    target_schema,
)
from airflow_connectors.transports.base import StrictConfig

if TYPE_CHECKING:
    import pyarrow as pa


class CsvConfig(StrictConfig):
    delimiter: str = Field(default=",", min_length=1, max_length=1)
    #: The object's first line is a header and is skipped (columns are positional).
    headers: bool = False
    quote: str = Field(default='"', min_length=1, max_length=1)


class CsvFormat(Format):
    name = "csv"
    Config = CsvConfig
    config: CsvConfig

    def __init__(self, config: StrictConfig, table: object) -> None:
        super().__init__(config, table)  # type: ignore[arg-type]
        self.schema = target_schema(self.table)

    @property
    def line_oriented(self) -> bool:
        return True

    def decode(
        self, chunks: Iterator[bytes], *, final: bool, first_record: int, at_start: bool
    ) -> Iterator[Decoded]:
        record = first_record
        skip_header = self.config.headers and at_start
        for block, consumed in line_blocks(chunks, final=final):
            if skip_header:
                block = block.split(b"\n", 1)[1] if b"\n" in block else b""
                skip_header = False
            bad_rows: list[RecordError] = []
            try:
                table = self._decode(block, record, bad_rows)
                out = Decoded(table, bad_rows, table.num_rows + len(bad_rows), consumed)
            except Exception:
                records = split_records(block)
                tables, errors = isolate(records, self._decode_strict, record)
                import pyarrow as pa

                table = pa.concat_tables(tables) if tables else self.schema.empty_table()
                out = Decoded(table, errors, len(records), consumed)
            record += out.records
            yield out

    def _decode_strict(self, records: Sequence[bytes]) -> pa.Table:
        bad: list[RecordError] = []
        try:
            table = self._decode(b"\n".join(records), 0, bad)
        except Exception as e:
            raise ValueError(self._explain(str(e))) from e
        if bad:
            raise ValueError(bad[0].error)
        return table

    def _explain(self, message: str) -> str:
        # pyarrow: "In CSV column #0: Row #1: CSV conversion error to int32: invalid value 'x'"
        m = re.match(
            r"In CSV column #(\d+): (?:Row #\d+: )?CSV conversion error to [^:]+: (.*)", message
        )
        if m and int(m.group(1)) < len(self.table.columns):
            col = self.table.columns[int(m.group(1))]
            return f"column {col.name!r} ({col.type}): {m.group(2)}"
        return message

    def _decode(self, data: bytes, first_record: int, bad_rows: list[RecordError]) -> pa.Table:
        import pyarrow as pa
        import pyarrow.csv as pcsv

        def invalid_row(row: pcsv.InvalidRow) -> str:
            number = first_record + (row.number - 1 if row.number else 0)
            bad_rows.append(
                RecordError(
                    number,
                    f"expected {row.expected_columns} columns, found {row.actual_columns}",
                    clip(row.text),
                )
            )
            return "skip"

        if not data.strip():
            return self.schema.empty_table()
        raw = pcsv.read_csv(
            pa.BufferReader(data),
            read_options=pcsv.ReadOptions(
                column_names=self.table.column_names,
                use_threads=False,
                block_size=max(len(data), 1 << 20),
            ),
            parse_options=pcsv.ParseOptions(
                delimiter=self.config.delimiter,
                quote_char=self.config.quote,
                invalid_row_handler=invalid_row,
            ),
            convert_options=pcsv.ConvertOptions(
                column_types={f.name: f.type for f in self.schema},
                null_values=["", "NULL", "null"],
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
        return conform(raw, self.table, self.schema)
