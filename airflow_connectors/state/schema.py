"""State-store tables and their forward migrations.

``ac_schema.version`` records the applied version; :func:`migrate` applies the missing
steps in order inside one transaction each. Add a step, never edit a released one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

metadata = sa.MetaData()


def _pk() -> list[sa.Column[Any]]:
    return [
        sa.Column("pipeline", sa.String(200), primary_key=True),
        sa.Column("table_name", sa.String(200), primary_key=True),
        sa.Column("connector", sa.String(100), primary_key=True),
    ]


schema_version = sa.Table("ac_schema", metadata, sa.Column("version", sa.Integer, nullable=False))

pipelines = sa.Table(
    "ac_pipelines",
    metadata,
    sa.Column("pipeline", sa.String(200), primary_key=True),
    sa.Column("paused", sa.Boolean, nullable=False, default=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)


def _connector_columns(*, version: int) -> list[sa.Column[Any]]:
    cols: list[sa.Column[Any]] = [
        *_pk(),
        sa.Column("paused", sa.Boolean, nullable=True),  # None: as the spec says
        sa.Column("end_of_input", sa.Boolean, nullable=False, default=False),
        sa.Column("total_records", sa.BigInteger, nullable=False, default=0),
        sa.Column("total_bytes", sa.BigInteger, nullable=False, default=0),
        sa.Column("num_parse_errors", sa.BigInteger, nullable=False, default=0),
        sa.Column("num_transport_errors", sa.BigInteger, nullable=False, default=0),
        sa.Column("fatal_error", sa.Text, nullable=True),
        sa.Column("state", sa.String(20), nullable=False, default="UNASSIGNED"),
        sa.Column("first_discovered_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_until", sa.Float, nullable=True),
        sa.Column("updated_at", sa.Float, nullable=False),
    ]
    if version >= 3:
        # What the new-data event trigger last fired for, so a restarted trigger does
        # not fire again for the same data.
        cols.append(sa.Column("new_data_signal", sa.Text, nullable=True))
        # The `finished` asset event is emitted once per finishing: for which finished_at
        # it was claimed, and by which Airflow run (whose retries may claim it again).
        cols.append(sa.Column("finished_signalled_for", sa.Float, nullable=True))
        cols.append(sa.Column("finished_signal_run", sa.String(250), nullable=True))
    if version >= 4:
        # Kafka Connect's STOPPED: paused with its planned batches released, so its
        # offsets may be edited.
        cols.append(sa.Column("stopped", sa.Boolean, nullable=False, default=False))
    if version >= 6:
        # The watermark (state/watermark.py): every key up to `watermark` is committed;
        # completed offsets rows below it that are older than `late_after` were dropped
        # (the greatest such key is `collapsed_to`); `since_relist` counts discoveries
        # since the last complete listing.
        cols.append(sa.Column("watermark", sa.String(2048), nullable=True))
        cols.append(sa.Column("late_after", sa.Float, nullable=True))
        cols.append(sa.Column("since_relist", sa.Integer, nullable=False, default=0))
        cols.append(sa.Column("collapsed_to", sa.String(2048), nullable=True))
    if version >= 10:
        # The source's lag as the latest discovery (or finalize step) measured it:
        # messages it holds that are not committed; NULL where the transport cannot tell.
        cols.append(sa.Column("lag", sa.BigInteger, nullable=True))
    return cols


connectors = sa.Table("ac_connectors", metadata, *_connector_columns(version=10))

#: Version 4 only: the connectors of every rendered spec (written when Airflow
#: parsed a DAG file). Nothing reads it any more (the REST API lists connectors from
#: Airflow); kept out of ``metadata`` so that only the migration that made it knows it.
_specs_v4 = sa.Table(
    "ac_specs",
    sa.MetaData(),
    *_pk(),
    sa.Column("spec", sa.JSON, nullable=False),  # {"table": ..., "connector": ...}
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)


def _batch_columns(*, published: bool, executors: bool = False) -> list[sa.Column[object]]:
    cols: list[sa.Column[object]] = [
        sa.Column("batch_id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("pipeline", sa.String(200), nullable=False),
        sa.Column("table_name", sa.String(200), nullable=False),
        sa.Column("connector", sa.String(100), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),  # planned | committed
        sa.Column("plan", sa.JSON, nullable=False),
        sa.Column("planned_records", sa.BigInteger, nullable=True),
        sa.Column("planned_items", sa.Integer, nullable=False),
        sa.Column("planned_bytes", sa.BigInteger, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, default=0),
        sa.Column("attempt", sa.String(64), nullable=True),  # the committed attempt
        sa.Column("records", sa.BigInteger, nullable=True),
        sa.Column("bytes", sa.BigInteger, nullable=True),
        sa.Column("parse_errors", sa.BigInteger, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("committed_at", sa.Float, nullable=True),
    ]
    if published:  # since v2
        cols.append(sa.Column("published", sa.Boolean, nullable=False, default=False))
    if executors:  # since v7: which Spark executors ran the committed batch
        cols.append(sa.Column("executors", sa.JSON, nullable=True))
    return cols


batches = sa.Table("ac_batches", metadata, *_batch_columns(published=True, executors=True))

offsets = sa.Table(
    "ac_offsets",
    metadata,
    *_pk(),
    sa.Column("key", sa.String(2048), primary_key=True),
    sa.Column("offset", sa.BigInteger, nullable=False),
    sa.Column("records", sa.BigInteger, nullable=False),
    sa.Column("completed", sa.Boolean, nullable=False),
    sa.Column("meta", sa.JSON, nullable=True),
    sa.Column("batch_id", sa.Integer, nullable=False),
)

errors = sa.Table(
    "ac_errors",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("pipeline", sa.String(200), nullable=False),
    sa.Column("table_name", sa.String(200), nullable=False),
    sa.Column("connector", sa.String(100), nullable=False),
    sa.Column("kind", sa.String(20), nullable=False),  # parse | transport
    sa.Column("timestamp", sa.Float, nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("source_key", sa.String(2048), nullable=True),
    sa.Column("record_number", sa.BigInteger, nullable=True),
    sa.Column("batch_id", sa.Integer, nullable=True),
)


#: Since v8: the schema versions of a table whose columns are inferred (and evolve):
#: version 1 is what the first discovery inferred, each later version what a batch
#: added. ``columns`` is JSON ``[{"name", "type" (SQL type text), "nullable"}]``;
#: ``origin`` says what the version came from. See :mod:`.schemas`.
schemas = sa.Table(
    "ac_schemas",
    metadata,
    sa.Column("pipeline", sa.String(200), primary_key=True),
    sa.Column("table_name", sa.String(200), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("columns", sa.JSON, nullable=False),
    sa.Column("origin", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)


#: Since v9: ranges of a key committed ahead of an earlier range of the same key that
#: was still planned (one discovery planned both; the later batch committed first). The
#: key's offsets row holds only the contiguous committed prefix; a range here joins it
#: once the prefix reaches ``start``, and discovery never plans it again (see
#: :mod:`.ranges`). ``offset``, ``records``, ``completed`` and ``meta`` are what the
#: key's offsets row becomes then.
ranges = sa.Table(
    "ac_offset_ranges",
    metadata,
    *_pk(),
    sa.Column("key", sa.String(2048), primary_key=True),
    sa.Column("start", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("offset", sa.BigInteger, nullable=False),
    sa.Column("records", sa.BigInteger, nullable=False),
    sa.Column("completed", sa.Boolean, nullable=False),
    sa.Column("meta", sa.JSON, nullable=True),
    sa.Column("batch_id", sa.Integer, nullable=False),
)


def _v1(conn: Connection) -> None:
    # Version 1 had every table, but ac_batches without `published`.
    tables = [schema_version, pipelines, offsets, errors]  # as they were in version 1
    metadata.create_all(conn, tables=tables)
    old = sa.MetaData()
    sa.Table("ac_connectors", old, *_connector_columns(version=1)).create(conn)
    sa.Table("ac_batches", old, *_batch_columns(published=False)).create(conn)


def _v2(conn: Connection) -> None:
    # Batches are published (moved into the table) after their commit; a committed but
    # unpublished batch is rolled forward by the next run.
    conn.execute(
        sa.text("ALTER TABLE ac_batches ADD COLUMN published BOOLEAN NOT NULL DEFAULT FALSE")
    )
    conn.execute(sa.text("UPDATE ac_batches SET published = (status = 'committed')"))
    sa.Index(
        "ix_ac_batches_connector_status",
        batches.c.pipeline,
        batches.c.table_name,
        batches.c.connector,
        batches.c.status,
    ).create(conn)


def _v3(conn: Connection) -> None:
    # Airflow: the new-data trigger's last signal, and when `finished` was last emitted.
    conn.execute(sa.text("ALTER TABLE ac_connectors ADD COLUMN new_data_signal TEXT"))
    conn.execute(sa.text("ALTER TABLE ac_connectors ADD COLUMN finished_signalled_for FLOAT"))
    conn.execute(sa.text("ALTER TABLE ac_connectors ADD COLUMN finished_signal_run VARCHAR(250)"))


def _v4(conn: Connection) -> None:
    # Connector management: STOPPED connectors and the catalog of rendered specs.
    conn.execute(
        sa.text("ALTER TABLE ac_connectors ADD COLUMN stopped BOOLEAN NOT NULL DEFAULT FALSE")
    )
    _specs_v4.create(conn)


def _v5(conn: Connection) -> None:
    # The catalog of rendered specs has no reader: DAG parsing no longer registers specs
    # and the REST API lists connectors from Airflow.
    _specs_v4.drop(conn)


def _v6(conn: Connection) -> None:
    # Bounded offsets: the watermark, the re-list time and count, the collapsed keys.
    conn.execute(sa.text("ALTER TABLE ac_connectors ADD COLUMN watermark VARCHAR(2048)"))
    conn.execute(sa.text("ALTER TABLE ac_connectors ADD COLUMN late_after FLOAT"))
    conn.execute(
        sa.text("ALTER TABLE ac_connectors ADD COLUMN since_relist INTEGER NOT NULL DEFAULT 0")
    )
    conn.execute(sa.text("ALTER TABLE ac_connectors ADD COLUMN collapsed_to VARCHAR(2048)"))


def _v7(conn: Connection) -> None:
    # Scale-out: per committed batch, the Spark executors that ran it (host, id, working
    # directory) with the items and records each ingested (JSON; NULL before v7).
    conn.execute(sa.text("ALTER TABLE ac_batches ADD COLUMN executors JSON"))


def _v8(conn: Connection) -> None:
    # Schema inference and evolution: the schema versions of each table.
    schemas.create(conn)


def _v9(conn: Connection) -> None:
    # No gap on stop: ranges of a key committed ahead of an earlier, uncommitted range.
    ranges.create(conn)


def _v10(conn: Connection) -> None:
    # A sequence source's lag (transports/sequence.py), shown with the connector's stats.
    conn.execute(sa.text("ALTER TABLE ac_connectors ADD COLUMN lag BIGINT"))


MIGRATIONS: list[Callable[[Connection], None]] = [
    _v1,
    _v2,
    _v3,
    _v4,
    _v5,
    _v6,
    _v7,
    _v8,
    _v9,
    _v10,
]
LATEST = len(MIGRATIONS)


def _current_version(conn: Connection) -> int:
    if not sa.inspect(conn).has_table("ac_schema"):
        return 0
    return int(conn.execute(sa.select(schema_version.c.version)).scalar() or 0)


def migrate(engine: sa.Engine, target: int = LATEST) -> int:
    """Bring the store to ``target``; returns the version it started from."""
    with engine.begin() as conn:
        start = _current_version(conn)
    if start > LATEST:
        raise RuntimeError(
            f"the state store has schema version {start}, newer than this airflow-connectors "
            f"understands ({LATEST}); upgrade airflow-connectors"
        )
    for version in range(start + 1, target + 1):
        try:
            with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    # Airflow tasks may open a fresh store at the same moment: one migrates.
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(724508311)"))
                if _current_version(conn) >= version:
                    continue
                MIGRATIONS[version - 1](conn)
                conn.execute(sa.delete(schema_version))
                conn.execute(sa.insert(schema_version).values(version=version))
        except sa.exc.DBAPIError:
            # Another process migrated concurrently (SQLite has no advisory locks).
            with engine.begin() as conn:
                if _current_version(conn) < version:
                    raise
    return start
