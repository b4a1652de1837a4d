"""``bash scripts/cluster.sh up|status|down`` in a folder of its own: ``up`` starts every
component of the scale-out deployment detached (Spark master and workers, the S3 server,
Airflow's API server, scheduler, dag-processor, triggerer and two Celery workers, the
example's data server); ``down`` leaves no process and no database of it; the script's
errors are one line. (Tasks running on both Celery workers under their own hostnames
is test_cluster_e2e's, on the session's deployment, which ``up`` starts the same way.)"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from airflow_connectors.testing.cluster import MARKER, PG_ADMIN, Cluster
from airflow_connectors.testing.standalone import free_port, processes_with

# scripts/cluster.sh brings up the whole deployment.
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.spark,
    pytest.mark.airflow,
    pytest.mark.postgres,
    pytest.mark.s3,
    pytest.mark.redis,
]

ROOT = Path(__file__).resolve().parents[2]


def script(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "scripts/cluster.sh", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def databases(prefix: str) -> list[str]:
    engine = sa.create_engine(PG_ADMIN)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT datname FROM pg_database WHERE datname LIKE :p"),
                {"p": f"{prefix}%"},
            )
            return [r[0] for r in rows]
    finally:
        engine.dispose()


def test_up_status_down(tmp_path: Path) -> None:
    root, dags = tmp_path / "cluster", tmp_path / "dags"
    dags.mkdir()
    port, data_port = free_port(), free_port()
    up = script("up", "--root", str(root), "--dags", str(dags), "--port", str(port),
                "--data-port", str(data_port))  # fmt: skip
    cluster = Cluster.load(root) if (root / "cluster.json").exists() else None
    try:
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        assert f"Airflow UI     http://127.0.0.1:{port}  (user admin, password admin)" in up.stdout
        assert cluster is not None
        for url in (cluster.spark.master_url, cluster.s3.endpoint_url, cluster.state_store_url):
            assert url in up.stdout
        assert (
            "AWS_SECRET" not in up.stdout and cluster.env["AWS_SECRET_ACCESS_KEY"] not in up.stdout
        )

        components = cluster.status()["components"]
        assert set(components) == {
            "s3", "spark-master", "spark-worker-0", "spark-worker-1", "api-server", "scheduler",
            "dag-processor", "triggerer", "celery-0", "celery-1", "price-data",
        }  # fmt: skip
        assert all(c["running"] for c in components.values()), components
        assert all(components[f"celery-{i}"]["answers"] for i in (0, 1)), components
        assert cluster.healthy()
        assert cluster.spark.alive_workers() == 2
        assert sorted(databases(f"ac_cluster_{cluster.id}_")) == sorted(cluster.databases)
        buckets = cluster.s3.client().list_buckets()["Buckets"]
        assert "warehouse" in {b["Name"] for b in buckets}

        status = script("status", "--root", str(root))
        assert status.returncode == 0, status.stdout + status.stderr
        for name in components:
            assert any(
                line.split()[:2] == [name, "running"] for line in status.stdout.splitlines()
            ), status.stdout
    finally:
        down = script("down", "--root", str(root))
    assert down.returncode == 0, down.stdout + down.stderr
    assert cluster is not None
    assert "stopped 11 processes" in down.stdout, down.stdout

    assert not processes_with(MARKER, cluster.id)
    assert cluster.running() == []  # by the PIDs and start times up recorded
    assert not databases(f"ac_cluster_{cluster.id}_")
    again = Cluster.load(root)
    assert again.running() == [] and again.databases == []
    status = script("status", "--root", str(root))
    assert status.returncode == 3 and "0 of 11 processes running" in status.stdout
    down = script("down", "--root", str(root))
    assert down.returncode == 0 and "no process was running" in down.stdout


def test_up_on_a_taken_port_fails_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        up = script("up", "--root", str(tmp_path / "cluster"), "--port", str(port))
    assert up.returncode == 1
    assert up.stderr.strip().splitlines() == [
        f"cluster: port {port} on 127.0.0.1 is in use; stop what uses it or pass another --port"
    ]
    assert not (tmp_path / "cluster" / "cluster.json").exists()
