"""Three more Kafka Connect clients from PyPI against ``<airflow>/connect``, unchanged:
kafka-connect-api (``kafka_connect_api``: ``Api``, ``Cluster``, ``Connector``, ``Task``
and its AWS Lambda handlers), kafkaconnect (its ``kafkaconnect`` CLI, a new process) and
kafka-connect-cli (its ``kafka_connect`` CLI, a new process). Every call each one offers,
as a user relies on its answers, written for Kafka Connect's own shapes: flat string
configs, KIP-875 offsets, KIP-558 topics, KIP-495 loggers, Kafka's ConfigKeyInfo.

Connectors come from pipeline specs here: creating one, or changing one's config, answers
409 (and so does deleting one); the tests check that each client shows that refusal.

kafkaconnect and kafka-connect-cli have no HTTP login option: they are given the URL with
the user's credentials in it (``http://user:password@host/connect``), which requests turns
into HTTP Basic. kafka-connect-cli cannot be installed beside the project's packages (every
release pins requests 2.27.1, and its ``kafka_connect`` package is kafka-connect-py's
name): :func:`kafka_connect_cli` installs its wheel apart, without its dependencies, and
runs it on this environment's requests. Calls that walk every connector of the cluster
(its health check and list, kafka-connect-api's ``restart_all_connectors``) go through
:func:`ours_only`, which shows them a cluster of this module's connectors: the shared
Airflow holds other modules' connectors, stopped or failed on purpose."""

from __future__ import annotations

import http.client
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

import httpx
import pytest
import yaml
from conftest import EndToEnd

from airflow_connectors import __version__

PIPELINE = "kcc"
NAME = "kcc.events.files"
#: Kafka's ConfigKeyInfo (GET /connector-plugins/{p}/config, validate's "definition") as
#: Kafka Connect 4 writes it (a record: "order_in_group"; 3.x workers wrote "order").
CONFIG_KEY_FIELDS = {
    "name",
    "type",
    "required",
    "default_value",
    "importance",
    "documentation",
    "group",
    "order_in_group",
    "width",
    "display_name",
    "dependents",
}
#: Kafka's ConfigValueInfo (validate's "value").
CONFIG_VALUE_FIELDS = {"name", "value", "recommended_values", "errors", "visible"}
KAFKA_TYPES = {"BOOLEAN", "STRING", "INT", "SHORT", "LONG", "DOUBLE", "LIST", "CLASS", "PASSWORD"}
#: The package's logger, as GET /admin/loggers must list it.
LOGGER = "airflow_connectors"
KAFKA_LEVELS = {"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"}
#: kafka-connect-cli 0.2.5's wheel (pure Python), installed apart by its hash.
KAFKA_CONNECT_CLI = (
    "kafka-connect-cli==0.2.5 "
    "--hash=sha256:6ebdd96c49b380687cad24ea381eeb6d7ee04058b7688a9bc7c7780a7e522e97"
)


@dataclass
class Kcc:
    """The Airflow, the connector's source folder and the API's base URLs."""

    af: Any
    src: Path

    @property
    def base(self) -> str:
        return f"{self.af.url}/connect"

    @property
    def auth(self) -> tuple[str, str]:
        return ("admin", self.af.password)

    def base_with_login(self, url: str | None = None) -> str:
        """``http://admin:<password>@host:port/connect``: how a client without a login
        option is given credentials."""
        scheme, _, rest = (url or self.base).partition("://")
        return f"{scheme}://admin:{quote(self.af.password, safe='')}@{rest}"

    def get(self, path: str) -> Any:
        answer = httpx.get(self.base + path, auth=self.auth, timeout=60)
        assert answer.status_code == 200, f"GET {path}: {answer.status_code} {answer.text}"
        return answer.json()

    def settle(self, timeout: float = 300) -> None:
        """Wait until the connector's DAG has no unfinished run and the connector and its
        one task are RUNNING (after a restart, a task restart or a resume)."""
        deadline = time.monotonic() + timeout
        while True:
            runs = self.af.runs(NAME)
            status = self.get(f"/connectors/{NAME}/status")
            states = [status["connector"]["state"], *(t["state"] for t in status["tasks"])]
            done = all(r["state"] in ("success", "failed") for r in runs)
            if done and states == ["RUNNING", "RUNNING"]:
                return
            if time.monotonic() > deadline:
                pytest.fail(
                    f"{NAME} did not settle in {timeout:.0f} s: status {status}, runs "
                    f"{[(r['dag_run_id'], r['state']) for r in runs]}"
                )
            time.sleep(2)


@pytest.fixture(scope="module")
def kcc(e2e: EndToEnd) -> Kcc:
    """A pipeline of one file connector that has run once (so it has a task and offsets)."""
    root = e2e.folder(PIPELINE)
    src = root / "src"
    src.mkdir(exist_ok=True)
    (src / "a.json").write_text('{"id": 1}\n{"id": 2}\n')
    spec = {
        "pipeline": PIPELINE,
        "tables": {
            "events": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(src), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        },
    }
    e2e.add({f"{PIPELINE}.yaml": yaml.safe_dump(spec)}, [NAME])
    af = e2e.airflow
    af.set_paused(NAME, False)
    assert af.wait_run(NAME, af.trigger(NAME))["state"] == "success"
    return Kcc(af, src)


def check_flat_config(config: dict[str, Any], kcc: Kcc, name: str = NAME) -> None:
    """Kafka Connect's connector config: one flat map of strings."""
    assert all(isinstance(v, str) for v in config.values()), config
    assert config["connector.class"] == "file_input", config
    assert config["name"] == name, config
    assert config["tasks.max"] == "1", config
    assert config["transport.config.path"] == str(kcc.src), config
    assert float(config["transport.config.min_file_age"]) == 0, config  # a float field: "0.0"
    assert config["format.name"] == "json", config
    assert config["format.config.update_format"] == "raw", config
    assert "errors.tolerance" in config, config


def check_config_key(definition: dict[str, Any]) -> None:
    """Kafka's ConfigKeyInfo, field by field."""
    assert set(definition) == CONFIG_KEY_FIELDS, definition
    assert isinstance(definition["name"], str) and definition["name"], definition
    assert definition["type"] in KAFKA_TYPES, definition
    assert isinstance(definition["required"], bool), definition
    assert definition["default_value"] is None or isinstance(definition["default_value"], str)
    assert definition["importance"] in {"HIGH", "MEDIUM", "LOW"}, definition
    assert isinstance(definition["documentation"], str), definition
    assert isinstance(definition["group"], str | None), definition
    assert isinstance(definition["order_in_group"], int), definition
    assert definition["width"] in {"NONE", "SHORT", "MEDIUM", "LONG"}, definition
    assert isinstance(definition["display_name"], str), definition
    assert isinstance(definition["dependents"], list), definition


def check_clean_validation(checked: dict[str, Any], kcc: Kcc) -> None:
    """Kafka's ConfigInfos of a valid flat config of file_input: no error anywhere, each
    field with its definition and the value given."""
    assert checked["name"] == "file_input", checked
    assert checked["error_count"] == 0, checked
    assert isinstance(checked["groups"], list), checked
    values = {}
    for entry in checked["configs"]:
        check_config_key(entry["definition"])
        assert set(entry["value"]) == CONFIG_VALUE_FIELDS, entry
        assert entry["value"]["errors"] == [], entry
        values[entry["value"]["name"]] = entry["value"]["value"]
    assert values["connector.class"] == "file_input", values
    assert values["transport.config.path"] == str(kcc.src), values


def errors_of(printed: str) -> Any:
    """The fields with errors of a validation printed after a first line (for a failed
    assertion's message), else what was printed."""
    try:
        checked = json.loads(printed.partition("\n")[2])
    except ValueError:
        return printed
    return {
        c["value"]["name"]: c["value"]["errors"]
        for c in checked.get("configs", [])
        if c["value"]["errors"]
    }


def refused_as_spec_only(message: str) -> None:
    """A 409's message: connectors are declared in pipeline specs, not made or changed
    through the API."""
    assert "spec" in message, message


# --- harness: a cluster of this module's connectors, kafka-connect-cli apart -------------


class _OurConnectors(BaseHTTPRequestHandler):
    """Forwards every request to the Airflow API server as it is; the answer of
    ``GET /connect/connectors`` lists only this module's connectors. http.client, which
    logs nothing: kafka-connect-api's Lambda handlers log a cluster whose repr asks the
    API, and a forwarder logging meanwhile would wait for the handler's lock."""

    upstream: ClassVar[tuple[str, int]] = ("127.0.0.1", 0)

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        keep = ("authorization", "content-type", "accept", "content-length")
        headers = {k: v for k, v in self.headers.items() if k.lower() in keep}
        upstream = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            content = answer.read()
        finally:
            upstream.close()
        if self.command == "GET" and self.path == "/connect/connectors" and answer.status == 200:
            names = [n for n in json.loads(content) if n.startswith(f"{PIPELINE}.")]
            content = json.dumps(names).encode()
        self.send_response(answer.status)
        for name in ("content-type", "www-authenticate", "location"):
            if answer.getheader(name) is not None:
                self.send_header(name, str(answer.getheader(name)))
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _forward

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def ours_only(kcc: Kcc) -> Iterator[str]:
    """The API's base URL (without credentials) as a cluster holding only this module's
    connectors, for the calls that walk every connector."""
    upstream = ("127.0.0.1", int(kcc.af.url.rsplit(":", 1)[1]))
    handler = type("Handler", (_OurConnectors,), {"upstream": upstream})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/connect"
    server.shutdown()
    server.server_close()


def _uv() -> list[str] | None:
    """uv as scripts/bootstrap.sh leaves it: on PATH, or a module of this Python or of
    ``python3``."""
    found = shutil.which("uv")
    if found:
        return [found]
    if importlib.util.find_spec("uv") is not None:
        return [sys.executable, "-m", "uv"]
    python3 = shutil.which("python3")
    if python3:
        probe = subprocess.run([python3, "-c", "import uv"], capture_output=True, timeout=60)
        if probe.returncode == 0:
            return [python3, "-m", "uv"]
    return None


@pytest.fixture(scope="module")
def kafka_connect_cli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding kafka-connect-cli's ``kafka_connect`` package (no dependencies:
    it runs on this environment's requests), for ``PYTHONPATH``."""
    uv = _uv()
    if uv is None:
        pytest.fail("uv is needed to install kafka-connect-cli apart (scripts/bootstrap.sh has it)")
    work = tmp_path_factory.mktemp("kafka-connect-cli")
    requirement = work / "requirements.txt"
    requirement.write_text(KAFKA_CONNECT_CLI + "\n")
    target = work / "site"
    done = subprocess.run(
        [
            *uv,
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--require-hashes",
            "--python",
            sys.executable,
            "--target",
            str(target),
            "-r",
            str(requirement),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"installing kafka-connect-cli: {done.stdout}{done.stderr}"
    assert (target / "kafka_connect" / "__main__.py").exists()
    return target


def run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=180, env={**os.environ, **(env or {})}
    )


# --- kafka-connect-api -----------------------------------------------------------------


@pytest.fixture
def root_logging() -> Iterator[None]:
    """kafka-connect-api's Lambda handlers set up the root logger of this process (level,
    formatters): put it back."""
    root = logging.getLogger()
    level, formatters = root.level, [(h, h.formatter) for h in root.handlers]
    yield
    root.setLevel(level)
    for handler, formatter in formatters:
        handler.setFormatter(formatter)


def test_kafka_connect_api_cluster_connector_and_tasks(kcc: Kcc) -> None:
    from kafka_connect_api.errors import GenericNotFound
    from kafka_connect_api.kafka_connect_api import Api, Cluster, Connector, Task

    kcc.settle()
    api = Api(url=kcc.base, username="admin", password=kcc.af.password)
    cluster = Cluster(api)
    assert cluster.get()["kafka_cluster_id"] == "airflow"
    assert cluster.version == __version__
    assert cluster.kafka_cluster == "airflow"
    assert repr(cluster) == f"{kcc.base} - {__version__} - airflow"

    connectors = cluster.connectors
    assert isinstance(connectors[NAME], Connector)
    connector = connectors[NAME]
    assert connector.exists()  # GET /connectors/{name}/, with its trailing slash
    with pytest.raises(GenericNotFound) as missing:
        Connector(cluster, f"{PIPELINE}.events.nope").exists()
    assert missing.value.code == 404
    assert missing.value.details[0]["error_code"] == 404, missing.value.details
    assert connector.connector_class == "file_input"
    check_flat_config(connector.config, kcc)
    assert connector.status["connector"]["state"] == "RUNNING"
    assert connector.state == "RUNNING"

    tasks = connector.tasks
    assert [t.id for t in tasks] == [0]
    task = tasks[0]
    assert isinstance(task, Task) and task.connector is connector
    assert repr(task) == f"{NAME}.0"
    assert all(isinstance(v, str) for v in task.config.values()), task.config
    assert task.status["state"] == "RUNNING" and task.status["id"] == 0
    assert task.state == "RUNNING" and task.is_running()

    connector.pause()
    assert connector.state == "PAUSED"
    assert task.state == "PAUSED"  # Kafka Connect: a paused connector's tasks are PAUSED
    assert kcc.af.client.get(f"/api/v2/dags/{NAME}").json()["is_paused"] is True
    connector.resume()
    assert connector.state == "RUNNING"

    # A restart, then at once a restart of its task (Kafka Connect's tasks live on while
    # their connector restarts), then each task's restart, then the three in a cycle.
    connector.restart()
    Task(connector, 0, {}).restart()
    connector.restart_all_tasks()
    connector.cycle_connector()
    assert connector.state == "RUNNING"
    kcc.settle()
    assert [t.id for t in connector.tasks] == [0]


def test_kafka_connect_api_config_create_delete(kcc: Kcc) -> None:
    from kafka_connect_api.errors import ConnectGenericException, GenericConflict
    from kafka_connect_api.kafka_connect_api import Api, Cluster, Connector

    api = Api(url=kcc.base, username="admin", password=kcc.af.password)
    cluster = Cluster(api)
    connector = cluster.connectors[NAME]
    config = connector.config
    check_flat_config(config, kcc)

    # The same map back: Kafka Connect's create-or-update answers 200, unchanged.
    connector.config = config
    info = api.put(f"/connectors/{NAME}/config", json=config)
    assert info["name"] == NAME and info["type"] == "source"
    assert info["config"] == config
    assert info["tasks"] == [{"connector": NAME, "task": 0}]

    with pytest.raises(GenericConflict) as changed:
        connector.config = {**config, "tasks.max": "2"}
    assert changed.value.code == 409
    refused_as_spec_only(changed.value.details[0]["message"])
    assert connector.config == config

    new = f"{PIPELINE}.events.more"
    with pytest.raises(GenericConflict) as created:
        Connector(cluster, new).config = {**config, "name": new}
    assert created.value.code == 409
    refused_as_spec_only(created.value.details[0]["message"])
    assert new not in cluster.connectors

    with pytest.raises(ConnectGenericException) as deleted:
        connector.delete()
    assert deleted.value.code == 409, deleted.value.details
    assert NAME in cluster.connectors and connector.exists()


def test_kafka_connect_api_loggers(kcc: Kcc) -> None:
    from kafka_connect_api.errors import GenericNotFound
    from kafka_connect_api.kafka_connect_api import Api, Cluster

    api = Api(url=kcc.base, username="admin", password=kcc.af.password)
    cluster = Cluster(api)
    loggers = cluster.loggers
    assert {"root", LOGGER} <= set(loggers), loggers
    assert all(entry["level"] in KAFKA_LEVELS for entry in loggers.values()), loggers
    root = cluster.root_logger["level"]
    before = loggers[LOGGER]["level"]

    # Root at the level it has (Kafka Connect sets every logger with it), then the
    # package's loggers to DEBUG and back: the API server's logging ends as it began.
    cluster.root_logger = root
    assert cluster.root_logger["level"] == root
    assert cluster.loggers[LOGGER]["level"] == root
    changed = cluster.set_logger_log_level(LOGGER, "DEBUG")
    assert LOGGER in changed, changed
    assert all(n == LOGGER or n.startswith(f"{LOGGER}.") for n in changed)
    assert api.get(f"/admin/loggers/{LOGGER}")["level"] == "DEBUG"
    assert cluster.loggers[LOGGER]["level"] == "DEBUG"
    assert cluster.loggers["root"]["level"] == root  # a child's level leaves root as it was
    cluster.set_logger_log_level(LOGGER, before)
    assert cluster.loggers[LOGGER]["level"] == before

    with pytest.raises(ValueError, match="Logger not found"):
        cluster.set_logger_log_level("kafka.nope", "INFO")  # checked against the listing
    with pytest.raises(GenericNotFound):
        api.get("/admin/loggers/kafka.nope")


def test_kafka_connect_api_lambdas(
    kcc: Kcc, ours_only: str, root_logging: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kafka_connect_api import aws_lambdas
    from kafka_connect_api.errors import ConnectGenericException, GenericConflict
    from kafka_connect_api.kafka_connect_api import Connector

    kcc.settle()
    cluster = {
        "hostname": "127.0.0.1",
        "url": kcc.base,
        "username": "admin",
        "password": kcc.af.password,
    }
    event = {"cluster": cluster, "connector": {"name": NAME}}
    connector = aws_lambdas.get_connector(event)
    assert isinstance(connector, Connector) and connector.name == NAME
    assert aws_lambdas.check_connector_health(event, None) is True
    config = connector.config

    # The cluster from the environment instead of the event.
    monkeypatch.setenv("CONNECT_CLUSTER_URL", kcc.base)
    monkeypatch.setenv("CONNECT_CLUSTER_BASIC_AUTH_USERNAME", "admin")
    monkeypatch.setenv("CONNECT_CLUSTER_BASIC_AUTH_PASSWORD", kcc.af.password)
    assert aws_lambdas.set_cluster_config({})["url"] == kcc.base
    assert aws_lambdas.check_connector_health({"connector": {"name": NAME}}, None) is True

    # Unchanged config: 200, and the connector is there 5 s later.
    same = {"cluster": cluster, "connector": {"name": NAME, "config": config}}
    assert aws_lambdas.create_update_connector(same, None) == 0
    new = f"{PIPELINE}.events.lambda"
    create = {"cluster": cluster, "connector": {"name": new, "config": {**config, "name": new}}}
    with pytest.raises(GenericConflict) as created:
        aws_lambdas.create_update_connector(create, None)
    refused_as_spec_only(created.value.details[0]["message"])
    assert aws_lambdas.restart_connector(event, None) == 0  # pause, restart tasks, resume
    kcc.settle()
    ours = {"cluster": {**cluster, "url": ours_only}}
    assert aws_lambdas.restart_all_connectors(ours, None) == 0
    kcc.settle()
    assert aws_lambdas.check_connector_health(event, None) is True

    # Deleting: refused (the connector is its spec's), last so it hides nothing else.
    with pytest.raises(ConnectGenericException) as deleted:
        aws_lambdas.delete_connector(event, None)
    assert deleted.value.code == 409, deleted.value.details
    assert aws_lambdas.get_connector(event).name == NAME


# --- kafkaconnect ----------------------------------------------------------------------


def test_kafkaconnect_cli(kcc: Kcc, tmp_path: Path) -> None:
    kcc.settle()
    exe = str(Path(sys.executable).with_name("kafkaconnect"))
    url = kcc.base_with_login()

    def kafkaconnect(*args: str) -> str:
        done = run([exe, "--connect", url, *args])
        assert done.returncode == 0, f"kafkaconnect {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout.strip()

    def answer(*args: str) -> Any:
        out = kafkaconnect(*args)
        try:
            return json.loads(out)
        except ValueError:
            pytest.fail(f"kafkaconnect {' '.join(args)}: {out}")

    assert NAME in answer("list")
    info = answer("info", NAME)
    assert info["name"] == NAME and info["type"] == "source"
    assert info["tasks"] == [{"connector": NAME, "task": 0}]
    check_flat_config(info["config"], kcc)
    status = answer("status", NAME)
    assert status["name"] == NAME and status["connector"]["state"] == "RUNNING"
    assert [t["state"] for t in status["tasks"]] == ["RUNNING"]
    config = answer("config", NAME)
    check_flat_config(config, kcc)
    tasks = answer("tasks", NAME)
    assert [t["id"] for t in tasks] == [{"connector": NAME, "task": 0}]
    assert all(isinstance(v, str) for v in tasks[0]["config"].values()), tasks
    assert answer("topics", NAME) == {NAME: {"topics": ["events"]}}
    plugins = answer("plugins")
    assert {"class": "file_input", "type": "source", "version": __version__} in plugins
    assert {p["type"] for p in plugins} <= {"source", "sink"}, plugins

    assert kafkaconnect("pause", NAME) == ""  # 202, no body
    assert answer("status", NAME)["connector"]["state"] == "PAUSED"
    assert kafkaconnect("resume", NAME) == ""
    assert answer("status", NAME)["connector"]["state"] == "RUNNING"
    assert kafkaconnect("restart", NAME) == ""  # 204
    kcc.settle()

    # upload: validate (PUT /connector-plugins/{connector.class}/config/validate) and
    # PUT /connectors/{name}/config. The config as fetched: valid, and 200 unchanged.
    same = tmp_path / "same.json"
    same.write_text(json.dumps(config))
    check_clean_validation(answer("upload", str(same), "--name", NAME, "--dry-run"), kcc)
    first, _, rest = kafkaconnect("upload", str(same), "--name", NAME).partition("\n")
    assert first == f"Uploading {NAME} connector configuration..."
    assert json.loads(rest)["config"] == config
    # A changed config, or a new connector: refused with 409, which kafkaconnect shows as
    # "Kafka cluster rebalance is in process." (its one text for a 409).
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps({**config, "tasks.max": "2"}))
    refused = kafkaconnect("upload", str(changed), "--name", NAME)
    assert refused.endswith("Kafka cluster rebalance is in process."), errors_of(refused)
    assert answer("config", NAME) == config
    new = f"{PIPELINE}.events.uploaded"
    refused = kafkaconnect("upload", str(same), "--name", new)
    assert refused.endswith("Kafka cluster rebalance is in process."), errors_of(refused)
    assert new not in answer("list")

    # create: the same validate and PUT for the configs of well-known connectors.
    check_clean_validation(answer("create", "jdbc-sink", str(same), "--dry-run"), kcc)
    created = kafkaconnect("create", "jdbc-sink", str(same)).partition("\n")[2]
    assert json.loads(created)["name"] == NAME  # the config as fetched: unchanged
    mm2 = ["create", "mirrormaker2", "--heartbeat", str(same), "--checkpoint", str(same)]
    mm2 += ["--mirror-source", str(same)]
    dry = kafkaconnect(*mm2, "--dry-run")
    for checked in dry.replace("}\n{", "}\0{").split("\0"):
        check_clean_validation(json.loads(checked), kcc)
    named = kafkaconnect(*mm2, "-n", f"{PIPELINE}.events.mm2")
    assert named.count("Kafka cluster rebalance is in process.") == 3, named
    assert f"{PIPELINE}.events.mm2-heartbeat" not in answer("list")
    # The InfluxDB sink's class is not a plugin here. Kafka Connect answers its validation
    # with an error ("Failed to find any class that implements Connector and which name
    # matches ...", 500), which kafkaconnect prints (a 404 as "Resource ... not found.");
    # a validation whose connector.class has an error says as much.
    influx = kafkaconnect("create", "influxdb-sink", "--validate", "events")
    assert "InfluxSinkConnector" in influx, influx
    if '"error_count"' in influx:
        checked = json.loads(influx)
        assert checked["error_count"] > 0, influx
        errors = {c["value"]["name"]: c["value"]["errors"] for c in checked["configs"]}
        assert errors["connector.class"], errors
    dry_influx = json.loads(kafkaconnect("create", "influxdb-sink", "--dry-run", "events"))
    assert dry_influx["topics"] == "events"  # no HTTP: the config it would send
    assert "Show help for any command." in kafkaconnect("help")

    # s3-sink adds aws.access.key.id and aws.secret.access.key, keys no plugin defines.
    # Kafka Connect's validation passes keys no ConfigDef names to the connector; here a
    # spec refuses unknown keys, so validation names them (a typo is caught before
    # anything runs) and kafkaconnect prints the validation instead of the PUT.
    creating, _, shown = kafkaconnect(
        "create", "s3-sink", str(same), "--aws-access-key-id", "k", "--aws-secret-access-key", "s"
    ).partition("\n")
    assert creating == f"Creating the {NAME} connector...", creating
    s3 = json.loads(shown)
    errors = {
        c["value"]["name"]: c["value"]["errors"] for c in s3["configs"] if c["value"]["errors"]
    }
    assert set(errors) == {"aws.access.key.id", "aws.secret.access.key"}, errors
    assert all("unknown key" in e[0] for e in errors.values()), errors
    assert '"s"' not in json.dumps(s3["configs"])  # the secret key is not echoed
    assert answer("config", NAME) == config

    # Deleting: refused with 409 (the connector is its spec's), last so it hides nothing.
    assert kafkaconnect("delete", NAME) == "Kafka cluster rebalance is in process."
    assert NAME in answer("list")


# --- kafka-connect-cli -----------------------------------------------------------------


def test_kafka_connect_cli(kcc: Kcc, ours_only: str, kafka_connect_cli: Path) -> None:
    kcc.settle()
    env = {"PYTHONPATH": str(kafka_connect_cli)}
    url = kcc.base_with_login()
    ours = kcc.base_with_login(ours_only)

    def cli(*args: str, at: str = url) -> subprocess.CompletedProcess[str]:
        return run([sys.executable, "-m", "kafka_connect", *args, "--url", at], env)

    def ok(*args: str, at: str = url) -> str:
        done = cli(*args, at=at)
        assert done.returncode == 0, f"kafka_connect {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout.strip()

    def answer(*args: str, at: str = url) -> Any:
        out = ok(*args, at=at)
        try:
            return json.loads(out)
        except ValueError:
            pytest.fail(f"kafka_connect {' '.join(args)}: {out}")

    def error(*args: str) -> str:
        # Errors are printed as "Error: <METHOD> <url>: response status: <n>, message: ..."
        # and the process exits 1 (an uncaught exception, shown by its excepthook).
        done = cli(*args)
        assert done.returncode == 1, f"kafka_connect {' '.join(args)}: {done.stdout}"
        assert done.stdout.startswith("Error: "), done.stdout + done.stderr
        return done.stdout.strip()

    def conflict(*args: str) -> None:
        out = error(*args)
        assert "response status: 409" in out, out
        refused_as_spec_only(json.loads(out.partition(", message: ")[2])["message"])

    # The calls that walk every connector, on a cluster of this module's connectors.
    healthy = cli("health-check", "--verbose", at=ours)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert f"Connector {NAME} in state RUNNING" in healthy.stdout
    assert answer("connector", "list", at=ours) == [
        {"connector": NAME, "state": "RUNNING", "failedTasks": []}
    ]

    running = {"connector": NAME, "state": "RUNNING", "failedTasks": []}
    assert answer("connector", "get", "--name", NAME, "--backoff-limit", "3") == running
    config = answer("connector", "configuration", "--name", NAME)
    check_flat_config(config, kcc)
    assert answer("task", "list", "--connector", NAME) == [
        {"taskId": 0, "state": "RUNNING", "trace": ""}
    ]

    assert ok("connector", "pause", "--name", NAME) == ""
    assert answer("connector", "get", "--name", NAME)["state"] == "PAUSED"
    assert answer("task", "list", "--connector", NAME)[0]["state"] == "PAUSED"
    assert ok("connector", "resume", "--name", NAME) == ""
    assert answer("connector", "get", "--name", NAME) == running
    pattern = f"{PIPELINE}\\..*"
    paused = ok("connector", "pause-all", "--name", pattern, "--verbose")
    assert paused == f"Connector {NAME} paused"
    assert answer("connector", "get", "--name", NAME)["state"] == "PAUSED"
    resumed = ok("connector", "resume-all", "--name", pattern, "--verbose")
    assert resumed == f"Connector {NAME} resumed"
    assert answer("connector", "get", "--name", NAME) == running

    # A connector restart, then at once a restart of its task 0.
    assert ok("connector", "restart", "--name", NAME) == ""
    assert ok("task", "restart", "--connector", NAME, "--task", "0") == ""
    kcc.settle()
    assert answer("task", "list", "--connector", NAME)[0]["taskId"] == 0

    # update: the config as fetched, 200 and unchanged; changed, 409.
    same = json.dumps(config)
    info = answer("connector", "update", "--name", NAME, "--configuration", same)
    assert info["name"] == NAME and info["config"] == config
    conflict(
        "connector",
        "update",
        "--name",
        NAME,
        "--configuration",
        json.dumps({**config, "tasks.max": "2"}),
    )
    assert answer("connector", "configuration", "--name", NAME) == config

    # create: a new name is POSTed and refused; an existing one is not POSTed.
    new = f"{PIPELINE}.events.created"
    conflict(
        "connector", "create", "--name", new, "--configuration", json.dumps({**config, "name": new})
    )
    assert error("connector", "create", "--name", NAME, "--configuration", same) == (
        f"Error: Connector {NAME} already exists"
    )
    assert ok(
        "connector", "create", "--name", NAME, "--configuration", same, "--if-not-exists"
    ) == ("null")

    conflict("connector", "delete", "--name", NAME)
    conflict("connector", "delete-all", "--name", pattern)
    assert answer("connector", "list", at=ours)[0]["connector"] == NAME


# --- what the clients reach only through their raw calls --------------------------------


def test_raw_calls_offsets_topics_plugins(kcc: Kcc) -> None:
    """kafka-connect-api's ``Api.get/put/post`` for the routes it has no method for, as
    its users call them: offsets (KIP-875), topics (KIP-558), plugins and their config."""
    from kafka_connect_api.kafka_connect_api import Api

    kcc.settle()
    api = Api(url=kcc.base, username="admin", password=kcc.af.password)

    offsets = api.get(f"/connectors/{NAME}/offsets")
    assert set(offsets) == {"offsets"}, offsets
    assert offsets["offsets"], offsets
    for entry in offsets["offsets"]:
        assert set(entry) == {"partition", "offset"}, entry
        assert isinstance(entry["partition"], dict) and isinstance(entry["offset"], dict), entry
    assert any("a.json" in json.dumps(e["partition"]) for e in offsets["offsets"]), offsets

    plugins = api.get("/connector-plugins")
    assert {p["type"] for p in plugins} <= {"source", "sink"}, plugins
    everything = api.get("/connector-plugins?connectorsOnly=false")
    assert {"class": "json", "type": "converter", "version": __version__} in everything
    assert all(p in everything for p in plugins)
    definitions = api.get("/connector-plugins/file_input/config")
    for definition in definitions:
        check_config_key(definition)
    # The plugin's own keys (Kafka: a plugin's ConfigDef), "path", or as a connector's
    # config holds them, "transport.config.path".
    by_name = {d["name"].removeprefix("transport.config."): d for d in definitions}
    assert by_name["path"]["required"] is True and by_name["path"]["default_value"] is None

    config = api.get(f"/connectors/{NAME}/config")
    checked = api.put("/connector-plugins/file_input/config/validate", json=config)
    check_clean_validation(checked, kcc)

    assert api.get(f"/connectors/{NAME}/topics") == {NAME: {"topics": ["events"]}}
    reset = api.put_raw(f"/connectors/{NAME}/topics/reset")
    assert reset.status_code == 202, reset.text

    # A restart, then at once a restart of task 0 (POST, POST): no 404 between them.
    restarted = api.post_raw(f"/connectors/{NAME}/restart")
    assert restarted.status_code in (202, 204), restarted.text
    again = api.post_raw(f"/connectors/{NAME}/tasks/0/restart")
    assert again.status_code == 204, again.text
    kcc.settle()
