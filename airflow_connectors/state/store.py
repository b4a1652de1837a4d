"""The connector state store: offsets, batches, metrics, errors, flags and leases.

The framework owns offsets: they change only in :meth:`StateStore.commit_batch`, in the
same transaction as the batch's state and metrics.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from airflow_connectors.state import schema as s
from airflow_connectors.transports.base import Cursor, KeyOffset

MAX_ERRORS = 100


@dataclass(frozen=True)
class ConnectorRef:
    pipeline: str
    table: str
    connector: str

    @property
    def endpoint_name(self) -> str:
        return f"{self.table}.{self.connector}"

    def __str__(self) -> str:
        return f"{self.pipeline}.{self.table}.{self.connector}"

    def where(self, t: sa.Table) -> sa.ColumnElement[bool]:
        return sa.and_(
            t.c.pipeline == self.pipeline,
            t.c.table_name == self.table,
            t.c.connector == self.connector,
        )


@dataclass(frozen=True)
class ItemReceipt:
    """What reading one work item did; the commit turns it into the key's offset."""

    key: str
    offset: int  # where the next read of this key starts
    records: int  # good rows written
    bad: int  # records that failed to parse
    bytes: int
    completed: bool
    records_done: int  # records of this key committed before this batch
    #: Transport bookkeeping kept with the offset, e.g. ``{"seen": n}``: bytes up to n
    #: were looked at (a partial last line stays unread until the file grows past n).
    meta: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass(frozen=True)
class ErrorRecord:
    kind: str  # parse | transport
    message: str
    source_key: str | None = None
    record_number: int | None = None


@dataclass
class Batch:
    batch_id: int
    ref: ConnectorRef
    status: str
    plan: dict[str, Any]
    planned_records: int | None
    planned_items: int
    attempt: str | None
    published: bool
    records: int | None = None
    committed_at: float | None = None
    created_at: float = 0.0


@dataclass
class ConnectorState:
    ref: ConnectorRef
    paused: bool | None = None
    end_of_input: bool = False
    total_records: int = 0
    total_bytes: int = 0
    num_parse_errors: int = 0
    num_transport_errors: int = 0
    fatal_error: str | None = None
    state: str = "UNASSIGNED"
    stopped: bool = False
    finished_at: float | None = None
    buffered_records: int = 0
    buffered_batches: int = 0
    parse_errors: list[dict[str, Any]] = field(default_factory=list)
    transport_errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        """Feldera's test: end of input and nothing planned-but-uncommitted."""
        return self.end_of_input and self.buffered_batches == 0

    def feldera_status(self, *, state: str, paused: bool) -> dict[str, Any]:
        """Feldera's ``InputEndpointStatus`` shape, plus the Kafka Connect ``state``.

        ``state`` and ``paused`` are derived by ``engine.control.connector_view`` (the
        record alone does not know whether the connector's DAG is paused)."""
        return {
            "endpoint_name": self.ref.endpoint_name,
            "config": {"stream": self.ref.table},
            "metrics": {
                "total_bytes": self.total_bytes,
                "total_records": self.total_records,
                "buffered_records": self.buffered_records,
                "num_transport_errors": self.num_transport_errors,
                "num_parse_errors": self.num_parse_errors,
                "end_of_input": self.end_of_input,
            },
            "paused": paused,
            "state": state,
            # A failure another attempt or a later run superseded is not fatal any more
            # (it stays in the transport errors).
            "fatal_error": self.fatal_error if state == "FAILED" else None,
            "parse_errors": self.parse_errors,
            "transport_errors": self.transport_errors,
        }


class ConnectorNotStopped(RuntimeError):
    """Offsets change only while the connector is stopped."""


class ConnectorStopped(RuntimeError):
    """A stopped connector plans nothing and runs only after ``resume``."""


class StateStoreUnavailable(RuntimeError):
    """The state-store URL cannot be used: malformed, a database or driver that is not
    available, or no connection. The message is one line naming the URL (its password
    masked), what went wrong and what to do."""


#: What a user can do about a state-store URL, appended to the errors above.
_URL_REMEDY = (
    "set a working URL with --state-store-url or [connectors] state_store_url "
    "(AIRFLOW__CONNECTORS__STATE_STORE_URL)"
)
_URL_EXAMPLES = "postgresql+psycopg://USER:PASSWORD@HOST:5432/DATABASE or sqlite:////PATH/state.db"


def create_engine(url: str) -> sa.Engine:
    """The SQLAlchemy engine of a state store at ``url`` (PostgreSQL or SQLite), not yet
    connected. Raises :class:`StateStoreUnavailable` for an empty or malformed URL, an
    unknown database or a driver that is not installed."""
    from airflow_connectors.spec.redact import mask_url

    shown = mask_url(url)
    if not url.strip():
        raise StateStoreUnavailable(
            f"the state store URL is empty; expected a SQLAlchemy URL such as {_URL_EXAMPLES}; "
            f"{_URL_REMEDY}"
        )
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise StateStoreUnavailable(
            f"state store URL {shown!r} is not a SQLAlchemy URL ({reason}); expected "
            f"DIALECT[+DRIVER]://USER:PASSWORD@HOST:PORT/DATABASE such as {_URL_EXAMPLES}; "
            f"{_URL_REMEDY}"
        ) from None
    sqlite = parsed.get_backend_name() == "sqlite"
    kwargs: dict[str, Any] = {"future": True}
    if sqlite:
        kwargs["connect_args"] = {"timeout": 60}
    else:
        kwargs["pool_pre_ping"] = True
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except sa.exc.NoSuchModuleError:
        raise StateStoreUnavailable(
            f"state store URL {shown!r} names the database {parsed.drivername!r}, which "
            f"SQLAlchemy does not know; the state store runs on PostgreSQL or SQLite "
            f"({_URL_EXAMPLES}); {_URL_REMEDY}"
        ) from None
    except ImportError as e:
        raise StateStoreUnavailable(
            f"state store URL {shown!r} needs a database driver that is not installed "
            f"({e}); install it, or use PostgreSQL with psycopg or SQLite "
            f"({_URL_EXAMPLES}); {_URL_REMEDY}"
        ) from None
    except (sa.exc.ArgumentError, TypeError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise StateStoreUnavailable(
            f"state store URL {shown!r} cannot be used ({reason}); {_URL_REMEDY}"
        ) from None
    if sqlite:
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        sa.event.listen(engine, "begin", _sqlite_begin)
    return engine


@contextmanager
def _reported_as_unavailable(engine: sa.Engine, url: str) -> Iterator[None]:
    """Turn a failure to connect (or to prepare the tables) into one line that says
    which store, what the database said and what to do; the engine is disposed."""
    from airflow_connectors.spec.redact import mask_text, mask_url

    try:
        yield
    except sa.exc.DBAPIError as e:
        engine.dispose()
        said = (
            str(e.orig).strip().splitlines()[0]
            if e.orig is not None and str(e.orig).strip()
            else ""
        )
        # As redact.secret_values: shorter "secrets" would mask ordinary words.
        password = str(engine.url.password or "")
        said = mask_text(said or type(e).__name__, [password] if len(password) >= 3 else [])
        if engine.url.get_backend_name() == "sqlite":
            folder = os.path.dirname(os.path.abspath(engine.url.database or "")) or "."
            raise StateStoreUnavailable(
                f"cannot open the state store {mask_url(url)!r}: {said}; the folder {folder} "
                f"must exist and be writable; or {_URL_REMEDY}"
            ) from e
        if isinstance(e, sa.exc.OperationalError | sa.exc.InterfaceError):
            raise StateStoreUnavailable(
                f"cannot connect to the state store {mask_url(url)!r}: {said}; check that the "
                "database server is running and reachable from here and that the user, "
                f"password and database are right; or {_URL_REMEDY}"
            ) from e
        raise StateStoreUnavailable(
            f"cannot prepare the tables of the state store {mask_url(url)!r}: {said}; check "
            f"that the user may create tables there; or {_URL_REMEDY}"
        ) from e


class StateStore:
    """SQLAlchemy-backed store; SQLite (embedded) or PostgreSQL by URL."""

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        """Raises :class:`StateStoreUnavailable` when ``url`` is malformed, names a
        database this machine cannot use, or (with ``migrate``) cannot be connected to."""
        self.url = url
        self.engine = create_engine(url)
        if migrate:
            with _reported_as_unavailable(self.engine, url):
                s.migrate(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def tx(self) -> Iterator[sa.Connection]:
        with self.engine.begin() as conn:
            yield conn

    # --- connectors and flags -----------------------------------------------------

    def ensure_connector(
        self, ref: ConnectorRef, conn: sa.Connection | None = None, *, paused: bool | None = None
    ) -> None:
        """Create the connector's row; ``paused`` is its initial state (the spec's
        ``paused``, as Feldera creates connectors), later changed only by pause/start."""
        if conn is None:
            with self.tx() as c:
                return self.ensure_connector(ref, c, paused=paused)
        exists = conn.execute(
            sa.select(s.connectors.c.connector).where(ref.where(s.connectors))
        ).first()
        if exists is None:
            conn.execute(
                sa.insert(s.connectors).values(
                    pipeline=ref.pipeline,
                    table_name=ref.table,
                    connector=ref.connector,
                    end_of_input=False,
                    paused=paused,
                    total_records=0,
                    total_bytes=0,
                    num_parse_errors=0,
                    num_transport_errors=0,
                    state="UNASSIGNED",
                    updated_at=time.time(),
                )
            )
        return None

    def pipeline_paused(self, pipeline: str) -> bool:
        with self.tx() as conn:
            row = conn.execute(
                sa.select(s.pipelines.c.paused).where(s.pipelines.c.pipeline == pipeline)
            ).first()
        return bool(row[0]) if row else False

    def set_pipeline_paused(self, pipeline: str, paused: bool) -> None:
        with self.tx() as conn:
            n = conn.execute(
                sa.update(s.pipelines)
                .where(s.pipelines.c.pipeline == pipeline)
                .values(paused=paused, updated_at=time.time())
            ).rowcount
            if not n:
                conn.execute(
                    sa.insert(s.pipelines).values(
                        pipeline=pipeline, paused=paused, updated_at=time.time()
                    )
                )

    def set_connector_paused(self, ref: ConnectorRef, paused: bool | None) -> None:
        self._update_connector(ref, paused=paused)

    def _update_connector(self, ref: ConnectorRef, **values: Any) -> None:
        """Set columns of the connector's row (created when missing)."""
        with self.tx() as conn:
            self.ensure_connector(ref, conn)
            conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors))
                .values(**values, updated_at=time.time())
            )

    def acquire_lease(self, ref: ConnectorRef, owner: str, ttl: float = 600.0) -> bool:
        """Only one discovery plans for a connector at a time."""
        now = time.time()
        with self.tx() as conn:
            self.ensure_connector(ref, conn)
            c = s.connectors.c
            n = conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors))
                .where(sa.or_(c.lease_owner.is_(None), c.lease_until < now, c.lease_owner == owner))
                .values(lease_owner=owner, lease_until=now + ttl)
            ).rowcount
        return n == 1

    def release_lease(self, ref: ConnectorRef, owner: str) -> None:
        with self.tx() as conn:
            conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors), s.connectors.c.lease_owner == owner)
                .values(lease_owner=None, lease_until=None)
            )

    # --- offsets and batches ------------------------------------------------------

    def cursor(self, ref: ConnectorRef) -> Cursor:
        with self.tx() as conn:
            rows = conn.execute(
                sa.select(
                    s.offsets.c.key,
                    s.offsets.c.offset,
                    s.offsets.c.records,
                    s.offsets.c.completed,
                    s.offsets.c.meta,
                ).where(ref.where(s.offsets))
            ).all()
            first = conn.execute(
                sa.select(s.connectors.c.first_discovered_at).where(ref.where(s.connectors))
            ).scalar()
            plans = (
                conn.execute(
                    sa.select(s.batches.c.plan).where(
                        ref.where(s.batches), s.batches.c.status == "planned"
                    )
                )
                .scalars()
                .all()
            )
        in_flight = frozenset(item["key"] for plan in plans for item in plan["items"])
        return Cursor(
            offsets={
                r.key: KeyOffset(r.offset, r.records, bool(r.completed), r.meta or {}) for r in rows
            },
            in_flight=in_flight,
            first_discovered_at=first,
        )

    def pending_batches(self, ref: ConnectorRef) -> list[Batch]:
        return self._batches(ref, s.batches.c.status == "planned")

    def unpublished_batches(self, ref: ConnectorRef) -> list[Batch]:
        return self._batches(
            ref, sa.and_(s.batches.c.status == "committed", s.batches.c.published.is_(False))
        )

    def batches(self, ref: ConnectorRef) -> list[Batch]:
        return self._batches(ref, sa.true())

    def _batches(self, ref: ConnectorRef, cond: sa.ColumnElement[bool]) -> list[Batch]:
        with self.tx() as conn:
            rows = conn.execute(
                sa.select(s.batches)
                .where(ref.where(s.batches), cond)
                .order_by(s.batches.c.batch_id)
            ).all()
        return [_batch(r) for r in rows]

    def plan_batches(
        self, ref: ConnectorRef, plans: Sequence[dict[str, Any]], now: float | None = None
    ) -> list[int]:
        """Persist batch plans before any data moves; returns their ids."""
        now = now or time.time()
        ids = []
        with self.tx() as conn:
            self.ensure_connector(ref, conn)
            if conn.execute(
                sa.select(s.connectors.c.stopped).where(ref.where(s.connectors))
            ).scalar():
                # A run that passed its gate before the stop: plan nothing, so the
                # offsets stay still while they may be edited.
                raise ConnectorStopped(
                    f"connector {ref} was stopped while this run was planning; nothing was "
                    "planned. Resume it to run it again."
                )
            for plan in plans:
                items = plan["items"]
                counts = [i.get("records") for i in items]
                sizes = [
                    i.get("end") - i.get("start", 0) if i.get("end") is not None else None
                    for i in items
                ]
                result = conn.execute(
                    sa.insert(s.batches).values(
                        pipeline=ref.pipeline,
                        table_name=ref.table,
                        connector=ref.connector,
                        status="planned",
                        plan=plan,
                        planned_records=_total(counts),
                        planned_items=len(items),
                        planned_bytes=_total(sizes),
                        attempts=0,
                        created_at=now,
                        published=False,
                    )
                )
                key = result.inserted_primary_key
                assert key is not None
                ids.append(int(key[0]))
            conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors), s.connectors.c.first_discovered_at.is_(None))
                .values(first_discovered_at=now)
            )
            conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors))
                .values(end_of_input=False, state="RUNNING", updated_at=now)
            )
        return ids

    def load_batch(self, batch_id: int) -> Batch:
        with self.tx() as conn:
            row = conn.execute(sa.select(s.batches).where(s.batches.c.batch_id == batch_id)).first()
        if row is None:
            raise KeyError(f"batch {batch_id} does not exist in the state store {self.safe_url}")
        return _batch(row)

    def start_attempt(self, batch_id: int) -> int:
        with self.tx() as conn:
            conn.execute(
                sa.update(s.batches)
                .where(s.batches.c.batch_id == batch_id)
                .values(attempts=s.batches.c.attempts + 1)
            )
            return int(
                conn.execute(
                    sa.select(s.batches.c.attempts).where(s.batches.c.batch_id == batch_id)
                ).scalar_one()
            )

    def commit_batch(
        self,
        batch_id: int,
        attempt: str,
        receipts: Sequence[ItemReceipt],
        errors: Sequence[ErrorRecord],
    ) -> bool:
        """Offsets, metrics, errors and the batch state in one transaction. Returns
        False (and changes nothing) when the batch is already committed."""
        now = time.time()
        with self.tx() as conn:
            row = conn.execute(
                sa.select(
                    s.batches.c.status,
                    s.batches.c.pipeline,
                    s.batches.c.table_name,
                    s.batches.c.connector,
                )
                .where(s.batches.c.batch_id == batch_id)
                .with_for_update()
            ).first()
            if row is None:
                raise KeyError(f"batch {batch_id} does not exist")
            if row.status != "planned":
                return False
            ref = ConnectorRef(row.pipeline, row.table_name, row.connector)
            updated = conn.execute(
                sa.update(s.batches)
                .where(s.batches.c.batch_id == batch_id, s.batches.c.status == "planned")
                .values(
                    status="committed",
                    attempt=attempt,
                    committed_at=now,
                    records=sum(r.records for r in receipts),
                    bytes=sum(r.bytes for r in receipts),
                    parse_errors=sum(r.bad for r in receipts),
                )
            ).rowcount
            if updated != 1:
                return False
            for r in receipts:
                values = {
                    "offset": r.offset,
                    "records": r.records_done + r.records + r.bad,
                    "completed": r.completed,
                    "meta": r.meta,
                    "batch_id": batch_id,
                }
                n = conn.execute(
                    sa.update(s.offsets)
                    .where(ref.where(s.offsets), s.offsets.c.key == r.key)
                    .values(**values)
                ).rowcount
                if not n:
                    conn.execute(
                        sa.insert(s.offsets).values(
                            pipeline=ref.pipeline,
                            table_name=ref.table,
                            connector=ref.connector,
                            key=r.key,
                            **values,
                        )
                    )
            c = s.connectors.c
            conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors))
                .values(
                    total_records=c.total_records + sum(r.records for r in receipts),
                    total_bytes=c.total_bytes + sum(r.bytes for r in receipts),
                    num_parse_errors=c.num_parse_errors + sum(r.bad for r in receipts),
                    # Unreadable objects a batch skipped (errors.tolerance: all).
                    num_transport_errors=c.num_transport_errors
                    + sum(e.kind == "transport" for e in errors),
                    fatal_error=None,
                    state="RUNNING",
                    updated_at=now,
                )
            )
            self._add_errors(conn, ref, errors, batch_id, now)
        return True

    def mark_published(self, batch_id: int) -> None:
        with self.tx() as conn:
            conn.execute(
                sa.update(s.batches).where(s.batches.c.batch_id == batch_id).values(published=True)
            )

    def record_failure(
        self,
        ref: ConnectorRef,
        message: str,
        *,
        batch_id: int | None = None,
        kind: str = "transport",
        source_key: str | None = None,
        record_number: int | None = None,
    ) -> bool:
        """A batch failed: keep the trace as the connector's fatal error (state FAILED).

        Returns False and records nothing when the batch is no longer planned: another
        attempt committed it meanwhile (concurrent runs of one connector), or a stop
        released it; its failure then says nothing about the connector."""
        now = time.time()
        with self.tx() as conn:
            if batch_id is not None:
                status = conn.execute(
                    sa.select(s.batches.c.status).where(s.batches.c.batch_id == batch_id)
                ).scalar()
                if status != "planned":
                    return False
            self.ensure_connector(ref, conn)
            c = s.connectors.c
            bump = (
                {"num_transport_errors": c.num_transport_errors + 1} if kind == "transport" else {}
            )
            conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors))
                .values(fatal_error=message, state="FAILED", updated_at=now, **bump)
            )
            self._add_errors(
                conn, ref, [ErrorRecord(kind, message, source_key, record_number)], batch_id, now
            )
        return True

    def record_transport_error(
        self, ref: ConnectorRef, message: str, *, source_key: str | None = None
    ) -> bool:
        """A problem with the source that does not fail a batch (an object changed after
        it was committed, a bounded source matching nothing): counted in
        ``num_transport_errors`` and listed, once while it is the latest such error (a
        connector polled every few seconds does not repeat it). Returns whether it was
        recorded."""
        now = time.time()
        with self.tx() as conn:
            self.ensure_connector(ref, conn)
            latest = conn.execute(
                sa.select(s.errors.c.message)
                .where(ref.where(s.errors), s.errors.c.kind == "transport")
                .order_by(s.errors.c.id.desc())
                .limit(1)
            ).scalar()
            if latest == message:
                return False
            c = s.connectors.c
            conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors))
                .values(num_transport_errors=c.num_transport_errors + 1, updated_at=now)
            )
            self._add_errors(conn, ref, [ErrorRecord("transport", message, source_key)], None, now)
        return True

    def _add_errors(
        self,
        conn: sa.Connection,
        ref: ConnectorRef,
        errors: Sequence[ErrorRecord],
        batch_id: int | None,
        now: float,
    ) -> None:
        if not errors:
            return
        conn.execute(
            sa.insert(s.errors),
            [
                {
                    "pipeline": ref.pipeline,
                    "table_name": ref.table,
                    "connector": ref.connector,
                    "kind": e.kind,
                    "timestamp": now,
                    "message": e.message,
                    "source_key": e.source_key,
                    "record_number": e.record_number,
                    "batch_id": batch_id,
                }
                for e in errors[-MAX_ERRORS:]
            ],
        )
        for kind in {e.kind for e in errors}:
            keep = (
                sa.select(s.errors.c.id)
                .where(ref.where(s.errors), s.errors.c.kind == kind)
                .order_by(s.errors.c.id.desc())
                .limit(1)
                .offset(MAX_ERRORS - 1)
            ).scalar_subquery()
            conn.execute(
                sa.delete(s.errors).where(
                    ref.where(s.errors), s.errors.c.kind == kind, s.errors.c.id < keep
                )
            )

    def set_end_of_input(self, ref: ConnectorRef, end_of_input: bool) -> None:
        now = time.time()
        with self.tx() as conn:
            self.ensure_connector(ref, conn)
            values: dict[str, Any] = {"end_of_input": end_of_input, "updated_at": now}
            prev = conn.execute(
                sa.select(s.connectors.c.end_of_input).where(ref.where(s.connectors))
            ).scalar()
            if end_of_input and not prev:
                values["finished_at"] = now
            conn.execute(sa.update(s.connectors).where(ref.where(s.connectors)).values(**values))

    # --- connector management (REST API, CLI) ----------------------------------------

    def register_specs(self, pipeline: str, entries: dict[tuple[str, str], dict[str, Any]]) -> int:
        """Record the connectors a spec renders to (``(table, connector) -> {"table":
        ..., "connector": ...}``); rows of connectors no longer in the spec are removed.
        Writes only what changed; returns how many rows changed."""
        import hashlib
        import json

        now = time.time()
        changed = 0
        with self.tx() as conn:
            have = {
                (r.table_name, r.connector): r.digest
                for r in conn.execute(
                    sa.select(s.specs.c.table_name, s.specs.c.connector, s.specs.c.digest).where(
                        s.specs.c.pipeline == pipeline
                    )
                )
            }
            for (table, connector), doc in entries.items():
                digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
                if have.get((table, connector)) == digest:
                    continue
                ref = ConnectorRef(pipeline, table, connector)
                values = {"spec": doc, "digest": digest, "updated_at": now}
                if (table, connector) in have:
                    conn.execute(sa.update(s.specs).where(ref.where(s.specs)).values(**values))
                else:
                    conn.execute(
                        sa.insert(s.specs).values(
                            pipeline=pipeline, table_name=table, connector=connector, **values
                        )
                    )
                changed += 1
            for table, connector in set(have) - set(entries):
                conn.execute(
                    sa.delete(s.specs).where(
                        ConnectorRef(pipeline, table, connector).where(s.specs)
                    )
                )
                changed += 1
        return changed

    def catalog(self, pipeline: str | None = None) -> dict[ConnectorRef, dict[str, Any]]:
        """Registered connectors and their specs, ordered by name."""
        q = sa.select(s.specs).order_by(
            s.specs.c.pipeline, s.specs.c.table_name, s.specs.c.connector
        )
        if pipeline is not None:
            q = q.where(s.specs.c.pipeline == pipeline)
        with self.tx() as conn:
            rows = conn.execute(q).all()
        return {ConnectorRef(r.pipeline, r.table_name, r.connector): r.spec for r in rows}

    def offsets(self, ref: ConnectorRef) -> list[dict[str, Any]]:
        """Committed offsets per source key."""
        with self.tx() as conn:
            rows = conn.execute(
                sa.select(s.offsets).where(ref.where(s.offsets)).order_by(s.offsets.c.key)
            ).all()
        return [
            {
                "key": r.key,
                "offset": r.offset,
                "records": r.records,
                "completed": bool(r.completed),
                **({"meta": r.meta} if r.meta else {}),
            }
            for r in rows
        ]

    def edit_offsets(self, ref: ConnectorRef, entries: Sequence[dict[str, Any]] | None) -> None:
        """Set the offsets of the given keys (``offset: None`` forgets a key), or forget
        every key (``entries=None``). Only a stopped connector's offsets may change:
        nothing is in flight then."""
        with self.tx() as conn:
            stopped = conn.execute(
                sa.select(s.connectors.c.stopped).where(ref.where(s.connectors))
            ).scalar()
            if not stopped:
                raise ConnectorNotStopped(
                    f"connector {ref} is not stopped; stop it first (its planned batches are "
                    "then released), edit its offsets, then resume it"
                )
            in_flight = conn.execute(
                sa.select(sa.func.count())
                .select_from(s.batches)
                .where(ref.where(s.batches), s.batches.c.status == "planned")
            ).scalar()
            if in_flight:
                raise ConnectorNotStopped(
                    f"connector {ref} has {in_flight} planned batch(es) in flight; stop it "
                    "again (which releases them), then edit its offsets"
                )
            if entries is None:
                conn.execute(sa.delete(s.offsets).where(ref.where(s.offsets)))
            for e in entries or ():
                where = sa.and_(ref.where(s.offsets), s.offsets.c.key == e["key"])
                conn.execute(sa.delete(s.offsets).where(where))
                if e.get("offset") is not None:
                    conn.execute(
                        sa.insert(s.offsets).values(
                            pipeline=ref.pipeline,
                            table_name=ref.table,
                            connector=ref.connector,
                            key=e["key"],
                            offset=int(e["offset"]),
                            records=int(e.get("records", 0)),
                            completed=bool(e.get("completed", False)),
                            meta=e.get("meta"),
                            batch_id=0,
                        )
                    )
            # The input is no longer known to be exhausted, and re-reading it is a new
            # finish: its `finished` event is emitted again.
            conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors))
                .values(
                    end_of_input=False,
                    finished_at=None,
                    finished_signalled_for=None,
                    finished_signal_run=None,
                    updated_at=time.time(),
                )
            )

    def set_stopped(self, ref: ConnectorRef, stopped: bool) -> None:
        self._update_connector(ref, stopped=stopped)

    def set_restarting(self, ref: ConnectorRef) -> None:
        """Kafka Connect's RESTARTING, until the next batch commits or fails."""
        self._update_connector(ref, state="RESTARTING")

    def batch_error(self, batch_id: int) -> str | None:
        """The latest error recorded for a batch (the trace of its failed task)."""
        with self.tx() as conn:
            return conn.execute(
                sa.select(s.errors.c.message)
                .where(s.errors.c.batch_id == batch_id)
                .order_by(s.errors.c.id.desc())
                .limit(1)
            ).scalar()

    def drop_planned_batch(self, batch_id: int) -> bool:
        """Forget a planned (uncommitted) batch: its items become new work again."""
        with self.tx() as conn:
            n = conn.execute(
                sa.delete(s.batches).where(
                    s.batches.c.batch_id == batch_id, s.batches.c.status == "planned"
                )
            ).rowcount
        return n == 1

    # --- signals to Airflow --------------------------------------------------------

    def signal_new_data(self, ref: ConnectorRef, fingerprint: str) -> bool:
        """Record that the new-data trigger fires for ``fingerprint``; False when it
        already fired for exactly that (a restarted trigger seeing the same data)."""
        with self.tx() as conn:
            self.ensure_connector(ref, conn)
            n = conn.execute(
                sa.update(s.connectors)
                .where(
                    ref.where(s.connectors),
                    sa.or_(
                        s.connectors.c.new_data_signal.is_(None),
                        s.connectors.c.new_data_signal != fingerprint,
                    ),
                )
                .values(new_data_signal=fingerprint)
            ).rowcount
        return n == 1

    def claim_finished_signal(self, ref: ConnectorRef, run_id: str) -> bool:
        """True when the connector is finished and its `finished` event has not been
        emitted yet (or was claimed by ``run_id`` itself, on a retry of that task).

        As Feldera's end of input, a connector finishes once: later runs that ingest new
        data and reach end of input again emit no second event, so a ``start_after``
        dependent runs once. Editing or resetting the offsets (stop, edit, resume) starts
        a new finish, whose event is emitted again."""
        with self.tx() as conn:
            c = s.connectors.c
            row = conn.execute(
                sa.select(
                    c.end_of_input, c.finished_at, c.finished_signalled_for, c.finished_signal_run
                ).where(ref.where(s.connectors))
            ).first()
            if row is None or not row.end_of_input or row.finished_at is None:
                return False
            pending = conn.execute(
                sa.select(sa.func.count())
                .select_from(s.batches)
                .where(ref.where(s.batches), s.batches.c.status == "planned")
            ).scalar()
            if pending:
                return False
            if row.finished_signalled_for is not None and row.finished_signal_run != run_id:
                return False
            conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors))
                .values(finished_signalled_for=row.finished_at, finished_signal_run=run_id)
            )
        return True

    # --- status -------------------------------------------------------------------

    def status(self, ref: ConnectorRef) -> ConnectorState | None:
        with self.tx() as conn:
            row = conn.execute(sa.select(s.connectors).where(ref.where(s.connectors))).first()
            if row is None:
                return None
            pending = conn.execute(
                sa.select(s.batches.c.planned_records, s.batches.c.planned_items).where(
                    ref.where(s.batches), s.batches.c.status == "planned"
                )
            ).all()
            errs = conn.execute(
                sa.select(s.errors).where(ref.where(s.errors)).order_by(s.errors.c.id)
            ).all()
        st = ConnectorState(
            ref=ref,
            paused=row.paused,
            end_of_input=bool(row.end_of_input),
            total_records=row.total_records,
            total_bytes=row.total_bytes,
            num_parse_errors=row.num_parse_errors,
            num_transport_errors=row.num_transport_errors,
            fatal_error=row.fatal_error,
            state=row.state,
            stopped=bool(row.stopped),
            finished_at=row.finished_at,
            # Records of planned batches; where a transport cannot count ahead (files),
            # each planned work item counts as one record so `buffered_records == 0`
            # still means nothing is in flight.
            buffered_records=sum(
                p.planned_records if p.planned_records is not None else p.planned_items
                for p in pending
            ),
            buffered_batches=len(pending),
        )
        for e in errs:
            entry = {
                "timestamp": _iso(e.timestamp),
                "index": e.id,
                "tag": e.source_key,
                "message": e.message,
            }
            if e.record_number is not None:
                entry["record_number"] = e.record_number
            (st.parse_errors if e.kind == "parse" else st.transport_errors).append(entry)
        return st

    def known_connectors(self, pipeline: str | None = None) -> list[ConnectorRef]:
        with self.tx() as conn:
            q = sa.select(
                s.connectors.c.pipeline, s.connectors.c.table_name, s.connectors.c.connector
            )
            if pipeline:
                q = q.where(s.connectors.c.pipeline == pipeline)
            return [ConnectorRef(*r) for r in conn.execute(q).all()]

    @property
    def safe_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)


def _batch(r: Any) -> Batch:
    return Batch(
        batch_id=r.batch_id,
        ref=ConnectorRef(r.pipeline, r.table_name, r.connector),
        status=r.status,
        plan=r.plan,
        planned_records=r.planned_records,
        planned_items=r.planned_items,
        attempt=r.attempt,
        published=bool(r.published),
        records=r.records,
        committed_at=r.committed_at,
        created_at=r.created_at,
    )


def _iso(ts: float) -> str:
    import datetime as dt

    return (
        dt.datetime.fromtimestamp(ts, dt.UTC)
        .isoformat(timespec="microseconds")
        .replace("+00:00", "Z")
    )


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # pysqlite's own transaction handling lets DDL autocommit and begins lazily; take it
    # over so every transaction (migrations included) is one atomic unit.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=60000")
    cur.close()


def _sqlite_begin(conn: sa.Connection) -> None:
    # IMMEDIATE: take the write lock up front, so two processes committing (or migrating)
    # at once queue on busy_timeout instead of failing on a stale snapshot.
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _total(values: list[int | None]) -> int | None:
    """The sum, or None when any value is unknown."""
    if any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)
