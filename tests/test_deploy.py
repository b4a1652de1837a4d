"""docker-compose.yaml (the scale-out deployment) is a valid Compose file with the
topology of ``scripts/cluster.sh`` and deploy/README.md: Airflow with the CeleryExecutor
(Redis broker, two Celery workers), PostgreSQL for Airflow and the state store, a Spark
master with two workers, and the warehouse on the S3 server. Validated by
``docker-compose config``, which needs no Docker engine, and by reading the file."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

# docker-compose config, in subprocesses.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yaml"
AIRFLOW_COMPONENTS = {
    "airflow-apiserver": "airflow api-server",
    "airflow-scheduler": "airflow scheduler",
    "airflow-dag-processor": "airflow dag-processor",
    "airflow-triggerer": "airflow triggerer",
}


def compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if (
        shutil.which("docker")
        and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        return ["docker", "compose"]
    pytest.fail(
        "neither docker-compose nor the docker compose plugin is installed; "
        "install one (Debian: apt-get install docker-compose) to validate docker-compose.yaml"
    )


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    """The services as ``docker-compose config`` resolves them (anchors merged)."""
    proc = subprocess.run(
        [*compose_command(), "-f", str(COMPOSE), "config"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    config = yaml.safe_load(proc.stdout)
    result: dict[str, Any] = config["services"]
    return result


def command(service: dict[str, Any]) -> str:
    cmd = service.get("command", "")
    return " ".join(cmd) if isinstance(cmd, list) else str(cmd)


def airflow_services(services: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: s
        for name, s in services.items()
        if "AIRFLOW__CORE__EXECUTOR" in s.get("environment", {})
    }


def test_compose_file_parses_and_validates_as_the_same_document() -> None:
    # The raw file is YAML a reader can load (anchors and merges resolve) and names the
    # same services `docker-compose config` does.
    raw = yaml.safe_load(COMPOSE.read_text())
    proc = subprocess.run(
        [*compose_command(), "-f", str(COMPOSE), "config", "--services"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) == set(raw["services"])


def test_airflow_runs_the_celery_executor_on_redis_and_postgresql(
    services: dict[str, Any],
) -> None:
    for name, cmd in AIRFLOW_COMPONENTS.items():
        assert command(services[name]) == cmd, name
    workers = {n: s for n, s in services.items() if "celery worker" in command(s)}
    assert sorted(workers) == ["airflow-worker-1", "airflow-worker-2"]
    for name, worker in workers.items():
        assert command(worker) == "airflow celery worker --concurrency 2"
        # The API server fetches task logs from each worker by its hostname.
        assert worker["hostname"] == name
        assert {"redis", "postgres"} <= set(worker["depends_on"])
    airflow = airflow_services(services)
    assert set(AIRFLOW_COMPONENTS) | set(workers) | {"airflow-init"} == set(airflow)
    for name, s in airflow.items():
        env = s["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert env["AIRFLOW__CELERY__BROKER_URL"] == "redis://redis:6379/0", name
        assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql"), name
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg://"), name
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith(
            "http://airflow-apiserver:8080/"
        ), name
    assert "redis-cli" in " ".join(services["redis"]["healthcheck"]["test"])


def test_state_store_and_warehouse_live_in_postgresql_and_the_s3_server(
    services: dict[str, Any],
) -> None:
    init_sql = (ROOT / "deploy" / "postgres-init.sql").read_text()
    minio_init = command(services["minio-init"])
    for name, s in airflow_services(services).items():
        env = s["environment"]
        store = env["AIRFLOW__CONNECTORS__STATE_STORE_URL"]
        assert store.startswith("postgresql+psycopg://") and "@postgres:5432/" in store, name
        database = store.rsplit("/", 1)[1]
        assert re.search(rf"CREATE DATABASE {database}\b", init_sql), (name, database)
        warehouse = env["AIRFLOW__CONNECTORS__WAREHOUSE"]
        assert warehouse.startswith("s3://"), name
        bucket = warehouse.removeprefix("s3://").split("/")[0]
        assert f"mc mb --ignore-existing local/{bucket}" in minio_init
        assert env["AWS_ENDPOINT_URL"] == "http://minio:9000", name
        # The executors run the image's Python.
        assert env["AIRFLOW__CONNECTORS__EXECUTOR_PYTHON"] == "/usr/local/bin/python", name
    # No disk is shared between drivers (Airflow workers) and executors (Spark workers):
    # the only volumes are the databases', the object store's and the DAG sources.
    for name, s in services.items():
        for volume in s.get("volumes", []):
            source = volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
            target = volume["target"] if isinstance(volume, dict) else volume.split(":")[1]
            assert not any(w in f"{source} {target}".lower() for w in ("warehouse", "/data/wh")), (
                name,
                volume,
            )


def test_spark_standalone_master_with_two_workers_and_the_connection_to_it(
    services: dict[str, Any],
) -> None:
    master = command(services["spark-master"])
    assert "org.apache.spark.deploy.master.Master" in master
    assert "--host spark-master --port 7077" in master
    workers = {
        n: s for n, s in services.items() if "org.apache.spark.deploy.worker.Worker" in command(s)
    }
    assert sorted(workers) == ["spark-worker-1", "spark-worker-2"]
    for name, worker in workers.items():
        assert "spark://spark-master:7077" in command(worker), name
        assert "spark-master" in worker["depends_on"], name
        assert not worker.get("volumes"), name
    for name, s in airflow_services(services).items():
        conn = json.loads(s["environment"]["AIRFLOW_CONN_CONNECTORS_SPARK"])
        assert conn == {"conn_type": "spark", "host": "spark://spark-master", "port": 7077}, name


def test_the_spark_connection_resolves_to_the_master_in_client_deploy_mode(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The provider's own hook reads the connection as the ingest tasks do: the standalone
    # master, client deploy mode (Python apps cannot run in cluster mode on standalone).
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    env = services["airflow-worker-1"]["environment"]
    monkeypatch.setenv("AIRFLOW_CONN_CONNECTORS_SPARK", env["AIRFLOW_CONN_CONNECTORS_SPARK"])
    hook = SparkSubmitHook(conn_id="connectors_spark")
    assert hook._connection["master"] == "spark://spark-master:7077"
    assert hook._connection["deploy_mode"] is None
    assert not hook._should_track_driver_status


def test_every_setting_the_compose_file_gives_exists(services: dict[str, Any]) -> None:
    # AIRFLOW__<SECTION>__<KEY> variables name real options of Airflow (with the
    # installed providers) or of this package's [connectors] section: a typo would be
    # ignored silently by the deployment.
    from airflow.configuration import conf

    from airflow_connectors.settings import Settings

    described = conf.configuration_description
    ours = {f.name for f in dataclasses.fields(Settings)}
    seen = set()
    for s in airflow_services(services).values():
        for var in s["environment"]:
            m = re.fullmatch(r"AIRFLOW__([A-Z_]+?)__([A-Z_]+)", var)
            if m is None:
                continue
            section, key = m.group(1).lower(), m.group(2).lower()
            seen.add((section, key))
            if section == "connectors":
                assert key in ours, var
            else:
                assert key in described.get(section, {}).get("options", {}), var
    assert ("celery", "broker_url") in seen and ("connectors", "executor_python") in seen
