"""Applying a batch's changes to a keyed table: what the ``delta``, ``iceberg`` and
``postgres`` sinks share (pure pyarrow; the sinks read and write their own storage).

A keyed table (``primary_key``) keeps, beside itself, a **key-state table**
``<table>__keys``: per key the mark of the last change applied to it and whether that
change deleted it (:func:`state_schema`). A change's **mark** is ``(sequence, batch,
order)``: the ``sequence_by`` value (the batch id when the table has none), the batch id
and the change's place in its batch (:data:`~airflow_connectors.changes.ORDER`).

Publishing a batch:

1. :func:`collapse` the batch's staged changes to one per key: the last by mark; a
   partial update is folded onto the key's earlier change in the batch.
2. :func:`resolve` against the key-state rows of those keys: a change applies when its
   key is unknown or its mark is at least the known one. Equal marks are the same change
   (a re-run of a batch whose publish crashed half way): it applies again, which changes
   nothing. An older change never wins, whichever order batches publish in
   (``tasks_max`` > 1): a deleted key's tombstone keeps its mark for the table's
   ``tombstone_retention`` (default 7 days), so an older insert arriving later does not
   bring the row back. After that the tombstone is dropped (:func:`tombstone_cutoff_ms`).
3. The sink commits the key-state rows first, then the table's deletes and upserts in
   one commit that records the batch. A crash between the two re-runs both: the marks
   are equal, so the changes apply again.

A truncate (:data:`~airflow_connectors.changes.TRUNCATE`) orders by arrival only
(batch, then order): the changes before it in its batch are dropped, and rows the table
holds from earlier batches go (:func:`truncated_keys`). Its mark is kept as the table's
*floor*: a key-state row whose key columns are null. A change below the floor never
applies.

Publishes of one table must not interleave: a sink holds :func:`table_lock` (or a lock
of its own storage) from reading the key state to its last commit.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_connectors.changes import DELETE, OP, ORDER, SET, TRUNCATE, UPDATE, UPSERT

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.sinks.base import Sink
    from airflow_connectors.spec.models import TableSpec

#: Columns of the key-state table after the key columns.
SEQ = "__seq"
BATCH = "__batch"
DELETED = "__deleted"
CHANGED_MS = "__changed_ms"


def state_schema(table: TableSpec) -> pa.Schema:
    """The key-state table ``<table>__keys``: the key columns (nullable: the floor row
    has none), ``__seq`` (``sequence_by``'s type, else int64), ``__batch``,
    ``__order``, ``__deleted`` and ``__changed_ms`` (when it was written, epoch ms)."""
    import pyarrow as pa

    schema = table.arrow_schema()
    keys = [pa.field(k, schema.field(k).type) for k in table.primary_key]
    return pa.schema(
        [
            *keys,
            pa.field(SEQ, _seq_type(table)),
            pa.field(BATCH, pa.int64(), nullable=False),
            pa.field(ORDER, pa.int64(), nullable=False),
            pa.field(DELETED, pa.bool_(), nullable=False),
            pa.field(CHANGED_MS, pa.int64(), nullable=False),
        ]
    )


def _seq_type(table: TableSpec) -> pa.DataType:
    import pyarrow as pa

    if table.sequence_by is None:
        return pa.int64()
    return table.arrow_schema().field(table.sequence_by).type


def tombstone_cutoff_ms(table: TableSpec, now_ms: int | None = None) -> int:
    """Tombstones (``__deleted``) written before this epoch ms may be dropped."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return now - int(table.tombstone_retention.total_seconds() * 1000)


# --- 1. collapse ------------------------------------------------------------------------


def with_change_columns(staged: pa.Table) -> pa.Table:
    """``staged`` with ``__op``, ``__set`` and ``__order`` (rows staged without them
    are upserts in the order they were staged)."""
    import pyarrow as pa

    from airflow_connectors.changes import op_type, set_type

    n = staged.num_rows
    if OP not in staged.column_names:
        staged = staged.append_column(OP, pa.array([UPSERT] * n, op_type()))
    if SET not in staged.column_names:
        staged = staged.append_column(SET, pa.nulls(n, set_type()))
    if ORDER not in staged.column_names:
        staged = staged.append_column(ORDER, pa.array(range(n), pa.int64()))
    return staged


def collapse(staged: pa.Table, table: TableSpec, batch_id: int) -> pa.Table:
    """One change per key of ``staged`` (a batch's changes: the table's columns and the
    change columns), the last by (sequence, order), a partial update folded onto the
    key's earlier change in the batch. Columns: the table's, ``__op``, ``__set``,
    ``__seq``, ``__batch``, ``__order``. A truncate comes out as a row whose key
    columns are null (the last truncate of the batch; the changes before it are gone)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    staged = with_change_columns(staged)
    names = [c.name for c in table.columns]
    n = staged.num_rows
    seq = (
        staged.column(table.sequence_by)
        if table.sequence_by is not None
        else pa.chunked_array([pa.array([batch_id] * n, pa.int64())])
    )
    base = pa.table(
        {
            **{c: staged.column(c) for c in names},
            OP: staged.column(OP),
            SET: staged.column(SET),
            SEQ: seq,
            BATCH: pa.array([batch_id] * n, pa.int64()),
            ORDER: staged.column(ORDER),
        }
    )
    truncate: pa.Table | None = None
    ops = base.column(OP)
    is_truncate = pc.equal(ops, TRUNCATE)
    if n and pc.any(is_truncate).as_py():
        truncates = base.filter(is_truncate)
        last = truncates.sort_by([(ORDER, "descending")]).slice(0, 1)
        cut = last.column(ORDER)[0].as_py()
        # Arrival order: what came before the last truncate of the batch is gone.
        base = base.filter(pc.and_(pc.invert(is_truncate), pc.greater(base.column(ORDER), cut)))
        truncate = last
    out = _last_per_key(base, table) if base.num_rows else base
    if truncate is not None:
        out = pa.concat_tables([out, truncate.cast(out.schema)]) if out.num_rows else truncate
    return out


def _last_per_key(base: pa.Table, table: TableSpec) -> pa.Table:
    """The last change per key (by sequence, then order), partial updates folded."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = list(table.primary_key)
    ordered = base.sort_by([(SEQ, "ascending"), (ORDER, "ascending")])
    ordered = ordered.append_column("__pos", pa.array(range(ordered.num_rows), pa.int64()))
    has_updates = pc.any(pc.equal(ordered.column(OP), UPDATE)).as_py()
    last = ordered.group_by(keys, use_threads=False).aggregate([("__pos", "max")])
    positions = last.column("__pos_max")
    picked = ordered.take(pc.take(positions, pc.sort_indices(positions)))
    if not has_updates:
        return picked.drop_columns(["__pos"])
    # Keys with a partial update: fold their changes in order (rare; row by row).
    update_keys = ordered.filter(pc.equal(ordered.column(OP), UPDATE)).select(keys)
    folded_keys = {tuple(r.values()) for r in update_keys.to_pylist()}
    key_of = _key_getter(keys)
    rows_by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in ordered.to_pylist():
        k = key_of(row)
        if k in folded_keys:
            rows_by_key.setdefault(k, []).append(row)
    folded = [_fold(rows, [c.name for c in table.columns], keys) for rows in rows_by_key.values()]
    keep = pc.invert(_in_keys(picked, keys, update_keys))
    rest = picked.filter(keep).drop_columns(["__pos"])
    schema = rest.schema
    return pa.concat_tables([rest, pa.Table.from_pylist(folded, schema=schema)])


def _fold(rows: list[dict[str, Any]], columns: list[str], keys: list[str]) -> dict[str, Any]:
    """A key's changes in order as one: an upsert replaces, a delete deletes, an update
    sets its columns on the row before it (or stays a partial update when the batch
    holds no earlier whole row of the key; after a delete it changes nothing)."""
    state: dict[str, Any] | None = None
    for row in rows:
        op = row[OP]
        if op in (UPSERT, DELETE):
            state = dict(row)
            state[SET] = None
        elif state is None:  # a partial update of a row the batch does not hold
            state = dict(row)
            state[SET] = list(row[SET] or [])
        elif state[OP] == DELETE:
            state = {**state, SEQ: row[SEQ], BATCH: row[BATCH], ORDER: row[ORDER]}
        else:
            merged = dict(state)
            for c in row[SET] or []:
                merged[c] = row[c]
            merged[SEQ], merged[BATCH], merged[ORDER] = row[SEQ], row[BATCH], row[ORDER]
            if state[OP] == UPDATE:
                merged[SET] = [c for c in columns if c in {*state[SET], *(row[SET] or [])}]
            state = merged
    assert state is not None
    state.pop("__pos", None)
    return state


def _key_getter(keys: list[str]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    return lambda row: tuple(row[k] for k in keys)


def _in_keys(data: pa.Table, keys: list[str], wanted: pa.Table) -> pa.ChunkedArray:
    """Whether each row of ``data`` has a key among ``wanted``'s rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    marker = wanted.select(keys).group_by(keys, use_threads=False).aggregate([])
    marker = marker.append_column("__hit", pa.array([True] * marker.num_rows))
    indexed = data.select(keys).append_column("__row", pa.array(range(data.num_rows), pa.int64()))
    joined = indexed.join(marker, keys, join_type="left outer", use_threads=False)
    joined = joined.sort_by("__row")
    return pc.fill_null(joined.column("__hit"), False)


# --- 2. resolve -------------------------------------------------------------------------


@dataclass
class Resolved:
    """What a batch does to a keyed table after :func:`resolve`."""

    #: Whole rows to insert or replace: the table's columns and ``__seq``.
    upserts: pa.Table
    #: Keys to delete: the key columns and ``__seq``.
    deletes: pa.Table
    #: Key-state rows to write (insert or replace by key; the floor row by null keys).
    state: pa.Table
    #: Changes not applied: older than what the table holds (or below its floor).
    stale: int = 0
    #: Partial updates of keys the table does not hold (they change nothing).
    missing: int = 0
    #: The batch's truncate as ``(batch, order)``: rows of earlier marks go
    #: (:func:`truncated_keys`), before the upserts. None: no truncate.
    truncate: tuple[int, int] | None = None


def floor_of(known: pa.Table, table: TableSpec) -> tuple[int, int] | None:
    """The floor mark ``(batch, order)`` among ``known`` key-state rows (those whose
    key columns are null), None when the table was never truncated."""
    import pyarrow.compute as pc

    if known.num_rows == 0:
        return None
    mask = None
    for k in table.primary_key:
        m = pc.is_null(known.column(k))
        mask = m if mask is None else pc.and_(mask, m)
    floors = known.filter(mask)
    if floors.num_rows == 0:
        return None
    best = max(zip(floors.column(BATCH).to_pylist(), floors.column(ORDER).to_pylist(), strict=True))
    return (int(best[0]), int(best[1]))


def resolve(
    collapsed: pa.Table,
    known: pa.Table,
    current: Callable[[pa.Table], pa.Table],
    table: TableSpec,
    now_ms: int | None = None,
) -> Resolved:
    """Which of ``collapsed`` (:func:`collapse`) apply, given ``known``: the key-state
    rows the table holds for (at least) those keys, and its floor row if any.
    ``current(keys)`` returns the table's rows for the given keys (key columns); it is
    called for partial updates only."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = list(table.primary_key)
    names = [c.name for c in table.columns]
    now = int(time.time() * 1000) if now_ms is None else now_ms
    sschema = state_schema(table)
    known = known.select(sschema.names).cast(sschema) if known.num_rows else sschema.empty_table()
    floor = floor_of(known, table)
    truncate: tuple[int, int] | None = None
    is_trunc = pc.equal(collapsed.column(OP), TRUNCATE)
    if collapsed.num_rows and pc.any(is_trunc).as_py():
        t = collapsed.filter(is_trunc)
        truncate = (t.column(BATCH)[0].as_py(), t.column(ORDER)[0].as_py())
        collapsed = collapsed.filter(pc.invert(is_trunc))
        if floor is not None and truncate < floor:
            truncate = None  # an older truncate: the newer one already did its work
    n_in = collapsed.num_rows
    # Below the floor (the newer of the table's and this batch's truncate): nothing.
    lowest = max((m for m in (floor, truncate) if m is not None), default=None)
    if lowest is not None and n_in:
        b, o = collapsed.column(BATCH), collapsed.column(ORDER)
        above = pc.or_(
            pc.greater(b, lowest[0]),
            pc.and_(pc.equal(b, lowest[0]), pc.greater_equal(o, lowest[1])),
        )
        collapsed = collapsed.filter(above)
    applies = _not_older(collapsed, known, keys)
    fresh = collapsed.filter(applies)
    stale = n_in - fresh.num_rows
    # Partial updates: onto the table's current rows (a key it does not hold: nothing).
    missing = 0
    is_update = pc.equal(fresh.column(OP), UPDATE)
    if fresh.num_rows and pc.any(is_update).as_py():
        updates = fresh.filter(is_update)
        fresh = fresh.filter(pc.invert(is_update))
        now_rows = {} if truncate is not None else _rows_by_key(current(updates.select(keys)), keys)
        done = []
        for row in updates.to_pylist():
            k = tuple(row[c] for c in keys)
            base = now_rows.get(k)
            if base is None:
                missing += 1
                continue
            merged = {**base, **{c: row[c] for c in row[SET] or []}}
            done.append({**row, **{c: merged.get(c) for c in names}, OP: UPSERT, SET: None})
        if done:
            fresh = pa.concat_tables([fresh, pa.Table.from_pylist(done, schema=fresh.schema)])
    is_delete = pc.equal(fresh.column(OP), DELETE)
    upserts = fresh.filter(pc.invert(is_delete)).select([*names, SEQ])
    deletes = fresh.filter(is_delete).select([*keys, SEQ])
    m = fresh.num_rows
    state = pa.table(
        {
            **{k: fresh.column(k) for k in keys},
            SEQ: fresh.column(SEQ),
            BATCH: fresh.column(BATCH),
            ORDER: fresh.column(ORDER),
            DELETED: is_delete,
            CHANGED_MS: pa.array([now] * m, pa.int64()),
        }
    ).cast(sschema)
    if truncate is not None:
        floor_row = {
            **{k: None for k in keys},
            SEQ: None,
            BATCH: truncate[0],
            ORDER: truncate[1],
            DELETED: True,
            CHANGED_MS: now,
        }
        state = pa.concat_tables([state, pa.Table.from_pylist([floor_row], schema=sschema)])
    return Resolved(upserts, deletes, state, stale, missing, truncate)


def _not_older(changes: pa.Table, known: pa.Table, keys: list[str]) -> pa.ChunkedArray:
    """Per change: its key is unknown, or its mark is at least the known mark."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if changes.num_rows == 0:
        return pa.chunked_array([pa.array([], pa.bool_())])
    mask = None
    for k in keys:
        m = pc.is_valid(known.column(k))
        mask = m if mask is None else pc.and_(mask, m)
    rows = known.filter(mask) if known.num_rows else known
    ks = rows.select([*keys, SEQ, BATCH, ORDER]).rename_columns(
        [*keys, "__kseq", "__kbatch", "__korder"]
    )
    left = changes.select([*keys, SEQ, BATCH, ORDER]).append_column(
        "__row", pa.array(range(changes.num_rows), pa.int64())
    )
    j = left.join(ks, keys, join_type="left outer", use_threads=False).sort_by("__row")
    seq, kseq = j.column(SEQ), j.column("__kseq")
    b, kb = j.column(BATCH), j.column("__kbatch")
    o, ko = j.column(ORDER), j.column("__korder")
    same_seq = pc.equal(seq, kseq)
    newer = pc.or_(
        pc.greater(seq, kseq),
        pc.and_(
            same_seq,
            pc.or_(pc.greater(b, kb), pc.and_(pc.equal(b, kb), pc.greater_equal(o, ko))),
        ),
    )
    unknown = pc.is_null(kb)
    return pc.or_(unknown, pc.fill_null(newer, False))


def _rows_by_key(rows: pa.Table, keys: list[str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(r[k] for k in keys): r for r in rows.to_pylist()}


def truncated_keys(state: pa.Table, table: TableSpec, mark: tuple[int, int]) -> pa.Table:
    """The keys a truncate at ``mark`` removes: every live key of the key-state table
    ``state`` whose last change is older (by batch, then order)."""
    import pyarrow.compute as pc

    keys = list(table.primary_key)
    if state.num_rows == 0:
        return state.select(keys)
    b, o = state.column(BATCH), state.column(ORDER)
    older = pc.or_(pc.less(b, mark[0]), pc.and_(pc.equal(b, mark[0]), pc.less(o, mark[1])))
    live = pc.invert(state.column(DELETED))
    has_key = pc.is_valid(state.column(keys[0]))
    return state.filter(pc.and_(pc.and_(older, live), has_key)).select(keys)


def merge_state(
    old: pa.Table, new: pa.Table, table: TableSpec, now_ms: int | None = None
) -> pa.Table:
    """The key-state table after writing ``new`` rows into ``old``: a key's row is
    replaced, the floor row is the newest floor, and tombstones older than the table's
    ``tombstone_retention`` are dropped. For sinks that rewrite the state table whole."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = list(table.primary_key)
    sschema = state_schema(table)
    old = old.select(sschema.names).cast(sschema) if old.num_rows else sschema.empty_table()
    new = new.select(sschema.names).cast(sschema)
    both = pa.concat_tables([old, new])
    both = both.append_column("__pos", pa.array(range(both.num_rows), pa.int64()))
    has_key = pc.is_valid(both.column(keys[0]))
    keyed = both.filter(has_key)
    last = keyed.group_by(keys, use_threads=False).aggregate([("__pos", "max")])
    kept = both.take(last.column("__pos_max"))
    floor = floor_of(both.drop_columns(["__pos"]), table)
    parts = [kept.drop_columns(["__pos"])]
    if floor is not None:
        floors = both.filter(pc.invert(has_key)).drop_columns(["__pos"])
        fb, fo = floors.column(BATCH), floors.column(ORDER)
        parts.append(
            floors.filter(pc.and_(pc.equal(fb, floor[0]), pc.equal(fo, floor[1]))).slice(0, 1)
        )
    out = pa.concat_tables(parts)
    cutoff = tombstone_cutoff_ms(table, now_ms)
    expired = pc.and_(out.column(DELETED), pc.less(out.column(CHANGED_MS), cutoff))
    expired = pc.and_(expired, pc.is_valid(out.column(keys[0])))  # never the floor
    return out.filter(pc.invert(expired))


# --- the publish lock -------------------------------------------------------------------


@contextlib.contextmanager
def table_lock(sink: Sink) -> Iterator[None]:
    """Hold the publish lock of ``sink``'s table: one publisher at a time reads the key
    state and commits. A PostgreSQL state store gives a session advisory lock (gone
    with the process that held it); otherwise a file lock (``flock``, released by the
    kernel when the holder dies) beside the SQLite state store, or in the temporary
    folder when the sink has no state store."""
    name = f"airflow_connectors.keys:{sink.pipeline}.{sink.table.name}:{sink.location()}"
    url = sink.state_store_url
    if url is not None and url.startswith("postgresql"):
        with _advisory_lock(url, name):
            yield
        return
    folder = tempfile.gettempdir()
    if url is not None and url.startswith("sqlite"):
        from sqlalchemy.engine import make_url

        database = make_url(url).database
        if database and database != ":memory:":
            folder = os.path.dirname(os.path.abspath(database)) or folder
    path = os.path.join(folder, f".airflow-connectors-{_digest(name)}.lock")
    with _file_lock(path):
        yield


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:24]


@contextlib.contextmanager
def _file_lock(path: str) -> Iterator[None]:
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextlib.contextmanager
def _advisory_lock(url: str, name: str) -> Iterator[None]:
    import sqlalchemy as sa

    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": key})
            conn.commit()
            try:
                yield
            finally:
                with contextlib.suppress(Exception):
                    conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                    conn.commit()
    finally:
        engine.dispose()
