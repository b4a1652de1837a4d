"""Connector cron schedules run on the next tick, never for a tick already passed, and
survive Airflow's DAG serialization (the scheduler reads the serialized form)."""

from __future__ import annotations

import datetime as dt
import itertools
import json
from pathlib import Path

import pendulum
import pytest
from conftest import CRON_WITNESS, EndToEnd, dag_file

from airflow_connectors.airflow.timetables import ConnectorCronTimetable


def _restriction(earliest: dt.datetime | None, catchup: bool = False):  # type: ignore[no-untyped-def]
    from airflow.timetables.base import TimeRestriction

    return TimeRestriction(earliest=earliest, latest=None, catchup=catchup)


def test_first_run_is_the_next_tick_not_the_last_past_one() -> None:
    from airflow.timetables.trigger import CronTriggerTimetable

    start = pendulum.datetime(2020, 1, 1, tz="UTC")
    now = pendulum.now("UTC")
    ours = ConnectorCronTimetable("*/5 * * * *", timezone="UTC").next_dagrun_info(
        last_automated_data_interval=None, restriction=_restriction(start)
    )
    stock = CronTriggerTimetable("*/5 * * * *", timezone="UTC").next_dagrun_info(
        last_automated_data_interval=None, restriction=_restriction(start)
    )
    assert ours is not None and stock is not None
    # Airflow's own timetable starts at once for the tick that just passed; ours waits.
    assert stock.run_after <= now
    assert now <= ours.run_after <= now + dt.timedelta(minutes=5)
    assert ours.run_after.minute % 5 == 0 and ours.run_after.second == 0


def test_after_a_long_pause_the_next_run_is_a_future_tick() -> None:
    from airflow.timetables.base import DataInterval

    tt = ConnectorCronTimetable("@hourly", timezone="UTC")
    long_ago = pendulum.datetime(2026, 1, 1, 10, tz="UTC")
    info = tt.next_dagrun_info(
        last_automated_data_interval=DataInterval(long_ago, long_ago),
        restriction=_restriction(pendulum.datetime(2020, 1, 1, tz="UTC")),
    )
    assert info is not None and info.run_after >= pendulum.now("UTC")
    # catchup=True keeps Airflow's behaviour: the tick after the last run.
    caught_up = tt.next_dagrun_info(
        last_automated_data_interval=DataInterval(long_ago, long_ago),
        restriction=_restriction(pendulum.datetime(2020, 1, 1, tz="UTC"), catchup=True),
    )
    assert caught_up is not None and caught_up.run_after == long_ago.add(hours=1)


@pytest.mark.airflow  # Airflow's DagBag and DAG serialization, in this process
def test_scheduled_connector_dags_serialize_with_the_timetable(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    spec = {
        "pipeline": "ticks",
        "tables": {
            "t": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": "first",
                        "labels": ["first"],
                        "transport": {"name": "datagen", "config": {"plan": [{"limit": 1}]}},
                    },
                    {
                        "name": "cron",
                        "trigger": {"schedule": "*/5 * * * *"},
                        "transport": {"name": "datagen", "config": {"plan": [{"limit": 1}]}},
                    },
                    {
                        "name": "both",
                        "start_after": ["first"],
                        "trigger": {"schedule": "@daily"},
                        "transport": {"name": "datagen", "config": {"plan": [{"limit": 1}]}},
                    },
                ],
            }
        },
    }
    (tmp_path / "ticks.yaml").write_text(json.dumps(spec))
    dag_file(tmp_path, "ticks.yaml")
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.import_errors == {}
    cron = DagSerialization.from_dict(DagSerialization.to_dict(bag.dags["ticks.t.cron"]))
    assert isinstance(cron.timetable, ConnectorCronTimetable)
    assert cron.timetable.summary == "*/5 * * * *"
    both = DagSerialization.from_dict(DagSerialization.to_dict(bag.dags["ticks.t.both"]))
    assert type(both.timetable).__name__ == "AssetOrTimeSchedule"
    assert isinstance(both.timetable.timetable, ConnectorCronTimetable)


def test_the_tick_after_the_last_run_is_kept_a_moment_after_it_passed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # The dag-processor recomputes the next run a moment after each tick, often before
    # the scheduler made that tick's run: the tick must not be skipped.
    from airflow.timetables.base import DataInterval

    from airflow_connectors.airflow import timetables

    tick = pendulum.datetime(2026, 11, 27, 18, 0, tz="UTC")
    last = DataInterval(tick.subtract(minutes=10), tick.subtract(minutes=5))
    tt = ConnectorCronTimetable("*/5 * * * *", timezone="UTC")
    for late in (
        dt.timedelta(seconds=0),
        dt.timedelta(seconds=0.2),
        dt.timedelta(seconds=0.9),
        dt.timedelta(seconds=30),
        dt.timedelta(minutes=4, seconds=59),
    ):
        monkeypatch.setattr(timetables, "utcnow", lambda late=late: tick + late)
        info = tt.next_dagrun_info(
            last_automated_data_interval=last, restriction=_restriction(None)
        )
        assert info is not None and info.run_after == tick, late
    # More than one tick without a run (the DAG was off): no run for the passed ticks.
    monkeypatch.setattr(timetables, "utcnow", lambda: tick.add(minutes=5, seconds=1))
    info = tt.next_dagrun_info(last_automated_data_interval=last, restriction=_restriction(None))
    assert info is not None and info.run_after == tick.add(minutes=10)
    # Before the tick, the tick itself.
    monkeypatch.setattr(timetables, "utcnow", lambda: tick.subtract(seconds=1))
    info = tt.next_dagrun_info(last_automated_data_interval=last, restriction=_restriction(None))
    assert info is not None and info.run_after == tick


def test_the_partition_timetable_keeps_the_tick_after_the_last_run_too(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from airflow.timetables.base import DagRunInfo

    from airflow_connectors.airflow import timetables
    from airflow_connectors.airflow.timetables import ConnectorPartitionTimetable

    tick = pendulum.datetime(2026, 11, 28, 0, 0, tz="UTC")
    tt = ConnectorPartitionTimetable("@daily", timezone="UTC")
    last = DagRunInfo(
        run_after=tick.subtract(days=1),
        data_interval=None,
        partition_date=tick.subtract(days=1),
        partition_key="2026-11-27T00:00:00",
    )
    monkeypatch.setattr(timetables, "utcnow", lambda: tick.add(seconds=0.5))
    info = tt.next_dagrun_info_v2(last_dagrun_info=last, restriction=_restriction(None))
    assert info is not None and info.run_after == tick
    assert info.partition_key == "2026-11-28T00:00:00"
    monkeypatch.setattr(timetables, "utcnow", lambda: tick.add(days=1, seconds=1))
    info = tt.next_dagrun_info_v2(last_dagrun_info=last, restriction=_restriction(None))
    assert info is not None and info.run_after == tick.add(days=2)


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_no_tick_is_skipped_under_a_re_parsing_dag_processor(cron_witness: EndToEnd) -> None:
    """A real scheduler and dag-processor: the witness connector on ``* * * * *`` has
    its DAG file re-parsed right after every tick (the next run recomputed each time)
    all along the end-to-end modules. Every tick from its first run on has its run."""
    import time

    af = cron_witness.airflow
    deadline = time.monotonic() + 420
    while True:
        scheduled = [r for r in af.runs(CRON_WITNESS) if r["run_type"] == "scheduled"]
        if len(scheduled) >= 5 or time.monotonic() > deadline:
            break
        time.sleep(10)
    ticks = sorted(_time(r["run_after"]) for r in scheduled)
    assert len(ticks) >= 5, ticks
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert all(gap == dt.timedelta(minutes=1) for gap in gaps), ticks
    now = dt.datetime.now(dt.UTC)
    latest_tick = now.replace(second=0, microsecond=0)
    # The newest tick may be a moment old and its run not made yet; none before it.
    assert ticks[-1] >= latest_tick - dt.timedelta(minutes=1), (ticks, now)
    # The DAG file was re-parsed all along (the dag-processor recomputed the next run).
    parsed = _time(af._json("GET", f"/api/v2/dags/{CRON_WITNESS}")["last_parsed_time"])
    assert now - parsed < dt.timedelta(seconds=75), parsed
    finished = [r for r in af.runs(CRON_WITNESS) if r["state"] not in ("queued", "running")]
    assert finished and all(r["state"] == "success" for r in finished), finished
