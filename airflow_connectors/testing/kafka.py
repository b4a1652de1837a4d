"""A real Apache Kafka broker on 127.0.0.1 for tests, examples and benchmarks: one JVM in
KRaft combined mode (broker and controller, node 1), started from the jars that
``deploy/maven/kafka/pom.xml`` pins (resolved by :mod:`airflow_connectors.testing.maven`
into a cache outside the repository), so clients speak the real protocol to a real log.

    with KafkaBroker(tmp_path / "kafka") as kafka:
        kafka.admin().create_topics([NewTopic("orders", 3)])
        Producer({"bootstrap.servers": kafka.bootstrap_servers})
        kafka.stop(); kafka.start()      # same ports and data: topics and offsets kept

Everything lives in the work dir: ``server.properties``, ``log4j2.xml``, ``data/`` (the
``log.dirs``, formatted once), ``logs/server.log`` (the broker's log, INFO) and
``logs/kafka.out`` (the JVM's stdout and stderr), ``kafka.pid`` while it runs. A broker
started again on the same work dir (the same object, or a new one) keeps its topics and
committed offsets and, when they are free, its ports.

Settings for one node: replication factor 1 for the internal topics (consumer offsets,
transactions, share groups) with one partition each, ``group.initial.rebalance.delay.ms=0``,
``num.partitions=1`` and ``auto.create.topics.enable=false`` (tests create their topics,
so a misspelt name fails instead of making a topic), and a broker session of 4 s
(``broker.session.timeout.ms``, default 9 s; heartbeats every second): a broker restarted
after a crash (:meth:`KafkaBroker.kill`) registers again only once its old session timed
out. ``properties`` adds to or overrides these. The quorum is static
(``controller.quorum.voters``): no voter endpoint is recorded in the log, so a restart on
other ports is safe. Needs Java 17+ and, on first use, Maven with access to Maven Central.

    python -m airflow_connectors.testing.kafka up|down|status [--dir DIR] [--port N]

runs one by hand (``bash scripts/kafka.sh``): ``up`` starts it in the background (work dir
``$AIRFLOW_CONNECTORS_KAFKA_HOME``, default ``/var/tmp/airflow-connectors/kafka``; port
9092 when free) and prints its bootstrap servers and PID, ``down`` stops it, ``status``
prints one line and exits non-zero when it is down.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_connectors.testing import maven
from airflow_connectors.testing.standalone import alive, file_tail, free_port, port_free

NODE_ID = 1
MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
DEFAULT_PORT = 9092

# Light for 2-core machines: a small heap, the serial collector (no GC threads competing
# with the tests) and C1 only (the broker answers sooner; a test broker never runs long
# enough for C2 to pay off).
JVM_OPTIONS: tuple[str, ...] = (
    "-Xmx512m",
    "-Xms256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)

LOG4J2_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN" shutdownHook="disable">
  <Appenders>
    <RollingFile name="server" fileName="{logs}/server.log"
                 filePattern="{logs}/server.log.%i">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <SizeBasedTriggeringPolicy size="20 MB"/>
      <DefaultRolloverStrategy max="2"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.common.config.AbstractConfig" level="WARN"/>
  </Loggers>
</Configuration>
"""


def default_home() -> Path:
    """The work dir of the broker that ``up`` starts: ``$AIRFLOW_CONNECTORS_KAFKA_HOME``,
    else ``/var/tmp/airflow-connectors/kafka`` (outside the repository, kept across
    reboots like the other services of ``scripts/services.sh``)."""
    return Path(
        os.environ.get("AIRFLOW_CONNECTORS_KAFKA_HOME") or "/var/tmp/airflow-connectors/kafka"
    )


def cluster_id() -> str:
    """A new cluster ID as ``kafka-storage random-uuid`` makes one (a random UUID in
    URL-safe base64 without padding, never starting with ``-``), without starting a JVM."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def read_properties(path: Path) -> dict[str, str]:
    """The ``key=value`` lines of a Java properties file we wrote (no continuations or
    escapes); ``{}`` when it does not exist."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            found[key.strip()] = value.strip()
    return found


def _listener_port(listeners: str, name: str) -> int | None:
    for listener in listeners.split(","):
        if listener.startswith(f"{name}://"):
            with contextlib.suppress(ValueError):
                return int(listener.rsplit(":", 1)[1])
    return None


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).is_file():
        raise RuntimeError(
            "the Kafka test broker needs Java 17+ but 'java' was not found (JAVA_HOME or "
            "PATH); install a JDK (Debian: apt-get install openjdk-17-jdk-headless)"
        )
    return java


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


class KafkaBroker:
    """A single-node Kafka broker (KRaft, broker and controller in one JVM) on
    ``127.0.0.1:<port>`` with its state in ``work``. ``port`` and ``controller_port``
    default to those of an earlier run on ``work`` when still free, else free ports.
    ``properties`` adds to or overrides the generated ``server.properties``."""

    def __init__(
        self,
        work: Path | str,
        port: int | None = None,
        *,
        controller_port: int | None = None,
        properties: Mapping[str, object] | None = None,
        jvm_options: Sequence[str] = JVM_OPTIONS,
    ) -> None:
        self.work = Path(work).resolve()
        self.config_file = self.work / "server.properties"
        self.data = self.work / "data"
        self.logs = self.work / "logs"
        self.log = self.logs / "server.log"
        self.out = self.logs / "kafka.out"
        self.pid_file = self.work / "kafka.pid"
        earlier = read_properties(self.config_file).get("listeners", "")
        self.port = port or self._earlier_port(earlier, "PLAINTEXT")
        self.controller_port = controller_port or self._earlier_port(earlier, "CONTROLLER")
        self.properties = {k: str(v) for k, v in (properties or {}).items()}
        self.jvm_options = list(jvm_options)
        #: Seconds from starting the JVM until the broker answered, of the last start.
        self.start_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def _earlier_port(listeners: str, name: str) -> int:
        port = _listener_port(listeners, name)
        return port if port is not None and port_free(port) else free_port()

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>``, the clients' ``bootstrap.servers``."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The JVM's PID while this object's broker runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def server_properties(self) -> dict[str, str]:
        """The broker's configuration (what :meth:`start` writes to ``server.properties``)."""
        controller = f"127.0.0.1:{self.controller_port}"
        return {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            "controller.quorum.voters": f"{NODE_ID}@{controller}",
            "listeners": f"PLAINTEXT://{self.bootstrap_servers},CONTROLLER://{controller}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap_servers}",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "share.coordinator.state.topic.num.partitions": "1",
            "broker.heartbeat.interval.ms": "1000",
            "broker.session.timeout.ms": "4000",
            **self.properties,
        }

    def start(self, timeout: float = 120.0) -> KafkaBroker:
        """Start the broker (formatting its storage on first use) and wait until it
        answers a metadata request; ``RuntimeError`` quotes its log when it does not."""
        if self.pid is not None:
            return self
        other = running_pid(self.work)
        if other is not None:
            raise RuntimeError(
                f"a Kafka broker already runs on {self.work} (pid {other}); stop it first "
                f"(python -m airflow_connectors.testing.kafka down --dir {self.work})"
            )
        for name, port in (("PLAINTEXT", self.port), ("CONTROLLER", self.controller_port)):
            if not port_free(port):
                raise RuntimeError(
                    f"the Kafka test broker's {name} port 127.0.0.1:{port} is in use; "
                    "stop what listens there or pass another port"
                )
        java = _java()
        classpath = maven.classpath("kafka")
        self._write_config()
        jvm = [java, *self.jvm_options, f"-Dlog4j2.configurationFile={self.work / 'log4j2.xml'}"]
        if not (self.data / "meta.properties").exists():
            self._format(jvm, classpath)
        with open(self.out, "ab") as out:
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {MAIN}\n".encode())
            out.flush()
            began = time.monotonic()
            self._proc = subprocess.Popen(
                [*jvm, "-cp", classpath, MAIN, str(self.config_file)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.work,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{self._proc.pid}\n")
        try:
            self._wait_ready(self._proc, began + timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def _write_config(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.work / "log4j2.xml").write_text(LOG4J2_XML.format(logs=self.logs))
        lines = [f"{k}={v}" for k, v in self.server_properties().items()]
        header = "# Written by airflow_connectors.testing.kafka at every start.\n"
        self.config_file.write_text(header + "\n".join(lines) + "\n")

    def _format(self, jvm: list[str], classpath: str) -> None:
        """Format ``log.dirs`` for a new cluster (``kafka-storage format``)."""
        cmd = [*jvm, "-cp", classpath, STORAGE_TOOL, "format"]
        cmd += ["-t", cluster_id(), "-c", str(self.config_file)]
        with open(self.out, "ab") as out:
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} formatting {self.data}\n".encode())
            out.flush()
            done = subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=120
            )
        if done.returncode != 0:
            raise RuntimeError(
                f"formatting the Kafka test broker's storage {self.data} failed (exit "
                f"{done.returncode}); last lines of {self.out}:\n{file_tail(self.out)}"
            )

    def _wait_ready(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        from confluent_kafka.admin import AdminClient

        admin: AdminClient | None = None
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the Kafka test broker exited with code {proc.returncode} before "
                    f"answering on {self.bootstrap_servers}\n{self._log_tails()}"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(
                    f"the Kafka test broker did not answer on {self.bootstrap_servers}\n"
                    f"{self._log_tails()}"
                )
            if admin is None and _accepts(self.port):
                admin = self.admin(log_level=0)  # no librdkafka noise while it starts
            if admin is not None:
                with contextlib.suppress(Exception):
                    if NODE_ID in admin.list_topics(timeout=min(2.0, left)).brokers:
                        return
            time.sleep(0.1)

    def _log_tails(self) -> str:
        tails = f"last lines of {self.log}:\n{file_tail(self.log)}"
        out = file_tail(self.out)
        return f"{tails}\nlast lines of {self.out}:\n{out}" if out.strip() else tails

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the broker (controlled shutdown: SIGTERM, SIGKILL after ``timeout``)."""
        self._end(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """End the broker like a crash (SIGKILL, no controlled shutdown); :meth:`start`
        brings it back, recovering its log."""
        self._end(signal.SIGKILL, 0)

    def _end(self, sig: signal.Signals, timeout: float) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(30)
            with contextlib.suppress(FileNotFoundError):
                if self.pid_file.read_text().strip() == str(proc.pid):
                    self.pid_file.unlink()

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def admin(self, **config: Any) -> Any:
        """A confluent-kafka ``AdminClient`` for this broker (``config`` adds settings)."""
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap_servers, **config})


class KafkaEndpoint:
    """A Kafka broker this process did not start (one a developer runs, named by
    ``AIRFLOW_CONNECTORS_TEST_KAFKA``), with what :class:`KafkaBroker` offers clients:
    :attr:`bootstrap_servers` and :meth:`admin`."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers

    def admin(self, **config: Any) -> Any:
        """A confluent-kafka ``AdminClient`` for this broker (``config`` adds settings)."""
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap_servers, **config})

    def check(self, timeout: float = 10.0) -> None:
        """``RuntimeError`` unless the broker answers a metadata request in ``timeout`` s."""
        try:
            self.admin(log_level=0).list_topics(timeout=timeout)
        except Exception as e:
            raise RuntimeError(f"no Kafka broker answers on {self.bootstrap_servers}: {e}") from e


def running_pid(work: Path) -> int | None:
    """The PID of the broker JVM running on work dir ``work`` (by its ``kafka.pid``),
    or ``None``. A PID the system gave to another process since is not taken for it."""
    try:
        pid = int((work / "kafka.pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    ours = MAIN.encode() in cmdline and str(work / "server.properties").encode() in cmdline
    return pid if ours and alive(pid) else None


def stop_pid(pid: int, timeout: float = 30.0) -> bool:
    """SIGTERM the broker JVM ``pid`` (a session leader: its process group), SIGKILL it
    after ``timeout``; whether it is gone."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not alive(pid):
            return True
    return False


def _up(work: Path, port: int | None) -> int:
    pid = running_pid(work)
    if pid is not None:
        print(f"kafka: already running on {_address(work)} (pid {pid}, dir {work})")
        return 0
    if port is None and not read_properties(work / "server.properties"):
        port = DEFAULT_PORT if port_free(DEFAULT_PORT) else None
    broker = KafkaBroker(work, port)
    try:
        broker.start()
    except (RuntimeError, maven.MavenError) as e:
        print(f"kafka: {e}", file=sys.stderr)
        return 1
    # The JVM runs in a session of its own and outlives this process; `down` stops it.
    print(f"kafka: up on {broker.bootstrap_servers} (pid {broker.pid}, dir {work}, "
          f"log {broker.log}, started in {broker.start_seconds:.1f} s)")  # fmt: skip
    broker._proc = None  # keep it running when this object goes away
    return 0


def _address(work: Path) -> str:
    listeners = read_properties(work / "server.properties").get("listeners", "")
    port = _listener_port(listeners, "PLAINTEXT")
    return f"127.0.0.1:{port}" if port else "(unknown port)"


def _down(work: Path) -> int:
    pid = running_pid(work)
    if pid is None:
        print(f"kafka: not running (dir {work})")
        return 0
    if not stop_pid(pid):
        print(f"kafka: pid {pid} did not stop", file=sys.stderr)
        return 1
    with contextlib.suppress(FileNotFoundError):
        (work / "kafka.pid").unlink()
    print(f"kafka: stopped (pid {pid}, dir {work}; data kept)")
    return 0


def _status(work: Path) -> int:
    pid = running_pid(work)
    if pid is None:
        print(f"kafka: down (dir {work})")
        return 1
    address = _address(work)
    try:
        KafkaEndpoint(address).check(timeout=5)
    except RuntimeError as e:
        print(f"kafka: pid {pid} runs but {e} (dir {work})")
        return 1
    print(f"kafka: up on {address} (pid {pid}, dir {work})")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``up|down|status [--dir DIR] [--port N]``: a broker run by hand."""
    parser = argparse.ArgumentParser(
        prog="python -m airflow_connectors.testing.kafka",
        description="A single-node Kafka broker (KRaft) on 127.0.0.1 for development.",
    )
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--dir", type=Path, default=None, help=f"work dir ({default_home()})")
    parser.add_argument("--port", type=int, default=None, help="PLAINTEXT port (up only)")
    args = parser.parse_args(argv)
    work = (args.dir or default_home()).resolve()
    if args.command == "up":
        work.mkdir(parents=True, exist_ok=True)
        return _up(work, args.port)
    if args.command == "down":
        return _down(work)
    return _status(work)


if __name__ == "__main__":
    raise SystemExit(main())
