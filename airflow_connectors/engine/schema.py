"""Schema inference: the columns of a table that declares none.

The first discovery of such a table (no stored schema version yet) samples the data a
connector lists, bounded by :class:`SampleBounds` (at most ``files`` work items and
``bytes`` bytes; an object beyond either bound is not read), reads it through the
transport's read path, infers each field's SQL type from what the format holds, applies
the table's ``schema_hints`` and stores the result as schema version 1 in the state
store (:mod:`airflow_connectors.state.schemas`), with the sampled objects as its origin.
Later discoveries, batches and views use the latest stored version
(:func:`effective_table`); they never infer again.

What a format infers is its own (``Format.infer_fields`` of each format in
:mod:`airflow_connectors.formats`: ``json``'s fields and their values, ``csv``'s header
and pyarrow's types, ``parquet``'s and ``avro``'s own schemas); how fields merge across
records and objects, and when inference refuses to guess, is
:mod:`airflow_connectors.formats.inference`. Every inferred column is nullable; a hint
may say NOT NULL.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from airflow_connectors.catalog import PLUGINS
from airflow_connectors.formats import FORMATS
from airflow_connectors.formats.inference import InferredFields, SchemaInferenceError, arrow_to_sql
from airflow_connectors.spec.models import RESCUED_DATA, ColumnSpec, ConnectorSpec, TableSpec
from airflow_connectors.spec.types import SqlType, parse_type
from airflow_connectors.state.schemas import SchemaConflict, SchemaVersion
from airflow_connectors.transports import Limits, WorkItem

if TYPE_CHECKING:
    from airflow_connectors.engine.context import BatchContext
    from airflow_connectors.formats import Format
    from airflow_connectors.state.store import StateStore
    from airflow_connectors.transports import Transport

log = logging.getLogger(__name__)

DEFAULT_SAMPLE_FILES = 50
DEFAULT_SAMPLE_BYTES = 64 << 20


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
    if table.keyed:  # key columns hold a value in every row (SQL's PRIMARY KEY)
        keys = set(table.primary_key)
        columns = tuple(
            c.model_copy(update={"nullable": False}) if c.name in keys and c.nullable else c
            for c in columns
        )
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
    _check_key_columns(ctx)
    return True


def _check_key_columns(ctx: BatchContext) -> None:
    """A keyed table's key and ``sequence_by`` columns must be among its columns (an
    inferred table's are known only now); raises :class:`SchemaInferenceError`."""
    table = ctx.table
    if not table.columns:
        return
    names = {c.name for c in table.columns}
    wanted = [*table.primary_key, *([table.sequence_by] if table.sequence_by else [])]
    lacking = [n for n in wanted if n not in names]
    from airflow_connectors.spec.validate import UNKEYABLE_TYPES

    floating = [
        f"{c.name} ({c.type})"
        for c in table.columns
        if c.name in table.primary_key and c.type.kind in UNKEYABLE_TYPES
    ]
    if floating:
        raise SchemaInferenceError(
            f"connector {ctx.ref}: table {table.name}'s key column(s) "
            f"{', '.join(floating)} were inferred as floating point, which cannot "
            "identify a row; pin an exact type with schema_hints (e.g. BIGINT or VARCHAR)"
        )
    if lacking:
        raise SchemaInferenceError(
            f"connector {ctx.ref}: table {table.name} names {', '.join(map(repr, lacking))} "
            f"in primary_key or sequence_by, but its columns are {', '.join(sorted(names))}; "
            "name columns the data holds (or declare the columns)"
        )


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
    fcls: type[Format] | None = FORMATS.get(fmt.name) if fmt is not None else None
    if fmt is None or fcls is None or not fcls.infers_schema:
        raise SchemaInferenceError(
            f"{where}: the columns cannot be inferred from "
            f"{'format ' + repr(fmt.name) if fmt else 'transport ' + repr(connector.transport.name)}"
            f"; declare the table's columns (inference reads "
            f"{', '.join(PLUGINS.inferring_formats())})"
        )
    config = fcls.Config.model_validate(fmt.config)
    fields = InferredFields(where, set(table.schema_hints), text=fcls.infers_text_values)
    sampled: list[str] = []
    budget = bounds.bytes
    for item in items[: bounds.files]:
        if budget <= 0:
            break
        data = _read(transport, item, budget, whole=fcls.infers_from_whole_objects)
        if data is None:
            break  # an object beyond the byte bound is not read
        budget -= len(data)
        if not data.strip():
            continue
        sampled.append(item.key)
        fcls.infer_fields(config, data, item.key, fields)
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
    "primary_key" (the key columns; empty: no key or no spec), "sequence_by",
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
        "primary_key": list(spec.primary_key) if spec is not None else [],
        "sequence_by": spec.sequence_by if spec is not None else None,
        "version": latest.version if latest else None,
        "columns": current,
        "versions": shown,
    }


__all__ = [
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
