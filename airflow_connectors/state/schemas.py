"""Schema versions of the tables whose columns are inferred (table ``ac_schemas``).

A table that declares no columns gets them from its data: the first discovery infers
them and stores schema version 1 (``engine/schema.py``); a batch that finds new fields
stores the next version, in the transaction that commits the batch. Versions count
from 1 per ``(pipeline, table)``; a stored version never changes.

Adding a version is a compare-and-set on the latest version: the writer says which
version it extends (``based_on``) and the add fails with :class:`SchemaConflict` when
another writer stored a version since. The caller re-reads the latest version,
merges (for example the union of both column sets) and tries again, so two batches
that each add a column cannot lose one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa

from airflow_connectors.state import schema as s
from airflow_connectors.state.database import Database


class ColumnLike(Protocol):
    """What :meth:`Schemas.add_schema_version` takes as a column: a
    ``spec.models.ColumnSpec`` or a :class:`SchemaColumn` (``str(type)`` is its SQL
    type text)."""

    @property
    def name(self) -> str:
        """The column name."""

    @property
    def type(self) -> object:
        """The SQL type (``SqlType`` or its text)."""

    @property
    def nullable(self) -> bool:
        """Whether the column may be NULL."""


@dataclass(frozen=True)
class SchemaColumn:
    """One column of a stored schema version: name, SQL type text (as
    ``spec.types.parse_type`` reads it, e.g. ``"BIGINT"``, ``"DECIMAL(10,2)"``) and
    whether it may be NULL."""

    name: str
    type: str
    nullable: bool = True

    def to_json(self) -> dict[str, Any]:
        """``{"name", "type", "nullable"}``, as stored and as the REST API shows it."""
        return {"name": self.name, "type": self.type, "nullable": self.nullable}


@dataclass(frozen=True)
class SchemaVersion:
    """A stored schema version of a table."""

    pipeline: str
    table: str
    #: 1 for the inferred schema, +1 for each evolution.
    version: int
    columns: tuple[SchemaColumn, ...]
    #: What the version came from: the sampled objects of an inference, or which batch
    #: added which columns.
    origin: str
    #: When it was stored (seconds since the epoch).
    created_at: float

    @property
    def column_names(self) -> list[str]:
        """The column names in order."""
        return [c.name for c in self.columns]

    def to_json(self) -> dict[str, Any]:
        """The version as JSON (the CLI's ``--json`` and the REST API)."""
        return {
            "version": self.version,
            "columns": [c.to_json() for c in self.columns],
            "origin": self.origin,
            "created_at": self.created_at,
        }


class SchemaConflict(RuntimeError):
    """:meth:`Schemas.add_schema_version` was based on a version that is no longer the
    latest: another writer stored a schema version meanwhile. Re-read the latest
    version, merge and retry. ``latest`` is the latest version seen (None: none)."""

    def __init__(self, message: str, *, latest: int | None) -> None:
        super().__init__(message)
        self.latest = latest


def schema_columns(columns: Sequence[ColumnLike]) -> tuple[SchemaColumn, ...]:
    """``columns`` as :class:`SchemaColumn` (types as their SQL text)."""
    return tuple(SchemaColumn(c.name, str(c.type), bool(c.nullable)) for c in columns)


class Schemas(Database):
    """The schema versions of tables (``ac_schemas``)."""

    def schema_versions(self, pipeline: str, table: str) -> list[SchemaVersion]:
        """Every stored schema version of the table, oldest (version 1) first; empty
        when none is stored (declared columns, or nothing inferred yet)."""
        with self.tx() as conn:
            rows = conn.execute(
                sa.select(s.schemas).where(_where(pipeline, table)).order_by(s.schemas.c.version)
            ).all()
        return [_version(r) for r in rows]

    def latest_schema(
        self, pipeline: str, table: str, conn: sa.Connection | None = None
    ) -> SchemaVersion | None:
        """The table's latest schema version, or None when none is stored. With
        ``conn``, read in that (open) transaction."""
        if conn is None:
            with self.tx() as c:
                return self.latest_schema(pipeline, table, c)
        row = conn.execute(
            sa.select(s.schemas)
            .where(_where(pipeline, table))
            .order_by(s.schemas.c.version.desc())
            .limit(1)
        ).first()
        return _version(row) if row is not None else None

    def add_schema_version(
        self,
        pipeline: str,
        table: str,
        columns: Sequence[ColumnLike],
        *,
        based_on: int | None,
        origin: str,
        conn: sa.Connection | None = None,
    ) -> int:
        """Store the table's next schema version and return its number.

        Compare-and-set: ``based_on`` is the version the caller extends (None: the
        table has no stored version yet, the new one is version 1); when the latest
        stored version is another one, nothing is stored and :class:`SchemaConflict`
        is raised (also when a concurrent writer stores the same version number first).

        ``columns``: the complete column list of the new version (``ColumnSpec`` or
        :class:`SchemaColumn`), non-empty with unique names (``ValueError`` otherwise).
        ``origin``: what it came from, shown with the version.

        ``conn``: an open state-store transaction (``store.tx()``) to store the version
        in, so that it commits or rolls back with the rest of that transaction (a batch
        commit). A conflict then leaves that transaction usable (the insert runs in a
        savepoint); the caller decides whether to roll it back. Without ``conn`` the
        version is stored in a transaction of its own."""
        if conn is None:
            with self.tx() as c:
                return self.add_schema_version(
                    pipeline, table, columns, based_on=based_on, origin=origin, conn=c
                )
        cols = schema_columns(columns)
        _check_columns(pipeline, table, cols)
        latest = conn.execute(
            sa.select(sa.func.max(s.schemas.c.version)).where(_where(pipeline, table))
        ).scalar()
        if latest != based_on:
            raise _conflict(pipeline, table, based_on, latest)
        version = (based_on or 0) + 1
        try:
            with conn.begin_nested():
                conn.execute(
                    sa.insert(s.schemas).values(
                        pipeline=pipeline,
                        table_name=table,
                        version=version,
                        columns=[c.to_json() for c in cols],
                        origin=origin,
                        created_at=time.time(),
                    )
                )
        except sa.exc.IntegrityError:
            raise _conflict(pipeline, table, based_on, version) from None
        return version


def _where(pipeline: str, table: str) -> sa.ColumnElement[bool]:
    return sa.and_(s.schemas.c.pipeline == pipeline, s.schemas.c.table_name == table)


def _check_columns(pipeline: str, table: str, cols: tuple[SchemaColumn, ...]) -> None:
    if not cols:
        raise ValueError(
            f"schema of table {pipeline}.{table}: a schema version needs at least one column"
        )
    seen: set[str] = set()
    for c in cols:
        if c.name.lower() in seen:
            raise ValueError(
                f"schema of table {pipeline}.{table}: column {c.name!r} appears twice; "
                "column names must be unique (case-insensitively)"
            )
        seen.add(c.name.lower())


def _conflict(
    pipeline: str, table: str, based_on: int | None, latest: int | None
) -> SchemaConflict:
    return SchemaConflict(
        f"schema of table {pipeline}.{table}: expected the latest schema version to be "
        f"{based_on if based_on is not None else '(none)'} but it is "
        f"{latest if latest is not None else '(none)'}: another writer stored a version "
        "meanwhile; re-read the latest version, merge the columns and retry",
        latest=latest,
    )


def _version(r: Any) -> SchemaVersion:
    return SchemaVersion(
        pipeline=r.pipeline,
        table=r.table_name,
        version=int(r.version),
        columns=tuple(
            SchemaColumn(str(c["name"]), str(c["type"]), bool(c.get("nullable", True)))
            for c in r.columns
        ),
        origin=r.origin,
        created_at=float(r.created_at),
    )
