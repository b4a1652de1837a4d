"""Coordination with Airflow: the discovery lease, the new-data trigger's last signal,
and the once-per-finish claim of the ``finished`` asset event."""

from __future__ import annotations

import time

import sqlalchemy as sa

from airflow_connectors.state import schema as s
from airflow_connectors.state.connectors import Connectors
from airflow_connectors.state.records import BatchStatus, ConnectorRef


class Signals(Connectors):
    """Leases and signals kept on the connector's row."""

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
        """Give the connector's lease back; a no-op when ``owner`` no longer holds it."""
        with self.tx() as conn:
            conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors), s.connectors.c.lease_owner == owner)
                .values(lease_owner=None, lease_until=None)
            )

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
                .where(ref.where(s.batches), s.batches.c.status == BatchStatus.PLANNED.value)
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
