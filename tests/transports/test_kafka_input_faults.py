"""``kafka_input`` under connection faults: a broker of this module (the session's must
not be stopped) advertises a TCP fault proxy (:class:`TcpFaultProxy`) as its listener, so
every client connection, bootstrap and partition leader alike, runs through it. Its
connections are reset mid-read, and the broker is killed and started again on the same
storage mid-read; both runs end with the exact table, the faults counted or logged."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_connectors.testing.conformance import Connector, Source, assert_same_records
from airflow_connectors.testing.kafka import KafkaBroker, TcpFaultProxy
from airflow_connectors.testing.standalone import free_port

pytestmark = pytest.mark.sources

COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "pad": "VARCHAR"}
MESSAGES = 3000
#: Small fetches and a small prefetch queue: the read takes many round trips through
#: the proxy, paced by the connector's consume calls, so a fault lands mid-read.
PACED = {
    "max.partition.fetch.bytes": 8192,
    "fetch.max.bytes": 8192,
    "message.max.bytes": 8192,
    "queued.max.messages.kbytes": 16,
    "queued.min.messages": 10,
}


def record(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"n{i}", "pad": "x" * 150}


@pytest.fixture(scope="module")
def proxied(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[KafkaBroker, TcpFaultProxy]]:
    """A broker whose advertised listener is a fault proxy in front of it."""
    port = free_port()
    proxy = TcpFaultProxy(upstream=port).start()
    broker = KafkaBroker(
        tmp_path_factory.mktemp("kafka-proxied"),
        port,
        properties={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"},
    )
    try:
        broker.start()
        yield broker, proxy
    finally:
        broker.stop()
        proxy.stop()


def _topic(broker: KafkaBroker, proxy: TcpFaultProxy) -> str:
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    name = f"ac_kfault_{uuid.uuid4().hex[:10]}"
    admin = broker.admin()
    admin.create_topics([NewTopic(name, 2)])[name].result(30)
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{proxy.port}", "linger.ms": 5})
    for i in range(MESSAGES):
        producer.produce(name, value=json.dumps(record(i)).encode(), partition=i % 2)
    assert producer.flush(60) == 0
    return name


def _connector(proxy: TcpFaultProxy, topic: str, root: Path, **config: Any) -> Connector:
    source = Source(
        "kafka_input",
        {
            "topic": topic,
            "bootstrap.servers": f"127.0.0.1:{proxy.port}",
            "follow": False,
            **PACED,
            **config,
        },
        COLUMNS,
        [record(i) for i in range(MESSAGES)],
        "id",
        format={"name": "json", "config": {"update_format": "raw"}},
        connector={
            "tasks_max": 2,
            "errors": {"retry.timeout": 60_000, "retry.delay.max.ms": 500},
        },
    )
    return Connector(source, root)


def test_connection_resets_mid_read_end_with_the_exact_table(
    proxied: tuple[KafkaBroker, TcpFaultProxy], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every connection through the proxy is reset three times while the batches read:
    the client reconnects (or the connector retries the read), the read goes on from
    where it was, the table is exact and the resets are counted or logged."""
    broker, proxy = proxied
    topic = _topic(broker, proxy)
    # librdkafka reconnects by itself, but after every connection was reset it may stay
    # without a leader for a while: the read then times out after 3 s without a message
    # and is retried by the connector with a new consumer (counted).
    c = _connector(proxy, topic, tmp_path / "c", inactivity_timeout_secs=3)
    caplog.set_level(logging.DEBUG, logger="airflow_connectors.transports.kafka_input")
    resets_before = proxy.resets
    stop = threading.Event()

    def reset_thrice() -> None:
        for _ in range(3):
            proxy.reset_after(60_000)  # cut once 60 kB more went to the clients
            while proxy.armed and not stop.wait(0.01):
                pass

    try:
        found = c.discover()
        assert found.batch_ids
        resetter = threading.Thread(target=reset_thrice, daemon=True)
        resetter.start()
        c.run(found.batch_ids)
        c.drain()
        stop.set()
        resetter.join(5)
        assert proxy.resets > resets_before, "no connection was reset during the read"
        assert_same_records(c.table(), c.expected(), "id", "table after resets")
        assert c.finalize()
        st = c.status()
        assert st.total_records == MESSAGES
        logged = [r.getMessage() for r in caplog.records if "kafka_input" in r.name]
        assert st.num_transport_errors > 0 or any(
            str(proxy.port) in m and ("Disconnected" in m or "reset" in m or "closed" in m)
            for m in logged
        ), f"the resets were neither counted nor logged: {logged[:5]}"
    finally:
        stop.set()
        proxy.reset_after(None)
        c.close()


def test_a_broker_killed_and_restarted_mid_read_ends_with_the_exact_table(
    proxied: tuple[KafkaBroker, TcpFaultProxy], tmp_path: Path
) -> None:
    """The broker is killed while a batch reads and started again on the same storage:
    the read times out (inactivity_timeout_secs), is retried under the connector's
    errors.retry.* settings and resumes after the last message it delivered; the retries
    are counted as transport errors and the table is exact."""
    broker, proxy = proxied
    topic = _topic(broker, proxy)
    c = _connector(proxy, topic, tmp_path / "c", inactivity_timeout_secs=1)
    restarted = threading.Event()
    failed: list[BaseException] = []

    def restart_mid_read(start: int) -> None:
        try:
            deadline = time.monotonic() + 60
            while proxy.relayed < start + 60_000 and time.monotonic() < deadline:
                time.sleep(0.005)
            # A crash: a controlled shutdown serves fetches for a while yet, and the
            # read would end before the broker is gone.
            broker.kill()
            time.sleep(1.5)  # longer than inactivity_timeout_secs
            broker.start()  # the same storage and ports: it recovers its log
            restarted.set()
        except BaseException as e:  # reported by the test
            failed.append(e)

    try:
        found = c.discover()
        assert found.batch_ids
        restarter = threading.Thread(target=restart_mid_read, args=(proxy.relayed,), daemon=True)
        restarter.start()
        c.run(found.batch_ids)
        restarter.join(120)
        assert not failed, failed
        assert restarted.is_set(), "the broker was not restarted"
        c.drain()
        assert_same_records(c.table(), c.expected(), "id", "table after a broker restart")
        assert c.finalize()
        st = c.status()
        assert st.total_records == MESSAGES
        assert st.num_transport_errors > 0, "the read's retries after the restart were not counted"
    finally:
        c.close()
