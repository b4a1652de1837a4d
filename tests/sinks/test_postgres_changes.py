"""The ``postgres`` sink applies a keyed table's changes exactly once, against the
PostgreSQL server on 127.0.0.1:5432 (no Spark: batches are staged through the sink's
part writers with the change columns, as the engine's tasks stage them, then published).
Each expected table is computed here from the change list in its true order (by
``sequence_by``, else by batch and place in the batch), never by the sink's own code:
inserts, updates, deletes, several changes of a key in one batch, partial updates,
truncates, batches published out of order, a publish killed inside its transaction, two
publishers racing, schema evolution, and the history ``scd_type: 2`` keeps (in order and
out of order). Each test works in a schema of its own."""

from __future__ import annotations

import os
import pickle
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import adbc_driver_postgresql.dbapi as pg
import pyarrow as pa
import pytest

from airflow_connectors.catalog import sink_of
from airflow_connectors.changes import DELETE, TRUNCATE, UPDATE, UPSERT, change_fields
from airflow_connectors.sinks.base import SinkUnwritable
from airflow_connectors.sinks.postgres import PostgresSink
from airflow_connectors.spec.models import ColumnSpec, TableSpec
from airflow_connectors.spec.types import parse_type

pytestmark = [pytest.mark.postgres, pytest.mark.sources]

SERVER = "postgresql://postgres@127.0.0.1:5432/test"
ROOT = Path(__file__).resolve().parents[2]

Change = dict[str, Any]


def sql(query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one statement on the test database (own connection, committed)."""
    with pg.connect(SERVER) as conn, conn.cursor() as cur:
        cur.execute(query, params or None)
        rows = cur.fetchall() if cur.description else []
        conn.commit()
    return rows


@pytest.fixture(scope="module")
def new_schema() -> Iterator[Callable[[], str]]:
    """A factory of fresh schemas ``ac_pgchg_<random>``, all dropped at the end."""
    made: list[str] = []

    def make() -> str:
        name = f"ac_pgchg_{uuid.uuid4().hex[:10]}"
        sql(f"CREATE SCHEMA {name}")
        made.append(name)
        return name

    yield make
    for name in made:
        sql(f"DROP SCHEMA IF EXISTS {name} CASCADE")


COLUMNS = [("id", "BIGINT", False), ("v", "VARCHAR", True), ("w", "INT", True)]


def keyed_table(
    schema: str,
    *,
    sequence_by: str | None = None,
    columns: list[tuple[str, str, bool]] | None = None,
    primary_key: tuple[str, ...] = ("id",),
    **more: Any,
) -> TableSpec:
    cols = list(columns or COLUMNS)
    if sequence_by:
        cols.append((sequence_by, "BIGINT", True))
    return TableSpec(
        name="t",
        columns=[ColumnSpec(name=n, type=parse_type(t)[0], nullable=nl) for n, t, nl in cols],
        primary_key=primary_key,
        sequence_by=sequence_by,
        sink={"name": "postgres", "config": {"uri": SERVER, "schema": schema}},
        **more,
    )


def sink_for(table: TableSpec) -> PostgresSink:
    sink = sink_of(table, pipeline="p", warehouse="/nonexistent")
    assert isinstance(sink, PostgresSink)
    sink.connector = "c"
    return sink


def stage(sink: PostgresSink, batch: int, changes: list[Change], parts: int = 2) -> str:
    """A prepared attempt of ``batch`` holding ``changes`` (in their arrival order),
    staged as the engine stages it: ``parts`` work items, each written through a part
    writer in two blocks, ``__order`` = item index << 32 | the change's place in it."""
    attempt = f"{batch}-{uuid.uuid4().hex[:8]}"
    sink.prepare(batch, attempt)
    names = sink.table.column_names
    schema = pa.schema([*sink.table.arrow_schema(), *change_fields()])
    size = -(-len(changes) // parts) if changes else 0
    for part in range(parts):
        chunk = changes[part * size : (part + 1) * size]
        rows = [
            {
                **{n: c.get(n) for n in names},
                "__op": c["__op"],
                "__set": c.get("__set"),
                "__order": (part << 32) | i,
            }
            for i, c in enumerate(chunk)
        ]
        block = pa.Table.from_pylist(rows, schema=_nullable(schema))
        w = sink.writer(batch, attempt, part, "rows")
        w.write(block.slice(0, block.num_rows // 2))
        w.write(block.slice(block.num_rows // 2))
        assert w.close() == len(chunk)
    return attempt


def _nullable(schema: pa.Schema) -> pa.Schema:
    """What conform hands the sink: NOT NULL waived where a change carries no value."""
    return pa.schema([f.with_nullable(f.name in ("__op", "__order")) for f in schema])


def publish(sink: PostgresSink, batch: int, changes: list[Change], parts: int = 2) -> str:
    attempt = stage(sink, batch, changes, parts)
    sink.publish(batch, attempt)
    return attempt


def truth(batches: dict[int, list[Change]], sequence_by: str | None = None) -> dict[Any, Change]:
    """The table the changes make, applied one by one in their true order: by
    ``sequence_by`` (then batch, then arrival) when set, else by batch and arrival.
    A truncate empties the table; a partial update of a missing key does nothing."""
    marked = [
        ((c[sequence_by] if sequence_by else b), b, i, c)
        for b, changes in batches.items()
        for i, c in enumerate(changes)
    ]
    marked.sort(key=lambda m: m[:3])
    rows: dict[Any, Change] = {}
    for *_, c in marked:
        op = c["__op"]
        if op == TRUNCATE:
            rows.clear()
        elif op == DELETE:
            rows.pop(c["id"], None)
        elif op == UPSERT:
            rows[c["id"]] = c
        elif op == UPDATE and c["id"] in rows:
            rows[c["id"]] = {**rows[c["id"]], **{n: c[n] for n in c["__set"]}}
    return rows


def expected(rows: dict[Any, Change], names: list[str]) -> list[Change]:
    return sorted(({n: r.get(n) for n in names} for r in rows.values()), key=lambda r: r["id"])


def landed(sink: PostgresSink) -> list[Change]:
    data = sink.read()
    assert data is not None
    assert sink.count_rows() == data.num_rows
    names = sink.table.column_names
    got = data.select(names).sort_by("id").to_pylist()
    assert len({r["id"] for r in got}) == len(got)  # one row per key
    return got


def recorded(schema: str) -> list[int]:
    return [r[0] for r in sql(f"SELECT batch_id FROM {schema}._ac_sink_batches ORDER BY 1")]


def up(i: int, v: str | None = None, w: int | None = None, **more: Any) -> Change:
    return {"__op": UPSERT, "id": i, "v": v, "w": w, **more}


def delete(i: int, **more: Any) -> Change:
    return {"__op": DELETE, "id": i, **more}


def update(i: int, **values: Any) -> Change:
    sets = [n for n in values if n not in ("seq",)]
    return {"__op": UPDATE, "id": i, "__set": sets, **values}


TRUNC: Change = {"__op": TRUNCATE, "id": None}


# --- in order ---------------------------------------------------------------------------


def test_inserts_updates_deletes_and_repeated_keys(new_schema: Callable[[], str]) -> None:
    """Three batches in order: a key changed several times within a batch ends as its
    last change (a partial update folded onto the batch's own insert, or onto the row
    the table holds), deletes remove rows, an update of a missing key does nothing. The
    sink creates the target with a PRIMARY KEY and the key state beside it; each batch
    is recorded once with the number of changes it staged; publishing again adds
    nothing; no staging table is left."""
    schema = new_schema()
    sink = sink_for(keyed_table(schema))
    batches = {
        1: [up(1, "a", 1), up(2, "b", 2), up(1, "a2", 10), up(3, "c"), update(3, w=30)],
        2: [update(1, v="a3"), delete(2), up(4, "d", 4), delete(4), up(5, "e"), update(9, v="x")],
        3: [up(2, "b2", 22), delete(3), update(5, w=55, v="e2"), up(6, "f")],
    }
    attempts = {b: publish(sink, b, changes) for b, changes in batches.items()}
    want = expected(truth(batches), sink.table.column_names)
    assert landed(sink) == want
    assert recorded(schema) == [1, 2, 3]
    assert sql(
        f"SELECT count(*) FROM {schema}._ac_sink_batches WHERE rows = 5 AND batch_id = 1"
    ) == [(1,)]
    key = sql(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = $1::regclass AND i.indisprimary",
        f"{schema}.t",
    )
    assert key == [("id",)]
    tables = [r[0] for r in sql("SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)]
    assert sorted(tables) == ["_ac_sink_batches", "t", "t__keys"]

    sink.publish(2, attempts[2])  # a re-run after the state store missed the commit
    assert landed(sink) == want
    assert recorded(schema) == [1, 2, 3]


def test_sequence_by_orders_changes_within_and_across_batches(
    new_schema: Callable[[], str],
) -> None:
    """With ``sequence_by``: within a batch the change with the greatest sequence wins
    whatever its place; a later batch carrying an older sequence of a key does not
    overwrite the row, nor bring back a key deleted with a newer sequence."""
    schema = new_schema()
    sink = sink_for(keyed_table(schema, sequence_by="seq"))
    batches = {
        1: [up(1, "a@5", seq=5), up(1, "a@3", seq=3), up(2, "b@1", seq=1), delete(3, seq=9)],
        2: [up(1, "a@4", seq=4), up(2, "b@2", seq=2), up(3, "c@8", seq=8), up(4, "d@1", seq=1)],
        3: [delete(4, seq=7), up(4, "d@6", seq=6), up(1, "a@5b", seq=5)],
    }
    for b, changes in batches.items():
        publish(sink, b, changes)
    assert landed(sink) == expected(truth(batches, "seq"), sink.table.column_names)
    assert [r["v"] for r in landed(sink)] == ["a@5b", "b@2"]


# --- out of order -----------------------------------------------------------------------


def test_out_of_order_batches_never_let_an_older_change_win(
    new_schema: Callable[[], str],
) -> None:
    """Batch 2 published before batch 1 (tasks_max > 1): batch 1's changes of keys
    batch 2 changed are not applied, and its insert of a key batch 2 deleted does not
    resurrect the row (the tombstone); its other keys land."""
    schema = new_schema()
    sink = sink_for(keyed_table(schema))
    batches = {
        1: [up(1, "old"), up(2, "old"), up(3, "only-in-1"), delete(5)],
        2: [up(1, "new"), delete(2), up(4, "new"), up(5, "new")],
    }
    publish(sink, 2, batches[2])
    publish(sink, 1, batches[1])
    assert landed(sink) == expected(truth(batches), sink.table.column_names)
    assert {r["id"]: r["v"] for r in landed(sink)} == {1: "new", 3: "only-in-1", 4: "new", 5: "new"}
    assert recorded(schema) == [1, 2]


@pytest.mark.parametrize("sequenced", [False, True])
def test_shuffled_publishes_end_as_the_true_order(
    new_schema: Callable[[], str], sequenced: bool
) -> None:
    """Six batches of random upserts and deletes over few keys (with ``sequence_by``:
    sequences that disagree with the batches), published in a random order: the table
    is the changes applied in their true order."""
    rng = random.Random(25 + sequenced)
    schema = new_schema()
    sink = sink_for(keyed_table(schema, sequence_by="seq" if sequenced else None))
    batches: dict[int, list[Change]] = {}
    seqs = rng.sample(range(10_000), 6 * 40)
    for b in range(1, 7):
        changes = []
        for j in range(40):
            k = rng.randrange(12)
            seq = {"seq": seqs[(b - 1) * 40 + j]} if sequenced else {}
            if rng.random() < 0.3:
                changes.append(delete(k, **seq))
            else:
                changes.append(up(k, f"{b}.{j}", rng.randrange(100), **seq))
        batches[b] = changes
    order = list(batches)
    rng.shuffle(order)
    for b in order:
        publish(sink, b, batches[b], parts=3)
    want = expected(truth(batches, "seq" if sequenced else None), sink.table.column_names)
    assert landed(sink) == want, f"published in order {order}"


# --- truncate ---------------------------------------------------------------------------


def test_truncate_in_order_and_out_of_order(new_schema: Callable[[], str]) -> None:
    """A truncate removes every row before it (the changes before it in its batch
    too), not those after it; published after a later batch it keeps that batch's
    rows; an earlier batch published after it changes nothing (below the floor)."""
    schema = new_schema()
    sink = sink_for(keyed_table(schema))
    batches = {
        1: [up(1, "a"), up(2, "b"), up(3, "c")],
        2: [up(4, "d"), delete(1)],
        3: [up(5, "e"), TRUNC, up(6, "f"), up(2, "b3")],
        4: [up(7, "g"), up(6, "f4"), delete(2)],
        5: [up(8, "h")],
    }
    publish(sink, 1, batches[1])
    publish(sink, 4, batches[4])
    publish(sink, 3, batches[3])
    publish(sink, 2, batches[2])
    publish(sink, 5, batches[5])
    assert landed(sink) == expected(truth(batches), sink.table.column_names)
    assert sorted(r["id"] for r in landed(sink)) == [6, 7, 8]
    floor = sql(f"SELECT __batch, __order FROM {schema}.t__keys WHERE id IS NULL")
    assert floor == [(3, 1)]


# --- crashes and races ------------------------------------------------------------------

KILLED = """
import pickle, sys
sink = pickle.load(open(sys.argv[1], "rb"))
sink.publish(int(sys.argv[2]), sys.argv[3])
"""


def publish_killed_at(
    sink: PostgresSink, batch: int, attempt: str, point: str, tmp_path: Path
) -> None:
    """``publish`` in a child process SIGKILLed when it reaches fail point ``point``."""
    points = tmp_path / f"points-{batch}-{point}"
    points.mkdir()
    spec = tmp_path / f"sink-{batch}.pickle"
    spec.write_bytes(pickle.dumps(sink))
    env = {
        **os.environ,
        "AIRFLOW_CONNECTORS_FAILPOINT_DIR": str(points),
        "AIRFLOW_CONNECTORS_FAILPOINTS": point,
    }
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(spec), str(batch), attempt], env=env, cwd=ROOT
    )
    try:
        deadline = time.monotonic() + 120
        while not (points / point).exists():
            assert child.poll() is None, f"publish ended ({child.returncode}) before {point}"
            assert time.monotonic() < deadline, f"publish never reached {point}"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()


def test_publish_killed_inside_its_transaction_then_again(
    new_schema: Callable[[], str], tmp_path: Path
) -> None:
    """A publish SIGKILLed after writing its changes but before its commit leaves the
    table and its key state as they were; publishing again applies the batch once.
    Killed after the commit (``postgres_committed``): publishing again adds nothing."""
    schema = new_schema()
    sink = sink_for(keyed_table(schema))
    batches = {
        1: [up(1, "a"), up(2, "b"), up(3, "c")],
        2: [update(1, v="a2"), delete(2), up(4, "d"), up(3, "c2", 3)],
        3: [TRUNC, up(5, "e")],
    }
    publish(sink, 1, batches[1])
    before = landed(sink)
    keys_before = sql(f"SELECT * FROM {schema}.t__keys ORDER BY id")
    attempt = stage(sink, 2, batches[2])
    publish_killed_at(sink, 2, attempt, "postgres_changes_applied", tmp_path)
    assert landed(sink) == before
    assert sql(f"SELECT * FROM {schema}.t__keys ORDER BY id") == keys_before
    assert recorded(schema) == [1]
    sink.publish(2, attempt)
    want = expected(truth({b: batches[b] for b in (1, 2)}), sink.table.column_names)
    assert landed(sink) == want

    attempt = stage(sink, 3, batches[3])
    publish_killed_at(sink, 3, attempt, "postgres_committed", tmp_path)
    sink.publish(3, attempt)
    assert landed(sink) == expected(truth(batches), sink.table.column_names)
    assert recorded(schema) == [1, 2, 3]


def test_racing_publishers_land_a_batch_once(new_schema: Callable[[], str]) -> None:
    """Two publishers of one batch at once (two connections) and, meanwhile, two
    publishers of two other batches: each batch applies once, in turn; the table is
    the changes' true order whatever order they took the lock in."""
    schema = new_schema()
    sink = sink_for(keyed_table(schema))
    batches = {
        1: [up(i, f"1.{i}", i) for i in range(200)],
        2: [*(update(i, w=-i) for i in range(0, 200, 2)), *(delete(i) for i in range(1, 50))],
        3: [up(i, f"3.{i}") for i in range(150, 260)],
    }
    publish(sink, 1, batches[1])
    a2, a3 = stage(sink, 2, batches[2]), stage(sink, 3, batches[3])
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def go(batch: int, attempt: str) -> None:
        try:
            barrier.wait()
            sink_for(sink.table).publish(batch, attempt)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=go, args=a) for a in ((2, a2), (2, a2), (3, a3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert recorded(schema) == [1, 2, 3]
    # Batch 3 may have taken the lock first: then batch 2's update of a key batch 3
    # wrote is older and does not apply. Either way, as the true order says.
    assert landed(sink) == expected(truth(batches), sink.table.column_names)


# --- schema evolution, existing tables, refusals ----------------------------------------


def test_new_columns_with_a_keyed_table(new_schema: Callable[[], str]) -> None:
    """``schema_evolution: add_new_columns``: a batch that brings a column adds it to
    the target in its publish; its upserts and partial updates set it; rows of earlier
    batches hold NULL there; an earlier batch published later updates its own columns."""
    schema = new_schema()
    old = keyed_table(schema, schema_evolution="add_new_columns")
    new = keyed_table(
        schema, schema_evolution="add_new_columns", columns=[*COLUMNS, ("x", "VARCHAR", True)]
    )
    publish(sink_for(old), 1, [up(1, "a"), up(2, "b"), up(3, "c")])
    late = stage(sink_for(old), 3, [up(5, "e")])
    publish(sink_for(new), 2, [up(1, "a2", x="x1"), update(2, x="x2"), up(4, "d", 4, x="x4")])
    sink_for(old).publish(3, late)
    got = {r["id"]: (r["v"], r["x"]) for r in landed(sink_for(new))}
    assert got == {
        1: ("a2", "x1"),
        2: ("b", "x2"),
        3: ("c", None),
        4: ("d", "x4"),
        5: ("e", None),
    }


def test_existing_target_needs_a_unique_key(new_schema: Callable[[], str]) -> None:
    """A target the user made without a key on the primary_key columns is refused by
    prepare in one line naming the remedy; with a unique index on exactly those
    columns (here a composite key, in another order) changes land."""
    schema = new_schema()
    table = keyed_table(
        schema,
        columns=[("a", "INT", False), ("id", "BIGINT", False), ("v", "VARCHAR", True)],
        primary_key=("id", "a"),
    )
    sql(f"CREATE TABLE {schema}.t (a integer NOT NULL, id bigint NOT NULL, v text)")
    sink = sink_for(table)
    with pytest.raises(SinkUnwritable) as info:
        sink.prepare(1, "1-a")
    text = str(info.value)
    assert "\n" not in text, text
    assert f"{schema}.t at postgresql://127.0.0.1:5432/test has no primary key" in text, text
    assert f'ALTER TABLE "{schema}"."t" ADD PRIMARY KEY ("id", "a")' in text, text

    sql(f"CREATE UNIQUE INDEX ON {schema}.t (a, id)")
    rows = [
        {"__op": UPSERT, "a": 1, "id": 1, "v": "x"},
        {"__op": UPSERT, "a": 2, "id": 1, "v": "y"},
        {"__op": UPSERT, "a": 1, "id": 1, "v": "x2"},
        {"__op": DELETE, "a": 2, "id": 1},
    ]
    publish(sink, 1, rows)
    assert sql(f"SELECT a, id, v FROM {schema}.t") == [(1, 1, "x2")]


# --- scd_type 2 -------------------------------------------------------------------------


def history(batches: dict[int, list[Change]], sequence_by: str | None) -> list[Change]:
    """The versions ``scd_type: 2`` keeps, from the changes in their true order: per
    key, the state after the last change at each sequence value (a row, or deleted; a
    truncate deletes every key); each row starts a version at its sequence value, ended
    by the key's next point."""
    marked = sorted(
        ((c[sequence_by] if sequence_by else b), b, i, c)
        for b, changes in batches.items()
        for i, c in enumerate(changes)
    )
    points: dict[Any, dict[Any, Change | None]] = {}
    now: dict[Any, Change | None] = {}
    for seq, _, _, c in marked:
        k, op = c["id"], c["__op"]
        if op == TRUNCATE:  # every current row ends here
            for held in [h for h, row in now.items() if row is not None]:
                now[held] = None
                points[held][seq] = None
            continue
        if op == UPSERT:
            now[k] = c
        elif op == DELETE:
            now[k] = None
        elif now.get(k) is not None:
            now[k] = {**now[k], **{n: c[n] for n in c["__set"]}}  # type: ignore[dict-item]
        else:
            continue  # a partial update of nothing: no point
        points.setdefault(k, {})[seq] = now[k]
    out = []
    for timeline in points.values():
        opened: Change | None = None
        for seq, row in sorted(timeline.items()):
            if opened is not None:
                opened["__end_at"] = seq
                opened = None
            if row is not None:
                opened = {**{n: row.get(n) for n in ("id", "v", "w")}, "__start_at": seq}
                opened["__end_at"] = None
                out.append(opened)
    return sorted(out, key=lambda r: (r["id"], r["__start_at"]))


def versions(sink: PostgresSink) -> list[Change]:
    data = sink.read()
    assert data is not None
    got = data.select(["id", "v", "w", "__start_at", "__end_at"]).to_pylist()
    return sorted(got, key=lambda r: (r["id"], r["__start_at"]))


def test_scd_type_2_keeps_every_version(new_schema: Callable[[], str]) -> None:
    """``scd_type: 2`` with ``sequence_by``: each change of a key is a version from
    its sequence value to the next change's (the current one's ``__end_at`` NULL); a
    delete ends the current version; a partial update starts a version from the one
    before; changes of one sequence value make one point (the last wins); a truncate
    ends every current version; the target's primary key is (key, ``__start_at``);
    publishing again adds nothing."""
    schema = new_schema()
    sink = sink_for(keyed_table(schema, sequence_by="seq", scd_type=2))
    batches = {
        1: [up(1, "a", 1, seq=10), up(2, "b", 2, seq=11), up(1, "a2", 1, seq=12)],
        2: [update(1, w=5, seq=20), delete(2, seq=21), up(3, "c", seq=22), up(3, "c2", seq=22)],
        3: [up(2, "b3", seq=30), delete(3, seq=31), update(3, v="x", seq=32), delete(9, seq=33)],
    }
    attempts = {b: publish(sink, b, changes) for b, changes in batches.items()}
    want = history(batches, "seq")
    assert versions(sink) == want
    assert [(r["id"], r["__start_at"], r["__end_at"]) for r in want] == [
        (1, 10, 12),
        (1, 12, 20),
        (1, 20, None),
        (2, 11, 21),
        (2, 30, None),
        (3, 22, 31),
    ]
    key = sql(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = $1::regclass AND i.indisprimary "
        "ORDER BY a.attnum",
        f"{schema}.t",
    )
    assert key == [("id",), ("__start_at",)]
    sink.publish(2, attempts[2])
    assert versions(sink) == want

    batches[4] = [up(4, "d", seq=40), {**TRUNC, "seq": 41}, up(5, "e", seq=42)]
    publish(sink, 4, batches[4])
    want = history(batches, "seq")
    assert versions(sink) == want
    current = [(r["id"], r["__start_at"]) for r in want if r["__end_at"] is None]
    assert current == [(5, 42)]
    assert recorded(schema) == [1, 2, 3, 4]


@pytest.mark.parametrize("sequenced", [False, True])
def test_scd_type_2_history_whatever_order_batches_publish_in(
    new_schema: Callable[[], str], sequenced: bool
) -> None:
    """Five batches of random upserts, deletes and a few truncates over few keys,
    published in a random order: an older batch published late fills its versions in
    between, so the history is the one the changes make in their true order."""
    rng = random.Random(2 + sequenced)
    schema = new_schema()
    seq_by = "seq" if sequenced else None
    sink = sink_for(keyed_table(schema, sequence_by=seq_by, scd_type=2))
    seqs = rng.sample(range(10_000), 5 * 30)
    batches: dict[int, list[Change]] = {}
    for b in range(1, 6):
        changes = []
        for j in range(30):
            k = rng.randrange(8)
            seq = {"seq": seqs[(b - 1) * 30 + j]} if sequenced else {}
            r = rng.random()
            if r < 0.3:
                changes.append(delete(k, **seq))
            elif r < 0.33:
                changes.append({**TRUNC, **seq})
            else:
                changes.append(up(k, f"{b}.{j}", rng.randrange(100), **seq))
        batches[b] = changes
    order = list(batches)
    rng.shuffle(order)
    for b in order:
        publish(sink, b, batches[b])
    assert versions(sink) == history(batches, seq_by), f"published in order {order}"
