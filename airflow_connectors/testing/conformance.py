"""The transport conformance kit: one pytest suite every transport runs.

Singer's SDK ships test classes that a tap subclasses to get the standard tests for free;
this is the same for the batch-source contract of :mod:`airflow_connectors.transports.base`.
A transport, built in or a third party's (registered by an entry point in the group
``airflow_connectors.transports``), subclasses :class:`TransportConformance` once and
gives a ``source`` fixture: a :class:`Source` with the transport's name and config, the
table's columns, the format (none for transports that yield records), and every record
the source holds. ::

    import pytest
    from airflow_connectors.testing.conformance import Source, TransportConformance

    class TestMyTransport(TransportConformance):
        @pytest.fixture
        def source(self, tmp_path):
            ...  # put known records where the transport reads them
            return Source(
                transport="my_transport",
                config={"path": str(tmp_path / "data")},
                columns={"id": "BIGINT NOT NULL", "name": "VARCHAR"},
                format={"name": "json", "config": {"update_format": "raw"}},
                records=[{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
                key_column="id",
            )

What the suite checks (one test each):

- the class declares the registered ``name`` and a strict ``Config`` (unknown keys
  rejected);
- discovery lists work in key order; what it lists reads as known records, each once;
  discovering and committing until nothing is new lands every record exactly once;
- a discovery's batches committed in reverse order (Airflow runs them side by side) still
  land every record exactly once;
- discovery after the committed cursor lists only new work (never a committed range),
  and nothing once everything is committed;
- keys that are planned but not committed (in flight) are never listed again;
- a key committed part way (an offset at a record boundary, found by the format)
  resumes at ``start`` = that offset with ``records_done`` = the records before it, and
  reads the records after it in order; set as a user resets offsets, the engine then
  lands exactly the remaining records;
- ``bounded`` and end of input behave as declared (:attr:`Source.bounded`, and
  :attr:`Source.unbounded_config` for a configuration that never ends);
- bad config is rejected with the JSON path of the field: an unknown key, a wrong type
  for every scalar field of ``Config``, and the source's own :attr:`Source.invalid_configs`;
- a crash between the sink write and the commit (the ``after_sink_write`` fail point of
  :mod:`airflow_connectors.failpoints`, the ingest job SIGKILLed on local Spark)
  re-runs to the same table: same count, same checksum, nothing twice. The re-run of a
  transport of this package is a Spark Connect client (``execution: spark_connect``), so
  each reads on both.

How: the checks drive the real engine and state store (SQLite in ``tmp_path``), not a
copy of them. Listing calls the transport's ``discover`` with cursors the store built;
reading runs the engine's worker code (:func:`airflow_connectors.engine.reader.ingest_item`,
what a Spark task runs) and the Parquet sink. The batch checks run the engine's
:func:`~airflow_connectors.engine.batch.run_batch` with its Spark tasks executed in this
process, one after another, so they take a second, not a JVM; the crash check runs the
real ingest job (``python -m airflow_connectors.engine.job``) on ``local[2]`` Spark, then
its re-run as a client of a Spark Connect server: the session fixture
``spark_connect_server`` (``.url``; this repository's ``tests/conftest.py`` has one, a
:class:`airflow_connectors.testing.spark_connect.SparkConnectServer`) must exist.

What a source must satisfy:

- a finite set of records available now, each with a unique ``key_column`` value;
  several work items (files, chunks) exercise more than one;
- a discovery may list part of the source (one range, one rate's worth); the checks
  discover again until nothing is new (at most 20 times). The crash check kills the job
  of the first discovery's batches (at most ``tasks_max`` = 4) and lands the rest after;
- ``start``/``end`` of an integrated transport's (no format) work items count records,
  as the contract says of generators, and so do those of a transport that sets
  ``record_offsets`` (message sequences; its source's first work item then holds one
  record per offset); a byte transport's source uses a line-oriented
  format (JSON lines, CSV) for the resume check, which is skipped for whole-object
  formats such as Parquet;
- the crash check runs the ingest job in a new process whose Spark workers import the
  transport by name: it must be installed with its entry point (a transport known only
  to the test process cannot run there, nor under spark-submit in production).

Only tests import this module (it imports pytest); importing ``airflow_connectors``
never loads it.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import time
import types
import typing
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pytest
from pydantic import BaseModel, ValidationError

from airflow_connectors.catalog import parse_pipeline, validate_pipeline
from airflow_connectors.engine import discovery
from airflow_connectors.engine.batch import run_batch
from airflow_connectors.engine.reader import ItemFailed, ingest_item
from airflow_connectors.state.store import ConnectorState, StateStore
from airflow_connectors.testing import jobs
from airflow_connectors.transports import TRANSPORTS, Cursor, KeyOffset, Limits, Transport, WorkItem

PIPELINE = "conformance"
TABLE = "t"
CONNECTOR = "source"
#: Batches one discovery plans at most (the connector's ``tasks_max``).
TASKS_MAX = 4
#: Where a bad transport config is reported in the spec.
CONFIG_PATH = f"tables.{TABLE}.connectors[0].transport.config"


@dataclass(frozen=True)
class Source:
    """What a transport's ``source`` fixture returns: a configured transport and every
    record it reads."""

    #: The transport's registered name (built in, or an entry point).
    transport: str
    #: The transport config, as a pipeline spec holds it.
    config: Mapping[str, Any]
    #: The table's columns, as a spec holds them: ``{"id": "BIGINT NOT NULL"}``.
    columns: Mapping[str, str]
    #: Every record of the source, as rows of the table (dicts or an Arrow table).
    records: Sequence[Mapping[str, Any]] | pa.Table
    #: A column whose value is unique per record (orders the checksum, finds duplicates).
    key_column: str
    #: ``{"name": "json", "config": {...}}``; None for transports that yield records.
    format: Mapping[str, Any] | None = None
    #: Whether this configuration ends (the transport's ``bounded``).
    bounded: bool = True
    #: The same source configured never to end (``follow: true``), when the transport
    #: has such a mode; the end-of-input check then also runs it.
    unbounded_config: Mapping[str, Any] | None = None
    #: Bad configs and where each is wrong: ``{"plan[0].limit": {...config...}}``; the
    #: path is relative to the transport config (``""``: the config as a whole).
    invalid_configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: More connector keys (``max_batch_size``, ``errors``...).
    connector: Mapping[str, Any] = field(default_factory=dict)

    def pipeline_doc(self, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The pipeline spec of one table fed by this source (with ``config`` instead of
        the source's own, when given)."""
        connector: dict[str, Any] = {
            "name": CONNECTOR,
            "tasks_max": TASKS_MAX,
            **self.connector,
            "transport": {
                "name": self.transport,
                "config": dict(self.config if config is None else config),
            },
        }
        if self.format is not None:
            connector["format"] = dict(self.format)
        return {
            "pipeline": PIPELINE,
            "tables": {TABLE: {"columns": dict(self.columns), "connectors": [connector]}},
        }


def table_checksum(table: pa.Table, order_by: str) -> str:
    """Order-independent content hash: rows sorted by ``order_by``, then hashed."""
    rows = table.sort_by(order_by).to_pylist()
    return hashlib.sha256(repr(rows).encode()).hexdigest()


def assert_same_records(
    actual: pa.Table, expected: pa.Table, key: str, what: str, *, part: bool = False
) -> None:
    """``actual`` holds exactly the rows of ``expected`` (with ``part``: some of them),
    each once, in any order."""
    names = expected.column_names
    got = actual.select(names) if actual.num_columns else pa.table({n: [] for n in names})
    keys = got.column(key).to_pylist()
    want = expected.column(key).to_pylist()
    seen = set(keys)
    twice = sorted((k for k, n in Counter(keys).items() if n > 1), key=repr)[:10]
    missing = sorted(set(want) - seen, key=repr)[:10]
    extra = sorted(seen - set(want), key=repr)[:10]
    detail = f"{what}: {got.num_rows} rows, expected {expected.num_rows}"
    assert not twice, f"{detail}; {key} values read twice: {twice}"
    assert not extra, f"{detail}; unexpected {key}s {extra}"
    if part:
        expected = expected.filter(pa.array([k in seen for k in want]))
    else:
        assert not missing, f"{detail}; missing {key}s {missing}"
        assert got.num_rows == expected.num_rows, detail
    if table_checksum(got, key) != table_checksum(expected, key):
        by_key = {r[key]: r for r in expected.to_pylist()}
        diff = [(r, by_key[r[key]]) for r in got.to_pylist() if r != by_key[r[key]]][:3]
        pytest.fail(f"{what}: same {key}s, different values (read, expected): {diff}")


class _InProcessTasks:
    """Runs a batch's Spark tasks in this process, one after another: the engine's own
    DataFrame job (``range(0, n, 1, n).mapInArrow(fn, ...)``) with its own task body
    (:func:`~airflow_connectors.engine.reader.ingest_arrow`), driver code and commit,
    without a JVM. Stands in for the session ``run_batch`` asks for; the crash check
    runs real Spark."""

    def range(self, start: int, end: int, step: int = 1, partitions: int = 1) -> _Tasks:
        return _Tasks(list(builtins.range(start, end, step)))


@dataclass
class _Tasks:
    """The rows of ``range``, one per task (a partition of its own), and the function
    ``mapInArrow`` runs over each."""

    rows: list[int]
    body: Any = None

    def mapInArrow(self, body: Any, _schema: str) -> _Tasks:
        return _Tasks(self.rows, body)

    def collect(self) -> list[tuple[Any, ...]]:
        import pyarrow as pa

        return [
            tuple(row)
            for i in self.rows
            for out in self.body(iter([pa.record_batch({"id": pa.array([i], pa.int64())})]))
            for row in zip(*out.to_pydict().values(), strict=True)
        ]


def _no_spark() -> Any:
    raise AssertionError("a committed batch asked for Spark")


class Connector:
    """The source as one connector of a pipeline, with its own state store (SQLite) and
    warehouse under ``root``: what each check drives."""

    def __init__(self, source: Source, root: Path, config: Mapping[str, Any] | None = None) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.source = source
        self.root = root
        self.store_url = f"sqlite:///{root / 'state.db'}"
        self.warehouse = str(root / "warehouse")
        spec = parse_pipeline(source.pipeline_doc(config), base_dir=root)
        table = spec.tables[0]
        self.ctx = discovery.context(spec, table, table.connectors[0], self.warehouse)
        self.ref = self.ctx.ref
        self.store = StateStore(self.store_url)
        self._reads = 0

    def close(self) -> None:
        """Close the connector's state store."""
        self.store.close()

    # --- the transport itself -----------------------------------------------------

    def transport(self) -> Transport:
        """A new transport of the source's config, as the engine builds it."""
        return self.ctx.transport()

    def limits(self) -> Limits:
        """The limits the engine's discovery gives the transport now (``appendable`` when
        the format is line oriented)."""
        fmt = self.ctx.format()
        return Limits(
            now=time.time(),
            appendable=fmt is not None and fmt.line_oriented,
            tasks_max=self.ctx.connector.tasks_max,
        )

    def list_work(self, cursor: Cursor | None = None) -> list[WorkItem]:
        """What the transport's ``discover`` lists after ``cursor`` (the store's)."""
        cursor = self.store.cursor(self.ref) if cursor is None else cursor
        limits = self.limits()
        items: list[WorkItem] = []
        for item in self.transport().discover(cursor, limits):
            items.append(item)
            if len(items) >= limits.max_items:
                break
        return items

    def read(self, items: Sequence[WorkItem]) -> pa.Table:
        """The rows of ``items`` in order, read by the engine's worker code (transport,
        format, table schema) and written through the table's sink."""
        self._reads += 1
        ctx = dataclasses.replace(
            self.ctx,
            warehouse=str(self.root / "reads" / str(self._reads)),
            items=list(items),
            batch_id=self._reads,
            attempt="read",
        )
        sink = ctx.sink()
        sink.prepare(ctx.batch_id, ctx.attempt)
        for part, item in enumerate(items):
            try:
                ingest_item(ctx, part, item)
            except ItemFailed as e:
                pytest.fail(f"reading {item} failed: {e.failure.message}\n{e.failure.trace}")
        sink.publish(ctx.batch_id, ctx.attempt)
        return _read_parts(sink.location(), self.ctx.table.arrow_schema())

    def expected(self) -> pa.Table:
        """The source's records as the table holds them."""
        schema = self.ctx.table.arrow_schema()
        records = self.source.records
        if isinstance(records, pa.Table):
            return records.select(schema.names).cast(schema)
        return pa.Table.from_pylist([dict(r) for r in records], schema=schema)

    # --- the engine ---------------------------------------------------------------

    def discover(self) -> discovery.Discovery:
        """One discovery by the engine: plans batches in the connector's state store."""
        return discovery.discover(self.store, self.ctx)

    def run(self, batch_ids: Sequence[int]) -> None:
        """Run planned batches in this process (Spark's task loop without Spark)."""
        for batch_id in batch_ids:
            run_batch(self.store, batch_id, _InProcessTasks)

    def drain(self, rounds: int = 20) -> None:
        """Discover and run until discovery finds nothing new."""
        for _ in range(rounds):
            found = self.discover()
            if not found.batch_ids:
                return
            self.run(found.batch_ids)
        pytest.fail(f"discovery still finds new work after {rounds} runs of a bounded source")

    def finalize(self) -> bool:
        """The engine's end-of-input check; True when the connector is finished."""
        return discovery.finalize(self.store, self.ctx)

    def table(self) -> pa.Table:
        """The rows the table holds now (published batches)."""
        return _read_parts(self.ctx.sink().location(), self.ctx.table.arrow_schema())

    def status(self) -> ConnectorState:
        """The connector's state in the store; fails the test when there is none."""
        st = self.store.status(self.ref)
        assert st is not None, f"no state for connector {self.ref}"
        return st


def _read_parts(folder: str, schema: pa.Schema) -> pa.Table:
    """The table's Parquet parts in ``folder`` (a path or an ``s3://`` URL)."""
    from airflow_connectors.sinks._fs import parquet_dataset

    dataset = parquet_dataset(folder)
    if dataset is None:
        return schema.empty_table()
    return dataset.to_table(columns=schema.names)


class TransportConformance:
    """Subclass (as ``Test<Name>``) and define a ``source`` fixture returning a
    :class:`Source`: the tests below then run against that transport."""

    #: Spark master of the crash check's ingest jobs.
    spark_master: ClassVar[str] = "local[2]"

    @pytest.fixture
    def source(self) -> Source:
        """Override: the :class:`Source` the checks run against."""
        raise NotImplementedError(
            f"{type(self).__name__}: define a `source` fixture returning an "
            "airflow_connectors.testing.conformance.Source"
        )

    @pytest.fixture
    def connector(self, source: Source, tmp_path: Path) -> Iterator[Connector]:
        """The source as a :class:`Connector` with a fresh state store and warehouse."""
        c = Connector(source, tmp_path / "connector")
        yield c
        c.close()

    # --- the class -------------------------------------------------------------------

    def test_declares_its_name_and_a_strict_config(self, source: Source) -> None:
        """The class has the registered ``name``, a ``Config`` that forbids unknown keys and
        ``needs_format`` as the source says."""
        cls = TRANSPORTS.get(source.transport)
        assert issubclass(cls, Transport), f"{cls!r} is not a Transport"
        assert cls.name == source.transport, (
            f"{cls.__name__}.name is {cls.name!r} but it is registered as {source.transport!r}"
        )
        assert cls.Config.model_config.get("extra") == "forbid", (
            f"{cls.__name__}.Config accepts unknown keys; derive it from StrictConfig"
        )
        assert cls.needs_format == (source.format is not None), (
            f"{cls.__name__}.needs_format is {cls.needs_format} but the source "
            f"{'has' if source.format else 'has no'} format"
        )

    # --- discovery and reading ---------------------------------------------------------

    def test_lists_work_in_key_order_and_every_record_lands_once(
        self, connector: Connector
    ) -> None:
        """The first discovery lists work in key order that reads as known records; draining
        lands every record exactly once."""
        items = connector.list_work(Cursor())
        assert items, "the first discovery of the source listed no work"
        keys = [i.key for i in items]
        assert keys == sorted(keys), f"work items not in key order: {keys}"
        key, expected = connector.source.key_column, connector.expected()
        # A discovery may list part of the source (one range, one rate's worth): what it
        # lists reads as known records, each once; discovering until nothing is new,
        # every record.
        assert_same_records(connector.read(items), expected, key, "first discovery", part=True)
        connector.drain()
        assert_same_records(connector.table(), expected, key, "table")

    def test_batches_committed_out_of_order_land_every_record_once(
        self, connector: Connector
    ) -> None:
        """Airflow runs a discovery's batches side by side, so they commit in any order:
        each discovery's batches run last first, and draining still lands every record
        exactly once."""
        for _ in range(20):
            found = connector.discover()
            if not found.batch_ids:
                break
            connector.run(list(reversed(found.batch_ids)))
        else:
            pytest.fail("discovery still finds new work after 20 runs of a bounded source")
        assert_same_records(
            connector.table(),
            connector.expected(),
            connector.source.key_column,
            "table after batches committed last first",
        )

    def test_discovery_after_the_cursor_lists_only_new_work(self, connector: Connector) -> None:
        """After a commit, no committed range is listed again, and nothing once all is committed."""
        found = connector.discover()
        assert found.batch_ids, "the first discovery of the source planned nothing"
        # Commit the first batch; forget the others, so their items are new work again.
        connector.run(found.batch_ids[:1])
        for batch_id in found.batch_ids[1:]:
            connector.store.drop_planned_batch(batch_id)
        cursor = connector.store.cursor(connector.ref)
        assert not cursor.in_flight and cursor.offsets, "the first batch committed no offset"
        for item in connector.list_work(cursor):
            done = cursor.get(item.key)
            if done is not None:
                _assert_after(item, done)
        connector.drain()
        assert_same_records(
            connector.table(), connector.expected(), connector.source.key_column, "table"
        )
        left = connector.list_work()
        assert not left, f"discovery lists work after every record was committed: {left}"

    def test_in_flight_keys_are_skipped(self, connector: Connector) -> None:
        """Keys of planned batches are not listed again; the next discovery returns the
        pending batches first."""
        found = connector.discover()
        assert found.batch_ids, "the first discovery of the source planned nothing"
        cursor = connector.store.cursor(connector.ref)
        assert cursor.in_flight, "planned batches left no key in flight"
        listed = [i for i in connector.list_work(cursor) if i.key in cursor.in_flight]
        assert not listed, f"discovery lists keys that are in flight: {listed}"
        again = connector.discover()  # pending batches first; nothing planned twice
        assert again.batch_ids[: len(found.batch_ids)] == found.batch_ids, (
            f"the next discovery returned {again.batch_ids}, not the pending {found.batch_ids} first"
        )
        connector.run(again.batch_ids)
        connector.drain()
        assert_same_records(
            connector.table(), connector.expected(), connector.source.key_column, "table"
        )

    def test_reading_from_start_and_records_done_yields_the_remaining_records(
        self, connector: Connector
    ) -> None:
        """A key committed part way resumes at its offset with ``records_done`` and reads the
        records after it in order; with offsets reset there, the rest lands once."""
        items = connector.list_work(Cursor())
        assert items, "the first discovery of the source listed no work"
        first = items[0]
        listed = connector.read([i for i in items if i.key == first.key])
        offset, records = _part_way(connector, first)
        done = records - first.records_done  # records of the key before the offset
        if done <= 0 or done >= listed.num_rows:
            pytest.skip(f"the source's first work item ({first.key}) holds fewer than 2 records")
        # The transport: from a key committed part way, discovery resumes at its offset
        # and reading yields the records after it, in order.
        cursor = Cursor(offsets={first.key: KeyOffset(offset, records, completed=False)})
        resumed = [i for i in connector.list_work(cursor) if i.key == first.key]
        assert resumed, f"nothing listed for {first.key} committed up to offset {offset}"
        assert (resumed[0].start, resumed[0].records_done) == (offset, records), (
            f"{first.key} committed up to offset {offset} ({records} records) resumes at "
            f"start={resumed[0].start}, records_done={resumed[0].records_done}"
        )
        rest = connector.read(resumed)
        overlap = min(rest.num_rows, listed.num_rows - done)
        assert overlap > 0 and (
            rest.slice(0, overlap).to_pylist() == listed.slice(done, overlap).to_pylist()
        ), (
            f"{first.key} resumed after {done} records: read {rest.num_rows} rows that do not "
            f"continue, in order, the {listed.num_rows} records read from its start"
        )
        # The engine, from the same offsets set as a user resets them: every other record
        # lands, once.
        connector.store.set_stopped(connector.ref, True)
        connector.store.edit_offsets(
            connector.ref,
            [{"key": first.key, "offset": offset, "records": records, "completed": False}],
        )
        connector.store.set_stopped(connector.ref, False)
        connector.drain()
        key = connector.source.key_column
        skipped = set(listed.slice(0, done).column(key).to_pylist())
        expected = connector.expected()
        remaining = expected.filter(
            pa.array([k not in skipped for k in expected.column(key).to_pylist()])
        )
        assert_same_records(connector.table(), remaining, key, f"table resumed in {first.key}")

    # --- end of input ---------------------------------------------------------------------

    def test_bounded_and_end_of_input_as_declared(
        self, connector: Connector, tmp_path: Path
    ) -> None:
        """``bounded`` is as the source declares; a bounded source reaches end of input only
        once everything is committed, an unbounded one never."""
        source = connector.source
        assert connector.transport().bounded is source.bounded, (
            f"bounded is {connector.transport().bounded}; the source declares {source.bounded}"
        )
        if source.bounded:
            assert not connector.finalize(), "end of input before anything was read"
            found = connector.discover()
            assert found.batch_ids and not found.end_of_input, f"first discovery: {found}"
            assert not connector.finalize(), "end of input while batches are in flight"
            connector.run(found.batch_ids)
            connector.drain()
            assert connector.finalize(), "no end of input once every record is committed"
            assert connector.status().end_of_input, "end of input is not in the connector's state"
            again = connector.discover()
            assert again.batch_ids == [] and again.end_of_input, (
                f"discovery after end of input: {again}"
            )
        else:
            _assert_never_ends(connector)
        if source.unbounded_config is not None:
            endless = Connector(source, tmp_path / "unbounded", source.unbounded_config)
            try:
                assert endless.transport().bounded is False, (
                    "the source's unbounded_config is bounded"
                )
                _assert_never_ends(endless)
            finally:
                endless.close()

    # --- configuration ------------------------------------------------------------------

    def test_unknown_config_key_is_rejected_with_its_path(self, source: Source) -> None:
        """An unknown config key fails validation at its own JSON path."""
        bad = {**source.config, "no_such_setting": 1}
        _assert_rejected_at(source, bad, "no_such_setting", "unknown field")
        cls = TRANSPORTS.get(source.transport)
        with pytest.raises(ValidationError) as raised:
            cls.Config.model_validate(bad)
        locs = [e["loc"] for e in raised.value.errors()]
        assert locs == [("no_such_setting",)], f"Config's errors are at {locs}"

    def test_wrong_types_are_rejected_with_their_path(self, source: Source) -> None:
        """A non-scalar in each scalar field (and each of ``invalid_configs``) fails validation
        at that field's path."""
        fields = _scalar_fields(TRANSPORTS.get(source.transport).Config)
        if not fields and not source.invalid_configs:
            pytest.skip("Config has no scalar field and the source gives no invalid_configs")
        for name in fields:
            _assert_rejected_at(source, {**source.config, name: {"not": "a scalar"}}, name)
        for path, config in source.invalid_configs.items():
            _assert_rejected_at(source, config, path)

    # --- exactly once under a crash --------------------------------------------------------

    def test_crash_between_sink_write_and_commit_reruns_to_the_same_table(
        self, connector: Connector, tmp_path: Path, spark_connect_server: Any
    ) -> None:
        """An ingest job killed after writing, before committing, leaves nothing visible; the
        re-run lands every record once and re-running committed batches changes nothing.
        The killed job is a spark-submit job (``execution: spark_submit``), the re-run a
        client of a Spark Connect server (``spark_connect``): the transport reads on
        either, its credentials reaching the server's tasks with each task. (A transport
        of another distribution re-runs on spark-submit too: a Spark Connect server's
        Python workers import only this package, which the client sends, and what is
        installed there.)"""
        found = connector.discover()
        assert found.batch_ids, "the first discovery of the source planned nothing"
        marks = tmp_path / "failpoints"
        marks.mkdir()
        proc = jobs.start_job(
            found.batch_ids,
            connector.store_url,
            marks,
            hang_at="after_sink_write",
            spark_master=self.spark_master,
        )
        jobs.wait_for(marks / "after_sink_write", proc)
        jobs.kill(proc)
        # Written but not committed: nothing visible, no offset, every batch still planned.
        assert connector.table().num_rows == 0, "rows of an uncommitted batch are visible"
        assert connector.status().total_records == 0, "an uncommitted batch counted records"
        assert not connector.store.cursor(connector.ref).offsets, (
            "an uncommitted batch moved offsets"
        )
        rerun = connector.discover()  # the next run re-executes the same plan
        assert rerun.batch_ids[: len(found.batch_ids)] == found.batch_ids, (
            f"after the crash discovery returned {rerun.batch_ids}, not the planned "
            f"{found.batch_ids} first"
        )
        if type(connector.transport).__module__.startswith("airflow_connectors."):
            jobs.finish_on_spark_connect(
                rerun.batch_ids, connector.store_url, marks, spark_connect_server.url
            )
        else:  # a server's workers import what is installed there, and this package
            jobs.finish(rerun.batch_ids, connector.store_url, marks, spark_master=self.spark_master)
        connector.drain()
        expected = connector.expected()
        assert_same_records(
            connector.table(), expected, connector.source.key_column, "table after the re-run"
        )
        total = connector.status().total_records
        assert total == expected.num_rows, f"total_records {total}, expected {expected.num_rows}"
        assert not connector.store.pending_batches(connector.ref), "batches still pending"
        before = connector.table()
        for batch_id in rerun.batch_ids:  # a committed batch is a no-op, without Spark
            again = run_batch(connector.store, batch_id, _no_spark)
            assert not again.committed, f"committed batch {batch_id} committed again"
        assert connector.table().equals(before), "re-running committed batches changed the table"


# --- helpers of the checks ---------------------------------------------------------------


def _assert_after(item: WorkItem, done: KeyOffset) -> None:
    """``item`` of a key committed up to ``done`` reads nothing committed again."""
    assert item.start >= done.offset and item.records_done >= done.records, (
        f"{item.key} is committed up to offset {done.offset} ({done.records} records) but "
        f"discovery lists it again from start={item.start}, records_done={item.records_done}"
    )


def _assert_never_ends(connector: Connector) -> None:
    found = connector.discover()
    assert found.batch_ids, "the first discovery of the source planned nothing"
    connector.run(found.batch_ids)
    assert not connector.finalize(), "an unbounded configuration reached end of input"
    assert not connector.status().end_of_input, "an unbounded connector's state says end of input"


def _part_way(connector: Connector, item: WorkItem) -> tuple[int, int]:
    """An offset inside ``item`` at a record boundary, and the records before it: what
    the store holds for a key committed part way."""
    fmt = connector.ctx.format()
    if fmt is None or connector.transport().record_offsets:
        # Integrated transports, and transports whose offsets count records (message
        # sequences; their source holds one record per offset in its first item):
        # start/end count records.
        n = connector.read([item]).num_rows
        return item.start + n // 2, item.records_done + n // 2
    if not fmt.line_oriented:
        pytest.skip(f"format {fmt.name} reads whole objects: no object is resumed part way")
    data = b"".join(bytes(c) for c in connector.transport().read(item))
    consumed = records = 0
    # A read that is not final commits its complete records only: the format says where
    # the last complete record of the first half ends.
    for decoded in fmt.decode(
        iter([data[: len(data) // 2]]),
        final=False,
        first_record=item.records_done + 1,
        at_start=item.start == 0,
    ):
        consumed = max(consumed, decoded.consumed)
        records += decoded.records
    return item.start + consumed, item.records_done + records


def _assert_rejected_at(
    source: Source, config: Mapping[str, Any], path: str, says: str = ""
) -> None:
    where = f"{CONFIG_PATH}{'.' if path and not path.startswith('[') else ''}{path}"
    errors = validate_pipeline(source.pipeline_doc(config))
    found = [e for e in errors if e.path == where]
    assert found, (
        f"config {dict(config)!r} should be rejected at {where}; the spec's errors: "
        f"{[str(e) for e in errors] or 'none'}"
    )
    assert says in found[0].message, f"{where}: {found[0].message!r} does not say {says!r}"


_SCALARS = (str, int, float, bool)


def _scalar_fields(config: type[BaseModel]) -> list[str]:
    """Fields of ``config`` that take one number, string or boolean (or None)."""
    names = []
    for name, info in config.model_fields.items():
        tp = info.annotation
        union = typing.get_origin(tp) in (typing.Union, types.UnionType)
        options = [a for a in typing.get_args(tp) if a is not type(None)] if union else [tp]
        if options and all(a in _SCALARS for a in options):
            names.append(name)
    return names
