"""The ``iceberg`` sink through the real engine: JSON files -> Spark -> an Iceberg table
in pyiceberg's SQL catalog kept in the state store's database (SQLite, PostgreSQL), on a
local warehouse and on the moto S3 server, read back with pyiceberg and DuckDB. Exactly
once under SIGKILL (after the part write, after the state commit, after the Iceberg
commit before the batch is marked published): one snapshot per batch, marked with it.
A reader polling the table during a multi-batch run never sees part of a batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from helpers import checksum, pipeline, run
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_connectors.engine.batch import run_batch
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.engine.discovery import context, discover
from airflow_connectors.sinks.base import SinkUnwritable
from airflow_connectors.sinks.iceberg import (
    ATTEMPT_PROPERTY,
    BATCH_PROPERTY,
    IcebergSink,
    catalog_properties,
)
from airflow_connectors.state.store import ConnectorRef, StateStore
from airflow_connectors.testing.jobs import kill, start_job, wait_for

SPARK = "local[1]"
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE", "small": "SMALLINT"}


def write_source(folder: Path, files: int, rows: int, *, base: int = 0) -> pa.Table:
    """``files`` JSON-lines files of ``rows`` rows each; ids from ``base`` upwards."""
    folder.mkdir(parents=True, exist_ok=True)
    ids, names, amounts = [], [], []
    for f in range(files):
        lines = []
        for i in range(base + f * rows, base + (f + 1) * rows):
            ids.append(i)
            names.append(f"name-{i}-{'x' * (i % 11)}")
            amounts.append(i / 4)
            lines.append(
                json.dumps({"id": i, "name": names[-1], "amount": amounts[-1], "small": i % 300})
            )
        (folder / f"part-{base + f:06d}.json").write_text("\n".join(lines) + "\n")
    return pa.table({"id": pa.array(ids, pa.int64()), "name": names, "amount": amounts})


def table_spec(source: Path, sink: dict[str, Any] | None = None, **conn: Any) -> dict[str, Any]:
    return {
        "columns": COLUMNS,
        "sink": {"name": "iceberg", "config": sink or {}},
        "connectors": [
            {
                "name": "files",
                "transport": {
                    "name": "file_input",
                    "config": {"path": str(source), "min_file_age": 0},
                },
                "format": {"name": "json", "config": {"update_format": "raw"}},
                **conn,
            }
        ],
    }


def catalog(uri: str, location: str = "") -> SqlCatalog:
    """A reader's view of the catalog, as a user opens it."""
    return SqlCatalog("airflow_connectors", **catalog_properties(uri, location))


def load(uri: str, name: str = "p.events", location: str = "") -> Table:
    cat = catalog(uri, location)
    try:
        return cat.load_table(name)
    finally:
        cat.engine.dispose()


def read(uri: str, name: str = "p.events", location: str = "") -> pa.Table:
    return load(uri, name, location).scan().to_arrow()


def batch_marks(table: Table) -> list[tuple[str | None, str | None]]:
    """(batch, attempt) marked on each snapshot, oldest first."""
    return [
        (s.summary.get(BATCH_PROPERTY), s.summary.get(ATTEMPT_PROPERTY))
        for s in table.metadata.snapshots
        if s.summary is not None
    ]


def assert_same(data: pa.Table, source: pa.Table) -> None:
    data = data.select(["id", "name", "amount"])
    assert data.num_rows == source.num_rows
    assert len(set(data.column("id").to_pylist())) == source.num_rows  # no duplicates
    assert checksum(data, "id") == checksum(source, "id")


def data_files(table: Table) -> list[str]:
    return sorted(task.file.file_path for task in table.scan().plan_files())


# --- the engine, both stores -------------------------------------------------------


def test_engine_run_lands_batches_as_marked_snapshots(
    spark: Any, store_url: str, tmp_path: Path
) -> None:
    """Two runs (two batches) into an Iceberg table whose catalog sits in the state
    store's database; a bad line goes to the dead-letter table; pyiceberg and DuckDB
    read the same rows; a second publish of a batch adds nothing."""
    src = tmp_path / "src"
    first = write_source(src, 3, 500)
    (src / "part-000003-bad.json").write_text(
        '{"id": 100000, "name": "ok", "amount": 1}\nnot json\n'
    )
    spec = pipeline(
        {"events": table_spec(src, {"target_file_size": 1 << 20}, errors={"tolerance": "all"})}
    )
    wh = str(tmp_path / "wh")
    report = run(spec, store_url, wh, spark)
    assert report.connectors["events.files"].records == 1501
    second = write_source(src, 2, 300, base=50_000)
    run(spec, store_url, wh, spark)

    table = load(store_url)
    good = pa.concat_tables(
        [
            first,
            second,
            pa.table({"id": pa.array([100000], pa.int64()), "name": ["ok"], "amount": [1.0]}),
        ]
    )
    data = table.scan().to_arrow()
    assert_same(data, good)
    assert data.schema.field("small").type == pa.int32()  # SMALLINT widened for Iceberg
    assert data.schema.field("id").nullable is False
    marks = batch_marks(table)
    assert len(marks) == 2 and [m[0] for m in marks] == ["files:1", "files:2"]
    assert table.location() == f"{wh}/p/events"
    # One metadata file for the creation and one per batch: no orphans.
    assert len(list(Path(wh, "p", "events", "metadata").glob("*.metadata.json"))) == 3
    # DuckDB reads the table's current data files.
    files = data_files(table)
    assert all(f.startswith(f"{wh}/p/events/data/batch-") for f in files)
    con = duckdb.connect()
    assert con.execute("SELECT count(*), sum(id) FROM read_parquet(?)", [files]).fetchone() == (
        good.num_rows,
        sum(good.column("id").to_pylist()),
    )
    errors = read(store_url, "p.events__errors")
    assert errors.num_rows == 1 and errors.column("raw_text").to_pylist() == ["not json"]

    # The state store says batch 1 is published; publishing it again is a no-op.
    store = StateStore(store_url)
    try:
        batch = store.load_batch(1)
        sink = IcebergSink(
            IcebergSink.Config.model_validate(batch.plan.table.sink.config),
            pipeline="p",
            table=batch.plan.table,
            warehouse=wh,
        )
        sink.connector, sink.state_store_url = "files", store.url
        sink.publish(1, batch.attempt)
    finally:
        store.close()
    assert len(load(store_url).metadata.snapshots) == 2


def test_airflow_connectors_run_summarizes_the_iceberg_table(tmp_path: Path) -> None:
    """``airflow-connectors run --state-store-url`` as users run it: the summary reads
    the Iceberg table (and its dead letters) through the catalog in that store."""
    src = tmp_path / "src"
    write_source(src, 2, 50)
    (src / "part-000002-bad.json").write_text("not json\n")
    spec = tmp_path / "pipeline.json"
    doc = {"pipeline": "p", "tables": {"events": table_spec(src, errors={"tolerance": "all"})}}
    spec.write_text(json.dumps(doc))
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "home"), "PYSPARK_PYTHON": sys.executable}
    env.pop("AIRFLOW__CONNECTORS__STATE_STORE_URL", None)
    env.pop("AIRFLOW__CONNECTORS__WAREHOUSE", None)
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    wh = tmp_path / "wh"
    cli = str(Path(sys.executable).parent / "airflow-connectors")
    out = subprocess.run(
        [cli, "run", str(spec), "--state-store-url", url, "--warehouse", str(wh), "--show", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"table events: 100 rows at {wh / 'p' / 'events'}" in out.stdout, out.stdout
    assert "table events__errors: 1 rows" in out.stdout, out.stdout
    assert read(url).num_rows == 100


def test_catalog_uri_namespace_and_table_name(spark: Any, tmp_path: Path) -> None:
    """The catalog in another database than the state store, under names of one's own;
    a bad catalog URL fails the run in one line naming the table, without its password."""
    src = tmp_path / "src"
    source = write_source(src, 2, 100)
    cat_url = f"sqlite:///{tmp_path / 'lake.db'}"
    sink = {
        "catalog_uri": cat_url,
        "namespace": "lake",
        "table_name": "ev",
        "location": str(tmp_path / "t"),
    }
    store_url = f"sqlite:///{tmp_path / 'state.db'}"
    run(pipeline({"events": table_spec(src, sink)}), store_url, str(tmp_path / "wh"), spark)
    assert_same(read(cat_url, "lake.ev"), source)
    assert load(cat_url, "lake.ev").location() == str(tmp_path / "t")

    bad = IcebergSink(
        IcebergSink.Config(catalog_uri="postgresql+psycopg://u:s3cr3tpw@127.0.0.1:1/none"),
        pipeline="p",
        table=pipeline({"events": table_spec(src)}).tables[0],
        warehouse=str(tmp_path / "wh2"),
    )
    with pytest.raises(SinkUnwritable) as info:
        bad.prepare(1, "1-abc")
    text = str(info.value)
    assert "s3cr3tpw" not in text and "table events" in text and "\n" not in text
    assert "catalog_uri" in text


def test_concurrent_publishers_append_once(tmp_path: Path) -> None:
    """An Airflow retry rolling a publish forward beside the zombie that is publishing
    it: several publishers of one committed batch at once leave one snapshot."""
    src = tmp_path / "src"
    source = write_source(src, 2, 200)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    wh = str(tmp_path / "wh")
    (batch_id,) = plan(tmp_path, url, src, wh)
    store = StateStore(url)
    try:
        batch = store.load_batch(batch_id)
        ctx = BatchContext.from_plan(batch.plan)
        ctx.attempt = "1-race"
        sink = ctx.sink()
        sink.state_store_url = url
        sink.prepare(batch_id, ctx.attempt)
        rows = source.append_column("small", pa.array([1] * source.num_rows, pa.int16()))
        for part, chunk in enumerate([rows.slice(0, 200), rows.slice(200)]):
            w = sink.writer(batch_id, ctx.attempt, part, "rows")
            w.write(chunk)
            assert w.close() == 200
    finally:
        store.close()
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            other = ctx.sink()
            other.state_store_url = url
            other.publish(batch_id, ctx.attempt)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=publish) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    table = load(url)
    assert_same(table.scan().to_arrow(), source)
    assert batch_marks(table) == [(f"files:{batch_id}", "1-race")]


def test_column_added_to_the_spec_evolves_the_table(spark: Any, tmp_path: Path) -> None:
    """A column added to the table spec after the first batch: the next batch adds it to
    the Iceberg schema in its own commit; earlier rows read it as NULL."""
    src = tmp_path / "src"
    write_source(src, 1, 50)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    wh = str(tmp_path / "wh")
    run(pipeline({"events": table_spec(src)}), url, wh, spark)
    (src / "part-999999.json").write_text(
        json.dumps({"id": 999, "name": "n", "note": "new"}) + "\n"
    )
    wider = table_spec(src)
    wider["columns"] = {**COLUMNS, "note": "VARCHAR"}
    run(pipeline({"events": wider}), url, wh, spark)
    table = load(url)
    assert "note" in table.schema().column_names and len(table.metadata.snapshots) == 2
    data = table.scan().to_arrow().sort_by("id")
    assert data.num_rows == 51
    assert data.column("note").to_pylist() == [None] * 50 + ["new"]


# --- crashes --------------------------------------------------------------------------

FILES, ROWS = 3, 1_000
POINTS = ["after_sink_write", "after_commit", "iceberg_committed"]


@pytest.fixture(scope="module")
def crash_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
    folder = tmp_path_factory.mktemp("source")
    return folder, write_source(folder, FILES, ROWS)


def plan(root: Path, store_url: str, source: Path, warehouse: str, **conn: Any) -> list[int]:
    """Plan the connector's batches; returns their ids."""
    spec = pipeline({"events": table_spec(source, **conn)})
    table = spec.tables[0]
    ctx = context(spec, table, table.connectors[0], warehouse)
    store = StateStore(store_url)
    try:
        return discover(store, ctx).batch_ids
    finally:
        store.close()


def next_run(store_url: str, source: Path, warehouse: str, spark: Any) -> None:
    """The connector's next run in this process: discovery rolls a cut publish forward,
    pending batches run."""
    spec = pipeline({"events": table_spec(source)})
    table = spec.tables[0]
    ctx = context(spec, table, table.connectors[0], warehouse)
    store = StateStore(store_url)
    try:
        found = discover(store, ctx)
        assert found.new_items == 0, "the next run planned the source again"
        for b in found.batch_ids:
            assert run_batch(store, b, lambda: spark).committed
        ref = ConnectorRef("p", "events", "files")
        assert store.pending_batches(ref) == [] and store.unpublished_batches(ref) == []
    finally:
        store.close()


def leftover_attempts(warehouse: str) -> list[str]:
    """Attempt folders of the table's data folder: one per committed batch at the end."""
    data = Path(warehouse) / "p" / "events" / "data"
    return sorted(str(p.relative_to(data)) for p in data.glob("batch-*/*")) if data.is_dir() else []


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_kill_at_each_point_then_next_run(
    kind: str,
    crash_source: tuple[Path, pa.Table],
    spark: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """A job SIGKILLed at each point (all started together), then the next run: the
    table equals the source, one marked snapshot, no uncommitted files left."""
    folder, source = crash_source
    cases: dict[str, tuple[str, str, int]] = {}
    jobs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for point in POINTS:
            root = tmp_path / point
            root.mkdir()
            url = (
                f"sqlite:///{root / 'state.db'}"
                if kind == "sqlite"
                else str(request.getfixturevalue("pg_schema_factory")())
            )
            wh = str(root / "wh")
            (batch_id,) = plan(root, url, folder, wh)
            cases[point] = (url, wh, batch_id)
            (root / "marks").mkdir()
            jobs[point] = start_job([batch_id], url, root / "marks", point, spark_master=SPARK)
        for point, proc in jobs.items():
            wait_for(tmp_path / point / "marks" / point, proc)
            kill(proc)
    finally:
        for proc in jobs.values():
            if proc.poll() is None:
                kill(proc)
    for point, (url, wh, _batch_id) in cases.items():
        visible = read_or_empty(url)
        # Before the Iceberg commit a reader sees nothing; after it, the whole batch.
        assert visible.num_rows == (FILES * ROWS if point == "iceberg_committed" else 0), point
        next_run(url, folder, wh, spark)
        table = load(url)
        assert_same(table.scan().to_arrow(), source)
        assert len(table.metadata.snapshots) == 1, point
        assert len(leftover_attempts(wh)) == 1, point
        assert not list(Path(wh).rglob("*.tmp")), point


def read_or_empty(uri: str, location: str = "") -> pa.Table:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return read(uri, location=location)
    except NoSuchTableError:
        return pa.table({})


@pytest.mark.parametrize("where", ["local", "s3"])
def test_reader_never_sees_part_of_a_batch(
    where: str,
    crash_source: tuple[Path, pa.Table],
    spark: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """A job ingests three batches (one file each) while this process polls the table
    (on a local warehouse, on S3): every snapshot read holds whole batches only, and the
    last one all of them."""
    folder, source = crash_source
    url = f"sqlite:///{tmp_path / 'state.db'}"
    wh = str(tmp_path / "wh")
    if where == "s3":
        request.getfixturevalue("s3_env")
        wh = f"s3://{request.getfixturevalue('s3_bucket')}/wh"
    ids = plan(tmp_path, url, folder, wh, tasks_max=FILES)
    assert len(ids) == FILES
    (tmp_path / "marks").mkdir()
    proc = start_job(ids, url, tmp_path / "marks", spark_master=SPARK)
    out: list[bytes] = []  # drained meanwhile, so the job never blocks on a full pipe
    drain = threading.Thread(target=lambda: out.append(proc.communicate()[0] or b""))
    drain.start()
    seen: set[int] = set()
    try:
        while True:
            done = proc.poll() is not None
            rows = read_or_empty(url, location=wh).to_pydict().get("id", [])
            per_file = Counter(i // ROWS for i in rows)  # a batch is one source file
            assert all(n == ROWS for n in per_file.values()), f"part of a batch: {per_file}"
            seen.add(len(rows))
            if done:
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            kill(proc)
        drain.join()
    assert proc.returncode == 0, b"".join(out).decode(errors="replace")[-3000:]
    assert max(seen) == FILES * ROWS
    table = load(url, location=wh)
    assert_same(table.scan().to_arrow(), source)
    assert len(table.metadata.snapshots) == FILES
    assert sorted(m[0] or "" for m in batch_marks(table)) == sorted(f"files:{b}" for b in ids)


# --- warehouse on S3 -------------------------------------------------------------------


@pytest.fixture
def s3_env(s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    yield


@pytest.mark.parametrize("point", ["after_sink_write", "iceberg_committed"])
def test_s3_warehouse_killed_then_next_run(
    point: str,
    s3_env: None,
    s3_server: Any,
    s3_bucket: str,
    crash_source: tuple[Path, pa.Table],
    spark: Any,
    tmp_path: Path,
) -> None:
    """On S3: a job killed after writing its parts (before the state commit) or after
    the Iceberg commit, then the next run: the table (data and metadata in the bucket)
    equals the source with one snapshot, and the bucket holds no uncommitted part."""
    folder, source = crash_source
    url = f"sqlite:///{tmp_path / 'state.db'}"
    wh = f"s3://{s3_bucket}/wh"
    (batch_id,) = plan(tmp_path, url, folder, wh)
    (tmp_path / "marks").mkdir()
    proc = start_job([batch_id], url, tmp_path / "marks", point, spark_master=SPARK)
    try:
        wait_for(tmp_path / "marks" / point, proc)
    finally:
        kill(proc)
    visible = read_or_empty(url, location=wh).num_rows
    assert visible == (FILES * ROWS if point == "iceberg_committed" else 0)
    next_run(url, folder, wh, spark)
    table = load(url, location=wh)
    assert table.location() == f"{wh}/p/events"
    assert_same(table.scan().to_arrow(), source)
    assert len(table.metadata.snapshots) == 1
    files = data_files(table)
    assert files and all(f.startswith(f"{wh}/p/events/data/batch-") for f in files)
    keys = [
        o["Key"]
        for o in s3_server.client().list_objects_v2(Bucket=s3_bucket, Prefix="wh/p/events/data/")[
            "Contents"
        ]
        if o["Key"].endswith(".parquet")
    ]
    assert sorted(f"s3://{s3_bucket}/{k}" for k in keys) == files  # no uncommitted part left
