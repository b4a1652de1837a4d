"""Source credentials never reach a Spark Connect server's logs, event log or UI.

How the secrets travel on Spark Connect: the client (the ingest task, or the CLI)
resolves the connector's connections (here ``url_input``'s ``http_conn_id``: a password
and an ``X-API-Key`` header, from ``AIRFLOW_CONN_<ID>``) and the engine binds the
credential environment (:func:`airflow_connectors.engine.spark.task_environment`: the
``AIRFLOW_CONN_<ID>`` of the connections the transport and the sink name, and on Spark
Connect the storage variables such as ``AWS_SECRET_ACCESS_KEY``) with the batch's plan
header and work items into the tasks' function, ``functools.partial(ingest_arrow,
header, groups, env)`` of ``range(0, n, 1, n).mapInArrow``. cloudpickle pickles it on
the client; it crosses to the server as opaque bytes inside the plan's Python UDF (gRPC,
over loopback or TLS). The server's JVM never decodes those bytes: it hands them to its
Python workers, which unpickle them in memory and set the environment only while the
task runs (restored after). Nothing of it is in the server's configuration, environment
or a SQL text; what the server shows of a plan (its log, the Connect tab's statements,
the SQL page, the event log's listener events) is the plan's tree with the UDF's name,
a long bytes field abbreviated, never its contents.

The test: one batch of a ``url_input`` connector whose server refuses requests without
the credentials (so they did reach the Spark task), with an AWS secret key in the
client's environment (a storage credential, which travels the same way), runs as a
Spark Connect client of a server started with its UI and event log on; then no secret
(nor its basic-auth or base64 form) appears in the server's log, its event log, its UI
pages (the Connect tab and each session page it links, jobs, stages, SQL and each
query's page, environment, executors) or the REST API's answers (the application, its
jobs, stages and SQL in detail, its environment), nor in the client's log (at DEBUG)."""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.sinks import _fs
from airflow_connectors.testing import jobs
from airflow_connectors.testing.conformance import assert_same_records
from airflow_connectors.testing.jobs import start_connect_job
from airflow_connectors.testing.sink_kit import (
    COLUMNS,
    CONNECTOR,
    PIPELINE,
    TABLE,
    SinkCase,
    StalledBodies,
    body_of,
    expected,
    records,
)

pytestmark = [pytest.mark.sources, pytest.mark.spark]

PASSWORD = f"pw-{uuid.uuid4().hex}"
API_KEY = f"key-{uuid.uuid4().hex}"
AWS_SECRET = f"aws-{uuid.uuid4().hex}"
LOGIN = "reader"
CONN_ID = "connect_secret_http"
ROWS = 200
#: Server URL -> its event log folder.
EVENTS: dict[str, Path] = {}


def forms(secret: str) -> list[str]:
    """``secret`` as it could show: plain, base64 (alone and in basic auth)."""
    basic = base64.b64encode(f"{LOGIN}:{secret}".encode()).decode()
    return [secret, base64.b64encode(secret.encode()).decode().rstrip("="), basic]


BASIC = "Basic " + base64.b64encode(f"{LOGIN}:{PASSWORD}".encode()).decode()
SECRETS = [*forms(PASSWORD), *forms(API_KEY), AWS_SECRET]


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark Connect server with its UI and event log on."""
    from airflow_connectors.testing.spark_connect import SparkConnectServer

    root: Path = tmp_path_factory.mktemp("spark-connect-secrets")
    events = root / "events"
    events.mkdir()
    conf = {
        "spark.ui.enabled": "true",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
    }
    with SparkConnectServer(root / "server", conf=conf) as server:
        EVENTS[server.url] = events
        yield server


@pytest.fixture(scope="module")
def landed(
    ui_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SinkCase, str]]:
    """One batch of the secret source through the server: the case and the client's
    log."""
    bodies = StalledBodies(required_headers={"Authorization": BASIC, "X-API-Key": API_KEY})
    root = tmp_path_factory.mktemp("secret-case")
    bodies.add("/rows.json", body_of(expected(records(0, ROWS))))
    connection = {
        "conn_type": "http",
        "host": "127.0.0.1",
        "port": bodies.server.server_port,
        "login": LOGIN,
        "password": PASSWORD,
        "extra": {"X-API-Key": API_KEY},
    }
    doc = {
        "pipeline": PIPELINE,
        "tables": {
            TABLE: {
                "columns": COLUMNS,
                "sink": {"name": "parquet", "config": {}},
                "connectors": [
                    {
                        "name": CONNECTOR,
                        "transport": {
                            "name": "url_input",
                            "config": {"http_conn_id": CONN_ID, "path": "/rows.json"},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        },
    }
    case = SinkCase(
        name="secret",
        root=root,
        spec=parse_pipeline(doc),
        warehouse=_fs.join(str(root / "wh"), "secret"),
        store_url=f"sqlite:///{root / 'state.db'}",
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(connection))
        mp.setenv("AWS_ACCESS_KEY_ID", "connect-secrets-test")
        mp.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
        try:
            assert len(case.plan()) == 1, case.files
            proc = start_connect_job(
                case.batch_ids, case.store_url, case.marks, ui_server.url, log_level="DEBUG"
            )
            try:
                out, _ = proc.communicate(timeout=600)
            finally:
                if proc.poll() is None:
                    jobs.kill(proc)
            log = out.decode(errors="replace")
            assert proc.returncode == 0, log[-3000:]
            yield case, log
        finally:
            bodies.close()


def server_texts(server: Any) -> dict[str, str]:
    """What the server shows or keeps: its log, its event log files, its UI pages
    (with the pages the Connect tab links) and its REST API's answers."""
    texts = {"server log": Path(server.log_path).read_text(errors="replace")}
    for path in EVENTS[server.url].rglob("*"):
        if path.is_file():
            texts[f"event log {path.name}"] = path.read_bytes().decode(errors="replace")
    assert any(name.startswith("event log") for name in texts), "no event log was written"
    ui = server.ui_url.rstrip("/")
    with httpx.Client(timeout=30, follow_redirects=True) as client:

        def get(path: str) -> str:
            reply = client.get(ui + path)
            assert reply.status_code == 200, f"{path}: HTTP {reply.status_code}"
            texts[path] = reply.text
            return reply.text

        connect = get("/connect/")
        assert "Spark Connect" in connect, connect[:500]
        sessions = sorted(set(re.findall(r'href="(/connect/session/[^"]+)"', connect)))
        assert sessions, "the Connect tab lists no session"
        for link in sessions:
            get(link.replace("&amp;", "&"))
        for page in ("/jobs/", "/stages/", "/SQL/", "/environment/", "/executors/"):
            get(page)
        apps = json.loads(get("/api/v1/applications"))
        assert apps, "the REST API lists no application"
        app = f"/api/v1/applications/{apps[0]['id']}"
        for part in ("", "/jobs", "/stages?details=true", "/sql?details=true", "/environment"):
            get(app + part)
        for execution in json.loads(texts[app + "/sql?details=true"]):
            get(f"/SQL/execution/?id={execution['id']}")
    return texts


def test_secrets_never_on_the_spark_connect_server(
    landed: tuple[SinkCase, str], ui_server: Any
) -> None:
    """The batch read the source with its credentials; no secret in any of the
    server's logs, event log, UI pages or REST answers, nor in the client's log."""
    case, client_log = landed
    assert_same_records(case.read(), expected(records(0, ROWS)), "id", "the secret source's table")
    texts = server_texts(ui_server)
    executions = [k for k in texts if k.startswith("/SQL/execution/")]
    assert executions, "the server's SQL page shows no query of the batch"
    leaks = [
        f"{where}: {secret[:6]}..."
        for where, text in {**texts, "client log": client_log}.items()
        for secret in SECRETS
        if secret in text
    ]
    assert leaks == [], f"secrets on the Spark Connect server or in the client's log: {leaks}"
