"""``nats_input`` against the NATS JetStream server on 127.0.0.1:4222: the conformance
kit (with its kill between sink write and commit), follow mode, end of input at the
first discovery's last sequence, the durable consumer's ack floor, a subject filter,
gaps in the stream, and connection errors. Each test fills a stream of its own (a unique
name, deleted after)."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from airflow_connectors.testing.conformance import (
    Connector,
    Source,
    TransportConformance,
    assert_same_records,
)
from airflow_connectors.transports import Cursor
from airflow_connectors.transports.nats_input import NatsInputTransport

pytestmark = [pytest.mark.sources, pytest.mark.nats]

#: scripts/services.sh starts it; AIRFLOW_CONNECTORS_TEST_NATS names a server of your own.
SERVER = os.environ.get("AIRFLOW_CONNECTORS_TEST_NATS", "nats://127.0.0.1:4222")
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"}
JSON = {"name": "json", "config": {"update_format": "raw"}}
#: Records of the conformance stream; batches of BATCH, so draining takes two discoveries.
RECORDS = 150
BATCH = 30


def record(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"n{i}", "amount": i / 4}


class Stream:
    """A JetStream stream of this test (subjects ``<name>.>``), created and deleted by
    the ``stream`` fixture."""

    def __init__(self) -> None:
        self.name = f"ac_nats_{uuid.uuid4().hex[:10]}"

    def _run(self, fn: Any) -> Any:
        async def go() -> Any:
            nc = await nats.connect(SERVER, allow_reconnect=False)
            try:
                return await fn(nc, nc.jetstream())
            finally:
                await nc.close()

        return asyncio.run(go())

    def create(self) -> None:
        async def fn(nc: Any, js: Any) -> None:
            await js.add_stream(name=self.name, subjects=[f"{self.name}.>"])

        self._run(fn)

    def delete(self) -> None:
        async def fn(nc: Any, js: Any) -> None:
            await js.delete_stream(self.name)

        self._run(fn)

    def publish(self, ids: range, subject: str = "a") -> None:
        """One JSON message per id on ``<name>.<subject>``."""

        async def fn(nc: Any, js: Any) -> None:
            for i in ids:
                await js.publish(f"{self.name}.{subject}", json.dumps(record(i)).encode())

        self._run(fn)

    def delete_msgs(self, seqs: list[int]) -> None:
        async def fn(nc: Any, js: Any) -> None:
            for s in seqs:
                await js.delete_msg(self.name, s)

        self._run(fn)

    def purge_below(self, seq: int) -> None:
        """Remove every message below sequence ``seq``."""

        async def fn(nc: Any, js: Any) -> None:
            await js.purge_stream(self.name, seq=seq)

        self._run(fn)

    def consumer(self, name: str) -> Any:
        async def fn(nc: Any, js: Any) -> Any:
            return await js.consumer_info(self.name, name)

        return self._run(fn)

    def config(self, **more: Any) -> dict[str, Any]:
        return {"connection_config": {"server_url": SERVER}, "stream_name": self.name, **more}

    def source(self, ids: range, **config: Any) -> Source:
        cfg = self.config(**config)
        return Source(
            transport="nats_input",
            config=cfg,
            columns=COLUMNS,
            format=JSON,
            records=[record(i) for i in ids],
            key_column="id",
            unbounded_config={**cfg, "follow": True},
            invalid_configs={
                "stream_name": {**cfg, "stream_name": "a.b"},
                "connection_config.server_url": {
                    **cfg,
                    "connection_config": {"server_url": "http://127.0.0.1:4222"},
                },
                "consumer_config.deliver_policy": {
                    **cfg,
                    "consumer_config": {"deliver_policy": "New"},
                },
                "connection_config.auth": {
                    **cfg,
                    "connection_config": {"server_url": SERVER, "auth": {"jwt": "x"}},
                },
            },
            connector={"max_batch_size": BATCH},
        )


@pytest.fixture
def stream() -> Iterator[Stream]:
    s = Stream()
    s.create()
    try:
        yield s
    finally:
        s.delete()


class TestNatsInput(TransportConformance):
    """The conformance kit on a stream of RECORDS JSON messages."""

    @pytest.fixture
    def source(self, stream: Stream) -> Source:
        stream.publish(range(1, RECORDS + 1))
        return stream.source(range(1, RECORDS + 1))


def ids_of(c: Connector) -> list[int]:
    return sorted(c.table().column("id").to_pylist())


def test_follow_reads_messages_published_after_the_first_run(
    stream: Stream, tmp_path: Path
) -> None:
    """follow: true never ends; a later discovery plans the messages published since."""
    stream.publish(range(1, 41))
    c = Connector(stream.source(range(1, 41), follow=True), tmp_path / "c")
    try:
        c.drain()
        assert ids_of(c) == list(range(1, 41))
        assert not c.finalize(), "a following connector reached end of input"
        stream.publish(range(41, 101))
        found = c.discover()
        assert found.batch_ids, "the messages published after the first run were not planned"
        assert stream.consumer("ac_t_source").ack_floor.stream_seq == 40
        c.run(found.batch_ids)
        assert not c.finalize()
        assert ids_of(c) == list(range(1, 101))
        assert c.status().total_records == 100
        info = stream.consumer("ac_t_source")  # acked by the finalize step
        assert info.ack_floor.stream_seq == 100 and info.num_pending == 0, info
    finally:
        c.close()


def test_end_of_input_at_the_first_discoverys_last_sequence(stream: Stream, tmp_path: Path) -> None:
    """Without follow the bound is the last sequence the first discovery saw: messages
    published later are not read, and the connector ends."""
    stream.publish(range(1, 101))
    c = Connector(stream.source(range(1, 101)), tmp_path / "c")
    try:
        found = c.discover()
        assert found.batch_ids and not found.end_of_input
        stream.publish(range(101, 131))  # after the first discovery
        c.run(found.batch_ids)
        c.drain()
        assert c.finalize(), "no end of input once the first discovery's range is committed"
        assert ids_of(c) == list(range(1, 101))
        again = c.discover()
        assert again.batch_ids == [] and again.end_of_input
    finally:
        c.close()


def test_durable_consumer_ack_floor_follows_the_committed_sequence(
    stream: Stream, tmp_path: Path
) -> None:
    """The durable consumer is acked up to the first uncommitted sequence only: a later
    batch committed first does not move it; its pending count is the backlog."""
    stream.publish(range(1, 121))
    c = Connector(stream.source(range(1, 121)), tmp_path / "c")
    try:
        found = c.discover()
        assert len(found.batch_ids) == 4, found
        durable = "ac_t_source"
        info = stream.consumer(durable)
        assert info.ack_floor.stream_seq == 0 and info.num_pending == 120
        c.run(found.batch_ids[1:])  # sequences 31..120 committed, 1..30 not
        c.finalize()  # runs after the batches: acks what is committed
        assert stream.consumer(durable).ack_floor.stream_seq == 0
        c.run(found.batch_ids[:1])
        c.finalize()
        info = stream.consumer(durable)
        assert info.ack_floor.stream_seq == 120, info.ack_floor
        assert info.num_pending == 0 and info.num_ack_pending == 0
        stream.publish(range(121, 131))  # backlog shows as pending
        assert stream.consumer(durable).num_pending == 10
    finally:
        c.close()


def test_subject_filter_reads_its_subjects_only(stream: Stream, tmp_path: Path) -> None:
    """filter_subjects: messages of other subjects are skipped, their sequences still
    committed; keys name the filter."""
    stream.publish(range(1, 31), subject="a")
    stream.publish(range(1001, 1021), subject="b")
    stream.publish(range(31, 61), subject="a")
    filtered = {"filter_subjects": [f"{stream.name}.a"]}
    c = Connector(stream.source(range(1, 61), consumer_config=filtered), tmp_path / "c")
    try:
        items = c.list_work(Cursor())
        assert items and all(i.key.startswith(f"{stream.name}/{stream.name}.a@") for i in items)
        c.drain()
        assert c.finalize()
        assert_same_records(c.table(), c.expected(), "id", "filtered table")
        info = stream.consumer("ac_t_source")
        assert info.ack_floor.stream_seq == 80 and info.num_pending == 0
    finally:
        c.close()


def test_gaps_are_skipped_and_reported(stream: Stream, tmp_path: Path) -> None:
    """Purged and deleted sequences neither hang a read nor vanish silently: discovery
    reports them as transport errors and the rest lands."""
    stream.publish(range(1, 101))
    stream.purge_below(11)  # 1..10 gone before the first discovery
    stream.delete_msgs([40, 41, 97])
    kept = [i for i in range(11, 101) if i not in (40, 41, 97)]
    c = Connector(
        stream.source(
            range(1, 101),
            consumer_config={"deliver_policy": {"ByStartSequence": {"start_sequence": 1}}},
        ),
        tmp_path / "c",
    )
    try:
        c.drain()
        assert ids_of(c) == kept
        assert c.finalize()
        st = c.status()
        assert st.total_records == len(kept)
        gone = [e["message"] for e in st.transport_errors]
        assert sum(int(m.split(" of the sequences")[0].split()[-1]) for m in gone) == 13, gone
        assert all("removed from the stream" in m for m in gone), gone
        # Deleting a message of a planned range before it is read: the batch commits
        # what remains.
        stream.publish(range(101, 121))
        f = Connector(stream.source(range(1, 121), follow=True), tmp_path / "f")
        try:
            found = f.discover()
            stream.delete_msgs([105])
            f.run(found.batch_ids)
            f.drain()
            assert 105 not in ids_of(f) and 120 in ids_of(f)
        finally:
            f.close()
    finally:
        c.close()


def test_a_stream_that_is_gone_or_a_server_that_is_down_fails_in_one_line(
    stream: Stream, tmp_path: Path
) -> None:
    """Connection and missing-stream errors: one line naming the connector and server,
    no credentials."""
    down = stream.source(range(0))
    cfg = {
        **down.config,
        "connection_config": {
            "server_url": "nats://alice:s3cr3t-pw@127.0.0.1:1",
            "connection_timeout_secs": 2,
        },
    }
    c = Connector(down, tmp_path / "c", cfg)
    try:
        with pytest.raises(ConnectionError) as raised:
            c.list_work(Cursor())
        text = str(raised.value)
        assert "\n" not in text and "s3cr3t" not in text, text
        assert "nats_input connector t.source" in text and "127.0.0.1:1" in text, text
    finally:
        c.close()
    missing = Connector(down, tmp_path / "m", {**down.config, "stream_name": "ac_nats_missing"})
    try:
        with pytest.raises(FileNotFoundError, match=r"ac_nats_missing.*fix stream_name"):
            missing.list_work(Cursor())
    finally:
        missing.close()


def test_describe_masks_the_password(stream: Stream) -> None:
    cfg = NatsInputTransport.Config.model_validate(
        stream.config(connection_config={"server_url": "nats://bob:hunter22@127.0.0.1:4222"})
    )
    text = NatsInputTransport(cfg, _table()).describe()
    assert "hunter22" not in text and stream.name in text


def _table() -> Any:
    from airflow_connectors.catalog import parse_pipeline

    doc = {"pipeline": "p", "tables": {"t": {"columns": COLUMNS}}}
    return parse_pipeline(doc).tables[0]


def test_a_stream_created_again_is_reported_not_read_from_the_old_offsets(
    stream: Stream, tmp_path: Path
) -> None:
    """A stream deleted and created again restarts its sequences below the committed
    one: discovery says so as a transport error instead of waiting silently."""
    stream.publish(range(1, 21))
    c = Connector(stream.source(range(1, 21), follow=True), tmp_path / "c")
    try:
        c.drain()
        stream.delete()
        stream.create()
        stream.publish(range(21, 26))
        found = c.discover()
        assert found.batch_ids == []
        errors = [e["message"] for e in c.status().transport_errors]
        assert any("below the committed sequence 20" in m for m in errors), errors
    finally:
        c.close()


def test_offsets_of_the_earlier_range_keys_are_resumed_from(stream: Stream, tmp_path: Path) -> None:
    """A connector that committed under the keys of releases before the sequence source
    (``<stream>@<first>-<last>``, one per range, the bound in ``last_seq``) resumes at
    the first sequence they do not cover and keeps their bound: nothing is read twice."""
    stream.publish(range(1, 71))
    c = Connector(stream.source(range(41, 61)), tmp_path / "c")
    try:
        c.store.ensure_connector(c.ref)
        c.store.set_stopped(c.ref, True)
        key = f"{stream.name}@{{:020d}}-{{:020d}}".format
        c.store.edit_offsets(
            c.ref,
            [
                {"key": key(1, 30), "offset": 31, "records": 30, "completed": True},
                {"key": key(31, 60), "offset": 41, "records": 10, "meta": {"last_seq": 60}},
            ],
        )
        c.store.set_stopped(c.ref, False)
        c.drain()
        assert ids_of(c) == list(range(41, 61))
        assert c.finalize(), "the bound kept by the earlier keys did not hold"
        assert stream.consumer("ac_t_source").ack_floor.stream_seq == 60
    finally:
        c.close()
