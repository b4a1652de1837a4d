"""Spark itself reads the tables the product wrote: a Delta table (delta-rs) read with
delta-spark by path, and an Iceberg table (pyiceberg's SQL catalog, in SQLite and in
PostgreSQL) read with iceberg-spark-runtime through Iceberg's JdbcCatalog on the same
catalog database. The jars come from Maven Central (deploy/maven/spark-*/pom.xml, cached
outside the repository); the reading Spark runs in a subprocess (spark_read_table.py)
whose pyspark pairs with them (airflow_connectors/testing/spark_packages.py says which
and why: no Delta or Iceberg artifact runs on the product's Spark 4.3)."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from helpers import pipeline, run

from airflow_connectors.state.store import ConnectorRef, StateStore
from airflow_connectors.testing import spark_packages
from airflow_connectors.testing.maven import MavenError

pytestmark = pytest.mark.sources

READER = Path(__file__).with_name("spark_read_table.py")
COLUMNS = {
    "id": "BIGINT NOT NULL",
    "name": "VARCHAR",
    "amount": "DECIMAL(12, 2)",
    "ts": "TIMESTAMP",
    "day": "DATE",
    "ok": "BOOLEAN",
}
#: The columns as Spark reads them from either table format (TIMESTAMP has no zone).
SPARK_SCHEMA = [
    ["id", "bigint", False],
    ["name", "string", True],
    ["amount", "decimal(12,2)", True],
    ["ts", "timestamp_ntz", True],
    ["day", "date", True],
    ["ok", "boolean", True],
]
SINK_CONFIG: dict[str, dict[str, Any]] = {"delta": {}, "iceberg": {"target_file_size": 1 << 20}}

Row = list[Any]


def write_source(folder: Path, files: int, rows: int, *, base: int) -> list[Row]:
    """``files`` JSON-lines files of ``rows`` rows each, ids from ``base``, some values
    null; returns the rows as Spark's reader reports them (decimals, dates, timestamps
    as text)."""
    folder.mkdir(parents=True, exist_ok=True)
    start = datetime.datetime(2024, 3, 1, 6, 7, 8)
    expected: list[Row] = []
    for f in range(files):
        lines = []
        for i in range(base + f * rows, base + (f + 1) * rows):
            name = None if i % 7 == 3 else f"name-{i}-{'é' * (i % 5)}"
            amount = None if i % 11 == 5 else Decimal(i * 37 % 100_000) / 100 - 250
            ts = (
                None
                if i % 13 == 4
                else start + datetime.timedelta(seconds=i * 3_607.25, microseconds=i)
            )
            day = (
                None
                if i % 17 == 6
                else datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 400)
            )
            ok = None if i % 5 == 2 else i % 2 == 0
            record = {
                "id": i,
                "name": name,
                "amount": None if amount is None else float(amount),
                "ts": None if ts is None else ts.isoformat(sep=" "),
                "day": None if day is None else day.isoformat(),
                "ok": ok,
            }
            lines.append(json.dumps(record))
            expected.append(
                [
                    i,
                    name,
                    None if amount is None else f"{amount:.2f}",
                    None if ts is None else ts.isoformat(),
                    None if day is None else day.isoformat(),
                    ok,
                ]
            )
        (folder / f"part-{base + f:06d}.json").write_text("\n".join(lines) + "\n")
    return expected


def table_spec(source: Path, sink: str) -> dict[str, Any]:
    return {
        "columns": COLUMNS,
        "sink": {"name": sink, "config": SINK_CONFIG[sink]},
        "connectors": [
            {
                "name": "files",
                "transport": {
                    "name": "file_input",
                    "config": {"path": str(source), "min_file_age": 0},
                },
                "format": {"name": "json", "config": {"update_format": "raw"}},
            }
        ],
    }


def ingest_two_batches(spark: Any, sink: str, store_url: str, root: Path) -> tuple[str, list[Row]]:
    """The product lands two batches (two runs of a file connector) in a table of
    ``sink``; returns the warehouse and the rows ingested."""
    src, wh = root / "src", str(root / "wh")
    spec = pipeline({"events": table_spec(src, sink)})
    expected = write_source(src, files=2, rows=120, base=0)
    first = run(spec, store_url, wh, spark)
    expected += write_source(src, files=2, rows=90, base=10_000)
    second = run(spec, store_url, wh, spark)
    for report in (first, second):
        assert report.connectors["events.files"].batches == 1
    assert [b.batch_id for b in batches(store_url)] == [1, 2]
    return wh, expected


def batches(store_url: str) -> list[Any]:
    store = StateStore(store_url)
    try:
        return list(store.batches(ConnectorRef("p", "events", "files")))
    finally:
        store.close()


Reader = Callable[[dict[str, dict[str, Any]], dict[str, str]], dict[str, Any]]


def reader(*sets: str) -> Reader:
    """A function that reads with Spark (in a subprocess whose pyspark pairs with the
    package sets ``sets``) and returns what it saw; Maven or the pyspark install failing
    fails the test, naming the cause."""
    try:
        started = time.monotonic()
        conf = spark_packages.spark_conf(*sets)
        exe = spark_packages.python(*sets)
        print(f"{sets}: jars and pyspark ready in {time.monotonic() - started:.1f} s")
    except (MavenError, RuntimeError) as e:
        pytest.fail(f"Spark packages {sets} unavailable: {e}")

    def read(reads: dict[str, dict[str, Any]], extra: dict[str, str]) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYTHONPATH")}
        env.update({"PYSPARK_PYTHON": exe, "PYSPARK_DRIVER_PYTHON": exe, "TZ": "UTC"})
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="spark-read-") as folder:
            job, out = Path(folder, "job.json"), Path(folder, "out.json")
            job.write_text(
                json.dumps({"master": "local[1]", "conf": {**conf, **extra}, "reads": reads})
            )
            code, stderr = run_alone([exe, str(READER), str(job), str(out)], env, timeout=600)
            assert code == 0, spark_errors(stderr)
            seen: dict[str, Any] = json.loads(out.read_text())
        print(f"Spark {seen['spark']} read {list(reads)} in {time.monotonic() - started:.1f} s")
        return seen

    return read


def run_alone(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Runs ``cmd`` in a process group of its own; on timeout the whole group (Python and
    its Spark JVM) is killed. Returns the exit code and stderr."""
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        pytest.fail(f"Spark did not finish reading in {timeout:.0f} s: {spark_errors(stderr)}")
    return proc.returncode, stderr


def spark_errors(stderr: str) -> str:
    """The reader's stderr without Java stack frames and Spark's chatter: its errors."""
    lines = [
        line
        for line in stderr.splitlines()
        if line.strip() and not line.lstrip().startswith(("at ", "...")) and " WARN " not in line
    ]
    return "\n".join(lines[-60:])


@pytest.fixture(scope="module")
def delta_reader() -> Reader:
    return reader("spark-delta")


@pytest.fixture(scope="module")
def iceberg_reader() -> Reader:
    return reader("spark-iceberg")


def by_id(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: r[0])


def test_spark_reads_the_delta_table_the_product_wrote(
    spark: Any, delta_reader: Reader, tmp_path: Path
) -> None:
    store_url = f"sqlite:///{tmp_path / 'state.db'}"
    wh, expected = ingest_two_batches(spark, "delta", store_url, tmp_path)
    uri = f"{wh}/p/events"
    seen = delta_reader(
        {
            "rows": {"format": "delta", "load": uri},
            "history": {
                "sql": f"DESCRIBE HISTORY delta.`{uri}`",
                "columns": ["version", "operation"],
            },
        },
        # A few hundred rows: one partition for the log's state, not 50.
        {"spark.databricks.delta.snapshotPartitions": "1"},
    )
    assert seen["spark"] == spark_packages.DELTA_PYSPARK
    rows = seen["reads"]["rows"]
    assert rows["schema"] == SPARK_SCHEMA
    assert len(rows["rows"]) == len(expected) == 420
    assert by_id(rows["rows"]) == by_id(expected)
    # One Delta commit per batch: the first creates the table with its rows. Commits
    # that change only the protocol (ADD FEATURE) add no rows.
    history = sorted(seen["reads"]["history"]["rows"])
    assert [op for _, op in history if op != "ADD FEATURE"] == ["CREATE TABLE", "WRITE"]
    assert history[-1][0] == DeltaTable(uri).version()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_spark_reads_the_iceberg_table_through_the_jdbc_catalog(
    kind: str,
    spark: Any,
    iceberg_reader: Reader,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """The catalog a user configures in Spark: Iceberg's JdbcCatalog on the database the
    sink keeps pyiceberg's SQL catalog in (the state store's), named as the sink's
    ``catalog_name``."""
    store_url = (
        f"sqlite:///{tmp_path / 'state.db'}"
        if kind == "sqlite"
        else str(request.getfixturevalue("pg_schema_factory")())
    )
    wh, expected = ingest_two_batches(spark, "iceberg", store_url, tmp_path)
    name = "airflow_connectors"  # the sink's default catalog_name
    seen = iceberg_reader(
        {
            "rows": {"table": f"{name}.p.events"},
            "snapshots": {
                "sql": f"SELECT operation, summary['airflow-connectors.batch'] "
                f"FROM {name}.p.events.snapshots ORDER BY committed_at"
            },
            "tables": {"sql": f"SHOW TABLES IN {name}.p"},
        },
        spark_packages.iceberg_jdbc_catalog(name, store_url, wh),
    )
    assert seen["spark"] == spark_packages.ICEBERG_PYSPARK
    rows = seen["reads"]["rows"]
    assert rows["schema"] == SPARK_SCHEMA
    assert len(rows["rows"]) == len(expected) == 420
    assert by_id(rows["rows"]) == by_id(expected)
    # One snapshot per batch, each marked with its batch.
    assert seen["reads"]["snapshots"]["rows"] == [["append", "files:1"], ["append", "files:2"]]
    assert sorted(r[1] for r in seen["reads"]["tables"]["rows"]) == ["events"]


@pytest.mark.parametrize("name", sorted(spark_packages.SETS))
def test_package_sets_bring_no_second_copy_of_a_pyspark_jar(name: str) -> None:
    """Each set resolves, and leaves out what the pyspark that runs it already ships."""
    try:
        assert spark_packages.clashes(name) == []
    except (MavenError, RuntimeError) as e:
        pytest.fail(f"Spark packages {name} unavailable: {e}")
