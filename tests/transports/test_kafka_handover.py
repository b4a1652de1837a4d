"""``kafka_input``'s ``handover`` against the session's real broker, without Airflow:
a table that already holds orders 1..25 (what a backfill landed) and a topic holding
orders 1..60 on 3 partitions; the stream starts after 25 on every partition, even when
the first discovery's batch budget plans only one partition's messages, and an empty
table starts from ``start_from``. The whole scenario under Airflow with a PostgreSQL
backfill: tests/airflow/test_backfill_then_kafka.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_connectors.testing.conformance import Connector, Source

pytestmark = pytest.mark.sources

PARTITIONS = 3
ORDERS = 60
BACKFILLED = 25


@pytest.fixture
def topic(kafka_broker: Any) -> Iterator[str]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    admin = kafka_broker.admin()
    name = f"ac_handover_{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, PARTITIONS)])[name].result(30)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "linger.ms": 5})
    for i in range(1, ORDERS + 1):
        value = json.dumps({"order_id": i}).encode()
        producer.produce(name, value=value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    yield name
    for f in admin.delete_topics([name]).values():
        f.result(30)


def stream(servers: str, topic: str, root: Path) -> Connector:
    cfg = {
        "topic": topic,
        "bootstrap.servers": servers,
        "follow": True,
        "start_from": "earliest",
        "handover": {"column": "order_id"},
    }
    src = Source(
        transport="kafka_input",
        config=cfg,
        columns={"order_id": "BIGINT NOT NULL"},
        format={"name": "json", "config": {"update_format": "raw"}},
        records=[],
        key_column="order_id",
        bounded=False,
        connector={"max_batch_size": 10, "tasks_max": 1},
    )
    return Connector(src, root)


def test_the_stream_starts_after_the_tables_greatest_value_on_every_partition(
    kafka_broker: Any, topic: str, tmp_path: Path
) -> None:
    c = stream(kafka_broker.bootstrap_servers, topic, tmp_path / "c")
    try:
        backfill = Path(c.ctx.sink().location())
        backfill.mkdir(parents=True, exist_ok=True)
        ids = pa.array(range(1, BACKFILLED + 1), pa.int64())
        pq.write_table(pa.table({"order_id": ids}), backfill / "backfill.parquet")
        c.drain()
        got = c.table().column("order_id").to_pylist()
        assert sorted(got) == list(range(1, ORDERS + 1))  # each order once, none missing
        offsets = c.store.offsets(c.ref)
        assert len(offsets) == PARTITIONS
        for row in offsets:
            assert row["meta"]["handover"] == {"column": "order_id", "value": BACKFILLED}
        # The stream read only what the backfill had not landed.
        assert c.status().total_records == ORDERS - BACKFILLED
    finally:
        c.close()


def test_an_empty_table_starts_from_start_from(
    kafka_broker: Any, topic: str, tmp_path: Path
) -> None:
    c = stream(kafka_broker.bootstrap_servers, topic, tmp_path / "c")
    try:
        c.drain()
        got = c.table().column("order_id").to_pylist()
        assert sorted(got) == list(range(1, ORDERS + 1))
        assert all("handover" not in row.get("meta", {}) for row in c.store.offsets(c.ref))
    finally:
        c.close()
