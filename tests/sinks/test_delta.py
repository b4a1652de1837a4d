"""The ``delta`` sink through the real engine: JSON files -> Spark -> a Delta table on a
local folder and on the moto S3 server, read back with deltalake and DuckDB. Exactly once
under SIGKILL (after the part write, after the state commit, after the Delta commit),
and a reader polling the table during a multi-batch run never sees part of a batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from helpers import checksum, pipeline, run

from airflow_connectors.engine.batch import run_batch
from airflow_connectors.engine.discovery import context, discover
from airflow_connectors.engine.runner import RunFailed
from airflow_connectors.sinks.delta import DeltaSink, storage_options
from airflow_connectors.state.store import ConnectorRef, StateStore
from airflow_connectors.testing.jobs import finish, kill, start_job, wait_for

SPARK = "local[1]"
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE", "day": "DATE"}


def write_source(folder: Path, files: int, rows: int, *, base: int = 0) -> pa.Table:
    """``files`` JSON-lines files of ``rows`` rows each; ids from ``base`` upwards."""
    folder.mkdir(parents=True, exist_ok=True)
    ids, names, amounts, days = [], [], [], []
    for f in range(files):
        lines = []
        for i in range(base + f * rows, base + (f + 1) * rows):
            ids.append(i)
            names.append(f"name-{i}-{'x' * (i % 13)}")
            amounts.append(i / 4)
            days.append(f"2024-01-{1 + i % 28:02d}")
            lines.append(
                json.dumps({"id": i, "name": names[-1], "amount": amounts[-1], "day": days[-1]})
            )
        (folder / f"part-{base + f:06d}.json").write_text("\n".join(lines) + "\n")
    return pa.table({"id": pa.array(ids, pa.int64()), "name": names, "amount": amounts})


def table_spec(
    source: Path, *, sink: dict[str, Any] | None = None, connector: str = "files", **conn: Any
) -> dict[str, Any]:
    return {
        "columns": COLUMNS,
        "sink": {"name": "delta", "config": sink or {}},
        "connectors": [
            {
                "name": connector,
                "transport": {
                    "name": "file_input",
                    "config": {"path": str(source), "min_file_age": 0},
                },
                "format": {"name": "json", "config": {"update_format": "raw"}},
                **conn,
            }
        ],
    }


def delta(uri: str) -> DeltaTable:
    return DeltaTable(uri, storage_options=storage_options(uri))


def read_delta(uri: str) -> pa.Table:
    return delta(uri).to_pyarrow_table()


def assert_same_rows(data: pa.Table, source: pa.Table) -> None:
    data = data.select(["id", "name", "amount"])
    assert data.num_rows == source.num_rows
    assert len(set(data.column("id").to_pylist())) == source.num_rows  # no duplicates
    assert checksum(data, "id") == checksum(source, "id")


def unlisted_files(uri: str) -> list[str]:
    """Data files in the table folder that its Delta log does not list: leftovers of
    attempts that never committed (none once every batch is published)."""
    root = Path(uri)
    listed = set(pa.table(delta(uri).get_add_actions()).column("path").to_pylist())
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and "_delta_log" not in p.parts and str(p.relative_to(root)) not in listed
    )


def batch_ids(store_url: str, connector: str = "files") -> list[int]:
    store = StateStore(store_url)
    try:
        return [b.batch_id for b in store.batches(ConnectorRef("p", "events", connector))]
    finally:
        store.close()


# --- end to end -----------------------------------------------------------------


def test_json_files_land_in_a_delta_table_readable_by_deltalake_and_duckdb(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    source = write_source(tmp_path / "src", files=3, rows=500)
    (tmp_path / "src" / "a-bad.json").write_text(
        '{"id": 9000, "name": "ok", "amount": 1.0, "day": "2024-02-01"}\nnot json\n'
    )
    wh = str(tmp_path / "wh")
    spec = pipeline({"events": table_spec(tmp_path / "src", errors={"tolerance": "all"})})
    report = run(spec, sqlite_url, wh, spark)
    assert report.connectors["events.files"].batches == 1
    uri = f"{wh}/p/events"
    dt = delta(uri)
    extra = pa.table({"id": pa.array([9000], pa.int64()), "name": ["ok"], "amount": [1.0]})
    expected = pa.concat_tables([source, extra])
    assert_same_rows(dt.to_pyarrow_table(), expected)
    assert dt.version() == 0  # created by the first batch's commit, with its rows
    batch_id = batch_ids(sqlite_url)[0]
    assert dt.transaction_version("p.events.files") == batch_id
    assert dt.schema().to_arrow().names == ["id", "name", "amount", "day"]
    # DuckDB reads the files the log lists (its delta extension is not installable here).
    files = dt.file_uris()
    assert files and all(Path(f).is_file() for f in files)
    count, total = (
        duckdb.connect()
        .execute(f"SELECT count(*), sum(id) FROM read_parquet({files!r})")
        .fetchall()[0]
    )
    assert (count, total) == (expected.num_rows, sum(expected.column("id").to_pylist()))
    # Statistics let readers skip files: row counts, null counts, min/max.
    adds = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    assert sum(a["num_records"] for a in adds) == expected.num_rows
    assert min(a["min.id"] for a in adds) == 0 and max(a["max.id"] for a in adds) == 9000
    # The bad line is a dead letter in the Delta table <table>__errors.
    dead = read_delta(f"{uri}__errors").to_pylist()
    assert [(d["source_key"].endswith("a-bad.json"), d["raw_text"]) for d in dead] == [
        (True, "not json")
    ]
    assert delta(f"{uri}__errors").transaction_version("p.events.files") == batch_id
    assert unlisted_files(uri) == []

    # A second run with new files: one more batch, one more version; nothing new: none.
    more = write_source(tmp_path / "src", files=2, rows=100, base=100_000)
    run(spec, sqlite_url, wh, spark)
    run(spec, sqlite_url, wh, spark)
    dt = delta(uri)
    assert dt.version() == 1
    assert_same_rows(dt.to_pyarrow_table(), pa.concat_tables([expected, more]))


def test_airflow_connectors_run_summarizes_the_delta_table(tmp_path: Path) -> None:
    """``airflow-connectors run`` as users run it: the table summary reads the Delta
    table through its log (its files sit in batch folders, not directly in it)."""
    write_source(tmp_path / "src", files=2, rows=50)
    spec = tmp_path / "pipeline.json"
    doc = {"pipeline": "p", "tables": {"events": table_spec(tmp_path / "src")}}
    spec.write_text(json.dumps(doc))
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "home"), "PYSPARK_PYTHON": sys.executable}
    env.pop("AIRFLOW__CONNECTORS__STATE_STORE_URL", None)
    env.pop("AIRFLOW__CONNECTORS__WAREHOUSE", None)
    cli = str(Path(sys.executable).parent / "airflow-connectors")
    out = subprocess.run(
        [cli, "run", str(spec), "--show", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    uri = tmp_path / "home" / "connectors" / "warehouse" / "p" / "events"
    assert f"table events: 100 rows at {uri}" in out.stdout
    assert read_delta(str(uri)).num_rows == 100


READ_IN_A_FRESH_PROCESS = """
import sys
from deltalake import write_deltalake
import pyarrow as pa
from airflow_connectors.spec.models import PipelineSpec
from airflow_connectors.engine.context import table_sink

spec = PipelineSpec.model_validate({"name": "p", "tables": [{"name": "t",
    "columns": [{"name": "id", "type": {"kind": "BIGINT"}}],
    "sink": {"name": "delta", "config": {}}}]})
sink = table_sink("p", spec.tables[0], sys.argv[1])
if sys.argv[2] == "write":
    write_deltalake(sink.location("rows"), pa.table({"id": pa.array(range(10), pa.int64())}))
print(sink.read("rows").num_rows)
"""


def test_reading_the_table_never_aborts_the_process_at_exit(tmp_path: Path) -> None:
    """The sink's read (what ``airflow-connectors run`` prints) in short-lived processes:
    deltalake's own to_pyarrow_table left about every other process to abort at exit
    ("terminate called without an active exception", exit code 134) after its work."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    runs = [
        subprocess.run(
            [sys.executable, "-c", READ_IN_A_FRESH_PROCESS, str(tmp_path), mode],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        for mode in ["write"] + ["read"] * 5
    ]
    assert [(r.returncode, r.stdout.strip()) for r in runs] == [(0, "10")] * 6, runs[-1].stderr


def sink_of(root: Path, connector: str = "files", **config: Any) -> DeltaSink:
    spec = pipeline({"events": table_spec(root / "src", sink=config, connector=connector)})
    table = spec.tables[0]
    sink = context(spec, table, table.connectors[0], str(root / "wh")).sink()
    assert isinstance(sink, DeltaSink)
    return sink


def rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"n{i}" for i in ids],
            "amount": [i / 2 for i in ids],
            "day": pa.array([None] * n, pa.date32()),
        }
    )


def test_parts_roll_at_target_size_and_publish_is_one_commit_once(tmp_path: Path) -> None:
    """A part writer starts a new file past target_file_size; the batch's files are one
    Delta commit; publishing again adds nothing; a losing attempt's files are removed and
    discard never removes committed files."""
    sink = sink_of(tmp_path, target_file_size=1)
    sink.prepare(1, "1-aaaa")
    for part in range(2):
        w = sink.writer(1, "1-aaaa", part, "rows")
        for chunk in range(3):
            w.write(rows(part * 1000 + chunk * 100, 100))
        assert w.close() == 300
    loser = sink.writer(1, "2-bbbb", 0, "rows")  # a zombie attempt of the same batch
    loser.write(rows(0, 10))
    loser.close()
    skipped = sink.writer(1, "1-aaaa", 2, "rows")  # an object skipped: aborted
    skipped.write(rows(5000, 10))
    skipped.abort()
    sink.publish(1, "1-aaaa")
    uri = sink.location()
    dt = delta(uri)
    assert (dt.version(), len(dt.file_uris())) == (0, 6)
    assert dt.to_pyarrow_table().num_rows == 600
    sink.publish(1, "1-aaaa")  # a crash before mark_published: rolled forward again
    sink.discard(1)  # a stop: never removes what the log lists
    assert delta(uri).version() == 0 and read_delta(uri).num_rows == 600
    assert unlisted_files(uri) == []  # the loser's and the skipped part's files are gone
    assert not (Path(uri) / "batch-0000000001" / "2-bbbb").exists()


def test_out_of_order_batches_of_one_connector_land_once(tmp_path: Path) -> None:
    """tasks_max > 1: batch 3 publishes before batch 2. Batch 2 is still added (the app
    transaction stays at 3), and publishing either again adds nothing."""
    sink = sink_of(tmp_path)
    for batch, start in ((3, 300), (2, 200)):
        sink.prepare(batch, f"1-{batch}")
        w = sink.writer(batch, f"1-{batch}", 0, "rows")
        w.write(rows(start, 10))
        w.close()
    sink.publish(3, "1-3")
    sink.publish(2, "1-2")
    for batch in (2, 3):
        sink.publish(batch, f"1-{batch}")
    dt = delta(sink.location())
    assert dt.version() == 1 and dt.transaction_version("p.events.files") == 3
    assert sorted(dt.to_pyarrow_table().column("id").to_pylist()) == [
        *range(200, 210),
        *range(300, 310),
    ]
    # Even once a compaction replaced batch 2's files, its commit still names it.
    from deltalake import write_deltalake

    write_deltalake(dt, dt.to_pyarrow_table(), mode="overwrite")
    sink.publish(2, "1-2")
    assert read_delta(sink.location()).num_rows == 20


def test_a_fresh_state_store_reusing_batch_ids_adds_and_keeps_everything(
    tmp_path: Path,
) -> None:
    """The state store was started afresh beside an existing table: batch ids begin
    again below the connector's app transaction. New batches still land (looked up by
    their attempt), and the older batches' files of the same ids are never removed."""
    sink = sink_of(tmp_path)
    for batch, attempt, start in ((1, "1-old", 0), (2, "1-old", 100), (1, "1-new", 1000)):
        sink.prepare(batch, attempt)
        w = sink.writer(batch, attempt, 0, "rows")
        w.write(rows(start, 10))
        w.close()
        sink.publish(batch, attempt)
        sink.publish(batch, attempt)  # rolled forward: nothing twice
    dt = delta(sink.location())
    assert dt.version() == 2 and dt.transaction_version("p.events.files") == 2
    assert sorted(dt.to_pyarrow_table().column("id").to_pylist()) == [
        *range(10),
        *range(100, 110),
        *range(1000, 1010),
    ]
    assert unlisted_files(sink.location()) == []


def test_connectors_of_one_table_commit_concurrently(tmp_path: Path) -> None:
    """Four connectors publish into one table at once, from threads: delta-rs retries the
    appends that lose the race; every batch lands once, each connector's app transaction
    at its batch."""
    sinks = [sink_of(tmp_path, connector=f"c{n}") for n in range(4)]
    for n, sink in enumerate(sinks):
        sink.prepare(10 + n, "1-x")
        w = sink.writer(10 + n, "1-x", 0, "rows")
        w.write(rows(n * 100, 100))
        w.close()
    errors: list[BaseException] = []

    def publish(n: int) -> None:
        try:
            sinks[n].publish(10 + n, "1-x")
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=publish, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    dt = delta(sinks[0].location())
    assert sorted(dt.to_pyarrow_table().column("id").to_pylist()) == list(range(400))
    assert dt.version() == 3
    assert [dt.transaction_version(f"p.events.c{n}") for n in range(4)] == [10, 11, 12, 13]


def test_existing_table_with_other_columns_is_one_line_error(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    from deltalake import write_deltalake

    write_source(tmp_path / "src", files=1, rows=10)
    wh = tmp_path / "wh"
    write_deltalake(str(wh / "p" / "events"), pa.table({"other": [1, 2]}))
    spec = pipeline({"events": table_spec(tmp_path / "src")})
    with pytest.raises(RunFailed) as e:
        run(spec, sqlite_url, str(wh), spark)
    message = str(e.value)
    assert "\n" not in message and "Traceback" not in message
    assert "the Delta table at" in message and "(other long)" in message
    assert "id long not null" in message
    assert read_delta(str(wh / "p" / "events")).num_rows == 2  # untouched


def test_time_column_is_refused_in_one_line(sqlite_url: str, tmp_path: Path) -> None:
    spec = pipeline(
        {"events": {**table_spec(tmp_path / "src"), "columns": {"id": "BIGINT", "t": "TIME"}}}
    )
    table = spec.tables[0]
    sink = context(spec, table, table.connectors[0], str(tmp_path / "wh")).sink()
    from airflow_connectors.sinks.base import SinkUnwritable

    with pytest.raises(SinkUnwritable, match=r"column t has type time64\[us\], which Delta"):
        sink.prepare(1, "1-abc")


# --- SIGKILL at each point, then the next run ---------------------------------------

FILES, ROWS = 4, 1_000
#: After the parts are written (uncommitted), after the state store commit (before the
#: Delta commit), after the Delta commit (before the state store records it published).
POINTS = ["after_sink_write", "after_commit", "delta_committed"]


def no_spark() -> Any:
    raise AssertionError("a committed batch asked for Spark")


class Case:
    """One connector with planned batches: its own state store and warehouse."""

    def __init__(self, root: Path, source: Path, warehouse: str, **conn: Any) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.store_url = f"sqlite:///{root / 'state.db'}"
        spec = pipeline({"events": table_spec(source, **conn)})
        table = spec.tables[0]
        self.ctx = context(spec, table, table.connectors[0], warehouse)
        self.uri = self.ctx.sink().location()
        store = StateStore(self.store_url)
        try:
            self.batch_ids = discover(store, self.ctx).batch_ids
            self.items = {
                b: [i.key for i in store.load_batch(b).plan.items] for b in self.batch_ids
            }
        finally:
            store.close()
        self.marks = root / "marks"
        self.marks.mkdir()

    def state(self) -> dict[str, Any]:
        """What the state store and a Delta reader see now."""
        store = StateStore(self.store_url)
        try:
            st = store.status(self.ctx.ref)
            assert st is not None
            unpublished = len(store.unpublished_batches(self.ctx.ref))
        finally:
            store.close()
        try:
            dt: DeltaTable | None = delta(self.uri)
        except Exception:
            dt = None
        return {
            "records": st.total_records,
            "unpublished": unpublished,
            "version": None if dt is None else dt.version(),
            "visible": 0 if dt is None else dt.to_pyarrow_table().num_rows,
        }

    def next_run(self, spark: Any) -> None:
        """The killed job's retry (rolls a committed batch's publish forward without
        Spark), then the connector's next run (re-runs an uncommitted batch)."""
        store = StateStore(self.store_url)
        try:
            for b in self.batch_ids:
                if store.load_batch(b).status.value == "committed":
                    assert not run_batch(store, b, no_spark).committed
            found = discover(store, self.ctx)
            assert found.new_items == 0, "the next run planned the source again"
            for b in found.batch_ids:
                assert run_batch(store, b, lambda: spark).committed
        finally:
            store.close()


@pytest.fixture(scope="module")
def crash_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
    folder = tmp_path_factory.mktemp("crash-src")
    return folder, write_source(folder, FILES, ROWS)


@pytest.fixture(scope="module")
def killed(
    crash_source: tuple[Path, pa.Table], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Case, dict[str, Any]]]:
    """One case per point, their jobs started together, each SIGKILLed at its point."""
    base = tmp_path_factory.mktemp("points")
    cases = {p: Case(base / p, crash_source[0], str(base / p / "wh")) for p in POINTS}
    jobs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for p, case in cases.items():
            jobs[p] = start_job(case.batch_ids, case.store_url, case.marks, p, spark_master=SPARK)
        out = {}
        for p, proc in jobs.items():
            wait_for(cases[p].marks / p, proc)
            kill(proc)
            out[p] = (cases[p], cases[p].state())
        return out
    finally:
        for proc in jobs.values():
            if proc.poll() is None:
                kill(proc)


LEFT = {
    "after_sink_write": {"records": 0, "unpublished": 0, "version": None, "visible": 0},
    "after_commit": {"records": FILES * ROWS, "unpublished": 1, "version": None, "visible": 0},
    "delta_committed": {
        "records": FILES * ROWS,
        "unpublished": 1,
        "version": 0,
        "visible": FILES * ROWS,
    },
}


@pytest.mark.parametrize("point", POINTS)
def test_kill_then_next_run_lands_the_batch_once(
    killed: dict[str, tuple[Case, dict[str, Any]]],
    crash_source: tuple[Path, pa.Table],
    spark: Any,
    point: str,
) -> None:
    case, left = killed[point]
    assert left == LEFT[point], f"killed at {point}"
    if point == "after_sink_write":  # written, never committed: invisible files
        assert list(Path(case.uri).rglob("*.parquet"))
    case.next_run(spark)
    dt = delta(case.uri)
    assert_same_rows(dt.to_pyarrow_table(), crash_source[1])
    # One commit for the one batch, whoever made it; the app transaction records it.
    assert dt.version() == 0
    assert dt.transaction_version("p.events.files") == case.batch_ids[0]
    assert case.state() == {
        "records": FILES * ROWS,
        "unpublished": 0,
        "version": 0,
        "visible": FILES * ROWS,
    }
    assert unlisted_files(case.uri) == []


# --- a reader polling during a multi-batch run ----------------------------------------


def poll_batches(
    case: Case, proc: subprocess.Popen[bytes], ids_of: dict[int, set[int]]
) -> list[int]:
    """Read the table over and over until the job ends; every snapshot must hold each
    batch whole or not at all. Returns the row counts seen."""
    seen: list[int] = []
    problems: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                ids = set(read_delta(case.uri).column("id").to_pylist())
            except Exception:  # no table yet
                time.sleep(0.05)
                continue
            for b, want in ids_of.items():
                got = len(want & ids)
                if got not in (0, len(want)):
                    problems.append(f"batch {b}: {got} of {len(want)} rows visible")
            if len(ids) != sum(len(w) for w in ids_of.values() if w <= ids):
                problems.append(f"{len(ids)} rows visible, not a sum of whole batches")
            seen.append(len(ids))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        out, _ = proc.communicate(timeout=600)
    finally:
        stop.set()
        thread.join()
    assert proc.returncode == 0, out.decode()[-3000:]
    assert problems == []
    return seen


def batch_rows(case: Case, files: int, rows: int) -> dict[int, set[int]]:
    """Batch id -> the ids of its rows (file ``part-<n>.json`` holds n*rows...)."""
    out = {}
    for b, keys in case.items.items():
        ids: set[int] = set()
        for key in keys:
            n = int(Path(key).stem.removeprefix("part-"))
            ids |= set(range(n * rows, (n + 1) * rows))
        out[b] = ids
    return out


def run_polled(tmp_path: Path, warehouse: str) -> None:
    source = write_source(tmp_path / "src", files=6, rows=ROWS)
    # Three batches of two objects each, each object a file of its own (the target size
    # of 1 byte starts a file per write): a partial batch would be some of its files.
    case = Case(
        tmp_path / "case",
        tmp_path / "src",
        warehouse,
        sink={"target_file_size": 1},
        tasks_max=3,
    )
    assert len(case.batch_ids) == 3 and all(len(k) == 2 for k in case.items.values())
    ids_of = batch_rows(case, 6, ROWS)
    proc = start_job(case.batch_ids, case.store_url, case.marks, spark_master=SPARK)
    try:
        seen = poll_batches(case, proc, ids_of)
    finally:
        if proc.poll() is None:
            kill(proc)
    assert seen and seen[-1] == 6 * ROWS
    print(f"the reader took {len(seen)} snapshots; row counts seen: {sorted(set(seen))}")
    dt = delta(case.uri)
    assert_same_rows(dt.to_pyarrow_table(), source)
    assert dt.version() == 2  # one commit per batch
    assert len(dt.file_uris()) >= 6
    assert dt.transaction_version("p.events.files") == max(case.batch_ids)


def test_reader_never_sees_part_of_a_batch(tmp_path: Path) -> None:
    run_polled(tmp_path, str(tmp_path / "wh"))


# --- the same on S3 -------------------------------------------------------------------


@pytest.fixture
def s3_env(s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """This process and the jobs it starts reach the S3 test server through AWS_*."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    yield s3_server


def s3_unlisted(s3: Any, uri: str) -> list[str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    listed = set(pa.table(delta(uri).get_add_actions()).column("path").to_pylist())
    keys = []
    for page in (
        s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
    ):
        keys += [o["Key"][len(prefix) + 1 :] for o in page.get("Contents", [])]
    # pyarrow leaves an empty "folder" marker (a key ending in /) above what it deleted.
    return sorted(
        k
        for k in keys
        if not k.startswith("_delta_log/") and not k.endswith("/") and k not in listed
    )


def test_s3_warehouse_lands_rows_and_survives_a_kill_after_the_delta_commit(
    s3_env: Any, s3_bucket: str, tmp_path: Path
) -> None:
    source = write_source(tmp_path / "src", files=FILES, rows=ROWS)
    (tmp_path / "src" / "a-bad.json").write_text("not json\n")
    case = Case(
        tmp_path / "case", tmp_path / "src", f"s3://{s3_bucket}/wh", errors={"tolerance": "all"}
    )
    assert case.uri == f"s3://{s3_bucket}/wh/p/events"
    proc = start_job(
        case.batch_ids, case.store_url, case.marks, "delta_committed", spark_master=SPARK
    )
    try:
        wait_for(case.marks / "delta_committed", proc)
        kill(proc)
    finally:
        if proc.poll() is None:
            kill(proc)
    assert case.state() == {
        "records": FILES * ROWS,
        "unpublished": 1,
        "version": 0,
        "visible": FILES * ROWS,
    }
    case.next_run(lambda: no_spark())  # the retry rolls forward; nothing is left to run
    dt = delta(case.uri)
    assert dt.version() == 0 and dt.transaction_version("p.events.files") == case.batch_ids[0]
    assert_same_rows(dt.to_pyarrow_table(), source)
    dead = read_delta(f"{case.uri}__errors").to_pylist()
    assert [d["raw_text"] for d in dead] == ["not json"]
    assert s3_unlisted(s3_env, case.uri) == []


def test_s3_reader_never_sees_part_of_a_batch(s3_env: Any, s3_bucket: str, tmp_path: Path) -> None:
    run_polled(tmp_path, f"s3://{s3_bucket}/wh")


def test_s3_kill_after_the_part_write_then_the_next_run(
    s3_env: Any, s3_bucket: str, tmp_path: Path
) -> None:
    """Parts uploaded, nothing committed: invisible; the next run (a job of its own, as
    Airflow's retry) commits its own attempt once and removes the killed one's objects."""
    source = write_source(tmp_path / "src", files=FILES, rows=ROWS)
    case = Case(tmp_path / "case", tmp_path / "src", f"s3://{s3_bucket}/wh")
    proc = start_job(
        case.batch_ids, case.store_url, case.marks, "after_sink_write", spark_master=SPARK
    )
    try:
        wait_for(case.marks / "after_sink_write", proc)
        kill(proc)
    finally:
        if proc.poll() is None:
            kill(proc)
    assert case.state() == {"records": 0, "unpublished": 0, "version": None, "visible": 0}
    bucket_keys = [
        o["Key"] for o in s3_env.client().list_objects_v2(Bucket=s3_bucket).get("Contents", [])
    ]
    assert any(k.endswith(".parquet") for k in bucket_keys)  # uploaded, never committed
    (tmp_path / "marks2").mkdir()
    finish(case.batch_ids, case.store_url, tmp_path / "marks2", spark_master=SPARK)
    dt = delta(case.uri)
    assert dt.version() == 0 and dt.transaction_version("p.events.files") == case.batch_ids[0]
    assert_same_rows(dt.to_pyarrow_table(), source)
    assert s3_unlisted(s3_env, case.uri) == []
    assert case.state()["unpublished"] == 0


def test_s3_missing_bucket_is_refused_before_spark_in_one_line(s3_env: Any, tmp_path: Path) -> None:
    spec = pipeline({"events": table_spec(tmp_path / "src")})
    table = spec.tables[0]
    sink = context(spec, table, table.connectors[0], "s3://no-such-bucket-h5/wh").sink()
    from airflow_connectors.sinks.base import SinkUnwritable

    with pytest.raises(SinkUnwritable) as e:
        sink.prepare(1, "1-abc")
    message = str(e.value)
    assert "bucket no-such-bucket-h5 does not exist" in message and "\n" not in message
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in message
