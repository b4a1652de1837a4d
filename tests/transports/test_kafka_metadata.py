"""``kafka_input``'s Kafka metadata columns and its formats whose records are not lines,
against the session's real Kafka broker: each row carries its message's key, topic,
partition, offset, timestamp and headers; a message of several JSON lines gives each of
its rows the message's metadata; a key that is not UTF-8 is that record's dead letter;
Avro records in Confluent's wire format and raw blobs are decoded one message at a time;
a schema registry and misplaced metadata columns are refused in one line."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_connectors.catalog import validate_pipeline
from airflow_connectors.testing.conformance import Connector, Source

pytestmark = pytest.mark.sources

META_COLUMNS = {
    "id": "BIGINT NOT NULL",
    "name": "VARCHAR",
    "offset": "BIGINT NOT NULL",
    "partition": "INT",
    "key": "VARCHAR",
    "ts": "TIMESTAMP",
    "hdrs": "VARCHAR",
    "topic": "VARCHAR",
}
T0 = 1_700_000_000_000  # ms: the first message's timestamp


@pytest.fixture
def topic(kafka_broker: Any) -> Iterator[str]:
    """A new topic of two partitions."""
    from confluent_kafka.admin import NewTopic

    name = f"ac_meta_{uuid.uuid4().hex[:10]}"
    admin = kafka_broker.admin()
    admin.create_topics([NewTopic(name, 2)])[name].result(30)
    yield name
    admin.delete_topics([name])[name].result(30)


def produce(servers: str, topic: str, messages: list[dict[str, Any]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
    for m in messages:
        producer.produce(topic, **m)
    assert producer.flush(30) == 0


def connector(
    servers: str,
    topic: str,
    root: Path,
    columns: dict[str, str],
    fmt: dict[str, Any],
    **config: Any,
) -> Connector:
    source = Source(
        "kafka_input",
        {"topic": topic, "bootstrap.servers": servers, "follow": False, **config},
        columns,
        [],
        "id",
        format=fmt,
        connector={"errors": {"tolerance": "all"}},
    )
    return Connector(source, root)


def test_rows_carry_their_messages_metadata(kafka_broker: Any, topic: str, tmp_path: Path) -> None:
    messages = [
        {
            "value": json.dumps({"id": i, "name": f"n{i}"}).encode(),
            "key": str(i).encode(),
            "partition": i % 2,
            "headers": [("source", f"s{i}".encode()), ("trace", None)],
            "timestamp": T0 + i,
        }
        for i in range(40)
    ]
    # Message 9 holds two JSON lines: both rows carry its metadata. Message 11's key is
    # not UTF-8: that record is a dead letter, never a garbled key.
    messages[9]["value"] = b'{"id": 9, "name": "a"}\n{"id": 1009, "name": "b"}'
    messages[11]["key"] = b"\xff\xfe"
    messages[13]["value"] = None  # a tombstone: no record
    produce(kafka_broker.bootstrap_servers, topic, messages)
    c = connector(
        kafka_broker.bootstrap_servers,
        topic,
        tmp_path / "c",
        META_COLUMNS,
        {"name": "json", "config": {"update_format": "raw"}},
        include_offset=True,
        include_partition=True,
        include_key=True,
        include_topic=True,
        metadata={"timestamp": "ts", "headers": "hdrs"},
    )
    try:
        c.drain()
        rows = {r["id"]: r for r in c.table().to_pylist()}
        expected = set(range(40)) - {11, 13} | {1009}
        assert set(rows) == expected
        for i in expected - {1009}:
            r = rows[i]
            assert (r["partition"], r["offset"]) == (i % 2, i // 2), r
            assert r["key"] == str(i) and r["topic"] == topic
            assert r["ts"].timestamp() * 1000 == pytest.approx(T0 + i), r
            assert json.loads(r["hdrs"]) == [
                {"key": "source", "value": f"s{i}"},
                {"key": "trace", "value": None},
            ]
        both = {k: v for k, v in rows[1009].items() if k not in ("id", "name")}
        assert both == {k: v for k, v in rows[9].items() if k not in ("id", "name")}
        state = c.status()
        assert state.num_parse_errors == 1
        (error,) = state.parse_errors
        assert "partition 1 offset 5" in error["message"] and "not UTF-8" in error["message"]
    finally:
        c.close()


def test_avro_records_in_confluents_wire_format(
    kafka_broker: Any, topic: str, tmp_path: Path
) -> None:
    import fastavro

    schema = {
        "type": "record",
        "name": "order",
        "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
    }
    parsed = fastavro.parse_schema(schema)

    def framed(i: int) -> bytes:
        out = io.BytesIO()
        out.write(b"\x00" + (7).to_bytes(4, "big"))  # magic byte and schema id
        fastavro.schemaless_writer(out, parsed, {"id": i, "name": f"n{i}"})
        return out.getvalue()

    values = [framed(i) for i in range(30)]
    values[5] = b"\x00\x00\x00\x00\x07\xff"  # cut short: that record's dead letter
    produce(
        kafka_broker.bootstrap_servers,
        topic,
        [{"value": v, "partition": i % 2} for i, v in enumerate(values)],
    )
    c = connector(
        kafka_broker.bootstrap_servers,
        topic,
        tmp_path / "c",
        {"id": "BIGINT NOT NULL", "name": "VARCHAR", "offset": "BIGINT"},
        {"name": "avro", "config": {"schema": json.dumps(schema)}},
        include_offset=True,
    )
    try:
        c.drain()
        rows = sorted((r["id"], r["name"], r["offset"]) for r in c.table().to_pylist())
        assert rows == [(i, f"n{i}", i // 2) for i in range(30) if i != 5]
        assert c.status().num_parse_errors == 1
    finally:
        c.close()


def test_raw_blobs_are_one_record_per_message(
    kafka_broker: Any, topic: str, tmp_path: Path
) -> None:
    blobs = [f"line one of {i}\nline two of {i}".encode() for i in range(10)]
    produce(
        kafka_broker.bootstrap_servers,
        topic,
        [{"value": b, "partition": 0} for b in blobs],
    )
    c = connector(
        kafka_broker.bootstrap_servers,
        topic,
        tmp_path / "c",
        {"data": "VARCHAR", "id": "BIGINT"},
        {"name": "raw", "config": {"mode": "blob", "column_name": "data"}},
        metadata={"offset": "id"},
    )
    try:
        c.drain()
        rows = sorted((r["id"], r["data"]) for r in c.table().to_pylist())
        assert rows == [(i, b.decode()) for i, b in enumerate(blobs)]
    finally:
        c.close()


def _problems(config: dict[str, Any], columns: dict[str, str], fmt: dict[str, Any]) -> list[str]:
    doc = {
        "pipeline": "p",
        "tables": {
            "t": {
                "columns": columns,
                "connectors": [
                    {
                        "name": "k",
                        "transport": {"name": "kafka_input", "config": config},
                        "format": fmt,
                    }
                ],
            }
        },
    }
    return [f"{e.path}: {e.message}" for e in validate_pipeline(doc)]


def test_bad_metadata_and_registry_settings_are_one_line_each() -> None:
    base = {"topic": "orders", "bootstrap.servers": "127.0.0.1:9", "sasl.password": "hunter2"}
    json_fmt = {"name": "json"}
    (missing,) = _problems({**base, "include_offset": True}, {"id": "BIGINT"}, json_fmt)
    assert "column offset, which table t lacks; declare offset BIGINT" in missing
    (wrong,) = _problems({**base, "metadata": {"timestamp": "id"}}, {"id": "BIGINT"}, json_fmt)
    assert "column id of table t is BIGINT, but Kafka timestamp needs TIMESTAMP" in wrong
    (unknown,) = _problems({**base, "bogus": 1}, {"id": "BIGINT"}, json_fmt)
    assert "unknown field 'bogus'" in unknown
    (servers,) = _problems({"topic": "orders"}, {"id": "BIGINT"}, json_fmt)
    assert "bootstrap.servers is required" in servers
    avro = {"name": "avro", "config": {"registry_urls": ["http://127.0.0.1:8081"]}}
    (registry,) = _problems(base, {"id": "BIGINT"}, avro)
    assert "registry_urls: a schema registry is not supported" in registry
    for line in (missing, wrong, unknown, servers, registry):
        assert "hunter2" not in line and "\n" not in line


def test_new_data_fires_when_a_high_watermark_passes_the_committed_offset(
    kafka_broker: Any, topic: str, tmp_path: Path
) -> None:
    """The fingerprint the ``on: new_data`` trigger polls: None while every partition is
    committed up to its end; a digest once a message is produced to any partition."""
    from airflow_connectors.engine.discovery import new_data_fingerprint

    servers = kafka_broker.bootstrap_servers
    produce(servers, topic, [{"value": b'{"id": 1}', "partition": 0}])
    c = connector(
        servers,
        topic,
        tmp_path / "c",
        {"id": "BIGINT"},
        {"name": "json", "config": {"update_format": "raw"}},
        follow=True,
    )
    try:
        assert new_data_fingerprint(c.store, c.ctx) is not None  # nothing committed yet
        c.run(c.discover().batch_ids)
        assert new_data_fingerprint(c.store, c.ctx) is None
        produce(servers, topic, [{"value": b'{"id": 2}', "partition": 1}])
        assert new_data_fingerprint(c.store, c.ctx) is not None
        c.run(c.discover().batch_ids)
        assert new_data_fingerprint(c.store, c.ctx) is None
        assert sorted(c.table().column("id").to_pylist()) == [1, 2]
    finally:
        c.close()


def test_spark_reads_a_topic_with_its_metadata(kafka_broker: Any, topic: str, spark: Any) -> None:
    """``spark.read.format("kafka_input")``: the rows and their partition and offset,
    in the schema's column order."""
    servers = kafka_broker.bootstrap_servers
    produce(
        servers,
        topic,
        [{"value": json.dumps({"id": i}).encode(), "partition": i % 2} for i in range(20)],
    )
    df = (
        spark.read.format("kafka_input")
        .schema("offset BIGINT, id BIGINT, partition INT")
        .option("topic", topic)
        .option("bootstrap.servers", servers)
        .option("follow", "false")
        .option("include_offset", "true")
        .option("include_partition", "true")
        .option("format", "json")
        .option("format.update_format", "raw")
        .load()
    )
    rows = sorted((r.id, r.partition, r.offset) for r in df.collect())
    assert rows == [(i, i % 2, i // 2) for i in range(20)]
    assert df.columns == ["offset", "id", "partition"]


def test_a_bad_start_from_is_one_line() -> None:
    base = {"topic": "orders", "bootstrap.servers": "127.0.0.1:9"}
    json_fmt = {"name": "json"}
    expected = {
        "newest": "'newest' is no start: expected 'earliest', 'latest'",
        "offsets": "offsets: offsets must be 0 or more",
        "timestamp": "timestamp: input should be a valid integer",
    }
    for start, wanted in zip(
        ("newest", {"offsets": [-1]}, {"timestamp": "x"}), expected.values(), strict=True
    ):
        (line,) = _problems({**base, "start_from": start}, {"id": "BIGINT"}, json_fmt)
        assert line.startswith("tables.t.connectors[0].transport.config.start_from: "), line
        assert wanted in line, line
