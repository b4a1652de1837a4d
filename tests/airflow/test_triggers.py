"""The new-data event trigger and the deferrable sensor against real files, a real state
store and (for the sensor) a real ``dag.test()`` run whose deferral runs inline."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import DAGS, task_states

from airflow_connectors.airflow.triggers.new_data import ConnectorNewDataTrigger
from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.engine.discovery import context


def watch_spec(folder: Path | str, transport: dict[str, Any] | None = None) -> Any:
    return parse_pipeline(
        {
            "pipeline": "watched",
            "tables": {
                "events": {
                    "columns": {"id": "BIGINT NOT NULL"},
                    "connectors": [
                        {
                            "name": "files",
                            "trigger": {"on": "new_data", "poll_interval": 0.2},
                            "transport": transport
                            or {
                                "name": "file_input",
                                "config": {"path": str(folder), "min_file_age": 0},
                            },
                            "format": {"name": "json", "config": {"update_format": "raw"}},
                        }
                    ],
                }
            },
        }
    )


def trigger_for(spec: Any) -> ConnectorNewDataTrigger:
    table, connector = spec.find("events.files")
    classpath, kwargs = ConnectorNewDataTrigger(
        pipeline=spec.name,
        table=table.model_dump(mode="json", exclude={"connectors"}),
        connector=connector.model_dump(mode="json"),
        poll_interval=0.2,
    ).serialize()
    assert classpath == "airflow_connectors.airflow.triggers.new_data.ConnectorNewDataTrigger"
    return ConnectorNewDataTrigger(**kwargs)  # as the triggerer re-creates it


def slow_trigger(spec: Any, poll_interval: float = 120) -> ConnectorNewDataTrigger:
    """The trigger of ``events.files`` polling every ``poll_interval`` seconds."""
    table, connector = spec.find("events.files")
    return ConnectorNewDataTrigger(
        pipeline=spec.name,
        table=table.model_dump(mode="json", exclude={"connectors"}),
        connector=connector.model_dump(mode="json"),
        poll_interval=poll_interval,
    )


def record_probes(monkeypatch: pytest.MonkeyPatch, after_first: Any = None) -> list[str | None]:
    """What each probe of the triggers finds, in order; ``after_first()`` runs once the
    first probe found its answer."""
    from airflow_connectors.airflow.triggers import new_data

    real_probe = new_data.probe
    answers: list[str | None] = []

    def recording_probe(*args: Any, **kwargs: Any) -> Any:
        answers.append(real_probe(*args, **kwargs))
        if len(answers) == 1 and after_first is not None:
            after_first()
        return answers[-1]

    monkeypatch.setattr(new_data, "probe", recording_probe)
    return answers


def first_event(trigger: ConnectorNewDataTrigger, within: float) -> Any:
    async def wait() -> Any:
        try:
            return await asyncio.wait_for(trigger.run().__anext__(), within)
        except TimeoutError:
            return None

    return asyncio.run(wait())


def polls_without_event(
    trigger: ConnectorNewDataTrigger, monkeypatch: pytest.MonkeyPatch, polls: int = 3
) -> list[str | None]:
    """Run ``trigger`` until it has polled the source ``polls`` times and return what each
    poll found (its digest, or None). A negative by evidence, not by a quiet second: the
    trigger fires on the first poll that finds something, so ``polls`` answers of None
    mean it looked that many times and declined each time."""
    from airflow_connectors.airflow.triggers import new_data

    real_probe = new_data.probe
    answers: list[str | None] = []
    enough = asyncio.Event()
    loop: list[asyncio.AbstractEventLoop] = []

    def counting_probe(*args: Any, **kwargs: Any) -> str | None:  # in a worker thread
        answer = real_probe(*args, **kwargs)
        answers.append(answer)
        if len(answers) >= polls:
            loop[0].call_soon_threadsafe(enough.set)
        return answer

    async def watch() -> Any:
        loop.append(asyncio.get_running_loop())
        fired = asyncio.ensure_future(trigger.run().__anext__())
        counted = asyncio.ensure_future(enough.wait())
        done, _ = await asyncio.wait({fired, counted}, timeout=60, return_when="FIRST_COMPLETED")
        fired.cancel()
        counted.cancel()
        assert done, f"the trigger polled {len(answers)} times in 60 s"
        return fired.result() if fired in done and not fired.cancelled() else None

    with monkeypatch.context() as m:
        m.setattr(new_data, "probe", counting_probe)
        event = asyncio.run(watch())
    assert event is None, f"the trigger fired: {event}"
    return answers[:polls]


def test_event_trigger_fires_once_per_new_data(
    tmp_path: Path, connectors_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_connectors.engine.discovery import new_data_fingerprint
    from airflow_connectors.settings import Settings
    from airflow_connectors.state.store import StateStore

    src = tmp_path / "src"
    src.mkdir()
    spec = watch_spec(src)
    assert polls_without_event(trigger_for(spec), monkeypatch) == [None] * 3  # nothing there

    (src / "a.json").write_text('{"id": 1}\n')
    event = first_event(trigger_for(spec), within=5.0)
    assert event is not None and event.payload["endpoint"] == "events.files"
    # The triggerer restarts a trigger after each event: it keeps seeing the same data
    # (discovery would still find it: nothing ingested it), and declines each time.
    store = StateStore(Settings.load().state_store_url)
    table, connector = spec.find("events.files")
    ctx = context(spec, table, connector, Settings.load().warehouse)
    assert new_data_fingerprint(store, ctx) == event.payload["data"]
    store.close()
    assert polls_without_event(trigger_for(spec), monkeypatch) == [None] * 3

    (src / "b.json").write_text('{"id": 2}\n')
    assert first_event(trigger_for(spec), within=5.0) is not None


def test_event_trigger_holds_while_the_pipeline_is_paused(
    tmp_path: Path, connectors_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_connectors.state.store import StateStore

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text('{"id": 1}\n')
    store = StateStore(connectors_env["AIRFLOW__CONNECTORS__STATE_STORE_URL"])
    store.set_pipeline_paused("watched", True)
    # It polls the data there and declines while paused.
    assert polls_without_event(trigger_for(watch_spec(src)), monkeypatch) == [None] * 3
    store.set_pipeline_paused("watched", False)
    assert first_event(trigger_for(watch_spec(src)), within=5.0) is not None
    store.close()


def test_sensor_defers_until_data_arrives(tmp_path: Path, connectors_env: dict[str, str]) -> None:
    """A user's DAG waits on the sensor; the deferred trigger (run inline by dag.test())
    sees the file a parallel writer drops, and the sensor succeeds."""
    import threading

    from airflow.dag_processing.dagbag import DagBag

    src = tmp_path / "src"
    src.mkdir()
    (DAGS / "sensing.yaml").write_text(
        json.dumps(
            {
                "pipeline": "sensing",
                "tables": {
                    "events": {
                        "columns": {"id": "BIGINT NOT NULL"},
                        "connectors": [
                            {
                                "name": "files",
                                "transport": {
                                    "name": "file_input",
                                    "config": {"path": str(src), "min_file_age": 0},
                                },
                                "format": {"name": "json"},
                            }
                        ],
                    }
                },
            }
        )
    )
    dag_file = DAGS / "sensing_user.py"
    dag_file.write_text(
        textwrap.dedent(
            """
            import datetime as dt
            from airflow.sdk import DAG
            from airflow_connectors.airflow.sensors.new_data import ConnectorNewDataSensor

            with DAG("sensing_user", schedule=None, start_date=dt.datetime(2026, 1, 1)):
                ConnectorNewDataSensor(
                    task_id="wait", spec="sensing.yaml", connector="events.files",
                    poll_interval=0.5, timeout=120,
                )
            """
        )
    )
    dag = DagBag(dag_folder=str(dag_file)).dags["sensing_user"]
    timer = threading.Timer(4.0, lambda: (src / "a.json").write_text('{"insert": {"id": 1}}\n'))
    timer.start()
    try:
        run = dag.test()
    finally:
        timer.cancel()
    assert str(run.state) == "success", task_states(run)
    assert (src / "a.json").exists()


def test_event_trigger_polls_the_source_off_the_event_loop(
    tmp_path: Path, connectors_env: dict[str, str], monkeypatch: Any
) -> None:
    """The triggerer runs every trigger on one event loop and warns of a "badly-written
    trigger" when it is held up: listing the source and reading the state store (disk,
    network, database) must happen in a worker thread, never on the loop's thread."""
    import threading

    from airflow_connectors.airflow.triggers import new_data

    real_probe = new_data.probe
    threads: list[int] = []

    def recording_probe(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return real_probe(*args, **kwargs)

    monkeypatch.setattr(new_data, "probe", recording_probe)
    src = tmp_path / "src"
    src.mkdir()
    loop_thread: list[int] = []

    async def watch() -> Any:
        loop_thread.append(threading.get_ident())
        trigger = trigger_for(watch_spec(src))
        threading.Timer(0.5, lambda: (src / "a.json").write_text('{"id": 1}\n')).start()
        return await asyncio.wait_for(trigger.run().__anext__(), 10)

    event = asyncio.run(watch())
    assert event.payload["endpoint"] == "events.files"
    assert len(threads) >= 2  # polled before and after the file arrived
    assert loop_thread[0] not in threads


def test_a_new_file_wakes_the_trigger_before_its_next_poll(
    tmp_path: Path, connectors_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local folder is watched (inotify): a file renamed into it is probed at once, not
    at the next poll (two minutes away here); what each probe found is recorded, so the
    event is shown to come from a second probe woken by the rename."""
    import threading

    src = tmp_path / "src"
    src.mkdir()
    trigger = slow_trigger(watch_spec(src))
    answers = record_probes(monkeypatch)
    staged = tmp_path / "a.json"
    staged.write_text('{"id": 1}\n')
    threading.Timer(1.0, lambda: staged.rename(src / "a.json")).start()
    event = first_event(trigger, within=30.0)
    assert event is not None and event.payload["endpoint"] == "events.files"
    assert answers[0] is None and answers[-1] == event.payload["data"]
    assert len(answers) == 2  # the first poll, then the one the rename woke


def test_the_folders_a_file_input_trigger_watches(tmp_path: Path) -> None:
    from airflow_connectors.airflow.triggers.new_data import watch_paths

    (tmp_path / "in" / "2026").mkdir(parents=True)
    (tmp_path / "in" / "one.csv").write_text("id\n1\n")

    def watched(path: str, transport: str = "file_input") -> list[str]:
        config = {"bucket_name": "bucket", "prefix": ""}
        s3 = {"name": "s3_input", "config": config} if transport == "s3_input" else None
        spec = watch_spec(path, s3)
        table, connector = spec.find("events.files")
        return watch_paths(
            table.model_dump(mode="json", exclude={"connectors"}),
            connector.model_dump(mode="json"),
        )

    folder = str(tmp_path / "in")
    assert watched(folder) == [folder]  # a folder: itself
    assert watched(f"{folder}/one.csv") == [folder]  # a file: its folder
    assert watched(f"{folder}/*/part-*.csv") == [folder]  # a glob: its fixed folder
    assert watched(f"{folder}/later/x") == [folder]  # not there yet: its existing parent
    assert watched("", "s3_input") == []  # not local: polled only
