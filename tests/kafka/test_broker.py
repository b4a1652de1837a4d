"""The test suite's Kafka broker (airflow_connectors.testing.kafka) against confluent-kafka:
topics, produce, watermarks, offset reads, group offsets, deletion, and restarts on the
same work dir."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from airflow_connectors.testing.kafka import KafkaBroker

pytestmark = [pytest.mark.sources, pytest.mark.kafka]

TIMEOUT = 30.0


def create_topic(broker: Any, name: str, partitions: int) -> None:
    """Create ``name`` and wait until every partition has a leader in the metadata."""
    admin = broker.admin()
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[
        name
    ].result(TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while True:
        topic = admin.list_topics(name, timeout=TIMEOUT).topics.get(name)
        if (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return
        assert time.monotonic() < deadline, f"topic {name} has no leaders yet: {topic}"
        time.sleep(0.1)


def produce(broker: Any, topic: str, count: int, batch: int = 1000) -> dict[tuple[int, int], bytes]:
    """Produce ``count`` messages (keys ``k<i>``, values ``v<i>``) in batches of
    ``batch``, each batch flushed; returns the value at every (partition, offset)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True})
    placed: dict[tuple[int, int], bytes] = {}
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            partition, offset, value = msg.partition(), msg.offset(), msg.value()
            assert partition is not None and offset is not None and value is not None
            placed[(partition, offset)] = value

    for start in range(0, count, batch):
        for i in range(start, min(start + batch, count)):
            key, value = f"k{i}".encode(), f"v{i}".encode()
            producer.produce(topic, key=key, value=value, on_delivery=delivered)
        assert producer.flush(TIMEOUT) == 0, "messages still in the producer's queue"
    assert errors == []
    assert len(placed) == count
    return placed


def consumer(broker: Any, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


def first_message(c: Consumer, tp: TopicPartition) -> Message:
    """Assign ``tp`` (a partition with an offset) and return the first message."""
    c.assign([tp])
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        msg = c.poll(1.0)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        return msg
    raise AssertionError(f"no message from {tp} in {TIMEOUT} s")


def high_watermarks(broker: Any, topic: str, partitions: int) -> list[int]:
    c = consumer(broker, f"g-{uuid.uuid4().hex[:8]}")
    try:
        return [
            c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)[1]
            for p in range(partitions)
        ]
    finally:
        c.close()


def committed(broker: Any, group: str, topic: str, partition: int) -> int:
    c = consumer(broker, group)
    try:
        (tp,) = c.committed([TopicPartition(topic, partition)], timeout=TIMEOUT)
        assert tp.error is None, tp.error
        return int(tp.offset)
    finally:
        c.close()


def test_topic_produce_watermarks_offsets_group_delete(kafka_broker: Any) -> None:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    group = f"g-{uuid.uuid4().hex[:10]}"
    create_topic(kafka_broker, topic, 3)

    placed = produce(kafka_broker, topic, 10_000)
    per_partition = Counter(p for p, _ in placed)
    assert sorted(per_partition) == [0, 1, 2], per_partition  # the keys spread
    highs = high_watermarks(kafka_broker, topic, 3)
    assert sum(highs) == 10_000
    assert highs == [per_partition[p] for p in range(3)]  # offsets 0..n-1, no gaps

    offset = per_partition[1] // 2
    c = consumer(kafka_broker, group)
    try:
        msg = first_message(c, TopicPartition(topic, 1, offset))
        assert (msg.partition(), msg.offset()) == (1, offset)
        assert msg.value() == placed[(1, offset)]
        assert msg.key() == b"k" + placed[(1, offset)][1:]
        c.commit(offsets=[TopicPartition(topic, 1, offset + 1)], asynchronous=False)
        (mine,) = c.committed([TopicPartition(topic, 1)], timeout=TIMEOUT)
        assert mine.offset == offset + 1
    finally:
        c.close()
    assert committed(kafka_broker, group, topic, 1) == offset + 1  # another member reads it
    assert committed(kafka_broker, group, topic, 0) < 0  # nothing committed there

    admin = kafka_broker.admin()
    admin.delete_topics([topic])[topic].result(TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while topic in admin.list_topics(timeout=TIMEOUT).topics:
        assert time.monotonic() < deadline, f"topic {topic} still listed after deletion"
        time.sleep(0.2)


def test_restart_on_same_work_dir_keeps_topic_and_group_offset(tmp_path: Path) -> None:
    topic, group = "kept", "kept-group"
    broker = KafkaBroker(tmp_path / "kafka")
    try:
        broker.start()
        address = broker.bootstrap_servers
        # The broker logs to its file (log4j2 through slf4j), not to the test's output.
        assert "Kafka Server started" in broker.log.read_text()
        create_topic(broker, topic, 2)
        placed = produce(broker, topic, 500, batch=100)
        highs = high_watermarks(broker, topic, 2)
        c = consumer(broker, group)
        try:
            c.commit(offsets=[TopicPartition(topic, 0, 42)], asynchronous=False)
        finally:
            c.close()

        def check() -> None:
            assert broker.bootstrap_servers == address  # the clients' address holds
            listed = broker.admin().list_topics(timeout=TIMEOUT).topics
            assert topic in listed
            assert len(listed[topic].partitions) == 2
            assert high_watermarks(broker, topic, 2) == highs
            assert committed(broker, group, topic, 0) == 42
            c = consumer(broker, f"{group}-reader")
            try:
                msg = first_message(c, TopicPartition(topic, 0, 42))
                assert (msg.offset(), msg.value()) == (42, placed[(0, 42)])
            finally:
                c.close()

        broker.stop()  # controlled shutdown
        assert not (broker.work / "kafka.pid").exists()
        broker.start()
        check()

        broker.kill()  # a crash: SIGKILL, then a new object on the same dir recovers
        broker = KafkaBroker(tmp_path / "kafka")
        broker.start()
        check()
    finally:
        broker.stop()
