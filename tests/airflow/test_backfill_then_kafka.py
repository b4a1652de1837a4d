"""The seeds' headline scenario on real Airflow (``DagBag``, ``dag.test()``, real
spark-submit on local Spark), the real PostgreSQL server and the session's real Kafka
broker: ``examples/backfill_then_kafka`` backfills ``orders`` from PostgreSQL while a
producer keeps inserting orders and producing each to Kafka, then the Kafka connector
takes over after the backfill's greatest ``order_id`` (``handover``). Its gate skips it
until the backfill finished; afterwards every order is in the table exactly once, its
first discovery logged and recorded the hand-over, and its consumer group's committed
offsets are the partitions' ends."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
import yaml
from conftest import DAGS, dag_file, task_states

from airflow_connectors.state.store import ConnectorRef, StateStore

pytestmark = [pytest.mark.sources, pytest.mark.postgres]

EXAMPLE = Path(__file__).parents[2] / "examples" / "backfill_then_kafka"
PG = "postgresql://postgres@127.0.0.1:5432/test"
#: Orders only in the table (history), then orders in the table and the topic.
HISTORY = 2000
BEFORE_BACKFILL = 100


def producer_module() -> Any:
    spec = importlib.util.spec_from_file_location("orders_producer", EXAMPLE / "producer.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def task_times(dag_run: Any) -> dict[tuple[str, int], tuple[Any, Any]]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = (
            session.query(TaskInstance)
            .filter(TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id)
            .all()
        )
        return {(ti.task_id, ti.map_index): (ti.start_date, ti.end_date) for ti in tis}


def rest_client() -> Any:
    """The provider's Feldera routes as the API mounts them, without Airflow's login."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from airflow_connectors.airflow.api.connect import feldera

    app = FastAPI()
    app.include_router(feldera.router)
    return TestClient(app)


def group_offsets(servers: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": servers, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def ends(servers: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": servers, "group.id": f"probe-{uuid.uuid4().hex[:8]}"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        }
    finally:
        c.close()


@pytest.fixture
def scenario(kafka_broker: Any, connectors_env: dict[str, str]) -> Any:
    """A unique table and topic, the example's spec pointed at them, and the DAGs."""
    import psycopg
    from airflow.dag_processing.dagbag import DagBag

    suffix = uuid.uuid4().hex[:8]
    table, topic, group = f"orders_{suffix}", f"orders_{suffix}", f"shop-{suffix}"
    servers = kafka_broker.bootstrap_servers
    producer = producer_module()
    producer.setup(PG, servers, table, topic, HISTORY, 3)
    spec = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())
    spec["pipeline"] = pipeline = f"shop_{suffix}"
    backfill, stream = spec["tables"]["orders"]["connectors"]
    backfill["transport"]["config"]["query"] = (
        f"SELECT order_id, customer, amount FROM public.{table}"
    )
    stream["transport"]["config"].update(
        {"topic": topic, "bootstrap.servers": servers, "group.id": group}
    )
    (DAGS / f"{pipeline}.yaml").write_text(yaml.safe_dump(spec))
    bag = DagBag(dag_folder=str(dag_file(DAGS, f"{pipeline}.yaml")))
    assert bag.import_errors == {}, bag.import_errors
    yield {
        "producer": producer,
        "pipeline": pipeline,
        "table": table,
        "topic": topic,
        "group": group,
        "servers": servers,
        "backfill": bag.dags[f"{pipeline}.orders.backfill"],
        "stream": bag.dags[f"{pipeline}.orders.stream"],
        "env": connectors_env,
    }
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS public.{table}")
    admin = kafka_broker.admin()
    for f in admin.delete_topics([topic]).values():
        f.result(30)


def test_backfill_then_kafka_lands_every_order_once(
    scenario: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    s = scenario
    servers, topic, pipeline = s["servers"], s["topic"], s["pipeline"]
    writer = s["producer"].Producer(PG, servers, s["table"], topic, HISTORY + 1)
    writer.start()
    try:
        # The stream's gate skips it while the backfill has not finished.
        early = task_states(s["stream"].test())
        assert early[("discover", -1)] == "skipped", early
        while writer.last < HISTORY + BEFORE_BACKFILL:  # orders in both before the snapshot
            assert writer.is_alive(), writer.error
            time.sleep(0.05)
        backfill_run = s["backfill"].test()
        backfilled_upto = writer.last
        states = task_states(backfill_run)
        assert states[("finished", -1)] == "success", states
        while writer.last < backfilled_upto + 100:  # and after it
            assert writer.is_alive(), writer.error
            time.sleep(0.05)
    finally:
        last = writer.stop()

    store = StateStore(s["env"]["AIRFLOW__CONNECTORS__STATE_STORE_URL"])
    try:
        with caplog.at_level("INFO", logger="airflow_connectors"):
            stream_run = s["stream"].test()
        # The first discovery logged the hand-over in one line: connector, value, offsets.
        [line] = [r.getMessage() for r in caplog.records if "hand-over after" in r.getMessage()]
        assert "connector orders.stream: topic " in line and "partition 2: " in line, line
        states = task_states(stream_run)
        assert states[("discover", -1)] == "success", states
        ingests = [i for (t, i), st in states.items() if t == "ingest" and i >= 0]
        assert ingests and all(states[("ingest", i)] == "success" for i in ingests), states
        # Ran after the backfill's finish, in Airflow's own records.
        finished_at = task_times(backfill_run)[("finished", -1)][1]
        assert task_times(stream_run)[("discover", -1)][0] > finished_at
        # Runs until caught up: a later run plans nothing.
        for _ in range(3):
            again = task_states(s["stream"].test())
            if again.get(("ingest", -1)) == "skipped" or not any(
                t == "ingest" and i >= 0 for (t, i) in again
            ):
                break

        # Every order exactly once: 1..last, whatever the hand-over point was.
        path = Path(s["env"]["AIRFLOW__CONNECTORS__WAREHOUSE"]) / pipeline / "orders"
        rows = ds.dataset(str(path), format="parquet").to_table()
        ids = rows.column("order_id").to_pylist()
        assert len(ids) == len(set(ids)) == last
        assert min(ids) == 1 and max(ids) == last
        producer = s["producer"]
        want = {i: producer.order(i) for i in range(1, last + 1)}
        got = {r["order_id"]: r for r in rows.to_pylist()}
        assert got == want  # the checksum: every column of every order

        # The hand-over: recorded with the stream's offsets; stream read the rest.
        ref = ConnectorRef(pipeline, "orders", "stream")
        offsets = store.offsets(ref)
        marks = [o.get("meta", {}).get("handover") for o in offsets]
        handover = next(m for m in marks if m)
        assert handover["column"] == "order_id"
        # The snapshot held the orders produced before it, and orders came after it.
        assert handover["value"] >= HISTORY + BEFORE_BACKFILL and handover["value"] + 100 <= last
        assert f"order_id = {handover['value']}:" in line

        # Lag: the consumer group's committed offsets are the partitions' ends.
        assert group_offsets(servers, s["group"], topic, 3) == ends(servers, topic, 3)
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "airflow_connectors.cli",
                "stats",
                pipeline,
                "orders",
                "stream",
                "--json",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, **s["env"]},
            timeout=120,
        )
        assert cli.returncode == 0, cli.stderr
        doc = json.loads(cli.stdout)
        assert doc["metrics"]["total_records"] == last - handover["value"]
        assert doc["metrics"]["buffered_records"] == 0
        assert doc["metrics"]["lag"] == 0  # caught up: nothing in the topic uncommitted
        # Feldera's REST stats of the connector (the provider's API, Airflow's DAG records).
        rest = rest_client().get(f"/v0/pipelines/{pipeline}/tables/orders/connectors/stream/stats")
        assert rest.status_code == 200, rest.text
        assert rest.json()["metrics"]["lag"] == 0
        assert rest.json()["metrics"]["total_records"] == last - handover["value"]
    finally:
        store.close()
