"""A real Kafka Connect worker (standalone mode) on 127.0.0.1 with the Debezium PostgreSQL
connector, for tests and examples: the change-data-capture pipeline that Kafka Connect
users run, so ``kafka_input`` with ``update_format: debezium`` reads what Debezium really
writes. Kafka's own FileStreamSource and FileStreamSink connectors (``connect-file``) are
there too: :func:`file_source` configures the first, the reference whose REST answers
the tests compare the product's Kafka Connect API with. The jars are those that
``deploy/maven/kafka-connect-debezium/pom.xml`` pins (resolved by
:mod:`airflow_connectors.testing.maven` into a cache outside the repository), on one
plain classpath: the connectors need no ``plugin.path`` folder.

    with ConnectWorker(broker.bootstrap_servers, tmp_path / "connect") as worker:
        worker.create_connector("orders-cdc", debezium_postgres(
            port=pg.port, database="shop", topic_prefix="shop", tables=["public.orders"],
            slot_name="orders_slot"))
        worker.wait_snapshot("orders-cdc")     # RUNNING, and its initial snapshot done
        # ... rows changed in "shop" reach topic "shop.public.orders"

Everything lives in the work dir: ``worker.properties``, ``log4j2.xml``, ``offsets``
(the standalone worker's source offsets: Debezium's LSN), ``logs/connect.log`` (the
worker's log, INFO, with the connector and thread on every line) and ``logs/connect.out``
(the JVM's stdout and stderr). Connectors are created through the worker's REST API
(``listeners=http://127.0.0.1:<port>``), as ``curl -X POST .../connectors`` does; a
worker started again on the same work dir resumes them from ``offsets`` once they are
created again. The worker makes the connector's topics itself (Kafka Connect's
``topic.creation.*`` settings, one partition, replication factor 1), so a broker with
``auto.create.topics.enable=false`` (the test broker) serves it. Needs Java 17+ and, on
first use, Maven with access to Maven Central.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_connectors.testing import maven
from airflow_connectors.testing.kafka import JVM_OPTIONS
from airflow_connectors.testing.kafka import _java as find_java
from airflow_connectors.testing.standalone import file_tail, free_port, port_free

JARS = "kafka-connect-debezium"
MAIN = "org.apache.kafka.connect.cli.ConnectStandalone"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
FILE_SOURCE_CONNECTOR = "org.apache.kafka.connect.file.FileStreamSourceConnector"

# The connector and task (Kafka Connect's MDC) and the thread on every line: Debezium's
# own threads are named after the connector's topic.prefix
# ("debezium-postgresconnector-<prefix>-change-event-source-coordinator").
LOG4J2_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN" shutdownHook="disable">
  <Appenders>
    <RollingFile name="connect" fileName="{logs}/connect.log"
                 filePattern="{logs}/connect.log.%i">
      <PatternLayout pattern="[%d] %p [%t] %X{{connector.context}}%m (%c)%n"/>
      <SizeBasedTriggeringPolicy size="20 MB"/>
      <DefaultRolloverStrategy max="2"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="connect"/></Root>
    <Logger name="org.apache.kafka.common.config.AbstractConfig" level="WARN"/>
    <Logger name="org.apache.kafka.clients" level="WARN"/>
    <Logger name="org.reflections" level="ERROR"/>
  </Loggers>
</Configuration>
"""

#: Debezium's ChangeEventSourceCoordinator writes this once the snapshot phase is over
#: (status COMPLETED, or SKIPPED when the offsets say it was done before); streaming
#: from the slot follows, and the slot holds every change made since it was created.
SNAPSHOT_ENDED = "Snapshot ended with SnapshotResult [status="


class ConnectError(RuntimeError):
    """The worker or a connector did not do what was asked (the message quotes the REST
    answer or the worker's log)."""


def debezium_postgres(
    *,
    port: int,
    database: str,
    topic_prefix: str,
    tables: Iterable[str],
    slot_name: str,
    publication_name: str | None = None,
    host: str = "127.0.0.1",
    user: str = "postgres",
    password: str | None = None,
    **more: object,
) -> dict[str, str]:
    """A Debezium PostgreSQL connector's configuration: ``pgoutput`` (PostgreSQL's own
    logical decoding plugin, nothing to install), a publication of just ``tables``
    (``schema.table``) made by the connector (``publication.autocreate.mode=filtered``,
    named ``<slot_name>_pub`` unless given), an initial snapshot, and every operation
    including truncates (Debezium skips truncates by default: ``skipped.operations=t``).
    Topics are ``<topic_prefix>.<schema>.<table>``; a delete is followed by a tombstone
    (Debezium's default). ``more`` adds to or overrides these (``slot.drop.on.stop``,
    ``decimal.handling.mode``, ...)."""
    config: dict[str, object] = {
        "connector.class": POSTGRES_CONNECTOR,
        "tasks.max": 1,
        "plugin.name": "pgoutput",
        "database.hostname": host,
        "database.port": port,
        "database.user": user,
        "database.dbname": database,
        "topic.prefix": topic_prefix,
        "table.include.list": ",".join(tables),
        "slot.name": slot_name,
        "publication.name": publication_name or f"{slot_name}_pub",
        "publication.autocreate.mode": "filtered",
        "snapshot.mode": "initial",
        "skipped.operations": "none",
        "topic.creation.default.partitions": 1,
        "topic.creation.default.replication.factor": 1,
        **more,
    }
    if password is not None:
        config["database.password"] = password
    return {k: _text(v) for k, v in config.items()}


def file_source(*, file: Path | str, topic: str, **more: object) -> dict[str, str]:
    """A FileStreamSource connector's configuration (Kafka's ``connect-file``): each line
    of ``file`` a record of ``topic``, one task. Its source partition is
    ``{"filename": <file>}`` and its offset ``{"position": <byte>}``. The worker makes the
    topic (``topic.creation.default.*``: one partition, replication factor 1), so a
    broker without automatic topic creation serves it. ``more`` adds to or overrides
    these (``batch.size``, ...)."""
    config: dict[str, object] = {
        "connector.class": FILE_SOURCE_CONNECTOR,
        "tasks.max": 1,
        "file": str(file),
        "topic": topic,
        "topic.creation.default.partitions": 1,
        "topic.creation.default.replication.factor": 1,
        **more,
    }
    return {k: _text(v) for k, v in config.items()}


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class ConnectWorker:
    """A Kafka Connect worker in standalone mode on ``127.0.0.1:<port>`` (REST) writing to
    the Kafka broker at ``bootstrap_servers``, with its state in ``work_dir``.

    Key and value converters are Kafka Connect's ``JsonConverter``;
    ``value_schemas`` / ``key_schemas`` set their ``schemas.enable`` (true: each message is
    ``{"schema": ..., "payload": ...}``, Kafka Connect's default; false: the bare
    payload). ``plugin_dir``, when given, is the worker's ``plugin.path`` (connectors
    beside the ones on the classpath). ``properties`` adds to or overrides the generated
    ``worker.properties``."""

    def __init__(
        self,
        bootstrap_servers: str,
        work_dir: Path | str,
        plugin_dir: Path | str | None = None,
        *,
        port: int | None = None,
        value_schemas: bool = True,
        key_schemas: bool = False,
        properties: Mapping[str, object] | None = None,
        jvm_options: Sequence[str] = JVM_OPTIONS,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.work = Path(work_dir).resolve()
        self.plugin_dir = Path(plugin_dir).resolve() if plugin_dir is not None else None
        self.port = port or free_port()
        self.value_schemas = value_schemas
        self.key_schemas = key_schemas
        self.properties = {k: _text(v) for k, v in (properties or {}).items()}
        self.jvm_options = list(jvm_options)
        self.config_file = self.work / "worker.properties"
        self.offsets = self.work / "offsets"
        self.logs = self.work / "logs"
        self.log = self.logs / "connect.log"
        self.out = self.logs / "connect.out"
        #: Seconds from starting the JVM until the REST API answered, of the last start.
        self.start_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        # Where the log stood when each connector was created: its snapshot's end is
        # looked for after that (an earlier run's line does not count).
        self._log_marks: dict[str, int] = {}

    @property
    def url(self) -> str:
        """The REST API's base URL, ``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The JVM's PID while this object's worker runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def worker_properties(self) -> dict[str, str]:
        """The worker's configuration (what :meth:`start` writes to ``worker.properties``)."""
        found = {
            "bootstrap.servers": self.bootstrap_servers,
            "key.converter": JSON_CONVERTER,
            "value.converter": JSON_CONVERTER,
            "key.converter.schemas.enable": _text(self.key_schemas),
            "value.converter.schemas.enable": _text(self.value_schemas),
            "offset.storage.file.filename": str(self.offsets),
            # Source offsets (Debezium's LSN) reach the file within a second, so a worker
            # stopped soon after a change resumes after it.
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://127.0.0.1:{self.port}",
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.port),
        }
        if self.plugin_dir is not None:
            found["plugin.path"] = str(self.plugin_dir)
        return {**found, **self.properties}

    # --- lifecycle -----------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> ConnectWorker:
        """Start the worker and wait until its REST API answers; ``ConnectError`` quotes
        its log when it does not."""
        if self.pid is not None:
            return self
        if not port_free(self.port):
            raise ConnectError(
                f"the Kafka Connect worker's REST port 127.0.0.1:{self.port} is in use; stop "
                "what listens there or pass another port"
            )
        java = find_java()
        classpath = maven.classpath(JARS)
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.work / "log4j2.xml").write_text(LOG4J2_XML.format(logs=self.logs))
        lines = [f"{k}={v}" for k, v in self.worker_properties().items()]
        header = "# Written by airflow_connectors.testing.kafka_connect at every start.\n"
        self.config_file.write_text(header + "\n".join(lines) + "\n")
        jvm = [java, *self.jvm_options, f"-Dlog4j2.configurationFile={self.work / 'log4j2.xml'}"]
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
        try:
            self._wait_ready(began + timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def _wait_ready(self, deadline: float) -> None:
        while True:
            self._check_alive("before its REST API answered")
            if time.monotonic() > deadline:
                raise ConnectError(
                    f"the Kafka Connect worker's REST API did not answer on {self.url}\n"
                    f"{self._log_tails()}"
                )
            with contextlib.suppress(OSError, ConnectError):
                if "version" in self._request("GET", "/", timeout=2):
                    return
            time.sleep(0.2)

    def _check_alive(self, when: str) -> None:
        proc = self._proc
        if proc is None:
            raise ConnectError("the Kafka Connect worker is not running; start it first")
        if proc.poll() is not None:
            raise ConnectError(
                f"the Kafka Connect worker exited with code {proc.returncode} {when}\n"
                f"{self._log_tails()}"
            )

    def _log_tails(self) -> str:
        tails = f"last lines of {self.log}:\n{file_tail(self.log)}"
        out = file_tail(self.out)
        return f"{tails}\nlast lines of {self.out}:\n{out}" if out.strip() else tails

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the worker (SIGTERM: connectors stop and offsets are flushed; SIGKILL after
        ``timeout``)."""
        self._end(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """End the worker like a crash (SIGKILL): offsets not yet flushed are lost, so a
        restarted connector sends some changes again (at least once, as Debezium does)."""
        self._end(signal.SIGKILL, 0)

    def _end(self, sig: signal.Signals, timeout: float) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)

    def __enter__(self) -> ConnectWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- REST ----------------------------------------------------------------------------

    def _request(
        self, method: str, path: str, body: object = None, *, timeout: float = 30.0
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            with contextlib.suppress(ValueError, AttributeError):
                detail = json.loads(detail).get("message", detail)
            raise ConnectError(
                f"Kafka Connect REST {method} {path} answered {e.code}: {detail}"
            ) from None
        return json.loads(text) if text.strip() else None

    def connectors(self) -> list[str]:
        """The names of the worker's connectors (``GET /connectors``)."""
        return list(self._request("GET", "/connectors"))

    def create_connector(self, name: str, config: Mapping[str, object]) -> None:
        """Create connector ``name`` (``PUT /connectors/<name>/config``: made, or its
        configuration replaced when it exists). The configuration is validated by the
        worker first, so a bad one fails here, naming the fields, rather than as a task
        that fails later."""
        settings = {k: _text(v) for k, v in config.items()}
        connector_class = settings.get("connector.class", "").rsplit(".", 1)[-1]
        checked = self._request(
            "PUT", f"/connector-plugins/{_quote(connector_class)}/config/validate",
            {**settings, "name": name},
        )  # fmt: skip
        if checked and checked.get("error_count"):
            problems = [
                f"{c['value']['name']}: {'; '.join(c['value']['errors'])}"
                for c in checked.get("configs", [])
                if c.get("value", {}).get("errors")
            ]
            raise ConnectError(f"connector {name!r}: invalid configuration: {'; '.join(problems)}")
        self._log_marks[name] = self._log_size()
        self._request("PUT", f"/connectors/{_quote(name)}/config", settings)

    def delete_connector(self, name: str) -> None:
        """Stop and remove connector ``name`` (``DELETE /connectors/<name>``); its source
        offsets stay in the worker's offsets file."""
        self._request("DELETE", f"/connectors/{_quote(name)}")

    def status(self, name: str) -> dict[str, Any]:
        """``GET /connectors/<name>/status``: the connector's and its tasks' states."""
        return dict(self._request("GET", f"/connectors/{_quote(name)}/status"))

    def wait_running(self, name: str, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until connector ``name`` and all its tasks are RUNNING; ``ConnectError``
        with the failure's first lines when one FAILED, or when time runs out."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while True:
            self._check_alive(f"while connector {name!r} was starting")
            with contextlib.suppress(ConnectError, OSError):
                last = self.status(name)
            failed = _failure(last)
            if failed:
                raise ConnectError(f"connector {name!r} failed: {failed}")
            tasks = last.get("tasks") or []
            states = [last.get("connector", {}).get("state"), *(t.get("state") for t in tasks)]
            if tasks and all(state == "RUNNING" for state in states):
                return last
            if time.monotonic() > deadline:
                raise ConnectError(
                    f"connector {name!r} was not RUNNING after {timeout:.0f} s (status "
                    f"{json.dumps(last)})\n{self._log_tails()}"
                )
            time.sleep(0.2)

    def wait_snapshot(self, name: str, timeout: float = 180.0) -> None:
        """Wait until Debezium connector ``name`` is RUNNING and has ended its snapshot
        phase (its log says so, for the connector's ``topic.prefix``). Changes made from
        then on are streamed; those made earlier are in the snapshot or streamed too."""
        began = time.monotonic()
        self.wait_running(name, timeout)
        config = self._request("GET", f"/connectors/{_quote(name)}/config")
        thread = f"-{config.get('topic.prefix', '')}-change-event-source-coordinator]"
        deadline = began + timeout
        while True:
            if self._log_has(self._log_marks.get(name, 0), SNAPSHOT_ENDED, thread):
                return
            failed = _failure(self.status(name))
            if failed:
                raise ConnectError(f"connector {name!r} failed during its snapshot: {failed}")
            self._check_alive(f"while connector {name!r} took its snapshot")
            if time.monotonic() > deadline:
                raise ConnectError(
                    f"connector {name!r} did not end its snapshot in {timeout:.0f} s\n"
                    f"{self._log_tails()}"
                )
            time.sleep(0.2)

    def _log_size(self) -> int:
        try:
            return self.log.stat().st_size
        except OSError:
            return 0

    def _log_has(self, start: int, *needles: str) -> bool:
        """Whether a line of the worker's log from byte ``start`` on holds all ``needles``."""
        try:
            with open(self.log, "rb") as f:
                f.seek(start if start <= self._log_size() else 0)
                text = f.read().decode(errors="replace")
        except OSError:
            return False
        return any(all(n in line for n in needles) for line in text.splitlines())


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _failure(status: Mapping[str, Any]) -> str | None:
    """The first lines of the trace of a FAILED connector or task in a status answer."""
    parts = [status.get("connector") or {}, *(status.get("tasks") or [])]
    for part in parts:
        if part.get("state") == "FAILED":
            trace = str(part.get("trace") or "no trace")
            return "\n".join(trace.splitlines()[:6])
    return None
