"""The ``iceberg_input`` transport on Iceberg tables the tests write with pyiceberg (SQL
catalog on SQLite in ``tmp_path``; one on PostgreSQL with the data on the S3-compatible
server): the conformance kit, snapshot reads, follow picking up appended snapshots once,
end of input, filters, delete and overwrite snapshots, and one-line errors."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_connectors.catalog import validate_pipeline
from airflow_connectors.sinks.iceberg import catalog_properties
from airflow_connectors.testing.conformance import (
    Connector,
    Source,
    TransportConformance,
    assert_same_records,
)
from airflow_connectors.transports.base import Cursor, Limits
from airflow_connectors.transports.iceberg_input import key_seq

pytestmark = pytest.mark.sources

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("amount", pa.float64()),
    ]
)
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"}


def rows(ids: range) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"n{i}" for i in ids],
            "amount": [i / 4 for i in ids],
        },
        schema=SCHEMA,
    )


class Lake:
    """An Iceberg table ``ns.events`` in a SQL catalog, written with pyiceberg."""

    def __init__(self, uri: str, warehouse: str, name: str = "ns.events") -> None:
        self.uri = uri
        self.name = name
        self.catalog = SqlCatalog("airflow_connectors", **catalog_properties(uri, warehouse))
        self.catalog.create_namespace_if_not_exists(name.rsplit(".", 1)[0])
        self.table: Table = self.catalog.create_table(
            name, schema=SCHEMA, location=f"{warehouse.rstrip('/')}/{name.replace('.', '/')}"
        )

    def append(self, ids: range) -> int:
        """Appends the rows of ``ids`` in one snapshot; returns its id."""
        self.table.append(rows(ids))
        snapshot = self.table.current_snapshot()
        assert snapshot is not None
        return snapshot.snapshot_id

    def config(self, **more: Any) -> dict[str, Any]:
        return {"table_name": self.name, "catalog_uri": self.uri, **more}

    def close(self) -> None:
        self.catalog.engine.dispose()


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[Lake]:
    lk = Lake(f"sqlite:///{tmp_path / 'catalog.db'}", f"file://{tmp_path / 'wh'}")
    yield lk
    lk.close()


def source(lake: Lake, ids: range, **config: Any) -> Source:
    return Source(
        transport="iceberg_input",
        config=lake.config(**config),
        columns=COLUMNS,
        records=rows(ids),
        key_column="id",
    )


def connector(lake: Lake, root: Path, ids: range = range(0), **config: Any) -> Connector:
    return Connector(source(lake, ids, **config), root)


def ids_of(c: Connector) -> list[int]:
    return sorted(c.table().column("id").to_pylist())


# --- the conformance kit -------------------------------------------------------------------


class TestIcebergInput(TransportConformance):
    @pytest.fixture
    def source(self, lake: Lake) -> Source:
        # snapshot_and_follow from the first snapshot to the third: the first snapshot's
        # files (two appends), then the files the next two snapshots added; a fourth
        # snapshot after the end is not read.
        first = lake.append(range(0, 120))
        lake.append(range(120, 200))
        lake.append(range(200, 300))
        end = lake.append(range(300, 420))
        lake.append(range(1000, 1010))
        return Source(
            transport="iceberg_input",
            config=lake.config(
                mode="snapshot_and_follow",
                snapshot_id=lake.table.metadata.snapshots[1].snapshot_id,
                end_snapshot_id=end,
            ),
            columns=COLUMNS,
            records=rows(range(0, 420)),
            key_column="id",
            unbounded_config=lake.config(mode="follow", snapshot_id=first),
            invalid_configs={
                "table_name": lake.config(table_name="events"),
                "datetime": lake.config(datetime="yesterday"),
                "filter": lake.config(filter="id >>> 3"),
                "mode": lake.config(mode="stream"),
                "": lake.config(end_snapshot_id=first),  # snapshot mode has no end
            },
        )


# --- snapshot mode ---------------------------------------------------------------------------


def test_snapshot_reads_one_snapshot_and_ends(lake: Lake, tmp_path: Path) -> None:
    """Snapshot mode reads the current snapshot at the first discovery (one work item
    per data file), ends there, and later appends change nothing; ``snapshot_id`` and
    ``datetime`` pick an older snapshot."""
    first = lake.append(range(0, 100))
    lake.append(range(100, 250))
    c = connector(lake, tmp_path / "current", range(0, 250))
    items = c.list_work()
    assert [key_seq(i.key) for i in items] == [2, 2] and all("file" in i.meta for i in items)
    found = c.discover()
    lake.append(range(250, 300))  # after the first discovery: not part of its snapshot
    c.run(found.batch_ids)
    c.drain()
    assert ids_of(c) == list(range(250))
    assert c.finalize() and c.status().end_of_input
    c.close()

    old = connector(lake, tmp_path / "old", range(0, 100), snapshot_id=first)
    old.drain()
    assert ids_of(old) == list(range(100)) and old.finalize()
    old.close()

    snap = lake.table.metadata.snapshot_by_id(first)
    assert snap is not None
    at = snap.timestamp_ms / 1000
    when = dt.datetime.fromtimestamp(at, dt.UTC)
    dated = connector(lake, tmp_path / "dated", range(0, 100), datetime=when.isoformat())
    dated.drain()
    assert ids_of(dated) == list(range(100))
    dated.close()


def test_filter_reads_matching_rows_and_prunes_files(lake: Lake, tmp_path: Path) -> None:
    """``filter`` keeps matching rows only; a file whose statistics rule it out is not
    listed at all."""
    lake.append(range(0, 100))
    lake.append(range(100, 200))
    lake.append(range(200, 300))
    c = connector(lake, tmp_path / "c", filter="id >= 150 and id < 260")
    assert len(c.list_work()) == 2  # ids 0-99 pruned by the file's min/max
    c.drain()
    assert ids_of(c) == list(range(150, 260))
    c.close()


def test_snapshot_after_deletes_reads_the_remaining_rows(lake: Lake, tmp_path: Path) -> None:
    """A snapshot after a delete (a whole file dropped) and an overwrite (a file rewritten
    without some rows) reads exactly the rows left."""
    lake.append(range(0, 100))
    lake.append(range(100, 200))
    lake.table.delete("id >= 100")  # drops the second file: a 'delete' snapshot
    lake.table.delete("id < 10")  # rewrites the first: an 'overwrite' snapshot
    ops = [s.summary.operation.value for s in lake.table.metadata.snapshots if s.summary]
    assert ops == ["append", "append", "delete", "overwrite"]
    c = connector(lake, tmp_path / "c")
    c.drain()
    assert ids_of(c) == list(range(10, 100)) and c.finalize()
    c.close()


def test_files_added_without_field_ids_are_read_by_name(lake: Lake, tmp_path: Path) -> None:
    """Parquet files added with ``add_files`` (as the iceberg sink commits its parts: no
    field ids) are read through the table's name mapping, in snapshot and follow."""
    import pyarrow.parquet as pq

    pq.write_table(rows(range(0, 20)), tmp_path / "a.parquet")
    lake.table.add_files([str(tmp_path / "a.parquet")])
    c = connector(lake, tmp_path / "c", mode="snapshot_and_follow")
    c.drain()
    pq.write_table(rows(range(20, 30)), tmp_path / "b.parquet")
    lake.table.add_files([str(tmp_path / "b.parquet")])
    c.drain()
    assert_same_records(c.table(), rows(range(30)), "id", "table")
    c.close()


def add_position_deletes(lake: Lake, data_file: str, positions: list[int], folder: Path) -> None:
    """Commits a position-delete file removing ``positions`` of ``data_file`` as a
    'delete' snapshot, as a merge-on-read DELETE of Spark does (pyiceberg writes no
    delete files itself: its manifest writer is told to write a delete manifest)."""
    import pyarrow.parquet as pq
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestContent,
        ManifestWriterV2,
    )
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.typedef import Record

    path = folder / f"pos-deletes-{uuid.uuid4().hex[:6]}.parquet"
    deletes = {"file_path": [data_file] * len(positions), "pos": pa.array(positions, pa.int64())}
    pq.write_table(pa.table(deletes), path)
    delete_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=f"file://{path}",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=len(positions),
        file_size_in_bytes=path.stat().st_size,
    )
    delete_file.spec_id = 0
    content, meta = ManifestWriterV2.content, ManifestWriterV2.__dict__["_meta"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ManifestWriterV2, "content", lambda self: ManifestContent.DELETES)
        patch.setattr(
            ManifestWriterV2, "_meta", property(lambda w: {**meta.fget(w), "content": "deletes"})
        )
        with lake.table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            append._operation = Operation.DELETE
            append.append_data_file(delete_file)
    assert ManifestWriterV2.content is content


def test_position_delete_files_are_applied(lake: Lake, tmp_path: Path) -> None:
    """A data file with position deletes reads without the deleted rows, also from a
    record offset part way (offsets count the rows left)."""
    lake.append(range(0, 100))
    first = next(iter(lake.table.scan().plan_files())).file.file_path
    lake.append(range(100, 150))
    add_position_deletes(lake, first, [0, 5, 50], tmp_path)
    lake.table = lake.catalog.load_table(lake.name)
    survivors = [i for i in range(150) if i not in (0, 5, 50)]
    assert sorted(lake.table.scan().to_arrow().column("id").to_pylist()) == survivors

    c = connector(lake, tmp_path / "c")
    item = next(i for i in c.list_work() if i.meta["file"] == first)
    resumed = dataclasses.replace(item, start=10, records_done=10)
    read = [rb for rb in c.transport().read(resumed)]
    assert pa.Table.from_batches(read).column("id").to_pylist() == survivors[10:97]
    c.drain()
    assert ids_of(c) == survivors and c.finalize()
    c.close()

    follow = connector(lake, tmp_path / "f", mode="follow", snapshot_id=lake_start(lake))
    error = _drain_to_error(follow)
    assert "operation 'delete'" in error
    follow.close()


def lake_start(lake: Lake) -> int:
    return lake.table.metadata.snapshots[0].snapshot_id


# --- follow mode -----------------------------------------------------------------------------


def test_follow_reads_each_appended_snapshot_once(lake: Lake, tmp_path: Path) -> None:
    """Follow without a start reads the snapshots committed after the first discovery
    (not the rows before it), each once, and never ends; offsets rows collapse below the
    watermark."""
    lake.append(range(0, 50))  # before the start: not read
    c = connector(lake, tmp_path / "c", mode="follow")
    c.drain()  # the start marker
    assert ids_of(c) == [] and not c.finalize()
    lake.append(range(50, 80))
    c.drain()
    assert ids_of(c) == list(range(50, 80))
    for n in range(4):  # several snapshots between two runs
        lake.append(range(100 + 10 * n, 110 + 10 * n))
    found = c.discover()
    lake.append(range(500, 505))  # while batches are planned
    c.run(found.batch_ids)
    c.drain()
    expected = rows(range(50, 80)).to_pylist() + rows(range(100, 140)).to_pylist()
    expected += rows(range(500, 505)).to_pylist()
    assert_same_records(c.table(), pa.Table.from_pylist(expected, SCHEMA), "id", "table")
    assert c.list_work() == [] and not c.finalize()
    cursor = c.store.cursor(c.ref)
    # The start's row stays, the watermark's row too, the rows between collapsed.
    assert cursor.watermark is not None and key_seq(cursor.watermark) == 7
    assert len(cursor.offsets) <= 3, sorted(cursor.offsets)
    c.close()


def test_follow_ends_at_end_snapshot_id(lake: Lake, tmp_path: Path) -> None:
    """With ``end_snapshot_id`` follow ends once that snapshot is read, not before it is
    in the table, and reads nothing after it."""
    start = lake.append(range(0, 10))
    c = connector(lake, tmp_path / "early", mode="follow", snapshot_id=start, end_snapshot_id=1)
    c.drain()
    assert not c.finalize(), "end of input before end_snapshot_id is in the table"
    c.close()
    lake.append(range(10, 20))
    end = lake.append(range(20, 30))
    lake.append(range(30, 40))
    c = connector(lake, tmp_path / "c", mode="follow", snapshot_id=start, end_snapshot_id=end)
    assert c.transport().bounded
    c.drain()
    assert ids_of(c) == list(range(10, 30))
    assert c.finalize() and c.status().end_of_input
    c.close()


def test_follow_stops_at_a_delete_or_overwrite_unless_told(lake: Lake, tmp_path: Path) -> None:
    """A delete or overwrite snapshot stops follow in one line naming it; ``on_delete:
    skip`` / ``on_overwrite: skip`` read on past it (noticed), ``read_added`` reads the
    files the overwrite added."""
    start = lake.append(range(0, 100))
    lake.append(range(100, 200))
    lake.table.delete("id >= 100")  # 'delete'
    deleted = lake.table.current_snapshot()
    lake.table.delete("id < 10")  # 'overwrite': ids 10-99 rewritten
    overwrite = lake.table.current_snapshot()
    assert deleted is not None and overwrite is not None
    lake.append(range(300, 310))

    c = connector(lake, tmp_path / "fail", mode="follow", snapshot_id=start)
    # The start marker and the append before the delete are read, then the delete refuses.
    lake_error = _drain_to_error(c)
    assert str(deleted.snapshot_id) in lake_error and "operation 'delete'" in lake_error
    assert "on_delete: 'skip'" in lake_error and "\n" not in lake_error
    assert ids_of(c) == list(range(100, 200))
    c.close()

    c = connector(lake, tmp_path / "skip", mode="follow", snapshot_id=start, on_delete="skip")
    error = _drain_to_error(c)
    assert str(overwrite.snapshot_id) in error and "operation 'overwrite'" in error
    c.close()

    c = connector(
        lake,
        tmp_path / "skip2",
        mode="follow",
        snapshot_id=start,
        on_delete="skip",
        on_overwrite="skip",
    )
    c.drain()
    assert ids_of(c) == list(range(100, 200)) + list(range(300, 310))
    assert c.status().num_transport_errors == 2  # the two skipped snapshots, noticed once
    lake.table.delete("id >= 300")  # a skipped snapshot as the last one: noticed once too
    c.drain()
    c.drain()
    assert c.status().num_transport_errors == 3
    c.close()

    c = connector(
        lake,
        tmp_path / "added",
        mode="follow",
        snapshot_id=start,
        on_delete="skip",
        on_overwrite="read_added",
    )
    c.drain()
    assert ids_of(c) == list(range(10, 200)) + list(range(300, 310))
    c.close()


def _drain_to_error(c: Connector) -> str:
    """Discover and run until discovery fails; its message."""
    for _ in range(10):
        try:
            found = c.discover()
        except OSError as e:
            return str(e)
        assert found.batch_ids, "discovery found nothing and raised nothing"
        c.run(found.batch_ids)
    pytest.fail("discovery never failed")


def test_empty_table_and_expired_snapshots(lake: Lake, tmp_path: Path) -> None:
    """A table without snapshots: snapshot mode ends reading nothing, follow starts before its
    first snapshot. A snapshot expired after it was read is no error; one expired before
    follow read it stops follow in one line naming it."""
    snap = connector(lake, tmp_path / "snap")
    snap.drain()  # a marker of no rows fixes the start: the table as it is now
    assert snap.finalize() and ids_of(snap) == []
    follow = connector(lake, tmp_path / "follow", mode="follow")
    follow.drain()
    first = lake.append(range(0, 10))
    follow.drain()
    assert ids_of(follow) == list(range(10))

    assert snap.list_work() == [] and snap.finalize()  # still the empty table
    snap.close()
    current = connector(lake, tmp_path / "current")  # snapshot mode at `first`
    current.drain()
    second = lake.append(range(10, 20))
    lake.append(range(20, 30))
    lake.table.maintenance.expire_snapshots().by_ids([first, second]).commit()
    assert current.finalize() and ids_of(current) == list(range(10))
    current.close()

    error = _drain_to_error(follow)
    assert "sequence number 3" in error and "expired" in error and "\n" not in error
    follow.close()


# --- errors ----------------------------------------------------------------------------------


def test_bad_table_names_fail_in_one_line(lake: Lake, tmp_path: Path) -> None:
    """A name without a namespace fails validation at its path; a table that is not in
    the catalog fails discovery in one line naming it; the catalog URL's password is
    never shown."""
    errors = validate_pipeline(source(lake, range(0), table_name="events").pipeline_doc())
    assert [e.path for e in errors] == ["tables.t.connectors[0].transport.config.table_name"]
    lake.append(range(0, 5))
    c = connector(lake, tmp_path / "missing", table_name="ns.nope")
    with pytest.raises(OSError) as raised:
        c.list_work()
    text = str(raised.value)
    assert "ns.nope" in text and "\n" not in text and "catalog" in text
    c.close()
    t = connector(
        lake, tmp_path / "pw", catalog_uri="postgresql+psycopg://u:s3cr3tpw@127.0.0.1:1/x"
    )
    with pytest.raises(OSError) as raised:
        t.transport().discover(Cursor(), Limits()).__next__()
    text = str(raised.value)
    assert "s3cr3tpw" not in text and "\n" not in text and "ns.events" in text
    t.close()


# --- PostgreSQL catalog, data on the S3-compatible server ---------------------------------------


def test_postgres_catalog_and_s3_warehouse(
    pg_schema_factory: Any,
    s3_server: Any,
    s3_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The catalog in PostgreSQL (a schema of its own), data and metadata on S3: snapshot
    and follow read through the same catalog, S3 settings from the AWS environment."""
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    uri = pg_schema_factory()
    lk = Lake(uri, f"s3://{s3_bucket}/wh", name=f"ns_{uuid.uuid4().hex[:6]}.events")
    try:
        start = lk.append(range(0, 100))
        lk.append(range(100, 150))
        snap = connector(lk, tmp_path / "snap")
        assert all(i.meta["file"].startswith("s3://") for i in snap.list_work())
        snap.drain()
        assert ids_of(snap) == list(range(150)) and snap.finalize()
        snap.close()
        follow = connector(lk, tmp_path / "follow", mode="follow", snapshot_id=start)
        follow.drain()
        lk.append(range(150, 160))
        follow.drain()
        assert ids_of(follow) == list(range(100, 160))
        follow.close()
    finally:
        lk.close()
