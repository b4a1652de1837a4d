"""``postgres_conn_id`` through Airflow: a connection held only in Airflow's metadata
database feeds both ``postgres_input`` (discover resolves it with Airflow, the ingest
task hands it to its spark-submit job) and the ``postgres`` sink (whose part writers run
in the Spark executors); a DAG run copies the table once, and the password is stored
nowhere in the connector's state."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import task_states, write_pipeline
from sqlalchemy.engine import make_url

from airflow_connectors.connections.base import set_connection_resolver

pytestmark = pytest.mark.postgres

CONN_ID = "orders_pg_test"
VAR = f"AIRFLOW_CONN_{CONN_ID.upper()}"
#: The server trusts local connections, so any password works; this one must never be
#: written anywhere by the connector.
PASSWORD = "pg-s3cret-Zq81"


@pytest.fixture
def database(pg_database: Any) -> str:
    """A fresh database holding ``orders`` (50 rows); its name."""
    url = make_url(pg_database())
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint NOT NULL, name text)")
        conn.execute("INSERT INTO orders SELECT g, 'n' || g FROM generate_series(0, 49) g")
    assert url.database is not None
    return url.database


@pytest.fixture
def airflow_conn(database: str, airflow_db: Path) -> Iterator[str]:
    """A Postgres connection in Airflow's metadata database only (not the environment)."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    saved = os.environ.pop(VAR, None)
    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == CONN_ID).delete()
        session.add(
            Connection(
                conn_id=CONN_ID,
                conn_type="postgres",
                host="127.0.0.1",
                port=5432,
                login="postgres",
                password=PASSWORD,
                schema=database,
            )
        )
    yield CONN_ID
    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == CONN_ID).delete()
    os.environ.pop(VAR, None)
    if saved is not None:
        os.environ[VAR] = saved
    set_connection_resolver(None)


def test_dag_run_copies_a_table_with_connections_from_airflow(
    database: str, airflow_conn: str, connectors_env: dict[str, str], tmp_path: Path
) -> None:
    connector: dict[str, Any] = {
        "name": "copy",
        "tasks_max": 2,
        "transport": {
            "name": "postgres_input",
            "config": {
                "postgres_conn_id": airflow_conn,
                "query": "SELECT id, name FROM orders",
                "partition_column": "id",
            },
        },
    }
    dags = write_pipeline(
        "pgconn",
        {
            "orders": {
                "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR"},
                "sink": {
                    "name": "postgres",
                    "config": {"postgres_conn_id": airflow_conn, "table": "orders_copy"},
                },
                "connectors": [connector],
            }
        },
    )
    assert VAR not in os.environ  # Airflow's database only
    run = dags["pgconn.orders.copy"].test()
    states = task_states(run)
    assert str(run.state) == "success", states
    assert sorted(i for (task, i) in states if task == "ingest") == [0, 1]  # two ranges
    with psycopg.connect(
        f"postgresql://postgres@127.0.0.1:5432/{database}", autocommit=True
    ) as conn:
        rows = conn.execute("SELECT id, name FROM orders_copy ORDER BY id").fetchall()
        recorded = conn.execute("SELECT count(*) FROM _ac_sink_batches").fetchone()
    assert rows == [(i, f"n{i}") for i in range(50)]
    assert recorded == (2,)
    state = Path(connectors_env["AIRFLOW__CONNECTORS__STATE_STORE_URL"].removeprefix("sqlite:///"))
    assert PASSWORD.encode() not in state.read_bytes()
