"""``http_conn_id`` of ``url_input``: the base URL, headers and basic auth of an Airflow
HTTP connection. The transport resolves it without Airflow (``AIRFLOW_CONN_<ID>``, then
the resolver Airflow's tasks install); a DAG run reads a server that wants an API key
and basic auth with a connection kept in Airflow's metadata database only, and the
secrets reach neither the batch plan nor the logs."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import task_states, write_pipeline
from test_connection_checks import API_KEY, PASSWORD, _Guarded, guarded, http_conn  # noqa: F401
from test_dags import table_ids

from airflow_connectors.connections.base import ConnectionProblem, set_connection_resolver
from airflow_connectors.connections.http import http_connection_of
from airflow_connectors.transports import Cursor, Limits
from airflow_connectors.transports.url_input import UrlInputConfig, UrlInputTransport

pytestmark = pytest.mark.airflow_server

CONN_ID = "guarded_http_test"
VAR = f"AIRFLOW_CONN_{CONN_ID.upper()}"


def transport(**config: Any) -> UrlInputTransport:
    return UrlInputTransport(UrlInputConfig(**config), None)  # type: ignore[arg-type]


def test_connection_forms_read_as_airflow_reads_them() -> None:
    conn = http_connection_of(
        {
            "host": "api.example.com",
            "schema": "https",
            "port": 8443,
            "login": "u",
            "password": "p-secret",
            "extra": json.dumps({"X-API-Key": "k-123", "timeout": 5, "headers": {"Accept": "x/y"}}),
        }
    )
    assert conn.base_url == "https://api.example.com:8443"
    assert dict(conn.headers) == {"X-API-Key": "k-123", "Accept": "x/y"}
    assert conn.auth == ("u", "p-secret")
    assert conn.secrets() == {"k-123", "p-secret"}
    assert "k-123" not in repr(conn) and "p-secret" not in repr(conn)
    # A host with its scheme wins over schema; no host: no base URL.
    assert (
        http_connection_of({"host": "http://h:1/api/", "schema": "https"}).base_url
        == "http://h:1/api/"
    )
    assert http_connection_of({"conn_type": "http"}).base_url is None
    assert (
        UrlInputConfig(path="d.json", http_conn_id="x").url("http://h/api/")
        == "http://h/api/d.json"
    )
    assert UrlInputConfig(path="http://o/d", http_conn_id="x").url("http://h") == "http://o/d"
    with pytest.raises(ValueError, match="a path relative to a base URL needs http_conn_id"):
        UrlInputConfig(path="/d.json")


def test_transport_reads_with_the_connection(
    guarded: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(VAR, json.dumps(http_conn(guarded)))
    t = transport(path="/prices.json", http_conn_id=CONN_ID)
    [item] = list(t.discover(Cursor(), Limits()))
    assert item.key == f"{guarded}/prices.json"  # no credential in the key or the plan
    assert item.size == len(_Guarded.body)
    assert b"".join(t.read(item)) == _Guarded.body
    # Without the connection the server refuses; an unknown connection says what to do.
    monkeypatch.setenv(VAR, json.dumps(http_conn(guarded, key="k-wrong")))
    with pytest.raises(OSError, match="answered HTTP 401"):
        b"".join(transport(path="/prices.json", http_conn_id=CONN_ID).read(item))
    monkeypatch.delenv(VAR)
    set_connection_resolver(None)
    with pytest.raises(ConnectionProblem) as missing:
        list(transport(path="/p.json", http_conn_id=CONN_ID).discover(Cursor(), Limits()))
    assert str(missing.value).startswith(f"url_input: http_conn_id {CONN_ID!r} names no connection")


@pytest.fixture
def airflow_conn(guarded: str, airflow_db: Path) -> Iterator[str]:  # noqa: F811
    """The HTTP connection in Airflow's metadata database only (not in the environment)."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    data = http_conn(guarded)
    saved = os.environ.pop(VAR, None)
    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == CONN_ID).delete()
        session.add(
            Connection(
                conn_id=CONN_ID,
                conn_type="http",
                host=data["host"],
                port=data["port"],
                schema=data["schema"],
                login=data["login"],
                password=data["password"],
                extra=json.dumps(data["extra"]),
            )
        )
    yield CONN_ID
    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == CONN_ID).delete()
    os.environ.pop(VAR, None)
    if saved is not None:
        os.environ[VAR] = saved
    set_connection_resolver(None)


def test_dag_run_reads_with_an_airflow_http_connection(
    airflow_conn: str,
    connectors_env: dict[str, str],
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    connector = {
        "name": "guarded",
        "transport": {
            "name": "url_input",
            "config": {"path": "/prices.json", "http_conn_id": airflow_conn},
        },
        "format": {"name": "json", "config": {"update_format": "raw"}},
    }
    dags = write_pipeline(
        "httpconn",
        {"prices": {"columns": {"id": "BIGINT NOT NULL"}, "connectors": [connector]}},
    )
    assert VAR not in os.environ
    _Guarded.seen.clear()
    run = dags["httpconn.prices.guarded"].test()
    assert str(run.state) == "success", task_states(run)
    assert table_ids(connectors_env, "httpconn", "prices") == [1, 2]
    # discover's HEAD and the Spark job's GET both came with the connection's headers.
    assert {h.get("X-API-Key") for h in _Guarded.seen} == {API_KEY}
    assert len(_Guarded.seen) >= 2
    out = capfd.readouterr()
    logs = "\n".join((out.out, out.err, caplog.text))
    assert "ingesting batch" in logs  # the task logs were captured
    assert API_KEY not in logs and PASSWORD not in logs
