"""The state store on SQLite and on the machine's PostgreSQL."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from helpers import pipeline

from airflow_connectors.state import schema
from airflow_connectors.state.store import (
    BatchPlan,
    ConnectorRef,
    ErrorRecord,
    ItemReceipt,
    StateStore,
    StateStoreUnavailable,
)
from airflow_connectors.transports import WorkItem

REF = ConnectorRef("p", "t", "c")
DATAGEN = {"name": "datagen", "config": {"plan": [{"limit": 5}]}}
TABLE = pipeline(
    {"t": {"columns": {"id": "BIGINT"}, "connectors": [{"name": "c", "transport": DATAGEN}]}}
).tables[0]


def plan(*keys: str, records: int | None = None) -> BatchPlan:
    return BatchPlan(
        pipeline="p",
        table=TABLE.model_copy(update={"connectors": ()}),
        connector=TABLE.connectors[0],
        warehouse="wh",
        items=tuple(WorkItem(k, start=0, end=10, records=records) for k in keys),
    )


def receipt(key: str, records: int = 5, bad: int = 0) -> ItemReceipt:
    return ItemReceipt(
        key=key, offset=10, records=records, bad=bad, bytes=10, completed=True, records_done=0
    )


def test_plan_commit_offsets_metrics_in_one_step(store_url: str) -> None:
    store = StateStore(store_url)
    [b1] = store.plan_batches(REF, [plan("a", "b")])
    assert store.cursor(REF).in_flight == {"a", "b"}
    st = store.status(REF)
    assert (
        st is not None and st.buffered_batches == 1 and st.buffered_records == 2 and not st.finished
    )
    assert st.buffered_bytes == 20  # two items of 10 bytes planned (Feldera's buffered_bytes)
    assert store.batch_counts("p") == (1, 0)  # Feldera's initiated and completed steps
    assert store.commit_batch(
        b1, "1-x", [receipt("a"), receipt("b", 3, 2)], [ErrorRecord("parse", "bad", "b", 4)]
    )
    cur = store.cursor(REF)
    assert cur.in_flight == frozenset()
    assert cur.get("b") is not None and cur.get("b").records == 5 and cur.get("b").completed  # type: ignore[union-attr]
    st = store.status(REF)
    assert st is not None
    assert (st.total_records, st.num_parse_errors, st.total_bytes, st.buffered_records) == (
        8,
        2,
        20,
        0,
    )
    assert st.parse_errors[0]["message"] == "bad" and st.parse_errors[0]["record_number"] == 4
    assert st.buffered_bytes == 0
    store.plan_batches(REF, [plan("c")])
    assert store.batch_counts("p") == (2, 1) and store.batch_counts("other") == (0, 0)
    # A committed batch cannot commit again: offsets and metrics stay as they are.
    assert not store.commit_batch(b1, "2-y", [receipt("a", 100)], [])
    st = store.status(REF)
    assert st is not None and st.total_records == 8
    committed = store.load_batch(b1)
    assert committed.attempt == "1-x"
    assert (committed.records, committed.bytes) == (8, 20)  # what lineage events report
    store.close()


def test_a_plan_reads_back_as_written(store_url: str) -> None:
    store = StateStore(store_url)
    [b] = store.plan_batches(REF, [plan("a", "b", records=4)])
    batch = store.load_batch(b)
    assert batch.plan == replace(plan("a", "b", records=4), batch_id=b)
    assert batch.plan.ref == REF and (batch.planned_items, batch.planned_records) == (2, 8)
    running = replace(batch.plan, attempt="1-x")  # what a Spark task receives
    assert BatchPlan.from_json(json.loads(json.dumps(running.to_json()))) == running
    inferred = replace(running, schema_version=3)  # a table whose columns are inferred
    assert BatchPlan.from_json(json.loads(json.dumps(inferred.stored()))).schema_version == 3
    with pytest.raises(ValueError, match=r"a batch plan of connector p\.t\.c given for p\.t\.d"):
        store.plan_batches(ConnectorRef("p", "t", "d"), [plan("x")])
    store.close()


def test_plans_of_earlier_versions_are_read() -> None:
    # No batch_id or attempt (the row holds them), keys this version does not know.
    doc = plan("a").to_json()
    del doc["batch_id"], doc["attempt"]
    old = doc | {"future": 1, "items": [{"key": "a", "start": 0, "end": 10, "new": True}]}
    assert BatchPlan.from_json(old, batch_id=7) == replace(plan("a"), batch_id=7)


def test_errors_keep_last_100(store_url: str) -> None:
    store = StateStore(store_url)
    for i in range(3):
        [b] = store.plan_batches(REF, [plan(f"k{i}")])
        store.commit_batch(
            b, "a", [receipt(f"k{i}")], [ErrorRecord("parse", f"e{i}-{j}") for j in range(60)]
        )
    st = store.status(REF)
    assert st is not None
    assert len(st.parse_errors) == 100
    assert st.parse_errors[-1]["message"] == "e2-59" and st.parse_errors[0]["message"] == "e1-20"
    store.close()


def test_leases_flags_and_failures(store_url: str) -> None:
    store = StateStore(store_url)
    assert store.acquire_lease(REF, "one", ttl=60)
    assert not store.acquire_lease(REF, "two", ttl=60)
    assert store.acquire_lease(REF, "one", ttl=60)  # re-entrant for its owner
    store.release_lease(REF, "one")
    assert store.acquire_lease(REF, "two", ttl=-1)  # expired lease
    assert store.acquire_lease(REF, "three")
    assert not store.pipeline_paused("p")
    store.set_pipeline_paused("p", True)
    assert store.pipeline_paused("p")
    store.set_connector_paused(REF, True)
    st = store.status(REF)
    assert st is not None and st.paused is True
    store.record_failure(REF, "connector p.t.c: GET x answered HTTP 500", batch_id=None)
    st = store.status(REF)
    assert (
        st is not None and st.state == "FAILED" and st.fatal_error and st.num_transport_errors == 1
    )
    store.close()


def test_schema_migrates_forward_from_v1(store_url: str) -> None:
    engine = sa.create_engine(store_url)
    schema.migrate(engine, target=1)
    with engine.begin() as conn:
        assert schema._current_version(conn) == 1
        assert "published" not in {c["name"] for c in sa.inspect(conn).get_columns("ac_batches")}
        conn.execute(
            sa.text(
                "INSERT INTO ac_batches (pipeline, table_name, connector, status, plan, planned_items, attempts, created_at) "
                "VALUES ('p', 't', 'c', 'committed', :plan, 0, 1, 0)"
            ),
            {"plan": json.dumps(plan().stored())},
        )
    engine.dispose()
    store = StateStore(store_url)  # opening migrates
    with store.tx() as conn:
        assert schema._current_version(conn) == schema.LATEST == 10
        columns = {c["name"] for c in sa.inspect(conn).get_columns("ac_connectors")}
        assert {
            "new_data_signal",
            "finished_signalled_for",
            "finished_signal_run",
            "stopped",
            "lag",
        } <= columns
        assert not sa.inspect(conn).has_table("ac_specs")  # made by v4, dropped by v5
    assert store.unpublished_batches(REF) == []  # v1's committed batch counts as published
    assert StateStore(store_url).load_batch(1).published
    store.close()


def test_lag_is_kept_with_the_status_and_survives_the_v10_migration(store_url: str) -> None:
    engine = sa.create_engine(store_url)
    schema.migrate(engine, target=9)
    with engine.begin() as conn:  # a connector row written before the column existed
        conn.execute(
            sa.text(
                "INSERT INTO ac_connectors (pipeline, table_name, connector, end_of_input, "
                "total_records, total_bytes, num_parse_errors, num_transport_errors, state, "
                "stopped, since_relist, updated_at) "
                "VALUES ('p', 't', 'c', FALSE, 7, 70, 0, 0, 'RUNNING', FALSE, 0, 0)"
            )
        )
    engine.dispose()
    store = StateStore(store_url)  # opening migrates to v10
    st = store.status(REF)
    assert st is not None and st.total_records == 7 and st.lag is None  # never measured
    store.set_lag(REF, 123)
    st = store.status(REF)
    assert st is not None and st.lag == 123
    store.set_lag(REF, 0)
    st = store.status(REF)
    assert st is not None and st.lag == 0 and st.total_records == 7
    store.close()


def test_concurrent_openers_of_a_fresh_store_all_succeed(store_url: str) -> None:
    # Mapped Airflow tasks may all open a store that does not exist yet.
    from concurrent.futures import ThreadPoolExecutor

    def open_store(_: int) -> int:
        st = StateStore(store_url)
        try:
            with st.tx() as conn:
                return schema._current_version(conn)
        finally:
            st.close()

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(open_store, range(4))) == [schema.LATEST] * 4


def test_new_data_signal_fires_once_per_fingerprint(store_url: str) -> None:
    store = StateStore(store_url)
    assert store.signal_new_data(REF, "a")
    assert not store.signal_new_data(REF, "a")  # a restarted trigger, same data
    assert store.signal_new_data(REF, "b")
    store.close()


def test_finished_signal_is_claimed_once_per_finish(store_url: str) -> None:
    store = StateStore(store_url)
    store.ensure_connector(REF)
    assert not store.claim_finished_signal(REF, "run-1")  # not finished yet
    store.set_end_of_input(REF, True)
    assert store.claim_finished_signal(REF, "run-1")
    assert store.claim_finished_signal(REF, "run-1")  # a retry of the same task
    assert not store.claim_finished_signal(REF, "run-2")
    # New input arrived, was ingested, and the connector reached end of input again:
    # still the same finish (Feldera signals end of input once), so no second event.
    store.set_end_of_input(REF, False)
    assert not store.claim_finished_signal(REF, "run-3")
    store.set_end_of_input(REF, True)
    assert not store.claim_finished_signal(REF, "run-4")
    # Resetting the offsets (stopped) starts a new finish: its event goes out once more.
    store.set_stopped(REF, True)
    store.edit_offsets(REF, None)
    store.set_stopped(REF, False)
    assert not store.claim_finished_signal(REF, "run-5")  # not finished since the reset
    store.set_end_of_input(REF, True)
    assert store.claim_finished_signal(REF, "run-6")
    assert not store.claim_finished_signal(REF, "run-7")
    store.close()


def test_v4_catalog_is_dropped_by_the_migration(store_url: str) -> None:
    engine = sa.create_engine(store_url)
    schema.migrate(engine, target=4)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO ac_specs (pipeline, table_name, connector, spec, digest, updated_at) "
                "VALUES ('p', 't', 'c', '{}', 'x', 0)"
            )
        )
    engine.dispose()
    store = StateStore(store_url)
    with store.tx() as conn:
        assert schema._current_version(conn) == schema.LATEST
        assert not sa.inspect(conn).has_table("ac_specs")
    store.close()


def test_a_v4_store_written_by_the_previous_version_opens(tmp_path: Path) -> None:
    # data/store_v4.sql: dumped from a store the previous code wrote (its catalog, two
    # batches that discovery planned and nothing ingested).
    import sqlite3

    db = tmp_path / "state.db"
    with sqlite3.connect(db) as conn:
        conn.executescript((Path(__file__).parent / "data" / "store_v4.sql").read_text())
    store = StateStore(f"sqlite:///{db}")
    with store.tx() as conn:
        assert schema._current_version(conn) == schema.LATEST
        assert not sa.inspect(conn).has_table("ac_specs")
    pending = store.pending_batches(REF)
    assert [b.batch_id for b in pending] == [1, 2]
    first = pending[0].plan
    assert (first.ref, first.batch_id, first.warehouse) == (REF, 1, "/tmp/v4/warehouse")
    assert [(i.key, i.start, i.end) for i in first.items] == [
        ("plan-0000", 0, 2),
        ("plan-0000", 2, 4),
    ]
    assert first.connector.transport.name == "datagen" and first.connector.tasks_max == 2
    assert store.cursor(REF).in_flight == {"plan-0000"}
    st = store.status(REF)
    assert st is not None and (st.state, st.buffered_batches, st.buffered_records) == (
        "RUNNING",
        2,
        5,
    )
    assert store.commit_batch(1, "1-x", [receipt("plan-0000", records=4)], [])
    store.close()


def test_offsets_change_only_while_stopped(store_url: str) -> None:
    from airflow_connectors.state.store import ConnectorNotStopped

    store = StateStore(store_url)
    [b] = store.plan_batches(REF, [plan("a", "b")])
    store.commit_batch(b, "x", [receipt("a"), receipt("b")], [])
    store.set_end_of_input(REF, True)
    assert [o["key"] for o in store.offsets(REF)] == ["a", "b"]
    try:
        store.edit_offsets(REF, None)
        raise AssertionError("offsets changed on a running connector")
    except ConnectorNotStopped as e:
        assert "stop it first" in str(e)
    store.set_stopped(REF, True)
    store.edit_offsets(
        REF, [{"key": "a", "offset": None}, {"key": "z", "offset": 7, "completed": True}]
    )
    assert [(o["key"], o["offset"], o["completed"]) for o in store.offsets(REF)] == [
        ("b", 10, True),
        ("z", 7, True),
    ]
    st = store.status(REF)
    assert st is not None and st.stopped and not st.end_of_input
    store.edit_offsets(REF, None)
    assert store.offsets(REF) == []
    store.close()


# --- URLs that cannot be used: one line naming the URL (password masked) and a remedy --


@pytest.mark.parametrize(
    ("url", "shown", "said"),
    [
        (
            "postgresql+psycopg://postgres:sekret@127.0.0.1:1/x",
            "'postgresql+psycopg://postgres:***@127.0.0.1:1/x'",
            "cannot connect to the state store",
        ),
        (
            "notadb://x",
            "'notadb://x'",
            "names the database 'notadb', which SQLAlchemy does not know",
        ),
        ("garbage", "'garbage'", "is not a SQLAlchemy URL"),
        (
            "postgresql://u:sekret@h:port/x",
            "'postgresql://u:***@h:port/x'",
            "is not a SQLAlchemy URL",
        ),
        (
            "mysql://u:sekret@h/x",
            "'mysql://u:***@h/x'",
            "needs a database driver that is not installed",
        ),
        ("", "", "the state store URL is empty"),
    ],
)
def test_unusable_url_is_one_line_with_the_password_masked(url: str, shown: str, said: str) -> None:
    with pytest.raises(StateStoreUnavailable) as exc:
        StateStore(url)
    message = str(exc.value)
    assert "\n" not in message and "sekret" not in message
    assert shown in message and said in message, message
    assert message.endswith(
        "set a working URL with --state-store-url or [connectors] state_store_url "
        "(AIRFLOW__CONNECTORS__STATE_STORE_URL)"
    )


def test_sqlite_store_in_a_folder_that_cannot_exist(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    url = f"sqlite:///{tmp_path / 'file' / 'state.db'}"
    with pytest.raises(StateStoreUnavailable) as exc:
        StateStore(url)
    assert str(exc.value).startswith(
        f"cannot open the state store {url!r}: unable to open database file; the folder "
        f"{tmp_path / 'file'} must exist and be writable; or set a working URL"
    )


def test_postgres_database_that_does_not_exist_names_it(pg_schema_factory: Any) -> None:
    server = str(pg_schema_factory()).split("?")[0].rsplit("/", 1)[0]  # the machine's PostgreSQL
    url = f"{server}/ac_no_such_database"
    with pytest.raises(StateStoreUnavailable) as exc:
        StateStore(url)
    assert 'database "ac_no_such_database" does not exist' in str(exc.value)
    assert "\n" not in str(exc.value)
