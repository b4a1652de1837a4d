"""The README's main command, end to end: scripts/quickstart.sh sets up, runs the example
pipeline through a real Airflow scheduler and local Spark, prints the results, exits 0."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_main_command_runs_the_example_pipeline_through_airflow(tmp_path: Path) -> None:
    env = {**os.environ, "AIRFLOW_CONNECTORS_QUICKSTART_HOME": str(tmp_path / "home")}
    for key in ("AIRFLOW_HOME", "AIRFLOW__CORE__DAGS_FOLDER"):
        env.pop(key, None)
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "quickstart.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout
    assert proc.returncode == 0, (out + proc.stderr)[-4000:]
    assert "demo.price.live: asset-triggered run success" in out
    assert "connector DAG demo.numbers.live: paused" in out
    assert "numbers.backfill: RUNNING, 100000 records, end_of_input=True" in out
    assert "table numbers: 100000 rows" in out
    assert "table price: 1010 rows" in out
