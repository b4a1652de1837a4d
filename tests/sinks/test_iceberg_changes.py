"""The ``iceberg`` sink applies a keyed table's changes exactly once (no Spark: staged
parts are written through the sink's part writer with the change columns, as the engine
does, then published): inserts, updates, deletes and partial updates, several changes
of a key in a batch, batches published out of order (an older change never wins, a
deleted key is not brought back by an older insert), truncates, a composite key, a
SIGKILL between the key state's commit and the table's, two publishers racing on one
batch, a column added to the spec. Each final table is compared with the table computed
here from the change list in its true order."""

from __future__ import annotations

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

from airflow_connectors import failpoints
from airflow_connectors.changes import DELETE, TRUNCATE, UPDATE, UPSERT, change_fields
from airflow_connectors.sinks import _fs, iceberg
from airflow_connectors.sinks.base import SinkUnwritable
from airflow_connectors.sinks.iceberg import BATCH_PROPERTY, IcebergSink
from airflow_connectors.spec.models import ColumnSpec, TableSpec
from airflow_connectors.spec.types import parse_type

Change = dict[str, Any]

COLUMNS = [("id", "BIGINT", False), ("name", "VARCHAR", True), ("amount", "INT", True)]


def spec(
    columns: list[tuple[str, str, bool]] = COLUMNS,
    key: tuple[str, ...] = ("id",),
    **extra: Any,
) -> TableSpec:
    return TableSpec(
        name="events",
        columns=[ColumnSpec(name=n, type=parse_type(t)[0], nullable=nl) for n, t, nl in columns],
        primary_key=key,
        sink={"name": "iceberg"},
        **extra,
    )


class Lake:
    """An Iceberg sink of one keyed table on a local warehouse, its catalog in SQLite
    (or ``url``)."""

    def __init__(
        self, tmp: Path, table: TableSpec, url: str | None = None, warehouse: str | None = None
    ) -> None:
        self.tmp = tmp
        self.table = table
        self.url = url or f"sqlite:///{tmp / 'state.db'}"
        self.warehouse = warehouse or str(tmp / "wh")

    def sink(self, table: TableSpec | None = None) -> IcebergSink:
        sink = IcebergSink(
            IcebergSink.Config(),
            pipeline="p",
            table=table or self.table,
            warehouse=self.warehouse,
        )
        sink.connector = "c"
        sink.state_store_url = self.url
        return sink

    def stage(
        self,
        batch: int,
        changes: list[Change],
        attempt: str = "a",
        table: TableSpec | None = None,
    ) -> None:
        """Stages ``changes`` as the engine does: two parts (items 0 and 1 of the plan),
        each row with ``__order`` = item << 32 | its place in the item."""
        sink = self.sink(table)
        sink.prepare(batch, attempt)
        half = len(changes) // 2
        columns = [f.with_nullable(True) for f in sink.table.arrow_schema()]
        schema = pa.schema([*columns, *change_fields()])
        for item, rows in enumerate((changes[:half], changes[half:])):
            full = [{"__set": None, **r, "__order": (item << 32) | i} for i, r in enumerate(rows)]
            writer = sink.writer(batch, attempt, item, "rows")
            writer.write(pa.Table.from_pylist(full, schema=schema))
            writer.close()

    def publish(self, batch: int, attempt: str = "a", table: TableSpec | None = None) -> None:
        self.sink(table).publish(batch, attempt)

    def land(self, batch: int, changes: list[Change]) -> None:
        self.stage(batch, changes)
        self.publish(batch)

    def rows(self) -> dict[Any, dict[str, Any]]:
        data = self.sink().read()
        assert data is not None
        assert self.sink().count_rows() == data.num_rows  # from manifests and deletes
        out: dict[Any, dict[str, Any]] = {}
        for row in data.to_pylist():
            key = tuple(row[k] for k in self.table.primary_key)
            assert key not in out, f"key {key} twice"
            out[key] = row
        return out

    def commits(self, batch: int) -> int:
        """How many commits applied ``batch``: its marked snapshots that append (one
        transaction's delete and append are two snapshots, of which one appends)."""
        with self.sink().catalog() as catalog:
            table = catalog.load_table(self.sink().identifier())
        return sum(
            1
            for s in table.metadata.snapshots
            if s.summary is not None
            and s.summary.get(BATCH_PROPERTY) == f"c:{batch}"
            and s.summary.operation.value == "append"
        )


def truth(
    batches: dict[int, list[Change]],
    table: TableSpec | None = None,
) -> dict[Any, dict[str, Any]]:
    """The table after every change, in true order: by batch, then place in the batch
    (or by ``sequence_by`` first when the table has it)."""
    table = table or spec()
    names = [c.name for c in table.columns]
    ordered = [(b, i, c) for b in sorted(batches) for i, c in enumerate(batches[b])]
    if table.sequence_by:
        ordered.sort(key=lambda t: (t[2].get(table.sequence_by) or 0, t[0], t[1]))
    out: dict[Any, dict[str, Any]] = {}
    for _, _, c in ordered:
        key = tuple(c.get(k) for k in table.primary_key)
        op = c["__op"]
        if op == TRUNCATE:
            out.clear()
        elif op == DELETE:
            out.pop(key, None)
        elif op == UPSERT:
            out[key] = {n: c.get(n) for n in names}
        elif op == UPDATE and key in out:
            out[key] = {**out[key], **{n: c[n] for n in c["__set"]}}
    return out


def up(i: int, name: str, amount: int | None = None) -> Change:
    return {"id": i, "name": name, "amount": amount, "__op": UPSERT}


def delete(i: int) -> Change:
    return {"id": i, "name": None, "amount": None, "__op": DELETE}


def update(i: int, **values: Any) -> Change:
    return {"id": i, "name": None, "amount": None, **values, "__op": UPDATE, "__set": [*values]}


def truncate() -> Change:
    return {"id": None, "name": None, "amount": None, "__op": TRUNCATE}


@pytest.mark.slow
def test_inserts_updates_deletes_and_repeated_keys_land_once(tmp_path: Path) -> None:
    """Three batches with repeated keys (across the two parts of a batch too), partial
    updates onto this batch's and earlier batches' rows and of a missing key, deletes;
    each published twice: the true table, one marked commit per batch, no staged part
    left, and the key state holding every key with a tombstone for the deleted."""
    lake = Lake(tmp_path, spec())
    batches = {
        1: [up(1, "a", 1), up(2, "b", 2), up(3, "c", 3), up(1, "a2", 10), up(4, "d", 4)],
        2: [
            update(2, amount=20),
            delete(3),
            up(5, "e", 5),
            update(5, name="e2"),
            update(9, name="nobody"),
            up(3, "c-again", 30),
            delete(4),
        ],
        3: [up(6, "f"), delete(1), update(6, amount=66), update(6, name="f2"), delete(6)],
    }
    for b, changes in batches.items():
        lake.land(b, changes)
        lake.publish(b)  # a re-run adds nothing
    assert lake.rows() == truth(batches)
    assert [lake.commits(b) for b in batches] == [1, 1, 1]
    assert not list((tmp_path / "wh" / "p" / "events" / "data").glob("batch-*"))
    sink = lake.sink()
    with sink.catalog() as catalog:
        state = catalog.load_table(sink.keys_identifier()).scan().to_arrow()
        schema = catalog.load_table(sink.identifier()).schema()
    assert [schema.find_column_name(i) for i in schema.identifier_field_ids] == ["id"]
    deleted = {r["id"]: r["__deleted"] for r in state.to_pylist()}
    assert deleted == {1: True, 2: False, 3: False, 4: True, 5: False, 6: True}


def test_batches_out_of_order_never_let_an_older_change_win(tmp_path: Path) -> None:
    """Batch 3, then 1, then 2 (as Airflow may commit them with tasks_max > 1): a key
    deleted in a later batch is not brought back by an older insert, a later value is
    not replaced by an older one, a key only the older batch touches lands."""
    lake = Lake(tmp_path, spec())
    batches = {
        1: [up(1, "old"), up(2, "old"), up(3, "only-1"), up(4, "old")],
        2: [up(1, "mid"), delete(2), up(4, "mid")],
        3: [delete(1), up(2, "new"), up(5, "new")],
    }
    for b in (3, 1, 2):
        lake.land(b, batches[b])
    assert lake.rows() == truth(batches)
    assert (1,) not in lake.rows()


def test_sequence_by_orders_changes_across_batches(tmp_path: Path) -> None:
    """With ``sequence_by``: the highest sequence wins within and across batches,
    whatever the publish order; a delete of a high sequence keeps an older insert out."""
    table = spec([*COLUMNS, ("seq", "BIGINT", True)], sequence_by="seq")
    lake = Lake(tmp_path, table)

    def s(change: Change, seq: int) -> Change:
        return {**change, "seq": seq}

    batches = {
        1: [s(up(1, "late"), 30), s(up(1, "early"), 10), s(up(2, "x"), 50)],
        2: [s(up(1, "older"), 20), s(delete(2), 60), s(up(3, "y"), 5)],
        3: [s(up(2, "resurrect?"), 55), s(up(3, "z"), 6)],
    }
    for b in (2, 3, 1):
        lake.land(b, batches[b])
    assert lake.rows() == truth(batches, table)


@pytest.mark.slow
def test_truncate_removes_what_came_before_it(tmp_path: Path) -> None:
    """A truncate in batch 3 (published after batch 4): rows of batches 1-2 and those
    before it in batch 3 go; rows after it in batch 3 and of batch 4 stay; a later
    batch 2 re-run and an older batch published afterwards add nothing below the
    floor."""
    lake = Lake(tmp_path, spec())
    batches = {
        1: [up(1, "a"), up(2, "b"), up(3, "c")],
        2: [up(4, "d"), delete(3)],
        3: [up(5, "e"), truncate(), up(6, "f"), update(6, amount=6)],
        4: [up(7, "g"), up(1, "a-after")],
    }
    lake.land(1, batches[1])
    lake.land(4, batches[4])
    lake.land(2, batches[2])
    lake.land(3, batches[3])
    lake.publish(2)
    assert lake.rows() == truth(batches)


@pytest.mark.slow
def test_composite_key_deletes_only_its_own_rows(tmp_path: Path) -> None:
    """Key (a, b): deleting (1, 2) and updating (2, 1) leaves (1, 1), (2, 2) as they
    were (the filter by each column's values matches more rows than the keys)."""
    columns = [("a", "INT", False), ("b", "VARCHAR", False), ("v", "INT", True)]
    table = spec(columns, key=("a", "b"))
    lake = Lake(tmp_path, table)

    def c(a: int, b: str, v: int | None, op: int = UPSERT, **more: Any) -> Change:
        return {"a": a, "b": b, "v": v, "__op": op, **more}

    batches = {
        1: [c(1, "1", 11), c(1, "2", 12), c(2, "1", 21), c(2, "2", 22), c(3, "3", 33)],
        2: [c(1, "2", None, DELETE), c(2, "1", 210), c(3, "3", 330, UPDATE, __set=["v"])],
        3: [c(1, "2", 120), c(3, "1", 31), c(2, "2", None, DELETE)],
    }
    for b in (1, 3, 2):
        lake.land(b, batches[b])
    assert lake.rows() == truth(batches, table)


def workload(seed: int, n: int, *, updates: bool) -> dict[int, list[Change]]:
    """``n`` random changes of 30 keys in batches of 12: upserts, deletes, truncates and
    (``updates``) partial updates."""
    rng = random.Random(seed)
    changes: list[Change] = []
    for i in range(n):
        k, roll = rng.randrange(30), rng.random()
        if roll < 0.015:
            changes.append(truncate())
        elif roll < 0.25:
            changes.append(delete(k))
        elif updates and roll < 0.45:
            changes.append(update(k, amount=i) if i % 2 else update(k, name=f"u{i}"))
        else:
            changes.append(up(k, f"v{i}", i))
    return {b: changes[s : s + 12] for b, s in enumerate(range(0, n, 12), start=1)}


@pytest.fixture(params=["in", "range"])
def key_filters(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys filtered with ``In`` (few keys), or by range and a join (many keys: here
    more than 2)."""
    if request.param == "range":
        monkeypatch.setattr(iceberg, "IN_LIMIT", 2)


@pytest.mark.slow
@pytest.mark.usefixtures("key_filters")
def test_random_changes_published_in_order_twice(tmp_path: Path) -> None:
    lake = Lake(tmp_path, spec())
    batches = workload(5, 120, updates=True)
    for b, changes in batches.items():
        lake.land(b, changes)
        lake.publish(b)
    assert lake.rows() == truth(batches)


@pytest.mark.slow
@pytest.mark.usefixtures("key_filters")
def test_random_whole_row_changes_published_in_any_order(tmp_path: Path) -> None:
    """Upserts, deletes and truncates (whose outcome does not depend on the order
    batches publish in) in shuffled batch order, each published twice."""
    lake = Lake(tmp_path, spec())
    batches = workload(7, 120, updates=False)
    order = list(batches)
    random.Random(3).shuffle(order)
    for b in order:
        lake.land(b, batches[b])
        lake.publish(b)
    assert lake.rows() == truth(batches)


CRASH = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_iceberg_changes import Lake, spec
Lake(Path({tmp!r}), spec()).publish(2)
"""


def kill_at(tmp_path: Path, point: str) -> None:
    """Publishes batch 2 of the lake at ``tmp_path`` in another process, SIGKILLed
    once it reaches fail point ``point``."""
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {
        **os.environ,
        "AIRFLOW_CONNECTORS_FAILPOINT_DIR": str(marks),
        "AIRFLOW_CONNECTORS_FAILPOINTS": point,
    }
    code = CRASH.format(tests=str(Path(__file__).parent), tmp=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (marks / point).exists():
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the publisher never reached the fail point"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
def test_killed_between_the_key_state_and_the_table_then_republished(tmp_path: Path) -> None:
    """SIGKILL at ``iceberg_keys_committed`` (the key state committed, the table not):
    the table is as before the batch; publishing again lands the batch exactly (its
    partial update, delete and truncate too), and once."""
    lake = Lake(tmp_path, spec())
    batches = {
        1: [up(1, "a", 1), up(2, "b", 2), up(3, "c", 3)],
        2: [update(1, amount=100), delete(2), up(4, "d"), truncate(), up(5, "e")],
    }
    lake.land(1, batches[1])
    lake.stage(2, batches[2])
    before = lake.rows()
    kill_at(tmp_path, "iceberg_keys_committed")
    assert lake.rows() == before
    lake.publish(2)
    lake.publish(2)
    assert lake.rows() == truth(batches)
    assert lake.commits(2) == 1


@pytest.mark.parametrize("catalog", ["sqlite", "postgres"])
def test_two_publishers_racing_on_one_batch_land_it_once(
    catalog: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two threads publish the same batch at once (the catalog in SQLite: a file lock;
    in PostgreSQL: an advisory lock): one applies it, the other finds it marked."""
    url = None if catalog == "sqlite" else str(request.getfixturevalue("pg_schema_factory")())
    lake = Lake(tmp_path, spec(), url)
    batches = {
        1: [up(i, f"v{i}", i) for i in range(50)],
        2: [update(i, amount=-i) if i % 3 else delete(i) for i in range(0, 60, 2)],
    }
    lake.land(1, batches[1])
    lake.stage(2, batches[2])
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def publish() -> None:
        try:
            start.wait()
            lake.publish(2)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=publish) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert lake.rows() == truth(batches)
    assert lake.commits(2) == 1


def test_a_column_added_to_the_spec_evolves_a_keyed_table(tmp_path: Path) -> None:
    """Batch 1 with the first spec; the spec gains a column; batch 2 (staged before the
    column, published after) and batch 3 (with it) land under the wider spec: the column
    is in the table, null where no change set it."""
    lake = Lake(tmp_path, spec())
    lake.land(1, [up(1, "a", 1), up(2, "b", 2), up(3, "c", 3)])
    lake.stage(2, [up(2, "b2", 20)])
    wider = spec([*COLUMNS, ("note", "VARCHAR", True)])
    lake.publish(2, table=wider)
    lake.stage(3, [{**up(3, "c3", 30), "note": "n3"}, {**update(1, note="n1")}], table=wider)
    lake.publish(3, table=wider)
    lake.table = wider
    got = lake.rows()
    assert got == {
        (1,): {"id": 1, "name": "a", "amount": 1, "note": "n1"},
        (2,): {"id": 2, "name": "b2", "amount": 20, "note": None},
        (3,): {"id": 3, "name": "c3", "amount": 30, "note": "n3"},
    }


def test_changes_on_an_s3_warehouse(
    tmp_path: Path, s3_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same publish with the table, its key state and the staged parts on S3 (the
    moto server): the true table, and no staged part left."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    bucket = s3_server.create_bucket(f"keys-{os.getpid()}")
    lake = Lake(tmp_path, spec(), warehouse=f"s3://{bucket}/wh")
    batches = {
        1: [up(1, "a", 1), up(2, "b", 2), up(3, "c", 3)],
        2: [update(1, amount=10), delete(2), up(4, "d")],
        3: [up(2, "b-late"), delete(3)],
    }
    for b in (1, 3, 2):
        lake.land(b, batches[b])
    assert lake.rows() == truth(batches)
    sink = lake.sink()
    fs, path = _fs.filesystem(sink.location())
    assert [p for p in _fs.files(fs, path, ".parquet") if "/batch-" in p] == []


def test_dead_letters_land_beside_a_keyed_table(tmp_path: Path) -> None:
    """A keyed batch's dead letters go to ``__errors`` as for any table."""
    lake = Lake(tmp_path, spec())
    lake.stage(1, [up(1, "a")])
    sink = lake.sink()
    writer = sink.writer(1, "a", 0, "errors")
    writer.write(
        pa.Table.from_pylist(
            [{"connector": "c", "raw_text": "not json", "error": "bad", "batch_id": 1}],
            schema=sink.schema("errors"),
        )
    )
    writer.close()
    lake.publish(1)
    lake.publish(1)
    errors = sink.read("errors")
    assert errors is not None and errors.column("raw_text").to_pylist() == ["not json"]
    assert lake.rows() == {(1,): {"id": 1, "name": "a", "amount": None}}


def history(batches: dict[int, list[Change]]) -> set[tuple[Any, ...]]:
    """``scd_type: 2`` rows ``(id, name, amount, __start_at, __end_at)`` after the
    batches in order (no ``sequence_by``: the batch id is the sequence): per batch and
    key, the changes in order from the key's current row; a key they change ends its
    current row at the batch and, when it is there at the batch's end, starts a new one;
    a truncate ends every current row at its batch and empties the table."""
    ended: set[tuple[Any, ...]] = set()
    current: dict[Any, tuple[dict[str, Any], int]] = {}
    for b in sorted(batches):
        changes = batches[b]
        cut = max((i for i, c in enumerate(changes) if c["__op"] == TRUNCATE), default=-1)
        if cut >= 0:
            for k, (row, start) in current.items():
                ended.add((k, row["name"], row["amount"], start, b))
            current = {}
        rows: dict[Any, dict[str, Any] | None] = {}
        for c in changes[cut + 1 :]:
            k = c["id"]
            row = rows[k] if k in rows else (current[k][0] if k in current else None)
            if c["__op"] == UPSERT:
                rows[k] = {"name": c["name"], "amount": c["amount"]}
            elif c["__op"] == DELETE:
                rows[k] = None
            elif c["__op"] == UPDATE and row is not None:
                rows[k] = {**row, **{n: c[n] for n in c["__set"]}}
        for k, row in rows.items():
            if k in current:
                old, start = current.pop(k)
                ended.add((k, old["name"], old["amount"], start, b))
            if row is not None:
                current[k] = (row, b)
    opened = {(k, r["name"], r["amount"], start, None) for k, (r, start) in current.items()}
    return ended | opened


def versions(lake: Lake) -> set[tuple[Any, ...]]:
    data = lake.sink().read()
    assert data is not None
    names = ["id", "name", "amount", "__start_at", "__end_at"]
    rows = [tuple(r[n] for n in names) for r in data.to_pylist()]
    assert len(rows) == len(set(rows))
    return set(rows)


@pytest.mark.slow
def test_scd_type_2_keeps_a_version_per_key_and_batch(tmp_path: Path) -> None:
    """Random upserts, deletes, partial updates and truncates in batches published in
    order, each twice: the table is every version of each key, as computed here."""
    lake = Lake(tmp_path, spec(scd_type=2))
    batches = workload(5, 120, updates=True)
    for b, changes in batches.items():
        lake.land(b, changes)
        lake.publish(b)
    assert versions(lake) == history(batches)
    assert lake.commits(len(batches)) == 1


def test_scd_type_2_failed_between_the_commits_then_republished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A history batch's publish fails at ``iceberg_keys_committed`` (an error injected
    there; the SIGKILL test above covers the process dying); the next publish ends and
    adds each version once."""
    lake = Lake(tmp_path, spec(scd_type=2))
    batches = {
        1: [up(1, "a", 1), up(2, "b", 2), up(3, "c", 3)],
        2: [update(1, amount=100), delete(2), up(4, "d"), up(3, "c2", 3)],
    }
    lake.land(1, batches[1])
    lake.stage(2, batches[2])
    before = versions(lake)

    def crash(name: str) -> None:
        if name == "iceberg_keys_committed":
            raise OSError("injected crash")

    with monkeypatch.context() as patch:
        patch.setattr(failpoints, "reach", crash)
        with pytest.raises(SinkUnwritable, match="injected crash"):
            lake.publish(2)
    assert versions(lake) == before
    lake.publish(2)
    lake.publish(2)
    assert versions(lake) == history(batches)


def test_scd_type_2_an_older_batch_adds_no_version(tmp_path: Path) -> None:
    """Batch 2 published before batch 1: batch 1's change of a key batch 2 changed is
    older and adds no version; its other keys get theirs."""
    lake = Lake(tmp_path, spec(scd_type=2))
    lake.land(2, [up(1, "new"), delete(2)])
    lake.land(1, [up(1, "old"), up(2, "old"), up(3, "old")])
    assert versions(lake) == {(1, "new", None, 2, None), (3, "old", None, 1, None)}


def test_scd_type_2_truncate_without_a_sequence_value_is_refused(tmp_path: Path) -> None:
    table = spec([*COLUMNS, ("seq", "BIGINT", True)], sequence_by="seq", scd_type=2)
    lake = Lake(tmp_path, table)
    lake.land(1, [{**up(1, "a"), "seq": 1}])
    lake.stage(2, [{**truncate(), "seq": None}])
    with pytest.raises(SinkUnwritable) as info:
        lake.publish(2)
    text = str(info.value)
    assert "truncate in batch 2" in text and "seq" in text and "\n" not in text
    assert versions(lake) == {(1, "a", None, 1, None)}
