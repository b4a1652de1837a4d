"""docker-compose.yaml (the scale-out deployment) is a valid Compose file with the
services the README describes. Validated by `docker-compose config`, which needs no
Docker engine."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


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


def test_compose_file_validates_and_has_the_scale_out_services() -> None:
    proc = subprocess.run(
        [*compose_command(), "-f", str(ROOT / "docker-compose.yaml"), "config"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    config = yaml.safe_load(proc.stdout)
    services = config["services"]
    assert {
        "postgres",
        "minio",
        "spark-master",
        "spark-worker",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
    } <= set(services)
    scheduler = services["airflow-scheduler"]["environment"]
    assert scheduler["AIRFLOW__CONNECTORS__STATE_STORE_URL"].startswith("postgresql+psycopg://")
    assert "spark://spark-master" in scheduler["AIRFLOW_CONN_CONNECTORS_SPARK"]
