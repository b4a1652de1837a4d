"""The ``iceberg`` sink through the real engine: JSON files -> Spark -> an Iceberg table
in pyiceberg's SQL catalog kept in the state store's database (SQLite, PostgreSQL), on a
local warehouse and on the moto S3 server, read back with pyiceberg and DuckDB. The sink
conformance kit (crashes at every fail point, concurrent publishers, a polling reader,
an added column) runs with the catalog in SQLite and in PostgreSQL and on S3: one
snapshot per batch, marked with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from helpers import checksum, pipeline, run
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_connectors.sinks.base import SinkUnwritable
from airflow_connectors.sinks.iceberg import (
    ATTEMPT_PROPERTY,
    BATCH_PROPERTY,
    IcebergSink,
    catalog_properties,
)
from airflow_connectors.state.store import StateStore
from airflow_connectors.testing.changes_kit import ChangesConformance
from airflow_connectors.testing.sink_kit import (
    OtherStorage,
    S3Warehouse,
    SinkCase,
    SinkConformance,
)

COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE", "small": "SMALLINT"}


def write_source(folder: Path, files: int, rows: int, *, base: int = 0) -> pa.Table:
    """``files`` JSON-lines files of ``rows`` rows each; ids from ``base`` upwards."""
    folder.mkdir(parents=True, exist_ok=True)
    ids, names, amounts = [], [], []
    for f in range(files):
        lines = []
        for i in range(base + f * rows, base + (f + 1) * rows):
            ids.append(i)
            names.append(f"name-{i}-{'x' * (i % 11)}")
            amounts.append(i / 4)
            lines.append(
                json.dumps({"id": i, "name": names[-1], "amount": amounts[-1], "small": i % 300})
            )
        (folder / f"part-{base + f:06d}.json").write_text("\n".join(lines) + "\n")
    return pa.table({"id": pa.array(ids, pa.int64()), "name": names, "amount": amounts})


def table_spec(source: Path, sink: dict[str, Any] | None = None, **conn: Any) -> dict[str, Any]:
    return {
        "columns": COLUMNS,
        "sink": {"name": "iceberg", "config": sink or {}},
        "connectors": [
            {
                "name": "files",
                "transport": {
                    "name": "file_input",
                    "config": {"path": str(source), "min_file_age": 0},
                },
                "format": {"name": "json", "config": {"update_format": "raw"}},
                **conn,
            }
        ],
    }


def catalog(uri: str, location: str = "") -> SqlCatalog:
    """A reader's view of the catalog, as a user opens it."""
    return SqlCatalog("airflow_connectors", **catalog_properties(uri, location))


def load(uri: str, name: str = "p.events", location: str = "") -> Table:
    cat = catalog(uri, location)
    try:
        return cat.load_table(name)
    finally:
        cat.engine.dispose()


def read(uri: str, name: str = "p.events", location: str = "") -> pa.Table:
    return load(uri, name, location).scan().to_arrow()


def batch_marks(table: Table) -> list[tuple[str | None, str | None]]:
    """(batch, attempt) marked on each snapshot, oldest first."""
    return [
        (s.summary.get(BATCH_PROPERTY), s.summary.get(ATTEMPT_PROPERTY))
        for s in table.metadata.snapshots
        if s.summary is not None
    ]


def assert_same(data: pa.Table, source: pa.Table) -> None:
    data = data.select(["id", "name", "amount"])
    assert data.num_rows == source.num_rows
    assert len(set(data.column("id").to_pylist())) == source.num_rows  # no duplicates
    assert checksum(data, "id") == checksum(source, "id")


def data_files(table: Table) -> list[str]:
    return sorted(task.file.file_path for task in table.scan().plan_files())


# --- the engine, both stores -------------------------------------------------------


def test_engine_run_lands_batches_as_marked_snapshots(
    spark: Any, store_url: str, tmp_path: Path
) -> None:
    """Two runs (two batches) into an Iceberg table whose catalog sits in the state
    store's database; a bad line goes to the dead-letter table; pyiceberg and DuckDB
    read the same rows; a second publish of a batch adds nothing."""
    src = tmp_path / "src"
    first = write_source(src, 3, 500)
    (src / "part-000003-bad.json").write_text(
        '{"id": 100000, "name": "ok", "amount": 1}\nnot json\n'
    )
    spec = pipeline(
        {"events": table_spec(src, {"target_file_size": 1 << 20}, errors={"tolerance": "all"})}
    )
    wh = str(tmp_path / "wh")
    report = run(spec, store_url, wh, spark)
    assert report.connectors["events.files"].records == 1501
    second = write_source(src, 2, 300, base=50_000)
    run(spec, store_url, wh, spark)

    table = load(store_url)
    good = pa.concat_tables(
        [
            first,
            second,
            pa.table({"id": pa.array([100000], pa.int64()), "name": ["ok"], "amount": [1.0]}),
        ]
    )
    data = table.scan().to_arrow()
    assert_same(data, good)
    assert data.schema.field("small").type == pa.int32()  # SMALLINT widened for Iceberg
    assert data.schema.field("id").nullable is False
    marks = batch_marks(table)
    assert len(marks) == 2 and [m[0] for m in marks] == ["files:1", "files:2"]
    assert table.location() == f"{wh}/p/events"
    # One metadata file for the creation and one per batch: no orphans.
    assert len(list(Path(wh, "p", "events", "metadata").glob("*.metadata.json"))) == 3
    # DuckDB reads the table's current data files.
    files = data_files(table)
    assert all(f.startswith(f"{wh}/p/events/data/batch-") for f in files)
    con = duckdb.connect()
    assert con.execute("SELECT count(*), sum(id) FROM read_parquet(?)", [files]).fetchone() == (
        good.num_rows,
        sum(good.column("id").to_pylist()),
    )
    errors = read(store_url, "p.events__errors")
    assert errors.num_rows == 1 and errors.column("raw_text").to_pylist() == ["not json"]

    # The state store says batch 1 is published; publishing it again is a no-op.
    store = StateStore(store_url)
    try:
        batch = store.load_batch(1)
        sink = IcebergSink(
            IcebergSink.Config.model_validate(batch.plan.table.sink.config),
            pipeline="p",
            table=batch.plan.table,
            warehouse=wh,
        )
        sink.connector, sink.state_store_url = "files", store.url
        sink.publish(1, batch.attempt)
    finally:
        store.close()
    assert len(load(store_url).metadata.snapshots) == 2


@pytest.mark.spark  # the CLI's run starts local Spark
def test_airflow_connectors_run_summarizes_the_iceberg_table(tmp_path: Path) -> None:
    """``airflow-connectors run --state-store-url`` as users run it: the summary reads
    the Iceberg table (and its dead letters) through the catalog in that store."""
    src = tmp_path / "src"
    write_source(src, 2, 50)
    (src / "part-000002-bad.json").write_text("not json\n")
    spec = tmp_path / "pipeline.json"
    doc = {"pipeline": "p", "tables": {"events": table_spec(src, errors={"tolerance": "all"})}}
    spec.write_text(json.dumps(doc))
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "home"), "PYSPARK_PYTHON": sys.executable}
    env.pop("AIRFLOW__CONNECTORS__STATE_STORE_URL", None)
    env.pop("AIRFLOW__CONNECTORS__WAREHOUSE", None)
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    wh = tmp_path / "wh"
    cli = str(Path(sys.executable).parent / "airflow-connectors")
    out = subprocess.run(
        [cli, "run", str(spec), "--state-store-url", url, "--warehouse", str(wh), "--show", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"table events: 100 rows at {wh / 'p' / 'events'}" in out.stdout, out.stdout
    assert "table events__errors: 1 rows" in out.stdout, out.stdout
    assert read(url).num_rows == 100


def test_catalog_uri_namespace_and_table_name(spark: Any, tmp_path: Path) -> None:
    """The catalog in another database than the state store, under names of one's own;
    a bad catalog URL fails the run in one line naming the table, without its password."""
    src = tmp_path / "src"
    source = write_source(src, 2, 100)
    cat_url = f"sqlite:///{tmp_path / 'lake.db'}"
    sink = {
        "catalog_uri": cat_url,
        "namespace": "lake",
        "table_name": "ev",
        "location": str(tmp_path / "t"),
    }
    store_url = f"sqlite:///{tmp_path / 'state.db'}"
    run(pipeline({"events": table_spec(src, sink)}), store_url, str(tmp_path / "wh"), spark)
    assert_same(read(cat_url, "lake.ev"), source)
    assert load(cat_url, "lake.ev").location() == str(tmp_path / "t")

    bad = IcebergSink(
        IcebergSink.Config(catalog_uri="postgresql+psycopg://u:s3cr3tpw@127.0.0.1:1/none"),
        pipeline="p",
        table=pipeline({"events": table_spec(src)}).tables[0],
        warehouse=str(tmp_path / "wh2"),
    )
    with pytest.raises(SinkUnwritable) as info:
        bad.prepare(1, "1-abc")
    text = str(info.value)
    assert "s3cr3tpw" not in text and "table events" in text and "\n" not in text
    assert "catalog_uri" in text


def test_column_added_to_the_spec_evolves_the_table(spark: Any, tmp_path: Path) -> None:
    """A column added to the table spec after the first batch: the next batch adds it to
    the Iceberg schema in its own commit; earlier rows read it as NULL."""
    src = tmp_path / "src"
    write_source(src, 1, 50)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    wh = str(tmp_path / "wh")
    run(pipeline({"events": table_spec(src)}), url, wh, spark)
    (src / "part-999999.json").write_text(
        json.dumps({"id": 999, "name": "n", "note": "new"}) + "\n"
    )
    wider = table_spec(src)
    wider["columns"] = {**COLUMNS, "note": "VARCHAR"}
    run(pipeline({"events": wider}), url, wh, spark)
    table = load(url)
    assert "note" in table.schema().column_names and len(table.metadata.snapshots) == 2
    data = table.scan().to_arrow().sort_by("id")
    assert data.num_rows == 51
    assert data.column("note").to_pylist() == [None] * 50 + ["new"]


# --- the sink conformance kit: SQLite and PostgreSQL catalogs, local and S3 --------------


class TestIcebergSink(SinkConformance):
    """Crashes at every fail point (``iceberg_committed``: after the Iceberg commit,
    before the state store records the batch published), concurrent publishers, a
    polling reader, an added column, with the catalog in the state store's SQLite
    database: one snapshot per batch, marked with it, one attempt folder left per batch."""

    sink_name = "iceberg"
    sink_fail_points = ("iceberg_committed",)
    whole_at = ("iceberg_committed",)
    execution = "spark_connect"  # TestParquetSink runs the kit's spark-submit path

    def check_landed(self, case: SinkCase) -> None:
        from pyiceberg.exceptions import NoSuchTableError

        sink = case.sink()
        assert isinstance(sink, IcebergSink)
        ids = [f"files:{b}" for b in case.committed()]
        for kind in ("rows", "errors"):
            with sink.catalog() as cat:
                try:
                    table = cat.load_table(sink.identifier(kind))
                except NoSuchTableError:
                    continue  # no batch had dead letters
            # Every snapshot is one batch's, marked with it; none twice.
            marks = [m or "" for m, _ in batch_marks(table)]
            assert len(marks) == len(table.metadata.snapshots), f"{case.name} {kind}"
            assert len(set(marks)) == len(marks), f"{case.name} {kind}: {marks}"
            assert set(marks) <= set(ids), f"{case.name} {kind}: {marks} not in {ids}"
            data = Path(sink.location(kind)) / "data"
            if data.is_dir():  # a local warehouse: the committed attempts' folders only
                assert len(list(data.glob("batch-*/*"))) == len(marks), case.name


class TestIcebergSinkPostgresCatalog(OtherStorage, TestIcebergSink):
    """The same with the SQL catalog in PostgreSQL (each case in a schema of its own);
    as for another storage, the storage-independent cases run in TestIcebergSink and
    the killed jobs are Spark Connect clients."""

    @pytest.fixture(scope="class")
    @classmethod
    def sink_config(cls, pg_schema_factory: Any) -> Callable[[str], dict[str, Any]]:
        return lambda case: {"catalog_uri": str(pg_schema_factory())}


class TestIcebergSinkOnS3(S3Warehouse, TestIcebergSink):
    """The same with the warehouse (data and metadata) on the moto S3 server."""


class TestIcebergSinkChanges(ChangesConformance):
    """A keyed table's batch killed at every fail point (``iceberg_keys_committed``: the
    key states committed, the table's transaction not yet) and published by racing
    retries: the exact table."""

    sink_name = "iceberg"
    changes_fail_points = ("iceberg_keys_committed", "iceberg_committed")
    execution = "spark_connect"
