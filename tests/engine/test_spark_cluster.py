"""The ingest job on a real Spark standalone cluster (a master and two workers x 1 core on
127.0.0.1, :class:`~airflow_connectors.testing.spark_standalone.SparkStandalone`), as
the ingest task spark-submits it: client deploy mode, the package shipped to the
executors as ``--py-files`` (:mod:`airflow_connectors.engine.package`), and the executors
running a Python whose import path lacks this repository.

- the executors import the package from the shipped zip, never from the repository;
- a multi-file batch runs on both workers, lands every row once, and records which
  executors ran it (``Batch.executors``);
- without shipping (``ship_package: never``) the batch fails in one line that says to
  ship or install the package, stays planned, and commits once when shipped.

A worker SIGKILLed while its executor runs a task of the batch is
tests/cluster/test_cluster_faults.py's (the same kill, under Airflow with Celery).

Each ``spark-submit`` starts a standalone application (~15-20 s on a 2-core machine).
Run alone: ``pytest tests/engine/test_spark_cluster.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import checksum, pipeline, read_table

from airflow_connectors.engine.discovery import context, discover
from airflow_connectors.engine.package import package_root, submit_options
from airflow_connectors.settings import Settings
from airflow_connectors.state.store import BatchStatus, ConnectorRef, StateStore
from airflow_connectors.testing.spark_standalone import SparkStandalone

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

FILES = 8
ROWS = 20_000  # per file: a task takes a moment, so both executors get tasks
REPO = package_root().parent
APPLICATION = package_root() / "engine" / "submit" / "ingest_batch.py"
#: Tasks are scheduled once both executors registered (Spark's default for standalone
#: is to start as soon as one has), so every batch can use both workers.
BOTH_EXECUTORS = {
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
    "spark.ui.enabled": "false",
    "spark.log.level": "WARN",
}


@dataclass
class Cluster:
    spark: SparkStandalone
    root: Path
    source: Path
    rows: pa.Table

    def worker_of(self, executor_dir: str) -> int | None:
        for i in range(self.spark.workers):
            if Path(executor_dir).is_relative_to(self.spark.worker_dir(i)):
                return i
        return None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("cluster")
    source = root / "source"
    source.mkdir()
    ids: list[int] = []
    names: list[str] = []
    for f in range(FILES):
        lines = []
        for i in range(f * ROWS, (f + 1) * ROWS):
            ids.append(i)
            names.append(f"name-{i}-{'x' * (i % 23)}")
            lines.append(json.dumps({"id": i, "name": names[-1]}))
        (source / f"part-{f:03d}.json").write_text("\n".join(lines) + "\n")
    rows = pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array(names, pa.string())})
    with pytest.MonkeyPatch.context() as mp:
        # The package zip is built under $AIRFLOW_HOME/connectors/dist: this test's own.
        mp.setenv("AIRFLOW_HOME", str(root / "airflow"))
        # A worker is declared dead after 60 s without heartbeats (the harness's 10 s
        # drops workers of a loaded machine); a killed executor is noticed by the driver
        # at once (its connection closes), not through the master.
        with SparkStandalone(root / "spark", workers=2, cores=1, worker_timeout=60) as spark:
            yield Cluster(spark, root, source, rows)


@dataclass
class Case:
    store_url: str
    warehouse: str
    ref: ConnectorRef
    batch_id: int

    def store(self) -> StateStore:
        return StateStore(self.store_url)


def plan_case(cluster: Cluster, name: str) -> Case:
    """A file_input connector over the source folder, one Spark task per file, its batch
    planned (as the discover task plans it) in a SQLite store of its own."""
    folder = cluster.root / name
    folder.mkdir()
    spec = pipeline(
        {
            "events": {
                "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR"},
                "connectors": [
                    {
                        "name": "files",
                        "tasks_max": 1,
                        "max_partition_bytes": 1,  # one Spark task per file
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(cluster.source), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        }
    )
    table = spec.tables[0]
    ctx = context(spec, table, table.connectors[0], str(folder / "warehouse"))
    url = f"sqlite:///{folder / 'state.db'}"
    store = StateStore(url)
    try:
        found = discover(store, ctx)
    finally:
        store.close()
    assert found.new_items == FILES and len(found.batch_ids) == 1
    return Case(url, ctx.warehouse, ctx.ref, found.batch_ids[0])


def submit_command(
    cluster: Cluster, application: Path, args: list[str], *, ship: str = "auto"
) -> tuple[list[str], dict[str, str]]:
    """The spark-submit the ingest task runs on the cluster: ``--py-files`` and
    ``--conf`` from :func:`submit_options` (as the ingest operator gets them)."""
    settings = Settings(
        state_store_url="",
        warehouse=str(cluster.root),
        spark_master=cluster.spark.master_url,
        executor_python=cluster.spark.executor_python,
        ship_package=ship,
    )
    opts = submit_options(settings, cluster.spark.master_url, sys.executable)
    assert opts.conf["spark.pyspark.python"] == cluster.spark.executor_python
    cmd = ["spark-submit", "--master", cluster.spark.master_url, "--name", "test-ingest"]
    if opts.py_files:
        cmd += ["--py-files", opts.py_files]
    for key, value in {**BOTH_EXECUTORS, **opts.conf}.items():
        cmd += ["--conf", f"{key}={value}"]
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env.pop("PYSPARK_PYTHON", None)  # the executors' Python comes from the --conf only
    return [*cmd, str(application), *args], env


def start_ingest(
    cluster: Cluster, case: Case, log: Path, *, ship: str = "auto"
) -> subprocess.Popen[bytes]:
    cmd, env = submit_command(cluster, APPLICATION, ["--batch-id", str(case.batch_id)], ship=ship)
    env["AIRFLOW__CONNECTORS__STATE_STORE_URL"] = case.store_url  # as the ingest task does
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def ingest(cluster: Cluster, case: Case, *, ship: str = "auto") -> tuple[int, str, float]:
    log = cluster.root / f"ingest-{case.ref.connector}-{time.monotonic_ns()}.log"
    t0 = time.monotonic()
    proc = start_ingest(cluster, case, log, ship=ship)
    try:
        code = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    return code, log.read_text(errors="replace"), time.monotonic() - t0


def assert_exact(cluster: Cluster, case: Case) -> pa.Table:
    """The table is the source exactly once; the batch committed and published."""
    data = read_table(case.warehouse, "p", "events").select(["id", "name"])
    assert data.num_rows == cluster.rows.num_rows
    assert len(set(data.column("id").to_pylist())) == cluster.rows.num_rows  # no duplicates
    assert checksum(data, "id") == checksum(cluster.rows, "id")
    store = case.store()
    try:
        batch = store.load_batch(case.batch_id)
        st = store.status(case.ref)
    finally:
        store.close()
    assert batch.status == BatchStatus.COMMITTED and batch.published
    assert st is not None and st.total_records == cluster.rows.num_rows
    staged = [p for p in Path(case.warehouse).rglob("*") if p.is_file() and "_staging" in p.parts]
    assert staged == [] and list(Path(case.warehouse).rglob("*.tmp")) == []
    return data


PROBE = """
import json, sys
from pyspark.sql import SparkSession

def probe(index, _rows):
    import time
    time.sleep(1)  # both executors take a task
    import airflow_connectors
    from airflow_connectors.engine.reader import executor_identity
    yield json.dumps({"path": sys.path, "python": sys.executable,
                      "package": airflow_connectors.__file__, "executor": executor_identity()})

sc = SparkSession.builder.getOrCreate().sparkContext
for line in sc.parallelize(range(4), 4).mapPartitionsWithIndex(probe).collect():
    print("PROBE " + line)
"""


def test_executors_import_the_package_from_the_shipped_zip(cluster: Cluster) -> None:
    script = cluster.root / "probe.py"
    script.write_text(PROBE)
    cmd, env = submit_command(cluster, script, [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    probes = [json.loads(line[6:]) for line in out.stdout.splitlines() if line.startswith("PROBE ")]
    assert len(probes) == 4
    for p in probes:
        assert p["python"] == cluster.spark.executor_python
        here = Path(p["executor"]["dir"])  # the executor's working directory
        # The repository is not on the executors' import path; the package comes from the
        # zip Spark fetched into the executor's folder.
        entries = [(here / e).resolve() for e in p["path"]]
        assert REPO not in entries and here.is_relative_to(cluster.spark.root), p["path"]
        package = (here / p["package"]).resolve()
        assert package.is_relative_to(here) and ".zip/airflow_connectors/" in str(package)
        assert not package.is_relative_to(REPO)
    assert {cluster.worker_of(p["executor"]["dir"]) for p in probes} == {0, 1}


def test_a_batch_runs_on_both_workers_once(cluster: Cluster) -> None:
    case = plan_case(cluster, "both")
    code, log, seconds = ingest(cluster, case)
    assert code == 0, log[-3000:]
    print(f"batch of {FILES} files on the cluster: {seconds:.1f} s from spark-submit to exit")
    assert_exact(cluster, case)
    store = case.store()
    try:
        executors = store.load_batch(case.batch_id).executors
    finally:
        store.close()
    assert executors, "the batch recorded no executors"
    assert {cluster.worker_of(e["dir"]) for e in executors} == {0, 1}, executors
    for e in executors:
        assert e["id"] == Path(e["dir"]).name and Path(e["dir"]).parent.name.startswith("app-")
        assert e["host"]
    assert sum(e["items"] for e in executors) == FILES
    assert sum(e["records"] for e in executors) == cluster.rows.num_rows


def test_without_shipping_the_batch_fails_in_one_line(cluster: Cluster) -> None:
    case = plan_case(cluster, "never")
    code, log, _ = ingest(cluster, case, ship="never")
    assert code == 1, log[-3000:]
    [line] = [x for x in log.splitlines() if x.startswith("ingest failed:")]
    assert "cannot import airflow_connectors" in line and "ship_package" in line, line
    assert "Traceback" not in line and "py4j" not in line.lower()
    store = case.store()
    try:
        assert store.load_batch(case.batch_id).status == BatchStatus.PLANNED
        st = store.status(case.ref)
        assert st is not None and st.fatal_error and "\n" not in st.fatal_error
        assert st.fatal_error == line.removeprefix("ingest failed: ")
    finally:
        store.close()
    assert read_table(case.warehouse, "p", "events").num_rows == 0
    # Shipped, the same planned batch commits once.
    code, log, _ = ingest(cluster, case)
    assert code == 0, log[-3000:]
    assert_exact(cluster, case)


def test_the_embedded_session_ships_the_package_too(cluster: Cluster) -> None:
    """The ingest job outside spark-submit (``python -m airflow_connectors.engine.job``,
    as the CLI runs batches) on the cluster: its own session adds the package zip, and
    ``executor_python`` comes from the settings."""
    case = plan_case(cluster, "embedded")
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "AIRFLOW__CONNECTORS__EXECUTOR_PYTHON": cluster.spark.executor_python,
        "AIRFLOW__CONNECTORS__SHIP_PACKAGE": "auto",
        "PYSPARK_PYTHON": sys.executable,  # the settings' executor_python wins
    }
    cmd = [sys.executable, "-m", "airflow_connectors.engine.job", "--batch-id", str(case.batch_id)]
    cmd += ["--state-store-url", case.store_url, "--spark-master", cluster.spark.master_url]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert_exact(cluster, case)
    store = case.store()
    try:
        executors = store.load_batch(case.batch_id).executors or []
    finally:
        store.close()
    assert executors and all(cluster.worker_of(e["dir"]) is not None for e in executors)
