"""The batch protocol: plan, attempt, commit (offsets, metrics and the batch state in
one transaction), publish, fail and release. See the protocol at the top of
``engine/batch.py``; offsets change only in :meth:`Batches.commit_batch`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from airflow_connectors import failpoints
from airflow_connectors.state import ranges, watermark
from airflow_connectors.state import schema as s
from airflow_connectors.state.connectors import Connectors
from airflow_connectors.state.plan import BatchPlan
from airflow_connectors.state.records import (
    Batch,
    BatchStatus,
    ConnectorRef,
    ConnectorStatus,
    ConnectorStopped,
    ErrorRecord,
    ItemReceipt,
)
from airflow_connectors.transports.base import Cursor, KeyOffset


class Batches(Connectors):
    """Batches of a connector (``ac_batches``) and the offsets their commits write."""

    def cursor(self, ref: ConnectorRef) -> Cursor:
        """What discovery starts from: the committed offset of every key, the keys of
        planned (uncommitted) batches as in flight, when the connector first discovered,
        and its watermark (see :mod:`.watermark`)."""
        with self.tx() as conn:
            # In-flight keys first: a batch committing meanwhile then shows up in flight
            # or in the offsets read after (PostgreSQL reads each statement afresh).
            in_flight = watermark.in_flight(conn, ref)
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
            mark = watermark.load(conn, ref)
        return Cursor(
            offsets={
                r.key: KeyOffset(r.offset, r.records, bool(r.completed), r.meta or {}) for r in rows
            },
            in_flight=in_flight,
            first_discovered_at=first,
            watermark=mark.watermark,
            late_after=mark.late_after,
            since_relist=mark.since_relist,
        )

    def pending_batches(self, ref: ConnectorRef) -> list[Batch]:
        """Batches planned and not yet committed (or released), oldest first."""
        return self._batches(ref, s.batches.c.status == BatchStatus.PLANNED.value)

    def unpublished_batches(self, ref: ConnectorRef) -> list[Batch]:
        """Committed batches whose sink output is not yet published, oldest first: a
        run that crashed between commit and publish left them."""
        return self._batches(
            ref,
            sa.and_(
                s.batches.c.status == BatchStatus.COMMITTED.value, s.batches.c.published.is_(False)
            ),
        )

    def batches(self, ref: ConnectorRef) -> list[Batch]:
        """Every batch of the connector, in any status, oldest first."""
        return self._batches(ref, sa.true())

    def last_committed_at(self, ref: ConnectorRef) -> float | None:
        """When the connector's latest batch committed (epoch seconds); None when none
        has (what a ``freshness`` alert compares with)."""
        with self.tx() as conn:
            value = conn.execute(
                sa.select(sa.func.max(s.batches.c.committed_at)).where(
                    ref.where(s.batches), s.batches.c.status == BatchStatus.COMMITTED.value
                )
            ).scalar()
        return None if value is None else float(value)

    def batch_counts(self, pipeline: str) -> tuple[int, int]:
        """How many batches the pipeline's connectors planned (still planned or
        committed) and how many of them committed: Feldera's initiated and completed
        steps (a batch is this engine's step; released batches are gone)."""
        committed = sa.func.sum(
            sa.case((s.batches.c.status == BatchStatus.COMMITTED.value, 1), else_=0)
        )
        with self.tx() as conn:
            row = conn.execute(
                sa.select(sa.func.count(), committed).where(s.batches.c.pipeline == pipeline)
            ).one()
        return int(row[0] or 0), int(row[1] or 0)

    def _batches(self, ref: ConnectorRef, cond: sa.ColumnElement[bool]) -> list[Batch]:
        with self.tx() as conn:
            rows = conn.execute(
                sa.select(s.batches)
                .where(ref.where(s.batches), cond)
                .order_by(s.batches.c.batch_id)
            ).all()
        return [_batch(r) for r in rows]

    def plan_batches(
        self,
        ref: ConnectorRef,
        plans: Sequence[BatchPlan],
        now: float | None = None,
        *,
        listed: bool = False,
        relisted_at: float | None = None,
    ) -> list[int]:
        """Persist batch plans before any data moves; returns their ids.

        ``listed``: the plans come from a discovery that listed the source (also when
        ``plans`` is empty): in the same transaction, ``relisted_at`` (the listing was a
        complete re-list and every item it yielded is in ``plans``) becomes the
        connector's ``late_after`` and restarts its re-list count; without it the count
        goes up by one (see :mod:`.watermark`)."""
        for plan in plans:
            if plan.ref != ref:
                raise ValueError(f"a batch plan of connector {plan.ref} given for {ref}")
        now = now or time.time()
        ids: list[int] = []
        with self.tx() as conn:
            self.ensure_connector(ref, conn)
            stopped = conn.execute(
                sa.select(s.connectors.c.stopped).where(ref.where(s.connectors))
            ).scalar()
            # Ranges of a key committed ahead of a range a stop released are not read
            # again: the transport resumes from the key's prefix, and only the gap is
            # planned (state/ranges.py).
            plans = ranges.clip(conn, ref, plans)
            if not plans:
                if listed and not stopped:
                    watermark.record_listing(conn, ref, relisted_at)
                return ids
            if stopped:
                # A run that passed its gate before the stop: plan nothing, so the
                # offsets stay still while they may be edited.
                raise ConnectorStopped(
                    f"connector {ref} was stopped while this run was planning; nothing was "
                    "planned. Resume it to run it again."
                )
            for plan in plans:
                items = plan.items
                counts = [i.records for i in items]
                sizes = [i.end - i.start if i.end is not None else None for i in items]
                result = conn.execute(
                    sa.insert(s.batches).values(
                        pipeline=ref.pipeline,
                        table_name=ref.table,
                        connector=ref.connector,
                        status=BatchStatus.PLANNED.value,
                        plan=plan.stored(),
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
                .values(end_of_input=False, state=ConnectorStatus.RUNNING.value, updated_at=now)
            )
            if listed:
                watermark.record_listing(conn, ref, relisted_at)
        return ids

    def load_batch(self, batch_id: int) -> Batch:
        """The batch ``batch_id``; raises ``KeyError`` when the store has none."""
        with self.tx() as conn:
            row = conn.execute(sa.select(s.batches).where(s.batches.c.batch_id == batch_id)).first()
        if row is None:
            raise KeyError(f"batch {batch_id} does not exist in the state store {self.safe_url}")
        return _batch(row)

    def start_attempt(self, batch_id: int) -> int:
        """Count one more attempt at the batch; returns the attempt number (1 for the
        first). Raises ``KeyError`` when the batch is gone (a stop released it)."""
        with self.tx() as conn:
            conn.execute(
                sa.update(s.batches)
                .where(s.batches.c.batch_id == batch_id)
                .values(attempts=s.batches.c.attempts + 1)
            )
            attempts = conn.execute(
                sa.select(s.batches.c.attempts).where(s.batches.c.batch_id == batch_id)
            ).scalar()
        if attempts is None:
            raise KeyError(f"batch {batch_id} does not exist (a stop released it)")
        return int(attempts)

    def commit_batch(
        self,
        batch_id: int,
        attempt: str,
        receipts: Sequence[ItemReceipt],
        errors: Sequence[ErrorRecord],
        on_commit: Callable[[sa.Connection], object] | None = None,
        *,
        planned_at: float | None = None,
    ) -> bool:
        """Offsets, metrics, errors and the batch state in one transaction. Returns
        False (and changes nothing) when the commit is refused: the batch is already
        committed (another attempt won), or it was released by a stop (its row is gone,
        or, with ``planned_at``, the batch's ``created_at`` as the attempt loaded it,
        the id now names a batch planned since), or its connector is stopped (a stop is
        releasing it). The caller then drops its staged output: the state store decides
        between a stop and a commit of the same batch, the connector's row being held by
        both (``set_stopped`` updates it, a commit locks it), so a batch is either
        committed (then published, never discarded) or released, never both.
        ``on_commit`` runs last inside that transaction (a batch's new schema version
        commits with it); what it raises rolls the whole commit back and is raised.

        A key's offsets row only ever holds its contiguous committed prefix: the range
        of a key another planned batch has an earlier range of is kept aside until the
        prefix reaches it (:mod:`.ranges`), so a stop that releases the earlier range
        leaves no gap."""
        now = time.time()
        with self.tx() as conn:
            row = conn.execute(
                sa.select(
                    s.batches.c.status,
                    s.batches.c.pipeline,
                    s.batches.c.table_name,
                    s.batches.c.connector,
                    s.batches.c.created_at,
                    s.batches.c.plan,
                )
                .where(s.batches.c.batch_id == batch_id)
                .with_for_update()
            ).first()
            if row is None or row.status != BatchStatus.PLANNED.value:
                return False
            if planned_at is not None and row.created_at != planned_at:
                return False
            ref = ConnectorRef(row.pipeline, row.table_name, row.connector)
            # Commits of one connector take turns: each moves the watermark from the
            # one the previous left. The lock also orders this commit with a stop.
            watermark.load(conn, ref, lock=True)
            stopped = conn.execute(
                sa.select(s.connectors.c.stopped).where(ref.where(s.connectors))
            ).scalar()
            if stopped:
                return False
            updated = conn.execute(
                sa.update(s.batches)
                .where(
                    s.batches.c.batch_id == batch_id,
                    s.batches.c.status == BatchStatus.PLANNED.value,
                )
                .values(
                    status=BatchStatus.COMMITTED.value,
                    attempt=attempt,
                    committed_at=now,
                    records=sum(r.records for r in receipts),
                    bytes=sum(r.bytes for r in receipts),
                    parse_errors=sum(r.bad for r in receipts),
                    executors=executor_totals(receipts),
                )
            ).rowcount
            if updated != 1:
                return False
            contiguous, ahead = ranges.split(conn, ref, row.plan, receipts, batch_id)
            _write_offsets(conn, ref, contiguous, batch_id)
            ranges.keep_ahead(conn, ref, ahead)
            ranges.join(conn, ref)
            watermark.advance(conn, ref)
            c = s.connectors.c
            conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors))
                .values(
                    total_records=c.total_records + sum(r.records for r in receipts),
                    total_bytes=c.total_bytes + sum(r.bytes for r in receipts),
                    num_parse_errors=c.num_parse_errors + sum(r.bad for r in receipts),
                    # Unreadable objects a batch skipped (errors.tolerance: all), and
                    # transient errors its reads retried.
                    num_transport_errors=c.num_transport_errors
                    + sum(e.kind == "transport" for e in errors)
                    + sum(r.retries for r in receipts),
                    fatal_error=None,
                    state=ConnectorStatus.RUNNING.value,
                    updated_at=now,
                )
            )
            self._add_errors(conn, ref, errors, batch_id, now)
            if on_commit is not None:
                on_commit(conn)
        return True

    def mark_published(self, batch_id: int) -> None:
        """Record that the batch's sink output was published (idempotent)."""
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
                if status != BatchStatus.PLANNED.value:
                    return False
            self.ensure_connector(ref, conn)
            c = s.connectors.c
            bump = (
                {"num_transport_errors": c.num_transport_errors + 1} if kind == "transport" else {}
            )
            conn.execute(
                sa.update(s.connectors)
                .where(ref.where(s.connectors))
                .values(
                    fatal_error=message, state=ConnectorStatus.FAILED.value, updated_at=now, **bump
                )
            )
            self._add_errors(
                conn, ref, [ErrorRecord(kind, message, source_key, record_number)], batch_id, now
            )
        return True

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
        """Forget a planned (uncommitted) batch: its items become new work again (keys
        that opted in to the watermark get an incomplete offsets row, see
        :func:`.watermark.release`; ranges of its keys that later batches committed
        stay kept, see :mod:`.ranges`). A stop calls it after dropping the batch's
        staged output. Fail point ``before_release``: a stop that dropped the staged
        output and has not released the batch yet (a test lines a commit up there)."""
        failpoints.reach("before_release")
        with self.tx() as conn:
            row = conn.execute(
                sa.select(s.batches.c.plan)
                .where(
                    s.batches.c.batch_id == batch_id,
                    s.batches.c.status == BatchStatus.PLANNED.value,
                )
                .with_for_update()
            ).first()
            if row is None:
                return False
            n = conn.execute(
                sa.delete(s.batches).where(
                    s.batches.c.batch_id == batch_id,
                    s.batches.c.status == BatchStatus.PLANNED.value,
                )
            ).rowcount
            if n == 1:
                plan = BatchPlan.from_json(row.plan, batch_id=batch_id, attempt="")
                watermark.release(conn, plan.ref, plan.items)
        return n == 1


#: Keys per ``IN (...)`` list when looking up which offsets rows exist.
_KEYS_PER_QUERY = 500
#: The offsets columns a commit writes for each key.
_OFFSET_FIELDS = ("offset", "records", "completed", "meta", "batch_id")


def _behind(receipt: ItemReceipt, stored: tuple[int, Any]) -> bool:
    """Whether ``receipt`` would move its key's offset back within the same reading of
    the key (same ``meta``): one discovery may plan several ranges of one key into
    batches (datagen's row ranges of a plan), which Airflow runs side by side, and when
    a later range commits first the earlier one's commit must not lower the offset, or
    the next discovery would plan the later range again. A receipt with other ``meta``
    starts a new reading of the key (``postgres_input`` reuses a range's key for each
    incremental window, counting from 0): it replaces the row. (Offset edits do not go
    through a commit.)"""
    offset, meta = stored
    return receipt.offset < offset and json.loads(json.dumps(dict(receipt.meta or {}))) == meta


def _write_offsets(
    conn: sa.Connection, ref: ConnectorRef, receipts: Sequence[ItemReceipt], batch_id: int
) -> None:
    """Upsert one offsets row per receipt: one lookup of the existing keys per 500, then
    one executemany UPDATE and one INSERT (a batch of 5,000 small files took tens of
    seconds as two statements per receipt)."""
    rows = {
        r.key: {
            "k": r.key,
            "offset": r.offset,
            "records": r.records_done + r.records + r.bad,
            "completed": r.completed,
            "meta": r.meta,
            "batch_id": batch_id,
        }
        for r in receipts
    }
    keys = list(rows)
    receipts_by = {r.key: r for r in receipts}
    existing: dict[str, tuple[int, Any]] = {}
    for i in range(0, len(keys), _KEYS_PER_QUERY):
        chunk = keys[i : i + _KEYS_PER_QUERY]
        found = conn.execute(
            sa.select(s.offsets.c.key, s.offsets.c.offset, s.offsets.c.meta).where(
                ref.where(s.offsets), s.offsets.c.key.in_(chunk)
            )
        )
        existing.update((key, (int(at), meta or {})) for key, at, meta in found)
    updates = [rows[k] for k in keys if k in existing and not _behind(receipts_by[k], existing[k])]
    inserts = [rows[k] for k in keys if k not in existing]
    if updates:
        conn.execute(
            sa.update(s.offsets)
            .where(ref.where(s.offsets), s.offsets.c.key == sa.bindparam("k"))
            .values({f: sa.bindparam(f"v_{f}") for f in _OFFSET_FIELDS}),
            [{"k": v["k"], **{f"v_{f}": v[f] for f in _OFFSET_FIELDS}} for v in updates],
        )
    if inserts:
        conn.execute(
            sa.insert(s.offsets),
            [
                {
                    "pipeline": ref.pipeline,
                    "table_name": ref.table,
                    "connector": ref.connector,
                    "key": v["k"],
                    **{f: v[f] for f in _OFFSET_FIELDS},
                }
                for v in inserts
            ],
        )


def executor_totals(receipts: Sequence[ItemReceipt]) -> list[dict[str, Any]] | None:
    """What :attr:`Batch.executors` holds: per Spark executor of the receipts (host, id,
    dir), the work items it read and the good records it wrote; sorted by host, dir, id.
    None when no receipt says which executor read it."""
    totals: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in receipts:
        if not r.executor:
            continue
        e = r.executor
        key = (str(e.get("host", "")), str(e.get("dir", "")), str(e.get("id", "")))
        entry = totals.setdefault(
            key, {"host": key[0], "id": key[2], "dir": key[1], "items": 0, "records": 0}
        )
        entry["items"] += 1
        entry["records"] += r.records
    return [totals[k] for k in sorted(totals)] or None


def _batch(r: Any) -> Batch:
    return Batch(
        batch_id=r.batch_id,
        ref=ConnectorRef(r.pipeline, r.table_name, r.connector),
        status=BatchStatus(r.status),
        plan=BatchPlan.from_json(r.plan, batch_id=r.batch_id, attempt=""),
        planned_records=r.planned_records,
        planned_items=r.planned_items,
        attempt=r.attempt,
        published=bool(r.published),
        records=r.records,
        bytes=r.bytes,
        parse_errors=r.parse_errors,
        committed_at=r.committed_at,
        created_at=r.created_at,
        executors=r.executors,
    )


def _total(values: list[int | None]) -> int | None:
    """The sum, or None when any value is unknown."""
    if any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)
