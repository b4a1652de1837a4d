"""The ingest job as its own process, killed at a named fail point.

A crash test starts ``python -m airflow_connectors.engine.job`` (what spark-submit runs)
in a session of its own, waits until the job reaches a fail point of
:mod:`airflow_connectors.failpoints` (``hang_at`` makes the job stop there), and
SIGKILLs the whole process group: driver, JVM and Spark's Python workers. The next run
of the same batches must leave the table as if nothing had happened.

Used by the transport conformance kit (:mod:`.conformance`) and the engine's crash matrix
(``tests/engine/test_exactly_once.py``). Imports pytest: for tests only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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
