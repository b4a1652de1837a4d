"""Which Spark executors ran a batch: receipts name their executor, the commit keeps the
items and records per executor on the batch (schema version 7), on SQLite and
PostgreSQL, including a store migrated from version 6 with batches committed before."""

from __future__ import annotations

import json
from dataclasses import replace

import sqlalchemy as sa
from test_store import REF, plan, receipt

from airflow_connectors.state import schema
from airflow_connectors.state.batches import executor_totals
from airflow_connectors.state.store import BatchStatus, StateStore

W0 = {"host": "h", "id": "0", "dir": "/w0/app-1/0"}
W1 = {"host": "h", "id": "1", "dir": "/w1/app-1/1"}


def test_commit_keeps_items_and_records_per_executor(store_url: str) -> None:
    store = StateStore(store_url)
    try:
        [b] = store.plan_batches(REF, [plan("a", "b", "c")])
        assert store.load_batch(b).executors is None  # planned: not run yet
        receipts = [
            replace(receipt("a", 5), executor=W1),
            replace(receipt("b", 3, bad=2), executor=W0),
            replace(receipt("c", 7), executor=W1),
        ]
        assert store.commit_batch(b, "1-x", receipts, [])
        batch = store.load_batch(b)
        assert batch.status == BatchStatus.COMMITTED
        assert batch.executors == [
            {**W0, "items": 1, "records": 3},
            {**W1, "items": 2, "records": 12},
        ]
        assert [x.executors for x in store.batches(REF)] == [batch.executors]
    finally:
        store.close()


def test_receipts_without_executor_store_none() -> None:
    assert executor_totals([receipt("a")]) is None
    assert executor_totals([receipt("a"), replace(receipt("b"), executor=W0)]) == [
        {**W0, "items": 1, "records": 5}
    ]


def test_receipt_json_round_trip_carries_the_executor() -> None:
    r = replace(receipt("a"), executor=W0)
    assert type(r)(**json.loads(json.dumps(r.to_json()))) == r


def test_v6_store_migrates_and_keeps_its_batches(store_url: str) -> None:
    engine = sa.create_engine(store_url)
    schema.migrate(engine, target=6)
    with engine.begin() as conn:
        assert "executors" not in {c["name"] for c in sa.inspect(conn).get_columns("ac_batches")}
        conn.execute(
            sa.text(
                "INSERT INTO ac_batches (pipeline, table_name, connector, status, plan, "
                "planned_items, attempts, created_at, published, records) "
                "VALUES ('p', 't', 'c', 'committed', :plan, 1, 1, 0, TRUE, 5)"
            ),
            {"plan": json.dumps(plan("old").stored())},
        )
    engine.dispose()
    store = StateStore(store_url)  # opening migrates to 7
    try:
        with store.tx() as conn:
            assert schema._current_version(conn) == schema.LATEST == 10
        old = store.load_batch(1)
        assert (old.status, old.records, old.executors) == (BatchStatus.COMMITTED, 5, None)
        [b] = store.plan_batches(REF, [plan("new")])
        assert store.commit_batch(b, "1-y", [replace(receipt("new"), executor=W0)], [])
        assert store.load_batch(b).executors == [{**W0, "items": 1, "records": 5}]
    finally:
        store.close()
