"""The watermark: committed offsets that stay O(keys in flight), not O(keys ever seen).

Per connector the store keeps (``ac_connectors``):

- ``watermark`` W: the greatest key such that every key ``<= W`` is committed. The
  transports list from after it (S3 ``StartAfter``; ``file_input`` skips the sorted
  paths up to it without a ``stat``).
- ``late_after``: the start (source clock, minus a safety margin) of the last complete
  listing ("re-list") whose every item was planned; None until the first one.
- ``since_relist``: discoveries since that re-list; transports re-list everything when
  it reaches their ``relist_every - 1``.
- ``collapsed_to``: the greatest key whose offsets row a collapse dropped (None: none).

**Advance and collapse** (:func:`advance`, in the batch commit's transaction): W moves
to the greatest key k such that every offsets row ``<= k`` is completed and no key of a
planned (in-flight) batch is ``<= k``; it never moves back (a late key in flight below
it does not pull it back). Then the completed rows with a key below W, not in flight,
whose ``meta[MTIME]`` is older than ``late_after`` are deleted. W's own row stays: the
offsets listing shows the key the watermark stands at. Rows without ``MTIME`` (transports
that do not set it: ``url_input``, ``datagen``, ``file_input`` following files) never
collapse.

**Why nothing is lost or read twice.** A transport treats a listed key ``<= W`` that
has no offsets row as committed when its mtime is older than ``late_after``, as new
work otherwise. A dropped row had mtime < ``late_after``, so its key is committed and
stays committed (``late_after`` only grows). A late key, one that appears below W after
the re-list that set ``late_after`` started, was created (or rewritten) after that
start minus the margin the transport subtracts, so its mtime is ``>= late_after``: the
next re-list finds it, and once committed it is read no more. A key a re-list saw but
did not yield (too young to read) lowers that re-list's time to its mtime in the
transport, and ``late_after`` is set only when every item the re-list yielded was
planned. Keys of planned batches that are released without a commit (a stop) get an
incomplete offsets row at their planned start (:func:`release`), so W neither passes
nor forgets them, and the next discovery re-lists to find them; nor does W pass a key
with a range committed ahead of an uncommitted one (:mod:`.ranges`). Editing offsets
keeps the rule (:func:`forget`, :func:`edited`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from airflow_connectors.state import ranges
from airflow_connectors.state import schema as s
from airflow_connectors.state.plan import stored_keys
from airflow_connectors.state.records import BatchStatus, ConnectorRef
from airflow_connectors.transports.base import MTIME, WorkItem

#: ``since_relist`` that makes the next discovery a re-list whatever ``relist_every``.
FORCE_RELIST = 1 << 30

#: Keys per ``DELETE ... WHERE key IN (...)``.
_CHUNK = 500


@dataclass(frozen=True)
class Mark:
    """A connector's watermark state, as stored."""

    watermark: str | None = None
    late_after: float | None = None
    since_relist: int = 0
    collapsed_to: str | None = None


def load(conn: sa.Connection, ref: ConnectorRef, *, lock: bool = False) -> Mark:
    """The connector's watermark state (defaults when it has no row). ``lock``: hold its
    row until the transaction ends, so commits of one connector run one at a time."""
    c = s.connectors.c
    q = sa.select(c.watermark, c.late_after, c.since_relist, c.collapsed_to).where(
        ref.where(s.connectors)
    )
    row = conn.execute(q.with_for_update() if lock else q).first()
    if row is None:
        return Mark()
    return Mark(row.watermark, row.late_after, int(row.since_relist or 0), row.collapsed_to)


def _set(conn: sa.Connection, ref: ConnectorRef, **values: Any) -> None:
    conn.execute(sa.update(s.connectors).where(ref.where(s.connectors)).values(**values))


def in_flight(conn: sa.Connection, ref: ConnectorRef) -> frozenset[str]:
    """The keys of the connector's planned (uncommitted) batches: O(keys in flight)."""
    plans = (
        conn.execute(
            sa.select(s.batches.c.plan).where(
                ref.where(s.batches), s.batches.c.status == BatchStatus.PLANNED.value
            )
        )
        .scalars()
        .all()
    )
    return frozenset().union(*(stored_keys(plan) for plan in plans))


def _older(meta: Mapping[str, Any] | None, late_after: float) -> bool:
    """Whether an offsets row's object was modified before ``late_after``."""
    mtime = (meta or {}).get(MTIME)
    return isinstance(mtime, int | float) and not isinstance(mtime, bool) and mtime < late_after


def next_watermark(
    old: str | None, rows: Iterable[tuple[str, bool]], planned: Iterable[str]
) -> str | None:
    """The greatest key k such that every ``(key, completed)`` row ``<= k`` is completed
    and no planned key is ``<= k``; never below ``old``. Keys compare as Python strings
    (code points: the order of UTF-8 bytes, S3's and the sorted path lists' order),
    never in SQL, whose collation may differ."""
    rows = list(rows)
    blockers = [k for k, done in rows if not done] + list(planned)
    bound = min(blockers) if blockers else None
    candidates = [k for k, done in rows if done and (bound is None or k < bound)]
    best = max(candidates) if candidates else None
    if old is None:
        return best
    return old if best is None or best < old else best


def advance(conn: sa.Connection, ref: ConnectorRef) -> None:
    """After a batch commit wrote its offsets (same transaction, connector row locked):
    move the watermark up and drop the offsets rows it covers (see the module doc)."""
    mark = load(conn, ref)
    # A key with a range committed ahead of its prefix has a gap: never passed.
    planned = in_flight(conn, ref) | ranges.keys(conn, ref)
    rows = conn.execute(
        sa.select(s.offsets.c.key, s.offsets.c.completed, s.offsets.c.meta).where(
            ref.where(s.offsets)
        )
    ).all()
    w = next_watermark(mark.watermark, ((r.key, bool(r.completed)) for r in rows), planned)
    values: dict[str, Any] = {}
    if w != mark.watermark:
        values["watermark"] = w
    if w is not None and mark.late_after is not None:
        late_after = mark.late_after
        doomed = sorted(
            r.key
            for r in rows
            if r.key < w and r.completed and r.key not in planned and _older(r.meta, late_after)
        )
        for i in range(0, len(doomed), _CHUNK):
            conn.execute(
                sa.delete(s.offsets).where(
                    ref.where(s.offsets), s.offsets.c.key.in_(doomed[i : i + _CHUNK])
                )
            )
        if doomed and (mark.collapsed_to is None or doomed[-1] > mark.collapsed_to):
            values["collapsed_to"] = doomed[-1]
    if values:
        _set(conn, ref, **values)


def record_listing(conn: sa.Connection, ref: ConnectorRef, relisted_at: float | None) -> None:
    """A discovery listed the source. ``relisted_at``: it was a complete re-list whose
    every item is planned in this transaction; it becomes ``late_after`` (which never
    goes back) and the re-list count restarts, and the rows it makes old enough
    collapse now (an idle connector's state shrinks too). Otherwise the count goes up
    by one."""
    old = load(conn, ref, lock=True).late_after  # as commits: one at a time
    if relisted_at is None:
        c = s.connectors.c
        _set(conn, ref, since_relist=sa.func.coalesce(c.since_relist, 0) + 1)
        return
    _set(
        conn,
        ref,
        late_after=relisted_at if old is None else max(old, relisted_at),
        since_relist=0,
    )
    advance(conn, ref)


def release(conn: sa.Connection, ref: ConnectorRef, items: Sequence[WorkItem]) -> None:
    """A planned batch is dropped uncommitted (a stop releases it): each of its keys
    that has no offsets row and opted in to the watermark (``MTIME``) gets an incomplete
    row at its planned start, so the watermark cannot pass it and no re-list takes it
    for a collapsed key; the next discovery re-lists."""
    first: dict[str, WorkItem] = {}
    for item in items:
        if MTIME in item.meta:
            first.setdefault(item.key, item)
    if not first:
        return
    have = set(
        conn.execute(
            sa.select(s.offsets.c.key).where(
                ref.where(s.offsets), s.offsets.c.key.in_(sorted(first))
            )
        ).scalars()
    )
    missing = [item for key, item in first.items() if key not in have]
    for item in missing:
        conn.execute(
            sa.insert(s.offsets).values(
                pipeline=ref.pipeline,
                table_name=ref.table,
                connector=ref.connector,
                key=item.key,
                offset=item.start,
                records=item.records_done,
                completed=False,
                meta=dict(item.meta),
                batch_id=0,
            )
        )
    if missing:
        _set(conn, ref, since_relist=FORCE_RELIST)


def forget(
    conn: sa.Connection, ref: ConnectorRef, key: str, meta: Mapping[str, Any] | None
) -> None:
    """``key``'s offsets row was deleted by an edit (read it again from its start).

    Above the watermark nothing more is needed: it is listed again. At or below it, the
    watermark drops to the greatest stored key below ``key`` when no collapsed key lies
    between the two (then ``key`` is listed again, and the keys in between still have
    their rows); otherwise ``key`` gets an incomplete row at offset 0 (shown in the
    offsets listing), which the next discovery, a re-list, reads from the start."""
    mark = load(conn, ref)
    if mark.watermark is None or key > mark.watermark:
        return
    keys = conn.execute(sa.select(s.offsets.c.key).where(ref.where(s.offsets))).scalars()
    p = max((k for k in keys if k < key), default=None)
    if mark.collapsed_to is None or (p is not None and mark.collapsed_to <= p):
        if p is None:  # nothing below: back to listing everything
            _set(conn, ref, watermark=None, late_after=None, since_relist=0, collapsed_to=None)
        else:
            _set(conn, ref, watermark=p)
        return
    conn.execute(
        sa.insert(s.offsets).values(
            pipeline=ref.pipeline,
            table_name=ref.table,
            connector=ref.connector,
            key=key,
            offset=0,
            records=0,
            completed=False,
            meta=dict(meta) if meta else None,
            batch_id=0,
        )
    )
    _set(conn, ref, since_relist=FORCE_RELIST)


def edited(conn: sa.Connection, ref: ConnectorRef, key: str) -> None:
    """``key``'s offsets row was set by an edit: at or below the watermark, the next
    discovery re-lists so the new offset is read from (an incomplete row there also
    keeps the watermark from passing it again; W's own invariant is about the keys'
    rows, which now say what the user set)."""
    mark = load(conn, ref)
    if mark.watermark is not None and key <= mark.watermark:
        _set(conn, ref, since_relist=FORCE_RELIST)


def request_relist(conn: sa.Connection, ref: ConnectorRef) -> None:
    """The next discovery re-lists (a late key below the watermark was seen)."""
    _set(conn, ref, since_relist=FORCE_RELIST)


def reset(conn: sa.Connection, ref: ConnectorRef) -> None:
    """Every offset was forgotten: no watermark, nothing collapsed, list everything."""
    _set(conn, ref, watermark=None, late_after=None, since_relist=0, collapsed_to=None)
