"""Coordination with Airflow: the discovery lease, the new-data trigger's last signal,
and the once-per-finish claim of the ``finished`` asset event.

The discovery (planning) lease is tied to its holder's life: it is short
(:data:`LEASE_TTL`) and renewed by a heartbeat thread while it is held
(:meth:`Signals.hold_lease`), so a holder that dies (SIGKILL, a lost Airflow worker)
frees it within :data:`LEASE_TTL` seconds. A lease whose owner is ``<this host>:<pid>``
(what :func:`local_owner` gives) and whose process no longer exists is free at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import sqlalchemy as sa

from airflow_connectors.state import schema as s
from airflow_connectors.state.connectors import Connectors
from airflow_connectors.state.records import BatchStatus, ConnectorRef

log = logging.getLogger(__name__)

#: Seconds a lease lasts without a renewal: a holder that died frees it after this.
LEASE_TTL = 30.0
#: Seconds between two renewals of a held lease (a third of :data:`LEASE_TTL`, so two
#: renewals may be late before the lease lapses).
LEASE_RENEW_EVERY = 10.0


def local_owner() -> str:
    """This process as a lease owner: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_gone(owner: str) -> bool:
    """Whether ``owner`` names a process of this host (``<this host>:<pid>``) that no
    longer exists (or is a zombie: killed, not yet reaped). False for any other owner
    (another host, an Airflow run id): only its lease's expiry frees those."""
    host, _, pid_text = owner.rpartition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: it exists, as another user's process
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            # "pid (comm) state ...": the state follows the last ")".
            return fh.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False


class Lease:
    """A held lease, renewed every ``every`` seconds by a daemon thread until
    :meth:`release` (or the end of a ``with`` block). A renewal that finds the lease
    taken by another owner (this process stalled past the lease's expiry) sets
    :attr:`lost` and stops renewing."""

    def __init__(
        self, store: Signals, ref: ConnectorRef, owner: str, ttl: float, every: float
    ) -> None:
        self.store, self.ref, self.owner, self.ttl, self.every = store, ref, owner, ttl, every
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if store.lease_shared:
            self._thread = threading.Thread(
                target=self._beat, name=f"lease-heartbeat {ref}", daemon=True
            )
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            try:
                held = self.store.renew_lease(self.ref, self.owner, self.ttl)
            except Exception as e:  # a database hiccup: the next beat tries again
                log.warning("%s: cannot renew the planning lease (%s); retrying", self.ref, e)
                continue
            if not held:
                self.lost = True
                log.warning(
                    "%s: the planning lease of %s lapsed and was taken by another run",
                    self.ref,
                    self.owner,
                )
                return

    def release(self) -> None:
        """Stop renewing and give the lease back (a no-op when it was lost)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.ttl)
        self.store.release_lease(self.ref, self.owner)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Signals(Connectors):
    """Leases and signals kept on the connector's row."""

    @property
    def lease_shared(self) -> bool:
        """Whether other processes see this store's leases (False for an in-memory
        SQLite database, whose leases need no heartbeat)."""
        url = self.engine.url
        return not (url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"))

    def acquire_lease(self, ref: ConnectorRef, owner: str, ttl: float = LEASE_TTL) -> bool:
        """Only one discovery plans for a connector at a time. The lease is free when
        nobody holds it, when it expired, when ``owner`` holds it already (re-entrant),
        or when its holder is a process of this host that no longer exists. Taken
        without a heartbeat: it lapses after ``ttl`` seconds unless renewed
        (:meth:`renew_lease`); :meth:`hold_lease` renews it while it is held."""
        now = time.time()
        with self.tx() as conn:
            self.ensure_connector(ref, conn)
            c = s.connectors.c
            holder = conn.execute(sa.select(c.lease_owner).where(ref.where(s.connectors))).scalar()
            free = [c.lease_owner.is_(None), c.lease_until < now, c.lease_owner == owner]
            dead = holder is not None and holder != owner and holder_gone(holder)
            if dead:
                free.append(c.lease_owner == holder)  # compare-and-set on the dead holder
            n = conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors))
                .where(sa.or_(*free))
                .values(lease_owner=owner, lease_until=now + ttl)
            ).rowcount
        if n == 1 and dead:
            log.info("%s: took over the planning lease of %s, which no longer runs", ref, holder)
        return n == 1

    def hold_lease(
        self,
        ref: ConnectorRef,
        owner: str,
        ttl: float = LEASE_TTL,
        every: float = LEASE_RENEW_EVERY,
    ) -> Lease | None:
        """Acquire the lease (:meth:`acquire_lease`) and renew it every ``every``
        seconds until the returned :class:`Lease` is released; None when another owner
        holds it."""
        if not self.acquire_lease(ref, owner, ttl):
            return None
        return Lease(self, ref, owner, ttl, every)

    def renew_lease(self, ref: ConnectorRef, owner: str, ttl: float = LEASE_TTL) -> bool:
        """Extend ``owner``'s lease to ``ttl`` seconds from now; False when ``owner``
        no longer holds it (released, or taken by another owner after it lapsed)."""
        with self.tx() as conn:
            n = conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors), s.connectors.c.lease_owner == owner)
                .values(lease_until=time.time() + ttl)
            ).rowcount
        return n == 1

    def lease_holder(self, ref: ConnectorRef) -> str | None:
        """The owner of the connector's unexpired lease, if any (for messages)."""
        c = s.connectors.c
        with self.tx() as conn:
            row = conn.execute(
                sa.select(c.lease_owner, c.lease_until).where(ref.where(s.connectors))
            ).first()
        if row is None or row.lease_owner is None or (row.lease_until or 0) < time.time():
            return None
        return str(row.lease_owner)

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
