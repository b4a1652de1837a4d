"""``file_input`` never truncates a file silently: a file still being written waits for
``min_file_age``, bytes appended to a committed line file are read, a committed file that
changes otherwise is a counted transport error, and a path matching nothing is reported.
Real Spark, real stores, the embedded runner."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from helpers import pipeline, read_table, run, status


def rows(ids: range) -> str:
    return "".join(json.dumps({"id": i}) + "\n" for i in ids)


def spec(path: Path, fmt: dict[str, Any] | None = None, **transport: Any) -> Any:
    return pipeline(
        {
            "t": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(path), **transport},
                        },
                        "format": fmt or {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        }
    )


def ids(warehouse: str) -> list[int]:
    data = read_table(warehouse, "p", "t")
    return sorted(data.column("id").to_pylist()) if data.num_columns else []


def test_a_file_being_written_waits_for_min_file_age(
    spark: Any, store_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "drop"
    folder.mkdir()
    wh = str(tmp_path / "wh")
    pipe = spec(folder, min_file_age=2)
    growing = folder / "orders.json"
    growing.write_text(rows(range(50)))  # a writer has written half of the file
    first = run(pipe, store_url, wh, spark)
    assert first.batches == 0 and ids(wh) == []  # too young: not read half-way
    assert not status(store_url, "p", "t", "files").end_of_input
    with growing.open("a") as fh:  # less than min_file_age later, the writer finishes
        fh.write(rows(range(50, 100)))
    time.sleep(2.2)
    run(pipe, store_url, wh, spark)
    assert ids(wh) == list(range(100))
    st = status(store_url, "p", "t", "files")
    assert st.total_records == 100 and st.end_of_input and st.num_transport_errors == 0


def test_a_committed_file_that_grows_or_changes_is_never_ignored(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "drop"
    folder.mkdir()
    wh = str(tmp_path / "wh")
    lines = folder / "a.json"
    lines.write_text(rows(range(10)))
    table = folder / "b.parquet"
    pq.write_table(pa.table({"id": pa.array(range(100, 105), pa.int64())}), table)
    old = time.time() - 60
    for f in (lines, table):
        os.utime(f, (old, old))
    jsonl, parquet = spec(lines, min_file_age=0), spec(table, {"name": "parquet"}, min_file_age=0)
    run(jsonl, sqlite_url, wh, spark)
    assert ids(wh) == list(range(10))

    # Lines appended to a committed JSON-lines file are read as new work.
    with lines.open("a") as fh:
        fh.write(rows(range(10, 15)))
    run(jsonl, sqlite_url, wh, spark)
    assert ids(wh) == list(range(15))
    st = status(sqlite_url, "p", "t", "files")
    assert st.total_records == 15 and st.end_of_input and st.num_transport_errors == 0

    # A Parquet file cannot be read from a byte offset: rewritten after its commit, it is
    # a transport error naming the file, recorded once, not a silent skip.
    other = str(tmp_path / "other.db")
    wh2 = str(tmp_path / "wh2")
    run(parquet, f"sqlite:///{other}", wh2, spark)
    pq.write_table(pa.table({"id": pa.array(range(100, 110), pa.int64())}), table)
    os.utime(table, (old, old))
    run(parquet, f"sqlite:///{other}", wh2, spark)
    run(parquet, f"sqlite:///{other}", wh2, spark)
    assert ids(wh2) == list(range(100, 105))
    st = status(f"sqlite:///{other}", "p", "t", "files")
    assert st.num_transport_errors == 1
    message = st.transport_errors[-1]["message"]
    assert "b.parquet changed after it was committed" in message


def test_a_path_matching_nothing_is_reported(spark: Any, sqlite_url: str, tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    run(spec(tmp_path / "nowhere" / "*.json", min_file_age=0), sqlite_url, wh, spark)
    st = status(sqlite_url, "p", "t", "files")
    assert st.total_records == 0 and st.num_transport_errors == 1
    assert "matches no file" in st.transport_errors[-1]["message"]


def test_a_file_is_read_in_chunks_and_its_short_rest_in_one_piece(tmp_path: Path) -> None:
    # Issue 27: a file of one or two blocks reaches the format as one piece (the format
    # joined the pieces again, a copy of every byte); a longer one in chunks, its last
    # under-three-chunks rest at once; a range stops at its end; a file that grew past
    # the size it had when opened is read on to its end.
    from airflow_connectors.transports.file_input import _read_range

    path = tmp_path / "f"
    data = bytes(range(256)) * 40  # 10,240 bytes
    path.write_bytes(data)
    pieces = list(_read_range(str(path), 0, None, 1000))
    assert b"".join(pieces) == data
    assert [len(p) for p in pieces] == [1000] * 8 + [2240]
    assert [len(p) for p in _read_range(str(path), 0, None, 4000)] == [10240]
    assert b"".join(_read_range(str(path), 100, 5100, 1000)) == data[100:5100]
    assert [len(p) for p in _read_range(str(path), 100, 5100, 1000)] == [1000, 1000, 1000, 2000]
    grown = _read_range(str(path), 0, None, 4000)
    first = next(grown)
    with path.open("ab") as f:
        f.write(b"more")
    assert first + b"".join(grown) == data + b"more"
