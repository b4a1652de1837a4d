"""``json``: newline-delimited JSON records or JSON arrays, decoded with pyarrow.

Records. With ``lines: single`` a record is one non-blank line. With ``lines: multiple``
(the default) a record may span lines (pretty-printed JSON): it runs until its braces
and brackets balance. A record that never balances (a broken record) ends where the
next line starts with ``{`` in its first column (where top-level records of
pretty-printed and one-per-line JSON start) or at the end of the object, and is one dead
letter; the records around it still land. Blank lines are not records. Record numbers
count records; a dead letter's ``line`` is the physical line of the object where its
record starts (for ``array: true``, where the array element starts).

Each record must be one UTF-8 JSON object; values follow the rule of :mod:`._conform`.
Fields the table lacks are ignored, or read (their types inferred by pyarrow) when the
table's ``schema_evolution`` fails on them, rescues them or adds them
(:class:`._conform.Evolution`). Under ``rescue`` a record whose values do not all fit is
parsed again alone, and the values that do not fit go to ``_rescued_data``.

Changes (:mod:`airflow_connectors.changes`). ``update_format: insert_delete`` (Feldera's
default): ``{"insert": {...}}`` is an upsert, ``{"delete": {...}}`` a delete of the key
it gives, ``{"update": {...}}`` a partial update whose ``__set`` lists the table's
columns the object gives (a field given as null is set to null; one left out keeps its
value); one change per record. A block of inserts only decodes as it always did, without
an ``__op`` column (conform gives a keyed table's rows ``__op`` upsert); a block holding a
delete or an update gets ``__op`` (and ``__set``). Into a table without a primary key a
delete or update is that record's dead letter. ``update_format: debezium`` reads
Debezium's change events (:mod:`._debezium`); ``update_format: raw`` with
``operation_column`` reads rows naming their operation (:mod:`._changes`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from airflow_connectors.formats._changes import (
    OperationConfig,
    apply_operation_column,
    check_operation_column,
)
from airflow_connectors.formats._conform import coerce, conform_evolving, mismatch
from airflow_connectors.formats._debezium import DebeziumEvents
from airflow_connectors.formats.base import (
    DEFAULT_BLOCK_BYTES,
    MAX_RAW_TEXT,
    Decoded,
    Format,
    NewFields,
    RecordError,
    RowError,
    _message,
    buffered,
    clip,
    count_newlines,
    isolate,
    read_block_size,
    text_start,
)
from airflow_connectors.formats.inference import InferredFields, SchemaInferenceError
from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.models import RESCUED_DATA
from airflow_connectors.spec.types import SqlType

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.spec.models import ColumnSpec, TableSpec

_TEXT_PARSED = ("DATE", "TIME", "TIMESTAMP")  # JSON has no such types: read as strings


def _parsed_by_reader(t: pa.DataType) -> bool:
    """A naive microsecond TIMESTAMP is parsed by pyarrow's JSON reader itself: it takes
    and refuses the same strings as the text rule (:func:`~._conform.parse_temporal`,
    a zone offset converted to UTC), without a string column built and cast again."""
    import pyarrow as pa

    return pa.types.is_timestamp(t) and t.tz is None and t.unit == "us"


#: Blocks of ``array: true`` objects are smaller: an array is often one large object.
ARRAY_BLOCK_BYTES = 1 << 20


class JsonConfig(OperationConfig):
    """Feldera's JSON parser: one JSON object per record, fields matched to columns by
    name."""

    update_format: Literal["raw", "insert_delete", "debezium"] = Field(
        default="insert_delete",
        description="Shape of a record. 'raw': the row object itself, {\"id\": 1} (an "
        "upsert; see operation_column for rows that name their operation). "
        '\'insert_delete\' (Feldera\'s default): {"insert": {...}}, {"delete": {...}} '
        '(the key\'s row goes) or {"update": {...}} (a partial update: the fields given, '
        "null included, are set; the key must be given). 'debezium': Debezium's change "
        "events (op c, r, u, d, t; with or without the JsonConverter's schema wrapper). "
        "Deletes and updates need a table with a primary_key; into a table without one "
        "they are dead letters.",
    )
    json_flavor: Literal[
        "default", "debezium_postgres", "debezium_mysql", "kafka_connect_json_converter"
    ] = Field(
        default="default",
        description="How values are encoded (update_format: debezium only). 'default': "
        "plain JSON values. 'debezium_postgres' / 'debezium_mysql': the Debezium "
        "connector's default encodings where an event carries no schema (dates as days, "
        "times and timestamps as epoch micro- or milliseconds, decimals as base64). "
        '\'kafka_connect_json_converter\': events wrapped as {"schema", "payload"}, '
        "whose schema says how each value is encoded (recognised under every flavor).",
    )
    array: bool = Field(
        default=False,
        description="true: each file (object) is one JSON array whose elements are the "
        "records; false: records follow one another.",
    )
    lines: Literal["multiple", "single"] = Field(
        default="multiple",
        description="'single': one record per line (NDJSON). 'multiple' (default): a "
        "record may span lines (pretty-printed JSON) and ends where its braces balance.",
    )

    @model_validator(mode="after")
    def _fits_update_format(self) -> JsonConfig:
        if self.json_flavor != "default" and self.update_format != "debezium":
            raise ValueError(
                f"json_flavor {self.json_flavor} applies to update_format: debezium; use "
                "json_flavor: default (or leave it out) with update_format "
                f"{self.update_format}"
            )
        if self.operation_column is not None and self.update_format != "raw":
            raise ValueError(
                f"operation_column applies to update_format: raw (rows naming their "
                f"operation); update_format {self.update_format} records say their "
                "operation themselves"
            )
        return self


@dataclass(frozen=True)
class _Record:
    start: int  # byte span of the record in its block, without the line end
    end: int
    line: int  # 1-based line of the block where the record starts
    open: bool = False  # its braces never balanced before the block ended


class JsonFormat(Format):
    """The ``json`` format: one JSON object per record (lines or an array); the record
    rules are in the module docstring."""

    name = "json"
    Config = JsonConfig
    config: JsonConfig
    infers_schema = True

    def __init__(self, config: StrictConfig, table: object) -> None:
        super().__init__(config, table)  # type: ignore[arg-type]
        import pyarrow as pa

        self.schema = self.table.arrow_schema()
        self.fields = {
            c.name: pa.field(c.name, pa.string())
            if c.type.kind in _TEXT_PARSED and not _parsed_by_reader(f.type)
            else f.with_nullable(True)
            for c, f in zip(self.table.columns, self.schema, strict=True)
            # _rescued_data is made, not read: a field of that name is an unknown one.
            if c.name != RESCUED_DATA or not self.evolution.rescues
        }
        self.read_schema = self._wrap(list(self.fields.values()))
        self.block_bytes = DEFAULT_BLOCK_BYTES
        self.debezium: DebeziumEvents | None = None
        if self.config.update_format == "debezium":
            self.debezium = DebeziumEvents(
                self.table,
                self.config.json_flavor,
                extras=self.evolution.detects,
                skip={c for c in self.table.column_names if c not in self.fields},
            )

    def _wrap(self, fields: list[pa.Field]) -> pa.Schema:
        import pyarrow as pa

        if self.config.update_format == "insert_delete":
            row = pa.struct(fields)
            return pa.schema([("insert", row), ("delete", row), ("update", row)])
        if self.config.operation_column is not None:
            fields = [*fields, pa.field(self.config.operation_column, pa.string())]
        return pa.schema(fields)

    @classmethod
    def check_table(cls, config: StrictConfig, table: TableSpec) -> None:
        """An ``operation_column`` needs a table with a primary key."""
        assert isinstance(config, JsonConfig)
        check_operation_column(config, table)

    @classmethod
    def infer_fields(
        cls, config: StrictConfig, data: bytes, key: str, fields: InferredFields
    ) -> None:
        """The records' top-level fields in order of first appearance (``insert`` of
        ``update_format: insert_delete``, the elements of ``array: true``): true/false
        -> BOOLEAN; integers -> BIGINT (beyond BIGINT: DECIMAL(38, 0)); numbers with a
        fraction or exponent (also mixed with integers) -> DOUBLE; strings -> DATE when
        every value is ``YYYY-MM-DD``, TIMESTAMP when every value is an ISO 8601
        date-time, else VARCHAR. A broken record is left out (it is a dead letter)."""
        assert isinstance(config, JsonConfig)
        insert_delete = config.update_format == "insert_delete"
        debezium = config.update_format == "debezium"
        for rec in _sample_records(config, data, key, fields.where):
            if insert_delete and isinstance(rec, dict):
                rec = rec.get("insert")
                if rec is None:
                    continue  # a delete: its fields are the inserted ones
            if debezium and isinstance(rec, dict):
                if "op" not in rec and isinstance(rec.get("payload"), dict):
                    rec = rec["payload"]  # the JsonConverter's schema wrapper
                rec = rec.get("after")
                if rec is None:
                    continue  # a delete or truncate: its fields are the created ones
            if config.operation_column is not None and isinstance(rec, dict):
                rec = {k: v for k, v in rec.items() if k != config.operation_column}
            if not isinstance(rec, dict):
                continue  # not a record: the format makes it a dead letter
            for name, value in rec.items():
                if isinstance(value, str):
                    fields.add_string(name, value, key)  # typed once all are seen
                    continue
                t, what = _json_type(value)
                fields.add(name, t, key, what)

    @property
    def line_oriented(self) -> bool:
        """True unless ``array: true``: an array is read from the object's start (its
        elements are records, not lines; byte ranges cannot split it)."""
        return not self.config.array

    def decode(
        self,
        chunks: Iterator[bytes],
        *,
        final: bool,
        first_record: int,
        at_start: bool,
        first_line: int | None = None,
    ) -> Iterator[Decoded]:
        """Decodes records with pyarrow; the elements of an ``array: true`` object are
        cut out as its bytes arrive (:class:`_ArrayStream`), otherwise records are cut
        at line ends and braces. One bad record is one dead letter."""
        line = first_line if first_line is not None else (1 if at_start else None)
        if self.config.array:
            yield from _ArrayStream(self, first_record, line, at_start=at_start).decode(
                chunks, final=final
            )
            return
        record = first_record

        def step(buf: bytes, at_end: bool) -> tuple[Decoded | None, int]:
            nonlocal record, line
            more = not (at_end and final)
            cut = buf.rfind(b"\n") + 1 if more else len(buf)
            if not cut:
                return None, 0
            out, used, newlines = self._decode_block(buf[:cut], record, line, more)
            if used:
                record += out.records
                if line is not None:
                    if newlines is None:
                        newlines = count_newlines(buf, 0, used)
                    line += newlines
                out.newlines = newlines
            return out, used

        steps = text_start(step, self.name, self.schema.empty_table) if at_start else step
        yield from buffered(chunks, steps, block_bytes=self.block_bytes)

    def _decode_block(
        self, block: bytes, record: int, line: int | None, more: bool
    ) -> tuple[Decoded, int, int | None]:
        """The block's records decoded, the bytes used, and the line ends in them when
        counted on the way (else None)."""
        # Invalid UTF-8, or a bare `null` record first (pyarrow crashes on one at the
        # start of a block), go record by record, each checked before pyarrow sees it;
        # so does a block where pyarrow read a bare `null` as a row of nulls.
        if not _suspect(block):
            table: pa.Table | None
            try:
                table = self._decode(block, multiline=False)
            except Exception:
                table = None
                if self.config.lines == "multiple":
                    try:  # records spread over several lines (pretty-printed)?
                        spread = self._decode(block, multiline=True)
                        if not self._null_record(block, spread):
                            return Decoded(spread, [], spread.num_rows), len(block), None
                    except Exception:
                        pass
            if table is not None and not self._null_record(block, table):
                # lines: single takes one JSON value per line: where rows and lines differ
                # (a line of several values, or blank lines) records are counted as the
                # slow path does. (lines: multiple reads a stream of values, as Feldera.)
                if self.config.lines != "single":
                    return Decoded(table, [], table.num_rows), len(block), None
                newlines = count_newlines(block)
                if table.num_rows == newlines + (not block.endswith(b"\n")):
                    return Decoded(table, [], table.num_rows), len(block), newlines
        records = self._split(block)
        used = len(block)
        if more and records and records[-1].open:
            # The last record may go on in bytes still to come.
            used = records[-1].start
            records = records[:-1]
        # A CRLF line end is a line end: its \r is no part of the record's raw text.
        texts = [block[r.start : r.end].removesuffix(b"\r") for r in records]
        lines = [None if line is None else line + r.line - 1 for r in records]
        tables, errors = isolate(texts, self._decode_checked, record, clip, lines)
        return Decoded(self._concat(tables), errors, len(records)), used, None

    def _null_record(self, block: bytes, table: pa.Table) -> bool:
        """Whether ``block``, read as ``table``, holds a record that is a bare ``null``
        (pyarrow reads one as a row of nulls). A raw block's table without a row of
        nulls has none (one column without nulls says so at once): the block's text is
        searched only when such a row (a null, or an empty object) is there."""
        if b"null" not in block:
            return False
        plain = (
            self.debezium is None
            and self.config.update_format == "raw"
            and self.config.operation_column is None
        )
        if plain and not _row_of_nulls(table):
            return False
        return _BARE_NULL.search(block) is not None

    def _split(self, block: bytes) -> list[_Record]:
        """The records of ``block``: non-blank lines, or (``lines: multiple``) runs of
        lines whose braces and brackets balance."""
        records: list[_Record] = []
        multiple = self.config.lines == "multiple"
        start = depth = 0
        first = 0  # line where the open record starts; 0: none open
        pos, line, n = 0, 1, len(block)
        while pos < n:
            eol = block.find(b"\n", pos)
            eol = n if eol < 0 else eol
            text = block[pos:eol]
            if first and text[:1] == b"{":  # a new record: the open one was broken
                records.append(_Record(start, pos - 1, first))
                first = 0
            if not first and text.strip():
                start, first, depth = pos, line, 0
            if first:
                depth += _depth(text) if multiple else 0
                if depth <= 0:
                    records.append(_Record(start, eol, first))
                    first = 0
            pos, line = eol + 1, line + 1
        if first:
            records.append(_Record(start, n, first, open=True))
        return records

    def _concat(self, tables: list[pa.Table]) -> pa.Table:
        import pyarrow as pa

        return pa.concat_tables(tables) if tables else self.schema.empty_table()

    def _decode_checked(self, records: Sequence[bytes]) -> pa.Table:
        for r in records:
            _check_record(r)
        multiline = self.config.lines == "multiple"
        try:
            table = self._decode(b"\n".join(records), multiline=multiline)
            if not multiline and table.num_rows != len(records):  # a line of several values
                raise RowError(
                    f"{table.num_rows} JSON objects on one line; lines: single takes one "
                    "object per line"
                    if len(records) == 1
                    else "a line holds several JSON objects"
                )
            return table
        except (RowError, NewFields):
            raise
        except Exception as e:
            if len(records) == 1:
                rescued = self._rescue_record(records[0])
                if rescued is not None:
                    return rescued
                # name the column that does not fit
                raise RowError(self._diagnose(records[0], e)) from e
            raise

    def _rescue_record(self, record: bytes) -> pa.Table | None:
        """Under ``schema_evolution: rescue``: the record as a row whose values that do
        not fit their column are NULL and in ``_rescued_data``; None when that does not
        help (invalid JSON, not an object, no value that does not fit, other modes)."""
        if not self.evolution.rescues or self.debezium is not None:
            return None
        try:
            obj = json.loads(record, parse_int=_Number, parse_float=_Number, parse_constant=_Number)
        except (ValueError, RecursionError):
            return None
        insert = self.config.update_format == "insert_delete"
        row = obj.get("insert") if insert and isinstance(obj, dict) else obj
        if not isinstance(row, dict):
            return None
        moved: dict[str, object] = {}
        for col in self.table.columns:
            value = row.get(col.name)
            # A NOT NULL column's misfit stays a parse error: the row would lack it.
            kept = value is None or not col.nullable or col.name not in self.fields
            if not kept and not self._fits(col, value):
                moved[col.name] = _plain(row.pop(col.name))
        if not moved:
            return None
        try:
            text = _dump(obj).encode()
            raw = self._read(text, multiline=True, schema=self.read_schema)
            if insert:
                raw = self._insert_delete(raw, text, multiline=True)
            raw = apply_operation_column(raw, self.config)
            return conform_evolving(raw, self.table, self.schema, self.evolution, rescued=[moved])
        except Exception:
            return None  # something else is wrong with it: diagnosed as a parse error

    def _decode(self, data: bytes, *, multiline: bool, schema: pa.Schema | None = None) -> pa.Table:
        if self.debezium is not None:
            return conform_evolving(
                self.debezium.rows(data), self.table, self.schema, self.evolution
            )
        raw = self._read(data, multiline=multiline, schema=schema or self.read_schema)
        if self.config.update_format == "insert_delete":
            raw = self._insert_delete(raw, data, multiline=multiline)
        elif self.config.operation_column is not None:
            raw = apply_operation_column(raw, self.config)
        return conform_evolving(raw, self.table, self.schema, self.evolution)

    def _insert_delete(self, raw: pa.Table, data: bytes, *, multiline: bool) -> pa.Table:
        """The rows of ``{"insert"|"delete"|"update": {...}}`` records (``raw`` as read
        from ``data``). A block of inserts only is their rows, as it always was (the
        cheap path; conform makes them upserts of a keyed table). A block with a delete
        or an update also gets :data:`~airflow_connectors.changes.OP`, and
        :data:`~airflow_connectors.changes.SET` naming, per update, the table's columns
        its object gives (null included: a field given as null is set to null; a field
        left out keeps its value), read again from the update records' text because a
        reader cannot tell a null from a missing field."""
        import pyarrow as pa

        inserts = raw.column("insert")
        n = raw.num_rows
        if not inserts.null_count and raw["delete"].null_count == raw["update"].null_count == n:
            return pa.Table.from_struct_array(inserts.combine_chunks())
        table, updates = _changes_of(raw)
        if not updates:
            return table
        from airflow_connectors.changes import SET, set_type

        texts = [data] if raw.num_rows == 1 else self._record_texts(data, multiline)
        if len(texts) != raw.num_rows:  # cannot line records up with rows: go one by one
            raise RowError(f"{raw.num_rows} rows from {len(texts)} records")
        names = [n for n in self.table.column_names if n in self.fields]
        sets: list[list[str] | None] = [None] * raw.num_rows
        for i in updates:
            given = json.loads(texts[i]).get("update")
            sets[i] = [n for n in names if n in given]
        return table.append_column(pa.field(SET, set_type()), pa.array(sets, set_type()))

    def _record_texts(self, data: bytes, multiline: bool) -> list[bytes]:
        if not multiline:
            return [line for line in data.split(b"\n") if line.strip()]
        return [data[r.start : r.end] for r in self._split(data)]

    def _read(self, data: bytes, *, multiline: bool, schema: pa.Schema) -> pa.Table:
        import pyarrow as pa
        import pyarrow.json as pj

        detects = self.evolution.detects
        parse = pj.ParseOptions(
            explicit_schema=schema,
            # Unknown fields are read only when schema_evolution does something
            # with them (fail, rescue, add): `none` ignores them, as always.
            unexpected_field_behavior="infer" if detects else "ignore",
            newlines_in_values=multiline,
        )
        whole = max(len(data), 1 << 20)
        part = read_block_size(len(data))
        if part < whole and not detects:
            # Parts of the block on pyarrow's threads: a task alone on its cores (a
            # batch's last wave) uses them all. Not when unknown fields are inferred
            # (each part would infer their types alone). A record longer than a part
            # fails the parts' read: the block is read again whole, as it always was,
            # and what fails then is the records' error.
            try:
                return pj.read_json(
                    pa.BufferReader(data),
                    read_options=pj.ReadOptions(use_threads=True, block_size=part),
                    parse_options=parse,
                )
            except pa.ArrowInvalid:
                pass
        return pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=whole),
            parse_options=parse,
        )

    def _diagnose(self, record: bytes, error: Exception) -> str:
        """Why ``record`` failed, naming the column: pyarrow's reader says "couldn't
        parse:300" or "changed from number to string" without saying where."""
        try:
            obj = json.loads(record, parse_int=_Number, parse_float=_Number, parse_constant=_Number)
        except (ValueError, RecursionError) as e:
            where = (
                f" (line {e.lineno}, column {e.colno} of the record)"
                if isinstance(e, json.JSONDecodeError)
                else ""
            )
            return f"invalid JSON: {getattr(e, 'msg', e)}{where}"
        row = (
            next((obj[k] for k in ("insert", "delete", "update") if obj.get(k) is not None), None)
            if self.config.update_format == "insert_delete" and isinstance(obj, dict)
            else obj
        )
        if self.debezium is not None:
            return _message(error)
        if isinstance(row, dict):
            for col in self.table.columns:
                if col.name in row and not self._fits(col, row[col.name]):
                    return mismatch(col, _show(row[col.name]))
        elif self.config.update_format == "insert_delete" and isinstance(obj, dict):
            for key in ("insert", "delete", "update"):
                if obj.get(key) is not None and not isinstance(obj[key], dict):
                    return f'expected {{"{key}": {{...}}}} with a row object, got {_show(obj[key])}'
        return _message(error)

    def _fits(self, col: ColumnSpec, value: object) -> bool:
        """Whether ``value`` alone decodes into ``col``: the same pyarrow reader and rule."""
        text = f"{{{json.dumps(col.name)}: {_dump(value)}}}".encode()
        try:
            raw = self._read(text, multiline=True, schema=self._column_schema(col))
            coerce(raw.column(0), col, self.schema.field(col.name).type)
        except Exception:
            return False
        return True

    def _column_schema(self, col: ColumnSpec) -> pa.Schema:
        import pyarrow as pa

        return pa.schema([self.fields[col.name]])


class _Number(str):
    """A JSON number as written (``300``, ``1e400``, ``NaN``), for error messages."""


def _dump(value: object) -> str:
    """``value`` (parsed with :class:`_Number` numbers) as JSON text, numbers as written."""
    if isinstance(value, _Number):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_dump(v) for v in value) + "]"
    return json.dumps(value)


def _plain(value: object) -> object:
    """A value parsed with :class:`_Number` numbers, numbers as Python numbers (a
    number Python cannot hold stays its text)."""
    if isinstance(value, _Number):
        try:
            return json.loads(value)
        except ValueError:
            return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _show(value: object) -> str:
    if isinstance(value, _Number):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {json.dumps(value)[:100]}"
    if isinstance(value, bool):
        return f"the boolean {json.dumps(value)}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return json.dumps(value)


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"?')  # an unterminated string runs to the line's end


def _depth(line: bytes) -> int:
    """How much ``line`` opens (+) or closes (-) objects and arrays, outside strings."""
    s = _STRING.sub(b"", line) if b'"' in line else line
    return s.count(b"{") + s.count(b"[") - s.count(b"}") - s.count(b"]")


_CHANGE_KEYS = ("insert", "delete", "update")


def _changes_of(raw: pa.Table) -> tuple[pa.Table, list[int]]:
    """The rows of a block of insert_delete records holding a delete or an update: each
    record's one object, with :data:`~airflow_connectors.changes.OP`; and the indexes of
    the updates."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from airflow_connectors.changes import DELETE, OP, UPDATE, UPSERT, op_type

    parts = [raw.column(k).combine_chunks() for k in _CHANGE_KEYS]
    given = [pc.cast(pc.is_valid(p), pa.int8()) for p in parts]
    count = pc.add(pc.add(given[0], given[1]), given[2])
    for bad, message in (
        (
            pc.equal(count, 0),
            'expected {"insert": {...}}, {"delete": {...}} or {"update": {...}} '
            "(update_format insert_delete); for bare row objects set format config "
            '"update_format": "raw"',
        ),
        (
            pc.greater(count, 1),
            "a record holds more than one of insert, delete and update; send one change per record",
        ),
    ):
        if pc.any(bad).as_py():
            raise RowError(message, pc.indices_nonzero(bad)[0].as_py())
    op = pc.if_else(
        pc.is_valid(parts[0]),
        pa.scalar(UPSERT, op_type()),
        pc.if_else(
            pc.is_valid(parts[1]), pa.scalar(DELETE, op_type()), pa.scalar(UPDATE, op_type())
        ),
    )
    # Each field: the value of whichever object the record gives (flatten() nulls the
    # fields of the objects a record does not give).
    fields: dict[str, list[pa.Array]] = {}
    for part in parts:
        for fld, values in zip(part.type, part.flatten(), strict=True):
            fields.setdefault(fld.name, []).append(values)
    columns: dict[str, pa.Array] = {}
    for name, arrays in fields.items():
        typed = [a.type for a in arrays if not pa.types.is_null(a.type)]
        if typed and any(t != typed[0] for t in typed):
            raise RowError(
                f"field {name!r} holds values of different kinds in insert, delete and "
                "update records"
            )
        if typed:
            arrays = [a.cast(typed[0]) if pa.types.is_null(a.type) else a for a in arrays]
        columns[name] = pc.coalesce(*arrays) if len(arrays) > 1 else arrays[0]
    table = pa.table(columns) if columns else pa.table({"__none": pa.nulls(raw.num_rows)})
    table = table.append_column(pa.field(OP, op_type()), op)
    updates = pc.indices_nonzero(pc.equal(op, UPDATE)).to_pylist()
    return table, updates


#: A line that is a bare ``null``, after a line end: a literal first character lets the
#: regex engine skip to line ends (a ``(?m)^`` pattern is tried at every byte, 15x
#: slower).
_BARE_NULL = re.compile(rb"\n[ \t\r]*null[ \t\r]*(?:\n|$)")
#: A bare ``null`` as the block's first record (blank lines may come before it).
_FIRST_NULL = re.compile(rb"[ \t\r\n]*null[ \t\r]*(?:\n|$)")


def _suspect(block: bytes) -> bool:
    """Whether a block needs the checked record-by-record path before pyarrow reads it:
    invalid UTF-8 (pyarrow would store the bytes as they are) or a bare ``null`` as its
    first record (pyarrow crashes on one)."""
    return not _utf8_block(block) or _FIRST_NULL.match(block) is not None


def _utf8_block(block: bytes) -> bool:
    """Whether ``block`` is valid UTF-8, checked by Arrow's validator over the bytes in
    place (3.7x faster than decoding them to a str)."""
    import pyarrow as pa

    offsets = pa.array([0, len(block)], pa.int64()).buffers()[1]
    data = pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(block)])
    try:
        data.cast(pa.large_string())
    except pa.ArrowInvalid:
        return False
    return True


def _row_of_nulls(table: pa.Table) -> bool:
    """Whether some row of ``table`` is null in every column."""
    import pyarrow.compute as pc

    if not table.num_rows:
        return False
    if not table.num_columns or any(c.null_count == 0 for c in table.columns):
        return not table.num_columns
    nulls = table.column(0).is_null()
    for c in table.columns[1:]:
        nulls = pc.and_(nulls, c.is_null())
    return bool(pc.any(nulls).as_py())


_LBRACE = ord("{")


def _utf8(data: bytes) -> bool:
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


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
        hint = (
            " (for an object that is one JSON array of records, set format config array: true)"
            if head == b"["
            else ""
        )
        raise RowError(
            f"expected a JSON object per record, got {kind.get(head, 'a number or other value')}"
            + hint
        )


class _ArrayStream:
    """Decodes ``array: true`` objects a block at a time: the scanner of
    :mod:`._json_array` cuts complete elements out of each block and they are decoded in
    bulk as records, so memory stays bounded by the block plus the largest element.

    Offsets advance past each complete element, so a read may resume after one. A
    syntax error between elements (a missing comma, an unclosed array, a value that is
    not an array) makes the rest of the object one dead letter naming the byte where it
    is; the elements before it land."""

    def __init__(
        self, fmt: JsonFormat, first_record: int, line: int | None, *, at_start: bool
    ) -> None:
        from airflow_connectors.formats import _json_array

        self.fmt = fmt
        self.record = first_record
        self.line = line
        self.at_start = at_start
        self.state = _json_array.OUT if at_start else _json_array.RESUME
        self.offset = 0  # bytes of the read consumed before the current buffer
        self.failed = False

    def decode(self, chunks: Iterator[bytes], *, final: bool) -> Iterator[Decoded]:
        """The records of the arrays in ``chunks``, block by block."""
        fmt = self.fmt
        self.final = final

        def step(buf: bytes, at_end: bool) -> tuple[Decoded | None, int]:
            out, used = self._step(buf, at_end)
            if used:
                self.offset += used
            return out, used

        steps = text_start(step, fmt.name, fmt.schema.empty_table) if self.at_start else step
        yield from buffered(chunks, steps, block_bytes=min(fmt.block_bytes, ARRAY_BLOCK_BYTES))

    def _step(self, buf: bytes, at_end: bool) -> tuple[Decoded | None, int]:
        from airflow_connectors.formats import _json_array

        if self.failed:  # the rest of an object past a syntax error
            return Decoded(self.fmt.schema.empty_table(), [], 0), len(buf)
        sc = _json_array.scan(buf, self.state, at_end=at_end and self.final)
        if not sc.used and not sc.spans and sc.error is None:
            return None, 0
        self.state = sc.state
        lines = self._lines(buf, [s for s, _ in sc.spans] + ([sc.error[0]] if sc.error else []))
        table, errors = self._elements(buf, sc.spans, lines)
        count = len(sc.spans)
        used = sc.used
        if sc.error is not None:
            pos, msg = sc.error
            at = f"byte {self.offset + pos + 1}" + ("" if self.at_start else " of the part read")
            errors.append(
                RecordError(
                    self.record + count,
                    f"invalid JSON array at {at}: {msg}"
                    + ("; the rest of the object is not read" if pos < len(buf) else ""),
                    clip(buf[pos : pos + MAX_RAW_TEXT + 1]),
                    lines[-1],
                )
            )
            count += 1
            used = len(buf)
            self.failed = True
        if self.line is not None:
            self.line += count_newlines(buf, 0, used)
        self.record += count
        return Decoded(table, errors, count), used

    def _lines(self, buf: bytes, starts: list[int]) -> list[int | None]:
        """The line each of ``starts`` (ascending positions in ``buf``) is on."""
        if self.line is None:
            return [None] * len(starts)
        out: list[int | None] = []
        line, at = self.line, 0
        for s in starts:
            line += buf.count(b"\n", at, s)
            at = s
            out.append(line)
        return out

    def _elements(
        self, buf: bytes, spans: list[tuple[int, int]], lines: list[int | None]
    ) -> tuple[pa.Table, list[RecordError]]:
        fmt = self.fmt
        if not spans:
            return fmt.schema.empty_table(), []
        if all(buf[s] == _LBRACE for s, _ in spans):
            data = b"\n".join([buf[s:e] for s, e in spans])
            if _utf8(data):
                try:
                    table = fmt._decode(data, multiline=True)
                    if table.num_rows == len(spans):
                        return table, []
                except Exception:
                    pass
        records = [buf[s:e] for s, e in spans]
        tables, errors = isolate(
            records, self._decode_checked, self.record, clip, lines[: len(spans)]
        )
        return fmt._concat(tables), errors

    def _decode_checked(self, records: Sequence[bytes]) -> pa.Table:
        fmt = self.fmt
        for r in records:
            _check_record(r)
        data = b"\n".join(records)
        try:
            table = fmt._decode(data, multiline=True)
        except NewFields:
            raise
        except Exception as e:
            if len(records) == 1:
                rescued = fmt._rescue_record(records[0])
                if rescued is not None:
                    return rescued
                # name the column that does not fit
                raise RowError(fmt._diagnose(records[0], e)) from e
            raise
        if table.num_rows != len(records):
            raise RowError(f"{table.num_rows} JSON values in one array element")
        return table


# --- schema inference -------------------------------------------------------------------

_BIGINT = (-(2**63), 2**63 - 1)


def _sample_records(config: JsonConfig, data: bytes, key: str, where: str) -> Iterator[Any]:
    """The records of a JSON object's bytes (a cut last record is left out)."""
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    if config.array:
        try:
            doc = json.loads(text)
        except ValueError:
            # A cut array (the byte bound): the complete elements before the cut.
            doc = _array_prefix(text)
        if not isinstance(doc, list):
            raise SchemaInferenceError(
                f"{where}: {key} is not a JSON array but the format says array: true"
            )
        yield from doc
        return
    decoder = json.JSONDecoder()
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos >= n:
            return
        try:
            rec, pos = decoder.raw_decode(text, pos)
        except ValueError:
            # A broken record: skip to the next line (the format makes it a dead letter).
            nl = text.find("\n", pos)
            if nl < 0:
                return
            pos = nl + 1
            continue
        yield rec


def _array_prefix(text: str) -> list[Any]:
    decoder = json.JSONDecoder()
    out: list[Any] = []
    pos = text.find("[") + 1
    while pos > 0:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            rec, pos = decoder.raw_decode(text, pos)
        except ValueError:
            break
        out.append(rec)
    return out


def _json_type(value: Any) -> tuple[SqlType | None, str]:
    if value is None:
        return None, ""
    if isinstance(value, bool):
        return SqlType("BOOLEAN"), ""
    if isinstance(value, int):
        if _BIGINT[0] <= value <= _BIGINT[1]:
            return SqlType("BIGINT"), ""
        if len(str(abs(value))) <= 38:
            return SqlType("DECIMAL", 38, 0), ""
        return None, "an integer of more than 38 digits"
    if isinstance(value, float):
        return SqlType("DOUBLE"), ""
    return None, "a JSON object" if isinstance(value, dict) else "a JSON array"
