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


#: The DAG of :meth:`EndToEnd.start_cron_witness`.
CRON_WITNESS = "cronwitness.t.minutely"


class EndToEnd:
    """One ``airflow standalone`` shared by the end-to-end modules (starting one costs
    about a minute). Its metadata DB is a fresh PostgreSQL database, as in production:
    ``airflow backfill create`` beside a busy scheduler is not reliable on SQLite. The
    connectors keep their state in a SQLite store (the embedded default) and write their
    tables under ``warehouse``. Each module adds its pipelines with :meth:`add` and keeps
    its sources in its own folder (:meth:`folder`); pipeline names must differ."""

    def __init__(self, root: Path, airflow: Any) -> None:
        self.root = root
        self.airflow = airflow
        self.dags = Path(airflow.dags_folder)
        self.warehouse = root / "warehouse"

    def folder(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def add(self, files: dict[str, str], dag_ids: list[str]) -> None:
        """Write spec files (name -> text) and a DAG file rendering each into the DAGs
        folder; return once Airflow parsed ``dag_ids``."""
        for name, text in files.items():
            (self.dags / name).write_text(text)
            dag_file(self.dags, name)
        self.airflow.wait_for_dags(dag_ids)

    def start_cron_witness(self) -> None:
        """A connector on ``* * * * *`` (an empty folder: its runs start no Spark) whose
        DAG file is touched a moment after every tick and again half a second later, so
        the dag-processor re-parses it (and recomputes its next run) just after each tick,
        before or while the scheduler makes that tick's run: the race that skipped ticks
        (issue 22). :data:`CRON_WITNESS` runs all along the end-to-end modules; a test
        checks that no tick was skipped."""
        import threading
        import time

        folder = self.folder("cron-witness")
        spec = {
            "pipeline": "cronwitness",
            "tables": {
                "t": {
                    "columns": {"id": "BIGINT NOT NULL"},
                    "connectors": [
                        {
                            "name": "minutely",
                            "trigger": {"schedule": "* * * * *"},
                            "transport": {
                                "name": "file_input",
                                "config": {"path": str(folder), "min_file_age": 0},
                            },
                            "format": {"name": "json"},
                        }
                    ],
                }
            },
        }
        self.add({"cronwitness.yaml": yaml.safe_dump(spec)}, [CRON_WITNESS])
        dag = self.dags / "cronwitness_dags.py"
        self._witness_stop = threading.Event()

        def touch() -> None:
            while not self._witness_stop.is_set():
                now = time.time()
                self._witness_stop.wait(60 - now % 60 + 0.1)
                for pause in (0.0, 0.5):
                    time.sleep(pause)
                    if dag.exists():
                        os.utime(dag)

        threading.Thread(target=touch, name="cron-witness", daemon=True).start()

    def stop_cron_witness(self) -> None:
        stop = getattr(self, "_witness_stop", None)
        if stop is not None:
            stop.set()

    def ids(self, pipeline: str, table: str) -> list[int]:
        """The sorted ``id`` column of a table in the warehouse."""
        import pyarrow.dataset as ds

        path = self.warehouse / pipeline / table
        if not path.is_dir():
            return []
        return sorted(ds.dataset(str(path), format="parquet").to_table().column("id").to_pylist())


#: The running :class:`EndToEnd`, stopped right after the last test of the session that
#: uses it (:func:`pytest_runtest_teardown`) instead of at the session's end: idle, its
#: scheduler, dag-processor, triggerer, API server and the cron witness's run a minute
#: would take CPU from every test after the Airflow modules.
_RUNNING: list[EndToEnd] = []
_LAST_USER: dict[int, str | None] = {}


def _stop_e2e(e2e: EndToEnd) -> None:
    e2e.stop_cron_witness()
    e2e.airflow.stop()  # idempotent


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the last test that uses ``e2e`` (its module's fixtures torn down), stop it."""
    try:
        return (yield)
    finally:
        if _RUNNING:
            session = item.session
            if id(session) not in _LAST_USER:
                users = [i.nodeid for i in session.items if "e2e" in getattr(i, "fixturenames", ())]
                _LAST_USER[id(session)] = users[-1] if users else None
            if item.nodeid == _LAST_USER[id(session)]:
                _stop_e2e(_RUNNING.pop())


@pytest.fixture(scope="session")
def e2e(
    tmp_path_factory: pytest.TempPathFactory,
    pg_database: Any,
    spark_connect_server: Any,
    request: pytest.FixtureRequest,
) -> Iterator[EndToEnd]:
    """Started by the first test that needs it; stopped after the last one. Its
    batches run on the session's Spark Connect server (``[connectors] execution =
    spark_connect``): a client per ingest task instead of a JVM per batch, a third less
    CPU for the REST, UI and control tests, which are not about where Spark runs;
    test_standalone's url_input connector says ``execution: spark_submit`` (the
    product's default, under a real scheduler), as do the cluster tests and the
    quickstart. The cron
    witness runs from the start when a test of the session checks it (:func:`cron_witness`):
    its run a minute is most of what an idle Airflow costs (8% of a core of 11%)."""
    from airflow_connectors.testing.standalone import StandaloneAirflow

    root = tmp_path_factory.mktemp("e2e")
    (root / "dags").mkdir()
    env = {
        "AIRFLOW__CONNECTORS__STATE_STORE_URL": f"sqlite:///{root / 'state.db'}",
        "AIRFLOW__CONNECTORS__WAREHOUSE": str(root / "warehouse"),
        "AIRFLOW__CONNECTORS__SPARK_MASTER": "local[1]",
        "AIRFLOW__CONNECTORS__EXECUTION": "spark_connect",
        "AIRFLOW__CONNECTORS__SPARK_CONNECT_URL": spark_connect_server.url,
        # New files are still found every 5 s; re-parsing unchanged ones every 5 s
        # would cost a fifth of a core on a 2-core machine.
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "300",
        # Connection tests (validate's checks of named connections) as an admin enables
        # them; Airflow's default is Disabled.
        "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
    }
    airflow = StandaloneAirflow(
        root / "home",
        root / "dags",
        env=env,
        metadata_db=pg_database(),
        users={"reader": ("viewer", "reader-pw")},  # read-only, for the authorization tests
    )
    airflow.start()
    e2e = EndToEnd(root, airflow)
    _RUNNING.append(e2e)
    try:
        if any("cron_witness" in getattr(i, "fixturenames", ()) for i in request.session.items):
            e2e.start_cron_witness()
        yield e2e
    finally:
        if e2e in _RUNNING:
            _RUNNING.remove(e2e)
        _stop_e2e(e2e)


@pytest.fixture
def cron_witness(e2e: EndToEnd) -> EndToEnd:
    """The e2e Airflow whose :data:`CRON_WITNESS` has run since it started (all along
    the end-to-end modules before the test that asks for it)."""
    assert getattr(e2e, "_witness_stop", None) is not None, "the cron witness was not started"
    return e2e


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
