"""A ``new_data`` trigger of a ``kafka_input`` connector is woken by the topic's next
message (one consumer per cluster and process, at the partitions' ends, paused after each
wake) instead of waiting for its next poll; against the session's real Kafka broker."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from test_triggers import first_event, record_probes, slow_trigger, watch_spec

from airflow_connectors.transports import _kafka_wake

pytestmark = pytest.mark.sources


@pytest.fixture
def topic(kafka_broker: Any) -> Iterator[str]:
    from confluent_kafka.admin import NewTopic

    admin = kafka_broker.admin()
    name = f"ac_wake_{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, 2)])[name].result(30)
    yield name
    for f in admin.delete_topics([name]).values():
        f.result(30)


def produce(servers: str, topic: str, *values: bytes, partition: int = 0) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers})
    for value in values:
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0


def kafka_transport(servers: str, topic: str) -> dict[str, Any]:
    return {
        "name": "kafka_input",
        "config": {"topic": topic, "bootstrap.servers": servers, "follow": True},
    }


def test_a_message_wakes_the_trigger_before_its_next_poll(
    kafka_broker: Any,
    topic: str,
    connectors_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The poll is two minutes away: a message produced after the first probe is probed
    at once (what each probe found is recorded: the event comes from a second probe,
    woken by the message)."""
    servers = kafka_broker.bootstrap_servers
    trigger = slow_trigger(watch_spec("", kafka_transport(servers, topic)))
    # The first probe found nothing: now the message.
    message = threading.Timer(0.5, produce, (servers, topic, b'{"id": 1}'), {"partition": 1})
    answers = record_probes(monkeypatch, after_first=message.start)
    event = first_event(trigger, within=60.0)
    assert event is not None and event.payload["endpoint"] == "events.files"
    assert answers[0] is None and answers[-1] == event.payload["data"]
    assert len(answers) == 2  # the first poll, then the one the message woke
    assert not _kafka_wake._watchers, "the watcher outlived its last trigger"


def test_one_consumer_per_cluster_woken_once_per_arm(kafka_broker: Any, topic: str) -> None:
    """Two waiters of one cluster share one watcher (one consumer thread); a message wakes
    both once, the next one wakes nobody until a waiter re-arms; the thread ends with the
    last waiter."""
    servers = kafka_broker.bootstrap_servers
    settings = {"bootstrap.servers": servers}

    def client_config() -> dict[str, Any]:
        return {"bootstrap.servers": servers, "group.id": f"ac-wake-{uuid.uuid4().hex[:8]}"}

    woken = {"a": threading.Event(), "b": threading.Event()}
    counts = {"a": 0, "b": 0}

    def waker(name: str) -> Any:
        def wake() -> None:
            counts[name] += 1
            woken[name].set()

        return wake

    produce(servers, topic, b"before")  # at the ends: an older message wakes nobody
    with (
        _kafka_wake.watch_topic(settings, client_config, topic, waker("a")) as a,
        _kafka_wake.watch_topic(settings, client_config, topic, waker("b")) as b,
    ):
        # One watcher (one consumer, one thread) for both.
        assert len(_kafka_wake._watchers) == 1 and a.watcher is b.watcher
        thread = a.watcher._thread
        assert thread.is_alive()
        assert a.armed() and b.armed()
        assert not woken["a"].wait(1.0), "a message from before the watch woke it"
        produce(servers, topic, b"one", partition=1)
        assert woken["a"].wait(30) and woken["b"].wait(30)
        woken["a"].clear()
        produce(servers, topic, b"two", partition=0)
        assert not woken["a"].wait(2.0), "paused after the wake, yet woken again"
        a.rearm()
        assert a.armed()
        produce(servers, topic, b"three", partition=0)
        assert woken["a"].wait(30)
        assert counts == {"a": 2, "b": 2}  # b's second wake: the same re-armed topic
    thread.join(10)
    assert not thread.is_alive(), "the watcher's thread outlived its waiters"
    assert not _kafka_wake._watchers


def test_an_unreachable_broker_leaves_the_trigger_polling(connectors_env: dict[str, str]) -> None:
    """No broker at the address: the watch never arms (the trigger polls on) and its
    thread ends with the waiter; no exception reaches the trigger."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    settings = {"bootstrap.servers": f"127.0.0.1:{port}"}

    def client_config() -> dict[str, Any]:
        return {
            **settings,
            "group.id": "ac-wake-none",
            "socket.connection.setup.timeout.ms": "1000",
            "log_level": 0,  # the refused connections: expected here
        }

    threads = []

    async def watch() -> bool:
        with _kafka_wake.watch_topic(settings, client_config, "nowhere", lambda: None) as w:
            threads.append(w.watcher._thread)
            return await asyncio.to_thread(w.armed, 3.0)

    assert asyncio.run(watch()) is False
    threads[0].join(30)  # it gives up on the broker, quietly: its last waiter left
    assert not threads[0].is_alive()
