"""The watermark in the state store (state/watermark.py), on SQLite and PostgreSQL:
it advances at commits, stops at keys in flight, collapses old completed rows below it,
and edits, releases and migrations keep its promise."""

from __future__ import annotations

import json

import sqlalchemy as sa
from helpers import pipeline

from airflow_connectors.state import schema
from airflow_connectors.state.store import BatchPlan, ConnectorRef, ItemReceipt, StateStore
from airflow_connectors.state.watermark import FORCE_RELIST, next_watermark
from airflow_connectors.transports import WorkItem
from airflow_connectors.transports.base import MTIME

REF = ConnectorRef("p", "t", "c")
DATAGEN = {"name": "datagen", "config": {"plan": [{"limit": 5}]}}
TABLE = pipeline(
    {"t": {"columns": {"id": "BIGINT"}, "connectors": [{"name": "c", "transport": DATAGEN}]}}
).tables[0]
OLD = 1_000.0  # mtime of the "old" objects
LATE_AFTER = 2_000.0


def plan(*keys: str, mtime: float | None = OLD) -> BatchPlan:
    meta = {} if mtime is None else {MTIME: mtime}
    return BatchPlan(
        pipeline="p",
        table=TABLE.model_copy(update={"connectors": ()}),
        connector=TABLE.connectors[0],
        warehouse="wh",
        items=tuple(WorkItem(k, start=0, end=10, meta=meta) for k in keys),
    )


def commit(store: StateStore, batch_id: int) -> None:
    items = store.load_batch(batch_id).plan.items
    receipts = [
        ItemReceipt(
            key=i.key,
            offset=10,
            records=1,
            bad=0,
            bytes=10,
            completed=True,
            records_done=0,
            meta=dict(i.meta) or None,
        )
        for i in items
    ]
    assert store.commit_batch(batch_id, f"{batch_id}-x", receipts, [])


def rows(store: StateStore) -> list[str]:
    return [o["key"] for o in store.offsets(REF)]


def test_next_watermark_stops_below_in_flight_and_incomplete_keys() -> None:
    done = [("a", True), ("b", True), ("d", True)]
    assert next_watermark(None, done, []) == "d"
    assert next_watermark(None, done, ["c"]) == "b"
    assert next_watermark(None, [*done, ("c", False)], []) == "b"
    assert next_watermark(None, done, ["a"]) is None
    # Never back: a late key in flight below the watermark does not pull it down.
    assert next_watermark("d", done, ["0-late"]) == "d"
    # Code-point order (UTF-8 byte order), whatever the database's collation.
    assert next_watermark(None, [("B", True), ("a", True), ("é", True)], ["b"]) == "a"


def test_commits_advance_the_watermark_and_collapse_old_rows(store_url: str) -> None:
    store = StateStore(store_url)
    b1, b2 = store.plan_batches(
        REF, [plan("k01", "k02"), plan("k03", "k04")], listed=True, relisted_at=LATE_AFTER
    )
    cur = store.cursor(REF)
    assert (cur.watermark, cur.late_after, cur.since_relist) == (None, LATE_AFTER, 0)
    # b2 commits first: b1's keys are in flight below it, so the watermark stays put.
    commit(store, b2)
    assert store.cursor(REF).watermark is None
    assert rows(store) == ["k03", "k04"]
    commit(store, b1)
    cur = store.cursor(REF)
    assert cur.watermark == "k04" and cur.in_flight == frozenset()
    # Every key below the watermark collapsed; the watermark's own row stays.
    assert rows(store) == ["k04"]
    assert store.watermark(REF) == {"key": "k04", "late_after": LATE_AFTER, "since_relist": 0}
    store.close()


def test_state_stays_bounded_over_many_batches(store_url: str) -> None:
    store = StateStore(store_url)
    store.plan_batches(REF, [], listed=True, relisted_at=LATE_AFTER)  # a first full listing
    most = 0
    for n in range(20):
        keys = [f"obj-{n:03d}-{i:03d}" for i in range(100)]
        [b] = store.plan_batches(REF, [plan(*keys)], listed=True)
        commit(store, b)
        most = max(most, len(rows(store)))
    assert most == 1  # only the watermark's row, whatever was committed before
    assert store.cursor(REF).watermark == "obj-019-099"
    assert store.cursor(REF).since_relist == 20
    store.close()


def test_rows_without_mtime_or_newer_than_the_relist_never_collapse(store_url: str) -> None:
    store = StateStore(store_url)
    [b] = store.plan_batches(REF, [plan("a", "b", mtime=None)], listed=True, relisted_at=5_000.0)
    commit(store, b)
    [b] = store.plan_batches(REF, [plan("c", mtime=6_000.0)], listed=True)
    commit(store, b)
    [b] = store.plan_batches(REF, [plan("d")], listed=True)
    commit(store, b)
    assert store.cursor(REF).watermark == "d"
    # a, b: no mtime (url_input, datagen, followed files); c: changed after the re-list.
    assert rows(store) == ["a", "b", "c", "d"]
    store.close()


def test_an_in_flight_key_blocks_the_watermark_until_it_commits(store_url: str) -> None:
    store = StateStore(store_url)
    b1, b2, b3 = store.plan_batches(
        REF, [plan("a"), plan("b"), plan("c")], listed=True, relisted_at=LATE_AFTER
    )
    commit(store, b1)
    commit(store, b3)
    assert store.cursor(REF).watermark == "a"
    assert rows(store) == ["a", "c"]  # c is above the watermark: kept
    # A late key below the watermark, in flight: the watermark does not move back, and
    # its row is not dropped until the key is committed.
    commit(store, b2)
    assert store.cursor(REF).watermark == "c" and rows(store) == ["c"]
    [late] = store.plan_batches(REF, [plan("0-late")], listed=True)
    assert store.cursor(REF).watermark == "c"
    commit(store, late)
    assert store.cursor(REF).watermark == "c" and rows(store) == ["c"]
    store.close()


def test_incomplete_listings_count_towards_the_next_relist(store_url: str) -> None:
    store = StateStore(store_url)
    store.plan_batches(REF, [], listed=True)
    store.plan_batches(REF, [plan("a")], listed=True)
    assert store.cursor(REF).since_relist == 2 and store.cursor(REF).late_after is None
    store.plan_batches(REF, [plan("b")], listed=True, relisted_at=LATE_AFTER)
    assert store.cursor(REF).since_relist == 0 and store.cursor(REF).late_after == LATE_AFTER
    # late_after never goes back (collapsed keys must stay committed).
    store.plan_batches(REF, [], listed=True, relisted_at=LATE_AFTER - 10)
    assert store.cursor(REF).late_after == LATE_AFTER
    # Plans made without a listing (tests, tools) leave the count alone.
    store.plan_batches(REF, [plan("c")])
    assert store.cursor(REF).since_relist == 0
    store.close()


def test_a_released_batch_keeps_its_keys_as_work(store_url: str) -> None:
    store = StateStore(store_url)
    b1, b2 = store.plan_batches(REF, [plan("a"), plan("b")], listed=True, relisted_at=LATE_AFTER)
    store.set_stopped(REF, True)
    assert store.drop_planned_batch(b1)
    # "a" has no row and an old mtime: without its incomplete row, a watermark that
    # passed it would make it look collapsed.
    (a,) = store.offsets(REF)
    assert (a["key"], a["offset"], a["completed"]) == ("a", 0, False)
    assert store.cursor(REF).since_relist == FORCE_RELIST  # the next discovery re-lists
    store.set_stopped(REF, False)
    commit(store, b2)
    assert store.cursor(REF).watermark is None  # "a" is not committed
    [again] = store.plan_batches(REF, [plan("a")], listed=True, relisted_at=LATE_AFTER + 1)
    commit(store, again)
    assert store.cursor(REF).watermark == "b" and rows(store) == ["b"]
    store.close()


def test_editing_offsets_keeps_the_watermark_true(store_url: str) -> None:
    store = StateStore(store_url)
    [b] = store.plan_batches(REF, [plan("a", "b")], listed=True, relisted_at=LATE_AFTER)
    commit(store, b)
    for key in "cd":  # modified after the re-list: not collapsed
        [b] = store.plan_batches(REF, [plan(key, mtime=LATE_AFTER + 1)], listed=True)
        commit(store, b)
    assert store.cursor(REF).watermark == "d" and rows(store) == ["c", "d"]
    store.set_stopped(REF, True)
    # Forget d (the watermark's key): c is stored and nothing collapsed above it, so the
    # watermark drops to c and d is listed again.
    store.edit_offsets(REF, [{"key": "d", "offset": None}])
    assert store.cursor(REF).watermark == "c" and rows(store) == ["c"]
    # Forget c: a and b collapsed below it, so lowering the watermark would read them
    # again; c gets an incomplete row at 0 instead, found by the next discovery's re-list.
    store.edit_offsets(REF, [{"key": "c", "offset": None}])
    cur = store.cursor(REF)
    assert cur.watermark == "c" and cur.since_relist == FORCE_RELIST
    (c,) = store.offsets(REF)
    assert (c["key"], c["offset"], c["completed"], c["records"]) == ("c", 0, False, 0)
    # Resetting everything forgets the watermark too.
    store.edit_offsets(REF, None)
    cur = store.cursor(REF)
    assert (cur.watermark, cur.late_after, cur.since_relist, cur.offsets) == (None, None, 0, {})
    assert store.watermark(REF) is None
    store.close()


def test_a_v5_store_migrates_and_its_offsets_get_a_watermark(store_url: str) -> None:
    engine = sa.create_engine(store_url)
    schema.migrate(engine, target=5)
    with engine.begin() as conn:
        assert "watermark" not in {c["name"] for c in sa.inspect(conn).get_columns("ac_connectors")}
        conn.execute(
            sa.text(
                "INSERT INTO ac_connectors (pipeline, table_name, connector, end_of_input, "
                "total_records, total_bytes, num_parse_errors, num_transport_errors, state, "
                "updated_at, stopped) VALUES ('p', 't', 'c', false, 1, 10, 0, 0, 'RUNNING', 0, "
                "false)"
            )
        )
        conn.execute(
            sa.text(
                'INSERT INTO ac_offsets (pipeline, table_name, connector, key, "offset", '
                "records, completed, meta, batch_id) VALUES ('p', 't', 'c', 'a', 10, 1, true, "
                ":meta, 1)"
            ),
            {"meta": json.dumps({MTIME: OLD})},
        )
        conn.execute(
            sa.text(
                "INSERT INTO ac_batches (pipeline, table_name, connector, status, plan, "
                "planned_items, attempts, created_at, published) "
                "VALUES ('p', 't', 'c', 'planned', :plan, 1, 0, 0, false)"
            ),
            {"plan": json.dumps(plan("b").stored())},
        )
    engine.dispose()
    store = StateStore(store_url)  # opening migrates
    with store.tx() as conn:
        assert schema._current_version(conn) == schema.LATEST == 10
    cur = store.cursor(REF)
    assert (cur.watermark, cur.late_after, cur.since_relist) == (None, None, 0)
    assert cur.in_flight == {"b"} and cur.get("a") is not None
    [pending] = store.pending_batches(REF)
    store.plan_batches(REF, [], listed=True, relisted_at=LATE_AFTER)
    commit(store, pending.batch_id)
    assert store.cursor(REF).watermark == "b" and rows(store) == ["b"]
    store.close()
