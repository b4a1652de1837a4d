"""The repository's own dags/ folder: imports cleanly, one DAG per connector of
pipelines/demo.yaml, without importing pyspark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_connectors import __version__

# DagBag and the airflow CLI, in subprocesses.
pytestmark = pytest.mark.airflow

ROOT = Path(__file__).resolve().parents[2]


def test_repo_dags_folder_imports_without_errors_or_pyspark() -> None:
    probe = f"""
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={str(ROOT / "dags")!r})
print(json.dumps({{
    "errors": {{k: str(v) for k, v in bag.import_errors.items()}},
    "dags": {{d.dag_id: [sorted(d.tags), d.is_paused_upon_creation] for d in bag.dags.values()}},
    "pyspark": any(m.split(".")[0] == "pyspark" for m in sys.modules),
}}))
"""
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["errors"] == {} and out["pyspark"] is False
    assert out["dags"] == {
        "demo.numbers.backfill": [["pipeline:demo", "table:numbers"], False],
        "demo.numbers.live": [["pipeline:demo", "table:numbers"], True],
        "demo.price.backfill": [["label:price.backfill", "pipeline:demo", "table:price"], False],
        "demo.price.live": [["pipeline:demo", "table:price"], False],
    }


def test_provider_is_registered_with_airflow() -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__CONNECTORS__")}
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "get", "airflow-connectors", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == [{"Provider": "airflow-connectors", "Version": __version__}]
    config = subprocess.run(
        [sys.executable, "-m", "airflow", "config", "get-value", "connectors", "spark_master"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert config.stdout.strip() == "local[*]", config.stderr[-2000:]
