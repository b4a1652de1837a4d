"""``kafka_input`` against a real Kafka broker (the session's ``kafka_broker``): the
conformance kit (with its kill between sink write and commit) bounded on three
partitions with ``tasks_max: 2`` and following; compacted-topic holes after the log
cleaner ran; a transactional producer that aborts every third transaction; the
``start_from`` variants; offsets deleted by retention; the consumer group's offsets
after commits; bad messages under both tolerances; config errors and masked secrets.
Connection resets (through a TCP fault proxy that a broker of this module advertises)
and a restart of that broker mid-read end with exact tables and counted retries. Each
test makes topics of its own (unique names)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from airflow_connectors.testing.conformance import (
    Connector,
    Source,
    TransportConformance,
)

pytestmark = pytest.mark.sources

COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"}
JSON = {"name": "json", "config": {"update_format": "raw"}}
#: Records of the conformance topic (3 partitions); batches of BATCH records.
RECORDS = 150
BATCH = 30


def record(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"n{i}", "amount": i / 4}


def value(i: int) -> bytes:
    return json.dumps(record(i)).encode()


TopicFactory = Callable[..., str]


@pytest.fixture
def new_topic(kafka_broker: Any) -> Iterator[TopicFactory]:
    """Makes topics on the session broker (``new_topic(partitions, **configs)``),
    deleted after the test."""
    from confluent_kafka.admin import NewTopic

    admin = kafka_broker.admin()
    made: list[str] = []

    def make(partitions: int = 1, **configs: object) -> str:
        name = f"ac_kin_{uuid.uuid4().hex[:10]}"
        topic = NewTopic(name, partitions, config={k: str(v) for k, v in configs.items()})
        admin.create_topics([topic])[name].result(30)
        made.append(name)
        return name

    yield make
    if made:
        for f in admin.delete_topics(made).values():
            f.result(30)


def produce(servers: str, topic: str, ids: Sequence[int], partitions: int = 1, **more: Any) -> None:
    """One JSON message per id, id ``i`` on partition ``i % partitions``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
    for i in ids:
        producer.produce(
            topic, value=value(i), key=str(i).encode(), partition=i % partitions, **more
        )
    assert producer.flush(30) == 0


def source(
    servers: str,
    topic: str,
    ids: Sequence[int],
    connector: Mapping[str, Any] | None = None,
    **config: Any,
) -> Source:
    cfg = {"topic": topic, "bootstrap.servers": servers, "follow": False, **config}
    return Source(
        transport="kafka_input",
        config=cfg,
        columns=COLUMNS,
        format=JSON,
        records=[record(i) for i in ids],
        key_column="id",
        bounded=not cfg["follow"],
        unbounded_config={**cfg, "follow": True} if not cfg["follow"] else None,
        invalid_configs={
            "topic": {**cfg, "topic": "a topic"},
            "partitions[0]": {**cfg, "partitions": ["x"]},
            "on_missing": {**cfg, "on_missing": "ignore"},
        },
        connector={"max_batch_size": BATCH, **(connector or {})},
    )


def ids_of(c: Connector) -> list[int]:
    return sorted(c.table().column("id").to_pylist())


class _KafkaKit(TransportConformance):
    """The kit, with its strict-config check as kafka_input has it: librdkafka's
    settings (dotted keys) pass through, every other unknown key is rejected."""

    def test_declares_its_name_and_a_strict_config(self, source: Source) -> None:
        from pydantic import ValidationError

        from airflow_connectors.transports import TRANSPORTS
        from airflow_connectors.transports.kafka_input import KafkaInputTransport

        assert TRANSPORTS.get("kafka_input") is KafkaInputTransport
        assert KafkaInputTransport.name == "kafka_input" and KafkaInputTransport.needs_format
        config = KafkaInputTransport.Config
        assert (
            config.model_validate({**source.config, "fetch.min.bytes": 1}).options[
                "fetch.min.bytes"
            ]
            == "1"
        )
        with pytest.raises(ValidationError, match="unknown field 'fetchminbytes'"):
            config.model_validate({**source.config, "fetchminbytes": 1})


class TestKafkaInput(_KafkaKit):
    """The kit on a topic of three partitions read to the ends of the first discovery
    (``follow: false``) by ``tasks_max: 2``: its crash check SIGKILLs the ingest job of
    the first two batches between sink write and commit and re-runs to the same table
    (count, keys, checksum)."""

    @pytest.fixture
    def source(self, kafka_broker: Any, new_topic: TopicFactory) -> Source:
        topic = new_topic(3)
        produce(kafka_broker.bootstrap_servers, topic, range(1, RECORDS + 1), partitions=3)
        return source(
            kafka_broker.bootstrap_servers, topic, range(1, RECORDS + 1), {"tasks_max": 2}
        )


class TestKafkaInputFollowing(_KafkaKit):
    """The kit on a followed topic (``follow: true``, the default): never ends."""

    @pytest.fixture
    def source(self, kafka_broker: Any, new_topic: TopicFactory) -> Source:
        topic = new_topic(3)
        produce(kafka_broker.bootstrap_servers, topic, range(1, RECORDS + 1), partitions=3)
        return source(kafka_broker.bootstrap_servers, topic, range(1, RECORDS + 1), follow=True)
