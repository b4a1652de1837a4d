"""A Spark standalone cluster on 127.0.0.1 for the cluster tests, ``scripts/cluster.sh``
and the benchmarks: a master and workers started from the installed pyspark
distribution (``spark-class org.apache.spark.deploy.master.Master`` / ``...Worker``),
each worker with its own work directory and process group.

    with SparkStandalone(root) as spark:
        spark.master_url          # spark://127.0.0.1:<port>
        spark.executor_python     # a Python whose import path lacks this repository
        spark.kill_worker(0)      # SIGKILL a worker with its executors

Executors run Python with :func:`executor_python`: this environment's packages, but not
the editable install of this repository, so jobs must ship the package
(``--py-files``) the way they would to a real cluster.

It starts Spark as subprocesses and never imports pyspark.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import site
import subprocess
import sys
import sysconfig
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import httpx

from airflow_connectors.testing.standalone import file_tail, free_port

LOOPBACK = "127.0.0.1"


def spark_home() -> Path:
    """The installed pyspark distribution (``bin/spark-class``, ``jars/``), found without
    importing pyspark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise RuntimeError("pyspark is not installed in this environment; run scripts/bootstrap.sh")
    return Path(spec.origin).parent


def executor_python(root: Path) -> str:
    """A Python for Spark's executors at ``root/executor-python``: a virtual environment
    of this interpreter whose only addition is this environment's site-packages as a
    plain path entry. Path entries added by a ``.pth`` file are not scanned for further
    ``.pth`` files, so the editable install of this repository (a ``.pth`` in
    site-packages) is not active: ``import airflow_connectors`` fails there unless a job
    ships the package, as on a real cluster whose workers never saw the repository."""
    venv = Path(root) / "executor-python"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(venv)],
            check=True,
            capture_output=True,
        )
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    purelib.mkdir(parents=True, exist_ok=True)
    (purelib / "_connectors_deps.pth").write_text("".join(f"{p}\n" for p in site.getsitepackages()))
    return str(python)


def _alive_workers(webui: str) -> int:
    try:
        state = httpx.get(f"{webui}/json/", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return -1
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


class SparkStandalone:
    """A standalone master and ``workers`` workers (``cores`` cores, ``memory`` each) on
    127.0.0.1 under ``root`` (logs, work directories, the executor Python). The master
    declares a worker dead after ``worker_timeout`` seconds without a heartbeat (Spark's
    default, 60 s; workers heartbeat every quarter of it). A worker that is killed is
    noticed at once anyway, when its connection to the master closes, so its tasks move
    to the others within seconds; a shorter timeout only made a loaded machine (load 30
    on 2 cores) drop live workers whose heartbeats were late, and kill their executors."""

    def __init__(
        self,
        root: Path,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "2g",
        port: int | None = None,
        webui_port: int | None = None,
        worker_timeout: int = 60,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = port or free_port()
        self.webui_port = webui_port or free_port()
        self.worker_timeout = worker_timeout
        self.master_url = f"spark://{LOOPBACK}:{self.port}"
        self.webui = f"http://{LOOPBACK}:{self.webui_port}"
        self.home = spark_home()
        self.extra_env = dict(env or {})
        self.master: subprocess.Popen[bytes] | None = None
        self.worker_procs: list[subprocess.Popen[bytes] | None] = [None] * workers
        self._logs: list[IO[bytes]] = []
        self._executor_python: str | None = None

    @property
    def executor_python(self) -> str:
        """The executors' Python (see :func:`executor_python`), made on first use."""
        if self._executor_python is None:
            self._executor_python = executor_python(self.root)
        return self._executor_python

    def worker_dir(self, index: int) -> Path:
        """Worker ``index``'s work directory: executors run in
        ``<it>/<app id>/<executor id>``."""
        return self.root / f"worker-{index}"

    def _env(self) -> dict[str, str]:
        bin_dir = os.path.dirname(sys.executable)
        return {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "SPARK_HOME": str(self.home),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOG_DIR": str(self.root / "logs"),
            # Both daemons read the timeout: the master drops a worker after it, and a
            # worker heartbeats every timeout / 4 (Spark's Worker); set on the master
            # only, workers would beat every 15 s and be dropped every cycle.
            "SPARK_MASTER_OPTS": f"-Dspark.worker.timeout={self.worker_timeout}",
            "SPARK_WORKER_OPTS": f"-Dspark.worker.timeout={self.worker_timeout}",
            "PYSPARK_PYTHON": self.executor_python,
            **self.extra_env,
        }

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        log = open(self.root / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        return subprocess.Popen(
            [str(self.home / "bin" / "spark-class"), *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: kill_worker() takes executors too
        )

    def start(self, timeout: float = 120) -> SparkStandalone:
        """Start the master, then the workers; return once every worker is ALIVE on the
        master. ``TimeoutError`` (with the logs' ends) otherwise."""
        self.root.mkdir(parents=True, exist_ok=True)
        env = self._env()
        self.master = self._spawn(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                LOOPBACK,
                "--port",
                str(self.port),
                "--webui-port",
                str(self.webui_port),
            ],
            env,
        )
        for index in range(self.workers):
            self.start_worker(index)
        self.wait_workers(self.workers, timeout)
        return self

    def start_worker(self, index: int) -> None:
        """Start worker ``index`` (again, after :meth:`kill_worker`)."""
        work = self.worker_dir(index)
        work.mkdir(parents=True, exist_ok=True)
        env = {**self._env(), "SPARK_WORKER_DIR": str(work)}
        self.worker_procs[index] = self._spawn(
            f"worker-{index}",
            [
                "org.apache.spark.deploy.worker.Worker",
                self.master_url,
                "--host",
                LOOPBACK,
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--work-dir",
                str(work),
                "--webui-port",
                str(free_port()),
            ],
            env,
        )

    def alive_workers(self) -> int:
        """How many workers the master lists ALIVE (-1 while it does not answer)."""
        return _alive_workers(self.webui)

    def wait_workers(self, count: int, timeout: float = 120) -> None:
        """Wait until the master lists exactly ``count`` ALIVE workers."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.master is not None and self.master.poll() is not None:
                raise RuntimeError(f"the Spark master exited:\n{self.log_tail('master')}")
            if self.alive_workers() == count:
                return
            time.sleep(0.5)
        raise TimeoutError(
            f"the Spark master at {self.master_url} did not list {count} ALIVE workers in "
            f"{timeout:.0f} s; master log:\n{self.log_tail('master')}"
        )

    def state(self) -> dict[str, Any]:
        """The master's JSON state (workers, applications), or ``{}`` when it is down."""
        try:
            return dict(httpx.get(f"{self.webui}/json/", timeout=5).json())
        except (httpx.HTTPError, ValueError):
            return {}

    def log_tail(self, name: str, lines: int = 20) -> str:
        """The end of the log of ``master`` or ``worker-N``."""
        return file_tail(self.root / "logs" / f"{name}.log", lines)

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` with its executors and their Python workers (its
        process group), as a machine that dies takes them all."""
        proc = self.worker_procs[index]
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self.worker_procs[index] = None

    def stop(self) -> None:
        """Stop the workers, then the master; idempotent."""
        procs = [p for p in (*self.worker_procs, self.master) if p is not None]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self.worker_procs = [None] * self.workers
        self.master = None
        for log in self._logs:
            log.close()
        self._logs = []

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
