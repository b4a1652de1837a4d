"""The scale-out deployment on one machine, all on 127.0.0.1 and without Docker, for the
cluster tests and ``scripts/cluster.sh``:

- Spark standalone: a master and workers (:class:`.spark_standalone.SparkStandalone`);
  Airflow's ``connectors_spark`` connection points at it (``AIRFLOW_CONN_CONNECTORS_SPARK``)
  and ``[connectors] executor_python`` names the executors' Python, which lacks this
  repository (the ingest job ships the package);
- an S3-compatible server (moto, :class:`.s3server.S3Server`) with bucket ``warehouse``;
  the tables go to ``s3://warehouse/tables``;
- the connectors' state store and Airflow's metadata DB: two fresh PostgreSQL databases
  on 127.0.0.1:5432 (``ac_cluster_<id>_state``, ``ac_cluster_<id>_airflow``; the Celery
  result backend is the metadata DB), dropped by :meth:`Cluster.stop`;
- Airflow with the CeleryExecutor, each component its own process (and process group):
  ``api-server``, ``scheduler``, ``dag-processor``, ``triggerer`` and Celery workers
  (``airflow celery worker``), the broker Redis on 127.0.0.1:6379 (an empty Redis database
  of 1-15 and a queue of the cluster's own, so two clusters on one Redis do not mix).

    with Cluster(tmp / "cluster", dags_folder) as cluster:
        run_id = cluster.api.trigger("p.t.c")
        cluster.api.wait_run("p.t.c", run_id)
        cluster.kill_celery_worker(0)        # a machine running tasks dies
        cluster.read_table("p", "t")

Settings that matter for tests:

- The Celery workers run on one host, so each gets a hostname of its own for Airflow:
  ``[core] hostname_callable`` is :func:`hostname`, which returns ``<fqdn>-celery-<N>``
  in worker N's processes (from ``AIRFLOW_CONNECTORS_HOSTNAME``); the task SDK's
  supervisor sends it when a task starts, so it is the ``hostname`` of the task instance
  in the REST API.
- ``[scheduler] task_instance_heartbeat_timeout`` is 40 s (default 300) and its detection
  interval 5 s, so the running task of a SIGKILLed worker is failed (and retried, when
  it has retries) within about 45 s. ``[celery] task_acks_late`` stays Airflow's default
  (true) with its visibility timeout of a day: Redis hands a killed worker's message to
  nobody else, Airflow's retry is a new try.
- ``[workers] execution_api_timeout`` is 30 s (default 5): a task's calls to the API
  server (start, heartbeat, finish) wait that long before a retry; on a loaded 2-core
  machine the single API server worker stalled for 40 s once, and five 5-s attempts
  failed the task before it ran.
- ``[scheduler] orphaned_tasks_check_interval`` is 30 s (default 300): a scheduler that
  replaced a killed one adopts its queued tasks soon.
- Celery workers and the triggerer do not serve logs (``--skip-serve-logs``): every
  component shares the log folder ``root/airflow/logs``, and two workers would otherwise
  bind one port. ``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON`` of the calling process are
  not passed on (a test session sets them to its own Python, which has the repository).

``env`` of :class:`Cluster` overrides any of these (e.g.
``{"AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60"}`` on a slower machine).
Spark's ``spark.cores.max`` is not set: an ingest application takes every free worker
core, and one submitted meanwhile waits for cores until the first ends.

Every process of the cluster (Airflow's, their tasks, ``spark-submit``, the Spark
daemons and executors) has ``AIRFLOW_CONNECTORS_CLUSTER=<id>`` in its environment;
:meth:`Cluster.stop` ends those the process groups missed. ``root/cluster.json`` records
PIDs, ports and databases, so :meth:`Cluster.load` in another process (``scripts/cluster.py
down``) stops exactly what ``start`` started. It holds the cluster's generated keys and is
readable by its owner only.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import httpx

from airflow_connectors.testing.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server
from airflow_connectors.testing.spark_standalone import SparkStandalone
from airflow_connectors.testing.standalone import (
    AirflowApi,
    airflow_cli,
    alive,
    file_tail,
    free_port,
    port_free,
    proc_stat,
    processes_with,
    start_time,
    terminate,
)

#: The environment variable every process of a cluster carries (value: the cluster id).
MARKER = "AIRFLOW_CONNECTORS_CLUSTER"
#: Worker N's processes carry ``<cluster id>-<N>`` here (to kill a "machine").
WORKER_MARKER = "AIRFLOW_CONNECTORS_CELERY_WORKER"
#: The hostname :func:`hostname` returns in a process (Celery worker N: ``<fqdn>-celery-<N>``).
HOSTNAME_ENV = "AIRFLOW_CONNECTORS_HOSTNAME"

#: The servers scripts/services.sh starts, or the user's own (the test suite's variables).
PG_ADMIN = (
    os.environ.get(
        "AIRFLOW_CONNECTORS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    )
    .split("?", 1)[0]
    .rsplit("/", 1)[0]
    + "/postgres"
)
_REDIS = os.environ.get("AIRFLOW_CONNECTORS_TEST_REDIS", "127.0.0.1:6379")
REDIS_HOST, REDIS_PORT = _REDIS.rsplit(":", 1)[0], int(_REDIS.rsplit(":", 1)[1])
BUCKET = "warehouse"
STATE_FILE = "cluster.json"
#: Airflow's components besides the Celery workers, in start order.
AIRFLOW_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
HEALTH_PARTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")


def hostname() -> str:
    """``[core] hostname_callable`` of the cluster's Airflow: ``$AIRFLOW_CONNECTORS_HOSTNAME``
    when set (each Celery worker's own name), else the FQDN as Airflow's default."""
    return os.environ.get(HOSTNAME_ENV) or socket.getfqdn()


class ClusterError(RuntimeError):
    """A cluster cannot start (a service it needs is not there, a port is taken, a
    component exited); the message is one line saying what to do."""


def _pg_url(database: str) -> str:
    return PG_ADMIN.rsplit("/", 1)[0] + f"/{database}"


def check_services() -> None:
    """Raise :class:`ClusterError` (one line: what to start) when PostgreSQL or Redis on
    127.0.0.1 does not accept connections."""
    from sqlalchemy.engine import make_url

    pg = make_url(PG_ADMIN)
    for name, host, port in (
        ("PostgreSQL", pg.host or "127.0.0.1", pg.port or 5432),
        ("Redis", REDIS_HOST, REDIS_PORT),
    ):
        try:
            socket.create_connection((host, port), timeout=3).close()
        except OSError as e:
            raise ClusterError(
                f"{name} is not reachable on {host}:{port} ({e.strerror or e}); start it: "
                "bash scripts/services.sh up postgres redis"
            ) from None


def _pick_redis_db() -> int:
    """An empty Redis database of 1-15 (0 is everyone's default)."""
    import redis

    numbers = list(range(1, 16))
    random.shuffle(numbers)
    for number in numbers:
        client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=number)
        try:
            if client.dbsize() == 0:
                return number
        finally:
            client.close()
    raise ClusterError(
        f"Redis on {REDIS_HOST}:{REDIS_PORT} has no empty database among 1-15 for the "
        "Celery broker; flush one (redis-cli -n N flushdb) or stop clusters left running"
    )


def descendants(pid: int) -> list[int]:
    """The children of ``pid``, their children, and so on (Linux ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = proc_stat(int(entry.name))
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _stop_group(pid: int | None, proc: subprocess.Popen[bytes] | None, grace: float) -> None:
    """SIGTERM process group ``pid``; SIGKILL the group after ``grace`` seconds or once
    its leader exited (what it left behind)."""
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if (proc.poll() is not None) if proc is not None else not alive(pid):
            break
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


class Cluster:
    """The deployment under ``root`` (logs, Airflow's home, Spark's work directories,
    ``cluster.json``) serving ``dags_folder``. ``env`` adds to (or overrides) the
    environment of every Airflow component."""

    def __init__(
        self,
        root: Path,
        dags_folder: Path,
        *,
        spark_workers: int = 2,
        celery_workers: int = 2,
        celery_concurrency: int = 2,
        env: Mapping[str, str] | None = None,
        api_port: int | None = None,
        _state: Mapping[str, Any] | None = None,
    ) -> None:
        state = dict(_state or {})
        self.root = Path(root).resolve()
        self.dags_folder = Path(dags_folder).resolve()
        self.id: str = state.get("id") or secrets.token_hex(4)
        self.celery_workers = int(state.get("celery_workers", celery_workers))
        self.celery_concurrency = int(state.get("celery_concurrency", celery_concurrency))
        self.extra_env = dict(state.get("extra_env", env or {}))
        self.api_port = int(state.get("api_port") or api_port or free_port())
        spark = state.get("spark", {})
        self.spark = SparkStandalone(
            self.root / "spark",
            workers=int(spark.get("workers", spark_workers)),
            port=spark.get("port"),
            webui_port=spark.get("webui_port"),
            env={MARKER: self.id, "SPARK_LOCAL_IP": "127.0.0.1"},
        )
        self.s3 = S3Server(state.get("s3_port"), log=self.root / "logs" / "s3.log")
        self.state_db = f"ac_cluster_{self.id}_state"
        self.metadata_db = f"ac_cluster_{self.id}_airflow"
        self.state_store_url = _pg_url(self.state_db)
        self.warehouse = f"s3://{BUCKET}/tables"
        self.redis_db: int | None = state.get("redis_db")
        self.queue = f"ac_cluster_{self.id}"
        self.home = self.root / "airflow"
        self.url = f"http://127.0.0.1:{self.api_port}"
        self.api = AirflowApi(self.url, "admin")
        self._secrets: dict[str, str] = dict(state.get("secrets", {})) or {
            # 64 bytes or more: PyJWT warns of shorter HMAC keys for the SHA512 it signs with.
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        }
        #: PIDs (each a process group leader) by component name; recorded in cluster.json.
        self.pids: dict[str, int | None] = dict(state.get("pids", {}))
        #: Start times of :attr:`pids` (see :func:`start_time`).
        self.started: dict[str, int | None] = dict(state.get("started", {}))
        self.databases: list[str] = list(state.get("databases", []))
        #: Names of the processes :meth:`add_process` started.
        self.extras: list[str] = list(state.get("extras", []))
        self.up_seconds: float | None = state.get("up_seconds")
        #: ``new``, ``starting``, ``up`` or ``stopped`` (as recorded in cluster.json).
        self.phase: str = state.get("phase", "new")
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []
        self.env: dict[str, str] = self._environment()

    # --- configuration -------------------------------------------------------------------

    @property
    def broker_url(self) -> str:
        """The Celery broker: this cluster's Redis database."""
        return f"redis://{REDIS_HOST}:{REDIS_PORT}/{self.redis_db or 0}"

    def _environment(self) -> dict[str, str]:
        bin_dir = os.path.dirname(sys.executable)
        metadata = _pg_url(self.metadata_db)
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            MARKER: self.id,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(
                max(4, self.celery_workers * self.celery_concurrency)
            ),
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": f"{__name__}.hostname",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata,
            # Airflow would derive postgresql+asyncpg (not installed); psycopg 3 does both.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": metadata,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "40",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "30",
            "AIRFLOW__TRIGGERER__BLOCKED_MAIN_THREAD_WARNING_THRESHOLD": "1.0",
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
            "AIRFLOW__CELERY__BROKER_URL": self.broker_url,
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{metadata}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.celery_concurrency),
            # Task processes start with the connector modules imported (celery_config).
            "AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS": (
                "airflow_connectors.airflow.celery_config.CELERY_CONFIG"
            ),
            "AIRFLOW__OPERATORS__DEFAULT_QUEUE": self.queue,
            "AIRFLOW_CONN_CONNECTORS_SPARK": json.dumps(
                {"conn_type": "spark", "host": "spark://127.0.0.1", "port": self.spark.port}
            ),
            "AIRFLOW__CONNECTORS__EXECUTOR_PYTHON": str(
                self.spark.root / "executor-python" / "bin" / "python"
            ),
            "AIRFLOW__CONNECTORS__WAREHOUSE": self.warehouse,
            "AIRFLOW__CONNECTORS__STATE_STORE_URL": self.state_store_url,
            "AWS_ENDPOINT_URL": self.s3.endpoint_url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
            **self._secrets,
            **self.extra_env,
        }
        for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", HOSTNAME_ENV, WORKER_MARKER):
            env.pop(name, None)
        return env

    def _worker_env(self, index: int) -> dict[str, str]:
        return {
            **self.env,
            HOSTNAME_ENV: f"{socket.getfqdn()}-celery-{index}",
            WORKER_MARKER: f"{self.id}-{index}",
        }

    def celery_hostname(self, index: int) -> str:
        """Celery's node name of worker ``index`` (``celery@...``; unique per cluster)."""
        return f"celery@ac-{self.id}-w{index}"

    def airflow_hostname(self, index: int) -> str:
        """The hostname Airflow records on task instances that worker ``index`` runs."""
        return f"{socket.getfqdn()}-celery-{index}"

    # --- state file ------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        """``root/cluster.json``: what :meth:`load` reads."""
        return self.root / STATE_FILE

    def _save(self, phase: str) -> None:
        self.phase = phase
        self.root.mkdir(parents=True, exist_ok=True)
        if self.spark.master is not None:
            self._record("spark-master", self.spark.master.pid)
        for index, worker in enumerate(self.spark.worker_procs):
            self._record(f"spark-worker-{index}", worker.pid if worker is not None else None)
        state = {
            "phase": phase,
            "id": self.id,
            "root": str(self.root),
            "dags_folder": str(self.dags_folder),
            "api_port": self.api_port,
            "url": self.url,
            "spark": {
                "workers": self.spark.workers,
                "port": self.spark.port,
                "webui_port": self.spark.webui_port,
                "master_url": self.spark.master_url,
                "webui": self.spark.webui,
            },
            "s3_port": self.s3.port,
            "s3_endpoint": self.s3.endpoint_url,
            "warehouse": self.warehouse,
            "state_store_url": self.state_store_url,
            "redis_db": self.redis_db,
            "queue": self.queue,
            "celery_workers": self.celery_workers,
            "celery_concurrency": self.celery_concurrency,
            "databases": self.databases,
            "extras": self.extras,
            "pids": self.pids,
            "started": self.started,
            "up_seconds": self.up_seconds,
            "extra_env": self.extra_env,
            "secrets": self._secrets,
        }
        tmp = self.state_file.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(state, f, indent=1)
        tmp.replace(self.state_file)

    @classmethod
    def load(cls, root: Path) -> Cluster:
        """The cluster that :meth:`start` recorded in ``root/cluster.json`` (another
        process may have started it): :meth:`stop`, :meth:`status`, :meth:`cli` work on
        it. ``FileNotFoundError`` when there is none."""
        state = json.loads((Path(root) / STATE_FILE).read_text())
        return cls(Path(state["root"]), Path(state["dags_folder"]), _state=state)

    # --- processes -------------------------------------------------------------------------

    def _spawn(
        self, name: str, args: list[str], env: dict[str, str], *, command: list[str] | None = None
    ) -> None:
        """Start ``airflow ARGS`` (or ``command``) as component ``name``."""
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        log = open(self.root / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        self._procs[name] = subprocess.Popen(
            command or [sys.executable, "-m", "airflow", *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a group of its own: kill_*() take its children
        )
        self._record(name, self._procs[name].pid)

    def add_process(
        self, name: str, command: list[str], env: Mapping[str, str] | None = None
    ) -> None:
        """Start ``command`` as a process of the cluster (e.g. a server a demo pipeline
        reads from, or a Spark Connect server): the cluster's environment (``env`` added),
        a process group of its own, its output in ``root/logs/<name>.log``;
        :meth:`status` lists it and :meth:`stop` stops it."""
        if name not in self.extras:
            self.extras.append(name)
        self._spawn(name, [], {**self.env, **(env or {}), MARKER: self.id}, command=command)
        self._save_if_recorded()

    def _record(self, name: str, pid: int | None) -> None:
        if self.pids.get(name) != pid or name not in self.started:
            self.pids[name] = pid
            self.started[name] = start_time(pid)

    def _component_args(self, name: str) -> list[str]:
        return {
            "api-server": ["api-server", "--host", "127.0.0.1", "--port", str(self.api_port)],
            "scheduler": ["scheduler", "--skip-serve-logs"],
            "dag-processor": ["dag-processor"],
            "triggerer": ["triggerer", "--skip-serve-logs"],
        }[name]

    def _ours(self, name: str) -> bool:
        """Whether component ``name``'s recorded process still runs (the same process:
        PID and start time match, so a reused PID never counts)."""
        pid = self.pids.get(name)
        if pid is None or not alive(pid):
            return False
        started = self.started.get(name)
        return started is None or start_time(pid) == started

    def log_tail(self, name: str, lines: int = 20) -> str:
        """The end of component ``name``'s log (``root/logs/<name>.log``)."""
        return file_tail(self.root / "logs" / f"{name}.log", lines)

    def _check_exited(self) -> None:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise ClusterError(
                    f"{name} exited ({proc.returncode}) while the cluster started; the end of "
                    f"{self.root / 'logs' / (name + '.log')}:\n{self.log_tail(name)}"
                )

    # --- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 300) -> Cluster:
        """Start everything and wait until Airflow reports healthy and every Celery worker
        answers a ping; records the time it took in :attr:`up_seconds`. On failure it
        stops what it started and raises :class:`ClusterError` / ``TimeoutError``."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        check_services()
        if not port_free(self.api_port):
            raise ClusterError(
                f"port {self.api_port} on 127.0.0.1 is in use: Airflow's API server cannot "
                "start there; stop what uses it or pick another port"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            self.redis_db = _pick_redis_db()
            self.env = self._environment()
            self._create_databases()
            self._save("starting")
            (self.home / "simple_auth_manager_passwords.json.generated").write_text(
                json.dumps({"admin": self.api.password})
            )
            self._spawn("db-migrate", ["db", "migrate"], self.env)
            self.s3.start()
            self.s3.create_bucket(BUCKET)
            self._record("s3", self.s3._proc.pid if self.s3._proc else None)
            self.spark.start(timeout=max(10, deadline - time.monotonic()))
            self._save("starting")
            self._wait_migrated(deadline)
            for name in AIRFLOW_COMPONENTS:
                self._spawn(name, self._component_args(name), self.env)
            for index in range(self.celery_workers):
                self._spawn_worker(index)
            self._save("starting")
            self._wait_healthy(deadline)
            self.wait_celery_workers(range(self.celery_workers), deadline - time.monotonic())
        except BaseException:
            self.stop()
            raise
        self.up_seconds = round(time.monotonic() - t0, 1)
        self._save("up")
        return self

    def _create_databases(self) -> None:
        import sqlalchemy as sa

        admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                for name in (self.state_db, self.metadata_db):
                    conn.execute(sa.text(f"CREATE DATABASE {name}"))
                    self.databases.append(name)
        finally:
            admin.dispose()

    def _drop_databases(self) -> None:
        if not self.databases:
            return
        import sqlalchemy as sa

        admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                for name in list(self.databases):
                    conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    self.databases.remove(name)
        finally:
            admin.dispose()

    def _wait_migrated(self, deadline: float) -> None:
        proc = self._procs["db-migrate"]
        try:
            proc.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise TimeoutError(
                f"airflow db migrate did not finish in time; the end of its log:\n"
                f"{self.log_tail('db-migrate')}"
            ) from None
        del self._procs["db-migrate"]
        self.pids.pop("db-migrate", None)
        if proc.returncode != 0:
            raise ClusterError(
                f"airflow db migrate failed ({proc.returncode}); the end of "
                f"{self.root / 'logs' / 'db-migrate.log'}:\n{self.log_tail('db-migrate')}"
            )

    def healthy(self) -> bool:
        """Whether Airflow's health endpoint reports the metadata DB, scheduler, triggerer
        and dag-processor healthy, and the execution API (what tasks call) answers."""
        health = self.api.health()
        if not all(health.get(part, {}).get("status") == "healthy" for part in HEALTH_PARTS):
            return False
        try:
            return httpx.get(f"{self.url}/execution/health", timeout=30).status_code == 200
        except httpx.HTTPError:
            return False

    def _wait_healthy(self, deadline: float, scheduler_since: datetime | None = None) -> None:
        while time.monotonic() < deadline:
            self._check_exited()
            if self.healthy():
                if scheduler_since is None:
                    return
                beat = self.api.health()["scheduler"].get("latest_scheduler_heartbeat")
                if beat and datetime.fromisoformat(beat) > scheduler_since:
                    return
            time.sleep(1)
        raise TimeoutError(
            f"Airflow at {self.url} not healthy in time: {self.api.health() or 'no answer'}; "
            f"logs in {self.root / 'logs'}"
        )

    def ping_celery_workers(self, timeout: float = 2) -> set[int]:
        """The indexes of the Celery workers that answer a ping through the broker."""
        from celery import Celery

        app = Celery(broker=self.broker_url)
        names = {self.celery_hostname(i): i for i in range(self.celery_workers)}
        try:
            replies = app.control.ping(destination=list(names), timeout=timeout)
        except Exception:  # a broker hiccup: nobody answered this time
            replies = []
        finally:
            app.close()
        return {names[name] for reply in replies for name in reply if name in names}

    def wait_celery_workers(self, indexes: Any, timeout: float = 120) -> None:
        """Wait until the Celery workers ``indexes`` answer a ping."""
        wanted = set(indexes)
        deadline = time.monotonic() + timeout
        while True:
            self._check_exited()
            if wanted <= self.ping_celery_workers():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Celery workers {sorted(wanted)} do not answer on {self.broker_url}; "
                    + "; ".join(f"celery-{i}: {self.log_tail(f'celery-{i}', 5)}" for i in wanted)
                )
            time.sleep(1)

    def _spawn_worker(self, index: int) -> None:
        self._spawn(
            f"celery-{index}",
            [
                "celery",
                "worker",
                "--concurrency",
                str(self.celery_concurrency),
                "--celery-hostname",
                self.celery_hostname(index).split("@", 1)[1],
                "--queues",
                self.queue,
                "--skip-serve-logs",
            ],
            self._worker_env(index),
        )

    def stop(self) -> None:
        """Stop every process this cluster started (Celery workers first, then Airflow's
        other components, leftover task processes and Spark jobs, Spark, the S3 server),
        drop its databases and empty its Redis database; idempotent."""
        airflow = [*self.extras, *(f"celery-{i}" for i in range(self.celery_workers))]
        self._stop_components([*airflow, "db-migrate", *AIRFLOW_COMPONENTS], grace=10)
        terminate(processes_with(MARKER, self.id), grace=10)
        self.spark.stop()
        self.s3.stop()
        self._stop_components([n for n in self.pids if n.startswith("spark-") or n == "s3"], 10)
        terminate(processes_with(MARKER, self.id), grace=5)
        self.api.close()
        for log in self._logs:
            log.close()
        self._logs = []
        self._drop_databases()
        self._flush_redis()
        if self.state_file.exists():
            self._save("stopped")

    def _stop_components(self, names: list[str], grace: float) -> None:
        """Stop components ``names`` together: SIGTERM their process groups, SIGKILL what
        is left after ``grace`` seconds, then their descendants that left the group
        (Airflow runs each task in a group of its own). Processes that set their title
        (Celery, uvicorn, Airflow's supervisors) overwrite the environment that
        :func:`processes_with` reads, so the process tree finds those."""
        groups: list[tuple[int, subprocess.Popen[bytes] | None]] = []
        tree: list[int] = []
        for name in names:
            proc = self._procs.pop(name, None)
            pid = self.pids.get(name)
            if pid is not None and (proc is not None or self._ours(name)):
                groups.append((pid, proc))
                tree += descendants(pid)
            self.pids[name] = None
            self.started.pop(name, None)
        for pid, _ in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for pid, proc in groups:
            _stop_group(pid, proc, max(0.0, deadline - time.monotonic()))
        terminate([p for p in tree if alive(p)], grace=5)

    def _flush_redis(self) -> None:
        if not self.redis_db:
            return
        import redis

        client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=self.redis_db)
        try:
            client.flushdb()
        except redis.RedisError:
            pass
        finally:
            client.close()
        self.redis_db = None

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- faults ----------------------------------------------------------------------------

    def celery_worker_pids(self) -> list[int | None]:
        """The PID of each Celery worker's main process (None: not running)."""
        return [
            self.pids.get(f"celery-{i}") if self._ours(f"celery-{i}") else None
            for i in range(self.celery_workers)
        ]

    def kill_celery_worker(self, index: int) -> None:
        """SIGKILL Celery worker ``index`` as a machine that dies: its process group (the
        worker and its pool processes), its descendants in other groups (task supervisors
        and task processes) and every process with its marker (``spark-submit`` and the
        driver JVM)."""
        name = f"celery-{index}"
        pid = self.pids.get(name)
        proc = self._procs.pop(name, None)
        doomed = set(processes_with(WORKER_MARKER, f"{self.id}-{index}"))
        if pid is not None and (proc is not None or self._ours(name)):
            doomed |= {pid, *descendants(pid)}
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        for other in doomed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(other, signal.SIGKILL)
        if proc is not None:
            proc.wait()
        terminate([p for p in doomed if alive(p)], grace=5)
        self.pids[name] = None
        self.started.pop(name, None)
        self._save_if_recorded()

    def start_celery_worker(self, index: int, timeout: float = 120) -> None:
        """Start Celery worker ``index`` (again) and wait until it answers a ping."""
        self._spawn_worker(index)
        self._save_if_recorded()
        self.wait_celery_workers([index], timeout)

    def restart_scheduler(self, sig: int = signal.SIGKILL, timeout: float = 120) -> None:
        """Send ``sig`` to the scheduler's process group, wait until it is gone, start it
        again and wait until the new one heartbeats."""
        pid = self.pids.get("scheduler")
        proc = self._procs.pop("scheduler", None)
        if pid is not None and (proc is not None or self._ours("scheduler")):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
            deadline = time.monotonic() + 30
            while alive(pid) and (proc is None or proc.poll() is None):
                if time.monotonic() > deadline:
                    _stop_group(pid, proc, grace=5)
                    break
                time.sleep(0.2)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # what it left in its group
            if proc is not None:
                proc.wait()
        since = datetime.now().astimezone()
        self._spawn("scheduler", self._component_args("scheduler"), self.env)
        self._save_if_recorded()
        self._wait_healthy(time.monotonic() + timeout, scheduler_since=since)

    def _save_if_recorded(self) -> None:
        if self.state_file.exists():
            self._save(self.phase)

    # --- use -------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Each component -> ``{"pid", "running"}`` (Celery workers also ``"answers"``:
        their ping; Airflow's ``"health"``), and the cluster's URLs and ports."""
        components: dict[str, Any] = {}
        names = ["s3", "spark-master", *(f"spark-worker-{i}" for i in range(self.spark.workers))]
        names += [*AIRFLOW_COMPONENTS, *(f"celery-{i}" for i in range(self.celery_workers))]
        for name in [*names, *self.extras]:
            pid = self.pids.get(name)
            components[name] = {"pid": pid, "running": self._ours(name)}
        health = self.api.health()
        for name in AIRFLOW_COMPONENTS[1:]:
            part = health.get(name.replace("-", "_"), {})
            components[name]["health"] = part.get("status", "unknown")
        if any(components[f"celery-{i}"]["running"] for i in range(self.celery_workers)):
            answering = self.ping_celery_workers() if self.redis_db else set()
        else:
            answering = set()
        for i in range(self.celery_workers):
            components[f"celery-{i}"]["answers"] = i in answering
        return {
            "id": self.id,
            "root": str(self.root),
            "components": components,
            "airflow_url": self.url,
            "spark_master": self.spark.master_url,
            "spark_ui": self.spark.webui,
            "s3_endpoint": self.s3.endpoint_url,
            "warehouse": self.warehouse,
            "state_store_url": self.state_store_url,
            "broker_url": self.broker_url,
            "queue": self.queue,
            "databases": list(self.databases),
            "up_seconds": self.up_seconds,
        }

    def running(self) -> list[str]:
        """The components whose recorded process still runs."""
        return [n for n, c in self.status()["components"].items() if c["running"]]

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``airflow ARGS`` with the cluster's environment."""
        return airflow_cli(self.env, *args, timeout=timeout)

    def s3_filesystem(self) -> Any:
        """A ``pyarrow.fs.S3FileSystem`` on the cluster's S3 server."""
        from pyarrow import fs

        return fs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            region=REGION,
            endpoint_override=self.s3.endpoint_url,
            scheme="http",
        )

    def read_table(self, pipeline: str, table: str) -> Any:
        """Table ``table`` of ``pipeline`` from the warehouse (its Parquet files) as a
        ``pyarrow.Table``; an empty table when nothing was written yet."""
        import pyarrow as pa
        import pyarrow.dataset as ds

        from airflow_connectors.sinks._fs import files

        fs = self.s3_filesystem()
        names = files(fs, f"{BUCKET}/tables/{pipeline}/{table}", ".parquet")
        if not names:
            return pa.table({})
        return ds.dataset(names, filesystem=fs, format="parquet").to_table()
