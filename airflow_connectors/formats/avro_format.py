"""``avro``: Avro object container files (fastavro), or schemaless Avro records.

An object container file carries its writer schema; its records are read block by block
as the bytes arrive (an object is never held whole) and resolved to the table by field
name: a column the writer schema lacks is NULL (files written before or after a field
was added or removed land in the same table), fields the table lacks are ignored, and
values follow the one rule of :mod:`._conform` (an Avro ``int`` fits BIGINT, a ``long``
fits INT when in range, ``date``/``timestamp-*``/``decimal`` logical types become DATE,
TIMESTAMP (UTC) and DECIMAL). A record whose value does not fit is a dead letter (its
raw text is the record as JSON); bytes that are no Avro container, or a container cut
short or corrupt, fail the object as a whole, naming the byte where its block starts.

With format config ``schema`` (Feldera's option: the writer schema as JSON text) the
object holds schemaless records one after another, each after Confluent's 5-byte
header (magic byte 0 and the schema id) unless ``skip_schema_id: true``.

Records are numbered from 1 within the object; a read that starts at the object's start
with records already committed (``first_record > 1``) skips them.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from airflow_connectors.formats._changes import (
    OperationConfig,
    apply_operation_column,
    check_operation_column,
)
from airflow_connectors.formats.base import (
    Decoded,
    Format,
    NewFields,
    RecordError,
    clip,
    conform_evolving,
    isolate,
)
from airflow_connectors.formats.inference import InferredFields, SchemaInferenceError
from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.types import SqlType

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.spec.models import TableSpec

MAGIC = b"Obj\x01"
#: Records decoded into one Arrow table.
BATCH_RECORDS = 8192
_PRIMITIVE = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")


class AvroConfig(OperationConfig):
    """Feldera's Avro parser settings that apply to objects."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_by_name=True, serialize_by_alias=True
    )

    update_format: Literal["raw"] = Field(
        default="raw",
        description="'raw' (Feldera's default): each record is a row to insert.",
    )
    avro_schema: str | None = Field(
        default=None,
        alias="schema",
        description="The writer schema (JSON text) of schemaless records. Not set: each "
        "object is an Avro object container file, which carries its schema.",
    )
    skip_schema_id: bool = Field(
        default=False,
        description="With schema: the records have no Confluent header (magic byte 0 and "
        "a 4-byte schema id) before them.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_registry(cls, data: Any) -> Any:
        if isinstance(data, dict):
            asked = sorted(k for k in data if str(k).startswith("registry_"))
            if asked:
                raise ValueError(
                    f"{', '.join(asked)}: a schema registry is not supported in this "
                    "release; give the writer schema as JSON text in schema (records in "
                    "Confluent's wire format are read: the magic byte and schema id are "
                    "skipped)"
                )
        return data


class AvroError(ValueError):
    """The object is not readable as Avro (one line; the engine names the object)."""


class _Source:
    """A read-only file over an iterator of chunks, for fastavro: reads pull chunks as
    needed, so only the bytes being decoded are held."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.buf = bytearray()
        self.pos = 0  # bytes handed out so far
        self.transport_error: BaseException | None = None

    def read(self, n: int = -1) -> bytes:
        want = None if n is None or n < 0 else n
        while want is None or len(self.buf) < want:
            try:
                chunk = next(self.chunks)
            except StopIteration:
                break
            except BaseException as e:  # the transport's error: reported as it is
                self.transport_error = e
                raise
            self.buf += chunk
        take = len(self.buf) if want is None else min(want, len(self.buf))
        out = bytes(self.buf[:take])
        del self.buf[:take]
        self.pos += take
        return out

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:  # pragma: no cover - never used
        raise OSError("not seekable")


class AvroFormat(Format):
    """The ``avro`` format: see the module docstring."""

    name = "avro"
    Config = AvroConfig
    config: AvroConfig
    infers_schema = True

    def __init__(self, config: StrictConfig, table: TableSpec) -> None:
        super().__init__(config, table)
        self.schema = table.arrow_schema()
        self.parsed: Any = None
        if self.config.avro_schema is not None:
            self.parsed = _parse(self.config.avro_schema)

    @classmethod
    def infer_fields(
        cls, config: StrictConfig, data: bytes, key: str, fields: InferredFields
    ) -> None:
        """The fields of the writer schema (``schema`` of the config, else the object
        container's own), in schema order; logical types (decimal, date, time,
        timestamp) as their SQL types; a union with null as its other branch."""
        assert isinstance(config, AvroConfig)
        import fastavro

        if config.avro_schema:
            schema: Any = json.loads(config.avro_schema)
        else:
            try:
                schema = fastavro.reader(io.BytesIO(data)).writer_schema
            except Exception as e:
                raise SchemaInferenceError(
                    f"{fields.where}: cannot read the Avro schema of {key} ({e}); give the "
                    "writer schema as the format config's schema, or declare the table's columns"
                ) from None
        if not isinstance(schema, dict) or schema.get("type") != "record":
            raise SchemaInferenceError(f"{fields.where}: the Avro schema of {key} is not a record")
        for fld in schema.get("fields", []):
            t, what = _avro_type(fld.get("type"))
            fields.add(str(fld["name"]), t, key, what)

    @classmethod
    def check_table(cls, config: StrictConfig, table: TableSpec) -> None:
        """A given ``schema`` must be a valid Avro record schema; an
        ``operation_column`` needs a table with a primary key."""
        assert isinstance(config, AvroConfig)
        if config.avro_schema is not None:
            _parse(config.avro_schema)
        check_operation_column(config, table)

    def decode(
        self,
        chunks: Iterator[bytes],
        *,
        final: bool,
        first_record: int,
        at_start: bool,
        first_line: int | None = None,
    ) -> Iterator[Decoded]:
        """Records decoded a block at a time into tables of the table's schema. Not line
        oriented: a container is read from its start (its header holds the schema)."""
        if not at_start:
            raise AvroError(
                "an Avro object is read from its start (its header holds the schema); it "
                "cannot be resumed part way"
            )
        source = _Source(chunks)
        if self.parsed is not None:
            records: Iterator[dict[str, Any]] = self._schemaless(source)
            writer = self.parsed
        else:
            records, writer = self._container(source)
        columns = _Columns(
            writer,
            self.table,
            extras=self.evolution.detects,
            operation=self.config.operation_column,
        )
        if self.evolution.mode == "fail_on_new_columns" and columns.extras:
            raise NewFields([field for field, _, _ in columns.extras])
        number = 1
        batch: list[dict[str, Any]] = []
        for rec in records:
            if number >= first_record:
                batch.append(rec)
                if len(batch) >= BATCH_RECORDS:
                    yield self._decoded(batch, columns, number - len(batch) + 1)
                    batch = []
            number += 1
        if batch:
            yield self._decoded(batch, columns, number - len(batch))
        yield Decoded(self.schema.empty_table(), [], 0, source.pos)

    def _container(self, source: _Source) -> tuple[Iterator[dict[str, Any]], Any]:
        import fastavro

        _register_codecs()
        head = source.read(len(MAGIC))
        if head != MAGIC:
            raise AvroError(_not_avro(head))
        source.buf[:0] = head
        source.pos = 0
        try:
            reader = fastavro.block_reader(source)  # type: ignore[arg-type]
        except Exception as e:
            if source.transport_error is not None:
                raise
            raise AvroError(f"cannot read the Avro container's header: {_cause(e)}") from e
        writer = reader.writer_schema
        if not isinstance(writer, dict) or writer.get("type") != "record":
            raise AvroError(
                f"the Avro container's schema is {_type_name(writer)}, not a record; the "
                "avro format reads records whose fields are the table's columns"
            )
        return self._blocks(reader, source), writer

    def _blocks(self, reader: Any, source: _Source) -> Iterator[dict[str, Any]]:
        done = 0
        start = source.pos
        try:
            for block in reader:
                start = block.offset
                yield from block
                done += block.num_records
                start = source.pos
        except Exception as e:
            if source.transport_error is not None:
                raise
            raise AvroError(
                f"corrupt or truncated Avro container: the block at byte {start + 1} "
                f"(after record {done}) cannot be read: {_cause(e)}"
            ) from e

    def _schemaless(self, source: _Source) -> Iterator[dict[str, Any]]:
        import fastavro

        header = not self.config.skip_schema_id
        done = 0
        while True:
            start = source.pos
            head = source.read(5 if header else 1)
            if not head:
                return
            if header:
                if head[0] != 0 or len(head) < 5:
                    hint = (
                        "the object is an Avro container file: remove format config schema"
                        if head.startswith(MAGIC) and not done
                        else "for records without it set format config skip_schema_id: true"
                    )
                    raise AvroError(
                        f"record {done + 1} at byte {start + 1}: expected Confluent's header "
                        f"(magic byte 0 and a 4-byte schema id); {hint}"
                    )
            else:
                source.buf[:0] = head
                source.pos -= 1
            try:
                rec = fastavro.schemaless_reader(source, self.parsed, None)  # type: ignore[arg-type]
            except Exception as e:
                if source.transport_error is not None:
                    raise
                raise AvroError(
                    f"record {done + 1} at byte {start + 1} is not an Avro record of the "
                    f"configured schema: {_cause(e)}"
                ) from e
            done += 1
            yield rec  # type: ignore[misc]

    def _decoded(self, batch: list[dict[str, Any]], columns: _Columns, first: int) -> Decoded:
        import pyarrow as pa

        def convert(recs: Sequence[dict[str, Any]]) -> pa.Table:
            data = apply_operation_column(columns.table(recs), self.config)
            return conform_evolving(data, self.table, self.schema, self.evolution)

        def text(rec: dict[str, Any]) -> str:
            return clip(json.dumps(rec, default=_json_value))

        if columns.missing_required:  # no record of this schema fits: no bisecting
            message = (
                f"column {columns.missing_required!r} is NOT NULL but the Avro schema of "
                "the object has no such field"
            )
            errors = [RecordError(first + i, message, text(r)) for i, r in enumerate(batch)]
            return Decoded(self.schema.empty_table(), errors, len(batch), 0)
        tables, errors = isolate(batch, convert, first, text)
        table = pa.concat_tables(tables) if tables else self.schema.empty_table()
        return Decoded(table, errors, len(batch), 0)


class _Columns:
    """How the writer schema's fields become the table's columns: by name (exactly, or
    ignoring case when no field has the exact name), each with the Arrow type its
    values are built as."""

    def __init__(
        self, writer: Any, table: TableSpec, *, extras: bool = False, operation: str | None = None
    ) -> None:
        from airflow_connectors.spec.models import RESCUED_DATA

        rescue = table.evolution == "rescue"
        columns = [c for c in table.column_names if not (rescue and c == RESCUED_DATA)]
        named = _named_types(writer)
        fields = {f["name"]: f["type"] for f in writer.get("fields", [])}
        folded = {name.lower(): name for name in fields}
        self.columns: list[tuple[str, str, pa.DataType | None, Callable[[Any], Any] | None]] = []
        for col in columns:
            field = col if col in fields else folded.get(col.lower())
            if field is not None:
                arrow, fix = _arrow(fields[field], named)
                self.columns.append((col, field, arrow, fix))
        if operation is not None and operation in fields:
            # The operation field (format config operation_column): read, then dropped.
            self.columns.append((operation, operation, *_arrow(fields[operation], named)))
        mapped = {c for c, *_ in self.columns}
        used = {f for _, f, *_ in self.columns}
        #: The writer's fields the table lacks (read only when ``extras``: the table's
        #: schema_evolution fails on them, rescues them or adds them).
        self.extras: list[tuple[str, pa.DataType | None, Callable[[Any], Any] | None]] = [
            (f, *_arrow(t, named)) for f, t in fields.items() if extras and f not in used
        ]
        #: A NOT NULL column the writer schema lacks (every record is a dead letter).
        self.missing_required = next(
            (c.name for c in table.columns if not c.nullable and c.name not in mapped), None
        )

    def table(self, recs: Sequence[dict[str, Any]]) -> pa.Table:
        """The records' values of the table's columns (absent columns are left out:
        :func:`conform` makes them NULL)."""
        import pyarrow as pa

        from airflow_connectors.formats._conform import RowError

        arrays: dict[str, pa.Array] = {}
        for col, field, arrow, fix in self.columns:
            values = [r.get(field) for r in recs]
            if fix is not None:
                values = [None if v is None else fix(v) for v in values]
            try:
                arrays[col] = pa.array(values, arrow)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
                raise RowError(f"column {col!r}: cannot read the Avro value: {_cause(e)}") from e
        for name, arrow, fix in self.extras:
            values = [r.get(name) for r in recs]
            if fix is not None:
                values = [None if v is None else fix(v) for v in values]
            try:
                arrays[name] = pa.array(values, arrow)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
                raise RowError(f"field {name!r}: cannot read the Avro value: {_cause(e)}") from e
        return pa.table(arrays) if arrays else pa.table({"__none": pa.nulls(len(recs))})


def _arrow(
    schema: Any, named: dict[str, Any]
) -> tuple[pa.DataType | None, Callable[[Any], Any] | None]:
    """The Arrow type an Avro field's values are built as (None: inferred per batch, for
    unions of several types and nested values), and a conversion of each value."""
    import pyarrow as pa

    if isinstance(schema, str):
        if schema in named:
            return _arrow(named[schema], named)
        simple = {
            "null": pa.null(),
            "boolean": pa.bool_(),
            "int": pa.int64(),  # conform checks the range of the column
            "long": pa.int64(),
            "float": pa.float32(),
            "double": pa.float64(),
            "bytes": pa.binary(),
            "string": pa.string(),
        }
        return simple.get(schema), None
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return _arrow(branches[0], named)
        return (pa.null(), None) if not branches else (None, _plain)
    return _arrow_complex(schema, named)


def _arrow_complex(
    schema: dict[str, Any], named: dict[str, Any]
) -> tuple[pa.DataType | None, Callable[[Any], Any] | None]:
    import pyarrow as pa

    logical = schema.get("logicalType")
    kind = schema.get("type")
    if logical == "date" and kind == "int":
        return pa.date32(), None
    if logical in ("time-millis", "time-micros"):
        return pa.time64("us"), None
    if logical in ("timestamp-millis", "timestamp-micros"):
        return pa.timestamp("us", "UTC"), None
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return pa.timestamp("us"), None
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale), None
    if logical == "uuid":
        return pa.string(), str
    if kind in ("enum",):
        return pa.string(), None
    if kind == "fixed":
        return pa.binary(), None
    if kind in _PRIMITIVE:
        return _arrow(kind, named)
    return None, _plain  # record, array, map: nested values (no column type takes them)


def _plain(value: Any) -> Any:
    """A value of a union or nested type as pyarrow can infer it."""
    import uuid

    return str(value) if isinstance(value, uuid.UUID) else value


def _register_codecs() -> None:
    """Block codecs fastavro reads only with libraries this package does not install
    (snappy, zstandard, lz4), read with pyarrow's and zstandard's codecs instead.
    Snappy is the codec Spark, Hive and many Kafka Connect sinks write by default."""
    from fastavro.read import BLOCK_READERS

    for codec, read in (("snappy", _snappy_block), ("zstandard", _zstd_block), ("lz4", _lz4_block)):
        current = BLOCK_READERS.get(codec)
        if current is None or "missing" in getattr(current, "__qualname__", ""):
            BLOCK_READERS[codec] = read


def _read_long(fo: Any) -> int:
    """An Avro long (zigzag varint) from ``fo``."""
    shift = result = 0
    byte: bytes
    while True:
        byte = fo.read(1)
        if not byte:
            raise EOFError("the block ends inside its length")
        b: int = byte[0]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1)
        shift += 7


def _read_exactly(fo: Any, n: int) -> bytes:
    if n < 0:
        raise ValueError(f"a block of negative length {n}")
    data: bytes = fo.read(n)
    if len(data) != n:
        raise EOFError(f"Expected {n} bytes, read {len(data)}")
    return data


def _snappy_block(fo: Any) -> io.BytesIO:
    import zlib

    import pyarrow as pa

    data = _read_exactly(fo, _read_long(fo) - 4)
    crc = int.from_bytes(_read_exactly(fo, 4), "big")
    size = shift = 0
    for b in data[:10]:  # the uncompressed length leads a raw snappy block (a varint)
        size |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    out = pa.Codec("snappy").decompress(data, decompressed_size=size, asbytes=True)
    if zlib.crc32(out) != crc:
        raise ValueError("the snappy block's CRC-32 does not match its data")
    return io.BytesIO(out)


def _zstd_block(fo: Any) -> io.BytesIO:
    import zstandard

    data = _read_exactly(fo, _read_long(fo))
    return io.BytesIO(zstandard.ZstdDecompressor().decompressobj().decompress(data))


def _lz4_block(fo: Any) -> io.BytesIO:
    import pyarrow as pa

    data = _read_exactly(fo, _read_long(fo))
    size = int.from_bytes(data[:4], "little")  # lz4.block's stored size
    return io.BytesIO(
        pa.Codec("lz4_raw").decompress(data[4:], decompressed_size=size, asbytes=True)
    )


def _named_types(schema: Any) -> dict[str, Any]:
    """Named types (records, enums, fixed) defined anywhere in ``schema``, by full name."""
    out: dict[str, Any] = {}

    def walk(s: Any) -> None:
        if isinstance(s, list):
            for b in s:
                walk(b)
        elif isinstance(s, dict):
            if s.get("type") in ("record", "error", "enum", "fixed") and "name" in s:
                out[s["name"]] = s
            for f in s.get("fields", []):
                walk(f.get("type"))
            for key in ("items", "values"):
                if key in s:
                    walk(s[key])
            if isinstance(s.get("type"), dict | list):
                walk(s["type"])

    walk(schema)
    return out


def _parse(text: str) -> Any:
    """The configured writer schema, parsed; ``ValueError`` in one line if it is not."""
    import fastavro

    try:
        schema = fastavro.parse_schema(json.loads(text))
    except Exception as e:
        raise ValueError(
            f"format avro: config schema is not a valid Avro schema: {_cause(e)}"
        ) from e
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError(
            f"format avro: config schema is {_type_name(schema)}, not a record; the avro "
            "format reads records whose fields are the table's columns"
        )
    return schema


def _type_name(schema: Any) -> str:
    if isinstance(schema, dict):
        return f"of type {schema.get('type')!r}"
    if isinstance(schema, list):
        return "a union"
    return f"{schema!r}"


def _not_avro(head: bytes) -> str:
    from airflow_connectors.formats.base import _MAGIC

    if not head:
        return "not an Avro object container file: the object is empty"
    what = next((name for magic, name in _MAGIC if head.startswith(magic)), None)
    hint = f" (it is {what})" if what else ""
    if head.startswith(b"PAR1"):
        hint = " (it starts like a Parquet file: format parquet?)"
    elif head.lstrip()[:1] in (b"{", b"["):
        hint = " (it looks like JSON: format json?)"
    return f"not an Avro object container file: it does not start with 'Obj\\x01'{hint}"


def _json_value(value: Any) -> Any:
    """Values JSON has no type for, as a dead letter shows them."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    return str(value)


def _cause(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


# --- schema inference -------------------------------------------------------------------

_AVRO_SIMPLE = {
    "boolean": "BOOLEAN",
    "int": "INT",
    "long": "BIGINT",
    "float": "REAL",
    "double": "DOUBLE",
    "string": "VARCHAR",
    "bytes": "VARCHAR",
    "enum": "VARCHAR",
}
_AVRO_LOGICAL = {
    "date": "DATE",
    "time-millis": "TIME",
    "time-micros": "TIME",
    "timestamp-millis": "TIMESTAMP",
    "timestamp-micros": "TIMESTAMP",
    "local-timestamp-millis": "TIMESTAMP",
    "local-timestamp-micros": "TIMESTAMP",
}


def _avro_type(t: Any) -> tuple[SqlType | None, str]:
    if isinstance(t, list):
        branches = [b for b in t if b != "null"]
        if len(branches) != 1:
            return (None, "") if not branches else (None, f"the Avro union {json.dumps(t)}")
        return _avro_type(branches[0])
    if isinstance(t, dict):
        logical = t.get("logicalType")
        if logical == "decimal":
            return SqlType("DECIMAL", int(t["precision"]), int(t.get("scale", 0))), ""
        if logical in _AVRO_LOGICAL:
            return SqlType(_AVRO_LOGICAL[logical]), ""
        return _avro_type(t.get("type"))
    if t == "null":
        return None, ""
    if t in _AVRO_SIMPLE:
        return SqlType(_AVRO_SIMPLE[t]), ""
    return None, f"an Avro {t}"
