"""The ``delta`` sink through the real engine: JSON files -> Spark -> a Delta table on a
local folder and on the moto S3 server, read back with deltalake and DuckDB. The sink
conformance kit (crashes at every fail point, concurrent publishers, a polling reader,
an added column) runs on both warehouses; the rest is Delta's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from helpers import PUBLISH, checksum, pipeline, run

from airflow_connectors.engine.discovery import context
from airflow_connectors.engine.runner import RunFailed
from airflow_connectors.sinks.delta import BATCH_KEY, DeltaSink, storage_options
from airflow_connectors.state.store import ConnectorRef, StateStore
from airflow_connectors.testing.changes_kit import ChangesConformance
from airflow_connectors.testing.jobs import kill, wait_for
from airflow_connectors.testing.sink_kit import S3Warehouse, SinkCase, SinkConformance

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


@pytest.mark.spark  # the CLI's run starts local Spark
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


@pytest.mark.slow
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


def test_a_rerun_whose_listed_parts_the_first_publisher_dropped_looks_again(
    tmp_path: Path,
) -> None:
    """Batch 2 added a column (``schema_evolution: add_new_columns``), so its commit
    writes the rows anew and drops the staged files. A re-run of the batch has listed
    them and not read them yet when the first publisher does that (lined up by the
    ``delta_rows_listed`` pause): the re-run looks again, finds the batch recorded and
    adds nothing."""
    sink = sink_of(tmp_path)
    sink.prepare(1, "1-a")
    w = sink.writer(1, "1-a", 0, "rows")
    w.write(rows(0, 10))
    w.close()
    sink.publish(1, "1-a")
    wide = {
        **table_spec(tmp_path / "src"),
        "schema_evolution": "add_new_columns",
        "columns": {**COLUMNS, "extra": "VARCHAR"},
    }
    doc = {"pipeline": "p", "tables": {"events": wide}}
    spec = pipeline({"events": wide})
    table = spec.tables[0]
    widened = context(spec, table, table.connectors[0], str(tmp_path / "wh")).sink()
    assert isinstance(widened, DeltaSink)
    data = rows(100, 10).append_column("extra", pa.array([f"x{i}" for i in range(10)]))
    widened.prepare(2, "1-a")
    w = widened.writer(2, "1-a", 0, "rows")
    w.write(data)
    w.close()
    marks = tmp_path / "fp"
    marks.mkdir()
    point = "delta_rows_listed"
    env = {
        **os.environ,
        "AIRFLOW_CONNECTORS_FAILPOINT_DIR": str(marks),
        "AIRFLOW_CONNECTORS_FAILPOINTS": f"{point}:pause",
    }
    rerun = subprocess.Popen(
        [sys.executable, "-c", PUBLISH, json.dumps(doc), str(tmp_path / "wh"), "2", "1-a"],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(marks / point, rerun)
        widened.publish(2, "1-a")  # writes the rows anew, drops the staged files
        assert widened.merged
        assert not (Path(widened.location()) / "batch-0000000002").exists()
        (marks / f"{point}.resume").touch()
        out, _ = rerun.communicate(timeout=120)
    finally:
        if rerun.poll() is None:
            kill(rerun)
    assert rerun.returncode == 0, out.decode()[-2000:]
    got = read_delta(widened.location())
    assert sorted(got.column("id").to_pylist()) == [*range(10), *range(100, 110)]
    assert delta(widened.location()).transaction_version("p.events.files") == 2


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


# --- the sink conformance kit, on a local folder and on S3 ----------------------------


class TestDeltaSink(SinkConformance):
    """Crashes at every fail point (``delta_committed``: after the Delta commit, before
    the state store records the batch published), concurrent publishers, a polling
    reader, an added column: each batch is one Delta commit recorded as the connector's
    app transaction, and no file outside the log is left."""

    sink_name = "delta"
    sink_fail_points = ("delta_committed",)
    whole_at = ("delta_committed",)
    execution = "spark_connect"  # TestParquetSink runs the kit's spark-submit path

    def check_landed(self, case: SinkCase) -> None:
        sink = case.sink()
        assert isinstance(sink, DeltaSink)
        ids = case.committed()
        for kind in ("rows", "errors"):
            uri = sink.location(kind)
            try:
                dt = delta(uri)
            except TableNotFoundError:
                continue  # no batch had dead letters
            # Every commit is a committed batch's, marked <app id>#<batch>#<attempt>, and
            # one commit per batch: publishers of one batch at once do not both commit
            # (delta-rs's own retry is off; the loser looks again and finds the batch).
            marks = [str(c.get(BATCH_KEY, "")).split("#") for c in dt.history()]
            batches = [int(m[1]) for m in marks if len(m) == 3 and m[0] == sink.app_id]
            assert len(batches) == len(marks), f"{case.name} {kind}: unmarked commits"
            assert len(set(batches)) == len(batches), f"{case.name} {kind}: {batches}"
            assert set(batches) <= set(ids), f"{case.name} {kind}: {batches} not in {ids}"
            assert dt.transaction_version(sink.app_id) == max(batches), case.name
            paths = pa.table(dt.get_add_actions()).column("path").to_pylist()
            assert len(set(paths)) == len(paths), f"{case.name} {kind}: a file listed twice"
            if not uri.startswith("s3://"):
                assert unlisted_files(uri) == [], case.name


class TestDeltaSinkOnS3(S3Warehouse, TestDeltaSink):
    """The same with the warehouse on the moto S3 server."""


@pytest.fixture
def s3_env(s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """This process reaches the S3 test server through AWS_*."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    yield s3_server


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


class TestDeltaSinkChanges(ChangesConformance):
    """A keyed table's batch killed at every fail point (``delta_keys_committed``: the
    key states committed, the table's MERGE not yet) and published by racing retries:
    the exact table."""

    sink_name = "delta"
    changes_fail_points = ("delta_keys_committed", "delta_committed")
    execution = "spark_connect"
