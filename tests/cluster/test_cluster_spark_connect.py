"""A Spark Connect server on a Spark standalone cluster (a master and two workers x 1
core on 127.0.0.1), its executors running a Python whose import path lacks this
repository: batches run as its clients (``execution: spark_connect``), the package
reaching the executors only as an artifact of the client's session.

- a batch of several files runs its tasks on both workers through the server and lands
  every row once;
- a worker SIGKILLed while its executor runs a task of a batch (the client a process of
  its own, as the ingest task): Spark runs the task again on the other worker, the batch
  commits, the table is exact.

Own cluster and server (module scope), independent of the Airflow deployment of the
other cluster tests; the server is the standalone application holding both workers.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_connectors.engine.batch import run_batch
from airflow_connectors.engine.connect import forget_session
from airflow_connectors.testing import jobs
from airflow_connectors.testing.conformance import assert_same_records
from airflow_connectors.testing.jobs import start_connect_job
from airflow_connectors.testing.sink_kit import (
    CONNECTOR,
    PIPELINE,
    TABLE,
    SinkCase,
    connect_client,
)
from airflow_connectors.testing.spark_standalone import SparkStandalone

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

FILES = 4
ROWS = 20_000  # per file: a task takes a moment, so both executors get tasks
#: Tasks wait until both executors registered. (Not ``spark.log.level: WARN``: the
#: server harness waits for the server's INFO line that it started.)
BOTH_EXECUTORS = {
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
}


@dataclass
class ConnectCluster:
    spark: Any
    server: Any
    root: Path
    source: Path
    rows: pa.Table

    def worker_of(self, executor_dir: str) -> int | None:
        for i in range(self.spark.workers):
            if Path(executor_dir).is_relative_to(self.spark.worker_dir(i)):
                return i
        return None

    def task_attempts(self, index: int) -> list[str]:
        """Task attempts worker ``index``'s executors started, from their logs."""
        found = []
        for log in self.spark.worker_dir(index).glob("app-*/*/stderr"):
            found += re.findall(
                r"Running task (\d+\.\d+) in stage", log.read_text(errors="replace")
            )
        return found


@pytest.fixture(scope="module")
def connect_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectCluster]:
    from airflow_connectors.testing.spark_connect import SparkConnectServer

    root = tmp_path_factory.mktemp("connect-cluster")
    source = root / "source"
    source.mkdir()
    rows: list[dict[str, Any]] = []
    for f in range(FILES):
        part = [
            {"id": i, "name": f"name-{i}-{'x' * (i % 23)}"} for i in range(f * ROWS, (f + 1) * ROWS)
        ]
        (source / f"part-{f:03d}.json").write_text("".join(json.dumps(r) + "\n" for r in part))
        rows += part
    table = pa.Table.from_pylist(
        rows, schema=pa.schema([("id", pa.int64()), ("name", pa.string())])
    )
    with pytest.MonkeyPatch.context() as mp, contextlib.ExitStack() as stack:
        # The package zip is built under $AIRFLOW_HOME/connectors/dist: this test's own.
        mp.setenv("AIRFLOW_HOME", str(root / "airflow"))
        spark = stack.enter_context(
            SparkStandalone(root / "spark", workers=2, cores=1, worker_timeout=60)
        )
        server = stack.enter_context(
            SparkConnectServer(
                root / "server",
                master=spark.master_url,
                conf=BOTH_EXECUTORS,
                executor_python=spark.executor_python,
            )
        )
        # This process's client session goes before the server does.
        stack.callback(forget_session, server.url)
        yield ConnectCluster(spark, server, root, source, table)


def plan_case(cluster: ConnectCluster, name: str) -> SinkCase:
    """A file_input connector over the source folder, one Spark task per file, its batch
    planned in a SQLite store of its own."""
    from airflow_connectors.catalog import parse_pipeline

    folder = cluster.root / name
    folder.mkdir()
    doc = {
        "pipeline": PIPELINE,
        "tables": {
            TABLE: {
                "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR"},
                "sink": {"name": "parquet", "config": {}},
                "connectors": [
                    {
                        "name": CONNECTOR,
                        "max_partition_bytes": 1,  # one Spark task per file
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(cluster.source), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        },
    }
    case = SinkCase(
        name=name,
        root=folder,
        spec=parse_pipeline(doc),
        warehouse=str(folder / "warehouse"),
        store_url=f"sqlite:///{folder / 'state.db'}",
    )
    assert len(case.plan()) == 1, case.files
    assert len(case.files[case.batch_ids[0]]) == FILES
    return case


def executors_of(case: SinkCase) -> list[dict[str, Any]]:
    with case.store() as store:
        return store.load_batch(case.batch_ids[0]).executors or []


def assert_exact(cluster: ConnectCluster, case: SinkCase) -> None:
    assert_same_records(case.read(), cluster.rows, "id", f"the table of {case.name}")
    assert case.committed() == case.batch_ids
    staged = [p for p in Path(case.warehouse).rglob("*") if p.is_file() and "_staging" in p.parts]
    assert staged == [], staged


def test_a_batch_through_spark_connect_on_the_cluster(connect_cluster: ConnectCluster) -> None:
    """One batch as a client of the server: its tasks ran on both workers' executors
    (whose Python lacks the repository: the package came as the session's artifact),
    every row once."""
    case = plan_case(connect_cluster, "once")
    with case.store() as store:
        assert run_batch(
            store, case.batch_ids[0], lambda: connect_client(connect_cluster.server.url)
        ).committed
    assert_exact(connect_cluster, case)
    executors = executors_of(case)
    assert {connect_cluster.worker_of(e["dir"]) for e in executors} == {0, 1}, executors
    assert sum(e["items"] for e in executors) == FILES
    assert sum(e["records"] for e in executors) == FILES * ROWS


def test_a_worker_killed_mid_batch_on_spark_connect(connect_cluster: ConnectCluster) -> None:
    """Worker 0 dies while its executor runs a task of a batch on the server: Spark
    runs the task again on worker 1 and the batch commits once; the table is exact."""
    cluster = connect_cluster
    case = plan_case(cluster, "killed")
    before = len(cluster.task_attempts(0))
    proc = start_connect_job(case.batch_ids, case.store_url, case.marks, cluster.server.url)
    try:
        deadline = time.monotonic() + 600
        while len(cluster.task_attempts(0)) <= before:
            assert proc.poll() is None, (proc.stdout.read() if proc.stdout else b"")[-3000:]
            assert time.monotonic() < deadline, "worker 0 never ran a task of the batch"
            time.sleep(0.05)
        cluster.spark.kill_worker(0)
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out.decode(errors="replace")[-3000:]
        retried = [t for t in cluster.task_attempts(1) if not t.endswith(".0")]
        assert retried, "no task ran again on worker 1"
    finally:
        if proc.poll() is None:
            jobs.kill(proc)
        restart_worker(cluster)
    assert_exact(cluster, case)
    executors = executors_of(case)
    assert 1 in {cluster.worker_of(e["dir"]) for e in executors}, executors
    assert sum(e["items"] for e in executors) == FILES


def restart_worker(cluster: ConnectCluster) -> None:
    """Start worker 0 again (the master lists the killed one until it times out)."""
    if cluster.spark.worker_procs[0] is not None:
        return
    before = {w["id"] for w in cluster.spark.state().get("workers", [])}
    cluster.spark.start_worker(0)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        workers = cluster.spark.state().get("workers", [])
        if any(w["id"] not in before and w.get("state") == "ALIVE" for w in workers):
            return
        time.sleep(0.5)
    raise TimeoutError(f"worker 0 did not come back: {cluster.spark.log_tail('worker-0')}")
