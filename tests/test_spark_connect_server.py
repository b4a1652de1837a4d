"""The tests' Spark Connect server (:mod:`airflow_connectors.testing.spark_connect`):
pyspark's client runs a Python job on it; a SIGKILL takes the server with its Python
workers, and it comes back on the same port."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

from airflow_connectors.testing.spark_connect import port_open
from airflow_connectors.testing.standalone import alive

# In the main lane (no marker): it shares the session's spark_connect_server with the
# other unmarked Spark Connect tests, and the side lane is the longer one.


def run_squares(url: str, n: int) -> list[Any]:
    """Each id's square below ``n`` and the pid of the Python worker that computed it, in
    three partitions on the server of ``url`` (a client session of its own)."""
    # The Spark Connect client's own builder: pyspark.sql's builder.remote() marks the
    # whole process as a Spark Connect client (SPARK_CONNECT_MODE_ENABLED), and the
    # classic sessions of later tests (and their spark-submits) would refuse to start.
    from pyspark.sql.connect.session import SparkSession

    def squares(batches: Iterator[Any]) -> Iterator[Any]:
        # Defined here so cloudpickle sends it by value: the server cannot import tests.
        import os

        import pyarrow as pa

        for batch in batches:
            ids = batch.column("id").to_pylist()
            yield pa.RecordBatch.from_pydict(
                {"id": ids, "square": [i * i for i in ids], "pid": [os.getpid()] * len(ids)}
            )

    session = SparkSession.builder.remote(url).create()
    try:
        df = session.range(0, n, 1, 3).mapInArrow(squares, "id long, square long, pid long")
        return list(df.collect())
    finally:
        session.stop()


def test_a_client_runs_python_on_the_server_which_comes_back_after_a_kill(
    spark_connect_server: Any,
) -> None:
    from airflow_connectors.engine.connect import forget_session

    server = spark_connect_server
    assert server.url == f"sc://127.0.0.1:{server.port}"
    rows = run_squares(server.url, 30)
    assert sorted((r.id, r.square) for r in rows) == [(i, i * i) for i in range(30)]
    workers = {r.pid for r in rows}
    assert os.getpid() not in workers  # computed in the server's Python workers
    assert all(alive(pid) for pid in workers)

    forget_session(server.url)  # sessions of this process die with the server
    try:
        server.kill()
        assert not server.running()
        assert not port_open(server.port)
        # The server's Python workers exit once their daemon is gone: a moment later.
        deadline = time.monotonic() + 15
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in workers)
    finally:
        server.start()
    assert port_open(server.port)
    again = run_squares(server.url, 7)
    assert sorted((r.id, r.square) for r in again) == [(i, i * i) for i in range(7)]
