"""A Spark Connect server on 127.0.0.1 for the tests, ``scripts/quickstart.sh --spark
connect``, ``scripts/cluster.sh`` and the benchmarks: pyspark's own server
(``org.apache.spark.sql.connect.service.SparkConnectServer`` through the installed
pyspark's ``bin/spark-submit``, in its own process group) on local Spark or on a
standalone master.

    with SparkConnectServer(root) as server:            # local[2]
        SparkSession.builder.remote(server.url)         # sc://127.0.0.1:<port>
        server.kill()                                   # SIGKILL, with its Python workers
        server.start()                                  # again, on the same port

The gRPC endpoint, the driver and (when enabled) the Spark UI listen on 127.0.0.1 only.
A ``token`` is handed to the server in its environment
(``SPARK_CONNECT_AUTHENTICATE_TOKEN``), never on its command line, so ``ps`` does not
show it; clients then send it as ``sc://127.0.0.1:<port>/;token=<it>`` (over loopback
gRPC local credentials suffice: no TLS needed).

It starts Spark as a subprocess and never imports pyspark.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from airflow_connectors.testing.spark_standalone import LOOPBACK, spark_home
from airflow_connectors.testing.standalone import file_tail, free_port, start_time

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# What the server logs once its gRPC service listens (SparkConnectServer.main).
STARTED = b"Spark Connect server started"
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (Linux ``/proc``; empty elsewhere)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                text = Path(f"/proc/{pid}/task/{task}/children").read_text()
                found.extend(int(p) for p in text.split())
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``. PySpark's Python daemon puts itself and its workers
    in a process group of their own, so killing the server's group alone leaves them
    to notice the JVM is gone; :meth:`SparkConnectServer.kill` kills them by pid."""
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in _children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def port_open(port: int, host: str = LOOPBACK) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with socket.socket() as s:
        s.settimeout(1)
        try:
            s.connect((host, port))
        except OSError:
            return False
        return True


def log_says_started(log_path: Path, offset: int = 0) -> bool:
    """Whether the server's log ``log_path`` says (after byte ``offset``) that it started."""
    try:
        with open(log_path, "rb") as log:
            log.seek(offset)
            return STARTED in log.read()
    except OSError:
        return False


class SparkConnectServer:
    """pyspark's Spark Connect server for ``master`` (``local[2]``, or a standalone
    ``spark://...``) under ``root`` (its log, Spark's local directory).

    ``conf`` adds or overrides Spark settings (``--conf``); ``env`` adds to the server's
    environment. Executors run Python ``executor_python`` (default: this interpreter;
    a standalone cluster's executor Python, which lacks this repository, to prove the
    package reaches executors as an artifact). ``ui`` turns the Spark UI on, on a free
    loopback port (``spark.ui.enabled=true`` in ``conf`` does too); it is off by default.
    ``token`` makes the server require it from every client."""

    def __init__(
        self,
        root: Path,
        master: str = "local[2]",
        *,
        port: int | None = None,
        conf: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        executor_python: str | None = None,
        ui: bool = False,
        token: str | None = None,
        start_timeout: float = 240,
    ) -> None:
        self.root = Path(root).resolve()
        self.master = master
        self.port = port or free_port()
        self.extra_conf = dict(conf or {})
        self.extra_env = dict(env or {})
        self.executor_python = executor_python or sys.executable
        self.token = token
        self.start_timeout = start_timeout
        self.home = spark_home()
        self.log_path = self.root / "logs" / "spark-connect-server.log"
        ui_on = ui or self.extra_conf.get("spark.ui.enabled", "").lower() == "true"
        self.ui_port: int | None = None
        if ui_on:
            self.ui_port = int(self.extra_conf.get("spark.ui.port") or free_port())
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        """The client URL, ``sc://127.0.0.1:<port>`` (without the token)."""
        return f"sc://{LOOPBACK}:{self.port}"

    @property
    def token_url(self) -> str:
        """The client URL with the token (``url`` when there is none): a secret."""
        return f"{self.url}/;token={self.token}" if self.token else self.url

    @property
    def ui_url(self) -> str | None:
        """The Spark UI (``http://127.0.0.1:<port>``) when enabled, else ``None``."""
        return f"http://{LOOPBACK}:{self.ui_port}" if self.ui_port else None

    def _conf(self) -> dict[str, str]:
        conf = {
            "spark.connect.grpc.binding.address": LOOPBACK,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.local.dir": str(self.root / "local"),
            "spark.ui.enabled": "false",
        }
        if self.ui_port is not None:
            conf["spark.ui.enabled"] = "true"
            conf["spark.ui.port"] = str(self.ui_port)
        conf.update(self.extra_conf)
        if self.ui_port is not None:
            conf["spark.ui.port"] = str(self.ui_port)
        return conf

    def environment(self) -> dict[str, str]:
        """The server's environment (this process's, Spark's settings added)."""
        bin_dir = os.path.dirname(sys.executable)
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "SPARK_HOME": str(self.home),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_LOG_DIR": str(self.root / "logs"),
            "PYSPARK_PYTHON": self.executor_python,
        }
        # A client setting of this process must not make the server a client too.
        env.pop("SPARK_REMOTE", None)
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        env.pop(TOKEN_ENV, None)
        # A server is not a client of Airflow: the connections this process holds
        # (AIRFLOW_CONN_<ID> an ingest task exported) are its clients' to send with their
        # tasks, never the server's environment.
        for key in [k for k in env if k.startswith("AIRFLOW_CONN_")]:
            env.pop(key)
        if self.token:
            env[TOKEN_ENV] = self.token
        env.update(self.extra_env)
        return env

    def command(self) -> list[str]:
        """The server's command line (no secret on it)."""
        args = [str(self.home / "bin" / "spark-submit"), "--class", SERVER_CLASS]
        args += ["--name", "Spark Connect server", "--master", self.master]
        for key, value in self._conf().items():
            args += ["--conf", f"{key}={value}"]
        return [*args, "spark-internal"]

    def start(self, timeout: float | None = None) -> SparkConnectServer:
        """Start the server (again after :meth:`kill` or :meth:`stop`, on the same port)
        and return once it accepts connections and logged that it started.
        ``TimeoutError`` or ``RuntimeError`` with the log's end otherwise."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "local").mkdir(exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self._log is not None:
            self._log.close()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        offset = self._log.tell()
        self.proc = subprocess.Popen(
            self.command(),
            env=self.environment(),
            cwd=self.root,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: kill() takes its children
        )
        self._wait_ready(offset, self.start_timeout if timeout is None else timeout)
        return self

    def _started(self, offset: int) -> bool:
        return log_says_started(self.log_path, offset)

    def _wait_ready(self, offset: int, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise RuntimeError(
                    f"the Spark Connect server on {self.url} exited with code {code} while "
                    f"starting; the end of {self.log_path}:\n{self.log_tail()}"
                )
            if self._started(offset) and port_open(self.port):
                return
            time.sleep(0.25)
        self.kill()
        raise TimeoutError(
            f"the Spark Connect server on {self.url} was not ready in {timeout:.0f} s "
            f"(master {self.master}); the end of {self.log_path}:\n{self.log_tail()}"
        )

    def running(self) -> bool:
        """Whether the server process is alive."""
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The end of the server's log."""
        return file_tail(self.log_path, lines)

    def _signal_all(self, sig: signal.Signals) -> dict[int, int]:
        """Sends ``sig`` to the server's group and every process below it; returns
        those processes (pid -> :func:`start_time`)."""
        assert self.proc is not None
        below = {pid: start for pid in descendants(self.proc.pid) if (start := start_time(pid))}
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        for pid in below:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        return below

    def kill(self) -> None:
        """SIGKILL the server with its Python workers, as a machine that dies would;
        :meth:`start` brings it back on the same port."""
        if self.proc is None:
            return
        self._signal_all(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """Stop the server (SIGTERM, SIGKILL after 20 s); idempotent."""
        if self.proc is not None:
            below = self._signal_all(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=20)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            for pid, start in below.items():
                # Up to 20 s later: only a process that is still the one signalled (its
                # pid may be another process's by now, on this machine or a test's).
                if start_time(pid) == start:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> SparkConnectServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
