"""``file_input`` with the watermark: committed files collapse into it, so the state stays
bounded; a late file (a path below the watermark that appears after a re-list started)
is read once, by the next re-list (made one as soon as a probe or an end-of-input
check sees the file); a collapsed file is never read again unless it is
rewritten; keys in flight, a crash between plan and commit and a stop that releases a
planned batch keep it exact. The real engine (discovery, batches, the worker code and
the Parquet sink, tasks run in this process: the conformance kit's ``Connector``) on
SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_connectors.state.store import StateStore
from airflow_connectors.testing.conformance import Connector, Source

OLD = time.time() - 3600  # files written an hour ago (min_file_age is long past)


def write(folder: Path, name: str, ids: range) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
    os.utime(path, (OLD, OLD))
    return path


def source(folder: Path, **config: Any) -> Source:
    return Source(
        transport="file_input",
        config={"path": str(folder), **config},
        columns={"id": "BIGINT NOT NULL"},
        format={"name": "json", "config": {"update_format": "raw"}},
        records=[],
        key_column="id",
        connector={"tasks_max": 1},
    )


@pytest.fixture
def connect(store_url: str, tmp_path: Path) -> Iterator[Any]:
    """A ``Connector`` of ``file_input`` over a folder, its state in ``store_url``."""
    made: list[Connector] = []

    def make(folder: Path, **config: Any) -> Connector:
        c = Connector(source(folder, **config), tmp_path / f"c{len(made)}")
        c.store.close()
        c.store, c.store_url = StateStore(store_url), store_url
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def ids(c: Connector) -> list[int]:
    table = c.table()
    return sorted(table.column("id").to_pylist()) if table.num_rows else []


def rows(c: Connector) -> int:
    return len(c.store.offsets(c.ref))


def cycle(c: Connector) -> list[int]:
    """One discovery and its batches; returns the batch ids."""
    found = c.discover()
    c.run(found.batch_ids)
    return found.batch_ids


@pytest.mark.slow
def test_offsets_stay_bounded_over_2000_files_in_20_batches(connect: Any, tmp_path: Path) -> None:
    folder = tmp_path / "drop"
    c = connect(folder, relist_margin_s=0)
    counts = []
    for n in range(20):
        for i in range(100):
            k = n * 100 + i
            write(folder, f"{n:02d}/{i:03d}.json", range(k, k + 1))
        assert len(cycle(c)) == 1
        counts.append(rows(c))
    assert ids(c) == list(range(2000))
    # Re-lists (the first discovery, then every 10th) collapse every committed file
    # older than their start; between them, the rows are the files since the last one.
    assert counts[0] == 1 and counts[10] == 1, counts
    assert max(counts) == counts[9] == 900, counts
    wm = c.store.watermark(c.ref)
    assert wm is not None and wm["key"] == str(folder / "19" / "099.json")
    # Nothing more to read, and end of input is known without the collapsed rows.
    for _ in range(11):
        assert cycle(c) == []
    assert c.finalize() and ids(c) == list(range(2000)) and rows(c) == 1
    assert c.status().total_records == 2000


def test_a_late_file_below_the_watermark_is_read_once_by_the_relist(
    connect: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "drop"
    write(folder, "b.json", range(0, 10))
    write(folder, "c.json", range(10, 20))
    c = connect(folder, relist_every=3, relist_margin_s=0)
    cycle(c)
    assert c.store.watermark(c.ref)["key"] == str(folder / "c.json")
    time.sleep(0.05)  # the late file changes after the re-list started (coarse clocks)
    # Moved in with an old mtime (as `mv` keeps it): its ctime still says it is late.
    write(folder, "a.json", range(20, 25))
    # Lists after the watermark only: plans nothing, but its end-of-input check (a
    # complete listing) sees the late file and makes the next discovery a re-list.
    assert cycle(c) == []
    assert c.store.watermark(c.ref)["since_relist"] >= 3
    assert len(cycle(c)) == 1  # the re-list finds it
    assert ids(c) == list(range(25))
    for _ in range(7):  # more re-lists: committed, never read again
        assert cycle(c) == []
    assert ids(c) == list(range(25)) and rows(c) == 1


def test_a_collapsed_file_is_not_read_again_unless_rewritten(connect: Any, tmp_path: Path) -> None:
    folder = tmp_path / "drop"
    first = write(folder, "a.json", range(0, 10))
    write(folder, "b.json", range(10, 20))
    c = connect(folder, relist_every=1, relist_margin_s=0)
    cycle(c)
    assert [o["key"] for o in c.store.offsets(c.ref)] == [str(folder / "b.json")]
    for _ in range(3):  # every discovery is a re-list: a.json has no row, and stays read
        assert cycle(c) == []
    assert ids(c) == list(range(20)) and c.finalize()
    # Rewritten in place after it collapsed: a new file to the watermark (Auto Loader's
    # allowOverwrites), read again whole; documented on relist_every.
    time.sleep(0.05)
    first.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(100, 103)))
    os.utime(first, (OLD, OLD))
    assert len(cycle(c)) == 1
    assert ids(c) == [*range(20), 100, 101, 102]


def test_in_flight_keys_a_crash_and_a_release_keep_it_exact(connect: Any, tmp_path: Path) -> None:
    folder = tmp_path / "drop"
    write(folder, "a.json", range(0, 10))
    c = connect(folder, relist_every=2, relist_margin_s=0)
    planned = c.discover().batch_ids  # the run crashes here: planned, never committed
    write(folder, "b.json", range(10, 20))
    again = c.discover()
    assert again.batch_ids == planned  # the same plan comes back (tasks_max 1: only it)
    c.run(again.batch_ids)
    assert ids(c) == list(range(10))
    cycle(c)
    assert ids(c) == list(range(20))
    # A planned batch of a late file below the watermark, released by a stop.
    time.sleep(0.05)
    write(folder, "0.json", range(20, 30))
    [late] = c.discover().batch_ids  # a re-list (every 2nd discovery) plans 0.json
    assert c.store.cursor(c.ref).in_flight == {str(folder / "0.json")}
    assert c.store.cursor(c.ref).watermark == str(folder / "b.json")
    c.store.set_stopped(c.ref, True)
    assert c.store.drop_planned_batch(late)
    kept = {o["key"]: o["completed"] for o in c.store.offsets(c.ref)}
    assert kept[str(folder / "0.json")] is False  # released: stays work, not collapsed
    c.store.set_stopped(c.ref, False)
    assert len(cycle(c)) == 1  # the next discovery re-lists and reads it
    for _ in range(4):
        assert cycle(c) == []
    assert ids(c) == list(range(30)) and c.finalize()


def test_followed_files_never_collapse(connect: Any, tmp_path: Path) -> None:
    folder = tmp_path / "drop"
    for n in range(5):
        write(folder, f"{n}.json", range(n * 10, n * 10 + 10))
    c = connect(folder, follow=True, relist_margin_s=0)
    for _ in range(3):
        cycle(c)
    assert rows(c) == 5 and ids(c) == list(range(50))
    with (folder / "0.json").open("a") as fh:  # appends need the offsets
        fh.write(json.dumps({"id": 50}) + "\n")
    os.utime(folder / "0.json", (OLD + 1, OLD + 1))
    cycle(c)
    assert ids(c) == list(range(51))


@pytest.mark.slow
def test_a_slice_that_sorts_below_the_watermark_stops_discovery_instead_of_losing_it(
    connect: Any, tmp_path: Path
) -> None:
    """Date slices out of key order (a backfill's later day committed first): the older
    day's files sort below the watermark and were written before the listing that set
    ``late_after``, so they would pass for collapsed, committed files. Discovery stops
    with a one-line error that says what to do; nothing is skipped silently."""
    from airflow_connectors.transports.base import SourceOrderError

    for day in ("2026-11-01", "2026-11-03"):
        for n in range(3):
            write(tmp_path / "in" / day, f"{n}.json", range(n * 10, n * 10 + 10))
    later = connect(tmp_path / "in" / "2026-11-03")
    cycle(later)
    cycle(later)  # commits, then collapses: the state holds the watermark only
    assert ids(later) == list(range(30))
    assert later.store.cursor(later.ref).watermark is not None
    earlier = connect(tmp_path / "in" / "2026-11-01")
    assert earlier.ref == later.ref
    with pytest.raises(SourceOrderError, match="sorts after every key") as e:
        earlier.discover()
    assert "--max-active-runs 1" in str(e.value) and "\n" not in str(e.value)
    # A slice that sorts after the watermark is read as before.
    write(tmp_path / "in" / "2026-11-04", "0.json", range(100, 110))
    cycle(connect(tmp_path / "in" / "2026-11-04"))


def test_check_scope_only_objects_to_a_watermark_after_the_whole_listing() -> None:
    from airflow_connectors.transports.base import SourceOrderError, check_scope

    check_scope("c", "src", "in/2026-11-02/", None)
    check_scope("c", "src", "in/2026-11-02/", "in/2026-11-01/9.json")  # before: all new
    check_scope("c", "src", "in/2026-11-02/", "in/2026-11-02/5.json")  # inside
    check_scope("c", "src", "", "anything")  # the whole bucket
    with pytest.raises(SourceOrderError):
        check_scope("c", "src", "in/2026-11-02/", "in/2026-11-03/0.json")


@pytest.mark.slow  # about 0.5 s or more: outside the fast lane
def test_date_slices_out_of_key_order_each_land_once(connect: Any, tmp_path: Path) -> None:
    """What a backfill's discover tasks do (a templated path, each run its own slice:
    ``own_slice_only``): the later day commits first, then the earlier one is read whole,
    a re-run of either plans nothing, and the state keeps every slice's rows."""
    from airflow_connectors.engine import discovery

    for day in ("2026-11-01", "2026-11-03"):
        for n in range(3):
            base = 0 if day.endswith("01") else 100
            write(tmp_path / "in" / day, f"{n}.json", range(base + n * 10, base + n * 10 + 10))

    def sliced(c: Connector) -> list[int]:
        found = discovery.discover(c.store, c.ctx, own_slice_only=True)
        c.run(found.batch_ids)
        return found.batch_ids

    later = connect(tmp_path / "in" / "2026-11-03")
    assert sliced(later)
    earlier = connect(tmp_path / "in" / "2026-11-01")
    assert sliced(earlier)
    assert ids(later) == list(range(100, 130))
    assert ids(earlier) == list(range(30))
    # What each run's finalize task does: the slice is exhausted (no guard error).
    assert discovery.finalize(later.store, later.ctx, own_slice_only=True)
    assert discovery.finalize(earlier.store, earlier.ctx, own_slice_only=True)
    assert sliced(connect(tmp_path / "in" / "2026-11-01")) == []
    assert sliced(connect(tmp_path / "in" / "2026-11-03")) == []
    assert rows(earlier) == 6  # no slice's rows collapsed into the watermark


def test_a_late_file_is_seen_by_the_probe_and_read_by_the_next_run(
    connect: Any, tmp_path: Path
) -> None:
    """Issue 22: ``a.json`` moved in after ``b.json`` was read (or ``part-9`` after
    ``part-10``): the new-data probe of triggers and sensors sees it at once, end of
    input is not claimed while it waits, and the run the probe starts reads it, with no
    re-list due by ``relist_every``."""
    from airflow_connectors.engine.discovery import new_data_fingerprint

    folder = tmp_path / "drop"
    write(folder, "part-10.json", range(0, 10))
    c = connect(folder, relist_every=100, relist_margin_s=0)
    cycle(c)
    assert c.finalize() and new_data_fingerprint(c.store, c.ctx) is None
    time.sleep(0.05)
    write(folder, "part-9.json", range(10, 15))  # sorts below the watermark
    assert new_data_fingerprint(c.store, c.ctx) is not None
    assert not c.finalize()  # not at its end while a file waits
    assert c.store.status(c.ref).end_of_input is False
    assert len(cycle(c)) == 1  # the next discovery lists every key and reads it
    assert ids(c) == list(range(15))
    assert c.finalize() and new_data_fingerprint(c.store, c.ctx) is None
    assert c.store.cursor(c.ref).since_relist < 100  # back to listing after the watermark
    time.sleep(0.05)
    write(folder, "part-8.json", range(15, 17))
    # Without a probe, the run's own end-of-input check finds it and re-lists next time.
    assert cycle(c) == [] and not c.finalize()
    assert len(cycle(c)) == 1 and ids(c) == list(range(17))
