"""Schema inference: the columns of a table that declares none.

The first discovery of such a table (no stored schema version yet) samples the data a
connector lists, bounded by :class:`SampleBounds` (at most ``files`` work items and
``bytes`` bytes; an object beyond either bound is not read), reads it through the
transport's read path, infers each field's SQL type from what the format holds, applies
the table's ``schema_hints`` and stores the result as schema version 1 in the state
store (:mod:`airflow_connectors.state.schemas`), with the sampled objects as its origin.
Later discoveries, batches and views use the latest stored version
(:func:`effective_table`); they never infer again.

What each format infers (every inferred column is nullable; a hint may say NOT NULL):

- ``json``: the records' top-level fields in order of first appearance (``insert``
  of ``update_format: insert_delete``, the elements of ``array: true``). true/false ->
  BOOLEAN; integers -> BIGINT (beyond BIGINT: DECIMAL(38, 0)); numbers with a fraction
  or exponent (also mixed with integers) -> DOUBLE; strings -> DATE when every value is
  ``YYYY-MM-DD``, TIMESTAMP when every value is an ISO 8601 date-time, else VARCHAR.
- ``csv`` (``headers: true`` only: the header names the columns; every sampled file
  must have the same header): types as pyarrow's CSV reader infers them (integers,
  floats, booleans, dates, times, timestamps, else VARCHAR); nulls as the format reads
  them (empty, ``NULL``, ``null``).
- ``parquet``, ``avro``: the files' own schemas, columns in file order (the union over
  the sampled files, in order of first appearance).

A field whose values are only null becomes VARCHAR. A field holding nested values
(objects, arrays, Parquet structs and lists, Avro records, arrays and maps) or values
of conflicting kinds (a number in one record and a string in another) has no SQL type
the formats could read it into: inference fails with one line naming the table, the
field and an object where it was seen, and asks for a ``schema_hints`` entry (a hinted
field is not inferred) or declared columns. Nothing is typed by guessing.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from airflow_connectors.spec.models import RESCUED_DATA, ColumnSpec, ConnectorSpec, TableSpec
from airflow_connectors.spec.types import SqlType, parse_type
from airflow_connectors.state.schemas import SchemaConflict, SchemaVersion
from airflow_connectors.transports import Limits, WorkItem

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.engine.context import BatchContext
    from airflow_connectors.state.store import StateStore
    from airflow_connectors.transports import Transport

log = logging.getLogger(__name__)

#: Formats whose data says what its columns are (``raw`` has one declared column).
INFERRING_FORMATS = ("json", "csv", "parquet", "avro")
#: Formats that must read a whole object to know its schema (the footer).
_WHOLE_OBJECT_FORMATS = ("parquet",)
DEFAULT_SAMPLE_FILES = 50
DEFAULT_SAMPLE_BYTES = 64 << 20


class SchemaInferenceError(ValueError):
    """The sample cannot be typed: one line naming the table, the field or object, what
    was found and what to do."""


@dataclass(frozen=True)
class SampleBounds:
    """How much data inference reads: at most ``files`` work items (objects) and
    ``bytes`` bytes (of the decompressed data). Settings ``[connectors]
    schema_sample_files`` and ``schema_sample_bytes`` (``AIRFLOW__CONNECTORS__...``)."""

    files: int = DEFAULT_SAMPLE_FILES
    bytes: int = DEFAULT_SAMPLE_BYTES

    @classmethod
    def from_settings(cls) -> SampleBounds:
        """The bounds the Airflow config or the environment set, else the defaults."""
        from airflow_connectors.settings import SettingsError, _option

        values: dict[str, int] = {}
        for key, attr in (("schema_sample_files", "files"), ("schema_sample_bytes", "bytes")):
            raw = _option(key)
            if raw is None:
                continue
            try:
                values[attr] = int(raw)
            except ValueError:
                values[attr] = 0
            if values[attr] < 1:
                raise SettingsError(
                    f"[connectors] {key} (AIRFLOW__CONNECTORS__{key.upper()}) is {raw!r}; "
                    "expected a positive whole number"
                )
        return cls(**values)


@dataclass
class Inferred:
    """What inference found: the columns (hints applied) and the objects it read."""

    columns: tuple[ColumnSpec, ...]
    sampled: list[str] = field(default_factory=list)

    def origin(self, connector: str) -> str:
        """The stored version's ``origin``: which connector sampled which objects (URL
        passwords and secret query parameters masked: the CLI, REST and UI show it)."""
        from airflow_connectors.spec.redact import mask_url

        shown = ", ".join(mask_url(name) for name in self.sampled[:20])
        more = f" and {len(self.sampled) - 20} more" if len(self.sampled) > 20 else ""
        return (
            f"inferred by connector {connector} from {len(self.sampled)} object(s): {shown}{more}"
        )


# --- the effective schema ---------------------------------------------------------------


@lru_cache(maxsize=512)
def _parsed(text: str) -> SqlType:
    return parse_type(text)[0]


def column_specs(version: SchemaVersion) -> tuple[ColumnSpec, ...]:
    """A stored version's columns as the spec's :class:`ColumnSpec`."""
    return tuple(
        ColumnSpec(name=c.name, type=_parsed(c.type), nullable=c.nullable) for c in version.columns
    )


def with_version(table: TableSpec, version: SchemaVersion | None) -> TableSpec:
    """``table`` with the columns of ``version`` (when one is stored: inferred columns,
    or declared ones that a batch evolved), plus the ``_rescued_data`` VARCHAR column
    when the table's ``schema_evolution`` is ``rescue`` (not twice)."""
    columns = table.columns
    if version is not None:
        columns = column_specs(version)
    if table.evolution == "rescue" and columns and RESCUED_DATA not in {c.name for c in columns}:
        columns = (*columns, ColumnSpec(name=RESCUED_DATA, type=SqlType("VARCHAR"), nullable=True))
    if columns == table.columns:
        return table
    # Keep the evolution mode the spec meant: an inferred table stays one.
    evolution = table.schema_evolution if table.schema_evolution is not None else table.evolution
    return table.model_copy(update={"columns": columns, "schema_evolution": evolution})


def effective_table(store: StateStore, pipeline: str, table: TableSpec) -> TableSpec:
    """The table as batches read and write it: the columns of its latest stored schema
    version (inferred ones, or declared ones a batch evolved); declared columns as
    declared while no version is stored (an inferring table then has none); plus
    ``_rescued_data`` in ``rescue`` mode."""
    return with_version(table, store.latest_schema(pipeline, table.name))


def prepare(store: StateStore, ctx: BatchContext, bounds: SampleBounds | None = None) -> bool:
    """Give ``ctx`` its table's effective schema (:func:`effective_table`) and
    ``schema_version`` (None while no version is stored), inferring and storing version
    1 first when the table infers its schema and has none. Returns False
    when there is nothing to sample yet (``ctx`` unchanged); discovery then plans
    nothing. Raises :class:`SchemaInferenceError` when the sample cannot be typed."""
    table = ctx.table
    version = store.latest_schema(ctx.pipeline, table.name)
    if version is None and table.infers_schema:
        bounds = bounds or SampleBounds.from_settings()
        transport = ctx.transport()
        items = sample_items(store, ctx, transport, bounds)
        inferred = infer_columns(table, ctx.connector, transport, items, bounds)
        if inferred is None:
            log.info(
                "%s: table %s has no columns yet and the connector lists no data to infer "
                "them from; nothing planned",
                ctx.ref,
                table.name,
            )
            return False
        version = store_inferred(store, ctx, inferred)
    ctx.table = with_version(table, version)
    ctx.schema_version = version.version if version is not None else None
    return True


def store_inferred(store: StateStore, ctx: BatchContext, inferred: Inferred) -> SchemaVersion:
    """Store ``inferred`` as version 1; when another connector or run stored a version
    first, that one is used (the table's schema is inferred once)."""
    try:
        store.add_schema_version(
            ctx.pipeline,
            ctx.table.name,
            inferred.columns,
            based_on=None,
            origin=inferred.origin(ctx.connector.name),
        )
    except SchemaConflict:
        log.info("%s: another run stored the schema of %s first; using it", ctx.ref, ctx.table.name)
    version = store.latest_schema(ctx.pipeline, ctx.table.name)
    assert version is not None
    if version.version == 1:
        log.info(
            "%s: inferred the schema of table %s (version 1): %s",
            ctx.ref,
            ctx.table.name,
            ", ".join(f"{c.name} {c.type}" for c in version.columns),
        )
    return version


def sample_items(
    store: StateStore, ctx: BatchContext, transport: Transport, bounds: SampleBounds
) -> list[WorkItem]:
    """The first work items discovery would plan (at most ``bounds.files``)."""
    from itertools import islice

    limits = Limits(max_records=None, max_items=bounds.files, now=time.time())
    return list(islice(transport.discover(store.cursor(ctx.ref), limits), bounds.files))


# --- inference --------------------------------------------------------------------------


def infer_columns(
    table: TableSpec,
    connector: ConnectorSpec,
    transport: Transport,
    items: Sequence[WorkItem],
    bounds: SampleBounds,
) -> Inferred | None:
    """Infer the columns of ``table`` from ``items`` read through ``transport``, as the
    connector's format reads them (see the module docstring), then apply the table's
    ``schema_hints``. Reads at most ``bounds.files`` items and ``bounds.bytes`` bytes.
    None when there is nothing to read (no items, or only empty objects)."""
    fmt = connector.format
    where = f"table {table.name!r} connector {connector.name!r}"
    if fmt is None or fmt.name not in INFERRING_FORMATS:
        raise SchemaInferenceError(
            f"{where}: the columns cannot be inferred from "
            f"{'format ' + repr(fmt.name) if fmt else 'transport ' + repr(connector.transport.name)}"
            f"; declare the table's columns (inference reads {', '.join(INFERRING_FORMATS)})"
        )
    fields = _Fields(where, set(table.schema_hints), text=fmt.name == "csv")
    sampled: list[str] = []
    budget = bounds.bytes
    for item in items[: bounds.files]:
        if budget <= 0:
            break
        data = _read(transport, item, budget, whole=fmt.name in _WHOLE_OBJECT_FORMATS)
        if data is None:
            break  # an object beyond the byte bound is not read
        budget -= len(data)
        if not data.strip():
            continue
        sampled.append(item.key)
        _infer_object(fmt.name, fmt.config, data, item.key, fields)
    columns = apply_hints(table, fields.columns())
    if not sampled:
        return None
    if not columns:
        raise SchemaInferenceError(
            f"{where}: the sampled objects ({', '.join(sampled[:5])}) hold no record with a "
            f"field to infer a column from; check the {fmt.name} format config or declare "
            "the table's columns"
        )
    return Inferred(columns, sampled)


def apply_hints(table: TableSpec, columns: Iterable[ColumnSpec]) -> tuple[ColumnSpec, ...]:
    """``columns`` with the types ``schema_hints`` pin (matched ignoring case); hinted
    columns the sample lacks are added at the end, in the hints' order."""
    hints = {k.lower(): (k, parse_type(v)) for k, v in table.schema_hints.items()}
    out: list[ColumnSpec] = []
    for c in columns:
        hint = hints.pop(c.name.lower(), None)
        if hint is None:
            out.append(c)
        else:
            out.append(ColumnSpec(name=c.name, type=hint[1][0], nullable=hint[1][1]))
    for name, (sql_type, nullable) in hints.values():
        out.append(ColumnSpec(name=name, type=sql_type, nullable=nullable))
    return tuple(out)


def _read(transport: Transport, item: WorkItem, budget: int, *, whole: bool) -> bytes | None:
    """The item's bytes, at most ``budget`` of them; None when ``whole`` and the item is
    larger than the budget (it is not read: at most its first chunk)."""
    if whole and item.size is not None and item.size > budget:
        return None
    out = bytearray()
    chunks = transport.read(item)
    try:
        for chunk in chunks:
            if not isinstance(chunk, bytes | bytearray | memoryview):
                raise SchemaInferenceError(
                    f"transport {transport.name!r} yields records, not bytes; declare the "
                    "table's columns"
                )
            out += chunk
            if whole and len(out) > budget:
                return None
            if not whole and len(out) >= budget:
                del out[budget:]  # a line format: the records before the bound
                break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return bytes(out)


def _infer_object(fmt: str, config: Mapping[str, Any], data: bytes, key: str, f: _Fields) -> None:
    if fmt == "json":
        _infer_json(config, data, key, f)
    elif fmt == "csv":
        _infer_csv(config, data, key, f)
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        f.add_arrow(pq.ParquetFile(io.BytesIO(data)).schema_arrow, key)
    else:
        _infer_avro(config, data, key, f)


class _Fields:
    """The fields seen so far with their types, merged across records and objects."""

    def __init__(self, where: str, hinted: set[str], *, text: bool) -> None:
        self.where = where
        #: The format's values are text (CSV): fields of different kinds become VARCHAR.
        self.text = text
        self.hinted = {h.lower() for h in hinted}
        #: JSON strings per folded field name, typed together at the end (:meth:`columns`).
        self.strings: dict[str, list[str]] = {}
        self.order: dict[str, str] = {}  # folded name -> name as first seen
        self.types: dict[str, SqlType | None] = {}  # None: only nulls so far
        self.seen_in: dict[str, str] = {}

    def add(self, name: str, sql_type: SqlType | None, key: str, what: str = "") -> None:
        """Merge one field's type (None: a null) seen in object ``key``."""
        folded = name.lower()
        if folded not in self.order:
            if not name.strip():
                raise SchemaInferenceError(
                    f"{self.where}: {key} has a field with an empty name; give the field a "
                    "name or declare the table's columns"
                )
            self.order[folded] = name
            self.types[folded] = None
            self.seen_in[folded] = key
        elif self.order[folded] != name:
            raise SchemaInferenceError(
                f"{self.where}: fields {self.order[folded]!r} and {name!r} ({key}) differ only "
                "in case; Spark and DuckDB read column names case-insensitively: rename one "
                "or declare the table's columns"
            )
        if folded in self.hinted:
            return
        if what:
            self._untypable(name, key, what)
        self.types[folded] = self._merge(name, self.types[folded], sql_type, key)

    def add_arrow(self, schema: pa.Schema, key: str) -> None:
        """Every field of an Arrow schema (Parquet, CSV)."""
        for fld in schema:
            t, what = arrow_to_sql(fld.type)
            self.add(fld.name, t, key, what)

    def _untypable(self, name: str, key: str, what: str) -> None:
        raise SchemaInferenceError(
            f"{self.where}: field {name!r} holds {what} in {key}, which no column type "
            f"holds; set its type in schema_hints (e.g. schema_hints: {{{name}: VARCHAR}}) "
            "or declare the table's columns"
        )

    def _merge(self, name: str, a: SqlType | None, b: SqlType | None, key: str) -> SqlType | None:
        if a is None or a == b:
            return b
        if b is None:
            return a
        numeric = ("TINYINT", "SMALLINT", "INT", "BIGINT", "REAL", "DOUBLE")
        if a.kind in numeric and b.kind in numeric:
            if a.is_integer and b.is_integer:
                return max(a, b, key=lambda t: numeric.index(t.kind))
            return SqlType("DOUBLE")
        if {a.kind, b.kind} == {"DATE", "TIMESTAMP"}:
            return SqlType("TIMESTAMP")
        if self.text:
            return SqlType("VARCHAR")  # any CSV field is VARCHAR text
        if a.kind == "DECIMAL" and b.kind == "DECIMAL":
            scale = max(a.scale or 0, b.scale or 0)
            whole = max((a.precision or 0) - (a.scale or 0), (b.precision or 0) - (b.scale or 0))
            return SqlType("DECIMAL", min(38, whole + scale), scale)
        raise SchemaInferenceError(
            f"{self.where}: field {name!r} is {a} in {self.seen_in[name.lower()]} but {b} in "
            f"{key}; set its type in schema_hints (e.g. schema_hints: {{{name}: VARCHAR}}) or "
            "declare the table's columns"
        )

    def columns(self) -> list[ColumnSpec]:
        """The inferred columns in order of first appearance; only-null fields are
        VARCHAR; hinted fields get their hint later (:func:`apply_hints`)."""
        for folded, values in self.strings.items():
            self.add(self.order[folded], _string_type(values), self.seen_in[folded])
        self.strings = {}
        return [
            ColumnSpec(name=name, type=self.types[folded] or SqlType("VARCHAR"), nullable=True)
            for folded, name in self.order.items()
        ]


def arrow_to_sql(t: pa.DataType) -> tuple[SqlType | None, str]:
    """The SQL type of an Arrow type, or (None, what it is) when no column type holds
    it; (None, "") for the null type."""
    import pyarrow as pa

    checks: list[tuple[Any, str]] = [
        (pa.types.is_boolean, "BOOLEAN"),
        (pa.types.is_int8, "TINYINT"),
        (pa.types.is_int16, "SMALLINT"),
        (pa.types.is_uint8, "SMALLINT"),
        (pa.types.is_int32, "INT"),
        (pa.types.is_uint16, "INT"),
        (pa.types.is_int64, "BIGINT"),
        (pa.types.is_uint32, "BIGINT"),
        (pa.types.is_float16, "REAL"),
        (pa.types.is_float32, "REAL"),
        (pa.types.is_float64, "DOUBLE"),
        (pa.types.is_string, "VARCHAR"),
        (pa.types.is_large_string, "VARCHAR"),
        (pa.types.is_binary, "VARCHAR"),
        (pa.types.is_large_binary, "VARCHAR"),
        (pa.types.is_date, "DATE"),
        (pa.types.is_time, "TIME"),
        (pa.types.is_timestamp, "TIMESTAMP"),
    ]
    if pa.types.is_dictionary(t):
        return arrow_to_sql(t.value_type)
    if pa.types.is_null(t):
        return None, ""
    for check, kind in checks:
        if check(t):
            return SqlType(kind), ""
    if pa.types.is_uint64(t):
        return SqlType("DECIMAL", 20, 0), ""
    if pa.types.is_decimal(t) and t.precision <= 38:
        return SqlType("DECIMAL", t.precision, t.scale), ""
    return None, f"values of type {t}"


# --- JSON -------------------------------------------------------------------------------

_DATE = re.compile(r"^\d{4}-\d\d-\d\d$")
_DATETIME = re.compile(
    r"^\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:\.\d{1,6})?)?(?:Z|[+-]\d\d(?::?\d\d)?)?)?$"
)
_BIGINT = (-(2**63), 2**63 - 1)


def _json_records(config: Mapping[str, Any], data: bytes, key: str, where: str) -> Iterator[Any]:
    """The records of a JSON object's bytes (a cut last record is left out)."""
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    if config.get("array"):
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


def _infer_json(config: Mapping[str, Any], data: bytes, key: str, f: _Fields) -> None:
    insert_delete = config.get("update_format", "insert_delete") == "insert_delete"
    for rec in _json_records(config, data, key, f.where):
        if insert_delete and isinstance(rec, dict):
            rec = rec.get("insert")
            if rec is None:
                continue  # a delete: its fields are the inserted ones
        if not isinstance(rec, dict):
            continue  # not a record: the format makes it a dead letter
        for name, value in rec.items():
            if isinstance(value, str):
                f.add(name, None, key)  # typed at the end, from all its strings
                f.strings.setdefault(name.lower(), []).append(value)
                continue
            t, what = _json_type(value)
            f.add(name, t, key, what)


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


def _string_type(values: list[str]) -> SqlType:
    def all_match(pattern: re.Pattern[str], parse: Any) -> bool:
        for v in values:
            if not pattern.match(v):
                return False
            try:
                parse(v)
            except ValueError:
                return False
        return True

    if all_match(_DATE, dt.date.fromisoformat):
        return SqlType("DATE")
    if all_match(_DATETIME, dt.datetime.fromisoformat):  # also a date alone: midnight
        return SqlType("TIMESTAMP")
    return SqlType("VARCHAR")


# --- CSV, Avro --------------------------------------------------------------------------


def _infer_csv(config: Mapping[str, Any], data: bytes, key: str, f: _Fields) -> None:
    import pyarrow as pa
    import pyarrow.csv as pc

    if not config.get("headers"):
        raise SchemaInferenceError(
            f"{f.where}: CSV without a header has no column names to infer; set "
            "headers: true in the format config or declare the table's columns"
        )
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    last = data.rfind(b"\n")
    if last >= 0 and not data.endswith(b"\n"):
        data = data[: last + 1]  # a record cut by the byte bound is left out
    try:
        read = pc.read_csv(
            io.BytesIO(data),
            # One block: the types fit every sampled row, not only the first block's.
            read_options=pc.ReadOptions(block_size=max(1 << 20, len(data) + 1)),
            parse_options=pc.ParseOptions(
                delimiter=config.get("delimiter", ","),
                quote_char=config.get("quote", '"'),
                newlines_in_values=True,
            ),
            convert_options=pc.ConvertOptions(
                null_values=["", "NULL", "null"],
                true_values=["true", "True", "TRUE"],
                false_values=["false", "False", "FALSE"],
                strings_can_be_null=True,
            ),
        )
    except pa.ArrowInvalid as e:
        raise SchemaInferenceError(
            f"{f.where}: cannot infer columns from {key} as CSV "
            f"({str(e).splitlines()[0]}); fix the file or declare the table's columns"
        ) from None
    header = [fl.name for fl in read.schema]
    if f.order and [n.lower() for n in header] != list(f.order):
        raise SchemaInferenceError(
            f"{f.where}: the header of {key} ({', '.join(header)}) differs from the first "
            f"sampled file's ({', '.join(f.order.values())}); CSV fields are matched to "
            "columns by position: give the files one header or declare the table's columns"
        )
    f.add_arrow(read.schema, key)


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


def _infer_avro(config: Mapping[str, Any], data: bytes, key: str, f: _Fields) -> None:
    import fastavro

    if config.get("avro_schema"):
        schema: Any = json.loads(str(config["avro_schema"]))
    else:
        try:
            schema = fastavro.reader(io.BytesIO(data)).writer_schema
        except Exception as e:
            raise SchemaInferenceError(
                f"{f.where}: cannot read the Avro schema of {key} ({e}); give the schema as "
                "avro_schema in the format config or declare the table's columns"
            ) from None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise SchemaInferenceError(f"{f.where}: the Avro schema of {key} is not a record")
    for fld in schema.get("fields", []):
        t, what = _avro_type(fld.get("type"))
        f.add(str(fld["name"]), t, key, what)


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


# --- views (CLI, REST) ------------------------------------------------------------------


def _iso(ts: float) -> str:
    return (
        dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


def schema_view(
    store: StateStore, pipeline: str, table: str, spec: TableSpec | None = None
) -> dict[str, Any]:
    """What ``airflow-connectors schema`` and ``GET .../tables/{table}/schema`` show:

    ``{"pipeline", "table", "inferred": whether the columns are inferred (None: no spec
    given), "schema_evolution": the effective mode (None: no spec), "schema_hints",
    "version": the latest stored version (None: none stored), "columns": the columns
    batches use now ([{"name", "type", "nullable"}], with ``_rescued_data`` in rescue
    mode; the declared ones while no version is stored; empty while an inferred schema
    is not inferred yet), "versions": every stored version, oldest first, as
    {"version", "columns", "origin", "created_at" (ISO 8601 UTC), "added": names new
    in that version, "removed": names it dropped, "changed": [{"name", "from", "to"}]
    types it changed}}``."""
    versions = store.schema_versions(pipeline, table)
    latest = versions[-1] if versions else None
    if spec is not None:
        cols = with_version(spec, latest).columns
        current = [{"name": c.name, "type": str(c.type), "nullable": c.nullable} for c in cols]
    else:
        current = [c.to_json() for c in latest.columns] if latest else []
    shown: list[dict[str, Any]] = []
    before: dict[str, str] = {}
    for v in versions:
        now = {c.name: c.type for c in v.columns}
        doc = v.to_json()
        doc["created_at"] = _iso(v.created_at)
        doc["added"] = [n for n in now if n not in before] if shown else []
        doc["removed"] = [n for n in before if n not in now]
        doc["changed"] = [
            {"name": n, "from": before[n], "to": t} for n, t in now.items() if before.get(n, t) != t
        ]
        shown.append(doc)
        before = now
    return {
        "pipeline": pipeline,
        "table": table,
        "inferred": spec.infers_schema if spec is not None else None,
        "schema_evolution": spec.evolution if spec is not None else None,
        "schema_hints": dict(spec.schema_hints) if spec is not None else {},
        "version": latest.version if latest else None,
        "columns": current,
        "versions": shown,
    }


__all__ = [
    "INFERRING_FORMATS",
    "Inferred",
    "SampleBounds",
    "SchemaInferenceError",
    "apply_hints",
    "arrow_to_sql",
    "column_specs",
    "effective_table",
    "infer_columns",
    "prepare",
    "schema_view",
    "with_version",
]
