"""Ranges of a key committed ahead of an earlier, uncommitted range (``ac_offset_ranges``).

One discovery may plan several ranges of one key into batches that run side by side
(``datagen`` plans row ranges of a plan: A = [0,100), B = [100,200)). When B commits
while A is still planned, the key's offsets row must not jump to B's end: a stop may
release A, and the next discovery, resuming from the offset, would never read [0,100).
Nor may it stay behind B without a trace: the next discovery would plan B's rows again.

So a key's offsets row holds only its **contiguous committed prefix**, and a commit
whose range starts after an earlier range of the same key that another batch still has
planned keeps its receipt here (:func:`keep_ahead`), at the start of its range. Then:

- a commit that moves the prefix up to (or past) a kept range's start joins the range
  to the prefix: the offsets row becomes what the range's receipt said (:func:`join`);
- a discovery that plans a kept range again (the transport resumes from the prefix and
  knows nothing of the range) has it cut out of its work items (:func:`clip`): exactly
  the unread ranges are planned, nothing is read twice;
- editing a key's offsets (a stopped connector) forgets its kept ranges (:func:`forget`);
- the watermark never passes a key with a kept range (:func:`keys`).

Every function runs inside the caller's transaction (the batch commit's, which holds
the connector row, or discovery's planning transaction).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from airflow_connectors.state import schema as s
from airflow_connectors.state.plan import BatchPlan
from airflow_connectors.state.records import BatchStatus, ConnectorRef, ItemReceipt
from airflow_connectors.transports.base import WorkItem


@dataclass(frozen=True)
class Ahead:
    """A committed range ``[start, offset)`` of ``key`` kept until the prefix reaches it."""

    key: str
    start: int
    offset: int
    records: int  # records of the key up to ``offset``
    completed: bool
    meta: dict[str, Any] | None
    batch_id: int


def _starts(plan: Mapping[str, Any], starts: dict[str, int]) -> None:
    """Lower ``starts`` (key -> lowest start) by the work items of a stored plan."""
    for item in plan.get("items") or ():
        key, start = str(item["key"]), int(item.get("start") or 0)
        if key not in starts or start < starts[key]:
            starts[key] = start


def planned_starts(conn: sa.Connection, ref: ConnectorRef) -> dict[str, int]:
    """Per key, the lowest start of a work item of the connector's planned batches."""
    plans = conn.execute(
        sa.select(s.batches.c.plan).where(
            ref.where(s.batches), s.batches.c.status == BatchStatus.PLANNED.value
        )
    ).scalars()
    starts: dict[str, int] = {}
    for plan in plans:
        _starts(plan, starts)
    return starts


def split(
    conn: sa.Connection,
    ref: ConnectorRef,
    plan: Mapping[str, Any],
    receipts: Sequence[ItemReceipt],
    batch_id: int,
) -> tuple[list[ItemReceipt], list[Ahead]]:
    """A committing batch's receipts (``plan`` is its stored plan; its row is no longer
    planned): those that extend their key's prefix, and those of keys whose earlier
    range another batch still has planned, as :class:`Ahead` ranges. A key's last
    receipt in the batch is its offset."""
    mine: dict[str, int] = {}
    _starts(plan, mine)
    others = planned_starts(conn, ref)
    last = {r.key: r for r in receipts}
    ahead_keys = {key for key in last if key in others and key in mine and others[key] < mine[key]}
    contiguous = [r for r in receipts if r.key not in ahead_keys]
    ahead = [
        Ahead(
            key=key,
            start=mine[key],
            offset=last[key].offset,
            records=last[key].records_done + last[key].records + last[key].bad,
            completed=last[key].completed,
            meta=last[key].meta,
            batch_id=batch_id,
        )
        for key in sorted(ahead_keys)
    ]
    return contiguous, ahead


def keep_ahead(conn: sa.Connection, ref: ConnectorRef, ahead: Sequence[Ahead]) -> None:
    """Keep committed ranges until their key's prefix reaches them."""
    for a in ahead:
        where = sa.and_(ref.where(s.ranges), s.ranges.c.key == a.key, s.ranges.c.start == a.start)
        conn.execute(sa.delete(s.ranges).where(where))
        conn.execute(
            sa.insert(s.ranges).values(
                pipeline=ref.pipeline,
                table_name=ref.table,
                connector=ref.connector,
                key=a.key,
                start=a.start,
                offset=a.offset,
                records=a.records,
                completed=a.completed,
                meta=a.meta,
                batch_id=a.batch_id,
            )
        )


def _kept(conn: sa.Connection, ref: ConnectorRef) -> dict[str, list[Ahead]]:
    rows = conn.execute(
        sa.select(s.ranges).where(ref.where(s.ranges)).order_by(s.ranges.c.key, s.ranges.c.start)
    ).all()
    kept: dict[str, list[Ahead]] = {}
    for r in rows:
        kept.setdefault(r.key, []).append(
            Ahead(r.key, int(r.start), int(r.offset), int(r.records), bool(r.completed),
                  r.meta, int(r.batch_id))
        )  # fmt: skip
    return kept


def keys(conn: sa.Connection, ref: ConnectorRef) -> frozenset[str]:
    """The keys that have a kept range (their prefix has a gap below it)."""
    return frozenset(
        conn.execute(sa.select(s.ranges.c.key).where(ref.where(s.ranges)).distinct()).scalars()
    )


def join(conn: sa.Connection, ref: ConnectorRef) -> None:
    """After a commit wrote its offsets: kept ranges that the prefix of their key now
    reaches join it (in order; a range already covered is dropped)."""
    kept = _kept(conn, ref)
    if not kept:
        return
    rows = {
        r.key: r
        for r in conn.execute(
            sa.select(s.offsets.c.key, s.offsets.c.offset).where(
                ref.where(s.offsets), s.offsets.c.key.in_(sorted(kept))
            )
        )
    }
    for key, ranges in kept.items():
        if key not in rows:
            continue  # nothing of the key before its first kept range has committed
        pos = int(rows[key].offset)
        joined: list[Ahead] = []
        for a in ranges:
            if a.start > pos:
                break  # a gap remains below this range
            joined.append(a)
            if a.offset > pos:
                pos = a.offset
                conn.execute(
                    sa.update(s.offsets)
                    .where(ref.where(s.offsets), s.offsets.c.key == key)
                    .values(
                        offset=a.offset,
                        records=a.records,
                        completed=a.completed,
                        meta=a.meta,
                        batch_id=a.batch_id,
                    )
                )
        for a in joined:
            conn.execute(
                sa.delete(s.ranges).where(
                    ref.where(s.ranges), s.ranges.c.key == key, s.ranges.c.start == a.start
                )
            )


def forget(conn: sa.Connection, ref: ConnectorRef, key: str | None = None) -> None:
    """Forget the kept ranges of ``key`` (None: of every key): its offsets were edited."""
    cond = (
        ref.where(s.ranges) if key is None else sa.and_(ref.where(s.ranges), s.ranges.c.key == key)
    )
    conn.execute(sa.delete(s.ranges).where(cond))


def clip(conn: sa.Connection, ref: ConnectorRef, plans: Sequence[BatchPlan]) -> list[BatchPlan]:
    """``plans`` without the kept (committed) ranges in their work items; a plan left
    without items is dropped."""
    kept = _kept(conn, ref)
    if not kept:
        return list(plans)
    out = []
    for plan in plans:
        items = [piece for item in plan.items for piece in _clip(item, kept.get(item.key, ()))]
        if items:
            out.append(dataclasses.replace(plan, items=tuple(items)))
    return out


def _clip(item: WorkItem, ranges: Iterable[Ahead]) -> list[WorkItem]:
    """The parts of ``item`` outside the committed ``ranges`` (sorted by start)."""
    pieces: list[WorkItem] = []
    pos, done = item.start, item.records_done
    for a in ranges:
        if a.offset <= pos:
            continue
        if item.end is not None and a.start >= item.end:
            break
        if a.start > pos:
            pieces.append(_piece(item, pos, a.start, done))
        pos, done = a.offset, a.records
    if item.end is None or pos < item.end:
        pieces.append(_piece(item, pos, item.end, done))
    return pieces


def _piece(item: WorkItem, start: int, end: int | None, done: int) -> WorkItem:
    """``item`` cut to ``[start, end)``; its record count stays known where records
    are the range's own units (generators' row ranges)."""
    if (start, end, done) == (item.start, item.end, item.records_done):
        return item
    counted = item.end is not None and item.records == item.end - item.start
    records = end - start if counted and end is not None else None
    return dataclasses.replace(item, start=start, end=end, records_done=done, records=records)
