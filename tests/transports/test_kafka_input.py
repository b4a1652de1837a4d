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

import contextlib
import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from airflow_connectors.testing.conformance import (
    Connector,
    Source,
    TransportConformance,
    assert_same_records,
)

pytestmark = [pytest.mark.sources, pytest.mark.kafka]

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


# --- holes: compaction and transactions ------------------------------------------------


def _offsets_now(servers: str, topic: str, partition: int = 0) -> list[tuple[int, bytes]]:
    """Every (offset, value) partition ``partition`` holds now, read directly."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"ac-t-{uuid.uuid4().hex[:8]}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        found: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = consumer.poll(1)
            if m is None:
                continue
            if m.error():
                if m.error().code() == m.error()._PARTITION_EOF:
                    return found
                raise AssertionError(m.error())
            found.append((m.offset(), m.value()))
        raise AssertionError(f"{topic}/{partition}: no end of partition in 30 s")
    finally:
        consumer.close()


def high_watermarks(servers: str, topic: str, partitions: int) -> list[int]:
    """Each partition's high watermark, asked of the broker."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": "ac-t-watermarks"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def _set_broker(admin: Any, **settings: object) -> None:
    """Change dynamic settings of every broker (the log cleaner's backoff)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [
        ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET)
        for k, v in settings.items()
    ]
    brokers = admin.list_topics(timeout=30).brokers
    resources = [
        ConfigResource(ConfigResource.Type.BROKER, str(b), incremental_configs=entries)
        for b in brokers
    ]
    for f in admin.incremental_alter_configs(resources).values():
        f.result(30)


def test_compacted_offsets_are_holes_never_waited_for(
    kafka_broker: Any, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """After the log cleaner removed superseded messages of a compacted topic, the
    connector reads exactly the survivors and ends; it never waits for the missing
    offsets."""
    from confluent_kafka import Producer

    servers = kafka_broker.bootstrap_servers
    _set_broker(kafka_broker.admin(), **{"log.cleaner.backoff.ms": 200})
    topic = new_topic(
        1,
        **{
            "cleanup.policy": "compact",
            "segment.ms": 100,
            "min.cleanable.dirty.ratio": 0.001,
            "delete.retention.ms": 100,
            "min.compaction.lag.ms": 0,
        },
    )
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 0})
    # 10 keys written 6 times each; a later message rolls the segment so the cleaner
    # may compact the earlier ones.
    for i in range(60):
        producer.produce(topic, value=value(i), key=f"k{i % 10}".encode())
    assert producer.flush(30) == 0
    deadline = time.monotonic() + 60
    held: list[tuple[int, bytes]] = []
    roll = 1000
    while time.monotonic() < deadline:
        time.sleep(0.3)
        producer.produce(topic, value=value(roll), key=f"roll{roll}".encode())
        assert producer.flush(30) == 0
        roll += 1
        held = _offsets_now(servers, topic)
        if len([o for o, _ in held if o < 60]) <= 10:
            break
    survivors = [json.loads(v)["id"] for o, v in held]
    assert len([o for o, _ in held if o < 60]) <= 10, "the log cleaner did not run in 60 s"
    assert set(range(50, 60)) <= set(survivors)  # the last message of every key stays
    c = Connector(source(servers, topic, survivors), tmp_path / "c")
    try:
        c.drain()
        assert_same_records(c.table(), c.expected(), "id", "compacted topic")
        assert c.finalize(), "no end of input over a compacted partition"
        (row,) = c.store.cursor(c.ref).offsets.values()
        assert row.offset == held[-1][0] + 1, row  # past the holes, up to the end
    finally:
        c.close()


def test_aborted_transactions_and_markers_are_holes(
    kafka_broker: Any, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """A transactional producer aborts every third transaction: the table holds exactly
    the committed transactions' messages (read_committed) and the read ends at the
    partitions' ends, over the aborted offsets and the markers."""
    from confluent_kafka import Producer

    servers = kafka_broker.bootstrap_servers
    topic = new_topic(2)
    producer = Producer(
        {"bootstrap.servers": servers, "transactional.id": f"ac-t-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(30)
    kept: list[int] = []
    for t in range(12):
        producer.begin_transaction()
        ids = range(t * 10, t * 10 + 10)
        for i in ids:
            producer.produce(topic, value=value(i), key=str(i).encode(), partition=i % 2)
        assert producer.flush(30) == 0  # in the log before the abort: offsets, not purged
        if t % 3 == 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            kept += ids
    c = Connector(source(servers, topic, kept), tmp_path / "c")
    try:
        c.drain()
        assert_same_records(c.table(), c.expected(), "id", "transactional topic")
        assert c.finalize(), "no end of input over aborted transactions and markers"
        assert c.status().total_records == len(kept)
        # Each partition: 12 transactions of 5 messages and a marker each, read past.
        ends = high_watermarks(servers, topic, 2)
        assert ends == [72, 72], ends
        positions = {k: o.offset for k, o in c.store.cursor(c.ref).offsets.items()}
        assert positions == {f"{topic}/{p}": ends[p] for p in range(2)}, positions
    finally:
        c.close()


# --- where a connector starts ------------------------------------------------------------


def test_start_from_offsets_and_timestamp(
    kafka_broker: Any, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """``{offsets: [..]}`` starts each partition at its offset; ``{timestamp: ms}`` at
    the first message at or after it (messages produced with explicit timestamps)."""
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(2)
    t0 = 1_700_000_000_000
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
    for i in range(40):  # partition i % 2, offset i // 2, timestamp t0 + i s
        producer.produce(topic, value=value(i), partition=i % 2, timestamp=t0 + i * 1000)
    assert producer.flush(30) == 0
    # Partition 0 from offset 5 (ids 10, 12, ..), partition 1 from offset 10 (ids 21, ..).
    by_offsets = [i for i in range(40) if (i % 2 == 0 and i >= 10) or (i % 2 and i >= 21)]
    by_time = list(range(15, 40))
    for name, start, ids in (
        ("offsets", {"offsets": [5, 10]}, by_offsets),
        ("timestamp", {"timestamp": t0 + 15_000}, by_time),
        ("earliest", "earliest", list(range(40))),
    ):
        c = Connector(source(servers, topic, ids, start_from=start), tmp_path / name)
        try:
            c.drain()
            assert_same_records(c.table(), c.expected(), "id", f"start_from {name}")
            assert c.finalize()
        finally:
            c.close()


def test_start_from_latest_is_pinned_at_the_first_discovery(
    kafka_broker: Any, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """``latest``: what was produced before the first discovery is not read, what comes
    after is, and a later discovery does not move the start to its own end."""
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(2)
    produce(servers, topic, range(0, 20), partitions=2)
    c = Connector(
        source(servers, topic, range(20, 60), start_from="latest", follow=True), tmp_path / "c"
    )
    try:
        first = c.discover()  # pins each partition's end (an empty range)
        c.run(first.batch_ids)
        assert c.table().num_rows == 0
        positions = {k: o.offset for k, o in c.store.cursor(c.ref).offsets.items()}
        assert positions == {f"{topic}/0": 10, f"{topic}/1": 10}, positions
        produce(servers, topic, range(20, 40), partitions=2)
        c.run(c.discover().batch_ids)  # a later discovery reads from the pin on
        produce(servers, topic, range(40, 60), partitions=2)
        c.drain()
        assert_same_records(c.table(), c.expected(), "id", "start_from latest")
    finally:
        c.close()


# --- retention, consumer group ------------------------------------------------------------


def test_offsets_deleted_before_they_were_read(
    kafka_broker: Any, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """Offsets deleted (``delete_records``, as retention does) after the connector
    committed below them: discovery fails in one line naming topic, partition and
    offsets; with ``on_missing: skip`` they are skipped and counted."""
    from confluent_kafka import TopicPartition

    servers = kafka_broker.bootstrap_servers
    topic = new_topic(1)
    produce(servers, topic, range(60))
    src = source(servers, topic, range(40, 60), {"tasks_max": 1, "max_batch_size": 20})
    c = Connector(src, tmp_path / "c")
    try:
        first = c.discover()
        assert len(first.batch_ids) == 1
        c.run(first.batch_ids)  # offsets 0..19
        admin = kafka_broker.admin()  # kept: the futures die with their client
        done = admin.delete_records([TopicPartition(topic, 0, 40)], operation_timeout=30)
        for f in done.values():
            f.result(30)
        with pytest.raises(OSError) as raised:
            c.discover()
        text = str(raised.value)
        assert "\n" not in text, text
        assert f"topic {topic}" in text and "offsets 20..39 of partition 0" in text, text
        assert "on_missing: skip" in text and "kafka_input connector" in text, text
        assert "discovery failed" in (c.status().fatal_error or ""), c.status()
    finally:
        c.close()
    skip = Connector(src, tmp_path / "c", {**src.config, "on_missing": "skip"})
    try:
        skip.drain()
        got = ids_of(skip)
        assert got == list(range(0, 20)) + list(range(40, 60)), got
        errors = [e["message"] for e in skip.status().transport_errors]
        assert any("20 of the sequences 20..39" in m for m in errors), errors
        assert skip.finalize()
    finally:
        skip.close()


def test_consumer_group_holds_the_committed_positions(
    kafka_broker: Any, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """With ``group.id``, the committed position of every partition reaches the consumer
    group once its batch committed (Kafka's tools show the connector's lag)."""
    from confluent_kafka import Consumer, TopicPartition

    servers = kafka_broker.bootstrap_servers
    topic = new_topic(3)
    produce(servers, topic, range(90), partitions=3)
    group = f"ac-group-{uuid.uuid4().hex[:8]}"
    c = Connector(source(servers, topic, range(90), **{"group.id": group}), tmp_path / "c")
    try:
        c.drain()  # the last discovery, after the commits, writes the group's offsets
        assert_same_records(c.table(), c.expected(), "id", "table")
        positions = {k: o.offset for k, o in c.store.cursor(c.ref).offsets.items()}
        assert positions == {f"{topic}/{p}": 30 for p in range(3)}, positions
        consumer = Consumer({"bootstrap.servers": servers, "group.id": group})
        try:
            committed = consumer.committed([TopicPartition(topic, p) for p in range(3)], 30)
        finally:
            consumer.close()
        assert {f"{topic}/{tp.partition}": tp.offset for tp in committed} == positions
    finally:
        c.close()


# --- bad messages, config errors, secrets --------------------------------------------------


@pytest.mark.parametrize("tolerance", ["none", "all"])
def test_bad_messages_under_both_tolerances(
    kafka_broker: Any, new_topic: TopicFactory, tmp_path: Path, tolerance: str
) -> None:
    """``errors.tolerance: none`` fails the batch in one line naming the record;
    ``all`` lands the good messages and makes each bad one a dead letter, counted."""
    from confluent_kafka import Producer

    from airflow_connectors.engine.batch import BatchFailed
    from airflow_connectors.sinks._fs import parquet_dataset

    servers = kafka_broker.bootstrap_servers
    topic = new_topic(1)
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
    bad = {7: b'{"id": 7, "name": ', 13: b"not json at all"}
    for i in range(20):
        producer.produce(topic, value=bad.get(i, value(i)))
    assert producer.flush(30) == 0
    good = [i for i in range(20) if i not in bad]
    src = source(servers, topic, good, {"errors": {"tolerance": tolerance}})
    c = Connector(src, tmp_path / "c")
    try:
        if tolerance == "none":
            with pytest.raises(BatchFailed) as failed:
                c.drain()
            text = str(failed.value)
            assert "\n" not in text and f"record 8 (line 8) of {topic}/0" in text, text
            assert "errors.tolerance: all" in text, text
            assert c.table().num_rows == 0 and c.status().total_records == 0
            return
        c.drain()
        assert_same_records(c.table(), c.expected(), "id", "good messages")
        st = c.status()
        assert st.num_parse_errors == 2 and st.total_records == len(good), st
        dataset = parquet_dataset(c.ctx.sink().location("errors"))
        assert dataset is not None
        dead = dataset.to_table().sort_by("record_number").to_pylist()
        assert [(d["source_key"], d["record_number"]) for d in dead] == [
            (f"{topic}/0", 8),
            (f"{topic}/0", 14),
        ], dead
        assert "not json at all" in dead[1]["raw_text"]
    finally:
        c.close()


def test_config_errors_are_one_line_naming_the_field(
    kafka_broker: Any, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """A key that is neither a field nor a librdkafka setting, a missing topic and a
    partition the topic lacks: one line naming the connector and the field."""
    from airflow_connectors.catalog import validate_pipeline
    from airflow_connectors.transports import Cursor

    servers = kafka_broker.bootstrap_servers
    topic = new_topic(1)
    src = source(servers, topic, [])
    errors = validate_pipeline(src.pipeline_doc({**src.config, "fetchminbytes": 1}))
    assert [e.path for e in errors] == ["tables.t.connectors[0].transport.config.fetchminbytes"]
    assert "unknown field 'fetchminbytes'" in errors[0].message, errors[0].message
    (missing,) = validate_pipeline(src.pipeline_doc({"topic": topic}))
    assert "bootstrap.servers is required" in missing.message, missing
    for config, says in (
        ({**src.config, "topic": "ac_kin_missing"}, "topic ac_kin_missing"),
        ({**src.config, "partitions": [0, 7]}, "partition(s) 7 do not exist"),
    ):
        c = Connector(src, tmp_path / says[:5], config)
        try:
            with pytest.raises(FileNotFoundError) as raised:
                c.list_work(Cursor())
            text = str(raised.value)
            assert "\n" not in text and says in text, text
            assert text.startswith("kafka_input connector t.source: "), text
        finally:
            c.close()


def test_secrets_never_in_describe_errors_or_logs(
    kafka_broker: Any, new_topic: TopicFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``sasl.password`` and ``ssl.key.password`` are masked in ``describe()``; an error
    of a broker that refuses the client and the log never show them."""
    import logging

    from airflow_connectors.transports import Cursor

    topic = new_topic(1)
    secret, key_secret = "hunter2-sasl-pw", "k3y-passw0rd"
    src = source(kafka_broker.bootstrap_servers, topic, [])
    config = {
        **src.config,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": secret,
        "ssl.key.password": key_secret,
    }
    src = dataclasses.replace(src, connector={**src.connector, "errors": {"retry.timeout": 0}})
    c = Connector(src, tmp_path / "c", {**config, "socket.connection.setup.timeout.ms": 2000})
    caplog.set_level(logging.DEBUG)
    try:
        transport = c.transport()
        text = transport.describe()
        assert topic in text and secret not in text and key_secret not in text, text
        with pytest.raises(OSError) as raised:  # the broker speaks PLAINTEXT only
            transport.discover(Cursor(), c.limits()).__next__()
        error = str(raised.value)
        assert "\n" not in error and "kafka_input connector t.source" in error, error
        for seen in (error, caplog.text, repr(transport.config)):
            assert secret not in seen and key_secret not in seen
    finally:
        c.close()


# --- connection resets and a broker restart -----------------------------------------------


class _TcpProxy:
    """A TCP forwarder on ``127.0.0.1:<port>`` to a broker's port: what that broker
    advertises, so every client connection (bootstrap and the reconnects to the
    advertised listener) goes through it. :meth:`reset_after` arms a one-shot reset
    (RST) of every open connection once that many bytes more went to the clients."""

    def __init__(self) -> None:
        import socket

        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.upstream = 0
        self.resets = 0
        self._open: list[Any] = []
        self._armed: int | None = None
        self._lock = threading.Lock()

    def start(self, upstream: int) -> None:
        self.upstream = upstream
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._open += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src: Any, dst: Any, to_client: bool) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                if to_client:
                    self._count(len(data))
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()

    def _count(self, n: int) -> None:
        with self._lock:
            if self._armed is None:
                return
            self._armed -= n
            if self._armed > 0:
                return
            self._armed = None
        self.reset()

    def reset_after(self, n: int) -> None:
        with self._lock:
            self._armed = n

    def reset(self) -> None:
        """Reset (RST) every open connection."""
        import socket
        import struct

        with self._lock:
            conns, self._open = self._open, []
            self.resets += 1
        for s in conns:
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                # shutdown wakes the pump thread blocked in recv (a close alone would
                # not); its close then resets the connection.
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()
        self.reset()


def test_connection_resets_and_a_broker_restart_mid_read_end_exact(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker of its own advertises a TCP proxy: the proxy resets every connection in
    the middle of a batch's read, then the broker stops and starts again (same storage)
    while the next batches read. Every batch retries to the end: the table is exact
    (count, keys, checksum) and the retries show in the log."""
    import logging

    from airflow_connectors.testing.conformance import table_checksum
    from airflow_connectors.testing.kafka import KafkaBroker

    caplog.set_level(logging.DEBUG, logger="airflow_connectors.transports")
    proxy = _TcpProxy()
    broker = KafkaBroker(
        tmp_path / "broker",
        properties={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"},
    )
    proxy.start(broker.port)
    restarted: list[BaseException] = []
    try:
        broker.start()
        servers = f"127.0.0.1:{proxy.port}"
        admin = broker.admin()
        from confluent_kafka.admin import NewTopic

        topic = f"ac_kin_{uuid.uuid4().hex[:10]}"
        admin.create_topics([NewTopic(topic, 2)])[topic].result(30)
        ids = range(1, 401)
        produce(servers, topic, ids, partitions=2)
        src = source(servers, topic, ids, {"max_batch_size": 50})
        c = Connector(src, tmp_path / "c")
        try:
            found = c.discover()
            assert len(found.batch_ids) >= 4, found.batch_ids
            half = len(found.batch_ids) // 2
            proxy.reset_after(3000)  # inside the first batch's fetches
            c.run(found.batch_ids[:half])
            assert proxy.resets >= 1, "the proxy reset no connection"

            def restart() -> None:
                try:
                    time.sleep(2)
                    broker.start()
                except BaseException as e:  # reported by the test thread
                    restarted.append(e)

            broker.stop()
            thread = threading.Thread(target=restart)
            thread.start()
            c.run(found.batch_ids[half:])  # starts while the broker is down
            thread.join(120)
            assert not restarted, restarted
            c.drain()
            expected = c.expected()
            table = c.table()
            assert_same_records(table, expected, "id", "table after resets and a restart")
            assert table.num_rows == len(ids) and len(set(ids_of(c))) == len(ids)
            assert table_checksum(table, "id") == table_checksum(expected, "id")
            assert c.finalize() and c.status().total_records == len(ids)
        finally:
            c.close()
        # librdkafka's reconnects (error_cb, logged) and the transport's own retries.
        logged = [r.getMessage() for r in caplog.records]
        reconnects = [m for m in logged if "librdkafka:" in m or "transient error, retry" in m]
        assert any("_ALL_BROKERS_DOWN" in m or "_TRANSPORT" in m for m in reconnects), logged
    finally:
        proxy.close()
        broker.stop()
