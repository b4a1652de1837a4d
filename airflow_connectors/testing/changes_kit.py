"""The changes kit: a sink that applies changes to keyed tables (``primary_key``) proves
it under SIGKILL at every fail point and with publishers racing.

The sink kit (:mod:`.sink_kit`) proves appends; this proves changes, driving the same
real engine, real Spark (the ingest job in a process of its own, SIGKILLed) and a state
store in SQLite. A sink subclasses :class:`ChangesConformance` once::

    class TestMySinkChanges(ChangesConformance):
        sink_name = "my_sink"
        #: The sink's fail points a keyed batch passes while publishing.
        changes_fail_points = ("my_sink_keys_committed", "my_sink_committed")

with the fixtures ``warehouse_url``, ``storage_env`` and ``sink_config`` as in the sink
kit (same defaults), and ``execution`` as there (``spark_connect``: the killed jobs are
clients of the session fixture ``spark_connect_server``). The source is one batch of two JSON files in Feldera's
``update_format: insert_delete``: the first inserts :data:`KEYS` rows; the second
updates some of them partially, deletes some, replaces some, inserts and deletes others
within the batch, deletes and inserts some again, and holds one bad line
(``errors.tolerance: all``). What the table must hold is computed here from the records,
by applying them in order (not by the product's own code).

- ``test_changes_killed_then_next_run`` (one per fail point: the engine's and
  ``changes_fail_points``): the job is SIGKILLed at the point; its retry and the
  connector's next run leave the exact table and the one dead letter.
- ``test_changes_concurrent_publishers_land_once``: a job killed right after the state
  store committed the batch; four retries publish it at the same moment, then one more.

Only tests import this module (it imports pytest).
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.engine.batch import run_batch
from airflow_connectors.sinks import _fs
from airflow_connectors.state.store import BatchStatus
from airflow_connectors.testing import jobs
from airflow_connectors.testing.conformance import assert_same_records
from airflow_connectors.testing.sink_kit import (
    COLUMNS,
    CONNECTOR,
    ENGINE_FAIL_POINTS,
    PIPELINE,
    REACH_TIMEOUT,
    TABLE,
    KitFixtures,
    SinkCase,
    expected,
    no_spark,
)

#: Rows the first file inserts.
KEYS = 600
BAD_LINE = '{"insert": {"id": 99999, "name": "bad", "amount": "not a number"}}'


def _row(i: int, name: str | None = None, amount: float | None = None) -> dict[str, Any]:
    return {"id": i, "name": name or f"name-{i}", "amount": i / 4 if amount is None else amount}


def change_records() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The two files' records, in order."""
    first = [{"insert": _row(i)} for i in range(KEYS)]
    second: list[dict[str, Any]] = []
    second += [{"update": {"id": i, "amount": i * 10.0}} for i in range(0, 200)]
    second += [{"delete": {"id": i}} for i in range(200, 300)]
    second += [{"insert": _row(i, f"again-{i}", -float(i))} for i in range(300, 350)]
    for i in range(1000, 1050):  # born and gone within the batch
        second += [{"insert": _row(i)}, {"delete": {"id": i}}]
    for i in range(400, 410):  # gone, then back
        second += [{"delete": {"id": i}}, {"insert": _row(i, "back")}]
    second += [{"update": {"id": i, "name": f"renamed-{i}"}} for i in range(0, 50)]
    second += [{"update": {"id": 5000, "name": "nobody"}}]  # a key the table lacks
    return first, second


def truth(records: list[dict[str, Any]]) -> pa.Table:
    """The table after ``records`` applied one by one in order."""
    rows: dict[int, dict[str, Any]] = {}
    for rec in records:
        ((op, value),) = rec.items()
        key = value["id"]
        if op == "insert":
            rows[key] = dict(value)
        elif op == "delete":
            rows.pop(key, None)
        elif key in rows:
            rows[key].update(value)
    return expected(list(rows.values()))


class ChangesConformance(KitFixtures):
    """Subclass once per sink that applies changes: see the module docstring."""

    sink_name: ClassVar[str]
    changes_fail_points: ClassVar[tuple[str, ...]] = ()
    spark_master: ClassVar[str] = "local[1]"
    #: Where the killed jobs run their batches, as the sink kit's ``execution``:
    #: ``spark_submit`` (a JVM each, the default: a sink of another distribution is not
    #: importable by a Spark Connect server's workers) or ``spark_connect`` (clients of
    #: the session fixture ``spark_connect_server``; the keyed publish runs in the
    #: client either way).
    execution: ClassVar[str] = "spark_submit"

    # --- the kit ----------------------------------------------------------------------

    @classmethod
    def points(cls) -> tuple[str, ...]:
        """Every point a keyed batch's job is killed at."""
        return (*ENGINE_FAIL_POINTS, *cls.changes_fail_points)

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """One crash test per fail point."""
        if "changes_point" in metafunc.fixturenames:
            metafunc.parametrize("changes_point", self.points())

    @pytest.fixture(scope="class")
    @classmethod
    def changes_source(cls, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
        """The source folder (two files of changes and a bad line) and the true table."""
        folder = tmp_path_factory.mktemp("changes-kit-source")
        first, second = change_records()
        (folder / "a.json").write_text("".join(json.dumps(r) + "\n" for r in first))
        lines = [json.dumps(r) for r in second]
        lines.insert(len(lines) // 2, BAD_LINE)
        (folder / "b.json").write_text("".join(line + "\n" for line in lines))
        return folder, truth(first + second)

    @classmethod
    def keyed_case(
        cls,
        name: str,
        root: Path,
        source: Path,
        warehouse_url: str,
        sink_config: Callable[[str], dict[str, Any]],
    ) -> SinkCase:
        """A case: its connector reads ``source``'s changes into a keyed table."""
        root.mkdir(parents=True, exist_ok=True)
        doc = {
            "pipeline": PIPELINE,
            "tables": {
                TABLE: {
                    "columns": COLUMNS,
                    "primary_key": ["id"],
                    "sink": {"name": cls.sink_name, "config": sink_config(name)},
                    "connectors": [
                        {
                            "name": CONNECTOR,
                            "errors": {"tolerance": "all"},
                            "transport": {
                                "name": "file_input",
                                "config": {"path": str(source), "min_file_age": 0},
                            },
                            "format": {
                                "name": "json",
                                "config": {"update_format": "insert_delete"},
                            },
                        }
                    ],
                }
            },
        }
        return SinkCase(
            name=name,
            root=root,
            spec=parse_pipeline(doc),
            warehouse=_fs.join(warehouse_url, f"changes-{name}"),
            store_url=f"sqlite:///{root / 'state.db'}",
        )

    @pytest.fixture(scope="class")
    @classmethod
    def killed_changes(
        cls,
        kit_env: None,
        changes_source: tuple[Path, pa.Table],
        warehouse_url: str,
        sink_config: Callable[[str], dict[str, Any]],
        tmp_path_factory: pytest.TempPathFactory,
        request: pytest.FixtureRequest,
    ) -> dict[str, SinkCase]:
        """Every killed job of the class, started at once: one per fail point and one
        killed after the commit for the concurrent publishers."""
        base = tmp_path_factory.mktemp("changes-kit")
        folder = changes_source[0]
        names = {p: p for p in cls.points()} | {"concurrent": "after_commit"}
        cases = {n: cls.keyed_case(n, base / n, folder, warehouse_url, sink_config) for n in names}
        procs: dict[str, subprocess.Popen[bytes]] = {}
        connect_url = None
        if cls.execution == "spark_connect":
            connect_url = request.getfixturevalue("spark_connect_server").url
        try:
            for name, case in cases.items():
                (batch,) = case.plan()
                assert batch, name
                procs[name] = case.start(names[name], cls.spark_master, connect_url)
            for name, proc in procs.items():
                jobs.wait_for(cases[name].marks / names[name], proc, timeout=REACH_TIMEOUT)
                jobs.kill(proc)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    jobs.kill(proc)
        return cases

    def assert_exact(self, case: SinkCase, rows: pa.Table) -> None:
        """The table holds exactly ``rows`` and the bad line's one dead letter."""
        assert_same_records(case.read(), rows, "id", f"{self.sink_name} keyed table ({case.name})")
        dead = case.read("errors")
        assert dead.column("raw_text").to_pylist() == [BAD_LINE], case.name

    def test_changes_killed_then_next_run(
        self,
        killed_changes: dict[str, SinkCase],
        changes_source: tuple[Path, pa.Table],
        spark: Any,
        changes_point: str,
    ) -> None:
        """Killed at the point, then retried and run again: the exact table."""
        case = killed_changes[changes_point]
        case.next_run(spark)
        self.assert_exact(case, changes_source[1])
        case.next_run(spark)  # nothing new: nothing changes
        self.assert_exact(case, changes_source[1])

    def test_changes_concurrent_publishers_land_once(
        self,
        killed_changes: dict[str, SinkCase],
        changes_source: tuple[Path, pa.Table],
        spark: Any,
    ) -> None:
        """Four retries of a committed keyed batch publish it at once, then one more."""
        case = killed_changes["concurrent"]
        (batch,) = case.batch_ids
        with case.store() as store:
            assert store.load_batch(batch).status == BatchStatus.COMMITTED
        start = threading.Barrier(4)
        errors: list[BaseException] = []

        def publish() -> None:
            try:
                with case.store() as store:
                    start.wait()
                    assert not run_batch(store, batch, no_spark).committed
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=publish) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], f"{self.sink_name}: concurrent publishers failed: {errors[0]!r}"
        case.next_run(spark)
        self.assert_exact(case, changes_source[1])
