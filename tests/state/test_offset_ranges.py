"""Ranges of a key committed out of order (state/ranges.py), on SQLite and PostgreSQL:
a key's offsets row holds only its contiguous committed prefix, a range committed ahead
of an earlier planned one joins it when the prefix reaches it, a re-plan never reads
it again, the watermark never passes its key, an offsets edit forgets it; and the
commit refusals a stop relies on (issue 22, item 10)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from helpers import pipeline

from airflow_connectors.state import ranges
from airflow_connectors.state.store import BatchPlan, ConnectorRef, ItemReceipt, StateStore
from airflow_connectors.transports import WorkItem
from airflow_connectors.transports.base import MTIME

REF = ConnectorRef("p", "t", "c")
DATAGEN = {"name": "datagen", "config": {"plan": [{"limit": 5}]}}
TABLE = pipeline(
    {"t": {"columns": {"id": "BIGINT"}, "connectors": [{"name": "c", "transport": DATAGEN}]}}
).tables[0]


def plan(*items: WorkItem) -> BatchPlan:
    return BatchPlan(
        pipeline="p",
        table=TABLE.model_copy(update={"connectors": ()}),
        connector=TABLE.connectors[0],
        warehouse="wh",
        items=tuple(items),
    )


def rows(key: str, start: int, end: int, **meta: object) -> WorkItem:
    """A row range of ``key`` as a generator plans it (records = rows, done = start)."""
    return WorkItem(key, start=start, end=end, records_done=start, records=end - start, meta=meta)


def receipts(store: StateStore, batch_id: int) -> list[ItemReceipt]:
    return [
        ItemReceipt(
            key=i.key,
            offset=i.end or 0,
            records=(i.end or 0) - i.start,
            bad=0,
            bytes=0,
            completed=True,
            records_done=i.records_done,
            meta=dict(i.meta) or None,
        )
        for i in store.load_batch(batch_id).plan.items
    ]


def commit(store: StateStore, batch_id: int) -> bool:
    return store.commit_batch(batch_id, f"{batch_id}-x", receipts(store, batch_id), [])


def offsets(store: StateStore) -> dict[str, tuple[int, int]]:
    return {o["key"]: (o["offset"], o["records"]) for o in store.offsets(REF)}


def spans(plans: Sequence[BatchPlan]) -> list[list[tuple[str, int, int | None, int, int | None]]]:
    return [[(i.key, i.start, i.end, i.records_done, i.records) for i in p.items] for p in plans]


def test_a_range_committed_ahead_joins_the_prefix_when_it_reaches_it(store_url: str) -> None:
    store = StateStore(store_url)
    a, b, c = store.plan_batches(
        REF, [plan(rows("k", 0, 100)), plan(rows("k", 100, 200)), plan(rows("k", 200, 300))]
    )
    assert commit(store, c) and offsets(store) == {}  # ahead of a and b: kept aside
    assert commit(store, b) and offsets(store) == {}
    assert commit(store, a) and offsets(store) == {"k": (300, 300)}  # all joined
    with store.tx() as conn:
        assert ranges.keys(conn, REF) == frozenset()
    store.close()


def test_a_replan_reads_only_what_is_not_committed(store_url: str) -> None:
    """b = [100,200) committed ahead; a = [0,100) and d = [300,400) are released. A new
    plan of the whole key from its prefix is cut around b: [0,100) and [200,...)."""
    store = StateStore(store_url)
    a, b = store.plan_batches(REF, [plan(rows("k", 0, 100)), plan(rows("k", 100, 200))])
    assert commit(store, b)
    store.set_stopped(REF, True)
    assert store.drop_planned_batch(a)
    store.set_stopped(REF, False)
    assert store.cursor(REF).get("k") is None  # the prefix: nothing yet
    [x, y] = store.plan_batches(REF, [plan(rows("k", 0, 150)), plan(rows("k", 150, 400))])
    assert spans([store.load_batch(x).plan, store.load_batch(y).plan]) == [
        [("k", 0, 100, 0, 100)],
        [("k", 200, 400, 200, 200)],
    ]
    # A plan whose every item is committed already is not planned at all.
    assert store.plan_batches(REF, [plan(rows("k", 100, 200))]) == []
    assert commit(store, x) and offsets(store) == {"k": (200, 200)}
    assert commit(store, y) and offsets(store) == {"k": (400, 400)}
    store.close()


def test_clip_cuts_items_around_committed_ranges() -> None:
    kept = [
        ranges.Ahead("k", 100, 200, 200, True, None, 2),
        ranges.Ahead("k", 300, 350, 350, True, None, 3),
    ]
    assert ranges._clip(rows("k", 0, 400), kept) == [
        rows("k", 0, 100),
        rows("k", 200, 300),
        rows("k", 350, 400),
    ]
    assert ranges._clip(rows("k", 120, 180), kept) == []
    assert ranges._clip(rows("k", 150, 250), kept) == [rows("k", 200, 250)]
    # Ranges of bytes: the record count of a cut item is no longer known.
    whole = WorkItem("k", start=0, end=None, size=1000, records=7)
    assert ranges._clip(whole, kept) == [
        WorkItem("k", start=0, end=100, size=1000, records=None),
        WorkItem("k", start=200, end=300, records_done=200, size=1000, records=None),
        WorkItem("k", start=350, end=None, records_done=350, size=1000, records=None),
    ]


@pytest.mark.slow
def test_the_watermark_never_passes_a_key_with_a_gap(store_url: str) -> None:
    store = StateStore(store_url)
    a, b, c = store.plan_batches(
        REF,
        [
            plan(rows("k1", 0, 10, **{MTIME: 1.0})),
            plan(rows("k1", 10, 20, **{MTIME: 1.0})),
            plan(rows("k2", 0, 10, **{MTIME: 1.0})),
        ],
    )
    assert commit(store, b) and commit(store, c)
    store.set_stopped(REF, True)
    assert store.drop_planned_batch(a)
    store.set_stopped(REF, False)
    assert store.cursor(REF).watermark is None  # k1 has a gap below its committed range
    # The released range gets an incomplete row at its start (state/watermark.py).
    assert offsets(store)["k1"] == (0, 0)
    [again] = store.plan_batches(REF, [plan(rows("k1", 0, 20, **{MTIME: 1.0}))])
    assert spans([store.load_batch(again).plan]) == [[("k1", 0, 10, 0, 10)]]
    assert commit(store, again)
    assert offsets(store)["k1"] == (20, 20)
    assert store.cursor(REF).watermark == "k2"
    store.close()


def test_an_offsets_edit_forgets_the_ranges_of_its_keys(store_url: str) -> None:
    store = StateStore(store_url)
    a, b = store.plan_batches(REF, [plan(rows("k", 0, 100)), plan(rows("k", 100, 200))])
    assert commit(store, b)
    store.set_stopped(REF, True)
    assert store.drop_planned_batch(a)
    store.edit_offsets(REF, [{"key": "k", "offset": 50, "records": 50}])
    store.set_stopped(REF, False)
    [x] = store.plan_batches(REF, [plan(rows("k", 50, 200))])
    assert spans([store.load_batch(x).plan]) == [[("k", 50, 200, 50, 150)]]
    store.close()


def test_commits_a_stop_decides_against_are_refused(store_url: str) -> None:
    """A stopped connector's batch does not commit (the stop is releasing it); a
    released batch does not either, nor does a batch planned since under its id."""
    store = StateStore(store_url)
    [a] = store.plan_batches(REF, [plan(rows("k", 0, 10))])
    made = store.load_batch(a).created_at
    read = receipts(store, a)
    store.set_stopped(REF, True)
    assert not store.commit_batch(a, "1-x", read, [])
    assert store.drop_planned_batch(a)
    assert not store.commit_batch(a, "1-x", read, [])  # gone
    store.set_stopped(REF, False)
    [again] = store.plan_batches(REF, [plan(rows("k", 0, 10))])
    late = receipts(store, again)
    if again == a:  # SQLite gives the released id to the next batch
        assert not store.commit_batch(a, "1-late", late, [], planned_at=made)
    assert store.commit_batch(again, "1-x", late, [], planned_at=store.load_batch(again).created_at)
    assert offsets(store) == {"k": (10, 10)}
    store.close()


def test_migration_from_v8_adds_the_ranges_table(store_url: str) -> None:
    import sqlalchemy as sa

    from airflow_connectors.state import schema

    engine = sa.create_engine(store_url)
    try:
        assert schema.migrate(engine, target=8) == 0
        with engine.connect() as conn:
            assert not sa.inspect(conn).has_table("ac_offset_ranges")
        assert schema.migrate(engine) == 8
        with engine.connect() as conn:
            assert sa.inspect(conn).has_table("ac_offset_ranges")
            assert schema._current_version(conn) == schema.LATEST == 10
    finally:
        engine.dispose()
    store = StateStore(store_url)  # a store of the old version works on
    [a] = store.plan_batches(REF, [plan(rows("k", 0, 10))])
    assert commit(store, a) and offsets(store) == {"k": (10, 10)}
    store.close()
