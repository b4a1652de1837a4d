"""Connector DAGs on real Airflow (``DagBag``, ``dag.test()``) with real spark-submit on
local Spark: rendering, exactly-once runs, tasks_max, the gate, templated slices and the
finished asset event."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
import yaml
from conftest import DAGS, dag_file, task_states, write_pipeline

# Also the tests that parse the DAG file with DagBag in a subprocess.
pytestmark = pytest.mark.airflow

COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR"}


def json_files(folder: Path, files: int, rows: int, start: int = 0) -> list[int]:
    folder.mkdir(parents=True, exist_ok=True)
    ids = []
    for f in range(files):
        lines = []
        for i in range(rows):
            n = start + f * rows + i
            ids.append(n)
            lines.append(json.dumps({"id": n, "name": f"n{n}"}))
        (folder / f"part-{start + f:05d}.json").write_text("\n".join(lines) + "\n")
    return ids


def files_connector(path: Path | str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "files",
        "transport": {"name": "file_input", "config": {"path": str(path), "min_file_age": 0}},
        "format": {"name": "json", "config": {"update_format": "raw"}},
        **extra,
    }


def table_ids(env: dict[str, str], pipeline: str, table: str) -> list[int]:
    path = Path(env["AIRFLOW__CONNECTORS__WAREHOUSE"]) / pipeline / table
    if not path.is_dir():
        return []
    return sorted(ds.dataset(str(path), format="parquet").to_table().column("id").to_pylist())


def ingest_runs(states: dict[tuple[str, int], str]) -> list[int]:
    """Map indexes of ingest task instances that ran (mapped, map_index >= 0)."""
    return sorted(i for (task, i), state in states.items() if task == "ingest" and i >= 0)


def test_dagbag_renders_one_dag_per_connector_without_pyspark(tmp_path: Path) -> None:
    """Parsing the DAG file in a fresh interpreter: ids, tags, paused flags, schedules,
    docs; pyspark is never imported (parse time: bench/parse.py)."""
    spec_dir = tmp_path / "dags"
    spec_dir.mkdir()
    spec = {
        "pipeline": "shop",
        "tables": {
            "numbers": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": "backfill",
                        "labels": ["numbers.backfill"],
                        "transport": {"name": "datagen", "config": {"plan": [{"limit": 5}]}},
                    },
                    {
                        "name": "live",
                        "paused": True,
                        "start_after": "numbers.backfill",
                        "trigger": {"schedule": "@hourly"},
                        "transport": {"name": "datagen", "config": {"plan": [{"rate": 10}]}},
                    },
                    {
                        "name": "secret",
                        "transport": {
                            "name": "url_input",
                            "config": {"path": "http://user:hunter2@127.0.0.1:1/x"},
                        },
                        "format": {"name": "json"},
                    },
                ],
            },
            "wide": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": f"gen{i}",
                        "transport": {"name": "datagen", "config": {"plan": [{"limit": 1}]}},
                    }
                    for i in range(50)
                ],
            },
        },
    }
    (spec_dir / "shop.yaml").write_text(json.dumps(spec))
    dag_file(spec_dir, "shop.yaml")
    probe = f"""
import json, sys, time
from airflow.dag_processing.dagbag import DagBag
t0 = time.perf_counter()
bag = DagBag(dag_folder={str(spec_dir)!r})
seconds = time.perf_counter() - t0
out = {{
    "errors": {{k: str(v) for k, v in bag.import_errors.items()}},
    "seconds": seconds,
    "pyspark": any(m == "pyspark" or m.startswith("pyspark.") for m in sys.modules),
    "dags": {{
        d.dag_id: {{
            "tags": sorted(d.tags),
            "paused": d.is_paused_upon_creation,
            "tasks": sorted(t.task_id for t in d.tasks),
            "schedule": type(d.timetable).__name__,
            "assets": sorted(a.uri for a in d.timetable.asset_condition.objects)
            if getattr(d.timetable, "asset_condition", None) is not None
            else [],
            "doc": d.doc_md,
        }}
        for d in bag.dags.values()
    }},
}}
print(json.dumps(out))
"""
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["errors"] == {}
    assert out["pyspark"] is False
    dags = out["dags"]
    assert len(dags) == 53
    assert set(dags) >= {"shop.numbers.backfill", "shop.numbers.live", "shop.wide.gen49"}
    backfill, live = dags["shop.numbers.backfill"], dags["shop.numbers.live"]
    assert backfill["tags"] == ["label:numbers.backfill", "pipeline:shop", "table:numbers"]
    assert backfill["paused"] is False and live["paused"] is True
    assert backfill["tasks"] == ["discover", "finalize", "finished", "ingest"]
    assert backfill["schedule"] == "NullTimetable"
    assert live["schedule"] == "AssetOrTimeSchedule"
    assert live["assets"] == ["connector://shop/numbers/backfill"]
    secret_doc = dags["shop.numbers.secret"]["doc"]
    assert "hunter2" not in secret_doc and "http://user:***@127.0.0.1:1/x" in secret_doc


def test_parsing_the_dag_file_leaves_the_state_store_alone(tmp_path: Path) -> None:
    """The dag-processor parses DAG files every few seconds: parsing reads the spec and
    writes nothing. A state store that does not exist is not created; an existing one
    keeps its bytes. The serialized discover task carries the spec the REST API shows."""
    from airflow_connectors.state.store import ConnectorRef, StateStore

    spec_dir = tmp_path / "dags"
    spec_dir.mkdir()
    spec = {
        "pipeline": "quiet",
        "tables": {
            "numbers": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": "gen",
                        "transport": {"name": "datagen", "config": {"plan": [{"limit": 5}]}},
                    }
                ],
            }
        },
    }
    (spec_dir / "quiet.yaml").write_text(json.dumps(spec))
    dag_file(spec_dir, "quiet.yaml")
    probe = f"""
import json
from airflow.dag_processing.dagbag import DagBag
from airflow.serialization.serialized_objects import DagSerialization
bag = DagBag(dag_folder={str(spec_dir)!r})
dag = DagSerialization.from_dict(DagSerialization.to_dict(bag.dags["quiet.numbers.gen"]))
print(json.dumps({{
    "errors": {{k: str(v) for k, v in bag.import_errors.items()}},
    "spec": json.loads(dag.get_task("discover").spec_json),
}}))
"""

    def parse(store: Path) -> dict[str, Any]:
        env = {**os.environ, "AIRFLOW__CONNECTORS__STATE_STORE_URL": f"sqlite:///{store}"}
        proc = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["errors"] == {}
        return out

    absent = tmp_path / "absent" / "state.db"
    absent.parent.mkdir()
    out = parse(absent)
    assert not absent.exists() and list(absent.parent.iterdir()) == []
    assert out["spec"]["connector"]["name"] == "gen"
    assert out["spec"]["table"]["name"] == "numbers"
    assert out["spec"]["connector"]["transport"]["config"]["plan"][0]["limit"] == 5

    existing = tmp_path / "existing.db"
    store = StateStore(f"sqlite:///{existing}")
    store.set_pipeline_paused("quiet", True)
    store.set_end_of_input(ConnectorRef("quiet", "numbers", "gen"), True)
    store.close()
    before = existing.read_bytes()
    parse(existing)
    assert existing.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["absent", "dags", "existing.db"]


def asset_event_extras(uri: str) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        events = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == uri)
            .all()
        )
        return [dict(e.extra) for e in events]


@pytest.fixture
def on_spark_connect(
    connectors_env: dict[str, str], spark_connect_server: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """``connectors_env`` with the batches on the session's Spark Connect server (what
    the tests using it check is not where Spark runs; the others here and
    test_ingest_shipping run spark-submit)."""
    monkeypatch.setenv("AIRFLOW__CONNECTORS__EXECUTION", "spark_connect")
    monkeypatch.setenv("AIRFLOW__CONNECTORS__SPARK_CONNECT_URL", spark_connect_server.url)
    return connectors_env


def test_dag_test_lands_rows_once_and_idles_without_spark(
    tmp_path: Path, on_spark_connect: dict[str, str]
) -> None:
    connectors_env = on_spark_connect
    ids = json_files(tmp_path / "src", files=30, rows=20)
    dags = write_pipeline(
        "once",
        {
            "events": {
                "columns": COLUMNS,
                "connectors": [files_connector(tmp_path / "src", tasks_max=3)],
            }
        },
    )
    dag = dags["once.events.files"]

    first = dag.test()
    states = task_states(first)
    assert str(first.state) == "success", states
    assert ingest_runs(states) == [0, 1, 2]  # 30 files, tasks_max 3: three mapped batches
    assert states[("finished", -1)] == "success"
    assert table_ids(connectors_env, "once", "events") == ids

    second = dag.test()
    states = task_states(second)
    assert str(second.state) == "success", states
    assert ingest_runs(states) == []  # nothing new: no ingest task instance ran
    assert states[("ingest", -1)] == "skipped"
    assert states[("finished", -1)] == "skipped"  # the finished event went out once
    assert table_ids(connectors_env, "once", "events") == ids
    extras = asset_event_extras("connector://once/events/files")
    assert len(extras) == 1  # once, although two runs ended finished
    assert extras[0]["total_records"] == len(ids) and extras[0]["end_of_input"] is True

    more = json_files(tmp_path / "src", files=1, rows=10, start=5000)
    third = dag.test()
    states = task_states(third)
    assert ingest_runs(states) == [0]
    assert table_ids(connectors_env, "once", "events") == sorted(ids + more)
    # New data ingested and end of input reached again: the same finish, so no second
    # event and a start_after dependent does not run again.
    assert states[("finished", -1)] == "skipped"
    assert len(asset_event_extras("connector://once/events/files")) == 1


def test_gate_skips_while_pipeline_paused_or_start_after_unfinished(
    tmp_path: Path, on_spark_connect: dict[str, str]
) -> None:
    connectors_env = on_spark_connect
    from airflow_connectors.settings import Settings
    from airflow_connectors.state.store import StateStore

    ids = json_files(tmp_path / "src", files=2, rows=5)
    dags = write_pipeline(
        "gated",
        {
            "events": {
                "columns": COLUMNS,
                "connectors": [
                    files_connector(tmp_path / "src", labels=["events.loaded"]),
                    {
                        "name": "more",
                        "start_after": ["events.loaded"],
                        "transport": {
                            "name": "datagen",
                            "config": {
                                "plan": [{"limit": 3, "fields": {"id": {"range": [100, 200]}}}]
                            },
                        },
                    },
                ],
            }
        },
    )
    store = StateStore(Settings.load().state_store_url)
    store.set_pipeline_paused("gated", True)
    paused = dags["gated.events.files"].test()
    states = task_states(paused)
    assert states[("discover", -1)] == "skipped" and states[("finalize", -1)] == "skipped"
    assert table_ids(connectors_env, "gated", "events") == []

    store.set_pipeline_paused("gated", False)
    # A stopped connector does not run, whatever its DAG's flag, until it is resumed.
    from airflow_connectors.engine import control
    from airflow_connectors.state.store import ConnectorRef

    files = ConnectorRef("gated", "events", "files")
    control.ConnectorControl(store).stop(files)
    stopped = task_states(dags["gated.events.files"].test())
    assert stopped[("discover", -1)] == "skipped"
    assert table_ids(connectors_env, "gated", "events") == []
    control.ConnectorControl(store).resume(files)

    early = dags["gated.events.more"].test()  # the labelled connector has not finished
    assert task_states(early)[("discover", -1)] == "skipped"

    dags["gated.events.files"].test()
    late = dags["gated.events.more"].test()
    assert task_states(late)[("discover", -1)] == "success"
    assert table_ids(connectors_env, "gated", "events") == sorted([*ids, 100, 101, 102])
    store.close()


def test_templated_config_reads_each_days_slice_once(
    tmp_path: Path, connectors_env: dict[str, str]
) -> None:
    days = ["2026-11-01", "2026-11-02"]  # three days through `airflow backfill`: test_standalone
    expected: list[int] = []
    for n, day in enumerate(days):
        expected += json_files(tmp_path / "src" / day, files=1, rows=4, start=n * 100)
    connector = files_connector(str(tmp_path / "src" / "{{ ds }}"), trigger={"schedule": "@daily"})
    dag = write_pipeline("daily", {"events": {"columns": COLUMNS, "connectors": [connector]}})[
        "daily.events.files"
    ]

    for n, day in enumerate(days):
        run = dag.test(logical_date=dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC))
        assert str(run.state) == "success", task_states(run)
        assert table_ids(connectors_env, "daily", "events") == sorted(expected[: 4 * (n + 1)])
    again = dag.test(logical_date=dt.datetime(2026, 11, 1, tzinfo=dt.UTC))
    assert ingest_runs(task_states(again)) == []
    assert table_ids(connectors_env, "daily", "events") == sorted(expected)


def test_config_invalid_once_rendered_fails_naming_connector_and_field(
    connectors_env: dict[str, str],
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_connectors.airflow.operators.connector import ConnectorDiscoverOperator
    from airflow_connectors.settings import Settings

    connector = files_connector("/data/{{ ds }}")
    op = ConnectorDiscoverOperator(
        task_id="discover",
        pipeline="p",
        table={"name": "t", "columns": []},
        connector={**connector, "transport": {**connector["transport"], "config": {"path": "/x"}}},
    )
    op.transport_config = {"path": ""}  # what a template that renders empty leaves
    with pytest.raises(AirflowFailException) as err:
        op.batch_context(Settings.load())
    message = str(err.value)
    assert "connector p.t.files" in message and "transport.config.path" in message
    assert "Fix the template in the pipeline spec" in message


def test_spark_connection_defaults_to_local_never_yarn(connectors_env: dict[str, str]) -> None:
    from airflow.sdk.exceptions import AirflowNotFoundException

    from airflow_connectors.airflow.operators.connector import ConnectorIngestOperator

    op = ConnectorIngestOperator(task_id="ingest", batch_id=1, pipeline="p", endpoint="t.c")
    hook = op._get_hook()
    assert hook._connection["master"] == "local[2]"  # [connectors] spark_master, not yarn
    assert hook._conf["spark.driver.bindAddress"] == "127.0.0.1"
    # The hook knew the master when it was built: no YARN-only --conf on the command line.
    command = " ".join(hook._build_spark_submit_command("app.py"))
    assert "--master local[2]" in command and "yarn" not in command

    named = ConnectorIngestOperator(
        task_id="ingest", batch_id=1, pipeline="p", endpoint="t.c", conn_id="my_cluster"
    )
    with pytest.raises(
        AirflowNotFoundException, match="Spark connection 'my_cluster' does not exist"
    ):
        named._get_hook()


def test_local_cli_pauses_the_dag_in_the_local_airflow(
    tmp_path: Path, connectors_env: dict[str, str]
) -> None:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    connector = {
        "name": "gen",
        "transport": {"name": "datagen", "config": {"plan": [{"limit": 1}]}},
    }
    write_pipeline("localcli", {"t": {"columns": COLUMNS, "connectors": [connector]}})
    synced = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "reserialize"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert synced.returncode == 0, synced.stderr[-2000:]

    def cli(action: str) -> dict[str, Any]:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "airflow_connectors.cli",
                "connector",
                "localcli",
                "t",
                "gen",
                action,
                "--local",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return dict(json.loads(proc.stdout))

    def paused() -> bool:
        with create_session() as session:
            dag = session.get(DagModel, "localcli.t.gen")
            assert dag is not None
            return bool(dag.is_paused)

    assert cli("pause") == {"airflow": "DAG localcli.t.gen paused"}
    assert paused() is True
    assert cli("start") == {"airflow": "DAG localcli.t.gen unpaused"}
    assert paused() is False

    # Paused in Airflow (the UI toggle), not through the CLI: the CLI says PAUSED, as the
    # REST API does, for `connector ... stats --local` and `stats`.
    with create_session() as session:
        dag = session.get(DagModel, "localcli.t.gen")
        assert dag is not None
        dag.is_paused = True
    stats = cli("stats")
    assert (stats["state"], stats["paused"]) == ("PAUSED", True)
    top = subprocess.run(
        [sys.executable, "-m", "airflow_connectors.cli", "stats", "localcli", "t", "gen"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "state: PAUSED  paused: True" in top.stdout, top.stderr[-2000:]


def test_one_invalid_connector_keeps_the_valid_ones_and_fails_alone(
    connectors_env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 22: a start_after typo in one connector made every DAG of its pipeline stale
    with a Python traceback as the import error. Now the valid connectors keep their
    DAGs, no import error is raised, and the invalid one has a DAG that fails at once
    with the problem lines (its own start_after target left out with it)."""
    from airflow.dag_processing.dagbag import DagBag

    from airflow_connectors.airflow.render import ConnectorPipeline

    gen = {"name": "datagen", "config": {"plan": [{"limit": 3}]}}
    tables = {
        "t": {
            "columns": {"id": "BIGINT NOT NULL"},
            "connectors": [
                {"name": "good", "labels": ["good.done"], "transport": gen},
                {"name": "typo", "start_after": "good.dnoe", "transport": gen},
                {"name": "after_good", "start_after": "good.done", "transport": gen},
            ],
        }
    }
    dags = write_pipeline("halfbad", tables)
    assert set(dags) == {"halfbad.t.good", "halfbad.t.typo", "halfbad.t.after_good"}
    assert [t.task_id for t in dags["halfbad.t.typo"].tasks] == ["gate"]
    assert "good.dnoe" in (dags["halfbad.t.typo"].doc_md or "")
    assert len(dags["halfbad.t.good"].tasks) == 4
    run = dags["halfbad.t.typo"].test()
    assert str(run.state) == "failed" and task_states(run) == {("gate", -1): "failed"}
    # The valid one still runs.
    assert str(dags["halfbad.t.good"].test().state) == "success"

    # A problem outside any connector still fails the file, its message the problems.
    bad = tmp_path / "dags"
    bad.mkdir()
    (bad / "broken.yaml").write_text(
        yaml.safe_dump({"pipeline": "broken", "tables": {"t": {"columns": {"id": "NOPE"}}}})
    )
    bag = DagBag(dag_folder=str(dag_file(bad, "broken.yaml")))
    [error] = bag.import_errors.values()
    assert "tables.t.columns.id" in error
    pipeline = ConnectorPipeline.from_file(DAGS / "halfbad.yaml")
    assert list(pipeline.invalid) == [("t", "typo")]


def test_a_dag_with_an_inline_secret_serializes_the_same_at_every_parse(
    connectors_env: dict[str, str],
) -> None:
    """Secrets are sealed deterministically (issue 22): parsing the DAG file again gives
    the same serialized DAG, so Airflow keeps one version and the DAG's triggers."""
    from airflow.serialization.serialized_objects import DagSerialization

    connector = {
        "name": "landing",
        "trigger": {"on": "new_data"},
        "transport": {
            "name": "s3_input",
            "config": {
                "bucket_name": "landing-bucket",
                "prefix": "in/",
                "aws_access_key_id": "AKIAEXAMPLE0001",
                "aws_secret_access_key": "wJalrXUtnFEMI-K7MDENG-0422",
            },
        },
        "format": {"name": "json"},
    }
    tables = {"t": {"columns": {"id": "BIGINT"}, "connectors": [connector]}}
    first = json.dumps(
        DagSerialization.to_dict(write_pipeline("sealed", tables)["sealed.t.landing"])
    )
    again = json.dumps(
        DagSerialization.to_dict(write_pipeline("sealed", tables)["sealed.t.landing"])
    )
    assert first == again
    assert "sealed:v1:" in first and "wJalrXUtnFEMI-K7MDENG-0422" not in first


def test_the_gate_retries_a_start_while_the_api_server_starts(
    connectors_env: dict[str, str],
) -> None:
    """Issue 22: a cron tick during the quickstart's restart failed its run at the gate
    (the execution API was not up yet). The gate's checks start discover, which retries
    3 times, 20 s apart (issue 26: no separate gate task)."""
    gen = {"name": "datagen", "config": {"plan": [{"limit": 1}]}}
    tables = {"t": {"columns": {"id": "BIGINT"}, "connectors": [{"name": "g", "transport": gen}]}}
    dag = write_pipeline("gated", tables)["gated.t.g"]
    assert "gate" not in dag.task_ids
    discover = dag.get_task("discover")
    assert discover.retries == 3 and discover.retry_delay == dt.timedelta(seconds=20)
