"""A batch as DataFrame operations on a Spark Connect session: the tasks' credentials
travel in the pickled task function and leave no trace in the server's Python workers."""

from __future__ import annotations

import base64
import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers import pipeline, read_table

from airflow_connectors.engine.batch import _failure, is_connect, run_batch
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.engine.discovery import context, discover
from airflow_connectors.settings import Settings
from airflow_connectors.state.store import StateStore
from airflow_connectors.testing.sink_kit import StalledBodies, body_of

# In the main lane (no marker): it shares the session's spark_connect_server with the
# other unmarked Spark Connect tests, and the side lane is the longer one.

PASSWORD = f"pw-{uuid.uuid4().hex}"
CONN_ID = "h1_batch_http"
VARIABLE = f"AIRFLOW_CONN_{CONN_ID.upper()}"
ROWS = 50


def _worker_environment(batches: Iterator[Any]) -> Iterator[Any]:
    """A Spark task: its Python worker's connection variables and whether any variable
    holds the test's password (pickled by value: the server cannot import this module)."""
    leaked = [k for k, v in os.environ.items() if k.startswith("AIRFLOW_CONN_") or PASSWORD in v]
    for batch in batches:
        yield pa.RecordBatch.from_pydict({"leak": [",".join(leaked)] * batch.num_rows})


@pytest.fixture(scope="module")
def connect(spark_connect_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from airflow_connectors.engine.connect import connect_session

    root = tmp_path_factory.mktemp("h1-connect")
    settings = Settings(state_store_url=f"sqlite:///{root / 's.db'}", warehouse=str(root))
    return connect_session(spark_connect_server.url, settings)


def test_a_batch_reads_with_its_connection_and_leaves_no_credential(
    connect: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark import cloudpickle

    basic = "Basic " + base64.b64encode(f"reader:{PASSWORD}".encode()).decode()
    server = StalledBodies(required_headers={"Authorization": basic})
    rows = pa.table({"id": list(range(ROWS)), "name": [f"n{i}" for i in range(ROWS)]})
    server.add("/data.json", body_of(rows))
    port = server.server.server_port
    monkeypatch.setenv(
        VARIABLE,
        json.dumps(
            {"conn_type": "http", "host": "127.0.0.1", "port": port}
            | {"login": "reader", "password": PASSWORD}
        ),
    )
    try:
        spec = pipeline(
            {
                "t": {
                    "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR"},
                    "connectors": [
                        {
                            "name": "c",
                            "transport": {
                                "name": "url_input",
                                "config": {"http_conn_id": CONN_ID, "path": "/data.json"},
                            },
                            "format": {"name": "json", "config": {"update_format": "raw"}},
                        }
                    ],
                }
            }
        )
        table = spec.tables[0]
        wh = str(tmp_path / "wh")
        store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
        [batch_id] = discover(store, context(spec, table, table.connectors[0], wh)).batch_ids
        assert is_connect(connect)
        result = run_batch(store, batch_id, lambda: connect)
    finally:
        server.close()
    assert result.committed and result.records == ROWS
    got = read_table(wh, "p", "t").sort_by("id")
    assert got.select(["id", "name"]).to_pylist() == rows.to_pylist()
    # The executors read with the credential (a request without it is refused), and
    # the workers that ran the batch keep no trace of it.
    assert server.refused == 0
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        probe = connect.range(0, 4, 1, 2).mapInArrow(_worker_environment, "leak string")
        assert [r.leak for r in probe.collect()] == [""] * 4
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_spark_connect_errors_are_one_line(tmp_path: Path) -> None:
    """The client's errors for a lost server, a Python worker's failure and a worker
    without this package (real exception classes of pyspark's Spark Connect client,
    with the texts they carry; injected: a dying server is the kits' crash check)."""
    from pyspark.errors.exceptions.connect import PythonException, SparkConnectGrpcException

    spec = pipeline(
        {
            "t": {
                "columns": {"id": "BIGINT"},
                "connectors": [{"name": "c", "transport": {"name": "datagen", "config": {}}}],
            }
        }
    )
    ctx = BatchContext(
        pipeline="p",
        table=spec.tables[0],
        connector=spec.tables[0].connectors[0],
        warehouse=str(tmp_path),
    )
    lost = SparkConnectGrpcException(
        "<_MultiThreadedRendezvous of RPC that terminated with:\n\tstatus = "
        'StatusCode.UNAVAILABLE\n\tdetails = "Socket closed"\n>'
    )
    assert _failure(lost, ctx, 3) == (
        "connector p.t.c: batch 3: the Spark Connect server stopped answering while the "
        "batch ran (UNAVAILABLE); the next run retries it",
        "transport",
    )
    trace = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\n'
    worker = PythonException(
        f"[PYTHON_EXCEPTION] An exception was thrown from the Python "
        f"worker.\n{trace}ValueError: bad thing\n"
    )
    message, kind = _failure(worker, ctx, 3)
    assert (message, kind) == (
        "connector p.t.c: batch 3 failed in Spark: ValueError: bad thing",
        "transport",
    )
    missing = PythonException(f"{trace}ModuleNotFoundError: No module named 'airflow_connectors'")
    message, _ = _failure(missing, ctx, 3)
    assert "\n" not in message and "airflow_connectors" in message
