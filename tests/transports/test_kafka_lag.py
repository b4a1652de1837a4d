"""``kafka_input``'s lag against the session's real broker: what each discovery and
finalize step stores with the connector's status (``metrics.lag`` in stats and the
REST APIs) is what Kafka's own tools count for the connector's consumer group (the
sum over partitions of the high watermark minus the group's committed offset)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_connectors.engine.control import ConnectorControl
from airflow_connectors.testing.conformance import Connector, Source

pytestmark = pytest.mark.sources

PARTITIONS = 2


@pytest.fixture
def topic(kafka_broker: Any) -> Iterator[str]:
    from confluent_kafka.admin import NewTopic

    admin = kafka_broker.admin()
    name = f"ac_lag_{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, PARTITIONS)])[name].result(30)
    yield name
    for f in admin.delete_topics([name]).values():
        f.result(30)


def produce(servers: str, topic: str, ids: range) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
    for i in ids:
        producer.produce(topic, value=json.dumps({"id": i}).encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def group_lag(servers: str, topic: str, group: str) -> int:
    """The group's lag as ``kafka-consumer-groups --describe`` counts it."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": group})
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        lag = 0
        for tp in consumer.committed(parts, timeout=30):
            _, high = consumer.get_watermark_offsets(tp, timeout=30, cached=False)
            lag += high - (tp.offset if tp.offset >= 0 else 0)
        return lag
    finally:
        consumer.close()


def test_the_stored_lag_is_the_consumer_groups_lag(
    kafka_broker: Any, topic: str, tmp_path: Path
) -> None:
    servers, group = kafka_broker.bootstrap_servers, f"g_{uuid.uuid4().hex[:8]}"
    produce(servers, topic, range(40))
    cfg = {"topic": topic, "bootstrap.servers": servers, "group.id": group, "follow": True}
    src = Source(
        transport="kafka_input",
        config=cfg,
        columns={"id": "BIGINT NOT NULL"},
        format={"name": "json", "config": {"update_format": "raw"}},
        records=[{"id": i} for i in range(40)],
        key_column="id",
        bounded=False,
        connector={"max_batch_size": 10, "tasks_max": 1},
    )
    c = Connector(src, tmp_path / "c")
    try:
        found = c.discover()  # one batch of 10: nothing committed yet
        assert len(found.batch_ids) == 1 and c.status().lag == 40
        c.run(found.batch_ids)
        c.finalize()  # following: measures the lag after the commit, acks the group
        assert c.status().lag == 30 == group_lag(servers, topic, group)
        c.drain()
        c.finalize()
        assert c.status().lag == 0 == group_lag(servers, topic, group)
        assert c.table().num_rows == 40
        produce(servers, topic, range(40, 45))
        c.finalize()
        assert c.status().lag == 5 == group_lag(servers, topic, group)
        assert ConnectorControl(c.store).statuses([c.ref])[c.ref]["metrics"]["lag"] == 5
    finally:
        c.close()
