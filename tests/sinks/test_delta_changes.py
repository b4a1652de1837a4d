"""The ``delta`` sink applies a keyed table's changes (upserts, partial updates, deletes,
truncates) exactly once: one MERGE per batch carrying the connector's app transaction,
the key states in ``<table>__keys``. Staged parts are written through the sink's own
writer, as executors write them, then published; every expected table is computed here
from the change list in its true order (never by the sink's resolve)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from helpers import PUBLISH

from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.changes import DELETE, TRUNCATE, UPDATE, UPSERT, change_fields
from airflow_connectors.engine.discovery import context
from airflow_connectors.sinks.delta import DeltaSink

Change = dict[str, Any]
COLUMNS = {"id": "BIGINT NOT NULL", "v": "VARCHAR", "w": "INT"}


def table_doc(warehouse: str, **table: Any) -> dict[str, Any]:
    """A pipeline document with one keyed table ``t`` on the delta sink."""
    return {
        "pipeline": "p",
        "tables": {
            "t": {
                "columns": dict(COLUMNS),
                "primary_key": ["id"],
                "sink": {"name": "delta", "config": {}},
                "connectors": [
                    {
                        "name": "c",
                        "transport": {"name": "file_input", "config": {"path": warehouse}},
                        "format": {"name": "json", "config": {}},
                    }
                ],
                **table,
            }
        },
    }


def sink_of(doc: dict[str, Any], warehouse: str) -> DeltaSink:
    spec = parse_pipeline(doc)
    table = spec.tables[0]
    sink = context(spec, table, table.connectors[0], warehouse).sink()
    assert isinstance(sink, DeltaSink) and table.keyed
    return sink


@pytest.fixture
def wh(tmp_path: Path) -> str:
    return str(tmp_path / "wh")


def stage(sink: DeltaSink, batch: int, changes: list[Change], attempt: str = "1-a") -> None:
    """Stage ``changes`` as the engine does: the table's columns (a delete or truncate
    carries nulls), ``__op``, ``__set`` and ``__order`` (the change's place)."""
    schema = pa.schema([*(f.with_nullable(True) for f in sink.schema("rows")), *change_fields()])
    rows = [{"__set": None, **c, "__order": i} for i, c in enumerate(changes)]
    sink.prepare(batch, attempt)
    w = sink.writer(batch, attempt, 0, "rows")
    w.write(pa.Table.from_pylist(rows, schema=schema))
    w.close()


def table_rows(sink: DeltaSink) -> dict[int, dict[str, Any]]:
    data = sink.read()
    assert data is not None
    assert sink.count_rows() == data.num_rows  # the CLI's count, from the log's files
    ids = data.column("id").to_pylist()
    assert len(set(ids)) == len(ids), "a key twice in the table"
    return {r["id"]: r for r in data.to_pylist()}


def truth(changes: list[Change], columns: tuple[str, ...] = ("id", "v", "w")) -> dict[int, Any]:
    """The table after ``changes`` applied one by one in this order."""
    out: dict[int, dict[str, Any]] = {}
    for c in changes:
        op = c["__op"]
        if op == TRUNCATE:
            out.clear()
        elif op == DELETE:
            out.pop(c["id"], None)
        elif op == UPSERT:
            out[c["id"]] = {k: c.get(k) for k in columns}
        elif op == UPDATE and c["id"] in out:
            out[c["id"]].update({k: c[k] for k in c["__set"]})
    return out


def up(i: int, v: str, w: int | None = None, **more: Any) -> Change:
    return {"id": i, "v": v, "w": w, "__op": UPSERT, **more}


def delete(i: int, **more: Any) -> Change:
    return {"id": i, "__op": DELETE, **more}


def update(i: int, **values: Any) -> Change:
    sets = [k for k in values if not k.startswith("__") and k != "seq"]
    return {"id": i, **values, "__op": UPDATE, "__set": sets}


def truncate() -> Change:
    return {"id": None, "__op": TRUNCATE}


def batch_folders(sink: DeltaSink) -> list[str]:
    return sorted(p.name for p in Path(sink.location()).glob("batch-*"))


# --- one batch after another ------------------------------------------------------------


def test_inserts_updates_deletes_and_repeated_keys_apply_once(wh: str) -> None:
    sink = sink_of(table_doc(wh), wh)
    batches = [
        [up(i, f"v{i}", i) for i in range(1, 7)],
        [
            up(1, "one"),
            up(1, "ONE", 11),  # the last change of a key in its batch wins
            delete(2),
            up(3, "three"),
            delete(3),
            up(3, "three again", 33),
            update(4, v="four"),  # a partial update keeps w
            update(5, w=55),
            update(5, v="five"),  # two partial updates of one key fold
            update(99, v="never"),  # a key the table does not hold: nothing
            up(7, "seven"),
            update(7, w=77),  # folded onto the batch's own upsert
        ],
        [delete(6), delete(6), up(8, "eight"), delete(100)],
    ]
    done: list[Change] = []
    for n, changes in enumerate(batches, start=1):
        stage(sink, n, changes)
        sink.publish(n, "1-a")
        done += changes
        assert table_rows(sink) == truth(done)
        version = DeltaTable(sink.location()).version()
        sink.publish(n, "1-a")  # a re-run adds nothing, commits nothing
        assert DeltaTable(sink.location()).version() == version
    dt = DeltaTable(sink.location())
    assert dt.transaction_version(sink.app_id) == 3
    assert batch_folders(sink) == []  # staged parts are never added: dropped
    assert dt.schema().to_arrow().field("id").nullable is False
    # Every commit after the create is one MERGE of a batch.
    ops = [c["operation"] for c in dt.history() if c["version"] > 0]
    assert ops == ["MERGE"] * 3
    state = DeltaTable(sink.keys_location()).to_pyarrow_table()
    deleted = {r["id"] for r in state.to_pylist() if r["__deleted"]}
    assert deleted == {2, 6, 100}  # tombstones, kept for tombstone_retention


def test_an_older_batch_published_later_never_wins(wh: str) -> None:
    """``tasks_max`` > 1: batch 2 publishes before batch 1. Without ``sequence_by`` the
    batch id orders changes: batch 1's changes of keys batch 2 touched are stale, and a
    key batch 2 deleted is not brought back by batch 1's insert."""
    sink = sink_of(table_doc(wh), wh)
    first = [up(1, "old"), up(2, "old"), up(3, "only in 1"), update(4, v="old")]
    second = [up(1, "new"), delete(2), up(4, "new", 4)]
    stage(sink, 1, first)
    stage(sink, 2, second)
    sink.publish(2, "1-a")
    sink.publish(1, "1-a")
    assert table_rows(sink) == truth(first + second)
    dt = DeltaTable(sink.location())
    assert dt.transaction_version(sink.app_id) == 2  # never goes down
    sink.publish(1, "1-a")
    sink.publish(2, "1-a")
    assert DeltaTable(sink.location()).version() == dt.version()


def test_sequence_by_orders_changes_across_and_within_batches(wh: str) -> None:
    """With ``sequence_by`` the sequence decides, whatever the batch: a delete followed by
    an older insert (arriving in a later batch) does not resurrect the row, and within
    a batch the highest sequence wins over the later record."""
    doc = table_doc(wh, sequence_by="seq")
    doc["tables"]["t"]["columns"]["seq"] = "BIGINT"
    sink = sink_of(doc, wh)
    cols = ("id", "v", "w", "seq")
    b1 = [up(1, "a", seq=10), up(2, "b", seq=10), up(3, "c", seq=10)]
    b2 = [delete(1, seq=30), up(2, "b30", seq=30), up(2, "b20", seq=20)]  # 30 wins
    b3 = [up(1, "resurrected?", seq=20), up(2, "b25", seq=25), up(3, "c40", seq=40)]
    for n, changes in enumerate((b1, b2, b3), start=1):
        stage(sink, n, changes)
        sink.publish(n, "1-a")
    every = sorted(b1 + b2 + b3, key=lambda c: c["seq"])  # the true order: by sequence
    assert table_rows(sink) == truth(every, cols)
    assert 1 not in table_rows(sink)


def test_a_truncate_removes_what_came_before_it_only(wh: str) -> None:
    sink = sink_of(table_doc(wh), wh)
    b1 = [up(i, f"v{i}") for i in range(5)]
    b2 = [up(10, "before the truncate"), truncate(), up(11, "after"), update(11, w=1)]
    b4 = [up(20, "b4"), up(1, "b4")]
    b3 = [up(30, "b3"), truncate(), up(31, "b3")]
    stage(sink, 1, b1)
    sink.publish(1, "1-a")
    stage(sink, 2, b2)
    sink.publish(2, "1-a")
    assert table_rows(sink) == truth(b1 + b2)
    # Batch 4 publishes before batch 3 (whose truncate must keep batch 4's rows).
    stage(sink, 4, b4)
    sink.publish(4, "1-a")
    stage(sink, 3, b3)
    sink.publish(3, "1-a")
    assert table_rows(sink) == truth(b1 + b2 + b3 + b4)
    # A key below the floor (an older batch published last) stays out.
    stage(sink, 1, [up(40, "older than the truncate")], attempt="2-b")
    sink.publish(1, "2-b")
    assert 40 not in table_rows(sink)


def test_new_columns_are_merged_into_a_keyed_table(wh: str) -> None:
    """``schema_evolution: add_new_columns``: a batch that widened the table merges its
    new column in the same MERGE; NOT NULL columns stay NOT NULL."""
    doc = table_doc(wh, schema_evolution="add_new_columns")
    doc["tables"]["t"]["columns"]["w"] = "INT NOT NULL"
    sink = sink_of(doc, wh)
    b1 = [up(1, "a", 1), up(2, "b", 2), up(3, "c", 3)]
    stage(sink, 1, b1)
    sink.publish(1, "1-a")
    doc["tables"]["t"]["columns"]["x"] = "VARCHAR"
    wide = sink_of(doc, wh)
    b2 = [up(1, "A", 10, x="x1"), delete(2), up(4, "d", 4, x="x4"), update(3, x="x3")]
    stage(wide, 2, b2)
    wide.publish(2, "1-a")
    assert wide.merged
    assert table_rows(wide) == truth(b1 + b2, ("id", "v", "w", "x"))
    schema = DeltaTable(wide.location()).schema().to_arrow()
    assert [(f.name, f.nullable) for f in schema] == [
        ("id", False),
        ("v", True),
        ("w", False),
        ("x", True),
    ]
    assert DeltaTable(wide.location()).transaction_version(wide.app_id) == 2


@pytest.mark.slow
def test_expired_tombstones_are_dropped(wh: str) -> None:
    """A tombstone outlives its ``tombstone_retention`` only until the next publish."""
    sink = sink_of(table_doc(wh, tombstone_retention="PT1S"), wh)
    stage(sink, 1, [up(1, "a"), up(2, "b")])
    sink.publish(1, "1-a")
    stage(sink, 2, [delete(1)])
    sink.publish(2, "1-a")
    state = DeltaTable(sink.keys_location()).to_pyarrow_table().to_pylist()
    assert {(r["id"], r["__deleted"]) for r in state} == {(1, True), (2, False)}
    time.sleep(1.1)
    stage(sink, 3, [up(3, "c")])
    sink.publish(3, "1-a")
    state = DeltaTable(sink.keys_location()).to_pyarrow_table().to_pylist()
    assert {(r["id"], r["__deleted"]) for r in state} == {(2, False), (3, False)}
    assert table_rows(sink) == truth([up(2, "b"), up(3, "c")])


@pytest.mark.slow
@pytest.mark.parametrize("shuffled", [True, False], ids=["shuffled", "in-order"])
def test_random_changes_end_as_the_true_order(shuffled: bool, wh: str) -> None:
    """A workload with a sequence: upserts and deletes (repeated keys within and across
    batches), published in a shuffled order, each twice; in plan order with partial
    updates too (a partial update reads the row the table holds when it publishes, so
    only in order is its result the source's)."""
    doc = table_doc(wh, sequence_by="seq")
    doc["tables"]["t"]["columns"]["seq"] = "BIGINT"
    sink = sink_of(doc, wh)
    rng = random.Random(25)
    every: list[Change] = []
    batches: list[list[Change]] = []
    for _ in range(6):
        changes = []
        for _ in range(150):
            seq = len(every)
            i = rng.randrange(60)
            roll = rng.random()
            if roll < 0.6 or (shuffled and roll >= 0.85):
                c = up(i, f"v{seq}", rng.randrange(100), seq=seq)
            elif roll < 0.85:
                c = delete(i, seq=seq)
            else:
                c = update(i, w=seq, seq=seq)
            changes.append(c)
            every.append(c)
        if not shuffled:
            rng.shuffle(changes)  # within a batch the sequence orders, not the place
        batches.append(changes)
    order = list(range(len(batches)))
    if shuffled:
        rng.shuffle(order)
    for n in order + order:
        stage(sink, n + 1, batches[n])
        sink.publish(n + 1, "1-a")
    assert table_rows(sink) == truth(every, ("id", "v", "w", "seq"))


# --- crashes and races ----------------------------------------------------------------


def publish_killed_at(point: str, doc: dict[str, Any], wh: str, batch: int, tmp: Path) -> None:
    """Publish ``batch`` in a child process SIGKILLed when it reaches fail point ``point``."""
    marks = tmp / f"fp-{batch}-{point}"
    marks.mkdir()
    env = {
        **os.environ,
        "AIRFLOW_CONNECTORS_FAILPOINT_DIR": str(marks),
        "AIRFLOW_CONNECTORS_FAILPOINTS": point,
    }
    child = subprocess.Popen(
        [sys.executable, "-c", PUBLISH, json.dumps(doc), wh, str(batch), "1-a"],
        env=env,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not (marks / point).exists():
            if child.poll() is not None:
                err = child.stderr.read().decode() if child.stderr else ""
                raise AssertionError(f"the publisher exited before {point}: {err[-2000:]}")
            assert time.monotonic() < deadline, f"the publisher never reached {point}"
            time.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


@pytest.mark.slow
@pytest.mark.parametrize("point", ["delta_keys_committed", "delta_committed"])
def test_a_publish_killed_at_a_fail_point_is_finished_by_a_rerun(
    point: str, wh: str, tmp_path: Path
) -> None:
    """SIGKILL between the key-state commit and the MERGE (the changes apply again: their
    marks equal the stored ones) or after the MERGE (the batch is recorded: nothing
    twice); the re-run leaves the exact table."""
    doc = table_doc(wh)
    sink = sink_of(doc, wh)
    b1 = [up(i, f"v{i}", i) for i in range(10)]
    b2 = [up(1, "new"), delete(2), update(3, v="three"), up(20, "twenty"), update(5, w=500)]
    b2 += [delete(6), up(21, "x", 21), up(1, "newer")]
    stage(sink, 1, b1)
    sink.publish(1, "1-a")
    stage(sink, 2, b2)
    publish_killed_at(point, doc, wh, 2, tmp_path)
    state = DeltaTable(sink.keys_location()).to_pyarrow_table()
    assert 2 in state.column("__batch").to_pylist()  # the key states did commit
    committed = DeltaTable(sink.location()).transaction_version(sink.app_id)
    assert committed == (2 if point == "delta_committed" else 1)
    sink.publish(2, "1-a")
    sink.publish(2, "1-a")
    assert table_rows(sink) == truth(b1 + b2)
    merges = [c for c in DeltaTable(sink.location()).history() if c["operation"] == "MERGE"]
    assert len(merges) == 2  # one per batch
    assert batch_folders(sink) == []


@pytest.mark.slow
def test_a_truncate_killed_between_its_commits_is_finished_by_a_rerun(
    wh: str, tmp_path: Path
) -> None:
    doc = table_doc(wh)
    sink = sink_of(doc, wh)
    b1 = [up(i, f"v{i}") for i in range(10)]
    b2 = [up(3, "gone"), truncate(), up(4, "kept"), update(4, w=4)]
    stage(sink, 1, b1)
    sink.publish(1, "1-a")
    stage(sink, 2, b2)
    publish_killed_at("delta_keys_committed", doc, wh, 2, tmp_path)
    assert table_rows(sink) == truth(b1)  # the MERGE never ran
    sink.publish(2, "1-a")
    assert table_rows(sink) == truth(b1 + b2)


def test_publishers_racing_on_one_batch_land_it_once(wh: str) -> None:
    """Four publishers of the same batch at once (a re-run racing a slow one): one
    MERGE, the changes once."""
    doc = table_doc(wh)
    sinks = [sink_of(doc, wh) for _ in range(4)]
    b1 = [up(i, f"v{i}", i) for i in range(20)]
    b2 = [update(i, w=i * 10) for i in range(0, 20, 2)] + [delete(i) for i in range(1, 20, 4)]
    stage(sinks[0], 1, b1)
    sinks[0].publish(1, "1-a")
    stage(sinks[0], 2, b2)
    errors: list[BaseException] = []

    def publish(n: int) -> None:
        try:
            sinks[n].publish(2, "1-a")
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=publish, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert table_rows(sinks[0]) == truth(b1 + b2)
    merges = [c for c in DeltaTable(sinks[0].location()).history() if c["operation"] == "MERGE"]
    assert len(merges) == 2


def test_a_composite_key_with_quoted_names(wh: str) -> None:
    """Two key columns, one of them a mixed-case name the MERGE predicate must quote."""
    doc = table_doc(wh, primary_key=["Region", "id"])
    doc["tables"]["t"]["columns"] = {"Region": "VARCHAR NOT NULL", **COLUMNS}
    sink = sink_of(doc, wh)
    b1 = [up(i, f"v{i}", Region=r) for r in ("eu", "us") for i in range(3)]
    b2 = [delete(1, Region="eu"), up(1, "us one", Region="us"), update(2, Region="eu", w=2)]
    b2 += [up(1, "eu back", Region="eu"), delete(0, Region="us")]
    stage(sink, 1, b1)
    sink.publish(1, "1-a")
    stage(sink, 2, b2)
    sink.publish(2, "1-a")
    want: dict[tuple[str, int], Any] = {}
    for c in b1 + b2:
        k = (c["Region"], c["id"])
        if c["__op"] == DELETE:
            want.pop(k, None)
        elif c["__op"] == UPSERT:
            want[k] = {"Region": k[0], "id": k[1], "v": c["v"], "w": c["w"]}
        elif k in want:
            want[k].update({n: c[n] for n in c["__set"]})
    data = sink.read()
    assert data is not None
    got = {(r["Region"], r["id"]): r for r in data.to_pylist()}
    assert len(got) == data.num_rows and got == want


# --- scd_type 2: history ----------------------------------------------------------------


def history(batches: list[tuple[int, list[Change]]], seq: str | None = None) -> list[Any]:
    """The row versions ``scd_type: 2`` keeps after ``batches`` in this order: per batch
    and key, the version its last change leaves (``__start_at`` = that change's
    sequence), the key's previous version closed there (``__end_at``); a truncate closes
    the versions of keys the batch does not change after it, at its own sequence."""
    versions: list[dict[str, Any]] = []
    current: dict[int, dict[str, Any]] = {}
    for b, changes in batches:
        now = {k: {c: v[c] for c in ("id", "v", "w")} for k, v in current.items()}
        touched: dict[int, Any] = {}
        cut = None
        for c in changes:
            at = c.get(seq) if seq else b
            if c["__op"] == TRUNCATE:
                now.clear()
                touched.clear()
                cut = at
            elif c["__op"] == DELETE:
                now.pop(c["id"], None)
                touched[c["id"]] = at
            elif c["__op"] == UPSERT:
                now[c["id"]] = {k: c.get(k) for k in ("id", "v", "w")}
                touched[c["id"]] = at
            elif c["id"] in now:
                now[c["id"]].update({k: c[k] for k in c["__set"]})
                touched[c["id"]] = at
        for k, v in current.items():
            if k in touched or cut is not None:
                v["__end_at"] = touched.get(k, cut)
        current = {k: v for k, v in current.items() if v["__end_at"] is None}
        for k, at in touched.items():
            if k in now:
                current[k] = {**now[k], "__start_at": at, "__end_at": None}
                versions.append(current[k])
    return sorted(versions, key=lambda r: (r["id"], r["__start_at"]))


def versions_of(sink: DeltaSink, columns: tuple[str, ...] = ("id", "v", "w")) -> list[Any]:
    data = sink.read()
    assert data is not None
    keep = [*columns, "__start_at", "__end_at"]
    return sorted(data.select(keep).to_pylist(), key=lambda r: (r["id"], r["__start_at"]))


def test_scd_type_2_keeps_every_version_of_a_key(wh: str) -> None:
    """Updates close the key's current row and open a new one, a delete closes it, a
    truncate closes every row it removes; re-runs add nothing; an older batch published
    late changes no key a newer one changed."""
    sink = sink_of(table_doc(wh, scd_type=2), wh)
    batches = [
        (1, [up(i, f"v{i}", i) for i in range(1, 7)]),
        (2, [up(1, "one"), delete(2), update(3, w=33), up(7, "seven"), update(99, v="none")]),
        (3, [up(1, "before"), truncate(), up(3, "after", 3), up(8, "eight"), up(9, "nine")]),
        (5, [delete(9), up(2, "two again"), up(4, "four"), delete(4), update(3, v="three")]),
        (6, [up(8, "newer"), update(2, w=2)]),
    ]
    for b, changes in batches:
        stage(sink, b, changes)
        sink.publish(b, "1-a")
        sink.publish(b, "1-a")
    assert versions_of(sink) == history(batches)
    current = [r for r in versions_of(sink) if r["__end_at"] is None]
    assert sorted(r["id"] for r in current) == sorted(truth([c for _, b in batches for c in b]))
    stage(sink, 4, [up(8, "older than batch 6"), up(50, "new key")])
    sink.publish(4, "1-a")
    late = {"id": 50, "v": "new key", "w": None, "__start_at": 4, "__end_at": None}
    assert versions_of(sink) == sorted(
        [*history(batches), late], key=lambda r: (r["id"], r["__start_at"])
    )
    schema = DeltaTable(sink.location()).schema().to_arrow()
    assert schema.names == ["id", "v", "w", "__start_at", "__end_at"]


def test_scd_type_2_with_sequence_by(wh: str, tmp_path: Path) -> None:
    """``__start_at`` and ``__end_at`` are ``sequence_by`` values; a truncate without one
    is refused in one line (its rows' ``__end_at`` would be unknown)."""
    doc = table_doc(wh, scd_type=2, sequence_by="seq")
    doc["tables"]["t"]["columns"]["seq"] = "BIGINT"
    sink = sink_of(doc, wh)
    batches = [
        (1, [up(1, "a", seq=100), up(2, "b", seq=101), up(3, "c", seq=102)]),
        (2, [up(1, "A", seq=200), delete(2, seq=201), {**truncate(), "seq": 250}]),
        (3, [up(1, "A1", seq=300), up(1, "A2", seq=301), up(2, "B", seq=302)]),
    ]
    for b, changes in batches:
        stage(sink, b, changes)
        sink.publish(b, "1-a")
    expected = [
        {k: r[k] for k in ("id", "v", "w", "__start_at", "__end_at")}
        for r in history(batches, "seq")
    ]
    assert versions_of(sink) == expected
    stage(sink, 4, [truncate()])
    with pytest.raises(Exception, match=r"^table t: the truncate in batch 4 has no seq value") as e:
        sink.publish(4, "1-a")
    assert "\n" not in str(e.value)
