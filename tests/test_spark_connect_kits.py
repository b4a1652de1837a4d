"""The sink and changes kits' crash checks with the batch on a Spark Connect server
(``execution: spark_connect``): the process running the batch is a Spark Connect client
(its plan, fail points and commit here, its Spark tasks on the server's executors), and
either it or the server is SIGKILLed mid-batch; the next run re-runs the batch and the
table is exact. Lean on purpose (a few representative kills, one server of this module's
own that the kills may take down): the full matrix runs under spark-submit in the sinks'
own modules. Parquet (parts moved in one by one), Delta (one commit per batch), Iceberg
(one snapshot per batch, the catalog in the state store's database), PostgreSQL (one
transaction per batch) and a keyed Delta table."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_connectors.testing.changes_kit import ChangesConnectCrashes
from airflow_connectors.testing.sink_kit import SparkConnectCrashes, SparkConnectServerKill

# In the main lane (no marker): the side lane (cluster, then sources) is the longer one.


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
    """The Delta sink's batches on Spark Connect, the client killed."""

    sink_name = "delta"
    # The point kills of the Parquet class cover the engine's points; here the client
    # dies after the state store's commit, before the Delta commit.
    connect_fail_points = ("after_commit",)


class TestIcebergOnSparkConnect(SparkConnectCrashes):
    """The Iceberg sink's batches on Spark Connect: the client dies after the state
    store's commit, before the Iceberg commit, and the killed client mid-task."""

    sink_name = "iceberg"
    connect_fail_points = ("after_commit",)


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
    """The PostgreSQL sink's batches on Spark Connect (the tables in a schema of each
    case's own), the client killed after the state store's commit."""

    sink_name = "postgres"
    connect_fail_points = ("after_commit",)

    @pytest.fixture(scope="class")
    @classmethod
    def sink_config(cls, pg_schemas: Callable[[], str]) -> Callable[[str], dict[str, Any]]:
        return lambda case: {"uri": POSTGRES, "schema": pg_schemas()}


class TestDeltaChangesOnSparkConnect(ChangesConnectCrashes):
    """A keyed Delta table's batch on Spark Connect, its client killed after the state
    store's commit (the publish MERGE not yet made)."""

    sink_name = "delta"
    connect_changes_points = ("after_commit",)
