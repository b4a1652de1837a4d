"""``aws_conn_id`` of ``s3_input`` through Airflow: the discover task resolves the
connection with Airflow, the ingest task hands it to its spark-submit job as an
``AIRFLOW_CONN_<ID>`` environment variable; a DAG run lands the bucket's rows once."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import task_states, write_pipeline
from test_dags import table_ids

from airflow_connectors.connections.aws import AwsSettings
from airflow_connectors.connections.base import ConnectionProblem, parse, set_connection_resolver
from airflow_connectors.testing.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server
from airflow_connectors.transports import Cursor, Limits
from airflow_connectors.transports.s3_input import S3InputConfig, S3InputTransport

CONN_ID = "landing_s3_test"
VAR = f"AIRFLOW_CONN_{CONN_ID.upper()}"


@pytest.fixture
def airflow_conn(s3_server: S3Server, airflow_db: Path) -> Iterator[str]:
    """An AWS connection in Airflow's metadata database only (not in the environment)."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    saved = os.environ.pop(VAR, None)
    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == CONN_ID).delete()
        session.add(
            Connection(
                conn_id=CONN_ID,
                conn_type="aws",
                login=ACCESS_KEY,
                password=SECRET_KEY,
                extra=json.dumps({"endpoint_url": s3_server.endpoint_url, "region_name": REGION}),
            )
        )
    yield CONN_ID
    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == CONN_ID).delete()
    os.environ.pop(VAR, None)
    if saved is not None:
        os.environ[VAR] = saved
    set_connection_resolver(None)


def put_lines(s3: S3Server, bucket: str, key: str, ids: range) -> None:
    body = "".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in ids)
    s3.client().put_object(Bucket=bucket, Key=key, Body=body.encode())


def test_the_resolver_asks_airflow(
    s3_server: S3Server, s3_bucket: str, airflow_conn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_connectors.airflow import connections

    put_lines(s3_server, s3_bucket, "in/a.json", range(3))
    cfg = S3InputConfig(bucket_name=s3_bucket, prefix="in/", aws_conn_id=airflow_conn)
    with pytest.raises(ConnectionProblem, match=VAR):
        list(S3InputTransport(cfg, None).discover(Cursor(), Limits()))  # type: ignore[arg-type]
    connections.install_resolver()
    # Outside a task Airflow's SDK reads connections from the environment and secrets
    # backends only (tasks ask the API server: see the DAG run below); what the hook
    # answers is what the transport uses.
    from airflow.sdk import BaseHook

    hook_conn = json.dumps(
        {
            "conn_type": "aws",
            "login": ACCESS_KEY,
            "password": SECRET_KEY,
            "extra": {"endpoint_url": s3_server.endpoint_url, "region_name": REGION},
        }
    )
    asked: list[str] = []

    def get_connection(conn_id: str) -> Any:
        from airflow.sdk.definitions.connection import Connection

        asked.append(conn_id)
        return Connection.from_json(hook_conn, conn_id=conn_id)

    monkeypatch.setattr(BaseHook, "get_connection", get_connection)
    t = S3InputTransport(cfg, None)  # type: ignore[arg-type]
    assert [i.key for i in t.discover(Cursor(), Limits())] == ["in/a.json"]
    assert asked == [airflow_conn]
    assert VAR not in os.environ, "resolving for discovery exported nothing"


def test_export_connections_names_the_connector_for_an_unknown_connection(
    airflow_conn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_connectors.airflow.connections import export_connections

    assert export_connections({"bucket_name": "b", "prefix": ""}, "p.t.c") == []
    monkeypatch.setenv(VAR, '{"conn_type": "aws", "login": "k", "password": "s3cret-value"}')
    assert export_connections({"aws_conn_id": airflow_conn}, "p.t.c") == [VAR]
    assert (
        AwsSettings.from_connection(parse(airflow_conn, os.environ[VAR])).secret_key
        == "s3cret-value"
    )
    with pytest.raises(LookupError) as missing:
        export_connections({"aws_conn_id": "no_such_conn_anywhere"}, "p.t.c")
    message = str(missing.value)
    assert message.startswith("connector p.t.c: aws_conn_id 'no_such_conn_anywhere'"), message
    assert "AIRFLOW_CONN_NO_SUCH_CONN_ANYWHERE" in message


def test_dag_run_reads_the_bucket_with_an_airflow_connection(
    s3_server: S3Server, s3_bucket: str, airflow_conn: str, connectors_env: dict[str, str]
) -> None:
    for n in range(3):
        put_lines(s3_server, s3_bucket, f"orders/{n}.json", range(n * 10, n * 10 + 10))
    connector: dict[str, Any] = {
        "name": "landing",
        "transport": {
            "name": "s3_input",
            "config": {
                "bucket_name": s3_bucket,
                "prefix": "orders/",
                "aws_conn_id": airflow_conn,
                "relist_margin_s": 0,
            },
        },
        "format": {"name": "json", "config": {"update_format": "raw"}},
    }
    dags = write_pipeline(
        "s3conn",
        {
            "orders": {
                "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR"},
                "connectors": [connector],
            }
        },
    )
    # The connection is in Airflow's database only: discover resolves it through Airflow,
    # ingest hands it to its spark-submit job in the environment.
    assert VAR not in os.environ
    run = dags["s3conn.orders.landing"].test()
    states = task_states(run)
    assert str(run.state) == "success", states
    assert table_ids(connectors_env, "s3conn", "orders") == list(range(30))


def test_discover_task_fails_in_one_line_for_an_unknown_connection(
    s3_bucket: str, connectors_env: dict[str, str]
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_connectors.airflow.operators.connector import ConnectorDiscoverOperator
    from airflow_connectors.catalog import parse_pipeline

    connector = {
        "name": "landing",
        "transport": {
            "name": "s3_input",
            "config": {"bucket_name": s3_bucket, "prefix": "", "aws_conn_id": "nobody_has_it"},
        },
        "format": {"name": "json", "config": {"update_format": "raw"}},
    }
    spec = parse_pipeline(
        {
            "pipeline": "s3missing",
            "tables": {"orders": {"columns": {"id": "BIGINT NOT NULL"}, "connectors": [connector]}},
        }
    )
    [table] = spec.tables
    op = ConnectorDiscoverOperator(
        task_id="discover",
        pipeline="s3missing",
        table=table.model_dump(mode="json", exclude={"connectors"}),
        connector=table.connectors[0].model_dump(mode="json"),
    )
    with pytest.raises(AirflowFailException) as failed:
        op.execute({"run_id": "manual__1"})  # type: ignore[arg-type]
    message = str(failed.value)
    assert message.startswith("connector s3missing.orders.landing: s3_input: aws_conn_id "), message
    assert "AIRFLOW_CONN_NOBODY_HAS_IT" in message and "\n" not in message


def test_a_missing_bucket_fails_discover_at_once_in_one_line_and_shows_failed(
    s3_server: S3Server,
    s3_bucket: str,
    airflow_conn: str,
    connectors_env: dict[str, str],
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Issue 22: a permanent error (NoSuchBucket) fails discover on its first try (no
    Airflow retry), is logged as one ERROR line naming the connector (no botocore
    traceback), and the connector is FAILED with that line on the state surfaces until
    a discovery succeeds again."""
    from airflow_connectors.engine.control import State, connector_view
    from airflow_connectors.state.store import ConnectorRef, StateStore

    def pipeline(bucket: str) -> Any:
        connector = {
            "name": "landing",
            "transport": {
                "name": "s3_input",
                "config": {"bucket_name": bucket, "prefix": "in/", "aws_conn_id": airflow_conn},
            },
            "format": {"name": "json", "config": {"update_format": "raw"}},
        }
        tables = {"orders": {"columns": {"id": "BIGINT NOT NULL"}, "connectors": [connector]}}
        return write_pipeline("s3gone", tables)["s3gone.orders.landing"]

    run = pipeline("no-such-bucket-0422").test()
    states = task_states(run)
    assert str(run.state) == "failed" and states[("discover", -1)] == "failed", states
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(run_id=run.run_id, task_id="discover").one()
        assert ti.try_number == 1  # failed at once: no retry for a missing bucket
    logs = capfd.readouterr()
    text = logs.out + logs.err
    errors = [ln for ln in text.splitlines() if "connector s3gone.orders.landing: " in ln]
    assert any("NoSuchBucket" in ln for ln in errors), text[-3000:]
    assert "botocore" not in text and "ClientError" not in text, text[-3000:]

    ref = ConnectorRef("s3gone", "orders", "landing")
    store = StateStore(connectors_env["AIRFLOW__CONNECTORS__STATE_STORE_URL"])
    try:
        record = store.status(ref)
        assert record is not None and record.fatal_error is not None
        assert "discovery failed" in record.fatal_error and "NoSuchBucket" in record.fatal_error
        view = connector_view(record, dag_paused=False)
        assert view.state == State.FAILED and view.trace == record.fatal_error
        # Fixed: the next discovery succeeds and the connector is no longer FAILED.
        put_lines(s3_server, s3_bucket, "in/0.json", range(3))
        ok = pipeline(s3_bucket).test()
        assert str(ok.state) == "success", task_states(ok)
        after = store.status(ref)
        assert after is not None and after.fatal_error is None
        assert connector_view(after, dag_paused=False).state == State.RUNNING
        assert any("NoSuchBucket" in e["message"] for e in after.transport_errors)
    finally:
        store.close()
