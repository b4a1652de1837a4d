"""The ingest job as its own process, killed at a named fail point.

A crash test starts ``python -m airflow_connectors.engine.job`` (what spark-submit runs)
in a session of its own, waits until the job reaches a fail point of
:mod:`airflow_connectors.failpoints` (``hang_at`` makes the job stop there), and
SIGKILLs the whole process group: driver, JVM and Spark's Python workers. The next run
of the same batches must leave the table as if nothing had happened.

On Spark Connect (``execution: spark_connect``) the job is a client process
(:func:`start_connect_job`): the batches' plans, fail points and commits run in it,
their Spark tasks on the server.

Used by the transport conformance kit (:mod:`.conformance`), the sink kits and the
engine's crash matrix (``tests/engine/test_exactly_once.py``). Imports pytest: for tests
only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest


def start_job(
    batch_ids: list[int],
    store_url: str,
    failpoint_dir: Path,
    hang_at: str = "",
    *,
    spark_master: str = "local[2]",
) -> subprocess.Popen[bytes]:
    """Start the ingest job of ``batch_ids``; with ``hang_at`` (a fail point name) it
    stops at that point until killed. Every fail point it passes leaves a marker file
    named after the point in ``failpoint_dir``."""
    env = {
        **os.environ,
        "AIRFLOW_CONNECTORS_FAILPOINT_DIR": str(failpoint_dir),
        "AIRFLOW_CONNECTORS_FAILPOINTS": hang_at,
        "PYSPARK_PYTHON": sys.executable,
    }
    args = [sys.executable, "-m", "airflow_connectors.engine.job"]
    for b in batch_ids:
        args += ["--batch-id", str(b)]
    args += ["--state-store-url", store_url, "--spark-master", spark_master]
    # A session of its own, so the kill reaches the JVM and the Python workers too.
    return subprocess.Popen(
        args, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


#: The ingest job as a Spark Connect client (``execution: spark_connect``): this process
#: runs the batches' plans, fail points and commits; their Spark tasks run on the server
#: at ``url``. Arguments: ``url store_url log_level batch_id...``.
CONNECT_CLIENT = """
import logging, sys
from airflow_connectors.engine.batch import BatchFailed, run_batch
from airflow_connectors.engine.connect import SparkConnectError, close_sessions, connect_session
from airflow_connectors.settings import Settings
from airflow_connectors.sinks.base import SinkUnwritable
from airflow_connectors.state.store import StateStore
url, store_url, level, *ids = sys.argv[1:]
logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
settings = Settings.load(state_store_url=store_url)
store = StateStore(store_url)
try:
    for b in ids:
        run_batch(store, int(b), lambda: connect_session(url, settings, data_sources=False))
except (BatchFailed, SinkUnwritable, SparkConnectError) as e:
    print(f"ingest failed: {e}", file=sys.stderr)
    sys.exit(1)
finally:
    # As the ingest operator does: without it, pyspark's exit hooks call a server
    # that is gone with the full retry policy (about 15 s each).
    close_sessions()
"""


def start_connect_job(
    batch_ids: list[int],
    store_url: str,
    failpoint_dir: Path,
    url: str,
    hang_at: str = "",
    *,
    log_level: str = "INFO",
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """:func:`start_job` on Spark Connect: the ingest job of ``batch_ids`` as a
    client of the server at ``url`` (a session of its own, stopping at ``hang_at``)."""
    environ = {
        **os.environ,
        **(env or {}),
        "AIRFLOW_CONNECTORS_FAILPOINT_DIR": str(failpoint_dir),
        "AIRFLOW_CONNECTORS_FAILPOINTS": hang_at,
    }
    args = [sys.executable, "-c", CONNECT_CLIENT, url, store_url, log_level]
    args += [str(b) for b in batch_ids]
    return subprocess.Popen(
        args, env=environ, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def finish_on_spark_connect(
    batch_ids: list[int], store_url: str, failpoint_dir: Path, url: str
) -> None:
    """Run the job of ``batch_ids`` to its end as a client of the Spark Connect server at
    ``url`` (``execution: spark_connect``); fail the test when it fails."""
    proc = start_connect_job(batch_ids, store_url, failpoint_dir, url)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out.decode()[-3000:]


def wait_for(marker: Path, proc: subprocess.Popen[bytes], timeout: float = 240) -> None:
    """Wait until the job passed the fail point whose marker is ``marker``."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            pytest.fail(f"job exited ({proc.returncode}) before {marker.name}:\n{out[-3000:]}")
        if time.monotonic() > deadline:
            kill(proc)
            pytest.fail(f"job did not reach {marker.name} in {timeout} s")
        time.sleep(0.05)


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the job's process group and wait until every process of it is gone."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until the JVM and workers are gone too
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail("processes of the killed job survived SIGKILL")


def finish(
    batch_ids: list[int], store_url: str, failpoint_dir: Path, *, spark_master: str = "local[2]"
) -> None:
    """Run the job of ``batch_ids`` to its end; fail the test when it fails."""
    proc = start_job(batch_ids, store_url, failpoint_dir, spark_master=spark_master)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out.decode()[-3000:]
