"""Exactly-once under crashes: the ingest job runs as its own process (what spark-submit
runs), a test SIGKILLs its whole process group (driver, JVM and Python workers) at each
fail point or at a random moment, or starts two attempts of one batch at once, then runs
the connector again. The table must equal the source: same count, same checksum, no
duplicates, no loss; nothing staged is left behind.

The matrix: every fail point on the PostgreSQL state store (on SQLite it is the sink
kit's, tests/sinks/test_parquet.py), random kills on both stores with a printed seed (replay with ``AIRFLOW_CONNECTORS_TEST_SEED=<seed>``), and two job
processes racing for one batch. Every case is one small batch read from one source; the
kill cases of a store start their jobs together (a JVM start is what costs), and the
next run happens in this process on the session's Spark, as a retry would run it.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers import checksum, pipeline, read_table

from airflow_connectors.engine.batch import run_batch
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.engine.discovery import context, discover
from airflow_connectors.state.store import StateStore
from airflow_connectors.testing.jobs import kill, start_job, wait_for

FILES = 4  # one batch of four work items: four parts to publish
ROWS = 2_000  # per file
#: In the order a batch passes them; mid_publish is in the Parquet sink.
POINTS = [
    "before_sink_write",
    "sink_write_started",
    "after_sink_write",
    "mid_combine",
    "after_commit",
    "mid_publish",
]
RANDOM_KILLS = 3  # per store
#: A random kill lands this long (at most) after the job reached sink_write_started:
#: about the time a small batch takes from there to its published end.
RANDOM_WINDOW = 1.5
SPARK = "local[1]"


@dataclass
class Source:
    folder: Path
    rows: pa.Table


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    """JSON-lines files, read by every case (each case has its own state and table)."""
    folder = tmp_path_factory.mktemp("source")
    ids: list[int] = []
    names: list[str] = []
    amounts: list[float] = []
    for f in range(FILES):
        lines = []
        for i in range(f * ROWS, (f + 1) * ROWS):
            ids.append(i)
            names.append(f"name-{i}-{'x' * (i % 17)}")
            amounts.append(i / 8)
            lines.append(json.dumps({"id": i, "name": names[-1], "amount": amounts[-1]}))
        (folder / f"part-{f:03d}.json").write_text("\n".join(lines) + "\n")
    rows = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array(names, pa.string()),
            "amount": pa.array(amounts, pa.float64()),
        }
    )
    return Source(folder, rows)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def new_store(request: pytest.FixtureRequest) -> Callable[[Path], str]:
    """A fresh state store of the module's kind for each case."""
    if request.param == "sqlite":
        return lambda folder: f"sqlite:///{folder / 'state.db'}"
    make = request.getfixturevalue("pg_schema_factory")
    return lambda _folder: str(make())


@dataclass
class Case:
    """One connector with one planned batch: its own state store, warehouse and marks."""

    root: Path
    store_url: str
    ctx: BatchContext
    batch_id: int
    out: str = ""  # the killed or finished job's output
    after: dict[str, Any] = field(default_factory=dict)  # the state the crash left

    @property
    def warehouse(self) -> str:
        return self.ctx.warehouse

    def marks(self, name: str = "marks") -> Path:
        folder = self.root / name
        folder.mkdir(exist_ok=True)
        return folder

    def store(self) -> StateStore:
        return StateStore(self.store_url)

    def snapshot(self) -> dict[str, Any]:
        """What a reader and the state store see now."""
        store = self.store()
        try:
            st = store.status(self.ctx.ref)
            assert st is not None
            return {
                "records": st.total_records,
                "pending": len(store.pending_batches(self.ctx.ref)),
                "unpublished": len(store.unpublished_batches(self.ctx.ref)),
                "visible": visible_parts(self.warehouse),
            }
        finally:
            store.close()


def plan_case(root: Path, store_url: str, source: Source, *, combine: bool = False) -> Case:
    """``combine``: the four parts are small for the sink, so they are combined into
    one file before the commit; else (a target size of 4 KiB: parts of 2,000 rows are
    not small for it) four parts are published."""
    root.mkdir(parents=True)
    spec = pipeline(
        {
            "events": {
                "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"},
                "sink": {
                    "name": "parquet",
                    "config": {} if combine else {"target_file_size": 4096},
                },
                "connectors": [
                    {
                        "name": "files",
                        "tasks_max": 1,
                        # One Spark task (so one part) per file: four parts to publish.
                        "max_partition_bytes": 1,
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(source.folder), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        }
    )
    table = spec.tables[0]
    ctx = context(spec, table, table.connectors[0], str(root / "wh"))
    store = StateStore(store_url)
    try:
        found = discover(store, ctx)
    finally:
        store.close()
    assert found.new_items == FILES and len(found.batch_ids) == 1
    return Case(root, store_url, ctx, found.batch_ids[0])


def visible_parts(warehouse: str) -> list[str]:
    table = Path(warehouse) / "p" / "events"
    if not table.is_dir():
        return []
    return sorted(p.name for p in table.iterdir() if not p.name.startswith((".", "_")))


def leftovers(warehouse: str) -> list[str]:
    """Staged or temporary files still on disk: none once every batch is published."""
    root = Path(warehouse)
    staged = [str(p) for p in (root / "p" / "_staging").rglob("*") if p.is_file()]
    return staged + [str(p) for p in root.rglob("*.tmp")]


def next_run(case: Case, spark: Any, *, retry_first: bool = False) -> None:
    """What the connector's next run does (in this process, on the session's Spark):
    discovery rolls forward a committed batch whose publish was cut, returns the
    pending batch, and the batch runs; the killed job's retry then finds its batch
    committed and does nothing, without asking for Spark. ``retry_first``: the killed
    job's retry comes before the next run, and rolls the publish forward itself."""
    store = case.store()
    try:
        if retry_first:
            assert not run_batch(store, case.batch_id, no_spark).committed
            assert store.unpublished_batches(case.ctx.ref) == []
        found = discover(store, case.ctx)
        assert found.new_items == 0, "the next run planned the source again"
        for b in found.batch_ids:
            assert run_batch(store, b, lambda: spark).committed
        assert not run_batch(store, case.batch_id, no_spark).committed
    finally:
        store.close()


def no_spark() -> Any:
    raise AssertionError("a committed batch asked for Spark")


def assert_exact(case: Case, source: Source) -> None:
    """The table is the source exactly once, the state store agrees, nothing is left."""
    data = read_table(case.warehouse, "p", "events").select(["id", "name", "amount"])
    assert data.num_rows == source.rows.num_rows
    assert len(set(data.column("id").to_pylist())) == source.rows.num_rows  # no duplicates
    assert checksum(data, "id") == checksum(source.rows, "id")
    final = case.snapshot()
    assert (final["records"], final["pending"], final["unpublished"]) == (
        source.rows.num_rows,
        0,
        0,
    )
    assert leftovers(case.warehouse) == []


def finish(proc: subprocess.Popen[bytes], timeout: float = 300) -> str:
    """Wait for a job that should succeed; its output."""
    out, _ = proc.communicate(timeout=timeout)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    return text


# --- every fail point, on the PostgreSQL store ----------------------------------------


@pytest.fixture(scope="module")
def killed(
    pg_schema_factory: Any, source: Source, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Case]:
    """One case per fail point, their jobs started together, each SIGKILLed at its
    point; the state each kill left is kept with the case. On the PostgreSQL store:
    the same kills on the SQLite store (and the same Parquet sink) are the sink kit's
    (tests/sinks/test_parquet.py), which kills at these points and more."""

    def new_store(_folder: Path) -> str:
        return str(pg_schema_factory())

    cases: dict[str, Case] = {}
    jobs: dict[str, subprocess.Popen[bytes]] = {}
    base = tmp_path_factory.mktemp("points")
    try:
        for point in POINTS:
            case = plan_case(
                base / point, new_store(base / point), source, combine=point == "mid_combine"
            )
            cases[point] = case
            jobs[point] = start_job(
                [case.batch_id], case.store_url, case.marks(), point, spark_master=SPARK
            )
        for point, proc in jobs.items():
            wait_for(cases[point].marks() / point, proc)
            kill(proc)
            cases[point].after = cases[point].snapshot()
    finally:
        for proc in jobs.values():
            if proc.poll() is None:
                kill(proc)
    return cases


#: What each kill leaves: offsets and metrics move only with the commit, and a reader
#: sees a batch only after its commit (all of it, once the publish is rolled forward).
LEFT = {
    "before_sink_write": {"records": 0, "pending": 1, "unpublished": 0, "visible": 0},
    "sink_write_started": {"records": 0, "pending": 1, "unpublished": 0, "visible": 0},
    "after_sink_write": {"records": 0, "pending": 1, "unpublished": 0, "visible": 0},
    # The four small parts written as one file, not all of them deleted yet.
    "mid_combine": {"records": 0, "pending": 1, "unpublished": 0, "visible": 0},
    "after_commit": {"records": FILES * ROWS, "pending": 0, "unpublished": 1, "visible": 0},
    # One part of four moved into the table, the kill before the second.
    "mid_publish": {"records": FILES * ROWS, "pending": 0, "unpublished": 1, "visible": 1},
}


@pytest.mark.parametrize("point", POINTS)
def test_kill_at_fail_point_then_next_run(
    killed: dict[str, Case], source: Source, spark: Any, point: str
) -> None:
    case = killed[point]
    left = {**case.after, "visible": len(case.after["visible"])}
    assert left == LEFT[point], f"killed at {point}"
    if point == "after_sink_write":  # the attempt's four parts were staged, not published
        assert len(leftovers(case.warehouse)) == FILES

    # A committed batch is published by whichever comes first: the killed task's retry
    # (after_commit here) or the connector's next discovery (mid_publish).
    next_run(case, spark, retry_first=point == "after_commit")
    assert_exact(case, source)
    if point == "mid_publish":  # the part published before the kill is the same file
        assert set(case.after["visible"]) <= set(visible_parts(case.warehouse))


# --- random kills -------------------------------------------------------------------


def test_random_kills(
    new_store: Callable[[Path], str], source: Source, spark: Any, tmp_path: Path
) -> None:
    """Several jobs, each SIGKILLed a random time after it started writing; the seed
    picks the times and is printed, so a failure replays with the same kills."""
    seed = int(os.environ.get("AIRFLOW_CONNECTORS_TEST_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    delays = [rng.uniform(0.0, RANDOM_WINDOW) for _ in range(RANDOM_KILLS)]
    print(f"random kills: AIRFLOW_CONNECTORS_TEST_SEED={seed} delays {delays}")
    cases = [
        plan_case(tmp_path / f"k{n}", new_store(tmp_path / f"k{n}"), source, combine=n % 2 == 0)
        for n in range(RANDOM_KILLS)
    ]
    jobs = [start_job([c.batch_id], c.store_url, c.marks(), spark_master=SPARK) for c in cases]
    try:
        # Each job's clock starts at its own mark; the jobs run meanwhile, so one loop
        # watches them all.
        due: dict[int, float] = {}
        deadline = time.monotonic() + 240
        while len(due) < len(jobs) or any(jobs[n].poll() is None for n in due):
            for n, (case, proc) in enumerate(zip(cases, jobs, strict=True)):
                mark = case.marks() / "sink_write_started"
                if n not in due and mark.exists():
                    due[n] = mark.stat().st_mtime + delays[n]
                elif n not in due and proc.poll() is not None:
                    pytest.fail(f"job {n} exited ({proc.returncode}) before writing")
                if n in due and proc.poll() is None and time.time() >= due[n]:
                    kill(proc)
            assert time.monotonic() < deadline, "the jobs did not reach sink_write_started"
            time.sleep(0.005)
    finally:
        for proc in jobs:
            if proc.poll() is None:
                kill(proc)
    for n, (case, proc, delay) in enumerate(zip(cases, jobs, delays, strict=True)):
        passed = [p for p in POINTS if (case.marks() / p).exists()]
        where = f"seed {seed}, kill {n} after {delay:.2f} s, past {passed[-1]}"
        print(f"random kill {n}: {where}{' (the job had ended)' if proc.returncode == 0 else ''}")
        # Whatever the moment, a reader sees no uncommitted part, and all of a committed
        # batch unless the kill cut its publish (rolled forward by the next run).
        now = case.snapshot()
        if now["unpublished"] == 0:
            # A published batch is its four parts, or the one file they were combined
            # into (the even cases' parts are small for their sink).
            whole = 1 if n % 2 == 0 else FILES
            assert len(now["visible"]) in (0, whole), where
            assert (now["records"] > 0) == bool(now["visible"]), where
        next_run(case, spark)
        assert_exact(case, source)


# --- two attempts of one batch at once ----------------------------------------------


def staged_inodes(case: Case) -> dict[str, dict[str, int]]:
    """Attempt -> part name -> inode of its staged row parts."""
    root = Path(case.warehouse) / "p" / "_staging" / "events"
    prefix = f"batch-{case.batch_id:010d}-"
    return {
        d.name.removeprefix(prefix): {p.name: p.stat().st_ino for p in (d / "rows").iterdir()}
        for d in root.iterdir()
        if d.name.startswith(prefix) and (d / "rows").is_dir()
    }


@pytest.mark.spark  # ingest jobs (spark-submit)
def test_two_attempts_race_to_commit(
    new_store: Callable[[Path], str], source: Source, tmp_path: Path
) -> None:
    """An Airflow retry beside a zombie task: two job processes for one batch, started
    at once, each stopped after its sink write until both are there, then released
    together to commit. Exactly one commits; the loser's parts are discarded and the
    table holds the winner's (the same inodes that were staged)."""
    case = plan_case(tmp_path / "race", new_store(tmp_path), source)
    marks = [case.marks("a"), case.marks("b")]
    jobs = [
        start_job([case.batch_id], case.store_url, m, "after_sink_write:pause", spark_master=SPARK)
        for m in marks
    ]
    try:
        for m, proc in zip(marks, jobs, strict=True):
            wait_for(m / "after_sink_write", proc)
        staged = staged_inodes(case)
        assert len(staged) == 2 and all(len(parts) == FILES for parts in staged.values())
        for m in marks:
            (m / "after_sink_write.resume").touch()
        outs = [finish(proc) for proc in jobs]
    finally:
        for proc in jobs:
            if proc.poll() is None:
                kill(proc)

    committed = [out for out in outs if f"batch {case.batch_id} committed" in out]
    assert len(committed) == 1, "\n---\n".join(outs)
    store = case.store()
    try:
        winner = store.load_batch(case.batch_id).attempt
        st = store.status(case.ctx.ref)
        assert st is not None and st.state == "RUNNING"  # the loser failed nothing
    finally:
        store.close()
    assert winner in staged
    table = Path(case.warehouse) / "p" / "events"
    published = {name: (table / name).stat().st_ino for name in visible_parts(case.warehouse)}
    assert published == staged[winner]
    assert_exact(case, source)


@pytest.mark.spark  # ingest jobs (spark-submit)
def test_retry_publishing_beside_the_committing_attempt(
    new_store: Callable[[Path], str], source: Source, tmp_path: Path
) -> None:
    """The zombie committed and is about to publish when the retry starts: the retry
    finds the batch committed and rolls the publish forward while the zombie publishes
    too. The retry moves the first part and stops; the zombie publishes the rest; the
    retry then finds its parts gone into the table: both end cleanly."""
    case = plan_case(tmp_path / "publish", new_store(tmp_path), source)
    zm, rm = case.marks("zombie"), case.marks("retry")
    zombie = start_job(
        [case.batch_id], case.store_url, zm, "after_commit:pause", spark_master=SPARK
    )
    retry: subprocess.Popen[bytes] | None = None
    try:
        wait_for(zm / "after_commit", zombie)
        retry = start_job(
            [case.batch_id], case.store_url, rm, "mid_publish:pause", spark_master=SPARK
        )
        wait_for(rm / "mid_publish", retry)
        assert len(visible_parts(case.warehouse)) == 1
        (zm / "after_commit.resume").touch()
        finish(zombie)
        (rm / "mid_publish.resume").touch()
        finish(retry)
    finally:
        for proc in (zombie, retry):
            if proc is not None and proc.poll() is None:
                kill(proc)
    assert_exact(case, source)
