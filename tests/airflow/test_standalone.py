"""End to end through a real scheduler: ``airflow standalone`` on a free 127.0.0.1 port
(scheduler, triggerer, dag-processor, API server, LocalExecutor) runs the connector DAGs
with real spark-submit. Covers start_after through asset events, DAG and pipeline pause
(Feldera's 2x2 table), the new-data event trigger, and ``airflow backfill create`` over
date-sliced files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import EndToEnd

from airflow_connectors.testing.standalone import StandaloneAirflow

COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR"}
DAYS = ["2026-11-01", "2026-11-02", "2026-11-03"]


def lines(ids: range) -> str:
    return "".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in ids)


def json_format() -> dict[str, Any]:
    return {"name": "json", "config": {"update_format": "raw"}}


class Orchestra:
    """The running Airflow, this module's source folder and the pipeline's tables."""

    def __init__(self, e2e: EndToEnd, root: Path) -> None:
        self.e2e = e2e
        self.root = root
        self.airflow: StandaloneAirflow = e2e.airflow

    def ids(self, table: str) -> list[int]:
        return self.e2e.ids("orch", table)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "airflow_connectors.cli", *args],
            env=self.airflow.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def states(self, dag_id: str, run_id: str) -> dict[str, str]:
        return {
            f"{ti['task_id']}[{ti['map_index']}]": ti["state"]
            for ti in self.airflow.task_instances(dag_id, run_id)
        }


@pytest.fixture(scope="module")
def orch(e2e: EndToEnd, http_server: Any) -> Orchestra:
    root = e2e.folder("orch")
    (root / "watch").mkdir()
    for n, day in enumerate(DAYS):
        (root / "daily" / day).mkdir(parents=True)
        (root / "daily" / day / "part.json").write_text(lines(range(n * 100, n * 100 + 5)))
    http_server.files["/prices.json"] = lines(range(1, 21)).encode()
    (root / "prices-live.json").write_text(lines(range(1000, 1003)))
    spec = {
        "pipeline": "orch",
        "tables": {
            "prices": {
                "columns": COLUMNS,
                "connectors": [
                    {
                        "name": "backfill",
                        "labels": ["prices.backfill"],
                        "transport": {
                            "name": "url_input",
                            "config": {"path": http_server.url("/prices.json")},
                        },
                        "format": json_format(),
                    },
                    {
                        "name": "live",
                        "start_after": "prices.backfill",
                        "transport": {
                            "name": "file_input",
                            "config": {
                                "path": str(root / "prices-live.json"),
                                "follow": True,
                                "min_file_age": 0,
                            },
                        },
                        "format": json_format(),
                    },
                ],
            },
            "numbers": {
                "columns": COLUMNS,
                "connectors": [
                    {
                        "name": "gen",
                        "paused": True,
                        "transport": {"name": "datagen", "config": {"plan": [{"limit": 5}]}},
                    }
                ],
            },
            "events": {
                "columns": COLUMNS,
                "connectors": [
                    {
                        "name": "watch",
                        "trigger": {"on": "new_data", "poll_interval": 2},
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(root / "watch"), "min_file_age": 0},
                        },
                        "format": json_format(),
                    }
                ],
            },
            "daily": {
                "columns": COLUMNS,
                "connectors": [
                    {
                        "name": "slices",
                        "paused": True,
                        "trigger": {"schedule": "@daily", "start_date": DAYS[0]},
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(root / "daily" / "{{ ds }}"), "min_file_age": 0},
                        },
                        "format": json_format(),
                    }
                ],
            },
        },
    }
    e2e.add(
        {"orch.yaml": yaml.safe_dump(spec)},
        [
            "orch.prices.backfill",
            "orch.prices.live",
            "orch.numbers.gen",
            "orch.events.watch",
            "orch.daily.slices",
        ],
    )
    return Orchestra(e2e, root)


def test_start_after_runs_on_the_asset_event_only_after_backfill(orch: Orchestra) -> None:
    af = orch.airflow
    time.sleep(10)  # the scheduler had time to start the dependent early: it must not
    assert af.runs("orch.prices.live") == []

    run_id = af.trigger("orch.prices.backfill")
    backfill = af.wait_run("orch.prices.backfill", run_id)
    assert backfill["state"] == "success", orch.states("orch.prices.backfill", run_id)
    assert orch.states("orch.prices.backfill", run_id)["finished[-1]"] == "success"

    live = af.wait_runs("orch.prices.live", 1)
    assert [r["run_type"] for r in live] == ["asset_triggered"]
    assert live[0]["state"] == "success"
    tis = af.task_instances("orch.prices.backfill", run_id)
    ingest = [ti for ti in tis if ti["task_id"] == "ingest"]
    assert len(ingest) == 1 and re.fullmatch(r"batch \d+", ingest[0]["rendered_map_index"])
    finished = next(ti for ti in tis if ti["task_id"] == "finished")
    assert live[0]["start_date"] >= finished["end_date"]  # started by its asset event
    assert orch.ids("prices") == [*range(1, 21), 1000, 1001, 1002]


def test_dag_pause_and_pipeline_pause_each_stop_a_connector(orch: Orchestra) -> None:
    af, dag = orch.airflow, "orch.numbers.gen"
    # Paused DAG (created paused: `paused: true`), pipeline running: a run waits, unrun.
    queued = af.trigger(dag)
    time.sleep(15)
    assert af.runs(dag)[0]["state"] == "queued"
    assert orch.ids("numbers") == []

    # Both paused: still nothing.
    assert orch.cli("pipeline", "orch", "pause").returncode == 0
    time.sleep(5)
    assert af.runs(dag)[0]["state"] == "queued" and orch.ids("numbers") == []

    # DAG unpaused, pipeline paused: the run goes ahead but the gate skips it.
    af.set_paused(dag, False)
    run = af.wait_run(dag, queued)
    states = orch.states(dag, queued)
    assert run["state"] == "success" and states["gate[-1]"] == "skipped", states
    assert states["discover[-1]"] == "skipped" and orch.ids("numbers") == []

    # Both running: the connector ingests.
    status = orch.cli("pipeline", "orch", "resume")
    assert status.returncode == 0 and "pipeline orch: RUNNING" in status.stdout
    ran = af.wait_run(dag, af.trigger(dag))
    assert ran["state"] == "success"
    assert len(orch.ids("numbers")) == 5


def test_new_data_trigger_fires_once_per_arrival(orch: Orchestra) -> None:
    af, dag = orch.airflow, "orch.events.watch"
    time.sleep(10)  # the watcher is polling an empty folder: no run
    assert af.runs(dag) == []

    (orch.root / "watch" / "a.json").write_text(lines(range(1, 4)))
    assert len(af.wait_runs(dag, 1, timeout=180)) == 1
    (orch.root / "watch" / "b.json").write_text(lines(range(4, 6)))
    runs = af.wait_runs(dag, 2, timeout=180)
    assert [r["run_type"] for r in runs] == ["asset_triggered"] * 2
    assert all(r["state"] == "success" for r in runs)
    assert orch.ids("events") == [1, 2, 3, 4, 5]

    time.sleep(60)  # no new data: no new run, although the trigger restarted after each event
    assert len(af.runs(dag)) == 2


def test_backfill_lands_each_day_once(orch: Orchestra) -> None:
    af, dag = orch.airflow, "orch.daily.slices"
    af.set_paused(dag, False)
    args = ["backfill", "create", "--dag-id", dag, "--from-date", DAYS[0], "--to-date", DAYS[-1]]
    created = af.cli(*args)
    assert created.returncode == 0, created.stderr[-2000:]
    af.wait_backfills(dag, timeout=400)
    runs = [r for r in af.runs(dag) if r["run_type"] == "backfill"]
    assert sorted(r["logical_date"][:10] for r in runs) == DAYS
    assert all(r["state"] == "success" for r in runs)
    expected = [i for n in range(3) for i in range(n * 100, n * 100 + 5)]
    assert orch.ids("daily") == expected

    again = af.cli(*args, "--reprocess-behavior", "completed")
    assert again.returncode == 0, again.stderr[-2000:]
    af.wait_backfills(dag, timeout=400)
    reruns = [r for r in af.runs(dag) if r["run_type"] == "backfill"]
    assert len(reruns) >= 3 and all(r["state"] == "success" for r in reruns)
    assert orch.ids("daily") == expected  # re-running the days added nothing
