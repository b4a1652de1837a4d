"""End to end on the scale-out deployment (``conftest.cluster``): the checks that matter
for distribution, against one running cluster. A connector of many objects with
``tasks_max: 4`` runs its mapped ingest tasks on both Celery workers and its Spark tasks
on both Spark workers (the executors recorded in the batch receipts); ``start_after``
through asset events; pause and resume through the connector REST API; the event
trigger on new objects; a backfill of three days. Every row lands exactly once.

Sources are objects in the source bucket of the cluster's S3 server (``s3_input``),
which the Celery workers' tasks and the Spark executors reach over HTTP as they would
on real machines; tables are written to the warehouse on the same server.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

import pytest
from conftest import Deployment, lines

pytestmark = pytest.mark.cluster  # and what `deployment` needs (tests/conftest.py)

PIPELINE = "e2e"
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR"}
JSON = {"name": "json", "config": {"update_format": "raw"}}
#: The multi-object connector: objects x rows each, read in tasks_max batches.
OBJECTS, ROWS_PER_OBJECT, TASKS_MAX = 32, 2_000, 4
DAYS = ["2026-11-01", "2026-11-02", "2026-11-03"]
#: An unpaused connector over an empty prefix: its run plans nothing and starts no
#: Spark, so a run of it shows within seconds that the scheduler and the Celery workers
#: are running runs (a negative checked after it is not a quiet interval).
WITNESS = f"{PIPELINE}.witness.tick"
MULTI = f"{PIPELINE}.multi.objects"
FIRST, SECOND = f"{PIPELINE}.chain.first", f"{PIPELINE}.chain.second"
CONTROLLED = f"{PIPELINE}.controlled.objects"
WATCHED = f"{PIPELINE}.watched.objects"
DAILY = f"{PIPELINE}.daily.slices"
#: Modules of ``PRELOAD`` whose presence a task process reports as it starts.
WARM = ("pandas", "pyspark.sql.connect.session", "airflow_connectors.engine.batch")
#: A DAG file that imports nothing of this package: its task reports which of WARM its
#: process has when it starts (``[celery] celery_config_options`` preloads them).
PROBE = f"""
import sys

from airflow.sdk import dag, task


@dag(dag_id="celery_warm_probe", schedule=None, is_paused_upon_creation=False)
def celery_warm_probe():
    @task
    def modules():
        return [m for m in {WARM!r} if m in sys.modules]

    modules()


celery_warm_probe()
"""


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def connector(name: str, transport: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"name": name, "transport": transport, "format": JSON, **fields}


@pytest.fixture(scope="module")
def e2e(deployment: Deployment) -> Deployment:
    d = deployment
    for n in range(OBJECTS):
        first = n * ROWS_PER_OBJECT
        d.put(f"e2e/multi/part-{n:03d}.json", lines(range(first, first + ROWS_PER_OBJECT)))
    d.put("e2e/chain/first/a.json", lines(range(1, 21)))
    d.put("e2e/chain/second/a.json", lines(range(1000, 1003)))
    for n, day in enumerate(DAYS):
        d.put(f"e2e/daily/{day}/part.json", lines(range(n * 100, n * 100 + 5)))
    tables = {
        "multi": [connector("objects", d.s3_input("e2e/multi/"), tasks_max=TASKS_MAX)],
        "chain": [
            connector("first", d.s3_input("e2e/chain/first/"), labels=["chain.first"]),
            connector("second", d.s3_input("e2e/chain/second/"), start_after="chain.first"),
        ],
        "controlled": [connector("objects", d.s3_input("e2e/controlled/"))],
        "watched": [
            connector(
                "objects",
                d.s3_input("e2e/watched/"),
                trigger={"on": "new_data", "poll_interval": 5},
            )
        ],
        "daily": [
            connector(
                "slices",
                d.s3_input("e2e/daily/{{ ds }}/"),
                paused=True,
                trigger={"schedule": "@daily", "start_date": DAYS[0]},
            )
        ],
        "witness": [connector("tick", d.s3_input("e2e/empty/"))],
    }
    (d.dags / "celery_warm_probe.py").write_text(PROBE)
    d.add(PIPELINE, {name: {"columns": COLUMNS, "connectors": cs} for name, cs in tables.items()})
    return d


def ids(e2e: Deployment, table: str) -> list[int]:
    return e2e.ids(PIPELINE, table)


def witness(e2e: Deployment) -> dict[str, Any]:
    """Trigger the witness DAG and wait for its run: proof that the scheduler created,
    queued and the Celery workers ran a run after this point."""
    run_id = e2e.api.trigger(WITNESS)
    run = e2e.api.wait_run(WITNESS, run_id)
    assert run["state"] == "success", e2e.states(WITNESS, run_id)
    return dict(run)


def test_multi_object_connector_spreads_over_both_celery_and_both_spark_workers(
    e2e: Deployment,
) -> None:
    api = e2e.api
    run_id = api.trigger(MULTI)
    run = api.wait_run(MULTI, run_id, timeout=600)
    assert run["state"] == "success", e2e.states(MULTI, run_id)

    # One mapped ingest task per batch, as many as tasks_max, on both Celery workers.
    ingest = [ti for ti in api.task_instances(MULTI, run_id) if ti["task_id"] == "ingest"]
    assert len(ingest) == TASKS_MAX, ingest
    assert all(ti["state"] == "success" for ti in ingest), ingest
    assert all(re.fullmatch(r"batch \d+", ti["rendered_map_index"]) for ti in ingest)
    hosts = {ti["hostname"] for ti in ingest}
    celery = {e2e.cluster.airflow_hostname(i) for i in range(e2e.cluster.celery_workers)}
    assert hosts == celery, f"the ingest tasks ran on {sorted(hosts)}, not on both Celery workers"

    # Their Spark tasks ran on both Spark workers: the executors each batch's receipts
    # recorded work in the two workers' directories.
    batches = e2e.batches(MULTI)
    assert len(batches) == TASKS_MAX and all(b.status.value == "committed" for b in batches)
    assert sorted(b.batch_id for b in batches) == sorted(
        int(ti["rendered_map_index"].split()[1]) for ti in ingest
    )
    executors = [e for b in batches for e in b.executors or []]
    assert all(b.executors for b in batches), [(b.batch_id, b.executors) for b in batches]
    assert all(e["id"] and e["host"] for e in executors), executors
    assert sum(e["records"] for e in executors) == OBJECTS * ROWS_PER_OBJECT
    workers = {e2e.worker_of(e["dir"]) for e in executors}
    assert workers == {0, 1}, f"executors of the batches: {executors}"

    # Every row exactly once.
    assert ids(e2e, "multi") == list(range(OBJECTS * ROWS_PER_OBJECT))


def test_celery_task_processes_start_with_the_preloaded_modules(e2e: Deployment) -> None:
    """The deployment's Celery config (``airflow_connectors.airflow.celery_config``)
    imports the connector modules in each Celery worker before it forks its pool: a
    task whose DAG file imports none of them has them when it starts."""
    api = e2e.api
    api.wait_for_dags(["celery_warm_probe"])
    run_id = api.trigger("celery_warm_probe")
    run = api.wait_run("celery_warm_probe", run_id)
    assert run["state"] == "success", e2e.states("celery_warm_probe", run_id)
    xcom = api._json(
        "GET",
        f"/api/v2/dags/celery_warm_probe/dagRuns/{run_id}/taskInstances/modules/"
        "xcomEntries/return_value",
    )
    value = xcom["value"]
    assert (json.loads(value) if isinstance(value, str) else value) == list(WARM)
    for i in range(e2e.cluster.celery_workers):
        log = (e2e.cluster.root / "logs" / f"celery-{i}.log").read_text(errors="replace")
        assert "Celery worker: task processes start with" in log, log[-2000:]


def test_start_after_runs_the_dependent_on_the_asset_event_only(e2e: Deployment) -> None:
    api = e2e.api
    # The dependent triggered by hand before its label finished: its gate skips it.
    early_id = api.trigger(SECOND)
    early = api.wait_run(SECOND, early_id)
    states = e2e.states(SECOND, early_id)
    assert early["state"] == "success" and states["discover[-1]"] == "skipped", states
    assert states["discover[-1]"] == "skipped" and ids(e2e, "chain") == []

    run_id = api.trigger(FIRST)
    first = api.wait_run(FIRST, run_id)
    assert first["state"] == "success", e2e.states(FIRST, run_id)
    finished = next(ti for ti in api.task_instances(FIRST, run_id) if ti["task_id"] == "finished")
    assert finished["state"] == "success"

    # The scheduler created the dependent's run from the one event of the first's
    # asset, after it finished; that run ingested.
    runs = api.wait_runs(SECOND, 2)
    assert [r["run_type"] for r in runs] == ["manual", "asset_triggered"]
    second = runs[1]
    assert second["state"] == "success", e2e.states(SECOND, second["dag_run_id"])
    assert e2e.states(SECOND, second["dag_run_id"])["discover[-1]"] == "success"
    [event] = asset_events(e2e, f"connector://{PIPELINE}/chain/first")
    assert event["source_run_id"] == run_id
    assert [r["run_id"] for r in event["created_dagruns"]] == [second["dag_run_id"]]
    assert parse_time(second["start_date"]) >= parse_time(finished["end_date"])
    assert ids(e2e, "chain") == [*range(1, 21), 1000, 1001, 1002]


def asset_events(e2e: Deployment, uri: str) -> list[dict[str, Any]]:
    """The events of the asset ``uri``, oldest first."""
    client = e2e.api.client
    assets = client.get("/api/v2/assets", params={"limit": 1000}).raise_for_status().json()
    [asset] = [a for a in assets["assets"] if a["uri"] == uri]
    events = client.get(
        "/api/v2/assets/events", params={"asset_id": asset["id"], "limit": 1000}
    ).raise_for_status()
    return sorted(events.json()["asset_events"], key=lambda e: e["timestamp"])


def test_pause_and_resume_through_the_connect_api(e2e: Deployment) -> None:
    api, name = e2e.api, CONTROLLED
    assert e2e.connect("PUT", f"/connectors/{name}/pause").status_code == 202
    status = e2e.connect("GET", f"/connectors/{name}/status").json()
    assert status["connector"]["state"] == "PAUSED", status

    # New objects arrive and a run is asked for while it is paused: the run waits,
    # queued, past a run that the scheduler and the workers finished after it.
    e2e.put("e2e/controlled/a.json", lines(range(1, 8)))
    e2e.put("e2e/controlled/b.json", lines(range(8, 11)))
    queued = api.trigger(name)
    witnessed = witness(e2e)
    [run] = api.runs(name)
    assert (run["dag_run_id"], run["state"]) == (queued, "queued")
    assert parse_time(witnessed["queued_at"]) > parse_time(run["queued_at"])
    assert not [ti for ti in api.task_instances(name, queued) if ti["state"]]  # none started
    assert ids(e2e, "controlled") == []

    # Resumed: the waiting run goes ahead and ingests what arrived.
    assert e2e.connect("PUT", f"/connectors/{name}/resume").status_code == 202
    done = api.wait_run(name, queued)
    assert done["state"] == "success", e2e.states(name, queued)
    assert ids(e2e, "controlled") == list(range(1, 11))
    status = e2e.connect("GET", f"/connectors/{name}/status").json()
    assert status["connector"]["state"] == "RUNNING", status


def test_new_objects_trigger_a_run_that_ingests_them(e2e: Deployment) -> None:
    """One asset event, hence one run, per arrival: each run ingests what arrived."""
    api, dag = e2e.api, WATCHED
    written = []
    for n, (key, rows) in enumerate([("a.json", range(1, 4)), ("b.json", range(4, 6))]):
        written.append(dt.datetime.now(dt.UTC))
        e2e.put(f"e2e/watched/{key}", lines(rows))
        runs = api.wait_runs(dag, n + 1, timeout=300)
        assert ids(e2e, "watched") == list(range(1, rows.stop))
    assert [r["run_type"] for r in runs] == ["asset_triggered"] * 2
    assert all(r["state"] == "success" for r in runs), runs
    for run, after in zip(runs, written, strict=True):
        assert parse_time(run["queued_at"]) >= after


def test_backfill_of_three_days_lands_each_day_once(e2e: Deployment) -> None:
    api, dag = e2e.api, DAILY
    api.set_paused(dag, False)
    # One day at a time, oldest first, as the schedule would have run them: the
    # connector's watermark (the greatest committed key) is shared by its date slices,
    # so a later day committed before an earlier day's discovery would hide that day's
    # keys (they sort below it) from the listing.
    created = e2e.cluster.cli(
        "backfill",
        "create",
        "--dag-id",
        dag,
        "--from-date",
        DAYS[0],
        "--to-date",
        DAYS[-1],
        "--max-active-runs",
        "1",
    )
    assert created.returncode == 0, created.stderr[-2000:]
    api.wait_backfills(dag, timeout=600)
    runs = [r for r in api.runs(dag) if r["run_type"] == "backfill"]
    assert sorted(r["logical_date"][:10] for r in runs) == DAYS
    assert all(r["state"] == "success" for r in runs), runs
    assert ids(e2e, "daily") == [i for n in range(3) for i in range(n * 100, n * 100 + 5)]
