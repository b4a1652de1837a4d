"""A connector DAG writing its table to a warehouse on S3 (the moto server on 127.0.0.1)
under real Airflow and a real spark-submit: the AWS variables reach the ingest job and
its Spark workers through their environment only; the secret key is on no command line
and in no task log."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import task_states, write_pipeline

from airflow_connectors.sinks._fs import parquet_dataset
from airflow_connectors.testing.s3server import ACCESS_KEY, SECRET_KEY


def _command_lines(stop: threading.Event, seen: list[str]) -> None:
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                with contextlib.suppress(OSError):
                    seen.append(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
        stop.wait(0.2)


def test_dag_run_ingests_into_an_s3_warehouse(
    connectors_env: dict[str, str],
    s3_server: Any,
    s3_bucket: str,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    warehouse = f"s3://{s3_bucket}/wh"
    monkeypatch.setenv("AIRFLOW__CONNECTORS__WAREHOUSE", warehouse)
    source = tmp_path / "in"
    source.mkdir()
    for f in range(2):
        lines = [json.dumps({"id": i}) for i in range(f * 100, (f + 1) * 100)]
        (source / f"f{f}.json").write_text("\n".join(lines) + "\n")
    dags = write_pipeline(
        "s3wh",
        {
            "rows": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(source), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        },
    )
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=_command_lines, args=(stop, seen), daemon=True)
    watcher.start()
    try:
        run = dags["s3wh.rows.files"].test()
    finally:
        stop.set()
        watcher.join()
    logs = capfd.readouterr()
    states = task_states(run)
    assert str(run.state) == "success", (states, logs.err[-3000:])
    assert states[("ingest", 0)] == "success"  # a real spark-submit wrote to S3
    assert any("spark-submit" in line or "SparkSubmit" in line for line in seen)

    dataset = parquet_dataset(f"{warehouse}/s3wh/rows")
    assert dataset is not None
    assert sorted(dataset.to_table().column("id").to_pylist()) == list(range(200))

    command_lines = "\n".join(seen)
    assert SECRET_KEY not in logs.out + logs.err, "the AWS secret key leaked into a task log"
    assert SECRET_KEY not in command_lines, "the AWS secret key is on a command line"
    assert ACCESS_KEY not in command_lines, "the AWS access key id is on a command line"
