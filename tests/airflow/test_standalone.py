"""End to end through a real scheduler: ``airflow standalone`` on a free 127.0.0.1 port
(scheduler, triggerer, dag-processor, API server, LocalExecutor) runs the connector DAGs,
their batches on the shared Airflow's Spark Connect server, the url_input connector's on
spark-submit (``execution: spark_submit``, the product's default). Covers start_after
through asset events, DAG and pipeline pause (Feldera's 2x2 table), the new-data event
trigger, and ``airflow backfill create`` over date-sliced files."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import EndToEnd

from airflow_connectors.testing.standalone import StandaloneAirflow

COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR"}
DAYS = ["2026-11-01", "2026-11-02", "2026-11-03"]
#: An unpaused connector over an empty folder: its run plans nothing and starts no
#: Spark, so triggering it shows in seconds that the scheduler is creating and running
#: runs (see Orchestra.witness).
WITNESS = "orch.witness.tick"


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

    def get(self, path: str, **params: Any) -> Any:
        resp = self.airflow.client.get(path, params=params)
        resp.raise_for_status()
        return resp.json()

    def asset_events(self, uri: str) -> list[dict[str, Any]]:
        """The events of the asset ``uri``, oldest first."""
        # Searched by URI: the API answers at most [api] maximum_page_limit (100) assets
        # a page, and an Airflow shared by several test modules holds more.
        found = self.get("/api/v2/assets", uri_pattern=uri, limit=100)["assets"]
        [asset] = [a for a in found if a["uri"] == uri]
        events = self.get("/api/v2/assets/events", asset_id=asset["id"], limit=1000)
        return sorted(events["asset_events"], key=lambda e: e["timestamp"])

    def witness(self) -> dict[str, Any]:
        """Trigger the witness DAG and wait for its run: proof that the scheduler created,
        queued and finished a run after this point (a negative checked after it is not a
        quiet interval but a scheduler that was demonstrably working)."""
        run_id = self.airflow.trigger(WITNESS)
        run = self.airflow.wait_run(WITNESS, run_id)
        assert run["state"] == "success", self.states(WITNESS, run_id)
        return run


@pytest.fixture(scope="module")
def orch(e2e: EndToEnd, http_server: Any) -> Orchestra:
    root = e2e.folder("orch")
    (root / "watch").mkdir()
    (root / "empty").mkdir()
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
            "witness": {
                "columns": COLUMNS,
                "connectors": [
                    {
                        "name": "tick",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(root / "empty"), "min_file_age": 0},
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
    # The shared Airflow runs batches on Spark Connect unless a connector says (see
    # conftest.e2e); the backfill connector runs as the default does, a spark-submit per
    # batch (as do the quickstart's and the cluster's connectors).
    spec["tables"]["prices"]["connectors"][0]["execution"] = "spark_submit"
    e2e.add(
        {"orch.yaml": yaml.safe_dump(spec)},
        [
            "orch.prices.backfill",
            "orch.prices.live",
            "orch.numbers.gen",
            "orch.events.watch",
            "orch.daily.slices",
            WITNESS,
        ],
    )
    return Orchestra(e2e, root)


def test_start_after_runs_on_the_asset_event_only_after_backfill(orch: Orchestra) -> None:
    af = orch.airflow
    # Unmet start_after: a run of the dependent is created (by hand) and the scheduler
    # runs it, and its gate skips it: no rows.
    early_id = af.trigger("orch.prices.live")
    early = af.wait_run("orch.prices.live", early_id)
    states = orch.states("orch.prices.live", early_id)
    assert early["state"] == "success" and states["discover[-1]"] == "skipped", states
    assert states["discover[-1]"] == "skipped" and orch.ids("prices") == []

    run_id = af.trigger("orch.prices.backfill")
    backfill = af.wait_run("orch.prices.backfill", run_id)
    assert backfill["state"] == "success", orch.states("orch.prices.backfill", run_id)
    assert orch.states("orch.prices.backfill", run_id)["finished[-1]"] == "success"

    runs = af.wait_runs("orch.prices.live", 2)
    assert [r["run_type"] for r in runs] == ["manual", "asset_triggered"]
    live = runs[1]
    assert live["state"] == "success"
    assert orch.states("orch.prices.live", live["dag_run_id"])["discover[-1]"] == "success"
    tis = af.task_instances("orch.prices.backfill", run_id)
    ingest = [ti for ti in tis if ti["task_id"] == "ingest"]
    assert len(ingest) == 1 and re.fullmatch(r"batch \d+", ingest[0]["rendered_map_index"])
    finished = next(ti for ti in tis if ti["task_id"] == "finished")
    # The scheduler created the dependent's run from the one finished event, after it.
    [event] = orch.asset_events("connector://orch/prices/backfill")
    assert event["source_run_id"] == run_id
    assert [r["run_id"] for r in event["created_dagruns"]] == [live["dag_run_id"]]
    assert parse_time(live["start_date"]) >= parse_time(finished["end_date"])
    assert orch.ids("prices") == [*range(1, 21), 1000, 1001, 1002]


def test_dag_pause_and_pipeline_pause_each_stop_a_connector(orch: Orchestra) -> None:
    af, dag = orch.airflow, "orch.numbers.gen"
    # Paused DAG (created paused: `paused: true`), pipeline running: its run stays
    # queued while the scheduler starts and finishes a run triggered after it.
    queued = af.trigger(dag)
    witnessed = orch.witness()
    assert [r["dag_run_id"] for r in af.runs(dag)] == [queued]
    assert af.runs(dag)[0]["state"] == "queued"
    assert parse_time(witnessed["queued_at"]) > parse_time(af.runs(dag)[0]["queued_at"])
    assert not [ti for ti in af.task_instances(dag, queued) if ti["state"]]  # none started
    assert orch.ids("numbers") == []

    # Both paused: still nothing, again past a run the scheduler finished (whose gate
    # the paused pipeline skipped).
    assert orch.cli("pipeline", "orch", "pause").returncode == 0
    witnessed = orch.witness()
    assert orch.states(WITNESS, witnessed["dag_run_id"])["discover[-1]"] == "skipped"
    assert af.runs(dag)[0]["state"] == "queued" and len(af.runs(dag)) == 1
    assert not [ti for ti in af.task_instances(dag, queued) if ti["state"]]
    assert orch.ids("numbers") == []

    # DAG unpaused, pipeline paused: the run goes ahead but the gate skips it.
    af.set_paused(dag, False)
    run = af.wait_run(dag, queued)
    states = orch.states(dag, queued)
    assert run["state"] == "success" and states["discover[-1]"] == "skipped", states
    assert states["discover[-1]"] == "skipped" and orch.ids("numbers") == []

    # Both running: the connector ingests.
    status = orch.cli("pipeline", "orch", "resume")
    assert status.returncode == 0 and "pipeline orch: RUNNING" in status.stdout
    ran = af.wait_run(dag, af.trigger(dag))
    assert ran["state"] == "success"
    assert len(orch.ids("numbers")) == 5


def test_new_data_trigger_fires_once_per_arrival(orch: Orchestra) -> None:
    """One asset event, hence one run, per file: none while the folder was empty, none
    for data already signalled (the triggerer restarts the watcher after each event and
    it sees the same files until their run ingests them). The last file is the point
    past which nothing is asserted: its event shows the watcher was polling all along."""
    af, dag = orch.airflow, "orch.events.watch"
    uri = "connector-new-data://orch/events/watch"
    written: list[str] = []
    for n, (name, ids) in enumerate([("a", range(1, 4)), ("b", range(4, 6)), ("c", range(6, 7))]):
        written.append(dt.datetime.now(dt.UTC).isoformat())
        (orch.root / "watch" / f"{name}.json").write_text(lines(ids))
        runs = af.wait_runs(dag, n + 1, timeout=180)
    assert [r["run_type"] for r in runs] == ["asset_triggered"] * 3
    assert all(r["state"] == "success" for r in runs)
    assert orch.ids("events") == [1, 2, 3, 4, 5, 6]

    events = orch.asset_events(uri)
    assert len(events) == 3, events
    for event, after, run in zip(events, written, runs, strict=True):
        assert parse_time(event["timestamp"]) >= parse_time(after)  # fired on its file
        assert [r["run_id"] for r in event["created_dagruns"]] == [run["dag_run_id"]]


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_backfill_lands_each_day_once(orch: Orchestra) -> None:
    af, dag = orch.airflow, "orch.daily.slices"
    af.set_paused(dag, False)
    args = ["backfill", "create", "--dag-id", dag, "--from-date", DAYS[0], "--to-date", DAYS[-1]]
    created = af.cli(*args)
    assert created.returncode == 0, created.stderr[-2000:]
    af.wait_backfills(dag, timeout=400)
    runs = [r for r in af.runs(dag) if r["run_type"] == "backfill"]
    assert sorted(r["logical_date"][:10] for r in runs) == DAYS
    failed = [r for r in runs if r["state"] != "success"]
    assert not failed, "\n".join(af.explain_run(dag, r["dag_run_id"]) for r in failed)
    expected = [i for n in range(3) for i in range(n * 100, n * 100 + 5)]
    assert orch.ids("daily") == expected

    again = af.cli(*args, "--reprocess-behavior", "completed")
    assert again.returncode == 0, again.stderr[-2000:]
    backfills = af.wait_backfills(dag, timeout=400)
    assert len(backfills) == 2 and all(b["completed_at"] for b in backfills)
    reruns = [r for r in af.runs(dag) if r["run_type"] == "backfill"]
    assert sorted(r["logical_date"][:10] for r in reruns) == DAYS
    # Each day ran again (its discover tried a second time and succeeded) and planned
    # nothing: no ingest task ran in the re-run.
    for run in reruns:
        tis = af.task_instances(dag, run["dag_run_id"])
        discover = next(ti for ti in tis if ti["task_id"] == "discover")
        assert (discover["state"], discover["try_number"] >= 2) == ("success", True), tis
        ingested = [
            ti
            for ti in tis
            if ti["task_id"] == "ingest" and ti["state"] == "success" and ti["try_number"] >= 2
        ]
        assert ingested == [], tis
    failed = [r for r in reruns if r["state"] != "success"]
    assert not failed, "\n".join(af.explain_run(dag, r["dag_run_id"]) for r in failed)
    assert orch.ids("daily") == expected  # re-running the days added nothing
