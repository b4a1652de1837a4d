"""``json``: newline-delimited JSON records or JSON arrays, decoded with pyarrow."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Literal

from airflow_connectors.formats.base import (
    Decoded,
    Format,
    RecordError,
    RowError,
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


class JsonConfig(StrictConfig):
    #: ``raw``: each record is a bare row object. ``insert_delete`` (Feldera's default):
    #: ``{"insert": {...}}``; deletes and updates need a keyed sink and are reported as
    #: errors by the append-only Parquet sink.
    update_format: Literal["raw", "insert_delete"] = "insert_delete"
    #: Each message (here: the whole object) is a JSON array of records.
    array: bool = False
    #: ``single``: one record per line (NDJSON). ``multiple``: records may span lines.
    lines: Literal["multiple", "single"] = "multiple"


class JsonFormat(Format):
    name = "json"
    Config = JsonConfig
    config: JsonConfig

    def __init__(self, config: StrictConfig, table: object) -> None:
        super().__init__(config, table)  # type: ignore[arg-type]
        import pyarrow as pa

        self.schema = target_schema(self.table)
        # pyarrow's JSON reader cannot parse DATE and TIME strings: read them as strings
        # and let conform() cast them.
        fields = [
            pa.field(f.name, pa.string())
            if pa.types.is_date(f.type) or pa.types.is_time(f.type)
            else f.with_nullable(True)
            for f in self.schema
        ]
        row = pa.struct(fields)
        if self.config.update_format == "insert_delete":
            self.read_schema = pa.schema([("insert", row), ("delete", row), ("update", row)])
        else:
            self.read_schema = pa.schema(fields)

    @property
    def line_oriented(self) -> bool:
        return not self.config.array

    def decode(
        self, chunks: Iterator[bytes], *, final: bool, first_record: int, at_start: bool
    ) -> Iterator[Decoded]:
        if self.config.array:
            data = b"".join(chunks)
            try:
                records = [json.dumps(r).encode() for r in _array_records(data)]
            except RowError as e:
                yield Decoded(
                    self.schema.empty_table(),
                    [RecordError(first_record, str(e), clip(data))],
                    1,
                    len(data),
                )
                return
            yield self._decode_records(records, first_record, len(data))
            return
        record = first_record
        for block, consumed in line_blocks(chunks, final=final):
            if _suspect(block):
                # Invalid UTF-8, or a bare `null` record (pyarrow crashes on one at the
                # start of a block): record by record, each checked before pyarrow sees it.
                out = self._decode_records(split_records(block), record, consumed)
            else:
                try:
                    table = self._decode(block, multiline=False)
                    out = Decoded(table, [], table.num_rows, consumed)
                except Exception:
                    out = self._slow(block, record, consumed)
            record += out.records
            yield out

    def _slow(self, block: bytes, record: int, consumed: int) -> Decoded:
        if self.config.lines == "multiple":
            try:  # records spread over several lines (pretty-printed)?
                table = self._decode(block, multiline=True)
                return Decoded(table, [], table.num_rows, consumed)
            except Exception:
                pass
        return self._decode_records(split_records(block), record, consumed)

    def _decode_records(self, records: Sequence[bytes], first: int, consumed: int) -> Decoded:
        import pyarrow as pa

        def decode(rs: Sequence[bytes]) -> pa.Table:
            for r in rs:
                _check_record(r)
            return self._decode(b"\n".join(rs), multiline=False)

        tables, errors = isolate(records, decode, first)
        table = pa.concat_tables(tables) if tables else self.schema.empty_table()
        return Decoded(table, errors, len(records), consumed)

    def _decode(self, data: bytes, *, multiline: bool) -> pa.Table:
        import pyarrow as pa
        import pyarrow.json as pj

        raw = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(len(data), 1 << 20)),
            parse_options=pj.ParseOptions(
                explicit_schema=self.read_schema,
                unexpected_field_behavior="ignore",
                newlines_in_values=multiline,
            ),
        )
        if self.config.update_format == "insert_delete":
            raw = _inserts(raw)
        return conform(raw, self.table, self.schema)


def _inserts(raw: pa.Table) -> pa.Table:
    import pyarrow as pa

    inserts = raw.column("insert")
    if inserts.null_count:
        if (
            raw.column("delete").null_count < raw.num_rows
            or raw.column("update").null_count < raw.num_rows
        ):
            raise RowError(
                "'delete' and 'update' records need a keyed sink; this table's sink is "
                "append-only (send inserts only)"
            )
        raise RowError(
            'expected {"insert": {...}} (update_format insert_delete); for bare row '
            'objects set format config "update_format": "raw"'
        )
    return pa.Table.from_struct_array(inserts.combine_chunks())


_BARE_NULL = re.compile(rb"(?m)^[ \t\r]*null[ \t\r]*$")


def _suspect(block: bytes) -> bool:
    """Whether a block needs the checked record-by-record path: invalid UTF-8 (pyarrow
    would store the bytes as they are) or a line that is a bare ``null``."""
    try:
        block.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return _BARE_NULL.search(block) is not None


def _check_record(record: bytes) -> None:
    """A record must be UTF-8 text holding one JSON object."""
    try:
        record.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RowError(
            f"invalid UTF-8 at byte {e.start + 1} of the record (0x{record[e.start]:02x}); "
            "JSON text must be UTF-8"
        ) from None
    head = record.lstrip()[:1]
    if head != b"{":
        kind = {
            b"n": "null",
            b"[": "an array",
            b'"': "a string",
            b"t": "a boolean",
            b"f": "a boolean",
        }
        raise RowError(
            f"expected a JSON object per record, got {kind.get(head, 'a number or other value')}"
        )


def _array_records(data: bytes) -> list[object]:
    """Records of one or more consecutive JSON arrays."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RowError(f"invalid UTF-8 at byte {e.start + 1}; JSON text must be UTF-8") from None
    decoder = json.JSONDecoder()
    out: list[object] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return out
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise RowError(
                f"invalid JSON at character {e.pos}: {e.msg}: {clip(text[e.pos : e.pos + 200])}"
            ) from e
        if not isinstance(value, list):
            raise RowError(
                f"expected a JSON array of records (format config array: true), got {type(value).__name__}"
            )
        out.extend(value)
