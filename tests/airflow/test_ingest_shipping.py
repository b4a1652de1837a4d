"""The ingest task's spark-submit on a cluster master carries the package for the
executors (``--py-files``) and their Python (``spark.pyspark.python``), and the
driver's Python stays the task's; ``ship_package: never`` leaves the package out."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def cluster_env(connectors_env: dict[str, str]) -> Iterator[dict[str, str]]:
    env = {
        "AIRFLOW__CONNECTORS__SPARK_MASTER": "spark://127.0.0.1:7077",
        "AIRFLOW__CONNECTORS__EXECUTOR_PYTHON": "/opt/workers/bin/python",
    }
    # The ingest operator defines the default Spark connection in this process's
    # environment (AIRFLOW_CONN_CONNECTORS_SPARK): restored too.
    restored = [*env, "AIRFLOW__CONNECTORS__SHIP_PACKAGE", "AIRFLOW_CONN_CONNECTORS_SPARK"]
    old = {k: os.environ.get(k) for k in restored}
    # An earlier task of this test session may have defined it for its local master.
    os.environ.pop("AIRFLOW_CONN_CONNECTORS_SPARK", None)
    os.environ.update(env)
    yield env
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _command() -> list[str]:
    from airflow_connectors.airflow.operators.connector import ConnectorIngestOperator

    op = ConnectorIngestOperator(task_id="ingest", batch_id=1, pipeline="p", endpoint="t.c")
    hook = op._get_hook()
    return list(hook._build_spark_submit_command("app.py"))


def test_ingest_on_a_cluster_ships_the_package(cluster_env: dict[str, str]) -> None:
    command = _command()
    assert command[command.index("--master") + 1] == "spark://127.0.0.1:7077"
    zipped = Path(command[command.index("--py-files") + 1])
    assert zipped.is_file() and zipped.name.startswith("airflow_connectors-")
    text = " ".join(command)
    assert "spark.pyspark.python=/opt/workers/bin/python" in text
    assert f"spark.pyspark.driver.python={sys.executable}" in text


def test_ship_package_never_leaves_it_out(cluster_env: dict[str, str]) -> None:
    os.environ["AIRFLOW__CONNECTORS__SHIP_PACKAGE"] = "never"
    command = _command()
    assert "--py-files" not in command
    assert "spark.pyspark.python=/opt/workers/bin/python" in " ".join(command)
