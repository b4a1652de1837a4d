"""Connector rows: creation, pipeline and connector flags, end of input, errors and
the status a connector reports."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from airflow_connectors.state import schema as s
from airflow_connectors.state.database import Database
from airflow_connectors.state.records import (
    BatchStatus,
    ConnectorRef,
    ConnectorState,
    ConnectorStatus,
    ErrorRecord,
)

#: Errors kept per connector and kind (Feldera shows the last 100).
MAX_ERRORS = 100


class Connectors(Database):
    """The ``ac_connectors`` and ``ac_pipelines`` rows and the errors a connector lists."""

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
                    state=ConnectorStatus.UNASSIGNED.value,
                    updated_at=time.time(),
                )
            )
        return None

    def _update_connector(self, ref: ConnectorRef, **values: Any) -> None:
        """Set columns of the connector's row (created when missing)."""
        with self.tx() as conn:
            self.ensure_connector(ref, conn)
            conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors))
                .values(**values, updated_at=time.time())
            )

    def pipeline_paused(self, pipeline: str) -> bool:
        """Whether the pipeline was paused (CLI, REST API); False when never set."""
        with self.tx() as conn:
            row = conn.execute(
                sa.select(s.pipelines.c.paused).where(s.pipelines.c.pipeline == pipeline)
            ).first()
        return bool(row[0]) if row else False

    def set_pipeline_paused(self, pipeline: str, paused: bool) -> None:
        """Pause or resume every connector of the pipeline; the connectors' own flags are kept."""
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
        """Pause or resume one connector; ``None`` goes back to the spec's ``paused``."""
        self._update_connector(ref, paused=paused)

    def set_stopped(self, ref: ConnectorRef, stopped: bool) -> None:
        """Set the Kafka Connect STOPPED flag; releasing the planned batches is the caller's work."""
        self._update_connector(ref, stopped=stopped)

    def set_restarting(self, ref: ConnectorRef) -> None:
        """Kafka Connect's RESTARTING, until the next batch commits or fails, or the
        restarted work ends without one (:meth:`restart_done`)."""
        self._update_connector(ref, state=ConnectorStatus.RESTARTING.value)

    def restart_done(self, ref: ConnectorRef) -> None:
        """A restart's work ended without a commit or a failure to say so (a rerun task
        whose batch was already committed, a run that found nothing new): a RESTARTING
        connector is RUNNING again. Any other state is left as it is."""
        with self.tx() as conn:
            state = conn.execute(
                sa.select(s.connectors.c.state).where(ref.where(s.connectors))
            ).scalar()
            if state != ConnectorStatus.RESTARTING.value:
                return  # nothing written: every run's finalize asks this
            conn.execute(
                sa.update(s.connectors)
                .where(
                    ref.where(s.connectors),
                    s.connectors.c.state == ConnectorStatus.RESTARTING.value,
                )
                .values(state=ConnectorStatus.RUNNING.value, updated_at=time.time())
            )

    def set_end_of_input(self, ref: ConnectorRef, end_of_input: bool) -> None:
        """Record whether the connector reached end of input; the first time it does,
        ``finished_at`` is set. Writes nothing when the flag is already so: every poll
        that finds nothing new asks this, and a write is a disk sync."""
        now = time.time()
        with self.tx() as conn:
            self.ensure_connector(ref, conn)
            values: dict[str, Any] = {"end_of_input": end_of_input, "updated_at": now}
            prev = conn.execute(
                sa.select(s.connectors.c.end_of_input).where(ref.where(s.connectors))
            ).scalar()
            if prev is not None and bool(prev) == end_of_input:
                return
            if end_of_input and not prev:
                values["finished_at"] = now
            conn.execute(sa.update(s.connectors).where(ref.where(s.connectors)).values(**values))

    def set_lag(self, ref: ConnectorRef, lag: int) -> None:
        """Record the source's lag as a discovery measured it (``ConnectorState.lag``)."""
        self._update_connector(ref, lag=lag)

    def clear_failure(self, ref: ConnectorRef) -> None:
        """A failure not tied to a planned batch is over (a later discovery succeeded):
        the connector is no longer FAILED; its errors stay in the error lists."""
        with self.tx() as conn:
            conn.execute(
                sa.update(s.connectors)
                .where(
                    ref.where(s.connectors),
                    s.connectors.c.state == ConnectorStatus.FAILED.value,
                )
                .values(
                    state=ConnectorStatus.RUNNING.value, fatal_error=None, updated_at=time.time()
                )
            )

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

    def status(self, ref: ConnectorRef) -> ConnectorState | None:
        """The connector's stored state with its counters, what planned batches hold
        (``buffered_*``) and its recent errors; ``None`` when the store never saw it."""
        with self.tx() as conn:
            row = conn.execute(sa.select(s.connectors).where(ref.where(s.connectors))).first()
            if row is None:
                return None
            pending = conn.execute(
                sa.select(
                    s.batches.c.planned_records,
                    s.batches.c.planned_items,
                    s.batches.c.planned_bytes,
                ).where(ref.where(s.batches), s.batches.c.status == BatchStatus.PLANNED.value)
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
            state=ConnectorStatus(row.state),
            stopped=bool(row.stopped),
            finished_at=row.finished_at,
            lag=row.lag,
            # Records of planned batches; where a transport cannot count ahead (files),
            # each planned work item counts as one record so `buffered_records == 0`
            # still means nothing is in flight.
            buffered_records=sum(
                p.planned_records if p.planned_records is not None else p.planned_items
                for p in pending
            ),
            buffered_bytes=sum(p.planned_bytes or 0 for p in pending),
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

    def first_discovered_at(self, pipeline: str) -> float | None:
        """When the pipeline's first connector first planned a batch (epoch seconds), or
        None: Feldera's ``created_at`` of the pipeline."""
        with self.tx() as conn:
            value = conn.execute(
                sa.select(sa.func.min(s.connectors.c.first_discovered_at)).where(
                    s.connectors.c.pipeline == pipeline
                )
            ).scalar()
        return None if value is None else float(value)

    def known_connectors(self, pipeline: str | None = None) -> list[ConnectorRef]:
        """Every connector the store has a row for (of ``pipeline``, when given), whether
        or not a spec still names it."""
        with self.tx() as conn:
            q = sa.select(
                s.connectors.c.pipeline, s.connectors.c.table_name, s.connectors.c.connector
            )
            if pipeline:
                q = q.where(s.connectors.c.pipeline == pipeline)
            return [ConnectorRef(*r) for r in conn.execute(q).all()]


def _iso(ts: float) -> str:
    import datetime as dt

    return (
        dt.datetime.fromtimestamp(ts, dt.UTC)
        .isoformat(timespec="microseconds")
        .replace("+00:00", "Z")
    )
