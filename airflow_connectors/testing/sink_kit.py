"""The sink conformance kit: one pytest suite every sink runs.

The transport kit (:mod:`.conformance`) proves a source; this proves a table. A sink,
built in or a third party's (registered in the entry-point group ``airflow_connectors.sinks``),
subclasses :class:`SinkConformance` once, names the sink and its own fail points, and says
where its tables go::

    import pytest
    from airflow_connectors.testing.sink_kit import SinkConformance

    class TestMySink(SinkConformance):
        sink_name = "my_sink"
        #: Fail points the sink passes while publishing (see airflow_connectors.failpoints).
        sink_fail_points = ("my_sink_committed",)
        #: Of those, the ones at which a reader already sees the whole batch.
        whole_at = ("my_sink_committed",)

        @pytest.fixture(scope="class")
        @classmethod
        def warehouse_url(cls, tmp_path_factory):
            return str(tmp_path_factory.mktemp("wh"))  # or "s3://bucket/wh", "gs://..."

The subclassing interface (stable: other sinks and warehouses subclass it):

- ``sink_name`` (required): the registered sink.
- ``sink_fail_points``: the sink's own fail points, in the order a batch passes them; the
  kit kills a job at each of them after the engine's (:data:`ENGINE_FAIL_POINTS`).
- ``whole_at``: those of ``sink_fail_points`` after the sink's commit (the batch is
  visible whole); at the others a killed publish may show part of the batch only when
  ``atomic_publish`` is False.
- ``atomic_publish`` (default True): whether a reader sees a batch all at once. False for
  a sink that moves a batch's parts in one by one (the Parquet folder): the polling check
  then only asks that no row is seen twice and every row lands.
- ``spark_master`` (default ``local[1]``): the Spark master of the killed jobs.
- ``execution`` (default ``spark_submit``): ``spark_connect`` makes the killed jobs
  clients of the session fixture ``spark_connect_server`` (what the storage mixins do).

The three fixtures below are class-scoped and, as pytest wants of class-scoped fixtures
on a class, class methods (``@pytest.fixture(scope="class")`` above ``@classmethod``);
they may use session fixtures (``s3_server``), not function ones (``tmp_path``).

- fixture ``warehouse_url`` (class scope; default a temporary folder): the warehouse,
  a folder or a URL (``s3://bucket/prefix``, ``gs://...``, an Azure URL); each case of
  the kit writes its table under its own folder of it (:func:`airflow_connectors.sinks._fs.join`).
- fixture ``storage_env`` (class scope; default none): environment variables this
  process and the killed jobs need to reach the warehouse (``AWS_*`` for an S3 server,
  the emulator's endpoint); set for the class's tests, then restored.
- fixture ``sink_config`` (class scope): a function ``case -> dict``, the sink's config
  for the table of one case (``case`` is a short name, unique in the class): a sink whose
  tables live outside the warehouse (PostgreSQL) gives each case its own schema or table.
  Default: ``{}`` for every case.
- mixin :class:`S3Warehouse`: the two fixtures above for a warehouse in a new bucket of
  an S3 server (the ``s3_server`` fixture); :class:`AzureWarehouse` for Azurite. Both are
  :class:`OtherStorage`: the sink's class on a local warehouse runs the cases that do not
  depend on the storage (``storage_independent_cases``: the kill before anything is
  written and the evolving table), the class on the other storage the rest, its killed
  jobs as Spark Connect clients (``execution``).
- hook :meth:`SinkConformance.check_landed`: sink-specific checks once a case's batches
  landed (one commit per batch, nothing staged left...), given the :class:`SinkCase`
  (its ``sink()``, ``committed()`` batch ids, ``warehouse``; ``command_lines`` of a
  killed job's processes, to check no secret was on one). Default: none. A batch may
  hold dead letters only (no rows): a sink need not commit to its rows table for it.
- a session fixture ``spark`` (a ``SparkSession``) must exist (this repository's
  ``tests/conftest.py`` has one): the runs after a kill use it, as a retry would.

What the suite checks, driving the real engine (:func:`~airflow_connectors.engine.batch.run_batch`),
the real sink, real Spark (the ingest job ``python -m airflow_connectors.engine.job`` in a
process of its own) and a state store in SQLite; the table is read as a reader sees it,
through :meth:`Sink.read <airflow_connectors.sinks.base.Sink.read>`:

- ``test_kill_at_fail_point_then_next_run`` (one per fail point): a batch of three JSON
  files and a bad line (``errors.tolerance: all``) whose job is SIGKILLed at the point;
  a reader then sees none of the batch (before the sink's commit) or all of it
  (``whole_at``); the killed job's retry and the connector's next run leave the exact
  table: every row once, the one dead letter once.
- ``test_concurrent_publishers_land_the_batch_once``: a job killed right after the state
  store committed the batch; four retries publish it at the same moment from threads, then
  one more: the exact table.
- ``test_polling_reader_sees_whole_batches_only``: a job ingests three batches (six files
  and a bad line between them, a part per write) while this process reads the table over
  and over: every read holds each batch whole or not at all, no row twice; the last one
  all of them.
- ``test_added_nullable_column_lands``: a first batch lands, then the source gains a field
  (``schema_evolution: add_new_columns``) and the job of the second batch is killed after
  it was staged again with the new column (``after_widened_write``); after the next run
  the table has the column, null in the first batch's rows.

Every killed job of a class is started at once (a JVM start is what costs) by one
class-scoped fixture; the tests then look at their own case.

With ``execution: spark_connect`` the killed jobs are client processes
(:func:`start_connect_job`) whose tasks run on a Spark Connect server.
:class:`SparkConnectCrashes` (with the server's kill: :class:`SparkConnectServerKill`)
adds what only Spark Connect has: the client killed while the server runs its task, and
the server killed while a task reads (a stalled body of :class:`StalledBodies`). Only tests import this module
(it imports pytest); importing ``airflow_connectors`` never loads it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.engine.batch import run_batch
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.engine.discovery import context, discover
from airflow_connectors.sinks import Sink, _fs
from airflow_connectors.spec import PipelineSpec
from airflow_connectors.state.store import BatchStatus, StateStore
from airflow_connectors.testing import jobs
from airflow_connectors.testing.conformance import assert_same_records
from airflow_connectors.testing.jobs import start_connect_job

#: The engine's fail points of a batch, in order (:mod:`airflow_connectors.failpoints`);
#: a sink's own come after them (``SinkConformance.sink_fail_points``).
ENGINE_FAIL_POINTS = ("before_sink_write", "sink_write_started", "after_sink_write", "after_commit")
PIPELINE = "kit"
TABLE = "events"
CONNECTOR = "files"
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"}
#: The crash cases' batch: FILES files of ROWS rows, and one bad line.
FILES, ROWS = 3, 1_000
BAD_FILE = "zz-bad.json"
BAD_LINE = '{"id": 99999, "name": "bad", "amount": "not a number"}'
#: Seconds a killed job may take to reach its fail point (every job of a class starts
#: at once on a shared machine).
REACH_TIMEOUT = 600


def records(first: int, n: int, **extra: Any) -> list[dict[str, Any]]:
    """Rows ``first .. first + n - 1`` of the source (and ``extra`` fields in each)."""
    return [
        {"id": i, "name": f"name-{i}-{'x' * (i % 13)}", "amount": i / 4, **extra}
        for i in range(first, first + n)
    ]


def write_file(folder: Path, name: str, rows: list[dict[str, Any]]) -> None:
    """One JSON-lines file of ``rows``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def expected(rows: list[dict[str, Any]], columns: dict[str, pa.DataType] | None = None) -> pa.Table:
    """``rows`` as the table holds them."""
    fields = {"id": pa.int64(), "name": pa.string(), "amount": pa.float64(), **(columns or {})}
    return pa.Table.from_pylist(rows, schema=pa.schema(list(fields.items())))


def command_lines(group: int) -> list[str]:
    """The command lines of the processes in process group ``group``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) == group:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, UnicodeDecodeError):
            continue  # gone meanwhile
    return found


def no_spark() -> Any:
    """The Spark session of a run that must not need one."""
    raise AssertionError("a committed batch asked for Spark")


@dataclass
class SinkCase:
    """One connector of the kit with its own state store, table and planned batches."""

    name: str
    root: Path
    spec: PipelineSpec
    warehouse: str
    store_url: str
    batch_ids: list[int] = field(default_factory=list)
    #: Batch id -> the source files its plan reads.
    files: dict[int, list[str]] = field(default_factory=dict)
    #: The rows a reader saw right after the kill.
    seen_at_kill: pa.Table | None = None
    #: The command lines of the killed job's processes (driver, JVM, Python workers)
    #: when it was killed: a subclass checks no secret was on one.
    command_lines: list[str] = field(default_factory=list)

    @property
    def ctx(self) -> BatchContext:
        """The connector's batch context."""
        table = self.spec.tables[0]
        return context(self.spec, table, table.connectors[0], self.warehouse)

    @property
    def marks(self) -> Path:
        """Where the job leaves a marker per fail point it passed."""
        path = self.root / "marks"
        path.mkdir(exist_ok=True)
        return path

    def sink(self) -> Sink:
        """The table's sink as the engine builds it on the driver."""
        sink = self.ctx.sink()
        sink.state_store_url = self.store_url
        return sink

    def read(self, kind: Any = "rows") -> pa.Table:
        """What a reader of the table (or of its dead letters) sees now."""
        data = self.sink().read(kind)
        return pa.table({}) if data is None else data

    @contextlib.contextmanager
    def store(self) -> Iterator[StateStore]:
        """The case's state store, closed when the block ends."""
        store = StateStore(self.store_url)
        try:
            yield store
        finally:
            store.close()

    def committed(self) -> list[int]:
        """Ids of the connector's committed batches, oldest first (for
        :meth:`SinkConformance.check_landed`: one commit per batch...)."""
        with self.store() as store:
            batches = store.batches(self.ctx.ref)
        return [b.batch_id for b in batches if b.status == BatchStatus.COMMITTED]

    def plan(self) -> list[int]:
        """Discovers the source: the batches planned now (pending ones first)."""
        with self.store() as store:
            found = discover(store, self.ctx)
            self.batch_ids = found.batch_ids
            self.files = {
                b: [Path(i.key).name for i in store.load_batch(b).plan.items]
                for b in found.batch_ids
            }
        return self.batch_ids

    def start(
        self, point: str = "", spark_master: str = "local[1]", connect_url: str | None = None
    ) -> subprocess.Popen[bytes]:
        """The ingest job of the planned batches, stopping at ``point`` (none: to the end):
        a spark-submit job on ``spark_master``, or with ``connect_url`` a client of that
        Spark Connect server."""
        if connect_url is not None:
            return start_connect_job(self.batch_ids, self.store_url, self.marks, connect_url, point)
        return jobs.start_job(
            self.batch_ids, self.store_url, self.marks, point, spark_master=spark_master
        )

    def next_run(self, spark: Any) -> None:
        """The killed job's retry (publishes a committed batch without Spark), then the
        connector's next run (discovery rolls publishes forward, pending batches run)."""
        with self.store() as store:
            for b in self.batch_ids:
                if store.load_batch(b).status == BatchStatus.COMMITTED:
                    assert not run_batch(store, b, no_spark).committed
            found = discover(store, self.ctx)
            assert found.new_items == 0, f"{self.name}: the next run planned the source again"
            for b in found.batch_ids:
                assert run_batch(store, b, lambda: spark).committed, f"{self.name}: batch {b}"
            ref = self.ctx.ref
            assert store.pending_batches(ref) == [], self.name
            assert store.unpublished_batches(ref) == [], self.name


class KitFixtures:
    """The fixtures a sink's kit class may override (warehouse, its environment, the
    sink config of one case), shared by this kit and the changes kit (:mod:`.changes_kit`)."""

    @pytest.fixture(scope="class")
    @classmethod
    def warehouse_url(cls, tmp_path_factory: pytest.TempPathFactory) -> str:
        """The warehouse the class's tables go under."""
        return str(tmp_path_factory.mktemp("kit-warehouse"))

    @pytest.fixture(scope="class")
    @classmethod
    def storage_env(cls) -> dict[str, str]:
        """Environment variables needed to reach the warehouse."""
        return {}

    @pytest.fixture(scope="class")
    @classmethod
    def sink_config(cls) -> Callable[[str], dict[str, Any]]:
        """The sink config of one case's table."""
        return lambda case: {}

    @pytest.fixture(scope="class")
    @classmethod
    def kit_env(cls, storage_env: dict[str, str]) -> Iterator[None]:
        """``storage_env`` set for the class's tests (and the jobs they start)."""
        with pytest.MonkeyPatch.context() as mp:
            for name, value in storage_env.items():
                mp.setenv(name, value)
            yield


class SinkConformance(KitFixtures):
    """Subclass once per sink (and per warehouse): see the module docstring."""

    sink_name: ClassVar[str]
    sink_fail_points: ClassVar[tuple[str, ...]] = ()
    whole_at: ClassVar[tuple[str, ...]] = ()
    atomic_publish: ClassVar[bool] = True
    spark_master: ClassVar[str] = "local[1]"
    #: Whether the class runs the cases whose outcome does not depend on the warehouse's
    #: storage: the kill before the sink wrote anything (``before_sink_write``) and the
    #: evolving table (``test_added_nullable_column_lands``). The storage mixins
    #: (:class:`S3Warehouse`, :class:`AzureWarehouse`, :class:`OtherStorage`) say False:
    #: the sink's class on a local warehouse runs them; each skipped case is a JVM less.
    storage_independent_cases: ClassVar[bool] = True
    #: Where the killed jobs run their batches: ``spark_submit`` (a spark-submit job on
    #: ``spark_master``, a JVM each) or ``spark_connect`` (a client of the session
    #: fixture ``spark_connect_server``: a Python process each, the batch's tasks on the
    #: server, the storage variables carried with each task). The default is
    #: spark-submit: a Spark Connect server's workers import only this package and what
    #: is installed on the server, not a sink of another distribution. This package's
    #: sinks and the storage mixins say ``spark_connect`` (the sink's staging and commit
    #: are the same code in both; a JVM start per killed job was most of the suite's
    #: time), except the Parquet sink's local class, which keeps the default's path run.
    execution: ClassVar[str] = "spark_submit"

    # --- what a subclass may override: KitFixtures, and ---------------------------------

    def check_landed(self, case: SinkCase) -> None:
        """Sink-specific checks once every batch of ``case`` landed."""

    # --- the kit ----------------------------------------------------------------------

    @classmethod
    def fail_points(cls) -> tuple[str, ...]:
        """Every point the crash check kills a job at."""
        points = (*ENGINE_FAIL_POINTS, *cls.sink_fail_points)
        if not cls.storage_independent_cases:
            return tuple(p for p in points if p != "before_sink_write")
        return points

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """One crash test per fail point of this sink."""
        if "fail_point" in metafunc.fixturenames:
            metafunc.parametrize("fail_point", self.fail_points())

    @pytest.fixture(scope="class")
    @classmethod
    def kit_source(cls, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
        """The crash cases' source: FILES files of ROWS rows and a file with a bad line."""
        folder = tmp_path_factory.mktemp("sink-kit-source")
        rows: list[dict[str, Any]] = []
        for f in range(FILES):
            part = records(f * ROWS, ROWS)
            write_file(folder, f"part-{f:03d}.json", part)
            rows += part
        (folder / BAD_FILE).write_text(BAD_LINE + "\n")
        return folder, expected(rows)

    @classmethod
    def new_case(
        cls,
        name: str,
        root: Path,
        source: Path,
        warehouse_url: str,
        sink_config: Callable[[str], dict[str, Any]],
        *,
        sink: dict[str, Any] | None = None,
        **table: Any,
    ) -> SinkCase:
        """A case: its connector reads ``source`` into a table of this sink."""
        root.mkdir(parents=True, exist_ok=True)
        connector = {
            "name": CONNECTOR,
            "tasks_max": table.pop("tasks_max", 1),
            "errors": {"tolerance": "all"},
            "transport": {"name": "file_input", "config": {"path": str(source), "min_file_age": 0}},
            "format": {"name": "json", "config": {"update_format": "raw"}},
        }
        doc = {
            "pipeline": PIPELINE,
            "tables": {
                TABLE: {
                    "columns": COLUMNS,
                    "sink": {
                        "name": cls.sink_name,
                        "config": {**sink_config(name), **(sink or {})},
                    },
                    "connectors": [connector],
                    **table,
                }
            },
        }
        return SinkCase(
            name=name,
            root=root,
            spec=parse_pipeline(doc),
            warehouse=_fs.join(warehouse_url, name),
            store_url=f"sqlite:///{root / 'state.db'}",
        )

    @pytest.fixture(scope="class")
    @classmethod
    def killed(
        cls,
        kit_env: None,
        kit_source: tuple[Path, pa.Table],
        warehouse_url: str,
        sink_config: Callable[[str], dict[str, Any]],
        spark: Any,
        tmp_path_factory: pytest.TempPathFactory,
        request: pytest.FixtureRequest,
    ) -> dict[str, SinkCase]:
        """Every killed job of the class, started at once: one per fail point, one killed
        after the commit for the concurrent publishers, one killed after an evolving
        batch was staged again with its new column. Each is SIGKILLed at its point and
        the table read right then. The evolving case's first batch lands in this process
        while the other jobs start (their JVM starts are what costs)."""
        base = tmp_path_factory.mktemp("sink-kit")
        folder = kit_source[0]
        cases = {
            p: cls.new_case(p, base / p, folder, warehouse_url, sink_config)
            for p in cls.fail_points()
        }
        cases["concurrent"] = cls.new_case(
            "concurrent", base / "concurrent", folder, warehouse_url, sink_config
        )
        points = {name: name for name in cls.fail_points()}
        points |= {"concurrent": "after_commit", "after_widened_write": "after_widened_write"}
        procs: dict[str, subprocess.Popen[bytes]] = {}
        connect_url = None
        if cls.execution == "spark_connect":
            connect_url = request.getfixturevalue("spark_connect_server").url

        def start(name: str, case: SinkCase) -> None:
            (batch,) = case.plan()
            assert batch, name
            procs[name] = case.start(points[name], cls.spark_master, connect_url)

        try:
            for name, case in cases.items():
                start(name, case)
            if cls.storage_independent_cases:
                cases["after_widened_write"] = cls.evolving_case(
                    base / "evolving", warehouse_url, sink_config, spark
                )
                start("after_widened_write", cases["after_widened_write"])
            for name, proc in procs.items():
                jobs.wait_for(cases[name].marks / points[name], proc, timeout=REACH_TIMEOUT)
                cases[name].command_lines = command_lines(proc.pid)
                jobs.kill(proc)
                cases[name].seen_at_kill = cases[name].read()
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    jobs.kill(proc)
        return cases

    @classmethod
    def evolving_case(
        cls,
        root: Path,
        warehouse_url: str,
        sink_config: Callable[[str], dict[str, Any]],
        spark: Any,
    ) -> SinkCase:
        """A case whose first batch landed (in this process) and whose source then
        gained the nullable field ``note``: its next batch widens the table."""
        source = root / "source"
        write_file(source, "a.json", records(0, 100))
        case = cls.new_case(
            "evolving",
            root,
            source,
            warehouse_url,
            sink_config,
            schema_evolution="add_new_columns",
        )
        case.plan()
        case.next_run(spark)
        write_file(source, "b.json", records(100, 100, note="new"))
        return case

    # --- the checks ---------------------------------------------------------------------

    def assert_exact(self, case: SinkCase, rows: pa.Table, *, bad: int = 1) -> None:
        """The table holds exactly ``rows`` (each once) and ``bad`` dead letters of the
        bad line; the sink's own checks pass."""
        assert_same_records(case.read(), rows, "id", f"{self.sink_name} table ({case.name})")
        counted = case.sink().count_rows()
        assert counted == rows.num_rows, (
            f"{case.name}: the sink counts {counted} rows (count_rows, what the CLI's "
            f"summary prints), its table holds {rows.num_rows}"
        )
        if bad:
            dead = case.read("errors")
            assert dead.num_rows == bad, (
                f"{case.name}: {dead.num_rows} dead letters, expected {bad}"
            )
            assert case.sink().count_rows("errors") == bad, case.name
            assert dead.column("raw_text").to_pylist() == [BAD_LINE] * bad, case.name
            assert all(k.endswith(BAD_FILE) for k in dead.column("source_key").to_pylist())
        self.check_landed(case)

    def test_kill_at_fail_point_then_next_run(
        self,
        killed: dict[str, SinkCase],
        kit_source: tuple[Path, pa.Table],
        spark: Any,
        fail_point: str,
    ) -> None:
        """A job SIGKILLed at ``fail_point``: a reader saw none of the batch (all of it
        past the sink's commit); the retry and the next run leave the exact table."""
        case, rows = killed[fail_point], kit_source[1]
        seen = case.seen_at_kill
        assert seen is not None
        what = f"{self.sink_name}: a reader right after the kill at {fail_point}"
        if fail_point in self.whole_at:
            assert_same_records(seen, rows, "id", what)
        elif fail_point in ENGINE_FAIL_POINTS or self.atomic_publish:
            assert seen.num_rows == 0, f"{what} saw {seen.num_rows} rows of the batch"
        else:  # a publish moving parts in one by one: some parts, each row once
            assert_same_records(seen, rows, "id", what, part=True)
        case.next_run(spark)
        self.assert_exact(case, rows)

    def test_concurrent_publishers_land_the_batch_once(
        self, killed: dict[str, SinkCase], kit_source: tuple[Path, pa.Table], spark: Any
    ) -> None:
        """Four retries of a committed batch publish it at once, then one more: the
        batch lands once."""
        case = killed["concurrent"]
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
        case.next_run(spark)  # one more retry, then the connector's next run
        self.assert_exact(case, kit_source[1])

    def test_polling_reader_sees_whole_batches_only(
        self,
        kit_env: None,
        warehouse_url: str,
        sink_config: Callable[[str], dict[str, Any]],
        tmp_path: Path,
    ) -> None:
        """A reader polling the table while a job lands three batches sees each batch
        whole or not at all (``atomic_publish``), never a row twice, and at last all."""
        source, rows = tmp_path / "source", 500
        for f in range(6):
            write_file(source, f"part-{f:03d}.json", records(f * rows, rows))
        (source / BAD_FILE).write_text(BAD_LINE + "\n")
        # A part per write (target size of one byte): a batch is several parts, so a
        # publish that showed part of it would be caught.
        case = self.new_case(
            f"poll-{tmp_path.name}",
            tmp_path / "case",
            source,
            warehouse_url,
            sink_config,
            sink={"target_file_size": 1},
            tasks_max=3,
        )
        case.plan()
        assert len(case.batch_ids) == 3, case.files
        ids_of = {
            b: {
                i
                for name in names
                if name != BAD_FILE
                for i in range(int(name[5:8]) * rows, (int(name[5:8]) + 1) * rows)
            }
            for b, names in case.files.items()
        }
        proc = case.start(spark_master=self.spark_master)
        out: list[bytes] = []  # drained meanwhile, so the job never blocks on a full pipe
        drain = threading.Thread(target=lambda: out.append(proc.communicate()[0] or b""))
        drain.start()
        seen: list[int] = []
        problems: list[str] = []
        try:
            while True:
                done = proc.poll() is not None
                try:
                    ids = case.read().to_pydict().get("id", [])
                except (OSError, ValueError) as e:  # a table being created
                    if done:
                        problems.append(f"read failed: {e}")
                        break
                    time.sleep(0.05)
                    continue
                if len(ids) != len(set(ids)):
                    problems.append(f"{len(ids) - len(set(ids))} rows seen twice")
                if self.atomic_publish:
                    got = set(ids)
                    for b, want in ids_of.items():
                        if len(want & got) not in (0, len(want)):
                            problems.append(f"batch {b}: {len(want & got)} of {len(want)} rows")
                seen.append(len(ids))
                if done or problems:
                    break
                time.sleep(0.05)
        finally:
            if proc.poll() is None:
                jobs.kill(proc)
            drain.join()
        assert proc.returncode == 0, b"".join(out).decode(errors="replace")[-3000:]
        assert problems == [], f"{self.sink_name}: a polling reader saw {problems[:5]}"
        assert seen and seen[-1] == 6 * rows
        self.assert_exact(case, expected(records(0, 6 * rows)))

    def test_added_nullable_column_lands(self, killed: dict[str, SinkCase], spark: Any) -> None:
        """A batch that brought a new field, killed after it was staged again with the
        new column: the next run lands it, the column null in earlier rows."""
        case = killed["after_widened_write"]
        seen = case.seen_at_kill
        assert seen is not None
        assert_same_records(seen, expected(records(0, 100)), "id", "before the widened batch")
        case.next_run(spark)
        data = case.read()
        assert "note" in data.column_names, f"{self.sink_name}: columns {data.column_names}"
        rows = [{**r, "note": None} for r in records(0, 100)] + records(100, 100, note="new")
        assert_same_records(
            data.select(["id", "name", "amount", "note"]),
            expected(rows, {"note": pa.string()}),
            "id",
            f"{self.sink_name} table after the column was added",
        )
        self.check_landed(case)


class OtherStorage:
    """Mixin for a :class:`SinkConformance` subclass whose warehouse is on another
    storage than the sink's own class (listed first): the cases that do not depend on
    the storage (``storage_independent_cases``) run in the sink's class only, and the
    killed jobs are Spark Connect clients (``execution``): the sink's commit on the
    storage is the client's either way, and a JVM start per killed job was most of the
    suite's time."""

    storage_independent_cases = False
    execution = "spark_connect"
    #: Not collected here (pytest collects functions only): it runs in the sink's class.
    test_added_nullable_column_lands = None


class S3Warehouse(OtherStorage):
    """Mixin for a :class:`SinkConformance` subclass whose warehouse is a new bucket of
    an S3 server: the class (or its conftest) has a session fixture ``s3_server`` with
    ``create_bucket(name) -> name`` and ``env() -> AWS_* variables``, as
    :class:`airflow_connectors.testing.s3server.S3Server` does. List it first:
    ``class TestMySinkOnS3(S3Warehouse, TestMySink)``."""

    @pytest.fixture(scope="class")
    @classmethod
    def warehouse_url(cls, s3_server: Any) -> str:
        """``s3://<new bucket>/wh``."""
        return f"s3://{s3_server.create_bucket(f'kit-{uuid.uuid4().hex[:10]}')}/wh"

    @pytest.fixture(scope="class")
    @classmethod
    def storage_env(cls, s3_server: Any) -> dict[str, str]:
        """The server's ``AWS_*`` variables."""
        return dict(s3_server.env())


class AzureWarehouse(OtherStorage):
    """Mixin for a :class:`SinkConformance` subclass whose warehouse is a new container
    of Azurite: a session fixture ``azurite`` with ``create_container(name) -> name`` and
    ``env() -> AZURE_STORAGE_* variables``, as
    :class:`airflow_connectors.testing.azurite.Azurite` has. List it first, as
    :class:`S3Warehouse`."""

    @pytest.fixture(scope="class")
    @classmethod
    def warehouse_url(cls, azurite: Any) -> str:
        """``az://<new container>/wh``."""
        return f"az://{azurite.create_container(f'kit-{uuid.uuid4().hex[:10]}')}/wh"

    @pytest.fixture(scope="class")
    @classmethod
    def storage_env(cls, azurite: Any) -> dict[str, str]:
        """Azurite's ``AZURE_STORAGE_*`` variables."""
        return dict(azurite.env())


# --- the crash checks on Spark Connect ----------------------------------------------------


class StalledBodies:
    """An HTTP server on 127.0.0.1 serving bodies to ``url_input`` (HEAD with their
    length and validators, GET with the whole body): the slow source of the Spark
    Connect crash checks. A GET of a stalled path waits until :meth:`release` (the Spark
    task reading it is then known to run: :meth:`wait_for_read`). With
    ``required_headers``, a request missing one of them is answered 401 (a credential
    that must have reached the Spark task). Failure injection only: the engine, Spark
    and the sink are real."""

    def __init__(self, required_headers: Mapping[str, str] | None = None) -> None:
        self.bodies: dict[str, bytes] = {}
        self.required = dict(required_headers or {})
        self._release: dict[str, threading.Event] = {}
        self._arrived: dict[str, threading.Event] = {}
        self._served: dict[str, threading.Event] = {}
        self.refused = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _head(self) -> bytes | None:
                body = owner.bodies.get(self.path)
                if body is None:
                    self.send_error(404)
                    return None
                if any(self.headers.get(k) != v for k, v in owner.required.items()):
                    owner.refused += 1
                    self.send_error(401)
                    return None
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", f'"{hashlib.sha1(body).hexdigest()}"')
                self.send_header("Last-Modified", "Mon, 02 Jan 2023 00:00:00 GMT")
                self.end_headers()
                return body

            def do_HEAD(self) -> None:
                self._head()

            def do_GET(self) -> None:
                if self.path in owner._release:
                    owner._arrived[self.path].set()
                    owner._release[self.path].wait(REACH_TIMEOUT)
                body = self._head()
                if body is None:
                    return
                try:
                    self.wfile.write(body)
                except OSError:  # the reader was killed meanwhile
                    return
                if self.path in owner._served:
                    owner._served[self.path].set()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def add(self, path: str, body: bytes, *, stall: bool = False) -> str:
        """Serve ``body`` at ``path`` (its GETs wait for :meth:`release` when
        ``stall``); returns its URL."""
        self.bodies[path] = body
        if stall:
            self._release[path] = threading.Event()
            self._arrived[path] = threading.Event()
            self._served[path] = threading.Event()
        return f"http://127.0.0.1:{self.server.server_port}{path}"

    def wait_for_read(self, path: str, proc: subprocess.Popen[bytes]) -> None:
        """Wait until a Spark task requested the stalled ``path`` (``proc``: the job
        whose task it is; its exit fails the test)."""
        deadline = time.monotonic() + REACH_TIMEOUT
        while not self._arrived[path].wait(0.1):
            if proc.poll() is not None:
                out = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"job exited ({proc.returncode}) before reading {path}:\n{out[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"no Spark task read {path} in {REACH_TIMEOUT} s")

    def release(self, path: str) -> None:
        """Let the stalled GETs of ``path`` (and every later one) through."""
        self._release[path].set()

    def wait_served(self, path: str, timeout: float = REACH_TIMEOUT) -> bool:
        """Whether the body of ``path`` was sent whole (waits up to ``timeout``)."""
        return self._served[path].wait(timeout)

    def close(self) -> None:
        """Stop serving (releasing every stalled GET first)."""
        for event in self._release.values():
            event.set()
        self.server.shutdown()
        self.server.server_close()


def body_of(rows: pa.Table) -> bytes:
    """``rows`` as a JSON-lines body."""
    return "".join(json.dumps(r) + "\n" for r in rows.to_pylist()).encode()


def url_case(
    sink_name: str,
    name: str,
    root: Path,
    url: str,
    warehouse_url: str,
    sink_config: Callable[[str], dict[str, Any]],
) -> SinkCase:
    """A case whose connector reads the JSON-lines body at ``url`` (``url_input``) into
    a table of ``sink_name``."""
    root.mkdir(parents=True, exist_ok=True)
    doc = {
        "pipeline": PIPELINE,
        "tables": {
            TABLE: {
                "columns": COLUMNS,
                "sink": {"name": sink_name, "config": sink_config(name)},
                "connectors": [
                    {
                        "name": CONNECTOR,
                        "errors": {"tolerance": "all"},
                        "transport": {"name": "url_input", "config": {"path": url}},
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        },
    }
    return SinkCase(
        name=name,
        root=root,
        spec=parse_pipeline(doc),
        warehouse=_fs.join(warehouse_url, name),
        store_url=f"sqlite:///{root / 'state.db'}",
    )


def connect_client(url: str) -> Any:
    """This process's Spark Connect session of the server at ``url`` (the runs after a
    kill use it, as the task's retry would)."""
    from airflow_connectors.engine.connect import connect_session
    from airflow_connectors.settings import Settings

    settings = Settings(state_store_url="sqlite://", warehouse="/tmp")
    return connect_session(url, settings, data_sources=False)


class SparkConnectCrashes(KitFixtures):
    """The crash checks with the batch on a Spark Connect server (``execution:
    spark_connect``), lean: a few representative kills, not the whole matrix of
    :class:`SinkConformance`. Subclass once per sink::

        class TestMySinkOnSparkConnect(SparkConnectCrashes):
            sink_name = "my_sink"

    and give the module (or conftest) a fixture ``killable_spark_connect_server``: a
    :class:`airflow_connectors.testing.spark_connect.SparkConnectServer` of the tests'
    own, which the kit kills (``kill()``) and starts again (``start()``), so no shared
    server. The fixtures ``warehouse_url``, ``storage_env`` and ``sink_config`` are the
    sink kit's.

    - ``test_client_killed_then_next_run`` (one per ``connect_fail_points``): the client
      (the process running the batch; its tasks run on the server) SIGKILLed at the
      point; a reader then sees none of the batch; the retry and the next run, as a
      client of the same server, leave the exact table.
    - ``test_client_killed_while_its_tasks_run``: the client killed while the server
      runs its batch's task (a slow ``url_input`` body); the orphaned task then finishes
      on the server and stages its parts for an attempt nobody commits: the next run
      leaves the exact table.
    - ``test_server_killed_while_tasks_run`` (:class:`SparkConnectServerKill`, a
      subclass: the server's kill and restart cost the same whatever the sink, and
      what they check, the client failing in one line and the next run on a new
      session, is the engine's, so one sink's class runs it): the Spark Connect server
      SIGKILLed (with its Python workers) while a batch's task reads; the client fails
      the batch in one line; the server starts again; the next run leaves the exact
      table.
    """

    sink_name: ClassVar[str]
    #: Whether the class kills the server too (:class:`SparkConnectServerKill`).
    kill_server: ClassVar[bool] = False
    connect_fail_points: ClassVar[tuple[str, ...]] = (
        "sink_write_started",
        "after_sink_write",
        "after_commit",
    )

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """One client kill per point of ``connect_fail_points``."""
        if "connect_point" in metafunc.fixturenames:
            metafunc.parametrize("connect_point", self.connect_fail_points)

    kit_source = SinkConformance.__dict__["kit_source"]
    new_case = SinkConformance.__dict__["new_case"]

    @pytest.fixture(scope="class")
    @classmethod
    def stalled_bodies(cls) -> Iterator[StalledBodies]:
        """The slow source of the class's kills mid-task."""
        bodies = StalledBodies()
        yield bodies
        bodies.close()

    @pytest.fixture(scope="class")
    @classmethod
    def connect_killed(
        cls,
        kit_env: None,
        kit_source: tuple[Path, pa.Table],
        warehouse_url: str,
        sink_config: Callable[[str], dict[str, Any]],
        killable_spark_connect_server: Any,
        stalled_bodies: StalledBodies,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> dict[str, tuple[SinkCase, str]]:
        """Every kill of the class, as ``case name -> (case, the killed job's output)``:
        the clients killed at their points (started at once), then the two killed
        while a task reads a stalled body: one client, then the server (started again
        before this returns)."""
        server = killable_spark_connect_server
        base = tmp_path_factory.mktemp("connect-kit")
        folder, rows = kit_source
        cases = {
            p: cls.new_case(p, base / p, folder, warehouse_url, sink_config)
            for p in cls.connect_fail_points
        }
        stalled = (
            ("client_mid_tasks", "server_mid_tasks") if cls.kill_server else ("client_mid_tasks",)
        )
        for name in stalled:
            url = stalled_bodies.add(f"/{name}.json", body_of(rows), stall=True)
            cases[name] = url_case(
                cls.sink_name, name, base / name, url, warehouse_url, sink_config
            )
        procs: dict[str, subprocess.Popen[bytes]] = {}
        outputs: dict[str, str] = {}

        def start(name: str, point: str = "") -> subprocess.Popen[bytes]:
            case = cases[name]
            (batch,) = case.plan()
            assert batch, name
            procs[name] = start_connect_job(
                case.batch_ids, case.store_url, case.marks, server.url, point
            )
            return procs[name]

        try:
            # The point kills first: the stalled tasks below hold the server's slots.
            for point in cls.connect_fail_points:
                start(point, point)
            for point in cls.connect_fail_points:
                proc = procs[point]
                jobs.wait_for(cases[point].marks / point, proc, timeout=REACH_TIMEOUT)
                cases[point].command_lines = command_lines(proc.pid)
                jobs.kill(proc)
                cases[point].seen_at_kill = cases[point].read()
            # The client killed while its task reads; the task then goes on, orphaned.
            proc = start("client_mid_tasks")
            stalled_bodies.wait_for_read("/client_mid_tasks.json", proc)
            jobs.kill(proc)
            cases["client_mid_tasks"].seen_at_kill = cases["client_mid_tasks"].read()
            stalled_bodies.release("/client_mid_tasks.json")
            # The orphaned task reads on and stages its parts (unless the server gave up
            # the client's operation meanwhile, which is fine too): let it, before the
            # server is killed below.
            stalled_bodies.wait_served("/client_mid_tasks.json", timeout=120)
            if cls.kill_server:
                # The server killed while a task reads; the client fails the batch.
                proc = start("server_mid_tasks")
                stalled_bodies.wait_for_read("/server_mid_tasks.json", proc)
                server.kill()
                out, _ = proc.communicate(timeout=REACH_TIMEOUT)
                outputs["server_mid_tasks"] = f"exit {proc.returncode}\n" + out.decode(
                    errors="replace"
                )
                cases["server_mid_tasks"].seen_at_kill = cases["server_mid_tasks"].read()
                stalled_bodies.release("/server_mid_tasks.json")
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    jobs.kill(proc)
            if not server_running(server):
                server.start()
        return {name: (case, outputs.get(name, "")) for name, case in cases.items()}

    @pytest.fixture(scope="class")
    @classmethod
    def connect_spark(
        cls, connect_killed: dict[str, tuple[SinkCase, str]], killable_spark_connect_server: Any
    ) -> Iterator[Any]:
        """This process's client session of the server (after its restart)."""
        from airflow_connectors.engine.connect import forget_session

        url = killable_spark_connect_server.url
        forget_session(url)  # a session of the server before its kill is gone
        yield connect_client(url)
        forget_session(url)

    def assert_exact(self, case: SinkCase, rows: pa.Table, *, bad: int) -> None:
        """The table holds exactly ``rows`` (each once) and ``bad`` dead letters."""
        what = f"{self.sink_name} table on Spark Connect ({case.name})"
        assert_same_records(case.read(), rows, "id", what)
        dead = case.read("errors")
        assert dead.num_rows == bad, f"{what}: {dead.num_rows} dead letters, expected {bad}"
        assert case.committed() == case.batch_ids, f"{what}: committed {case.committed()}"

    def test_client_killed_then_next_run(
        self,
        connect_killed: dict[str, tuple[SinkCase, str]],
        kit_source: tuple[Path, pa.Table],
        connect_spark: Any,
        connect_point: str,
    ) -> None:
        """The client SIGKILLed at ``connect_point``: a reader saw none of the batch;
        the retry and the next run on the same server leave the exact table."""
        case, _ = connect_killed[connect_point]
        seen = case.seen_at_kill
        assert seen is not None and seen.num_rows == 0, (
            f"{self.sink_name}: a reader right after the kill at {connect_point} saw rows"
        )
        case.next_run(connect_spark)
        self.assert_exact(case, kit_source[1], bad=1)

    def test_client_killed_while_its_tasks_run(
        self,
        connect_killed: dict[str, tuple[SinkCase, str]],
        kit_source: tuple[Path, pa.Table],
        connect_spark: Any,
    ) -> None:
        """The client killed while the server ran its batch's task (which then staged
        its parts for nobody): the next run leaves the exact table."""
        case, _ = connect_killed["client_mid_tasks"]
        seen = case.seen_at_kill
        assert seen is not None and seen.num_rows == 0, f"{self.sink_name}: saw rows"
        with case.store() as store:
            (batch,) = case.batch_ids
            assert store.load_batch(batch).status != BatchStatus.COMMITTED
        case.next_run(connect_spark)
        self.assert_exact(case, kit_source[1], bad=0)


class SparkConnectServerKill(SparkConnectCrashes):
    """:class:`SparkConnectCrashes` and the server killed while a task reads."""

    kill_server = True

    def test_server_killed_while_tasks_run(
        self,
        connect_killed: dict[str, tuple[SinkCase, str]],
        kit_source: tuple[Path, pa.Table],
        connect_spark: Any,
    ) -> None:
        """The server killed while the batch's task read: the client failed the batch
        in one line; once the server is back the next run leaves the exact table."""
        case, out = connect_killed["server_mid_tasks"]
        assert not out.startswith("exit 0"), f"the client did not notice the kill:\n{out}"
        failed = [line for line in out.splitlines() if line.startswith("ingest failed:")]
        assert failed, f"no one-line failure from the client:\n{out[-3000:]}"
        assert "Traceback" not in out, out[-3000:]
        seen = case.seen_at_kill
        assert seen is not None and seen.num_rows == 0, f"{self.sink_name}: saw rows"
        case.next_run(connect_spark)
        self.assert_exact(case, kit_source[1], bad=0)


def server_running(server: Any) -> bool:
    """Whether the Spark Connect server answers on its port."""
    import socket

    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=2):
            return True
    except OSError:
        return False
