"""A connector inside a user's own DAG (``ConnectorTaskGroup``) on real Airflow
(``DagBag``, ``dag.test()``) with real spark-submit on local Spark: the docs' example
as written, rows landed once however often the DAG runs, the user's task after the
group, the finished asset event, the gate's skips, and what the group refuses."""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
import yaml
from conftest import DAGS, task_states
from docs_examples import doc_block

from airflow_connectors.state.store import ConnectorRef, StateStore

pytestmark = pytest.mark.airflow_server

#: The docs' example (docs/concepts/own-dag.md).
MARKER = "<!-- task-group-example -->"
GROUP = "orders__live"


def readme_block(marker: str) -> str:
    """The first Python block after ``marker`` in the docs."""
    return doc_block(marker, "python")


def parse_dag_file(name: str, code: str) -> dict[str, Any]:
    """Write a DAG file into the DAGs folder; its DAGs as Airflow's DagBag parses them."""
    from airflow.dag_processing.dagbag import DagBag

    path = DAGS / name
    path.write_text(code)
    bag = DagBag(dag_folder=str(path))
    assert bag.import_errors == {}, bag.import_errors
    return dict(bag.dags)


def table_ids(env: dict[str, str], pipeline: str, table: str) -> list[int]:
    path = Path(env["AIRFLOW__CONNECTORS__WAREHOUSE"]) / pipeline / table
    if not path.is_dir():
        return []
    return sorted(ds.dataset(str(path), format="parquet").to_table().column("id").to_pylist())


def asset_events(uri: str) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        events = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == uri)
            .all()
        )
        return [{"extra": dict(e.extra), "run_id": e.source_run_id} for e in events]


def task_instances(dag_run: Any) -> dict[str, Any]:
    """``task_id -> (start_date, end_date)`` of the run's unmapped task instances."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = (
            session.query(TaskInstance)
            .filter(TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id)
            .all()
        )
        return {ti.task_id: (ti.start_date, ti.end_date) for ti in tis if ti.map_index < 0}


def xcom(dag_run: Any, task_id: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter(
                XComModel.dag_id == dag_run.dag_id,
                XComModel.run_id == dag_run.run_id,
                XComModel.task_id == task_id,
                XComModel.key == "return_value",
            )
            .one()
        )
        return XComModel.deserialize_value(row)


def ingest_runs(states: dict[tuple[str, int], str]) -> list[int]:
    return sorted(i for (task, i), _ in states.items() if task == f"{GROUP}.ingest" and i >= 0)


def test_readme_example_lands_rows_once_and_runs_the_users_task_after_the_group(
    connectors_env: dict[str, str],
) -> None:
    """The docs' DAG as written: a 1,000-row connector, then ``count_orders`` reading
    the table; run twice, the second run lands nothing and counts the same rows."""
    dag = parse_dag_file("readme_shop_report.py", readme_block(MARKER))["shop_report"]
    assert {t.task_id for t in dag.tasks} == {
        f"{GROUP}.{t}" for t in ("discover", "ingest", "finalize", "finished", "done")
    } | {"count_orders"}
    uri = "connector://shop/orders/live"
    events_before = len(asset_events(uri))

    first = dag.test()
    states = task_states(first)
    assert str(first.state) == "success", states
    assert ingest_runs(states) == [0]  # one batch (tasks_max 1)
    assert states[(f"{GROUP}.finished", -1)] == "success"
    assert states[(f"{GROUP}.done", -1)] == "success"
    assert states[("count_orders", -1)] == "success"
    assert table_ids(connectors_env, "shop", "orders") == list(range(1000))
    # The user's task ran after the group, and saw every row.
    times = task_instances(first)
    assert times["count_orders"][0] >= times[f"{GROUP}.done"][1]
    assert xcom(first, "count_orders") == 1000
    events = asset_events(uri)
    assert len(events) == events_before + 1
    assert events[-1]["run_id"] == first.run_id
    assert events[-1]["extra"]["total_records"] == 1000
    assert events[-1]["extra"]["end_of_input"] is True

    second = dag.test()
    states = task_states(second)
    assert str(second.state) == "success", states
    assert ingest_runs(states) == []  # nothing new: no Spark job
    assert states[(f"{GROUP}.ingest", -1)] == "skipped"
    assert states[(f"{GROUP}.finished", -1)] == "skipped"  # the finish was signalled once
    assert states[(f"{GROUP}.done", -1)] == "success"
    assert states[("count_orders", -1)] == "success"
    assert xcom(second, "count_orders") == 1000
    assert table_ids(connectors_env, "shop", "orders") == list(range(1000))
    assert len(asset_events(uri)) == events_before + 1


QUIET_DAG = """
import datetime as dt

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_connectors.airflow import ConnectorTaskGroup

with DAG(
    "quiet_report", schedule=None, start_date=dt.datetime(2026, 1, 1), max_active_runs=1
) as dag:
    group = ConnectorTaskGroup(spec="quiet.yaml", connector="numbers.gen", group_id="load")
    group >> EmptyOperator(task_id="after_group")
    group.finished >> EmptyOperator(task_id="after_finished")
"""


def test_gate_skips_the_group_and_the_users_task_while_paused_or_stopped(
    connectors_env: dict[str, str],
) -> None:
    """A task-group connector is paused with its pipeline, or stopped, in the state
    store (its gate reads both), not with a DAG pause; no Spark starts."""
    from airflow_connectors.engine.control import ConnectorControl

    spec = {
        "pipeline": "quiet",
        "tables": {
            "numbers": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": "gen",
                        "transport": {"name": "datagen", "config": {"plan": [{"limit": 3}]}},
                    }
                ],
            }
        },
    }
    (DAGS / "quiet.yaml").write_text(yaml.safe_dump(spec))  # relative to the DAG file
    dag = parse_dag_file("quiet_report.py", QUIET_DAG)["quiet_report"]
    assert dag.get_task("load.finished").downstream_task_ids == {"load.done", "after_finished"}
    assert dag.get_task("after_group").upstream_task_ids == {"load.done"}

    store = StateStore(connectors_env["AIRFLOW__CONNECTORS__STATE_STORE_URL"])
    ref = ConnectorRef("quiet", "numbers", "gen")
    try:
        store.set_pipeline_paused("quiet", True)
        paused = task_states(dag.test())
        store.set_pipeline_paused("quiet", False)
        ConnectorControl(store).stop(ref)
        stopped = task_states(dag.test())
        assert store.pending_batches(ref) == []
    finally:
        store.close()
    for states in (paused, stopped):
        for task in ("load.discover", "load.done", "after_group", "after_finished"):
            assert states[(task, -1)] == "skipped", (task, states)
    assert table_ids(connectors_env, "quiet", "numbers") == []


def render_group(code: str) -> Any:
    """Run DAG-file code in this process (no DagBag): the DAG ``dag`` it defines."""
    namespace: dict[str, Any] = {"__file__": str(DAGS / "inline_dag.py")}
    exec(textwrap.dedent(code), namespace)
    return namespace["dag"]


def group_code(dag_args: str = ", max_active_runs=1", **connector: Any) -> str:
    fields = {"transport": {"name": "datagen", "config": {"plan": [{"limit": 3}]}}, **connector}
    return f"""
import datetime as dt
from airflow.sdk import DAG
from airflow_connectors import Pipeline
from airflow_connectors.airflow import ConnectorTaskGroup
spec = Pipeline("p").table("t", columns={{"id": "INT"}}).connector("c", **{fields!r})
with DAG("host", schedule=None, start_date=dt.datetime(2026, 1, 1){dag_args}) as dag:
    ConnectorTaskGroup(spec=spec)
"""


@pytest.mark.parametrize(
    ("code", "message"),
    [
        pytest.param(
            group_code(""),  # Airflow's default: [core] max_active_runs_per_dag
            "connector p.t.c: DAG host has max_active_runs=16, but a connector's runs go one at "
            "a time",
            id="max-active-runs",
        ),
        pytest.param(
            group_code(trigger={"schedule": "@daily"}),
            "connector p.t.c: its trigger ({'schedule': '@daily'}) schedules the connector's "
            "own DAG; inside your DAG its schedule runs the connector",
            id="trigger",
        ),
        pytest.param(
            group_code(freshness="2h", trigger={"schedule": "@hourly"}),
            "connector p.t.c: freshness becomes a deadline alert of the connector's own DAG",
            id="freshness",
        ),
    ],
)
def test_what_only_a_connectors_own_dag_can_do_is_refused_in_one_line(
    airflow_db: Path, code: str, message: str
) -> None:
    with pytest.raises(ValueError) as e:
        render_group(code)
    assert str(e.value).startswith(message)
    assert "\n" not in str(e.value)


def test_connector_is_named_as_table_dot_connector(airflow_db: Path) -> None:
    from airflow.sdk import DAG

    from airflow_connectors import Pipeline
    from airflow_connectors.airflow import ConnectorTaskGroup

    two = (
        Pipeline("p")
        .table("t", columns={"id": "INT"})
        .connector("a", transport={"name": "datagen"})
        .connector(
            "b",
            transport={"name": "url_input", "config": {"path": "http://u:hunter2@127.0.0.1:1/x"}},
            format={"name": "json"},
        )
    )
    with DAG("named", schedule=None, start_date=dt.datetime(2026, 1, 1), max_active_runs=1):
        with pytest.raises(ValueError, match=r"pipeline p has 2 connectors \(t.a, t.b\); name one"):
            ConnectorTaskGroup(spec=two)
        with pytest.raises(
            ValueError, match=r"pipeline p has no connector 't\.z'; its connectors: t\.a, t\.b"
        ):
            ConnectorTaskGroup(spec=two, connector="t.z")
        group = ConnectorTaskGroup(spec=two, connector="t.b")
    assert group.group_id == "t__b"
    assert group.connector_name == "p.t.b"
    assert [a.uri for a in group.finished.outlets] == ["connector://p/t/b"]
    assert "airflow-connectors pipeline p pause --local" in group.doc_md
    assert "127.0.0.1:1/x" in group.doc_md and "hunter2" not in group.doc_md


def test_connector_pipeline_renders_a_built_pipeline_as_its_yaml(airflow_db: Path) -> None:
    """``ConnectorPipeline`` takes a built pipeline: the same DAGs as from the YAML file."""
    from airflow_connectors import Pipeline
    from airflow_connectors.airflow import ConnectorPipeline

    connector = {
        "name": "gen",
        "labels": ["first"],
        "transport": {"name": "datagen", "config": {"plan": [{"limit": 3}]}},
    }
    (DAGS / "twin.yaml").write_text(
        yaml.safe_dump(
            {
                "pipeline": "twin",
                "tables": {"t": {"columns": {"id": "INT"}, "connectors": [connector]}},
            }
        )
    )
    from_yaml = ConnectorPipeline.from_file(DAGS / "twin.yaml").dags()
    built = Pipeline("twin").table("t", columns={"id": "INT"}).connector(**connector)
    from_python = ConnectorPipeline(built).dags()
    assert list(from_python) == list(from_yaml) == ["twin.t.gen"]
    a, b = from_yaml["twin.t.gen"], from_python["twin.t.gen"]
    assert sorted(a.task_dict) == sorted(b.task_dict)
    assert a.get_task("discover").spec_json == b.get_task("discover").spec_json
    assert a.tags == b.tags
