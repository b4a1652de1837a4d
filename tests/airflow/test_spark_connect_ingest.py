"""``execution: spark_connect`` end to end (issue 26): the ingest task of a real Airflow
DAG run (``dag.test()``) is a client of a real Spark Connect server, through the Spark
provider's ``spark_connect`` connection with a token; the embedded runner and the CLI
through ``[connectors] spark_connect_url``. No spark-submit runs. The token (the
connection's password, or the URL's ``;token=``) appears in no log line or message; a
server that does not answer fails the ingest task in one line.

One server with a token serves the module (the suite's shared server has none); its
Python workers lack this package, which reaches them as an artifact of each client.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
import yaml
from conftest import task_states, write_pipeline

TOKEN = "Sc-T0ken-4f2a91"
CONN_VAR = "AIRFLOW_CONN_CONNECTORS_SPARK_CONNECT"
SETTINGS = (
    CONN_VAR,
    "AIRFLOW__CONNECTORS__EXECUTION",
    "AIRFLOW__CONNECTORS__SPARK_CONNECT_URL",
)
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR"}


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark Connect server that requires :data:`TOKEN` (from its environment, never
    its command line), whose Python workers cannot import this package unless a client
    sends it (as on a real cluster): the batches prove the artifact reaches them."""
    from airflow_connectors.testing.spark_connect import SparkConnectServer
    from airflow_connectors.testing.spark_standalone import executor_python

    root = tmp_path_factory.mktemp("spark-connect-token")
    with SparkConnectServer(
        root, "local[1]", token=TOKEN, executor_python=executor_python(root)
    ) as server:
        yield server


@pytest.fixture
def connect_env(connectors_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The tests' Spark Connect settings and connection, restored after each test."""
    old = {k: os.environ.get(k) for k in SETTINGS}
    for k in SETTINGS:
        os.environ.pop(k, None)
    yield connectors_env
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def csv_folder(root: Path, rows: list[tuple[int, str]]) -> Path:
    folder = root / "src"
    folder.mkdir(parents=True)
    (folder / "part-1.csv").write_text("id,name\n" + "".join(f"{i},{name}\n" for i, name in rows))
    return folder


def files_connector(name: str, folder: Path, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "transport": {"name": "file_input", "config": {"path": str(folder), "min_file_age": 0}},
        "format": {"name": "csv", "config": {"headers": True}},
        **extra,
    }


def table_rows(warehouse: str | Path, pipeline: str, table: str) -> list[tuple[int, str]]:
    data = ds.dataset(str(Path(warehouse) / pipeline / table), format="parquet").to_table()
    return sorted(zip(data.column("id").to_pylist(), data.column("name").to_pylist(), strict=True))


def connector_error(env: dict[str, str], pipeline: str, table: str, name: str) -> str | None:
    from airflow_connectors.state.store import ConnectorRef, StateStore

    store = StateStore(env["AIRFLOW__CONNECTORS__STATE_STORE_URL"])
    try:
        st = store.status(ConnectorRef(pipeline, table, name))
        return st.fatal_error if st is not None else None
    finally:
        store.close()


def test_an_ingest_task_runs_its_batch_on_the_spark_connect_server(
    connect_env: dict[str, str],
    token_server: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    rows = [(n, f"name-{n}") for n in range(1, 41)]
    folder = csv_folder(tmp_path, rows)
    # The Spark provider's connection: host, port, and the token as its password.
    os.environ[CONN_VAR] = json.dumps(
        {
            "conn_type": "spark_connect",
            "host": "sc://127.0.0.1",
            "port": token_server.port,
            "password": TOKEN,
        }
    )
    dags = write_pipeline(
        "scx",
        {
            "rows": {
                "columns": COLUMNS,
                "connectors": [files_connector("files", folder, execution="spark_connect")],
            }
        },
    )
    run = dags["scx.rows.files"].test()
    logs = capfd.readouterr()
    text = logs.out + logs.err
    states = task_states(run)
    assert str(run.state) == "success", states
    assert states[("ingest", 0)] == "success"
    assert table_rows(connect_env["AIRFLOW__CONNECTORS__WAREHOUSE"], "scx", "rows") == rows
    assert (
        f"connector scx.rows.files: batch 1 runs on Spark Connect server "
        f"sc://127.0.0.1:{token_server.port} (the Airflow connection "
        "'connectors_spark_connect')"
    ) in text
    assert "Spark-Submit cmd" not in text  # no spark-submit ran
    # One batch planned: the discover task ran it (no second task process between the
    # file and its rows); the ingest task, after it, found it committed.
    ran = "connector scx.rows.files: batch 1 ingested on Spark Connect in "
    found = "connector scx.rows.files: batch 1 needed nothing on Spark Connect in "
    assert text.count(ran) == 1 and text.count(found) == 1
    assert text.index(ran) < text.index(found)
    assert TOKEN not in text
    assert TOKEN not in Path(token_server.log_path).read_text(errors="replace")


def test_several_batches_run_in_their_own_ingest_tasks(
    connect_env: dict[str, str],
    token_server: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    rows = [(n, f"name-{n}") for n in range(1, 21)]
    folder = csv_folder(tmp_path, rows[:10])
    (folder / "part-2.csv").write_text(
        "id,name\n" + "".join(f"{i},{name}\n" for i, name in rows[10:])
    )
    os.environ["AIRFLOW__CONNECTORS__SPARK_CONNECT_URL"] = (
        f"sc://127.0.0.1:{token_server.port}/;token={TOKEN}"
    )
    dags = write_pipeline(
        "scmany",
        {
            "rows": {
                "columns": COLUMNS,
                "connectors": [
                    files_connector("files", folder, execution="spark_connect", tasks_max=2)
                ],
            }
        },
    )
    run = dags["scmany.rows.files"].test()
    logs = capfd.readouterr()
    text = logs.out + logs.err
    states = task_states(run)
    assert str(run.state) == "success", states
    assert states[("ingest", 0)] == states[("ingest", 1)] == "success"
    assert table_rows(connect_env["AIRFLOW__CONNECTORS__WAREHOUSE"], "scmany", "rows") == rows
    # Two batches: each ran in its ingest task (in parallel on a real executor), none
    # in the discover task.
    for batch in (1, 2):
        assert text.count(f"scmany.rows.files: batch {batch} ingested on Spark Connect in ") == 1
    assert "needed nothing on Spark Connect" not in text
    assert TOKEN not in text


def test_an_unreachable_server_fails_the_ingest_task_in_one_line(
    connect_env: dict[str, str], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # No connection: the URL of [connectors]; spark_connect as the default execution.
    port = free_port()
    os.environ["AIRFLOW__CONNECTORS__SPARK_CONNECT_URL"] = f"sc://127.0.0.1:{port}/;token={TOKEN}"
    os.environ["AIRFLOW__CONNECTORS__EXECUTION"] = "spark_connect"
    folder = csv_folder(tmp_path, [(1, "a")])
    dags = write_pipeline(
        "scdown",
        {"rows": {"columns": COLUMNS, "connectors": [files_connector("files", folder)]}},
    )
    run = dags["scdown.rows.files"].test()
    logs = capfd.readouterr()
    text = logs.out + logs.err
    states = task_states(run)
    assert str(run.state) == "failed"
    assert states[("ingest", 0)] == "failed", states
    line = (
        f"connector scdown.rows.files: Spark Connect server sc://127.0.0.1:{port} is not "
        "reachable (Connection refused); start it (scripts/quickstart.sh --spark connect "
        "starts one) or point [connectors] spark_connect_url at a running server"
    )
    assert line in text
    assert connector_error(connect_env, "scdown", "rows", "files") == line
    assert TOKEN not in text
    assert "grpc" not in text.lower()  # no client internals, no trace of them


@pytest.mark.spark  # the CLI's run starts the module's Spark Connect server
def test_the_cli_runs_spark_connect_connectors_on_the_configured_server(
    token_server: Any, tmp_path: Path
) -> None:
    rows = [(n, f"cli-{n}") for n in range(1, 8)]
    folder = csv_folder(tmp_path, rows)
    spec = tmp_path / "cli.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "pipeline": "sccli",
                "tables": {
                    "rows": {"columns": COLUMNS, "connectors": [files_connector("files", folder)]}
                },
            }
        )
    )
    warehouse = tmp_path / "warehouse"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "home"),
        "AIRFLOW__CONNECTORS__STATE_STORE_URL": f"sqlite:///{tmp_path / 'state.db'}",
        "AIRFLOW__CONNECTORS__WAREHOUSE": str(warehouse),
        "AIRFLOW__CONNECTORS__EXECUTION": "spark_connect",
        "AIRFLOW__CONNECTORS__SPARK_CONNECT_URL": f"{token_server.url}/;token={TOKEN}",
    }
    env.pop(CONN_VAR, None)
    cli = str(Path(sys.executable).parent / "airflow-connectors")
    out = subprocess.run(
        [cli, "run", str(spec)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr
    assert table_rows(warehouse, "sccli", "rows") == rows
    assert "pipeline sccli: 1 batch(es) committed in this run" in out.stdout
    assert TOKEN not in out.stdout + out.stderr


def test_a_wrong_token_is_refused_in_one_line(token_server: Any) -> None:
    from airflow_connectors.engine.connect import SparkConnectRefused, connect_session
    from airflow_connectors.settings import Settings

    with pytest.raises(SparkConnectRefused) as e:
        connect_session(f"{token_server.url}/;token=not-{TOKEN}", Settings.load())
    assert str(e.value) == (
        f"Spark Connect server {token_server.url} refused the client (Invalid authentication "
        "token); give [connectors] spark_connect_url the token the server expects (its "
        "spark.connect.authenticate.token, or SPARK_CONNECT_AUTHENTICATE_TOKEN in its "
        "environment)"
    )


def test_a_url_is_named_without_its_token() -> None:
    from airflow_connectors.engine.connect import server_address, url_token

    url = f"sc://127.0.0.1:15002/;user_id=me;token={TOKEN}"
    assert (server_address(url), url_token(url)) == ("sc://127.0.0.1:15002", TOKEN)
    assert (server_address("sc://spark.example"), url_token("sc://spark.example/")) == (
        "sc://spark.example:15002",
        None,
    )
