"""Faults on the scale-out deployment (``conftest.cluster``): a Spark worker SIGKILLed in
the middle of a batch, a Celery worker SIGKILLed while it runs an ingest task, the
scheduler restarted mid-run. Each test ends with every source row in the table exactly
once, the batch committed once in the state store, and the cluster whole again for the
next test.

A batch is held in flight deterministically, not by racing the clock: the connectors
read their objects through a :class:`FaultProxy` in front of the cluster's S3 server
that delays every GET of an object by a few seconds, so a Spark task that started
reading is still running when the test sees it (its Python worker's connection to the
proxy) and kills something.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psutil
import pytest
from conftest import CELERY_WORKERS, SPARK_WORKERS, Deployment, lines

from airflow_connectors.testing.faultproxy import Fault, FaultProxy

pytestmark = pytest.mark.cluster  # and what `deployment` needs (tests/conftest.py)

T = TypeVar("T")

PIPELINE = "faults"
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR"}
JSON = {"name": "json", "config": {"update_format": "raw"}}
#: Seconds the proxy holds each GET of a source object before forwarding it.
GET_DELAY = 8.0
#: Objects x rows of each test's source.
SPARK_OBJECTS, CELERY_OBJECTS, SCHEDULER_OBJECTS = 4, 2, 2
ROWS = 500
SPARK_KILL = f"{PIPELINE}.spark_kill.objects"
CELERY_KILL = f"{PIPELINE}.celery_kill.objects"
SCHEDULER_RESTART = f"{PIPELINE}.scheduler_restart.objects"


def prefix(dag_id: str) -> str:
    """The source prefix of a test's connector (``faults/<table>/``)."""
    return f"{PIPELINE}/{dag_id.split('.')[1]}/"


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 300) -> T:
    """Poll ``probe`` until it returns something (not None); fail naming ``what``. On a
    loaded 2-core machine a run takes over two minutes from trigger to its first Spark
    task."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class Faults:
    """The deployment, the delaying proxy the connectors read through, and probes of
    the processes that run a batch."""

    def __init__(self, deployment: Deployment, proxy: FaultProxy) -> None:
        self.d = deployment
        self.api = deployment.api
        self.cluster = deployment.cluster
        self.proxy = proxy

    def table(self, dag_id: str) -> list[int]:
        return self.d.ids(PIPELINE, dag_id.split(".")[1])

    def source_gets(self, dag_id: str) -> int:
        """GETs of the connector's objects the proxy has seen (each one is held
        :data:`GET_DELAY` seconds)."""
        path = f"/{self.d.bucket}/{prefix(dag_id)}"
        return sum(1 for method, p in list(self.proxy.requests) if method == "GET" and path in p)

    def spark_reader(self) -> int | None:
        """The Spark worker one of whose executors' Python workers has a connection to
        the proxy open, i.e. is reading a source object (None: none is)."""
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(proc.info["cmdline"] or ())
            if "pyspark" not in cmdline:
                continue
            try:
                connected = any(
                    c.raddr and c.raddr.port == self.proxy.port and c.status == "ESTABLISHED"
                    for c in proc.net_connections(kind="tcp")
                )
                worker = self.d.worker_of(proc.cwd()) if connected else None
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if worker is not None:
                return worker
        return None

    def celery_worker_of(self, ti: dict[str, Any]) -> int:
        """The index of the Celery worker that runs (ran) a try: by its hostname."""
        names = {self.cluster.airflow_hostname(i): i for i in range(CELERY_WORKERS)}
        assert ti["hostname"] in names, (ti, names)
        return names[ti["hostname"]]

    def spark_submit_under(self, celery_worker: int) -> bool:
        """Whether Celery worker ``celery_worker``'s process tree runs an ingest job
        (``spark-submit`` of ``ingest_batch.py``)."""
        pid = self.cluster.celery_worker_pids()[celery_worker]
        try:
            tree = psutil.Process(pid).children(recursive=True) if pid else []
            return any("ingest_batch.py" in " ".join(p.cmdline()) for p in tree)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False

    def ingest_ti(self, dag_id: str, run_id: str) -> dict[str, Any]:
        [ti] = [t for t in self.api.task_instances(dag_id, run_id) if t["task_id"] == "ingest"]
        return dict(ti)

    def running_ingest(self, dag_id: str, run_id: str) -> dict[str, Any] | None:
        """The run's ingest task instance once it is running and its batch's Spark tasks
        are reading (a source GET reached the proxy); None before."""
        tis = [t for t in self.api.task_instances(dag_id, run_id) if t["task_id"] == "ingest"]
        if len(tis) == 1 and tis[0]["state"] == "running" and self.source_gets(dag_id) > 0:
            return dict(tis[0])
        return None

    def tries(self, dag_id: str, run_id: str, ti: dict[str, Any]) -> list[dict[str, Any]]:
        """Every try of a task instance (REST ``.../tries``), oldest first."""
        path = (
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{ti['task_id']}/"
            f"{ti['map_index']}/tries"
        )
        body = self.api.client.get(path).raise_for_status().json()
        return sorted(body["task_instances"], key=lambda t: t["try_number"])

    def log(self, dag_id: str, run_id: str, ti: dict[str, Any], try_number: int) -> str:
        """The text of one try's task log."""
        path = (
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{ti['task_id']}/logs/"
            f"{try_number}"
        )
        resp = self.api.client.get(
            path,
            params={"map_index": ti["map_index"], "full_content": True},
            headers={"Accept": "application/json"},
        ).raise_for_status()
        content = resp.json()["content"]
        return "\n".join(str(c.get("event", c)) if isinstance(c, dict) else str(c) for c in content)

    def check_exactly_once(self, dag_id: str, objects: int) -> Any:
        """The connector's one batch is committed and published once with every row,
        its counters count every row once, and the table holds each id once."""
        expected = list(range(objects * ROWS))
        [batch] = self.d.batches(dag_id)
        assert (batch.status.value, batch.published, batch.records) == (
            "committed",
            True,
            len(expected),
        ), batch
        state = self.d.store.status(batch.ref)
        assert state is not None and state.total_records == len(expected), state
        assert self.table(dag_id) == expected
        return batch


@pytest.fixture(scope="module")
def faults(deployment: Deployment) -> Iterator[Faults]:
    d = deployment
    tables = {}
    for dag_id, objects in (
        (SPARK_KILL, SPARK_OBJECTS),
        (CELERY_KILL, CELERY_OBJECTS),
        (SCHEDULER_RESTART, SCHEDULER_OBJECTS),
    ):
        for n in range(objects):
            d.put(f"{prefix(dag_id)}part-{n:03d}.json", lines(range(n * ROWS, (n + 1) * ROWS)))
    with FaultProxy(d.cluster.s3.endpoint_url) as proxy:
        # Every GET of an object (not the listings: their path is the bucket's) waits.
        proxy.add(Fault.delay(GET_DELAY), method="GET", path=f"/{d.bucket}/{PIPELINE}/", times=None)
        for dag_id in (SPARK_KILL, CELERY_KILL, SCHEDULER_RESTART):
            connector: dict[str, Any] = {
                "name": "objects",
                "transport": d.s3_input(prefix(dag_id), endpoint_url=proxy.endpoint_url),
                "format": JSON,
            }
            if dag_id == SPARK_KILL:
                # One Spark task per object: both executors have tasks in flight.
                connector.update(max_partition_bytes=1, open_cost_bytes=0)
            tables[dag_id.split(".")[1]] = {"columns": COLUMNS, "connectors": [connector]}
        d.add(PIPELINE, tables)
        yield Faults(d, proxy)


def test_sigkill_of_a_spark_worker_mid_batch(faults: Faults) -> None:
    """A Spark worker dies (SIGKILL of its process group: the worker and its executor
    with the Python workers) while one of its executor's tasks is reading an object.
    The driver loses the executor and Spark runs the lost task again on the other
    worker, within the same batch attempt: the ingest task's first try succeeds and
    the table is exact."""
    spark, api = faults.cluster.spark, faults.api
    run_id = api.trigger(SPARK_KILL)
    victim = wait_for("a Spark task reading a source object", faults.spark_reader)
    try:
        spark.kill_worker(victim)
        run = api.wait_run(SPARK_KILL, run_id, timeout=300)
        assert run["state"] == "success", faults.d.states(SPARK_KILL, run_id)
        ti = faults.ingest_ti(SPARK_KILL, run_id)
        assert (ti["state"], ti["try_number"]) == ("success", 1), ti
        log = faults.log(SPARK_KILL, run_id, ti, 1)
        assert "Lost executor" in log or "ExecutorLostFailure" in log, log[-3000:]
        batch = faults.check_exactly_once(SPARK_KILL, SPARK_OBJECTS)
        assert batch.attempt.startswith("1-"), batch  # Spark's retry, not Airflow's
        # The surviving worker's executor wrote what the dead one did not.
        survivors = {faults.d.worker_of(e["dir"]) for e in batch.executors}
        assert survivors and victim not in survivors, batch.executors
    finally:
        spark.start_worker(victim)
        spark.wait_workers(SPARK_WORKERS)


def test_sigkill_of_a_celery_worker_running_an_ingest_task(faults: Faults) -> None:
    """The Celery worker running an ingest task dies while the batch's Spark tasks
    read: SIGKILL of the worker's process group and of every process it started (Airflow
    3 runs each task in a process group of its own, so the task and its spark-submit
    driver would outlive a kill of the worker's group alone; a machine that dies takes
    them all). No try reports back: the scheduler fails the task instance once
    its heartbeat times out and the retry runs on the other Celery worker. The killed
    attempt never committed; the retry commits the batch once.

    Observed with Airflow 3.3 and Celery on Redis (``task_acks_late`` true, visibility
    timeout a day): Celery does not redeliver the killed worker's message; the
    scheduler logs "Detected a task instance without a heartbeat" about
    ``task_instance_heartbeat_timeout`` (40 s in the harness) after the kill, marks
    the try failed and UP_FOR_RETRY, and try 2 runs as a new Celery task."""
    api, cluster = faults.api, faults.cluster
    run_id = api.trigger(CELERY_KILL)
    ti = wait_for(
        "the ingest task running and reading",
        lambda: faults.running_ingest(CELERY_KILL, run_id),
    )
    victim = faults.celery_worker_of(ti)
    assert faults.spark_submit_under(victim), f"no ingest job under Celery worker {victim}"
    try:
        cluster.kill_celery_worker(victim)
        run = api.wait_run(CELERY_KILL, run_id, timeout=400)
        assert run["state"] == "success", faults.d.states(CELERY_KILL, run_id)
        tries = faults.tries(CELERY_KILL, run_id, ti)
        first, last = tries[0], tries[-1]
        assert first["hostname"] == ti["hostname"] and first["state"] == "failed", tries
        assert last["state"] == "success" and last["try_number"] >= 2, tries
        assert last["hostname"] != first["hostname"], tries
        batch = faults.check_exactly_once(CELERY_KILL, CELERY_OBJECTS)
        # The killed try started attempt 1 of the batch; a later attempt committed.
        assert int(batch.attempt.split("-")[0]) >= 2, batch
    finally:
        cluster.start_celery_worker(victim)


def test_scheduler_restart_mid_run(faults: Faults) -> None:
    """The scheduler is SIGKILLed and started again while an ingest task runs on a
    Celery worker: the task goes on (it heartbeats to the API server, not the
    scheduler), the new scheduler adopts the running task instance (the CeleryExecutor
    adopts by its Celery task id) instead of resetting it, and finishes the run; the
    ingest task ran in one try and the batch committed once."""
    api, cluster = faults.api, faults.cluster
    run_id = api.trigger(SCHEDULER_RESTART)
    wait_for(
        "the ingest task running and reading",
        lambda: faults.running_ingest(SCHEDULER_RESTART, run_id),
    )
    cluster.restart_scheduler()
    run = api.wait_run(SCHEDULER_RESTART, run_id, timeout=300)
    assert run["state"] == "success", faults.d.states(SCHEDULER_RESTART, run_id)
    # The running try was adopted, not reset: it finished and nothing ran it again.
    ti = faults.ingest_ti(SCHEDULER_RESTART, run_id)
    assert (ti["state"], ti["try_number"]) == ("success", 1), ti
    batch = faults.check_exactly_once(SCHEDULER_RESTART, SCHEDULER_OBJECTS)
    assert batch.attempt.startswith("1-"), batch
