"""Partitioned connectors (``trigger: {schedule: "@daily", partitioned: true}``) and the
new-data trigger's fingerprint in Airflow's asset state store.

The fast tests check the timetable, its serialization and the trigger against a real
state store. The end-to-end ones run in ``airflow standalone`` (the session's shared
one, see ``conftest.e2e``): ``airflow backfill create`` makes one run per day-partition
of a date-sliced connector, each day's rows land once, a partition-aware consumer DAG
gets each partition key, a day whose data is bad fails alone, and after the data is
fixed ``--reprocess-behavior failed`` runs that day only. The real triggerer keeps the
new-data trigger's fingerprint in the watched asset's state store.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sqlite3
import textwrap
from pathlib import Path
from typing import Any

import pendulum
import pytest
import yaml
from conftest import EndToEnd, dag_file

from airflow_connectors.airflow.timetables import ConnectorPartitionTimetable
from airflow_connectors.airflow.triggers.new_data import (
    FINGERPRINT_KEY,
    ConnectorNewDataTrigger,
)
from airflow_connectors.catalog import parse_pipeline

pytestmark = pytest.mark.airflow_server

DAYS = ["2026-10-01", "2026-10-02", "2026-10-03"]
KEYS = [f"{day}T00:00:00" for day in DAYS]
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR"}
CONSUMER = "parts_consumer"
SLICES = "parts.daily.slices"
WATCH = "parts.events.watch"


def _restriction(earliest: Any, catchup: bool = False) -> Any:
    from airflow.timetables.base import TimeRestriction

    return TimeRestriction(earliest=earliest, latest=None, catchup=catchup)


def line(i: int, name: str | None = None) -> str:
    return json.dumps({"id": i, "name": name or f"n{i:03d}"}) + "\n"


def json_format() -> dict[str, Any]:
    return {"name": "json", "config": {"update_format": "raw"}}


# --- the timetable ----------------------------------------------------------------------


def test_partitions_are_ticks_and_the_first_scheduled_one_is_in_the_future() -> None:
    tt = ConnectorPartitionTimetable("0 0 * * *", timezone="UTC")
    assert tt.partitioned
    infos = list(
        tt.iter_partition_dagrun_infos(
            earliest=pendulum.datetime(2026, 10, 1, tz="UTC"),
            latest=pendulum.datetime(2026, 10, 3, tz="UTC"),
        )
    )
    assert [i.partition_key for i in infos] == KEYS
    assert all(i.logical_date is None for i in infos)  # partitions carry no logical date

    now = pendulum.now("UTC")
    first = tt.next_dagrun_info_v2(
        last_dagrun_info=None, restriction=_restriction(pendulum.datetime(2020, 1, 1, tz="UTC"))
    )
    assert first is not None and now <= first.run_after <= now.add(days=1)
    assert first.partition_key == first.run_after.strftime("%Y-%m-%dT%H:%M:%S")
    # catchup keeps Airflow's behaviour: the tick after the last run.
    last = infos[-1]
    caught_up = tt.next_dagrun_info_v2(
        last_dagrun_info=last,
        restriction=_restriction(pendulum.datetime(2020, 1, 1, tz="UTC"), catchup=True),
    )
    assert caught_up is not None and caught_up.partition_key == "2026-10-04T00:00:00"


def test_partitioned_connector_dag_serializes_with_the_partition_timetable(
    tmp_path: Path,
) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    spec = {
        "pipeline": "ptt",
        "tables": {
            "t": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": "days",
                        "trigger": {"schedule": "@daily", "partitioned": True},
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(tmp_path / "{{ ds }}")},
                        },
                        "format": json_format(),
                    },
                    {
                        "name": "plain",
                        "trigger": {"schedule": "@daily"},
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(tmp_path / "{{ ds }}")},
                        },
                        "format": json_format(),
                    },
                ],
            }
        },
    }
    (tmp_path / "ptt.yaml").write_text(json.dumps(spec))
    dag_file(tmp_path, "ptt.yaml")
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.import_errors == {}
    days = DagSerialization.from_dict(DagSerialization.to_dict(bag.dags["ptt.t.days"]))
    assert isinstance(days.timetable, ConnectorPartitionTimetable)
    assert days.timetable.partitioned and days.timetable.summary == "0 0 * * *"
    plain = DagSerialization.from_dict(DagSerialization.to_dict(bag.dags["ptt.t.plain"]))
    assert not plain.timetable.partitioned  # not opted in: the templated-slice schedule


def test_partitioned_needs_a_schedule_and_no_event_trigger() -> None:
    from airflow_connectors.spec import SpecValidationError

    def errors(trigger: dict[str, Any]) -> list[str]:
        doc = {
            "pipeline": "p",
            "tables": {
                "t": {
                    "columns": {"id": "BIGINT"},
                    "connectors": [
                        {
                            "name": "c",
                            "trigger": trigger,
                            "transport": {"name": "datagen", "config": {"plan": [{"limit": 1}]}},
                        }
                    ],
                }
            },
        }
        with pytest.raises(SpecValidationError) as e:
            parse_pipeline(doc)
        return [str(err) for err in e.value.errors]

    [missing] = errors({"partitioned": True})
    assert missing.startswith("tables.t.connectors[0].trigger.partitioned: partitioned needs")
    assert "schedule" in missing and "\n" not in missing
    [event] = errors({"partitioned": True, "schedule": "@daily", "on": "new_data"})
    assert "drop on: new_data" in event and "\n" not in event


# --- the new-data trigger's fingerprint -------------------------------------------------


class MemoryAssetStates:
    """Airflow's asset state store accessor as a trigger sees it (``aget``/``aset`` of
    JSON values), kept in memory: shared by the trigger instances the test creates, as
    the metadata DB is shared by the triggerer's restarts of a trigger."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.reads = 0

    async def aget(self, key: str, default: Any = None) -> Any:
        self.reads += 1
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def test_trigger_keeps_its_fingerprint_in_the_asset_state_store(
    tmp_path: Path, connectors_env: dict[str, str]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    spec = parse_pipeline(
        {
            "pipeline": "watched",
            "tables": {
                "events": {
                    "columns": {"id": "BIGINT NOT NULL"},
                    "connectors": [
                        {
                            "name": "files",
                            "trigger": {"on": "new_data", "poll_interval": 0.1},
                            "transport": {
                                "name": "file_input",
                                "config": {"path": str(src), "min_file_age": 0},
                            },
                            "format": json_format(),
                        }
                    ],
                }
            },
        }
    )
    table, connector = spec.find("events.files")
    states = MemoryAssetStates()

    def trigger() -> ConnectorNewDataTrigger:  # as the triggerer re-creates and injects it
        t = ConnectorNewDataTrigger(
            pipeline="watched",
            table=table.model_dump(mode="json", exclude={"connectors"}),
            connector=connector.model_dump(mode="json"),
            poll_interval=0.1,
        )
        t.asset_state_store = states  # type: ignore[assignment]
        return t

    async def first(t: ConnectorNewDataTrigger, within: float) -> Any:
        try:
            return await asyncio.wait_for(t.run().__anext__(), within)
        except TimeoutError:
            return None

    async def declines(t: ConnectorNewDataTrigger, polls: int = 3) -> bool:
        """Whether ``t`` looked ``polls`` times at data it found (reading the state
        store each time) without firing: a negative by evidence, not a quiet second."""
        reads = states.reads + polls
        fired = asyncio.ensure_future(t.run().__anext__())
        deadline = asyncio.get_running_loop().time() + 30
        while states.reads < reads and not fired.done():
            assert asyncio.get_running_loop().time() < deadline, "the trigger stopped polling"
            await asyncio.sleep(0.05)
        done = fired.done()
        fired.cancel()
        return not done

    (src / "a.json").write_text('{"id": 1}\n')
    event = asyncio.run(first(trigger(), 5.0))
    assert event is not None
    recorded = states.values[FINGERPRINT_KEY]
    assert recorded["fingerprint"] == event.payload["data"]
    assert dt.datetime.fromisoformat(recorded["fired_at"]) <= dt.datetime.now(dt.UTC)
    # A restarted trigger sees the same data (nothing ingested it) and declines.
    assert asyncio.run(declines(trigger()))
    assert states.values[FINGERPRINT_KEY] == recorded
    # Our side table was not used: the fingerprint lives in Airflow.
    db = connectors_env["AIRFLOW__CONNECTORS__STATE_STORE_URL"].removeprefix("sqlite:///")
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT new_data_signal FROM ac_connectors WHERE pipeline = 'watched'"
        ).fetchall()
    assert rows in ([], [(None,)])

    (src / "b.json").write_text('{"id": 2}\n')
    again = asyncio.run(first(trigger(), 5.0))
    assert again is not None and again.payload["data"] != event.payload["data"]
    assert states.values[FINGERPRINT_KEY]["fingerprint"] == again.payload["data"]


# --- end to end in airflow standalone -----------------------------------------------------

CONSUMER_DAG = """
import json
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, PartitionedAssetTimetable, task

OUT = Path({out!r})
SLICES = Asset(name="parts.daily.slices", uri="connector://parts/daily/slices")

with DAG(
    dag_id={dag_id!r},
    schedule=PartitionedAssetTimetable(assets=SLICES),
    start_date=pendulum.datetime(2020, 1, 1, tz="UTC"),
    catchup=False,
    is_paused_upon_creation=False,
):

    @task
    def record(partition_key=None, triggering_asset_events=None, run_id=None):
        events = [
            {{"partition_key": e.partition_key, "extra": dict(e.extra)}}
            for e in triggering_asset_events[SLICES]
        ]
        (OUT / (run_id.replace(":", "_") + ".json")).write_text(
            json.dumps({{"partition_key": partition_key, "events": events}})
        )

    record()
"""


class Parts:
    """The running Airflow and this module's folders."""

    def __init__(self, e2e: EndToEnd, root: Path) -> None:
        self.e2e = e2e
        self.root = root
        self.airflow = e2e.airflow
        self.seen = root / "seen"

    def ids(self, table: str) -> list[int]:
        return self.e2e.ids("parts", table)

    def consumed(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted(self.seen.glob("*.json"))]

    def get(self, path: str, **params: Any) -> Any:
        resp = self.airflow.client.get(path, params=params)
        resp.raise_for_status()
        return resp.json()

    def asset(self, uri: str) -> dict[str, Any]:
        # Searched by URI: the API answers at most [api] maximum_page_limit (100) assets
        # a page, and an Airflow shared by several test modules holds more.
        found = self.get("/api/v2/assets", uri_pattern=uri, limit=100)["assets"]
        [asset] = [a for a in found if a["uri"] == uri]
        return dict(asset)

    def asset_events(self, uri: str) -> list[dict[str, Any]]:
        events = self.get("/api/v2/assets/events", asset_id=self.asset(uri)["id"], limit=1000)
        return sorted(events["asset_events"], key=lambda e: e["timestamp"])


#: Day 2's second line as written (not JSON) and as fixed: the same length, so the
#: batch planned from the bad file reads the fixed one whole.
BAD, FIXED = '{"id": 1x1, "name": "n101"}\n', line(101)


@pytest.fixture(scope="module")
def parts(e2e: EndToEnd) -> Parts:
    root = e2e.folder("parts")
    (root / "seen").mkdir()
    (root / "watch").mkdir()
    assert len(BAD) == len(FIXED)
    for n, day in enumerate(DAYS):
        folder = root / "daily" / day
        folder.mkdir(parents=True)
        rows = [line(n * 100 + i) for i in range(3)]
        if n == 1:
            rows[1] = BAD
        (folder / "part.json").write_text("".join(rows))
    spec = {
        "pipeline": "parts",
        "tables": {
            "daily": {
                "columns": COLUMNS,
                "connectors": [
                    {
                        "name": "slices",
                        "paused": True,
                        "trigger": {
                            "schedule": "@daily",
                            "partitioned": True,
                            "start_date": DAYS[0],
                        },
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(root / "daily" / "{{ ds }}"), "min_file_age": 0},
                        },
                        "format": json_format(),
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
        },
    }
    (e2e.dags / "parts_consumer.py").write_text(
        textwrap.dedent(CONSUMER_DAG.format(out=str(root / "seen"), dag_id=CONSUMER))
    )
    e2e.add({"parts.yaml": yaml.safe_dump(spec)}, [SLICES, WATCH, CONSUMER])
    return Parts(e2e, root)


def test_backfill_makes_one_run_per_partition_and_reprocesses_failed_ones(parts: Parts) -> None:
    af = parts.airflow
    af.set_paused(SLICES, False)
    args = ["backfill", "create", "--dag-id", SLICES, "--from-date", DAYS[0], "--to-date", DAYS[-1]]
    created = af.cli(*args)
    assert created.returncode == 0, created.stderr[-2000:]
    af.wait_backfills(SLICES, timeout=400)
    runs = [r for r in af.runs(SLICES) if r["run_type"] == "backfill"]
    assert sorted(r["partition_key"] for r in runs) == KEYS
    assert all(r["logical_date"] is None for r in runs)
    state = {r["partition_key"]: r["state"] for r in runs}
    # Day 2's bad line fails its batch (errors.tolerance none); days 1 and 3 land.
    assert state == {KEYS[0]: "success", KEYS[1]: "failed", KEYS[2]: "success"}, "\n".join(
        af.explain_run(SLICES, r["dag_run_id"]) for r in runs if r["state"] != "success"
    )
    assert parts.ids("daily") == [0, 1, 2, 200, 201, 202]
    # The finished events are partitioned: one per landed day, carrying its key.
    events = parts.asset_events("connector://parts/daily/slices")
    assert sorted(e["partition_key"] for e in events) == [KEYS[0], KEYS[2]]
    assert all(e["extra"]["partition_key"] == e["partition_key"] for e in events)
    af.wait_runs(CONSUMER, 2, timeout=120)
    assert sorted(c["partition_key"] for c in parts.consumed()) == [KEYS[0], KEYS[2]]

    # Fix day 2 in place; re-running the failed partitions runs day 2 only.
    bad = parts.root / "daily" / DAYS[1] / "part.json"
    bad.write_text(bad.read_text().replace(BAD, FIXED))
    again = af.cli(*args, "--reprocess-behavior", "failed")
    assert again.returncode == 0, again.stderr[-2000:]
    backfills = af.wait_backfills(SLICES, timeout=400)
    assert len(backfills) == 2 and all(b["completed_at"] for b in backfills)
    reruns = [r for r in af.runs(SLICES) if r["run_type"] == "backfill"]
    new = [r for r in reruns if r["dag_run_id"] not in {x["dag_run_id"] for x in runs}]
    assert [(r["partition_key"], r["state"]) for r in new] == [(KEYS[1], "success")], "\n".join(
        af.explain_run(SLICES, r["dag_run_id"]) for r in new
    )
    assert parts.ids("daily") == [0, 1, 2, 100, 101, 102, 200, 201, 202]  # each day once
    events = parts.asset_events("connector://parts/daily/slices")
    assert sorted(e["partition_key"] for e in events) == KEYS
    af.wait_runs(CONSUMER, 3, timeout=120)
    consumed = parts.consumed()
    assert sorted(c["partition_key"] for c in consumed) == KEYS
    for c in consumed:  # each consumer run saw the one event of its partition
        assert [e["partition_key"] for e in c["events"]] == [c["partition_key"]]
        assert c["events"][0]["extra"]["total_records"] >= 3


def test_new_data_trigger_fingerprint_lives_in_the_asset_state_store(parts: Parts) -> None:
    af = parts.airflow
    uri = "connector-new-data://parts/events/watch"
    (parts.root / "watch" / "a.json").write_text(line(1))
    runs = af.wait_runs(WATCH, 1, timeout=180)
    assert [(r["run_type"], r["state"]) for r in runs] == [("asset_triggered", "success")]
    assert parts.ids("events") == [1]
    events = parts.asset_events(uri)
    assert len(events) == 1, events
    # The triggerer's asset state store of the watched asset holds what it last fired
    # for (the REST API and the UI show it); our side table holds nothing.
    stored = parts.get(f"/api/v2/assets/{parts.asset(uri)['id']}/state-store/{FINGERPRINT_KEY}")
    assert stored["value"]["fingerprint"] == events[-1]["extra"]["payload"]["data"]
    assert stored["last_updated_by"]["kind"] == "watcher", stored  # written by the trigger
    db = parts.e2e.root / "state.db"
    with sqlite3.connect(db) as conn:
        [(signal,)] = conn.execute(
            "SELECT new_data_signal FROM ac_connectors WHERE pipeline = 'parts' "
            "AND table_name = 'events'"
        ).fetchall()
    assert signal is None
