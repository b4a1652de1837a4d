"""What only Spark Connect has, in the sink kit's crash checks: the client (the process
running the batch; its tasks run on a Spark Connect server) SIGKILLed while the server
runs its task, and the server SIGKILLed while a task reads; the next run re-runs the
batch and the table is exact. The kill at every fail point runs in the sinks' own
modules, on Spark Connect (``execution: spark_connect``) and, for Parquet, on
spark-submit; here the Parquet class adds the server's kill and a client kill at three
points on a server of this module's own that the kills may take down."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_connectors.testing.sink_kit import SparkConnectCrashes, SparkConnectServerKill

# In the main lane (no lane marker): the side lane (cluster, then sources) is the longer one.
pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def killable_spark_connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark Connect server of this module's own (local[2]): the kits kill it."""
    from airflow_connectors.testing.spark_connect import SparkConnectServer

    root: Path = tmp_path_factory.mktemp("spark-connect-kits")
    with SparkConnectServer(root) as server:
        yield server


@pytest.fixture(scope="module")
def spark_connect_server(killable_spark_connect_server: Any) -> Any:
    """The changes kit's server: this module's (started again after the kills)."""
    return killable_spark_connect_server


class TestParquetOnSparkConnect(SparkConnectServerKill):
    """The Parquet sink's batches on Spark Connect, killed client and killed server (the
    server's kill here only: what it checks is the engine's, not the sink's)."""

    sink_name = "parquet"


class TestDeltaOnSparkConnect(SparkConnectCrashes):
    """The Delta sink: the client killed while its task runs on the server (the point
    kills are TestDeltaSink's, on Spark Connect)."""

    sink_name = "delta"
    connect_fail_points = ()
    test_client_killed_then_next_run = None


class TestIcebergOnSparkConnect(SparkConnectCrashes):
    """The Iceberg sink: the client killed while its task runs on the server."""

    sink_name = "iceberg"
    connect_fail_points = ()
    test_client_killed_then_next_run = None


#: The suite's PostgreSQL server (scripts/services.sh).
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="module")
def pg_schemas() -> Iterator[Callable[[], str]]:
    """A factory of fresh schemas, all dropped at the end."""
    import psycopg

    made: list[str] = []

    def make() -> str:
        name = f"ac_pgconnect_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        made.append(name)
        return name

    yield make
    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        for name in made:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


class TestPostgresOnSparkConnect(SparkConnectCrashes):
    """The PostgreSQL sink (the tables in a schema of each case's own): the client
    killed while its task runs on the server."""

    sink_name = "postgres"
    connect_fail_points = ()
    test_client_killed_then_next_run = None

    @pytest.fixture(scope="class")
    @classmethod
    def sink_config(cls, pg_schemas: Callable[[], str]) -> Callable[[str], dict[str, Any]]:
        return lambda case: {"uri": POSTGRES, "schema": pg_schemas()}
