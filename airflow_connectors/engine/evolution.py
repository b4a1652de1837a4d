"""``schema_evolution: add_new_columns`` on the driver: the columns a batch adds.

A batch reads with the table's latest schema version (:func:`batch_table`). Its tasks
report, per work item, the fields the table lacks with the SQL types their values were
read as (:func:`new_fields`). When there are some, the driver widens the table by them
(:func:`widen`, in plan order; the types of one field merged as in inference: integers
of several widths the widest, integers and floats DOUBLE, DATE and TIMESTAMP
TIMESTAMP), discards the attempt and runs the batch again with the widened table, so
every part of the batch has the one schema; the batch commit stores the widened columns
as the next schema version in the same state-store transaction (:func:`store_version`).
A re-run after a crash before that commit reads the same data against the same latest
version and widens it the same way.

A new field whose types conflict (text in one object, numbers in another), or that holds
values no column type takes (objects, arrays), fails the batch naming the objects; a
declared column (or, for a table whose columns are inferred, a ``schema_hints`` entry)
gives the field its type (values that do not fit it are then parse errors, like any
value that does not fit its column).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_connectors.spec.models import RESCUED_DATA, ColumnSpec, TableSpec
from airflow_connectors.spec.types import SqlType, parse_type

if TYPE_CHECKING:
    import pyarrow as pa
    import sqlalchemy as sa

    from airflow_connectors.engine.answer import TaskAnswer
    from airflow_connectors.state.store import StateStore

_NUMERIC = ("TINYINT", "SMALLINT", "INT", "BIGINT", "REAL", "DOUBLE")


class EvolutionFailed(ValueError):
    """The batch's new fields cannot become columns (one line naming the connector, the
    field and the objects)."""


@dataclass(frozen=True)
class BatchSchema:
    """The table a batch reads and writes, and the stored schema version it is (None:
    no version stored, the declared columns)."""

    table: TableSpec
    version: int | None


def batch_table(store: StateStore, pipeline: str, table: TableSpec) -> BatchSchema:
    """The table as a batch reads it now: under ``add_new_columns``, the columns of the
    latest stored schema version (a superset of the planned ones: versions only add
    columns) followed by planned columns it lacks; under ``rescue`` with a
    ``_rescued_data`` column. A batch planned before an earlier batch added a column
    reads that column too."""
    version = None
    columns = table.columns
    if table.evolution == "add_new_columns":
        latest = store.latest_schema(pipeline, table.name)
        if latest is not None:
            version = latest.version
            stored = tuple(_column(c.name, c.type, c.nullable) for c in latest.columns)
            names = {c.name for c in stored}
            columns = (*stored, *(c for c in columns if c.name not in names))
    if table.evolution == "rescue" and RESCUED_DATA not in {c.name for c in columns}:
        columns = (*columns, _column(RESCUED_DATA, "VARCHAR", True))
    if columns == table.columns:
        return BatchSchema(table, version)
    evolution = table.schema_evolution if table.schema_evolution is not None else table.evolution
    return BatchSchema(
        table.model_copy(update={"columns": columns, "schema_evolution": evolution}), version
    )


def _column(name: str, type_text: str, nullable: bool) -> ColumnSpec:
    return ColumnSpec(name=name, type=parse_type(type_text)[0], nullable=nullable)


def item_fields(seen: Mapping[str, list[pa.DataType]]) -> dict[str, list[str]]:
    """A work item's new fields for the driver (inside the Spark task): each with the
    SQL type texts of its values, or ``"!<what>"`` for values no column type holds."""
    from airflow_connectors.formats.inference import arrow_to_sql

    out: dict[str, list[str]] = {}
    for name, types in seen.items():
        texts = []
        for t in types:
            sql, what = arrow_to_sql(t)
            texts.append(str(sql) if sql is not None else f"!{what or t}")
        out[name] = texts
    return out


def new_fields(results: Iterable[TaskAnswer]) -> dict[str, list[tuple[str, str]]]:
    """The new fields the tasks reported, in plan order (``results`` sorted by part):
    name -> [(SQL type text, object key)] per object that held it."""
    found: dict[str, list[tuple[str, str]]] = {}
    for r in results:
        for name, types in r.new_fields.items():
            found.setdefault(name, []).extend((t, r.key) for t in types)
    return found


def widen(
    table: TableSpec, found: Mapping[str, list[tuple[str, str]]], where: str
) -> tuple[ColumnSpec, ...]:
    """The columns ``found`` adds to ``table`` (nullable, in plan order); raises
    :class:`EvolutionFailed` for a field whose types conflict or that no column holds."""
    hints = {k.lower(): v for k, v in table.schema_hints.items()}
    have = {c.name.lower() for c in table.columns}
    added: list[ColumnSpec] = []
    for name, seen in found.items():
        if name.lower() in have:
            continue  # a case variant of a column: matched by name or not at all
        if name.lower() in hints:
            added.append(_column(name, hints[name.lower()], True))
            continue
        merged: SqlType | None = None
        first = ""
        for text, key in seen:
            if text.startswith("!"):
                raise EvolutionFailed(
                    f"{where}: new field {name!r} holds {text[1:]} in {key}, which no column "
                    "type holds; set schema_evolution: rescue to keep it as JSON text (or "
                    "none to ignore it), then stop and resume the connector so the batch is "
                    "planned again"
                )
            t = parse_type(text)[0]
            merged = t if merged is None else _merge(merged, t)
            if merged is None:
                raise EvolutionFailed(
                    f"{where}: new field {name!r} holds {_kind(seen[0][0])} values in {first} "
                    f"but {_kind(text)} values in {key}; declare the column with the type "
                    "you want (a table whose columns are inferred: schema_hints, e.g. "
                    f"{{{name}: VARCHAR}}; values that do not fit it are parse errors), then "
                    "stop and resume the connector so the batch is planned again"
                )
            first = first or key
        if merged is not None:
            added.append(ColumnSpec(name=name, type=merged, nullable=True))
    return tuple(added)


def _merge(a: SqlType, b: SqlType) -> SqlType | None:
    if a == b:
        return a
    if a.kind in _NUMERIC and b.kind in _NUMERIC:
        if a.is_integer and b.is_integer:
            return max(a, b, key=lambda t: _NUMERIC.index(t.kind))
        return SqlType("DOUBLE")
    if {a.kind, b.kind} == {"DATE", "TIMESTAMP"}:
        return SqlType("TIMESTAMP")
    return None


def _kind(text: str) -> str:
    return text.split("(")[0]


def store_version(
    store: StateStore,
    conn: sa.Connection,
    pipeline: str,
    table: TableSpec,
    base: BatchSchema,
    batch_id: int,
) -> int:
    """Inside the batch commit's transaction: stores ``table``'s columns as the next
    schema version after ``base`` (when no version was stored, the base columns first as
    version 1). Raises :class:`~airflow_connectors.state.store.SchemaConflict` when a
    concurrent batch stored a version since ``base`` was read."""
    version = base.version
    base_columns = [c for c in base.table.columns if c.name != RESCUED_DATA]
    if version is None:
        version = store.add_schema_version(
            pipeline,
            table.name,
            base_columns,
            based_on=None,
            origin="the declared columns (before a batch added some)",
            conn=conn,
        )
    known = {c.name for c in base_columns}
    added = [c.name for c in table.columns if c.name not in known and c.name != RESCUED_DATA]
    return store.add_schema_version(
        pipeline,
        table.name,
        [c for c in table.columns if c.name != RESCUED_DATA],
        based_on=version,
        origin=f"batch {batch_id} added {', '.join(added)}",
        conn=conn,
    )
