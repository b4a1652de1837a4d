"""Embedded Airflow for the quickstart and the end-to-end tests: ``airflow standalone``
(SQLite metadata DB, LocalExecutor, scheduler, triggerer, dag-processor, API server) on
127.0.0.1, driven through its REST API.

It starts Airflow as a subprocess and never imports it, so it works from any script.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import httpx

TERMINAL = ("success", "failed")

# Connect arguments of the SQLite metadata DB (``[database] sql_alchemy_connect_args``
# names this dict). Python's sqlite3 gives up on a locked database after 5 s; with the
# scheduler, triggerer, dag-processor, API server and task processes all writing to one
# file on a busy machine, a CLI call such as ``airflow backfill create`` can wait longer
# than that and fail with "database is locked". Waiting up to a minute instead is what a
# single-file metadata DB needs; production deployments use PostgreSQL.
SQLITE_CONNECT_ARGS: dict[str, Any] = {"timeout": 60}
_CONNECT_ARGS = f"{__name__}.SQLITE_CONNECT_ARGS"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:``port``: nothing listens there.
    Bound as servers bind (``SO_REUSEADDR``), so connections of a server that just
    stopped (``TIME_WAIT``) do not count."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def processes_of(home: Path) -> list[int]:
    """Processes whose environment has ``AIRFLOW_HOME=home`` (Linux ``/proc``; elsewhere
    none are found). Airflow starts each task in a process group of its own, and a task's
    ``spark-submit`` and JVM inherit its environment, so this finds what signalling the
    standalone's process group misses."""
    return processes_with("AIRFLOW_HOME", str(home))


def processes_with(name: str, value: str) -> list[int]:
    """Processes (but this one) whose environment has ``name=value`` (Linux ``/proc``)."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return [pid for pid in found if pid != os.getpid()]


def terminate(pids: Iterable[int], grace: float = 10) -> None:
    """SIGTERM ``pids``, and SIGKILL those still there after ``grace`` seconds; returns
    once they are gone (or zombies, whose parent reaps them)."""
    left = list(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = [p for p in left if alive(p)]
        if not left:
            return


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    return Path(f"/proc/{pid}").exists() and not _zombie(pid)


def _zombie(pid: int) -> bool:
    fields = proc_stat(pid)
    return bool(fields) and fields[0] == "Z"


def proc_stat(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, pgrp, ...);
    empty when the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def start_time(pid: int | None) -> int | None:
    """When process ``pid`` started (clock ticks since boot): with the PID, it names one
    process, never a later one that reuses the PID (this machine's ``pid_max`` is 32768,
    and a suite reuses PIDs within seconds)."""
    fields = proc_stat(pid) if pid is not None else []
    return int(fields[19]) if len(fields) > 19 else None


def file_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of the log file ``path`` (``(no log)`` when unreadable),
    for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def airflow_cli(
    env: Mapping[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``airflow ARGS`` in this environment's Airflow with ``env``, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "airflow", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class AirflowApi:
    """Airflow's REST API at ``url`` (``http://host:port``) as user ``admin``: the calls
    the end-to-end tests and the quickstart make (trigger, wait for runs, task instances,
    pause, backfills), transient failures retried. :class:`StandaloneAirflow` and
    :class:`~airflow_connectors.testing.cluster.Cluster` share it."""

    def __init__(self, url: str, password: str = "admin") -> None:
        self.url = url
        self.password = password
        self._client: httpx.Client | None = None

    def close(self) -> None:
        """Close the REST client (a later call logs in again)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def health(self) -> dict[str, Any]:
        """``/api/v2/monitor/health`` (no login needed), or ``{}`` while it does not answer."""
        try:
            return dict(httpx.get(f"{self.url}/api/v2/monitor/health", timeout=5).json())
        except (httpx.HTTPError, ValueError):
            return {}

    @property
    def client(self) -> httpx.Client:
        """A REST client logged in as admin, made on first use."""
        if self._client is None:
            self._client = self.client_for("admin", self.password)
        return self._client

    def client_for(self, username: str, password: str) -> httpx.Client:
        """A REST client logged in as ``username``."""
        client = httpx.Client(base_url=self.url, timeout=60)
        token = client.post("/auth/token", json={"username": username, "password": password})
        token.raise_for_status()
        client.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
        return client

    def _json(self, method: str, path: str, *, retry_for: float = 180, **kwargs: Any) -> Any:
        """A REST call; transient trouble (a timeout, a refused connection, a 5xx while
        the API server or the metadata DB is busy on a loaded machine) is retried with
        backoff for up to ``retry_for`` seconds."""
        deadline = time.monotonic() + retry_for
        delay = 1.0
        while True:
            try:
                resp = self.client.request(method, path, **kwargs)
                transient = resp.status_code >= 500
            except (httpx.TimeoutException, httpx.TransportError) as e:
                resp, transient = None, True
                error = f"{type(e).__name__}: {e}"
            if not transient or time.monotonic() + delay > deadline:
                break
            time.sleep(delay)
            delay = min(delay * 2, 15)
        if resp is None:
            raise RuntimeError(f"{method} {path}: no answer from Airflow's API server ({error})")
        if resp.status_code >= 400:
            raise RuntimeError(f"{method} {path}: HTTP {resp.status_code}: {resp.text[:500]}")
        return resp.json()

    def wait_for_dags(self, dag_ids: Iterable[str], timeout: float = 120) -> None:
        """Wait until Airflow parsed every DAG of ``dag_ids``; ``TimeoutError`` lists the
        import errors."""
        wanted = set(dag_ids)
        deadline = time.monotonic() + timeout
        while True:
            have = self.dag_ids()
            if wanted <= have:
                return
            if time.monotonic() > deadline:
                errors = self._json("GET", "/api/v2/importErrors").get("import_errors", [])
                raise TimeoutError(
                    f"DAGs {sorted(wanted - have)} not parsed in {timeout:.0f} s; import errors: {errors}"
                )
            time.sleep(2)

    def dag_ids(self) -> set[str]:
        """Every DAG id Airflow knows, page by page (the REST API answers at most
        ``[api] maximum_page_limit``, 100, a page, whatever ``limit`` asks)."""
        found: set[str] = set()
        while True:
            page = self._json("GET", "/api/v2/dags", params={"limit": 100, "offset": len(found)})
            found |= {d["dag_id"] for d in page["dags"]}
            if not page["dags"] or len(found) >= int(page["total_entries"]):
                return found

    def set_paused(self, dag_id: str, paused: bool) -> None:
        """Pause or unpause a DAG through the REST API."""
        self._json("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": paused})

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        """Trigger a manual run of ``dag_id``; returns its run id."""
        # A run id of our own makes a retried POST safe: if the first one got through,
        # the retry answers 409 and that run is the one.
        run_id = f"manual__{time.strftime('%Y%m%dT%H%M%S')}_{os.urandom(3).hex()}"
        try:
            run = self._json(
                "POST",
                f"/api/v2/dags/{dag_id}/dagRuns",
                json={"dag_run_id": run_id, "logical_date": None, "conf": dict(conf or {})},
            )
        except RuntimeError as e:
            if "HTTP 409" in str(e):
                return run_id
            raise
        return str(run["dag_run_id"])

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """The DAG's runs (at most 100) as the REST API gives them, oldest first."""
        runs = self._json(
            "GET", f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100, "order_by": "run_after"}
        )["dag_runs"]
        return list(runs)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """The task instances of one run as the REST API gives them."""
        return list(
            self._json("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")[
                "task_instances"
            ]
        )

    def task_log(
        self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1
    ) -> str:
        """The log of one task try as text (empty when the API server has none)."""
        try:
            doc = self._json(
                "GET",
                f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
                params={"full_content": "true", "map_index": map_index},
                headers={"Accept": "application/json"},
                retry_for=20,
            )
        except RuntimeError as e:
            return f"(no log: {e})"
        content = doc.get("content", "")
        if isinstance(content, list):
            return "\n".join(
                str(line.get("event", line)) if isinstance(line, dict) else str(line)
                for line in content
            )
        return str(content)

    def explain_run(self, dag_id: str, run_id: str, tail: int = 40) -> str:
        """Every task instance's state of a run, plus the last ``tail`` log lines of each
        try that did not succeed: what a failed assertion on a run should print."""
        out: list[str] = []
        for ti in self.task_instances(dag_id, run_id):
            name = f"{ti['task_id']}[{ti['map_index']}]"
            out.append(f"{name}: {ti['state']} (try {ti['try_number']}, {ti.get('hostname')})")
            if ti["state"] in ("success", "skipped"):
                continue
            for attempt in range(1, int(ti["try_number"] or 0) + 1):
                text = self.task_log(dag_id, run_id, ti["task_id"], attempt, ti["map_index"])
                lines = text.splitlines()[-tail:]
                out.append(f"--- {name} try {attempt} ---")
                out.extend(lines)
        return "\n".join(out)

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 300) -> dict[str, Any]:
        """Wait until the run succeeded or failed; returns it. ``TimeoutError`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            run = self._json("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            if run["state"] in TERMINAL:
                return dict(run)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"run {run_id} of {dag_id} still {run['state']} after {timeout:.0f} s"
                )
            time.sleep(2)

    def wait_runs(
        self, dag_id: str, count: int, timeout: float = 300, run_type: str | None = None
    ) -> list[dict[str, Any]]:
        """Wait until ``dag_id`` has at least ``count`` finished runs (of ``run_type``)."""
        deadline = time.monotonic() + timeout
        while True:
            runs = [r for r in self.runs(dag_id) if run_type is None or r["run_type"] == run_type]
            done = [r for r in runs if r["state"] in TERMINAL]
            if len(done) >= count and len(done) == len(runs):
                return runs
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{dag_id}: {len(done)} of {count} runs finished after {timeout:.0f} s: "
                    f"{[(r['run_type'], r['state']) for r in runs]}"
                )
            time.sleep(2)

    def wait_backfills(self, dag_id: str, timeout: float = 300) -> list[dict[str, Any]]:
        """Wait until every backfill of ``dag_id`` completed and its runs finished."""
        deadline = time.monotonic() + timeout
        while True:
            backfills = self._json("GET", "/api/v2/backfills", params={"dag_id": dag_id})[
                "backfills"
            ]
            runs = [r for r in self.runs(dag_id) if r["run_type"] == "backfill"]
            if (
                backfills
                and all(b.get("completed_at") for b in backfills)
                and all(r["state"] in TERMINAL for r in runs)
            ):
                return list(backfills)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{dag_id}: backfills not complete after {timeout:.0f} s: {backfills}; "
                    f"runs {[(r['logical_date'], r['state']) for r in runs]}"
                )
            time.sleep(2)


class StandaloneAirflow(AirflowApi):
    """``airflow standalone`` in ``home`` with ``dags_folder``; user ``admin``.

    The metadata DB is SQLite in ``home`` unless ``metadata_db`` names another one
    (``postgresql+psycopg://...``, an existing, empty database).
    """

    def __init__(
        self,
        home: Path,
        dags_folder: Path,
        *,
        port: int | None = None,
        password: str = "admin",
        env: Mapping[str, str] | None = None,
        log_file: Path | None = None,
        metadata_db: str | None = None,
        users: Mapping[str, tuple[str, str]] | None = None,
    ) -> None:
        self.home = Path(home).resolve()
        self.dags_folder = Path(dags_folder).resolve()
        self.port = port or free_port()
        super().__init__(f"http://127.0.0.1:{self.port}", password)
        #: Users besides ``admin``: name -> (simple auth manager role, password).
        self.users = dict(users or {})
        self.log_file = log_file or self.home / "standalone.log"
        bin_dir = os.path.dirname(sys.executable)
        self.env = {
            **os.environ,
            # standalone starts its components as `airflow ...`: this environment's.
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__PARALLELISM": "4",
            # LocalExecutor whose task processes start with the connector modules,
            # pandas and the Spark Connect client imported (airflow/executors.py).
            "AIRFLOW__CORE__EXECUTOR": "airflow_connectors.airflow.executors.WarmLocalExecutor",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            # Pick up new and changed DAG files within seconds.
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            # The triggerer warns of a "badly-written trigger" when its event loop misses a
            # 0.1 s tick by 0.2 s. On a small machine whose cores a starting spark-submit
            # saturates, the whole triggerer process waits that long for a CPU now and
            # then, whatever its triggers do (the connector triggers poll in a thread and
            # hold the loop for milliseconds: tests/airflow/test_triggers.py), so the
            # warning would only cry wolf here. One second still reveals a trigger that
            # really blocks.
            "AIRFLOW__TRIGGERER__BLOCKED_MAIN_THREAD_WARNING_THRESHOLD": "1.0",
            # A task's calls to the execution API (start, heartbeat, XCom, finish) time out
            # after 5 s by default; on a loaded 2-core machine (a Spark job starting, other
            # Airflows beside this one) the API server answers later now and then, and a
            # timed-out start or finish fails the task. The scale-out cluster uses 30 s too.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
            **(env or {}),
        }
        if self.users:
            self.env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = ",".join(
                ["admin:admin", *(f"{name}:{role}" for name, (role, _) in self.users.items())]
            )
        if metadata_db:
            # A PostgreSQL metadata DB (what production uses): no single-file locking.
            # Airflow derives its async URL as postgresql+asyncpg, which is not installed;
            # psycopg 3 serves both the sync and the async engine.
            self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = metadata_db
            self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] = metadata_db
        if self.uses_sqlite:
            self.env.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS", _CONNECT_ARGS)
            self.env.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC", _CONNECT_ARGS)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def uses_sqlite(self) -> bool:
        """Whether the metadata DB is Airflow's default SQLite file (no other DB set)."""
        conn = self.env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "")
        return conn == "" or conn.startswith("sqlite")

    # --- process ---------------------------------------------------------------

    def start(self, timeout: float = 180) -> None:
        """Start ``airflow standalone`` and wait until its metadata DB, scheduler, triggerer
        and dag-processor report healthy. Raises ``RuntimeError`` when the port is taken or
        Airflow exits, ``TimeoutError`` after ``timeout`` seconds (with the log's end)."""
        if not port_free(self.port):
            raise RuntimeError(
                f"port {self.port} on 127.0.0.1 is in use: Airflow's API server cannot start "
                "there; stop what uses it or pick another port"
            )
        self.home.mkdir(parents=True, exist_ok=True)
        # Pin the admin password instead of a generated one.
        (self.home / "simple_auth_manager_passwords.json.generated").write_text(
            json.dumps({"admin": self.password, **{n: pw for n, (_, pw) in self.users.items()}})
        )
        self._log = open(self.log_file, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "airflow", "standalone"],
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # stop() signals the whole group
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"airflow standalone exited ({self.proc.returncode}); the end of "
                    f"{self.log_file}:\n{self.log_tail()}"
                )
            if self._healthy():
                return
            time.sleep(1)
        self.stop()
        raise TimeoutError(
            f"airflow standalone not healthy in {timeout:.0f} s; the end of "
            f"{self.log_file}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the standalone's log, for error messages."""
        return file_tail(self.log_file, lines)

    def _healthy(self) -> bool:
        health = self.health()
        return all(
            health.get(part, {}).get("status") == "healthy"
            for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")
        )

    def stop(self) -> None:
        """Stop Airflow's process group, then task processes and Spark jobs it left; idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):  # workers, Spark jobs of the group
                os.killpg(self.proc.pid, signal.SIGKILL)
            self._stop_leftovers()
        self.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def _stop_leftovers(self, grace: float = 10) -> None:
        """Stop task processes (each in its own process group) and their Spark jobs."""
        terminate(processes_of(self.home), grace)

    def __enter__(self) -> StandaloneAirflow:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``airflow ARGS`` against this instance."""
        return airflow_cli(self.env, *args, timeout=timeout)
