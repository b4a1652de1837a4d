"""``PUT /connect/connector-plugins/{plugin}/config/validate`` tests the Airflow
connections a config names, as ``airflow connections test`` does: the connection exists
and the service answers with its credentials (S3: the bucket on the configured endpoint;
PostgreSQL: ``SELECT 1``; HTTP: the base URL). Real services on 127.0.0.1: moto's S3
server, the machine's PostgreSQL and HTTP servers of this module; connections come
from ``AIRFLOW_CONN_<ID>`` variables (what Airflow's SDK reads outside a server), and
through a real API server in ``test_validate_in_airflow_tests_connections_from_its_database``."""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from conftest import EndToEnd
from sqlalchemy.engine import make_url

from airflow_connectors.airflow.connections import check_connections
from airflow_connectors.testing.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server
from airflow_connectors.testing.standalone import free_port

pytestmark = pytest.mark.airflow_server

API_KEY = "k-SECRET-api-key-0001"
PASSWORD = "pw-SECRET-0001"
SECRETS = (API_KEY, PASSWORD, SECRET_KEY)


class _Guarded(BaseHTTPRequestHandler):
    """Answers 200 only with the right X-API-Key and basic auth; 401 otherwise."""

    body: ClassVar[bytes] = b'{"id": 1}\n{"id": 2}\n'
    seen: ClassVar[list[dict[str, str]]] = []

    def _allowed(self) -> bool:
        self.seen.append(dict(self.headers.items()))
        basic = base64.b64encode(f"reader:{PASSWORD}".encode()).decode()
        return (
            self.headers.get("X-API-Key") == API_KEY
            and self.headers.get("Authorization") == f"Basic {basic}"
        )

    def _answer(self, with_body: bool) -> None:
        if not self._allowed():
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        if with_body:
            self.wfile.write(self.body)

    def do_GET(self) -> None:
        self._answer(True)

    def do_HEAD(self) -> None:
        self._answer(False)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def guarded() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that wants X-API-Key and basic auth; its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Guarded)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def http_conn(base: str, key: str = API_KEY, password: str = PASSWORD) -> dict[str, Any]:
    host, port = base.removeprefix("http://").split(":")
    return {
        "conn_type": "http",
        "host": host,
        "port": int(port),
        "schema": "http",
        "login": "reader",
        "password": password,
        "extra": {"X-API-Key": key, "Accept": "application/json"},
    }


def aws_conn(s3: S3Server) -> dict[str, Any]:
    return {
        "conn_type": "aws",
        "login": ACCESS_KEY,
        "password": SECRET_KEY,
        "extra": {"endpoint_url": s3.endpoint_url, "region_name": REGION},
    }


def pg_conn(database: str, port: int | None = None) -> dict[str, Any]:
    url = make_url(database)
    return {
        "conn_type": "postgres",
        "host": url.host,
        "port": port or url.port or 5432,
        "login": url.username,
        "password": PASSWORD,  # the machine's PostgreSQL trusts loopback: any password
        "schema": url.database,
    }


@pytest.fixture
def conns(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``conns(id=connection JSON, ...)``: Airflow connections in the environment."""

    monkeypatch.setenv("AIRFLOW__CORE__TEST_CONNECTION", "Enabled")

    def put(**named: dict[str, Any]) -> None:
        for conn_id, data in named.items():
            monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(data))

    return put


def no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"a secret in {text!r}"


def test_s3_connection_reaches_the_bucket(s3_server: S3Server, s3_bucket: str, conns: Any) -> None:
    conns(
        chk_s3=aws_conn(s3_server),
        chk_s3_down={
            **aws_conn(s3_server),
            "extra": {"endpoint_url": f"http://127.0.0.1:{free_port()}", "region_name": REGION},
        },
    )
    assert check_connections({"bucket_name": s3_bucket, "aws_conn_id": "chk_s3"}) == {}
    # delta_table_input names the bucket in its uri; without a bucket, the list.
    assert check_connections({"uri": f"s3://{s3_bucket}/t", "aws_conn_id": "chk_s3"}) == {}
    assert check_connections({"aws_conn_id": "chk_s3"}) == {}

    missing = check_connections({"bucket_name": "no-such-bucket", "aws_conn_id": "chk_s3"})
    assert missing == {
        "aws_conn_id": f"aws_conn_id 'chk_s3': bucket 'no-such-bucket' does not exist on "
        f"{s3_server.endpoint_url}; check the bucket and endpoint"
    }
    down = check_connections({"bucket_name": s3_bucket, "aws_conn_id": "chk_s3_down"}, timeout=3)
    [line] = down.values()
    assert line.startswith(f"aws_conn_id 'chk_s3_down': HEAD s3://{s3_bucket} on http://127.0.0.1:")
    assert "cannot reach the endpoint" in line and "\n" not in line
    no_secret(line)


@pytest.mark.postgres
def test_postgres_connection_runs_select_1(pg_database: Any, conns: Any) -> None:
    database = pg_database()
    conns(
        chk_pg=pg_conn(database),
        chk_pg_nodb={**pg_conn(database), "schema": "ac_no_such_database"},
        chk_pg_down=pg_conn(database, port=free_port()),
    )
    assert check_connections({"postgres_conn_id": "chk_pg", "query": "SELECT 1"}) == {}
    [nodb] = check_connections({"postgres_conn_id": "chk_pg_nodb"}).values()
    assert nodb.startswith(
        "postgres_conn_id 'chk_pg_nodb': cannot run SELECT 1 on "
        "postgresql://127.0.0.1:5432/ac_no_such_database: "
    ), nodb
    assert 'database "ac_no_such_database" does not exist' in nodb
    [down] = check_connections({"postgres_conn_id": "chk_pg_down"}, timeout=3).values()
    assert down.startswith("postgres_conn_id 'chk_pg_down': cannot run SELECT 1 on ")
    assert "refused" in down.lower() and "\n" not in down
    for line in (nodb, down):
        no_secret(line)


def test_http_connection_answers_with_its_headers_and_auth(guarded: str, conns: Any) -> None:
    conns(
        chk_http=http_conn(guarded),
        chk_http_badkey=http_conn(guarded, key="k-SECRET-wrong-0002"),
        chk_http_down=http_conn(f"http://127.0.0.1:{free_port()}"),
    )
    _Guarded.seen.clear()
    assert check_connections({"path": "/data.json", "http_conn_id": "chk_http"}) == {}
    assert _Guarded.seen[-1]["X-API-Key"] == API_KEY  # the extra's headers were sent
    [refused] = check_connections({"path": "/x", "http_conn_id": "chk_http_badkey"}).values()
    assert refused == (
        f"http_conn_id 'chk_http_badkey': GET {guarded} answered HTTP 401: the server refused "
        "the connection's credentials; check its login, password and headers"
    )
    [down] = check_connections({"path": "/x", "http_conn_id": "chk_http_down"}, timeout=3).values()
    assert down.startswith("http_conn_id 'chk_http_down': cannot reach http://127.0.0.1:")
    for line in (refused, down):
        no_secret(line)
        assert "k-SECRET-wrong-0002" not in line


def test_kafka_connection_reaches_the_topic(kafka_broker: Any, conns: Any) -> None:
    from confluent_kafka.admin import NewTopic

    topic = f"chk_{uuid.uuid4().hex[:8]}"
    admin = kafka_broker.admin()  # kept: a collected client cancels its futures
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    servers = kafka_broker.bootstrap_servers
    conns(
        chk_kafka={"conn_type": "kafka", "extra": {"bootstrap.servers": servers}},
        chk_kafka_down={
            "conn_type": "kafka",
            "extra": {"bootstrap.servers": f"127.0.0.1:{free_port()}"},
        },
        chk_kafka_none={"conn_type": "kafka", "extra": {"client.id": "x"}},
    )
    assert check_connections({"topic": topic, "kafka_config_id": "chk_kafka"}) == {}
    missing = check_connections({"topic": "no_such_topic", "kafka_config_id": "chk_kafka"})
    assert missing == {
        "kafka_config_id": f"kafka_config_id 'chk_kafka': topic 'no_such_topic' does not exist "
        f"on {servers}; create it or fix topic"
    }
    [down] = check_connections(
        {"topic": topic, "kafka_config_id": "chk_kafka_down"}, timeout=3
    ).values()
    assert down.startswith("kafka_config_id 'chk_kafka_down': cannot reach the brokers 127.0.0.1:")
    assert "\n" not in down
    [none] = check_connections({"topic": topic, "kafka_config_id": "chk_kafka_none"}).values()
    assert "names no bootstrap.servers" in none


def test_unknown_connection_says_how_to_create_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_NOBODY_HAS_IT", raising=False)
    assert check_connections({"postgres_conn_id": "nobody_has_it"}) == {
        "postgres_conn_id": "postgres_conn_id 'nobody_has_it' is not an Airflow connection; "
        "create a Postgres connection 'nobody_has_it' (Admin > Connections, or `airflow "
        "connections add`), or set AIRFLOW_CONN_NOBODY_HAS_IT"
    }


def validate_app() -> Any:
    """The Kafka Connect router as the API mounts it, without Airflow's login."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from airflow_connectors.airflow.api.connect import kafka_connect

    app = FastAPI()
    app.include_router(kafka_connect.router)
    return TestClient(app)


def field_errors(answer: dict[str, Any]) -> dict[str, list[str]]:
    return {
        c["value"]["name"]: c["value"]["errors"] for c in answer["configs"] if c["value"]["errors"]
    }


def test_validate_reports_a_failing_connection_on_its_field(
    guarded: str, s3_server: S3Server, s3_bucket: str, conns: Any
) -> None:
    conns(chk_http=http_conn(guarded), chk_http_badkey=http_conn(guarded, key="k-SECRET-x-03"))
    client = validate_app()
    good = client.put(
        "/connector-plugins/url_input/config/validate",
        json={"path": "/data.json", "http_conn_id": "chk_http"},
    )
    assert good.status_code == 200 and good.json()["error_count"] == 0, good.text
    bad = client.put(
        "/connector-plugins/url_input/config/validate",
        json={"path": "/data.json", "http_conn_id": "chk_http_badkey"},
    )
    answer = bad.json()
    assert answer["error_count"] == 1
    assert field_errors(answer) == {
        "http_conn_id": [
            f"http_conn_id 'chk_http_badkey': GET {guarded} answered HTTP 401: the server "
            "refused the connection's credentials; check its login, password and headers"
        ]
    }
    no_secret(bad.text)
    assert "k-SECRET-x-03" not in bad.text
    # A config that is invalid in itself is not tested against the service.
    invalid = client.put(
        "/connector-plugins/url_input/config/validate",
        json={"path": "/data.json", "http_conn_id": "chk_http_badkey", "timeout": -1},
    ).json()
    assert set(field_errors(invalid)) == {"timeout"}
    # The bucket an S3 source names is checked on the connection's endpoint.
    conns(chk_s3=aws_conn(s3_server))
    s3 = client.put(
        "/connector-plugins/s3_input/config/validate",
        json={"bucket_name": "no-such-bucket", "prefix": "", "aws_conn_id": "chk_s3"},
    ).json()
    assert list(field_errors(s3)) == ["aws_conn_id"], s3
    ok = client.put(
        "/connector-plugins/s3_input/config/validate",
        json={"bucket_name": s3_bucket, "prefix": "", "aws_conn_id": "chk_s3"},
    ).json()
    assert ok["error_count"] == 0, ok


def test_validate_tests_no_connection_while_airflow_disables_tests(
    guarded: str, conns: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow's ``[core] test_connection`` (Disabled by default) governs validate's
    connection checks too: disabled, the config is checked, the service is not called."""
    conns(chk_http_off=http_conn(guarded, key="k-SECRET-x-05"))
    monkeypatch.setenv("AIRFLOW__CORE__TEST_CONNECTION", "Disabled")
    before = len(_Guarded.seen)
    answer = validate_app().put(
        "/connector-plugins/url_input/config/validate",
        json={"path": "/data.json", "http_conn_id": "chk_http_off"},
    )
    assert answer.status_code == 200 and answer.json()["error_count"] == 0, answer.text
    assert len(_Guarded.seen) == before  # never contacted


@pytest.mark.postgres
def test_a_viewer_may_not_make_the_server_use_a_stored_connection(
    e2e: EndToEnd, guarded: str, s3_server: S3Server
) -> None:
    """Issue 22: a read-only user's validate naming an admin's connection, pointed at a
    listener of theirs, is refused before the connection is read: no request reaches
    the listener, and an unknown connection id gets the same answer (nothing tells
    whether a connection exists). The admin's own validate still tests it."""
    admin = e2e.airflow.client
    data = aws_conn(s3_server)
    body = {**data, "connection_id": "e2e_admin_aws", "extra": json.dumps(data["extra"])}
    admin.delete("/api/v2/connections/e2e_admin_aws")
    assert admin.post("/api/v2/connections", json=body).status_code == 201
    reader = e2e.airflow.client_for("reader", "reader-pw")
    try:
        before = len(_Guarded.seen)
        answers = {}
        for conn_id in ("e2e_admin_aws", "e2e_nobody_has_this"):
            config = {
                "bucket_name": "b",
                "prefix": "",
                "aws_conn_id": conn_id,
                "endpoint_url": guarded,
            }
            resp = reader.put("/connect/connector-plugins/s3_input/config/validate", json=config)
            assert resp.status_code == 403, resp.text
            answers[conn_id] = resp.json()["message"]
            assert "may not test Airflow connection(s)" in answers[conn_id]
            no_secret(resp.text)
        assert len(_Guarded.seen) == before  # nothing was signed with the admin's key
        assert answers["e2e_admin_aws"].replace("e2e_admin_aws", "X") == answers[
            "e2e_nobody_has_this"
        ].replace("e2e_nobody_has_this", "X")
        # Without connection fields, a viewer's validate is a plain config check.
        plain = reader.put(
            "/connect/connector-plugins/s3_input/config/validate",
            json={"bucket_name": "b", "prefix": ""},
        )
        assert plain.status_code == 200, plain.text
        # The admin may: the connection is tested (the bucket is missing on its endpoint).
        mine = admin.put(
            "/connect/connector-plugins/s3_input/config/validate",
            json={"bucket_name": "no-such-bucket", "prefix": "", "aws_conn_id": "e2e_admin_aws"},
        )
        assert mine.status_code == 200 and list(field_errors(mine.json())) == ["aws_conn_id"]
        # A whole connector's flat config (Kafka Connect's map) names its connection as
        # transport.config.aws_conn_id: the same rights, the same test, its flat key.
        flat = {
            "connector.class": "s3_input",
            "transport.config.bucket_name": "no-such-bucket",
            "transport.config.prefix": "",
            "transport.config.aws_conn_id": "e2e_admin_aws",
            "format.name": "json",
        }
        refused = reader.put("/connect/connector-plugins/s3_input/config/validate", json=flat)
        assert refused.status_code == 403 and "may not test" in refused.json()["message"]
        tested = admin.put("/connect/connector-plugins/s3_input/config/validate", json=flat)
        assert tested.status_code == 200, tested.text
        assert list(field_errors(tested.json())) == ["transport.config.aws_conn_id"]
        no_secret(tested.text)
    finally:
        admin.delete("/api/v2/connections/e2e_admin_aws")


@pytest.mark.postgres
def test_validate_in_airflow_tests_connections_from_its_database(
    e2e: EndToEnd, guarded: str, pg_database: Any
) -> None:
    """Connections created in Airflow (its metadata database, not the environment), the
    check run by the real API server."""
    client = e2e.airflow.client
    database = pg_database()
    created = []
    for conn_id, data in {
        "e2e_chk_http": http_conn(guarded),
        "e2e_chk_http_badkey": http_conn(guarded, key="k-SECRET-e2e-04"),
        "e2e_chk_pg": pg_conn(database),
    }.items():
        body = {
            **data,
            "connection_id": conn_id,
            "extra": json.dumps(data["extra"]) if "extra" in data else None,
        }
        client.delete(f"/api/v2/connections/{conn_id}")
        resp = client.post("/api/v2/connections", json=body)
        assert resp.status_code == 201, resp.text
        created.append(conn_id)

    def validate(plugin: str, config: dict[str, Any], **params: str) -> dict[str, Any]:
        resp = client.put(
            f"/connect/connector-plugins/{plugin}/config/validate", json=config, params=params
        )
        assert resp.status_code == 200, resp.text
        no_secret(resp.text)
        assert "k-SECRET-e2e-04" not in resp.text
        return dict(resp.json())

    try:
        assert (
            validate("url_input", {"path": "/d.json", "http_conn_id": "e2e_chk_http"})[
                "error_count"
            ]
            == 0
        )
        bad = validate("url_input", {"path": "/d.json", "http_conn_id": "e2e_chk_http_badkey"})
        assert field_errors(bad) == {
            "http_conn_id": [
                f"http_conn_id 'e2e_chk_http_badkey': GET {guarded} answered HTTP 401: the "
                "server refused the connection's credentials; check its login, password and "
                "headers"
            ]
        }
        sink = {"postgres_conn_id": "e2e_chk_pg", "table": "orders"}
        answer = validate("postgres", sink, type="sink")
        assert answer["error_count"] == 0, answer
        missing = validate("postgres", {**sink, "postgres_conn_id": "e2e_nobody"}, type="sink")
        assert field_errors(missing)["postgres_conn_id"] == [
            "postgres_conn_id 'e2e_nobody' is not an Airflow connection; create a Postgres "
            "connection 'e2e_nobody' (Admin > Connections, or `airflow connections add`), or "
            "set AIRFLOW_CONN_E2E_NOBODY"
        ]
    finally:
        for conn_id in created:
            client.delete(f"/api/v2/connections/{conn_id}")
