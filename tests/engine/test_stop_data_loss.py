"""Issue 22, item 10: the data-loss paths around a stop, on real components (the state
store on SQLite and PostgreSQL, real Spark, the Parquet and Delta sinks on a local
folder), lined up with the project's fail points and threads.

1. **Gap on stop.** One discovery may plan several ranges of one key into batches
   (``datagen`` plans row ranges of a plan; ``tasks_max`` > 1 and ``max_batch_size``
   split them), which run side by side. When the later range commits first and a stop
   then releases the earlier one, the next discovery must plan exactly the unread
   range: not resume after the later range (rows lost), not from the start (rows read
   twice).
2. **A stop racing a commit of the same batch.** A stop drops the staged output of the
   connector's planned batches and releases them; a job that staged a batch commits it
   in the state store, then publishes its staged output. The state store decides which
   of the two happened: a batch that committed is published, never discarded; a
   released batch's late commit is refused and its staged output removed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import pipeline

from airflow_connectors.engine import control
from airflow_connectors.engine.batch import BatchResult, run_batch
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.engine.discovery import discover
from airflow_connectors.state.store import BatchStatus, ConnectorRef, StateStore

REF = ConnectorRef("p", "t", "c")


def datagen_context(
    wh: Path, rows: int, *, chunk: int, tasks_max: int = 1, sink: str = "parquet"
) -> BatchContext:
    spec = pipeline(
        {
            "t": {
                "columns": {"id": "BIGINT NOT NULL"},
                "sink": {"name": sink, "config": {}},
                "connectors": [
                    {
                        "name": "c",
                        "tasks_max": tasks_max,
                        "max_batch_size": chunk,
                        "transport": {
                            "name": "datagen",
                            "config": {"plan": [{"limit": rows, "worker_chunk_size": chunk}]},
                        },
                    }
                ],
            }
        }
    )
    table, connector = next(iter(spec.connectors()))
    return BatchContext("p", table, connector, str(wh))


def ranges(store: StateStore, batch_id: int) -> list[tuple[str, int, int | None]]:
    return [(i.key, i.start, i.end) for i in store.load_batch(batch_id).plan.items]


def drain(store: StateStore, ctx: BatchContext, spark: Any, rounds: int = 10) -> list[list[Any]]:
    """Discover and run batches until nothing is left; returns each round's plans."""
    planned = []
    for _ in range(rounds):
        ids = discover(store, ctx).batch_ids
        if not ids:
            return planned
        planned.append([ranges(store, b) for b in ids])
        for b in ids:
            run_batch(store, b, lambda: spark)
    raise AssertionError(f"still planning after {rounds} rounds: {planned}")


def table_ids(ctx: BatchContext) -> list[int]:
    rows = ctx.sink().read("rows")
    return [] if rows is None else sorted(rows.column("id").to_pylist())


def leftovers(ctx: BatchContext) -> list[str]:
    """Staged files no reader sees and nothing will publish: Parquet's staging folder,
    or Parquet files in the Delta table's folder that its log does not list."""
    wh = Path(ctx.warehouse)
    if ctx.table.sink.name == "parquet":
        return sorted(str(p) for p in wh.rglob("*") if p.is_file() and "_staging" in p.parts)
    from deltalake import DeltaTable

    found = []
    for kind in ("rows", "errors"):
        root = Path(ctx.sink().location(kind))
        if not root.is_dir():
            continue
        listed: set[str] = set()
        if (root / "_delta_log").is_dir():
            actions = DeltaTable(str(root)).get_add_actions().column("path").to_pylist()
            listed = {str(p) for p in actions}
        for p in root.rglob("*.parquet"):
            rel = str(p.relative_to(root))
            if rel.startswith("batch-") and rel not in listed:
                found.append(str(p))
    return sorted(found)


# --- 1. gap on stop ---------------------------------------------------------------------


def test_stop_after_a_later_range_committed_replans_exactly_the_unread_range(
    spark: Any, store_url: str, tmp_path: Path
) -> None:
    """Batch A = rows [0,100) and B = [100,200) of one key; B commits, a stop releases A.
    After resume the next discovery plans [0,100) and nothing else; every row lands once."""
    store = StateStore(store_url)
    ctx = datagen_context(tmp_path / "wh", 200, chunk=100, tasks_max=2)
    a, b = discover(store, ctx).batch_ids
    assert ranges(store, a) == [("plan-0000", 0, 100)]
    assert ranges(store, b) == [("plan-0000", 100, 200)]

    assert run_batch(store, b, lambda: spark).committed
    ctl = control.ConnectorControl(store)
    assert ctl.stop(REF) == [a]
    ctl.resume(REF)

    planned = drain(store, ctx, spark)
    assert table_ids(ctx) == list(range(200)), f"after the stop, discovery planned {planned}"
    assert planned == [[[("plan-0000", 0, 100)]]], "the next discovery re-plans only A's range"
    [offset] = store.offsets(REF)
    assert (offset["key"], offset["offset"], offset["records"]) == ("plan-0000", 200, 200)
    st = store.status(REF)
    assert st is not None and st.total_records == 200 and st.end_of_input
    store.close()


def test_ranges_of_one_key_committed_out_of_order_land_once(
    spark: Any, store_url: str, tmp_path: Path
) -> None:
    """Without a stop: B commits before A, then A; the key's offset ends past B, and a
    next discovery plans nothing."""
    store = StateStore(store_url)
    ctx = datagen_context(tmp_path / "wh", 300, chunk=100, tasks_max=3)
    a, b, c = discover(store, ctx).batch_ids
    for batch in (c, a, b):
        assert run_batch(store, batch, lambda: spark).committed
    assert drain(store, ctx, spark) == []
    assert table_ids(ctx) == list(range(300))
    [offset] = store.offsets(REF)
    assert (offset["offset"], offset["records"]) == (300, 300)
    store.close()


def test_a_stop_releasing_the_middle_range_replans_only_it(
    spark: Any, store_url: str, tmp_path: Path
) -> None:
    """A and C commit around a planned B; a stop releases B: only B's range is planned
    again (the key's offset stays at A's end until B lands, then passes C)."""
    store = StateStore(store_url)
    ctx = datagen_context(tmp_path / "wh", 300, chunk=100, tasks_max=3)
    a, b, c = discover(store, ctx).batch_ids
    for batch in (c, a):
        assert run_batch(store, batch, lambda: spark).committed
    [prefix] = store.offsets(REF)
    ctl = control.ConnectorControl(store)
    assert ctl.stop(REF) == [b]
    ctl.resume(REF)
    planned = drain(store, ctx, spark)
    assert table_ids(ctx) == list(range(300)), f"after the stop, discovery planned {planned}"
    assert planned == [[[("plan-0000", 100, 200)]]]
    assert prefix["offset"] == 100  # the contiguous committed prefix was A only
    [offset] = store.offsets(REF)
    assert (offset["offset"], offset["records"]) == (300, 300)
    store.close()


def test_an_offsets_edit_after_the_stop_wins_over_ranges_committed_ahead(
    spark: Any, store_url: str, tmp_path: Path
) -> None:
    """A range committed ahead of a released one is forgotten with the key's offsets: a
    reset reads the key again from its start, as the user asked."""
    store = StateStore(store_url)
    ctx = datagen_context(tmp_path / "wh", 200, chunk=100, tasks_max=2)
    a, b = discover(store, ctx).batch_ids
    assert run_batch(store, b, lambda: spark).committed
    ctl = control.ConnectorControl(store)
    assert ctl.stop(REF) == [a]
    store.edit_offsets(REF, None)
    ctl.resume(REF)
    assert drain(store, ctx, spark) == [[[("plan-0000", 0, 100)], [("plan-0000", 100, 200)]]]
    assert table_ids(ctx) == sorted([*range(200), *range(100, 200)])  # B's rows again
    store.close()


# --- 2. a stop racing a commit of the same batch --------------------------------------------


@pytest.fixture
def failpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Pauses at fail points of this process (``name:pause``): returns a setter."""
    marks = tmp_path / "failpoints"
    marks.mkdir()
    monkeypatch.setenv("AIRFLOW_CONNECTORS_FAILPOINT_DIR", str(marks))

    def pause(*names: str) -> None:
        if names:
            monkeypatch.setenv(
                "AIRFLOW_CONNECTORS_FAILPOINTS", ",".join(f"{n}:pause" for n in names)
            )
        else:
            monkeypatch.delenv("AIRFLOW_CONNECTORS_FAILPOINTS", raising=False)

    pause.marks = marks  # type: ignore[attr-defined]
    yield pause
    for name in os.listdir(marks):  # let anything still paused go
        (marks / f"{name}.resume").touch()


def reached(marks: Path, name: str, *threads: threading.Thread, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not (marks / name).exists():
        if time.monotonic() > deadline:
            pytest.fail(f"fail point {name} not reached in {timeout} s")
        if threads and not any(t.is_alive() for t in threads):
            pytest.fail(f"fail point {name} not reached: the threads ended")
        time.sleep(0.02)


class Runner(threading.Thread):
    """Runs ``fn`` in a thread and keeps what it returned or raised."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as e:  # re-raised by the test
            self.error = e

    def outcome(self, timeout: float = 180) -> Any:
        self.join(timeout)
        assert not self.is_alive(), "still running"
        if self.error is not None:
            raise self.error
        return self.result


SINKS = ["parquet", "delta"]


@pytest.mark.parametrize("sink", SINKS)
def test_a_stop_between_discard_and_release_racing_the_commit_loses_nothing(
    spark: Any, store_url: str, tmp_path: Path, sink: str, failpoints: Any
) -> None:
    """The job stages its batch and waits before its commit; the stop drops the batch's
    staged output and waits before releasing it; the job then commits. The commit is
    refused (the stop came first), the stop releases the batch, and after resume every
    row lands once with nothing staged left behind."""
    rows = 50
    ctx = datagen_context(tmp_path / "wh", rows, chunk=rows, sink=sink)
    store = StateStore(store_url)
    [batch] = discover(store, ctx).batch_ids
    failpoints("after_sink_write", "before_release")
    marks = failpoints.marks

    job = Runner(lambda: run_batch(StateStore(store_url), batch, lambda: spark))
    job.start()
    reached(marks, "after_sink_write", job)  # staged, not committed
    stop = Runner(lambda: control.ConnectorControl(StateStore(store_url)).stop(REF))
    stop.start()
    reached(marks, "before_release", stop)  # the stop dropped the staged output
    (marks / "after_sink_write.resume").touch()  # the job commits now
    job.join(120)
    (marks / "before_release.resume").touch()
    result: BatchResult = job.outcome()
    released = stop.outcome()
    state = (result.committed, released, store.offsets(REF), leftovers(ctx))

    failpoints()
    control.ConnectorControl(store).resume(REF)
    drain(store, ctx, spark)
    assert table_ids(ctx) == list(range(rows)), f"rows lost; job, stop, offsets: {state[:3]}"
    # The stop came first: the commit was refused and the batch released, nothing staged.
    assert state == (False, [batch], [], [])
    assert leftovers(ctx) == []
    store.close()


@pytest.mark.parametrize("sink", SINKS)
def test_a_late_commit_of_a_released_batch_is_refused_and_its_staging_removed(
    spark: Any, store_url: str, tmp_path: Path, sink: str, failpoints: Any
) -> None:
    """The job stages its batch and waits before its commit; a whole stop happens (the
    batch is released). The job's commit is then refused without an error, its staged
    output removed; after resume every row lands once."""
    rows = 50
    ctx = datagen_context(tmp_path / "wh", rows, chunk=rows, sink=sink)
    store = StateStore(store_url)
    [batch] = discover(store, ctx).batch_ids
    failpoints("after_sink_write")
    marks = failpoints.marks

    job = Runner(lambda: run_batch(StateStore(store_url), batch, lambda: spark))
    job.start()
    reached(marks, "after_sink_write", job)
    assert control.ConnectorControl(store).stop(REF) == [batch]
    (marks / "after_sink_write.resume").touch()
    result: BatchResult = job.outcome()
    assert not result.committed
    assert leftovers(ctx) == [] and table_ids(ctx) == []

    failpoints()
    control.ConnectorControl(store).resume(REF)
    drain(store, ctx, spark)
    assert table_ids(ctx) == list(range(rows))
    assert leftovers(ctx) == []
    store.close()


@pytest.mark.parametrize("sink", SINKS)
def test_a_stop_after_the_commit_leaves_the_batch_to_publish(
    spark: Any, store_url: str, tmp_path: Path, sink: str, failpoints: Any
) -> None:
    """The job commits and waits before publishing; a stop then releases nothing and
    drops nothing of it; the job publishes every row."""
    rows = 50
    ctx = datagen_context(tmp_path / "wh", rows, chunk=rows, sink=sink)
    store = StateStore(store_url)
    [batch] = discover(store, ctx).batch_ids
    failpoints("after_commit")
    marks = failpoints.marks

    job = Runner(lambda: run_batch(StateStore(store_url), batch, lambda: spark))
    job.start()
    reached(marks, "after_commit", job)
    assert control.ConnectorControl(store).stop(REF) == []
    (marks / "after_commit.resume").touch()
    assert job.outcome().committed
    [b] = store.batches(REF)
    assert (b.status, b.published) == (BatchStatus.COMMITTED, True)
    assert table_ids(ctx) == list(range(rows))
    assert leftovers(ctx) == []
    store.close()


def test_a_late_commit_is_refused_when_the_released_batch_id_was_planned_again(
    spark: Any, store_url: str, tmp_path: Path, failpoints: Any
) -> None:
    """The job waits before its commit; a stop releases its batch, a resume and a new
    discovery plan the same rows again (on SQLite under the same batch id: the released
    row was the last). The late job's commit is refused: the new batch is not the one
    it read, and the stop removed its staged output; the new batch lands every row once."""
    rows = 50
    ctx = datagen_context(tmp_path / "wh", rows, chunk=rows)
    store = StateStore(store_url)
    [batch] = discover(store, ctx).batch_ids
    failpoints("after_sink_write")
    marks = failpoints.marks

    job = Runner(lambda: run_batch(StateStore(store_url), batch, lambda: spark))
    job.start()
    reached(marks, "after_sink_write", job)
    ctl = control.ConnectorControl(store)
    assert ctl.stop(REF) == [batch]
    ctl.resume(REF)
    [again] = discover(store, ctx).batch_ids
    assert ranges(store, again) == [("plan-0000", 0, rows)]
    (marks / "after_sink_write.resume").touch()
    late = job.outcome().committed

    failpoints()
    drain(store, ctx, spark)
    assert table_ids(ctx) == list(range(rows)), f"rows lost (the late job committed: {late})"
    assert not late
    assert leftovers(ctx) == []
    store.close()
