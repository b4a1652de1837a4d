"""Connector control (engine.control) on real state stores: the one derivation of the
state every surface shows, Kafka Connect's stop/resume/pause/start transitions enforced
for embedded runs, and concurrent runs of one connector."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers import pipeline, read_table, run, status

from airflow_connectors.engine import control
from airflow_connectors.engine.batch import run_batch
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.engine.discovery import discover
from airflow_connectors.engine.runner import EmbeddedRunner
from airflow_connectors.settings import Settings
from airflow_connectors.state.store import (
    ConnectorNotStopped,
    ConnectorRef,
    ConnectorStopped,
    StateStore,
)
from airflow_connectors.testing.jobs import kill, start_job

REF = ConnectorRef("p", "t", "c")
State = control.State


class _no_spark:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Spark was used ({name}) although the connector may not run")


def datagen(limit: int = 5, **extra: Any) -> dict[str, Any]:
    return {
        "t": {
            "columns": {"id": "BIGINT NOT NULL"},
            "connectors": [
                {
                    "name": "c",
                    "transport": {"name": "datagen", "config": {"plan": [{"limit": limit}]}},
                    **extra,
                }
            ],
        }
    }


def view(store: StateStore, dag_paused: bool | None = None) -> control.ConnectorView:
    return control.connector_view(
        store.status(REF), dag_paused=dag_paused, pipeline_paused=store.pipeline_paused("p")
    )


def context(wh: Path, limit: int = 5) -> BatchContext:
    table, connector = next(iter(pipeline(datagen(limit)).connectors()))
    return BatchContext("p", table, connector, str(wh))


def planned(store: StateStore, wh: Path) -> int:
    """Plan the connector's batch as discovery does (no Spark)."""
    [batch] = discover(store, context(wh)).batch_ids
    return batch


def test_one_derivation_for_every_state(store_url: str, tmp_path: Path) -> None:
    store = StateStore(store_url)
    assert view(store).state == State.UNASSIGNED and not view(store).paused
    b = planned(store, tmp_path)
    assert view(store).state == State.RUNNING
    # The DAG's flag is the connector's under Airflow; the store's flag says nothing then.
    dag_paused = view(store, dag_paused=True)
    assert (dag_paused.state, dag_paused.paused) == (State.PAUSED, True)
    store.set_pipeline_paused("p", True)
    assert (view(store).state, view(store).paused) == (State.PAUSED, False)  # Feldera 2x2
    store.set_pipeline_paused("p", False)

    assert store.record_failure(REF, "boom", batch_id=b)
    failed = view(store)
    assert (failed.state, failed.trace) == (State.FAILED, "boom")
    assert control.feldera_status(REF, store.status(REF), failed)["fatal_error"] == "boom"

    control.ConnectorControl(store).stop(REF)
    stopped = view(store, dag_paused=False)  # its DAG unpaused (the UI toggle): still stopped
    assert (stopped.state, stopped.paused) == (State.STOPPED, True)
    doc = control.feldera_status(REF, store.status(REF), stopped)
    assert (doc["state"], doc["paused"]) == ("STOPPED", True)

    control.ConnectorControl(store).resume(REF)
    # The failed batch was released by the stop: nothing is failing any more.
    resumed = view(store)
    assert (resumed.state, resumed.trace) == (State.RUNNING, None)
    assert control.feldera_status(REF, store.status(REF), resumed)["fatal_error"] is None
    assert store.status(REF).transport_errors[-1]["message"] == "boom"  # type: ignore[union-attr]
    store.close()


def test_tasks_of_a_paused_connector_are_not_running() -> None:
    assert control.task_state(State.PAUSED, "RUNNING") == "PAUSED"
    assert control.task_state(State.PAUSED, "FAILED") == "FAILED"
    assert control.task_state(State.RUNNING, "RUNNING") == "RUNNING"


def test_stopped_runs_only_after_resume(sqlite_url: str, tmp_path: Path) -> None:
    store = StateStore(sqlite_url)
    ctl = control.ConnectorControl(store)
    planned(store, tmp_path)
    assert ctl.stop(REF) != []
    assert ctl.gate_blocker(REF) == control.stopped_message(REF)
    with pytest.raises(ConnectorStopped, match=r"runs again only after resume"):
        ctl.start(REF)  # Feldera's start does not undo a stop
    with pytest.raises(ConnectorStopped, match="was stopped while this run was planning"):
        planned(store, tmp_path)  # a run that passed its gate before the stop plans nothing
    store.edit_offsets(REF, None)  # allowed: stopped, nothing in flight

    ctl.pause(REF)  # Kafka Connect: STOPPED -> PAUSED
    assert view(store).state == State.PAUSED
    with pytest.raises(ConnectorNotStopped):
        store.edit_offsets(REF, None)
    ctl.start(REF)
    assert view(store).state == State.RUNNING and ctl.gate_blocker(REF) is None

    ctl.stop(REF)
    ctl.resume(REF)
    assert view(store).state == State.RUNNING
    store.close()


class DictSwitch:
    """A stand-in for Airflow's DAG flags: the connectors it knows and their flags."""

    def __init__(self, flags: dict[ConnectorRef, bool]) -> None:
        self.flags = flags

    def paused(self, ref: ConnectorRef) -> bool | None:
        return self.flags.get(ref)

    def paused_many(self, refs: Sequence[ConnectorRef]) -> dict[ConnectorRef, bool]:
        return {r: self.flags[r] for r in refs if r in self.flags}

    def set_paused(self, ref: ConnectorRef, paused: bool) -> None:
        if ref not in self.flags:
            raise control.DagNotFound(str(ref))
        self.flags[ref] = paused


def test_the_switch_is_the_connectors_flag(sqlite_url: str, tmp_path: Path) -> None:
    store = StateStore(sqlite_url)
    planned(store, tmp_path)
    switch = DictSwitch({REF: False})
    ctl = control.ConnectorControl(store, switch)
    ctl.pause(REF)
    assert switch.flags[REF] is True and ctl.view(REF).state == State.PAUSED
    switch.flags[REF] = False  # unpaused in the Airflow UI: the DAG's flag wins
    assert ctl.view(REF).state == State.RUNNING and ctl.halted(REF) is None
    assert ctl.statuses([REF])[REF]["paused"] is False
    ctl.stop(REF)
    assert switch.flags[REF] is True and ctl.status(REF)["state"] == "STOPPED"
    ctl.resume(REF)
    assert switch.flags[REF] is False and ctl.view(REF).state == State.RUNNING

    # A connector the switch does not know: its store flag, and the change still lands there.
    other = DictSwitch({})
    with pytest.raises(control.DagNotFound):
        control.ConnectorControl(store, other).pause(REF)
    assert control.ConnectorControl(store, other).view(REF).state == State.PAUSED
    # Embedded: the store's own flag is the switch.
    embedded = control.ConnectorControl(store)
    assert embedded.halted(REF) == "paused"
    embedded.start(REF)
    assert embedded.halted(REF) is None and store.status(REF).paused is False  # type: ignore[union-attr]
    store.close()


def test_offsets_refused_while_batches_are_in_flight(sqlite_url: str, tmp_path: Path) -> None:
    store = StateStore(sqlite_url)
    planned(store, tmp_path)
    store.set_stopped(REF, True)  # flagged, but its batch was not released
    with pytest.raises(ConnectorNotStopped, match="1 planned batch"):
        store.edit_offsets(REF, None)
    store.close()


def test_embedded_run_passes_a_stopped_connector_over(sqlite_url: str, tmp_path: Path) -> None:
    spec = pipeline(datagen())
    store = StateStore(sqlite_url)
    control.ConnectorControl(store).stop(REF)
    report = run(spec, sqlite_url, str(tmp_path / "wh"), _no_spark())
    assert report.connectors["t.c"].status == "stopped" and report.batches == 0
    store.close()


def test_concurrent_planner_is_skipped_in_one_line(
    sqlite_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = pipeline(datagen())
    store = StateStore(sqlite_url)
    assert store.acquire_lease(REF, "another-run")  # another run is planning it
    report = run(spec, sqlite_url, str(tmp_path / "wh"), _no_spark())
    assert report.connectors["t.c"].status == "busy" and report.batches == 0
    assert "p.t.c is being planned by another run" in caplog.text
    store.close()


class _LoserSpark:
    """Spark for the losing run of a batch: the winning run ingests and publishes the
    same batch first (real Spark), then this attempt's job fails on its staging file,
    which the winner's publish removed. Injected, because that interleaving cannot be
    forced between processes; the real race of two job processes is
    ``test_two_job_processes_of_one_batch_started_at_once`` below (and, lined up at
    the commit, tests/engine/test_exactly_once.py)."""

    def __init__(self, store: StateStore, batch_id: int, spark: Any) -> None:
        self.store, self.batch_id, self.real = store, batch_id, spark

    def __call__(self) -> Any:
        assert run_batch(self.store, self.batch_id, lambda: self.real).committed
        return self

    @property
    def sparkContext(self) -> Any:
        raise RuntimeError(
            "An exception was thrown from the Python worker:\nFileNotFoundError: [Errno 2] "
            "No such file or directory: '/wh/p/_staging/t/batch-0000000001-1-x/rows/part.tmp'"
        )


def test_concurrent_run_of_a_batch_leaves_no_failure(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    wh = str(tmp_path / "wh")
    spec = pipeline(datagen(limit=7))
    store = StateStore(sqlite_url)
    [batch] = discover(store, context(tmp_path / "wh", limit=7)).batch_ids

    result = run_batch(store, batch, _LoserSpark(store, batch, spark))  # no BatchFailed
    assert not result.committed
    assert status(sqlite_url, "p", "t", "c").state == "RUNNING"
    assert read_table(wh, "p", "t").num_rows == 7  # landed once, by the winner

    # A connector left FAILED by such a loser (a store written before this fix) shows
    # RUNNING after a later clean run: its failed batch is no longer in flight.
    store._update_connector(REF, state="FAILED", fatal_error="staging file vanished")
    settings = Settings(state_store_url=sqlite_url, warehouse=wh, spark_master="local[2]")
    EmbeddedRunner(spec, settings, store=store, spark=_no_spark).run()
    assert view(store).state == State.RUNNING
    store.close()


@pytest.mark.spark  # two ingest jobs (spark-submit)
@pytest.mark.parametrize("store_url", ["sqlite", "postgres"], indirect=True)
def test_two_job_processes_of_one_batch_started_at_once(store_url: str, tmp_path: Path) -> None:
    """An Airflow retry beside a zombie task: two real ingest jobs of one batch started
    at the same moment, with whatever timing the machine gives them (the loser may lose
    the commit, find its staging folder removed by the winner's publish, or start late
    and roll the publish forward beside the winner). Both end cleanly, exactly one
    commits, the connector is not FAILED, the rows land once and nothing is left staged."""
    rows = 20_000
    store = StateStore(store_url)
    [batch] = discover(store, context(tmp_path / "wh", limit=rows)).batch_ids
    marks = [tmp_path / "a", tmp_path / "b"]
    for m in marks:
        m.mkdir()
    jobs = [start_job([batch], store_url, m, spark_master="local[1]") for m in marks]
    try:
        outs = [proc.communicate(timeout=300)[0].decode(errors="replace") for proc in jobs]
    finally:
        for proc in jobs:
            if proc.poll() is None:
                kill(proc)
    assert [proc.returncode for proc in jobs] == [0, 0], "\n---\n".join(outs)
    committed = [out for out in outs if f"batch {batch} committed" in out]
    assert len(committed) == 1, "\n---\n".join(outs)
    st = store.status(REF)
    assert st is not None and (st.state, st.total_records, st.fatal_error) == (
        "RUNNING",
        rows,
        None,
    )
    assert store.pending_batches(REF) == [] and store.unpublished_batches(REF) == []
    store.close()
    ids = read_table(str(tmp_path / "wh"), "p", "t").column("id").to_pylist()
    assert sorted(ids) == list(range(rows))
    assert [p for p in (tmp_path / "wh").rglob("*") if p.is_file() and "_staging" in p.parts] == []


def test_restart_and_pipeline_pause_are_decided_by_the_service(sqlite_url: str) -> None:
    """Kafka Connect's restart as the service decides it (the REST API carries the plan
    out in Airflow), and the pipeline flag set through the service."""
    store = StateStore(sqlite_url)
    svc = control.ConnectorControl(store)
    store.ensure_connector(REF)
    store._update_connector(REF, state="RUNNING")

    plain = svc.restart(REF, include_tasks=False, only_failed=False)
    assert plain == control.RestartPlan(run=True, tasks=(), restarting=False)
    # onlyFailed on a connector that has not failed: nothing restarts.
    assert svc.restart(REF, include_tasks=False, only_failed=True) == control.RestartPlan(
        run=False, tasks=(), restarting=False
    )
    assert svc.view(REF).state == control.State.RUNNING
    # includeTasks&onlyFailed with a failed task: that task runs again, RESTARTING.
    failed = svc.restart(
        REF,
        include_tasks=True,
        only_failed=True,
        tasks=[0, 1, 2],
        failed_tasks=[1],
        failed_task_trace="boom",
    )
    assert failed == control.RestartPlan(run=False, tasks=(1,), restarting=True)
    assert svc.view(REF).state == control.State.RESTARTING

    svc.stop(REF)
    with pytest.raises(control.ConnectorStopped, match="only after resume"):
        svc.restart(REF, include_tasks=False, only_failed=False)

    svc.set_pipeline_paused("p", True)
    assert store.pipeline_paused("p") and svc.gate_blocker(REF) is not None
    svc.set_pipeline_paused("p", False)
    assert not store.pipeline_paused("p")
    store.close()


def test_a_restart_whose_work_commits_nothing_ends(store_url: str, tmp_path: Path) -> None:
    """Kafka Connect's RESTARTING ends with the restarted work even when that commits
    nothing: a rerun task whose batch was already committed (includeTasks), or a run's
    finalize after finding nothing new. A failure stays a failure."""
    from airflow_connectors.engine.discovery import finalize
    from airflow_connectors.testing.conformance import _InProcessTasks

    store = StateStore(store_url)
    svc = control.ConnectorControl(store)
    batch = planned(store, tmp_path)
    assert run_batch(store, batch, _InProcessTasks).committed
    store.set_restarting(REF)
    assert svc.view(REF).state == control.State.RESTARTING
    again = run_batch(store, batch, _InProcessTasks)  # the restarted task: a no-op
    assert not again.committed and svc.view(REF).state == control.State.RUNNING

    store.set_restarting(REF)
    finalize(store, context(tmp_path))  # a run that found nothing new ends
    assert svc.view(REF).state == control.State.RUNNING
    store.record_failure(REF, "boom", kind="transport")
    store.restart_done(REF)
    assert svc.view(REF).state == control.State.FAILED
    store.close()
