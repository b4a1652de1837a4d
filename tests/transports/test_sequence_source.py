"""The sequence source's rules (``transports/sequence.py``), on a real subclass over a
real log: ``sqlite_log`` (tests/transports/sqlite_log.py), partitions of numbered
messages in a SQLite file, installed as a third party installs a transport.

It passes the conformance kit (crash check included); beyond the kit: state stays one
offsets row per partition however many ranges commit, out of order too; the consumer
group is acknowledged only up to what is committed; purged and deleted sequences are
reported, never skipped silently; a bounded read ends where its first discovery saw the
partitions end; a range released by a stop is read again and nothing twice."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from sqlite_log import Log  # beside this file (tests/transports is on sys.path)

from airflow_connectors.state import schema
from airflow_connectors.testing.conformance import (
    Connector,
    Source,
    TransportConformance,
    assert_same_records,
)
from airflow_connectors.transports import TRANSPORTS
from airflow_connectors.transports.sequence import ENDS

COLUMNS = {"id": "BIGINT NOT NULL", "part": "INT NOT NULL"}
JSON = {"name": "json", "config": {"update_format": "raw"}}


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``sqlite_log`` as an installed distribution (a module plus an entry point) in a
    folder on this process's import path and the ingest job's."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(Path(__file__).with_name("sqlite_log.py"), site / "ac_sqlite_log.py")
    dist = site / "ac_sqlite_log-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ac-sqlite-log\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[airflow_connectors.transports]\nsqlite_log = ac_sqlite_log:SqliteLogTransport\n"
    )
    monkeypatch.syspath_prepend(str(site))
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    # The registry scans entry points once per process: scan again, forget it after.
    monkeypatch.setattr(TRANSPORTS, "_scanned", False)
    monkeypatch.setattr(TRANSPORTS, "_targets", dict(TRANSPORTS._targets))
    monkeypatch.setattr(TRANSPORTS, "_loaded", dict(TRANSPORTS._loaded))
    return "sqlite_log"


class Messages:
    """A log of JSON messages ``{"id": n, "part": p}`` (ids unique across partitions)
    and what the table should hold of it."""

    def __init__(self, path: Path, parts: int) -> None:
        self.log = Log(str(path))
        self.path = str(path)
        self.sent: dict[int, list[int]] = {p: [] for p in range(parts)}
        self.next_id = 0
        for p in range(parts):
            self.log.create(p)

    def append(self, part: int, n: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        self.log.append(part, [json.dumps({"id": i, "part": part}) for i in ids])
        self.sent[part] += ids
        return ids

    def records(self, ids: list[int] | None = None) -> list[dict[str, int]]:
        return [
            {"id": i, "part": p}
            for p, sent in self.sent.items()
            for i in sent
            if ids is None or i in ids
        ]

    def source(self, *, batch: int, tasks_max: int = 4, **config: Any) -> Source:
        cfg = {"path": self.path, **config}
        return Source(
            transport="sqlite_log",
            config=cfg,
            columns=COLUMNS,
            format=JSON,
            records=self.records(),
            key_column="id",
            bounded=not cfg.get("follow", False),
            unbounded_config={**cfg, "follow": True},
            invalid_configs={"path": {"path": 3}},
            connector={"max_batch_size": batch, "tasks_max": tasks_max},
        )


def ids_of(c: Connector) -> list[int]:
    return sorted(c.table().column("id").to_pylist())


def offsets_rows(c: Connector) -> list[dict[str, Any]]:
    return c.store.offsets(c.ref)


class TestSqliteLog(TransportConformance):
    """The kit on three partitions of 40, 25 and 0 messages, batches of 20."""

    @pytest.fixture
    def source(self, installed: str, tmp_path: Path) -> Source:
        m = Messages(tmp_path / "log.db", 3)
        m.append(0, 40)
        m.append(1, 25)
        return m.source(batch=20)


@pytest.mark.slow
def test_state_is_one_row_per_partition_however_many_ranges_commit(
    installed: str, tmp_path: Path
) -> None:
    """Ten rounds of messages on three partitions, every round's batches committed last
    first: the store keeps one offsets row per partition (its committed position) and
    no range aside, and every message lands once."""
    m = Messages(tmp_path / "log.db", 3)
    c = Connector(m.source(batch=7, tasks_max=4, follow=True), tmp_path / "c")
    try:
        for round_ in range(10):
            for p in range(3):
                m.append(p, 5 + 3 * p + round_)
            for _ in range(10):
                found = c.discover()
                if not found.batch_ids:
                    break
                c.run(list(reversed(found.batch_ids)))
            rows = offsets_rows(c)
            assert [r["key"] for r in rows] == ["log/000", "log/001", "log/002"], rows
            positions = {r["key"]: r["offset"] for r in rows}
            assert positions == {f"log/{p:03d}": len(m.sent[p]) + 1 for p in range(3)}, (
                f"round {round_}: {positions}"
            )
        assert ids_of(c) == sorted(r["id"] for r in m.records())
        assert c.status().total_records == len(m.records())
        with c.store.tx() as conn:  # ranges committed ahead of a gap (state/ranges.py)
            aside = conn.execute(schema.ranges.select().where(c.ref.where(schema.ranges))).all()
        assert aside == [], aside
    finally:
        c.close()


def test_the_group_is_acknowledged_only_up_to_what_is_committed(
    installed: str, tmp_path: Path
) -> None:
    """A partition's later range committed first does not move its acknowledged
    position; once the earlier one commits, the position is the partition's end."""
    m = Messages(tmp_path / "log.db", 2)
    m.append(0, 30)
    m.append(1, 10)
    c = Connector(m.source(batch=10, tasks_max=4, follow=True), tmp_path / "c")
    try:
        found = c.discover()  # log/000: 1-10, 11-20, 21-30; log/001: 1-10
        assert len(found.batch_ids) == 4, found
        assert m.log.acks() == {0: 1, 1: 1}, "the first discovery acknowledged something"
        c.run(found.batch_ids[1:])  # log/000 11..30 and all of log/001 commit
        assert not c.finalize()  # a batch is pending: nothing asked of the source
        c.discover()  # acknowledges first; log/000 has a range in flight
        assert m.log.acks() == {0: 1, 1: 11}, m.log.acks()
        c.run(found.batch_ids[:1])
        c.finalize()
        assert m.log.acks() == {0: 31, 1: 11}, m.log.acks()
        assert ids_of(c) == sorted(r["id"] for r in m.records())
    finally:
        c.close()


def test_purged_and_deleted_sequences_are_reported_and_the_rest_lands(
    installed: str, tmp_path: Path
) -> None:
    """Sequences purged past the committed position and messages deleted between the
    bounds are transport errors naming how many; the others land, nothing waits for
    them, and the positions move past them. (A connector that starts on a purged log
    starts at its first available sequence, as a consumer group at "earliest" does.)"""
    m = Messages(tmp_path / "log.db", 2)
    m.append(0, 30)
    m.log.purge_below(0, 6)  # before the connector starts: not its loss
    c = Connector(m.source(batch=10), tmp_path / "c")
    try:
        c.drain()
        assert c.status().transport_errors == []
        assert {r["key"]: r["offset"] for r in offsets_rows(c)} == {"log/000": 31}
    finally:
        c.close()
    m.append(0, 20)
    m.append(1, 30)
    m.log.purge_below(0, 41)  # 31..40: committed position 31, so 10 are lost
    m.log.delete(1, 12)
    m.log.delete(1, 29)
    gone = set(m.sent[0][:5]) | set(m.sent[0][30:40]) | {m.sent[1][11], m.sent[1][28]}
    c = Connector(m.source(batch=10, follow=True), tmp_path / "c")
    try:
        c.drain()
        assert ids_of(c) == sorted(r["id"] for r in m.records() if r["id"] not in gone)
        notices = [e["message"] for e in c.status().transport_errors]
        counted = sum(int(n.split(" of the sequences")[0].split()[-1]) for n in notices)
        assert counted == 12, notices
        assert all("were removed from the log" in n for n in notices), notices
        assert {r["key"]: r["offset"] for r in offsets_rows(c)} == {"log/000": 51, "log/001": 31}
    finally:
        c.close()


def test_a_bounded_read_ends_where_the_first_discovery_saw_each_partition_end(
    installed: str, tmp_path: Path
) -> None:
    """Bounded: the ends the first planning discovery saw hold for every partition,
    also one that was empty then and one not yet planned (tasks_max 1): messages
    appended later are not read, and end of input comes once the rest is committed."""
    m = Messages(tmp_path / "log.db", 3)
    first = m.append(0, 25) + m.append(1, 12)
    c = Connector(m.source(batch=10, tasks_max=1), tmp_path / "c")
    try:
        found = c.discover()
        assert len(found.batch_ids) == 1 and not found.end_of_input
        for p in range(3):
            m.append(p, 4)  # after the first discovery: not read
        c.run(found.batch_ids)
        c.drain()
        assert c.finalize(), "no end of input once the first discovery's ranges committed"
        assert ids_of(c) == sorted(first)
        ends = {r["key"]: r["meta"][ENDS] for r in offsets_rows(c)}
        assert all(e == {"log/000": 25, "log/001": 12, "log/002": 0} for e in ends.values())
        again = c.discover()
        assert again.batch_ids == [] and again.end_of_input
    finally:
        c.close()


def test_a_range_released_by_a_stop_is_read_again_and_nothing_twice(
    installed: str, tmp_path: Path
) -> None:
    """A later range commits, the earlier one is released by a stop: the position stays
    before the gap, the next discovery plans only the gap, and every message lands
    once."""
    m = Messages(tmp_path / "log.db", 1)
    m.append(0, 40)
    c = Connector(m.source(batch=10, follow=True), tmp_path / "c")
    try:
        found = c.discover()
        assert len(found.batch_ids) == 4, found
        c.run(found.batch_ids[2:])  # 21..40 committed ahead of 1..20
        c.store.set_stopped(c.ref, True)
        for batch_id in found.batch_ids[:2]:
            assert c.store.drop_planned_batch(batch_id)
        c.store.set_stopped(c.ref, False)
        assert offsets_rows(c) == [], "a position moved past the released ranges"
        again = c.discover()
        planned = [
            (i.start, i.end) for b in again.batch_ids for i in c.store.load_batch(b).plan.items
        ]
        assert planned == [(1, 11), (11, 21)], planned
        c.run(again.batch_ids)
        assert {r["key"]: r["offset"] for r in offsets_rows(c)} == {"log/000": 41}
        assert_same_records(c.table(), c.expected(), "id", "table after the stop")
        assert m.log.acks() == {0: 1}
        c.finalize()
        assert m.log.acks() == {0: 41}
    finally:
        c.close()


def test_the_lag_is_what_the_log_holds_beyond_the_committed_positions(
    installed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Each discovery, and a following connector's finalize step, stores the source's
    lag with the connector's status (per partition, last sequence + 1 minus the
    committed position): in stats (Feldera's metrics) and on the CLI."""
    from airflow_connectors import cli
    from airflow_connectors.engine.control import ConnectorControl

    m = Messages(tmp_path / "log.db", 2)
    m.append(0, 30)
    m.append(1, 10)
    c = Connector(m.source(batch=10, tasks_max=2, follow=True), tmp_path / "c")
    try:
        found = c.discover()  # two batches of 10 (tasks_max 2): 40 not committed yet
        assert len(found.batch_ids) == 2, found
        assert c.status().lag == 40
        c.run(found.batch_ids)
        assert not c.finalize()  # following: never ends, but measures the lag again
        assert c.status().lag == 40 - 20
        m.append(1, 5)
        c.drain()
        c.finalize()
        assert c.status().lag == 0 and len(ids_of(c)) == 45
        m.append(0, 7)
        m.append(1, 3)
        assert c.discover().batch_ids, "nothing planned for the appended messages"
        assert c.status().lag == 10
        doc = ConnectorControl(c.store).statuses([c.ref])[c.ref]
        assert doc["metrics"]["lag"] == 10 and doc["metrics"]["total_records"] == 45
        monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))  # no Airflow here
        ref = c.ref
        url = ["--state-store-url", c.store_url]
        assert cli.main(["stats", ref.pipeline, ref.table, ref.connector, *url]) == 0
        assert "lag=10" in capsys.readouterr().out.split("metrics: ")[1].splitlines()[0]
        assert cli.main(["pipeline", ref.pipeline, "status", "--local", *url]) == 0
        assert ", lag=10" in capsys.readouterr().out
    finally:
        c.close()
