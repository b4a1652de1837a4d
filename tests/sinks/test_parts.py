"""The Parquet part writer encodes and writes a table in the background while the task
decodes its next block (issue 27): the files hold every table in order, an error writing
a table is raised by the part's next call (never lost), and an abort waits for the write
in flight before it removes the part's files."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_connectors.sinks import parts
from airflow_connectors.sinks.parts import ParquetPart

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def table(start: int, n: int) -> pa.Table:
    return pa.table(
        {"id": pa.array(range(start, start + n), pa.int64()), "name": [f"n{i}" for i in range(n)]}
    )


def test_tables_land_in_order_across_rolled_files(tmp_path: Path) -> None:
    part = ParquetPart(str(tmp_path), lambda n: f"p-{n}.parquet", compression="snappy", target=1)
    for start in range(0, 5000, 1000):
        part.write(table(start, 1000))
    assert part.close() == 5000
    assert [Path(f).name for f in part.files] == [f"p-{n}.parquet" for n in range(5)]
    ids = [i for f in part.files for i in pq.read_table(f).column("id").to_pylist()]
    assert ids == list(range(5000))
    assert not list(tmp_path.glob(".*.tmp"))  # every file finished under its name


def test_a_failed_write_is_raised_by_the_next_call(tmp_path: Path) -> None:
    # A table that cannot take the part's schema: the error comes from the writer's
    # thread, and is raised (not lost) by the next write or by close.
    part = ParquetPart(str(tmp_path), lambda n: "p.parquet", compression="snappy", schema=SCHEMA)
    part.write(table(0, 3))
    part.write(pa.table({"id": ["not a number"], "name": ["x"]}))
    with pytest.raises(pa.ArrowInvalid):
        part.write(table(3, 3))
    with pytest.raises(pa.ArrowInvalid):
        close_after_a_failed_write(tmp_path)


def close_after_a_failed_write(tmp_path: Path) -> None:
    part = ParquetPart(str(tmp_path / "b"), lambda n: "p.parquet", compression="snappy")
    part.schema = SCHEMA
    part.write(pa.table({"id": ["x"], "name": ["x"]}))
    part.close()


def test_abort_waits_for_the_write_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hold the write in the writer's thread until abort has been called: the abort
    # must not remove files before the write that creates them is over.
    started, release = threading.Event(), threading.Event()
    real = ParquetPart._write

    def held(self: ParquetPart, t: pa.Table) -> None:
        started.set()
        release.wait(10)
        real(self, t)

    monkeypatch.setattr(ParquetPart, "_write", held)
    part = ParquetPart(str(tmp_path), lambda n: "p.parquet", compression="snappy")
    part.write(table(0, 10))
    assert started.wait(10)
    aborting = threading.Thread(target=part.abort)
    aborting.start()
    aborting.join(0.2)
    assert aborting.is_alive()  # waiting for the write
    release.set()
    aborting.join(10)
    assert not aborting.is_alive()
    assert not [p for p in tmp_path.iterdir()]  # nothing left, not even a temporary


def test_a_forked_child_gets_its_own_writer_threads(tmp_path: Path) -> None:
    import os

    part = ParquetPart(str(tmp_path), lambda n: "p.parquet", compression="snappy")
    part.write(table(0, 10))
    part.close()
    pid = os.fork()
    if pid == 0:  # the child: the parent's threads are not here
        code = 1
        try:
            child = ParquetPart(str(tmp_path), lambda n: "c.parquet", compression="snappy")
            child.write(table(0, 10))
            mine = parts._WRITERS is not None and parts._WRITERS[0] == os.getpid()
            code = 0 if child.close() == 10 and mine else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert pq.read_table(tmp_path / "c.parquet").num_rows == 10


def test_repeating_columns_are_dictionary_encoded_and_distinct_ones_plain(
    tmp_path: Path,
) -> None:
    # Ids and amounts are mostly distinct: a dictionary costs a hash per value and
    # outweighs the data, so they are written plain; a column of a few names repeats.
    n = 20_000
    data = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "amount": pa.array([i * 0.37 for i in range(n)], pa.float64()),
            "name": [f"user-{i % 50}" for i in range(n)],
            "flag": [i % 3 == 0 for i in range(n)],
            "tags": [[i % 4] for i in range(n)],
        }
    )
    assert parts.dictionary_columns(data.drop_columns(["tags"])) == ["name", "flag"]
    assert parts.dictionary_columns(data) is None  # a nested column: Parquet's default
    assert parts.dictionary_columns(data.slice(0, 10)) is None  # too few rows to judge

    part = ParquetPart(str(tmp_path), lambda n: f"p-{n}.parquet", compression="snappy")
    flat = data.drop_columns(["tags"])
    part.write(flat)
    assert part.close() == n
    meta = pq.ParquetFile(part.files[0]).metadata.row_group(0)
    encodings = {meta.column(c).path_in_schema: meta.column(c).encodings for c in range(4)}
    assert "RLE_DICTIONARY" in encodings["name"]
    assert "RLE_DICTIONARY" not in encodings["id"]
    assert "RLE_DICTIONARY" not in encodings["amount"]
    assert pq.read_table(part.files[0]).equals(flat)  # every value, either way
