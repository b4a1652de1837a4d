"""``freshness`` of a connector: an Airflow deadline alert whose reference is the
connector's last commit. End to end in ``airflow standalone`` (the scheduler marks
deadlines missed, the triggerer runs the callback): a connector that never commits is
alerted within seconds, one that just committed is not. The callback's own check
against the state store, and the spec's rules, without Airflow processes."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from conftest import EndToEnd

from airflow_connectors.airflow.freshness import (
    ConnectorLastCommit,
    connector_stale,
    format_duration,
    freshness_verdict,
)
from airflow_connectors.spec.errors import SpecValidationError

pytestmark = pytest.mark.airflow_server

COLUMNS = {"id": "BIGINT NOT NULL"}
#: A cron tick that does not come during the test: runs start only when triggered.
YEARLY = "0 0 1 1 *"


def connector(name: str, folder: Path, freshness: str) -> dict[str, Any]:
    return {
        "name": name,
        "freshness": freshness,
        "trigger": {"schedule": YEARLY},
        "transport": {"name": "file_input", "config": {"path": str(folder), "min_file_age": 0}},
        "format": {"name": "json", "config": {"update_format": "raw"}},
    }


# --- the spec --------------------------------------------------------------------------


def spec_errors(conn: dict[str, Any]) -> str:
    from airflow_connectors.catalog import parse_pipeline

    doc = {"pipeline": "p", "tables": {"t": {"columns": COLUMNS, "connectors": [conn]}}}
    with pytest.raises(SpecValidationError) as e:
        parse_pipeline(doc)
    return str(e.value)


def test_spec_needs_a_schedule_and_a_positive_freshness(tmp_path: Path) -> None:
    from airflow_connectors.catalog import parse_pipeline

    ok = connector("c", tmp_path, "2h")
    spec = parse_pipeline(
        {"pipeline": "p", "tables": {"t": {"columns": COLUMNS, "connectors": [ok]}}}
    )
    assert spec.tables[0].connectors[0].freshness == dt.timedelta(hours=2)

    unscheduled = {**ok, "trigger": {"on": "new_data"}}
    said = spec_errors(unscheduled)
    assert "tables.t.connectors[0].freshness:" in said and "add trigger.schedule" in said
    said = spec_errors({**ok, "freshness": "0s"})
    assert "freshness must be a positive duration" in said


def test_freshness_renders_as_a_deadline_alert_on_the_last_commit(tmp_path: Path) -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_connectors.airflow import render_dags
    from airflow_connectors.catalog import parse_pipeline

    conns = [connector("c", tmp_path, "90m"), {**connector("d", tmp_path, "1h"), "freshness": None}]
    spec = parse_pipeline(
        {"pipeline": "p", "tables": {"t": {"columns": COLUMNS, "connectors": conns}}}
    )
    dags = render_dags(spec)
    [alert] = dags["p.t.c"].deadline
    assert dags["p.t.d"].deadline is None
    assert (alert.name, alert.interval) == ("freshness 90m", dt.timedelta(minutes=90))
    assert isinstance(alert.reference, ConnectorLastCommit)
    assert alert.callback.path == "airflow_connectors.airflow.freshness.connector_stale"
    assert alert.callback.kwargs == {
        "pipeline": "p",
        "table": "t",
        "connector": "c",
        "freshness_seconds": 5400.0,
    }
    # What the scheduler reads back: the custom reference by its class path.
    doc = DagSerialization.to_dict(dags["p.t.c"])
    [stored] = doc["dag"]["deadline"]
    assert stored["reference"] == {
        "reference_type": "ConnectorLastCommit",
        "ingest_task_id": "ingest",
        "__class_path": "airflow_connectors.airflow.freshness.ConnectorLastCommit",
    }


def test_reference_reads_the_metadata_database(airflow_db: Path) -> None:
    """Before any ingest succeeded the deadline counts from the DAG's first run;
    backfill runs get none. (After a commit: the end-to-end test below.)"""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType

    t0 = dt.datetime(2026, 11, 1, 8, tzinfo=dt.UTC)
    hour = dt.timedelta(hours=1)
    dag_id = "fxref.t.c"
    runs = [
        ("manual__1", t0, DagRunType.MANUAL, None),
        ("manual__2", t0 + hour, DagRunType.MANUAL, None),
        ("backfill__1", t0 + 2 * hour, DagRunType.BACKFILL_JOB, t0 - 24 * hour),
    ]
    ref = ConnectorLastCommit.deserialize_reference(ConnectorLastCommit().serialize_reference())
    with create_session() as session:
        session.query(DagRun).filter(DagRun.dag_id == dag_id).delete()
        for run_id, after, kind, logical in runs:
            session.add(
                DagRun(
                    dag_id=dag_id,
                    run_id=run_id,
                    run_after=after,
                    logical_date=logical,
                    run_type=kind,
                    state=DagRunState.SUCCESS,
                )
            )
        session.flush()
        assert ref._evaluate_with(session=session, dag_id=dag_id, run_id="manual__2") == t0
        assert ref._evaluate_with(session=session, dag_id=dag_id, run_id="backfill__1") is None
        session.query(DagRun).filter(DagRun.dag_id == dag_id).delete()


# --- the callback against a real state store ----------------------------------------


def commit_one_batch(store_url: str, ref: Any) -> float:
    """Plan and commit one batch of connector ``ref``; returns the commit time."""
    from helpers import pipeline

    from airflow_connectors.state.store import BatchPlan, ItemReceipt, StateStore
    from airflow_connectors.transports import WorkItem

    table = pipeline(
        {"t": {"columns": COLUMNS, "connectors": [{"name": "c", "transport": {"name": "datagen"}}]}}
    ).tables[0]
    plan = BatchPlan(
        pipeline=ref.pipeline,
        table=table.model_copy(update={"connectors": ()}),
        connector=table.connectors[0],
        warehouse="wh",
        items=(WorkItem("k", start=0, end=10),),
    )
    store = StateStore(store_url)
    try:
        [batch] = store.plan_batches(ref, [plan])
        before = time.time()
        receipt = ItemReceipt(
            key="k", offset=10, records=1, bad=0, bytes=10, completed=True, records_done=0
        )
        assert store.commit_batch(batch, "1-x", [receipt], [])
        last = store.last_committed_at(ref)
        assert last is not None and before <= last <= time.time()
        return last
    finally:
        store.close()


def test_callback_checks_the_state_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow_connectors.state.store import ConnectorRef

    url = f"sqlite:///{tmp_path / 'state.db'}"
    monkeypatch.setenv("AIRFLOW__CONNECTORS__STATE_STORE_URL", url)
    kwargs = {"pipeline": "p", "table": "t", "connector": "c"}
    context = {"dag_run": {"dag_run_id": "manual__1"}}

    with caplog.at_level("INFO", logger="airflow_connectors.airflow.freshness"):
        never = asyncio.run(connector_stale(**kwargs, freshness_seconds=60, context=context))
    assert never == "connector p.t.c is stale: no batch ever committed (freshness 1m)"
    [record] = [r for r in caplog.records if r.name == "airflow_connectors.airflow.freshness"]
    assert (record.levelname, record.getMessage()) == (
        "WARNING",
        f"{never}; deadline of run manual__1 missed",
    )

    # Paused on purpose: said, not alerted.
    from airflow_connectors.state.store import StateStore

    store = StateStore(url)
    store.set_pipeline_paused("p", True)
    paused = asyncio.run(connector_stale(**kwargs, freshness_seconds=60))
    assert paused == f"{never}; no alert: pipeline p is paused"
    store.set_pipeline_paused("p", False)
    store.close()

    last = commit_one_batch(url, ConnectorRef("p", "t", "c"))
    when = dt.datetime.fromtimestamp(last, dt.UTC).isoformat(timespec="seconds")[:-6] + "Z"
    fresh = asyncio.run(connector_stale(**kwargs, freshness_seconds=3600, context=context))
    assert (
        fresh
        == f"connector p.t.c is fresh: last batch committed at {when} (freshness 1h); no alert"
    )
    # Another connector of the same table committed nothing.
    other = asyncio.run(connector_stale(**{**kwargs, "connector": "d"}, freshness_seconds=3600))
    assert other.startswith("connector p.t.d is stale: no batch ever committed")

    stale, line = freshness_verdict("p.t.c", 7200, last, now=last + 7200)
    assert (
        stale
        and line == f"connector p.t.c is stale: no batch committed since {when} (freshness 2h)"
    )
    assert freshness_verdict("p.t.c", 7200, last, now=last + 7199)[0] is False


def test_durations_read_as_written() -> None:
    assert [format_duration(dt.timedelta(seconds=s)) for s in (1, 90, 120, 7200, 86400, 2.5)] == [
        "1s",
        "90s",
        "2m",
        "2h",
        "1d",
        "2.5s",
    ]


# --- end to end -------------------------------------------------------------------------


class Fresh:
    """The running Airflow and the pipeline ``fresh``."""

    def __init__(self, e2e: EndToEnd) -> None:
        self.e2e = e2e
        self.airflow = e2e.airflow
        self.metadata = sa.create_engine(self.airflow.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])

    def deadlines(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        resp = self.airflow.client.get(f"/ui/dags/{dag_id}/dagRuns/{run_id}/deadlines")
        resp.raise_for_status()
        return list(resp.json()["deadlines"])

    def callbacks(self, connector: str) -> list[tuple[str, str | None]]:
        """``(state, output)`` of the freshness callbacks Airflow queued for ``connector``."""
        with self.metadata.connect() as conn:
            rows = conn.execute(sa.text("SELECT data, state, output FROM callback")).all()
        from airflow.serialization.serialized_objects import BaseSerialization

        out = []
        for data, state, output in rows:
            doc = BaseSerialization.deserialize(
                data if isinstance(data, dict) else json.loads(data)
            )
            if (
                doc.get("path", "").endswith("freshness.connector_stale")
                and (doc.get("kwargs") or {}).get("connector") == connector
            ):
                out.append((str(state), output))
        return out

    def wait(self, what: str, check: Any, timeout: float = 90) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not after {timeout:.0f} s")
            time.sleep(1)


@pytest.fixture(scope="module")
def fresh(e2e: EndToEnd) -> Fresh:
    root = e2e.folder("fresh")
    (root / "empty").mkdir()
    (root / "live").mkdir()
    (root / "live" / "a.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(3)))
    spec = {
        "pipeline": "fresh",
        "tables": {
            "t": {
                "columns": COLUMNS,
                "connectors": [
                    # Never commits: the deadline of its run is its first run + 1 s.
                    connector("stale", root / "empty", "1s"),
                    # Commits in its first run; the next run is well within 10 minutes.
                    connector("live", root / "live", "10m"),
                ],
            }
        },
    }
    e2e.add({"fresh.yaml": yaml.safe_dump(spec)}, ["fresh.t.stale", "fresh.t.live"])
    return Fresh(e2e)


def when(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def test_stale_connector_alerts_and_fresh_one_does_not(fresh: Fresh) -> None:
    airflow = fresh.airflow
    stale_run = airflow.trigger("fresh.t.stale")
    live_first = airflow.trigger("fresh.t.live")

    # The stale connector never committed: its deadline is its first run + 1 s. The
    # scheduler marks it missed, the triggerer runs the callback, which finds no commit
    # in the state store and says so.
    [missed] = fresh.wait(
        "the stale connector's deadline missed",
        lambda: [d for d in fresh.deadlines("fresh.t.stale", stale_run) if d["missed"]],
    )
    [run] = [r for r in airflow.runs("fresh.t.stale") if r["dag_run_id"] == stale_run]
    assert missed["alert_name"] == "freshness 1s"
    assert when(missed["deadline_time"]) == when(run["run_after"]) + dt.timedelta(seconds=1)
    line = "connector fresh.t.stale is stale: no batch ever committed (freshness 1s)"
    [(state, output)] = fresh.wait(
        "the freshness callback of the stale connector",
        lambda: [c for c in fresh.callbacks("stale") if c[0] in ("success", "failed")],
    )
    assert (state, output) == ("success", line)
    assert f"{line}; deadline of run {stale_run} missed" in airflow.log_file.read_text(
        errors="replace"
    )

    # The live connector commits a batch in its first run.
    assert airflow.wait_run("fresh.t.live", live_first)["state"] == "success", airflow.explain_run(
        "fresh.t.live", live_first
    )
    assert fresh.e2e.ids("fresh", "t") == [0, 1, 2]
    [ingest] = [
        ti for ti in airflow.task_instances("fresh.t.live", live_first) if ti["task_id"] == "ingest"
    ]
    # A run created now gets the deadline "that commit + 10 minutes" (created while the
    # DAG is paused, so it waits and the deadline can be read before the run ends).
    airflow.set_paused("fresh.t.live", True)
    live_second = airflow.trigger("fresh.t.live")
    [upcoming] = fresh.deadlines("fresh.t.live", live_second)
    assert not upcoming["missed"]
    assert when(upcoming["deadline_time"]) == when(ingest["end_date"]) + dt.timedelta(minutes=10)
    airflow.set_paused("fresh.t.live", False)
    assert airflow.wait_run("fresh.t.live", live_second)["state"] == "success"
    assert airflow.wait_run("fresh.t.stale", stale_run)["state"] == "success"
    # Both runs of the fresh connector succeeded before their deadlines: Airflow dropped
    # them, and no freshness callback ran for it.
    for run_id in (live_first, live_second):
        assert fresh.deadlines("fresh.t.live", run_id) == []
    assert fresh.callbacks("live") == []
