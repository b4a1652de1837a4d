"""Many small work items per Spark task (issue 12, "Many small files and objects").

A batch's work items are packed into Spark tasks by size, as Spark's file sources pack
files (``max_partition_bytes``, ``open_cost_bytes``), and each task writes its items'
rows into one rolling part per kind (a new part at the sink's ``target_file_size``).
Receipts, offsets, record numbers, dead letters and the skipping of an unreadable object
stay per item and exact: a skipped object leaves none of its rows in the shared part.

Real local Spark for the end-to-end cases; a few cases run the engine's own task body
in this process (a stand-in for Spark's scheduler, as the conformance kit does) where
they change a module constant the Spark workers would not see."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import pipeline, read_table, run, status

from airflow_connectors.engine import reader
from airflow_connectors.engine.batch import BatchFailed, item_bytes, pack, run_batch
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.engine.discovery import context, discover
from airflow_connectors.engine.runner import RunFailed
from airflow_connectors.spec.models import ConnectorSpec
from airflow_connectors.state.store import StateStore
from airflow_connectors.testing.conformance import _InProcessTasks
from airflow_connectors.transports import WorkItem

MIB = 1 << 20
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR"}


# --- packing, the rule alone ---------------------------------------------------------


def sized(*sizes: int | None) -> list[WorkItem]:
    return [
        WorkItem(key=f"k{n:04d}", end=s, size=s) if s is not None else WorkItem(key=f"k{n:04d}")
        for n, s in enumerate(sizes)
    ]


def test_the_defaults() -> None:
    # Spark's task size; an open cost of 128 KiB, not Spark's 4 MiB (a file costs the
    # engine's Python reader less to open than Spark's JVM reader).
    c = ConnectorSpec.model_validate({"name": "c", "transport": {"name": "file_input"}})
    assert (c.max_partition_bytes, c.open_cost_bytes) == (128 * MIB, 128 << 10)


def test_small_items_share_tasks_in_key_order() -> None:
    # 5,000 files of 280 bytes: each weighs 4 MiB of open cost, 32 to a 128 MiB task;
    # the 157 tasks Spark's file source makes of the same folder.
    groups = pack(sized(*[280] * 5000), 128 * MIB, 4 * MIB, parallelism=2)
    assert len(groups) == 157
    assert [n for g in groups for n in g] == list(range(5000))  # key order, each once
    assert max(len(g) for g in groups) == 32


def test_large_inputs_spread_over_the_cores_and_big_items_go_alone() -> None:
    # 8 items of 10 MiB on 4 cores: 120 MiB per core at most, so no task of all of them.
    assert len(pack(sized(*[10 * MIB] * 8), 128 * MIB, 4 * MIB, parallelism=4)) >= 4
    # An item larger than a task's bytes gets a task of its own; its neighbours share.
    groups = pack(sized(100, 300 * MIB, 100, 100), 128 * MIB, 4 * MIB, parallelism=1)
    assert groups == [[0], [1], [2, 3]]


def test_items_of_unknown_size_weigh_the_open_cost() -> None:
    # Generated ranges have no byte size: 4 MiB of open cost each. As in Spark, a task
    # takes the next item while its weight plus the item's bytes (0) fits: 33 of them.
    assert [len(g) for g in pack(sized(*[None] * 40), 128 * MIB, 4 * MIB)] == [33, 7]
    # A resumed item weighs what is left of it.
    assert item_bytes(WorkItem(key="a", start=60, end=100, size=100)) == 40
    assert item_bytes(WorkItem(key="a", start=60, size=100)) == 40
    assert item_bytes(WorkItem(key="a", start=60, end=100)) == 0


def test_one_byte_tasks_make_one_task_per_item() -> None:
    assert pack(sized(10, 20, None), 1, 4 * MIB) == [[0], [1], [2]]


# --- sources ------------------------------------------------------------------------


def write_json_files(folder: Path, files: int, rows: int) -> pa.Table:
    """``files`` JSON-lines files of ``rows`` rows each; returns every row."""
    folder.mkdir(parents=True, exist_ok=True)
    ids: list[int] = []
    for f in range(files):
        lines = []
        for i in range(f * rows, (f + 1) * rows):
            ids.append(i)
            lines.append(json.dumps({"id": i, "name": f"n{i}"}))
        (folder / f"f{f:05d}.json").write_text("\n".join(lines) + "\n")
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]})


def parquet_bytes(ids: range) -> bytes:
    """A Parquet file of ``ids`` in row groups of 5 rows."""
    buf = io.BytesIO()
    table = pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]})
    pq.write_table(table, buf, row_group_size=5)
    return buf.getvalue()


def corrupt_after_first_group(ids: range) -> bytes:
    """A Parquet file whose first row group reads and whose second does not: the format
    yields rows of it before the object fails as unreadable."""
    data = bytearray(parquet_bytes(ids))
    meta = pq.ParquetFile(pa.BufferReader(bytes(data))).metadata
    group = meta.row_group(1)
    for c in range(group.num_columns):
        col = group.column(c)
        start = col.dictionary_page_offset or col.data_page_offset
        data[start : start + col.total_compressed_size] = b"\xff" * col.total_compressed_size
    return bytes(data)


def parquet_folder(folder: Path, files: int, bad: int | None) -> tuple[list[int], Path | None]:
    """``files`` Parquet files of 10 rows (2 row groups); file ``bad`` reads its first row
    group and then fails. Returns the ids that can land, and the bad file."""
    folder.mkdir(parents=True, exist_ok=True)
    good: list[int] = []
    bad_path = None
    for f in range(files):
        ids = range(f * 10, f * 10 + 10)
        path = folder / f"f{f:05d}.parquet"
        if f == bad:
            path.write_bytes(corrupt_after_first_group(ids))
            bad_path = path
        else:
            path.write_bytes(parquet_bytes(ids))
            good.extend(ids)
    return good, bad_path


def connector(path: Path, fmt: str, tolerance: str = "none", **more: Any) -> dict[str, Any]:
    fmt_spec: dict[str, Any] = (
        {"name": "json", "config": {"update_format": "raw"}} if fmt == "json" else {"name": fmt}
    )
    return {
        "name": "c",
        "transport": {"name": "file_input", "config": {"path": str(path), "min_file_age": 0}},
        "format": fmt_spec,
        "errors": {"tolerance": tolerance},
        **more,
    }


def tasks_of(folder: Path, spec: Any, spark: Any) -> int:
    """How many Spark tasks the engine packs the files of ``folder`` into."""
    files = sorted(folder.iterdir())
    items = [WorkItem(key=str(f), end=f.stat().st_size, size=f.stat().st_size) for f in files]
    c = spec.tables[0].connectors[0]
    parallelism = spark.sparkContext.defaultParallelism
    return len(pack(items, c.max_partition_bytes, c.open_cost_bytes, parallelism))


def table_files(wh: str, table: str = "t") -> list[Path]:
    folder = Path(wh) / "p" / table
    return sorted(folder.glob("*.parquet")) if folder.is_dir() else []


def staged(wh: str) -> list[Path]:
    return [p for p in (Path(wh) / "p" / "_staging").rglob("*") if p.is_file()]


# --- the engine on real Spark -------------------------------------------------------


def test_many_small_files_land_once_in_few_tasks_and_few_files(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    src = tmp_path / "in"
    rows = write_json_files(src, 2000, 5)
    wh = str(tmp_path / "wh")
    spec = pipeline({"t": {"columns": COLUMNS, "connectors": [connector(src, "json")]}})
    report = run(spec, sqlite_url, wh, spark)
    assert report.batches == 1

    data = read_table(wh, "p", "t").sort_by("id")
    # every row once, exactly as written
    assert data.select(["id", "name"]).to_pydict() == rows.to_pydict()

    tasks = tasks_of(src, spec, spark)
    files = sorted(src.iterdir())
    batch_bytes = sum(f.stat().st_size for f in files)
    assert 2 <= tasks <= 2000 // 30  # many small files to a task, in more than one task
    # The tasks' small parts were combined before the commit: one table file, as the
    # bound 1 + batch bytes / target_file_size says.
    assert len(table_files(wh)) == 1 + batch_bytes // (128 * MIB)
    assert staged(wh) == []

    st = status(sqlite_url, "p", "t", "c")
    assert (st.total_records, st.num_parse_errors, st.total_bytes) == (10_000, 0, batch_bytes)
    # Every file's offset was committed at its end: the next run finds nothing to read.
    again = run(spec, sqlite_url, wh, spark)
    assert again.batches == 0
    assert read_table(wh, "p", "t").num_rows == 10_000


def test_parts_roll_at_the_target_file_size(spark: Any, sqlite_url: str, tmp_path: Path) -> None:
    src = tmp_path / "in"
    rows = write_json_files(src, 40, 500)
    wh = str(tmp_path / "wh")
    target = 64 << 10
    spec = pipeline(
        {
            "t": {
                "columns": COLUMNS,
                "sink": {"name": "parquet", "config": {"target_file_size": target}},
                "connectors": [connector(src, "json")],
            }
        }
    )
    run(spec, sqlite_url, wh, spark)
    assert (
        read_table(wh, "p", "t").sort_by("id").select(["id", "name"]).to_pydict()
        == rows.to_pydict()
    )
    # 20,000 rows of ~ 20 Arrow bytes each in one or two tasks: several parts, each
    # started once the previous one held about 64 KiB.
    parts = table_files(wh)
    arrow_bytes = rows.nbytes
    assert arrow_bytes // target - 1 <= len(parts) <= arrow_bytes // target + 3
    assert len({p.name for p in parts}) == len(parts)


def data_files(location: str) -> list[Path]:
    """The Parquet data files under a table's folder (not a Delta log checkpoint)."""
    return [p for p in Path(location).rglob("*.parquet") if "_delta_log" not in p.parts]


@pytest.mark.parametrize("sink", ["parquet", "delta", "iceberg"])
def test_small_parts_of_many_tasks_become_one_file_per_kind(
    spark: Any, sqlite_url: str, tmp_path: Path, sink: str
) -> None:
    """12 small files, one Spark task each, three with a bad record: twelve small row
    parts and three small dead-letter parts are staged, and each kind is combined into
    one file before the commit; every row and dead letter lands once."""
    from airflow_connectors.catalog import sink_of

    src = tmp_path / "in"
    rows = write_json_files(src, 12, 50)
    for f in (0, 5, 11):
        with (src / f"f{f:05d}.json").open("a") as fh:
            fh.write('{"id": "not a number", "name": "bad"}\n')
    wh = str(tmp_path / "wh")
    spec = pipeline(
        {
            "t": {
                "columns": COLUMNS,
                "sink": {"name": sink},
                "connectors": [connector(src, "json", "all", max_partition_bytes=1)],
            }
        }
    )
    assert tasks_of(src, spec, spark) == 12
    run(spec, sqlite_url, wh, spark)

    table = sink_of(spec.tables[0], pipeline="p", warehouse=wh)
    table.state_store_url = sqlite_url
    data = table.read("rows")
    assert data is not None
    assert data.select(["id", "name"]).sort_by("id").to_pydict() == rows.to_pydict()
    dead = table.read("errors")
    assert dead is not None and dead.num_rows == 3
    for kind in ("rows", "errors"):
        assert len(data_files(table.location(kind))) == 1, kind
    st = status(sqlite_url, "p", "t", "c")
    assert (st.total_records, st.num_parse_errors) == (600, 3)
    assert run(spec, sqlite_url, wh, spark).batches == 0


@pytest.fixture(scope="module")
def corrupt_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int], Path]:
    """300 small Parquet files; the 123rd fails after its first row group decoded."""
    folder = tmp_path_factory.mktemp("corrupt")
    good, bad = parquet_folder(folder, 300, bad=123)
    assert bad is not None
    return folder, good, bad


def test_tolerance_all_skips_an_unreadable_file_without_any_of_its_rows(
    spark: Any, sqlite_url: str, tmp_path: Path, corrupt_source: tuple[Path, list[int], Path]
) -> None:
    folder, good, bad = corrupt_source
    wh = str(tmp_path / "wh")
    spec = pipeline(
        {"t": {"columns": COLUMNS, "connectors": [connector(folder, "parquet", "all")]}}
    )
    report = run(spec, sqlite_url, wh, spark)
    assert report.connectors["t.c"].skipped_objects == 1
    ids = read_table(wh, "p", "t").column("id").to_pylist()
    assert sorted(ids) == good  # the others land once; none of 1230..1234 (its first group)
    assert len(table_files(wh)) <= 10  # 32 files to a task, one part each
    st = status(sqlite_url, "p", "t", "c")
    assert (st.total_records, st.num_transport_errors) == (len(good), 1)
    [error] = st.transport_errors
    assert error["tag"] == str(bad)
    assert error["message"].startswith("connector p.t.c: skipped an unreadable object")
    assert "Couldn't deserialize thrift" in error["message"]
    assert staged(wh) == []
    assert run(spec, sqlite_url, wh, spark).batches == 0  # the skipped file is completed


def test_tolerance_none_fails_the_batch_naming_the_file(
    spark: Any, sqlite_url: str, tmp_path: Path, corrupt_source: tuple[Path, list[int], Path]
) -> None:
    folder, _good, bad = corrupt_source
    wh = str(tmp_path / "wh")
    spec = pipeline({"t": {"columns": COLUMNS, "connectors": [connector(folder, "parquet")]}})
    with pytest.raises(RunFailed) as exc:
        run(spec, sqlite_url, wh, spark)
    message = str(exc.value)
    assert message.startswith(f"connector p.t.c: cannot decode {bad} as parquet: ")
    assert "errors.tolerance: all" in message and "\n" not in message
    assert "more object(s)" not in message  # only that file failed
    assert read_table(wh, "p", "t").num_rows == 0
    assert staged(wh) == []
    st = status(sqlite_url, "p", "t", "c")
    assert (st.state, st.total_records) == ("FAILED", 0)


def test_dead_letters_of_packed_files_keep_their_record_numbers(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    """60 small JSON files in one task; file f has a bad record at line f % 5 + 1 (and
    a blank line before it in every third file, so lines and records differ)."""
    src = tmp_path / "in"
    src.mkdir()
    want_rows: list[int] = []
    want_dead: list[tuple[str, int, int]] = []
    for f in range(60):
        lines: list[str] = []
        if f % 3 == 0:
            lines.append("")
        bad_at = f % 5
        for i in range(5):
            record = i + 1
            if i == bad_at:
                lines.append('{"id": "not a number", "name": "bad"}')
                want_dead.append((str(src / f"f{f:03d}.json"), record, len(lines)))
            else:
                lines.append(json.dumps({"id": f * 10 + i, "name": f"n{f}"}))
                want_rows.append(f * 10 + i)
        (src / f"f{f:03d}.json").write_text("\n".join(lines) + "\n")
    wh = str(tmp_path / "wh")
    spec = pipeline({"t": {"columns": COLUMNS, "connectors": [connector(src, "json", "all")]}})
    run(spec, sqlite_url, wh, spark)
    assert sorted(read_table(wh, "p", "t").column("id").to_pylist()) == want_rows
    dead = read_table(wh, "p", "t__errors").to_pylist()
    got = sorted((d["source_key"], d["record_number"], d["line_number"]) for d in dead)
    assert got == sorted(want_dead)
    # One dead-letter part per task (two or three tasks over the two cores).
    assert len(table_files(wh, "t__errors")) <= tasks_of(src, spec, spark) <= 3
    st = status(sqlite_url, "p", "t", "c")
    assert (st.total_records, st.num_parse_errors) == (len(want_rows), 60)


# --- the task body in this process --------------------------------------------------


class _Tasks(_InProcessTasks):
    """Runs the engine's Spark job in this process: each row of ``range`` is one task,
    run by the engine's own task body (the conformance kit's stand-in), on a session of
    parallelism 2."""

    defaultParallelism = 2

    @property
    def sparkContext(self) -> _Tasks:
        return self


def plan(tmp_path: Path, folder: Path, fmt: str, tolerance: str) -> tuple[StateStore, int, str]:
    spec = pipeline({"t": {"columns": COLUMNS, "connectors": [connector(folder, fmt, tolerance)]}})
    table = spec.tables[0]
    wh = str(tmp_path / "wh")
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    [batch_id] = discover(store, context(spec, table, table.connectors[0], wh)).batch_ids
    return store, batch_id, wh


def test_receipts_stay_per_item_in_a_shared_task(tmp_path: Path) -> None:
    """One task of 200 files answers one receipt per file: its offset at the file's end,
    its rows, its bytes; the rows sit in one part."""
    src = tmp_path / "in"
    write_json_files(src, 200, 3)
    store, batch_id, wh = plan(tmp_path, src, "json", "none")
    ctx = BatchContext.from_plan(store.load_batch(batch_id).plan)
    ctx.attempt = "1-test"
    ctx.sink().prepare(batch_id, ctx.attempt)
    header = json.dumps(dataclasses.replace(ctx.to_plan(), items=()).to_json())
    payload = json.dumps([[n, item.to_json()] for n, item in enumerate(ctx.items)])
    answers = [json.loads(a) for a in reader.ingest_partition(header, 1, 0, iter([payload]))]
    assert [a["part"] for a in answers] == list(range(200))
    for a, item in zip(answers, ctx.items, strict=True):
        size = Path(item.key).stat().st_size
        assert a["receipt"]["key"] == item.key
        assert (a["receipt"]["offset"], a["receipt"]["records"], a["receipt"]["bytes"]) == (
            size,
            3,
            size,
        )
        assert a["receipt"]["completed"] and a["errors"] == []
    rows_parts = list((Path(wh) / "p" / "_staging").rglob("rows/*.parquet"))
    assert len(rows_parts) == 1
    assert pq.read_table(rows_parts[0]).num_rows == 600
    store.close()


def test_a_big_item_skipped_after_spilling_leaves_no_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An item whose decoded rows outgrow the in-memory hold-back writes parts of its
    own; skipped as unreadable, those parts are dropped, the other items land."""
    monkeypatch.setattr(reader, "ITEM_BUFFER_BYTES", 0)  # every item spills at once
    folder = tmp_path / "in"
    good, _ = parquet_folder(folder, 20, bad=7)
    store, batch_id, wh = plan(tmp_path, folder, "parquet", "all")
    result = run_batch(store, batch_id, _Tasks)
    assert (result.records, result.skipped) == (len(good), 1)
    assert sorted(read_table(wh, "p", "t").column("id").to_pylist()) == good
    assert staged(wh) == []
    store.close()


def test_a_gzip_file_among_json_files(tmp_path: Path) -> None:
    """An object that fails before any row (gzip bytes where JSON text was expected)
    among small JSON files: tolerance none fails the batch naming it, nothing staged
    is left; the in-process run answers a failure for that file only."""
    src = tmp_path / "in"
    write_json_files(src, 30, 4)
    (src / "f00010.json").write_bytes(gzip.compress(b'{"id": 1, "name": "x"}\n'))
    store, batch_id, wh = plan(tmp_path, src, "json", "none")
    with pytest.raises(BatchFailed) as exc:
        run_batch(store, batch_id, _Tasks)
    assert str(exc.value).startswith(
        f"connector p.t.c: cannot decode {src / 'f00010.json'} as json: "
    )
    assert "more object(s)" not in str(exc.value)
    assert staged(wh) == [] and table_files(wh) == []
    store.close()
