"""Wakes waiters when a message arrives on a Kafka topic: what lets a ``new_data``
trigger of a ``kafka_input`` connector probe at once instead of at its next poll.

One consumer per process and cluster (per distinct client settings), not one per
trigger: a triggerer running thousands of connectors of one cluster keeps one
connection set and one thread. The consumer is assigned each watched topic's partitions
at their ends (no consumer group, nothing committed) and only learns *that* something
arrived: the first message of a topic wakes every waiter of it and pauses the topic's
partitions, so a busy topic is not streamed into the triggerer; a waiter that wants to
hear of the next message re-arms the topic (:meth:`Watch.rearm`), which seeks its
partitions to their ends again and resumes them. Polling goes on beside it: a wake is
only a hint (partitions added later, a broker that cannot be reached, a message between
a wake and the re-arm are found by the next poll).

The settings may hold credentials: they key the registry as a digest and are never
logged.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from airflow_connectors.spec.redact import is_secret_option, mask_text

log = logging.getLogger(__name__)

#: Seconds one consume call of the watcher's thread waits for a message: also how long
#: a re-arm (which the woken trigger waits for before it probes) may wait for the thread.
CONSUME_WAIT = 0.05
#: Seconds a topic's partition list is trusted by a re-arm (a new partition is found by
#: the next arm after that, and by the triggers' polls meanwhile).
PARTITIONS_TTL = 30.0
#: Seconds :meth:`Watch.armed` waits for the topic's partitions to be at their ends.
ARM_TIMEOUT = 10.0

_lock = threading.Lock()
_watchers: dict[str, _Watcher] = {}


@dataclass(eq=False)
class Watch:
    """One waiter's registration: ``wake()`` is called (from the watcher's thread) when
    a message arrives on ``topic`` after the topic was (re-)armed."""

    watcher: _Watcher
    topic: str
    wake: Callable[[], None]
    _armed: threading.Event = field(default_factory=threading.Event)

    def armed(self, timeout: float = ARM_TIMEOUT) -> bool:
        """Waits until the topic's partitions sit at their ends (a message produced from
        then on wakes); False when that did not happen in ``timeout`` seconds (a broker
        that cannot be reached, or the watcher stopped: the waiter polls)."""
        deadline = time.monotonic() + timeout
        while not self._armed.wait(0.05):
            if not self.watcher.alive() or time.monotonic() > deadline:
                return False
        return True

    def rearm(self) -> None:
        """Listens for the topic's next message (seek to the ends, resume)."""
        self._armed.clear()
        self.watcher.request_arm(self)


@contextlib.contextmanager
def watch_topic(
    settings: dict[str, str],
    client_config: Callable[[], dict[str, Any]],
    topic: str,
    wake: Callable[[], None],
) -> Iterator[Watch]:
    """While open, ``wake()`` is called when a message arrives on ``topic`` (then not
    again until :meth:`Watch.rearm`). ``settings`` (the librdkafka settings, secrets
    included) pick the process's consumer of that cluster; ``client_config()`` makes its
    configuration when there is none yet."""
    key = hashlib.sha256(json.dumps(sorted(settings.items())).encode()).hexdigest()
    with _lock:
        watcher = _watchers.get(key)
        if watcher is None or not watcher.alive():
            watcher = _watchers[key] = _Watcher(key, client_config)
        entry = Watch(watcher, topic, wake)
        watcher.add(entry)
    try:
        yield entry
    finally:
        watcher.remove(entry)


class _Watcher:
    """The consumer of one cluster and its thread (see the module's docstring)."""

    def __init__(self, key: str, client_config: Callable[[], dict[str, Any]]) -> None:
        self.key = key
        self._client_config = client_config
        self._lock = threading.Lock()
        self._entries: dict[str, set[Watch]] = {}
        self._arm: set[Watch] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafka-wake", daemon=True)
        self._started = False
        #: The settings' secret values, masked in what the watcher logs.
        self._secrets: set[str] = set()
        #: When each topic's partitions were last listed (monotonic seconds).
        self._listed: dict[str, float] = {}

    def alive(self) -> bool:
        return not self._stop.is_set()

    def add(self, entry: Watch) -> None:
        with self._lock:
            self._entries.setdefault(entry.topic, set()).add(entry)
            self._arm.add(entry)
            if not self._started:
                self._started = True
                self._thread.start()

    def request_arm(self, entry: Watch) -> None:
        with self._lock:
            if entry in self._entries.get(entry.topic, ()):
                self._arm.add(entry)

    def remove(self, entry: Watch) -> None:
        with self._lock:
            waiting = self._entries.get(entry.topic)
            if waiting is not None:
                waiting.discard(entry)
                if not waiting:
                    del self._entries[entry.topic]
            self._arm.discard(entry)
            if self._entries:
                return
            self._stop.set()  # the last waiter left: the thread closes the consumer
        with _lock:
            if _watchers.get(self.key) is self:
                del _watchers[self.key]

    def _run(self) -> None:
        try:
            self._consume()
        except Exception as e:  # a hint only: the waiters poll on
            # Stopping anyway (its last waiter left while it waited on the broker): quiet.
            (log.debug if self._stop.is_set() else log.warning)(
                "Kafka wake-up watcher stopped (%s); new_data triggers poll only",
                mask_text(str(e), self._secrets),
            )
            log.debug("Kafka wake-up watcher", exc_info=True)
        finally:
            self._stop.set()
            with _lock:
                if _watchers.get(self.key) is self:
                    del _watchers[self.key]

    def _consume(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        conf = self._client_config()
        self._secrets = {str(v) for k, v in conf.items() if v and is_secret_option(k)}
        conf.update(
            {
                "enable.partition.eof": "false",
                "auto.offset.reset": "latest",
                "fetch.wait.max.ms": "100",
                "fetch.max.bytes": "1048576",
                "max.partition.fetch.bytes": "65536",
            }
        )
        consumer = Consumer(conf)
        assigned: dict[str, list[int]] = {}
        try:
            while not self._stop.is_set():
                with self._lock:
                    arm, self._arm = self._arm, set()
                    gone = [t for t in assigned if t not in self._entries]
                for topic in gone:
                    consumer.incremental_unassign(
                        [TopicPartition(topic, p) for p in assigned.pop(topic)]
                    )
                for topic in {e.topic for e in arm}:
                    self._arm_topic(consumer, topic, assigned)
                for entry in arm:
                    entry._armed.set()
                woken: set[str] = set()
                for msg in consumer.consume(num_messages=500, timeout=CONSUME_WAIT):
                    name = msg.topic()
                    if msg.error() is None and name is not None and name in assigned:
                        woken.add(name)
                for topic in woken:
                    consumer.pause([TopicPartition(topic, p) for p in assigned[topic]])
                    self._wake(topic)
        finally:
            consumer.close()

    def _arm_topic(self, consumer: Any, topic: str, assigned: dict[str, list[int]]) -> None:
        """Puts ``topic``'s partitions at their ends now (explicit offsets, so the ends
        are known when :meth:`Watch.armed` returns): a message from then on wakes. A
        re-arm within :data:`PARTITIONS_TTL` of the last listing skips listing the
        partitions again (a metadata round trip, most of a re-arm)."""
        from confluent_kafka import TopicPartition

        now = time.monotonic()
        known_for = now - self._listed.get(topic, -PARTITIONS_TTL)
        if assigned.get(topic) and known_for < PARTITIONS_TTL:
            ends = [
                TopicPartition(topic, p, self._high(consumer, topic, p)) for p in assigned[topic]
            ]
        else:
            ends = self._ends(consumer, topic)
            if ends:
                self._listed[topic] = now
        known = assigned.get(topic, [])
        again = [tp for tp in ends if tp.partition in known]
        for tp in again:
            consumer.seek(tp)
        if again:
            consumer.resume(again)
        new = [tp for tp in ends if tp.partition not in known]
        if new:
            consumer.incremental_assign(new)
        assigned[topic] = sorted({*known, *(tp.partition for tp in new)})

    def _wake(self, topic: str) -> None:
        with self._lock:
            waiting = list(self._entries.get(topic, ()))
        for entry in waiting:
            try:
                entry.wake()
            except Exception:  # a waiter's loop may be closing
                log.debug("a Kafka wake-up failed", exc_info=True)

    @staticmethod
    def _ends(consumer: Any, topic: str) -> list[Any]:
        """Each partition of ``topic`` at its high watermark (none: the topic is not
        there yet; the next arm looks again)."""
        from confluent_kafka import TopicPartition

        meta = consumer.list_topics(topic, timeout=5).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        return [
            TopicPartition(topic, p, _Watcher._high(consumer, topic, p))
            for p in sorted(meta.partitions)
        ]

    @staticmethod
    def _high(consumer: Any, topic: str, partition: int) -> int:
        """The partition's high watermark now (asked of the broker)."""
        from confluent_kafka import TopicPartition

        _, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=5, cached=False
        )
        return int(high)
