"""``raw``: Feldera's raw format: each line, or each whole object, is one row's value.

``mode: blob`` (Feldera's default) makes the whole object one row; ``mode: lines`` makes
each line one row (a line ends at ``\\n``; a ``\\r`` before it is not part of the value;
an empty line is a row with an empty value). The value goes into one VARCHAR column:
the table's only column, or the one ``column_name`` names (the table's other columns are
NULL). A value that is not UTF-8 text is a dead letter naming the byte.

``lines`` is line oriented: a read may start at a byte offset, and a followed file's
appended lines are read later. ``blob`` reads the object whole (the value is the object).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from airflow_connectors.formats.base import (
    DEFAULT_BLOCK_BYTES,
    Decoded,
    Format,
    RecordError,
    buffered,
    clip,
    conform,
    text_start,
)
from airflow_connectors.spec.config import StrictConfig

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.spec.models import ColumnSpec, TableSpec


class RawConfig(StrictConfig):
    """Feldera's raw parser: the input as text values of one column."""

    mode: Literal["blob", "lines"] = Field(
        default="blob",
        description="'blob' (default): each object is one row. 'lines': each line "
        "(ending at \\n) is one row.",
    )
    column_name: str | None = Field(
        default=None,
        description="The VARCHAR column that takes the value; required when the table "
        "has more than one column (its other columns are NULL).",
    )


def _target(config: RawConfig, table: TableSpec) -> ColumnSpec:
    """The column raw values go to; raises ``ValueError`` (one line naming the table and
    what to do) when the table cannot take them."""
    names = ", ".join(c.name for c in table.columns)
    if config.column_name is None:
        if len(table.columns) != 1:
            raise ValueError(
                f"format raw: table {table.name!r} has {len(table.columns)} columns "
                f"({names}); set format config column_name to the VARCHAR column that "
                "takes each value"
            )
        col = table.columns[0]
    else:
        found = [c for c in table.columns if c.name == config.column_name]
        if not found:
            raise ValueError(
                f"format raw: column_name {config.column_name!r} is not a column of table "
                f"{table.name!r}; its columns: {names}"
            )
        col = found[0]
    if col.type.kind != "VARCHAR":
        raise ValueError(
            f"format raw: column {col.name!r} of table {table.name!r} is {col.type}; raw "
            "values are text, so it must be VARCHAR (name a VARCHAR column with "
            "column_name, or change the column's type)"
        )
    required = [c.name for c in table.columns if c is not col and not c.nullable]
    if required:
        raise ValueError(
            f"format raw: table {table.name!r} has NOT NULL column(s) {', '.join(required)} "
            f"that raw values cannot fill (only {col.name!r} gets a value); make them "
            "nullable or use another format"
        )
    return col


class RawFormat(Format):
    """The ``raw`` format: one row per object (``blob``) or per line (``lines``) into one
    VARCHAR column; see the module docstring."""

    name = "raw"
    Config = RawConfig
    config: RawConfig

    def __init__(self, config: StrictConfig, table: TableSpec) -> None:
        super().__init__(config, table)
        self.column = _target(self.config, table)
        self.block_bytes = DEFAULT_BLOCK_BYTES

    @classmethod
    def check_table(cls, config: StrictConfig, table: TableSpec) -> None:
        """The table needs a VARCHAR column for the values (see :func:`_target`)."""
        assert isinstance(config, RawConfig)
        _target(config, table)

    @property
    def line_oriented(self) -> bool:
        """True for ``mode: lines``."""
        return self.config.mode == "lines"

    def decode(
        self,
        chunks: Iterator[bytes],
        *,
        final: bool,
        first_record: int,
        at_start: bool,
        first_line: int | None = None,
    ) -> Iterator[Decoded]:
        """Lines cut at ``\\n`` (a partial last line waits unless ``final``), or the whole
        object as one value; bytes that are not UTF-8 make the record a dead letter."""
        line = first_line if first_line is not None else (1 if at_start else None)
        if self.config.mode == "blob":
            yield self._blob(b"".join(chunks), first_record, line, at_start=at_start)
            return
        record = first_record

        def step(buf: bytes, at_end: bool) -> tuple[Decoded | None, int]:
            nonlocal record, line
            more = not (at_end and final)
            cut = buf.rfind(b"\n") + 1 if more else len(buf)
            if not cut:
                return None, 0
            out = self._lines(buf[:cut], record, line)
            record += out.records
            if line is not None:
                line += out.records
            return out, cut

        steps = text_start(step, self.name, self._empty) if at_start else step
        yield from buffered(chunks, steps, block_bytes=self.block_bytes)

    def _empty(self) -> pa.Table:
        return self.table.arrow_schema().empty_table()

    def _blob(self, data: bytes, record: int, line: int | None, *, at_start: bool) -> Decoded:
        if not data or (at_start and record > 1):
            # An empty object holds no value; a blob whose record was committed (a read
            # from the start with records done) is not read twice.
            return Decoded(self._empty(), [], 0, len(data))
        values, errors = self._values([data], record, [line])
        return Decoded(self._table(values), errors, 1, len(data))

    def _lines(self, block: bytes, record: int, line: int | None) -> Decoded:
        lines = block.split(b"\n")
        if block.endswith(b"\n"):
            lines.pop()  # the line end of the last line, not an empty line after it
        if b"\r" in block:
            lines = [v[:-1] if v.endswith(b"\r") else v for v in lines]
        numbers = [None if line is None else line + i for i in range(len(lines))]
        values, errors = self._values(lines, record, numbers)
        return Decoded(self._table(values), errors, len(lines))

    def _values(
        self, raw: list[bytes], record: int, lines: list[int | None]
    ) -> tuple[pa.Array, list[RecordError]]:
        """``raw`` as text values; those that are not UTF-8 are dead letters."""
        import pyarrow as pa

        try:
            return pa.array(raw, pa.binary()).cast(pa.string()), []
        except pa.ArrowInvalid:
            pass
        good: list[str] = []
        errors: list[RecordError] = []
        for i, value in enumerate(raw):
            try:
                good.append(value.decode("utf-8"))
            except UnicodeDecodeError as e:
                errors.append(
                    RecordError(
                        record + i,
                        f"invalid UTF-8 at byte {e.start + 1} of the value "
                        f"(0x{value[e.start]:02x}); column {self.column.name!r} is VARCHAR "
                        "and takes UTF-8 text",
                        clip(value),
                        lines[i],
                    )
                )
        return pa.array(good, pa.string()), errors

    def _table(self, values: pa.Array) -> pa.Table:
        import pyarrow as pa

        data = pa.table({self.column.name: values})
        return conform(data, self.table, self.table.arrow_schema())
