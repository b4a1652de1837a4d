"""Exactly-once under crashes: the ingest job runs as its own process (what spark-submit
runs), a test SIGKILLs its whole process group (driver, JVM and Python workers) at a
fail point or at a random moment while the executors write, then re-runs the batches.
The table must equal the source: same count, same checksum, no duplicates, no loss."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers import checksum, pipeline, read_table

from airflow_connectors.engine.batch import run_batch
from airflow_connectors.engine.discovery import context, discover
from airflow_connectors.state.store import ConnectorRef, StateStore
from airflow_connectors.testing.jobs import finish, kill, start_job, wait_for

FILES = 8
#: Rows per file: small where a fail point decides the moment, large enough for the
#: random kill to land while the executors write.
SMALL = 5_000
LARGE = 60_000


def make_source(folder: Path, rows_per_file: int) -> pa.Table:
    """JSON-lines files; returns the rows they hold, as the table should hold them."""
    folder.mkdir()
    ids: list[int] = []
    names: list[str] = []
    amounts: list[float] = []
    for f in range(FILES):
        lines = []
        for i in range(f * rows_per_file, (f + 1) * rows_per_file):
            ids.append(i)
            names.append(f"name-{i}-{'x' * (i % 17)}")
            amounts.append(i / 8)
            lines.append(json.dumps({"id": i, "name": names[-1], "amount": amounts[-1]}))
        (folder / f"part-{f:03d}.json").write_text("\n".join(lines) + "\n")
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array(names, pa.string()),
            "amount": pa.array(amounts, pa.float64()),
        }
    )


def plan_batches(store_url: str, source: Path, warehouse: str) -> tuple[Any, list[int]]:
    spec = pipeline(
        {
            "events": {
                "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"},
                "connectors": [
                    {
                        "name": "files",
                        "tasks_max": 2,
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(source), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        }
    )
    table = spec.tables[0]
    ctx = context(spec, table, table.connectors[0], warehouse)
    store = StateStore(store_url)
    try:
        found = discover(store, ctx)
    finally:
        store.close()
    assert len(found.batch_ids) == 2 and found.new_items == FILES
    return ctx, found.batch_ids


def batch_states(store_url: str, ref: ConnectorRef) -> dict[str, int]:
    store = StateStore(store_url)
    try:
        st = store.status(ref)
        assert st is not None
        return {"records": st.total_records, "pending": len(store.pending_batches(ref))}
    finally:
        store.close()


def assert_table_equals_source(warehouse: str, source: pa.Table) -> None:
    data = read_table(warehouse, "p", "events").select(["id", "name", "amount"])
    assert data.num_rows == source.num_rows
    assert len(set(data.column("id").to_pylist())) == source.num_rows  # no duplicates
    assert checksum(data, "id") == checksum(source, "id")


def visible_files(warehouse: str) -> list[str]:
    table = Path(warehouse) / "p" / "events"
    if not table.is_dir():
        return []
    return sorted(p.name for p in table.iterdir() if not p.name.startswith((".", "_")))


# Every job started here costs a JVM start, so not every case runs on both stores.
@pytest.mark.parametrize(
    ("store_url", "point"),
    [
        # Between the sink write and the commit, on both stores.
        ("sqlite", "after_sink_write"),
        ("postgres", "after_sink_write"),
        # Between the commit and the publish.
        ("sqlite", "after_commit"),
    ],
    indirect=["store_url"],
)
def test_kill_at_fail_point_then_rerun(store_url: str, tmp_path: Path, point: str) -> None:
    source = make_source(tmp_path / "src", SMALL)
    warehouse = str(tmp_path / "wh")
    ctx, batch_ids = plan_batches(store_url, tmp_path / "src", warehouse)
    marks = tmp_path / "marks"
    marks.mkdir()

    proc = start_job(batch_ids, store_url, marks, hang_at=point)
    wait_for(marks / point, proc)
    kill(proc)

    state = batch_states(store_url, ctx.ref)
    if point == "after_sink_write":
        # Written but not committed: nothing visible, offsets untouched, both batches pending.
        assert visible_files(warehouse) == []
        assert state == {"records": 0, "pending": 2}
    else:
        # The first batch committed but the kill came before its publish.
        assert visible_files(warehouse) == []
        assert state == {"records": 4 * SMALL, "pending": 1}

    finish(batch_ids, store_url, marks)
    assert_table_equals_source(warehouse, source)
    assert batch_states(store_url, ctx.ref) == {"records": source.num_rows, "pending": 0}

    # A committed batch re-run is a no-op: it does not even ask for Spark.
    before = visible_files(warehouse)
    store = StateStore(store_url)
    try:
        for b in batch_ids:
            assert not run_batch(store, b, no_spark).committed
    finally:
        store.close()
    assert visible_files(warehouse) == before
    assert_table_equals_source(warehouse, source)


def no_spark() -> Any:
    raise AssertionError("a committed batch asked for Spark")


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_kill_at_random_moment_during_write(store_url: str, tmp_path: Path) -> None:
    source = make_source(tmp_path / "src", LARGE)
    warehouse = str(tmp_path / "wh")
    ctx, batch_ids = plan_batches(store_url, tmp_path / "src", warehouse)
    marks = tmp_path / "marks"
    marks.mkdir()

    seed = int(os.environ.get("AIRFLOW_CONNECTORS_TEST_SEED", time.time_ns() % 10_000))
    delay = random.Random(seed).uniform(0.0, 1.5)
    proc = start_job(batch_ids, store_url, marks)
    wait_for(marks / "sink_write_started", proc)
    time.sleep(delay)
    alive = proc.poll() is None
    kill(proc)
    assert alive, f"the job finished before the kill (seed {seed}, delay {delay:.2f} s)"
    # Whatever the moment, only whole committed batches are visible; the one exception
    # is a kill inside the publish renames of a committed batch, which the next run of
    # the batch (or the connector's next discovery) rolls forward.
    files = visible_files(warehouse)
    visible = read_table(warehouse, "p", "events").num_rows if files else 0
    store = StateStore(store_url)
    try:
        publishing = bool(store.unpublished_batches(ctx.ref))
    finally:
        store.close()
    assert publishing or visible in (0, 4 * LARGE), f"seed {seed}: {visible} rows"

    finish(batch_ids, store_url, marks)
    assert_table_equals_source(warehouse, source)
    assert not any(p.name.endswith(".tmp") for p in (Path(warehouse) / "p").rglob("*"))
