"""Airflow for the provider tests: a throw-away AIRFLOW_HOME and DAGs folder, set before
Airflow is first imported, and a migrated SQLite metadata DB for ``dag.test()``."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

_HOME = Path(tempfile.mkdtemp(prefix="ac-airflow-"))
DAGS = _HOME / "dags"
DAGS.mkdir()
os.environ["AIRFLOW_HOME"] = str(_HOME)
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
os.environ.pop("AIRFLOW__CORE__SQL_ALCHEMY_CONN", None)
os.environ.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[Path]:
    from airflow.utils import db

    db.initdb()
    yield _HOME


@pytest.fixture
def connectors_env(tmp_path: Path, airflow_db: Path) -> Iterator[dict[str, str]]:
    """Where the tasks keep connector state and tables (read by Settings.load())."""
    env = {
        "AIRFLOW__CONNECTORS__STATE_STORE_URL": f"sqlite:///{tmp_path / 'state.db'}",
        "AIRFLOW__CONNECTORS__WAREHOUSE": str(tmp_path / "warehouse"),
        "AIRFLOW__CONNECTORS__SPARK_MASTER": "local[2]",
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def dag_file(dags: Path, spec: str, name: str | None = None) -> Path:
    """A DAG file in ``dags`` rendering the spec file ``spec`` (relative to it)."""
    path = dags / (name or f"{Path(spec).stem}_dags.py")
    path.write_text(
        "from airflow_connectors.airflow import ConnectorPipeline\n"
        f"ConnectorPipeline.from_file({spec!r}).dags()\n"
    )
    return path


def start_standalone(root: Path, dags: Path, dag_ids: list[str]) -> Any:
    """``airflow standalone`` over ``dags``, its connectors' state and tables under
    ``root``; returns once ``dag_ids`` are parsed (the caller stops it)."""
    from airflow_connectors.airflow.standalone import StandaloneAirflow

    env = {
        "AIRFLOW__CONNECTORS__STATE_STORE_URL": f"sqlite:///{root / 'state.db'}",
        "AIRFLOW__CONNECTORS__WAREHOUSE": str(root / "warehouse"),
        "AIRFLOW__CONNECTORS__SPARK_MASTER": "local[1]",
    }
    airflow = StandaloneAirflow(root / "home", dags, env=env)
    airflow.start()
    try:
        airflow.wait_for_dags(dag_ids)
    except BaseException:
        airflow.stop()
        raise
    return airflow


def write_pipeline(name: str, tables: dict[str, Any]) -> dict[str, Any]:
    """Write ``<name>.yaml`` and a DAG file rendering it into the DAGs folder; return the
    DAGs as Airflow's DagBag parses them from that file."""
    from airflow.dag_processing.dagbag import DagBag

    (DAGS / f"{name}.yaml").write_text(yaml.safe_dump({"pipeline": name, "tables": tables}))
    bag = DagBag(dag_folder=str(dag_file(DAGS, f"{name}.yaml")))
    assert bag.import_errors == {}, bag.import_errors
    return dict(bag.dags)


def task_states(dag_run: Any) -> dict[tuple[str, int], str]:
    """``(task_id, map_index) -> state`` of a finished ``dag.test()`` run."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = (
            session.query(TaskInstance)
            .filter(TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id)
            .all()
        )
        return {(ti.task_id, ti.map_index): str(ti.state) for ti in tis}
