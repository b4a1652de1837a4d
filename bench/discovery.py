"""Discovery cost with many committed objects: does the watermark keep it flat?

For ``file_input`` (a local folder) and ``s3_input`` (moto's S3 server on 127.0.0.1),
with 1,000 and with 100,000 committed objects: creates the objects, seeds the state
store cheaply (one batch of all of them planned with a complete listing's
``relisted_at`` and committed through the store with receipts, no Spark: the commit
collapses their offsets into the watermark), adds 100 new objects whose keys sort after
the committed ones, and times the engine's ``discover`` (``engine/discovery.py``:
listing, planning, persisting) of those 100. Prints the seconds, the ratio 100k / 1k per
transport and the offsets rows per connector after each step; also times one re-list (a
full listing) for reference (for ``s3_input`` only up to ``--s3-relist-max`` objects:
moto filters every key of the bucket for each page it lists).

No asserts: a script that prints figures (targets in issue 12: ratio <= 1.5 and < 2 s).

    .venv/bin/python bench/discovery.py                    # 1,000 and 100,000, both transports
    .venv/bin/python bench/discovery.py --sizes 1000,10000 --transports file_input
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.engine import discovery
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.state.store import ItemReceipt, StateStore
from airflow_connectors.transports.base import MTIME, WorkItem

NEW = 100
#: Timed discoveries per size (each of NEW more objects); the median is reported.
ROUNDS = 5
BODY = b'{"id": 1}\n'


def context(transport: str, config: dict[str, Any], warehouse: str) -> BatchContext:
    doc = {
        "pipeline": "bench",
        "tables": {
            "t": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": "c",
                        "tasks_max": 1,
                        "transport": {"name": transport, "config": config},
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        },
    }
    spec = parse_pipeline(doc)
    table = spec.tables[0]
    return discovery.context(spec, table, table.connectors[0], warehouse)


def commit_planned(store: StateStore, ctx: BatchContext) -> int:
    """Commit every planned batch of the connector with receipts as a run would write
    them (each object read whole, one record), without reading anything."""
    n = 0
    for batch in store.pending_batches(ctx.ref):
        receipts = [
            ItemReceipt(
                key=i.key,
                offset=i.end if i.end is not None else (i.size or 0),
                records=1,
                bad=0,
                bytes=i.size or 0,
                completed=True,
                records_done=i.records_done,
                meta=dict(i.meta) or None,
            )
            for i in batch.plan.items
        ]
        store.commit_batch(batch.batch_id, f"{batch.batch_id}-bench", receipts, [])
        n += len(receipts)
    return n


def rows(store: StateStore, ctx: BatchContext) -> int:
    return len(store.offsets(ctx.ref))


def seed(
    store: StateStore, ctx: BatchContext, keys: list[str], meta: dict[str, Any], listed_at: float
) -> None:
    """Commit ``keys`` through the store as if a complete listing that started at
    ``listed_at`` had found them and a run had read them: one planned batch, its
    receipts, and the listing's ``relisted_at``; the commit collapses them."""
    items = [WorkItem(key=k, start=0, end=len(BODY), size=len(BODY), meta=meta) for k in keys]
    plan = dataclasses.replace(ctx, items=items).to_plan()
    store.plan_batches(ctx.ref, [plan], listed=True, relisted_at=listed_at)
    commit_planned(store, ctx)


def timed(label: str, fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    print(f"    {label}: {dt:.3f} s", flush=True)
    return dt, out


def measure(
    name: str,
    committed: int,
    root: Path,
    make: Callable[[int, int], list[str]],
    config: dict[str, Any],
    meta: dict[str, Any],
    relist: bool,
) -> float:
    """Create and commit ``committed`` objects, add NEW, time the discovery of the NEW."""
    root.mkdir(parents=True, exist_ok=True)
    store = StateStore(f"sqlite:///{root / 'state.db'}")
    wh = str(root / "wh")
    ctx = context(name, {**config, "relist_margin_s": 0}, wh)
    try:
        print(f"  {name}, {committed:,} committed objects", flush=True)
        t0 = time.perf_counter()
        created_from = time.time() - 1
        keys = make(0, committed)
        print(f"    created in {time.perf_counter() - t0:.1f} s", flush=True)
        time.sleep(1.2)  # S3's Date has whole seconds: a listing after every object
        t0 = time.perf_counter()
        seed(store, ctx, keys, {**meta, MTIME: created_from}, time.time() - 1)
        wm = store.watermark(ctx.ref)
        print(
            f"    committed through the store in {time.perf_counter() - t0:.1f} s: offsets "
            f"rows {rows(store, ctx)}, watermark {wm and wm['key'].rsplit('/', 1)[-1]}",
            flush=True,
        )
        # Untimed: the first discovery of a process pays for imports and connections.
        discovery.discover(store, ctx)
        times = []
        for r in range(ROUNDS):
            make(committed + r * NEW, NEW)
            dt, found = timed(f"discover {NEW} new", lambda: discovery.discover(store, ctx))
            times.append(dt)
            print(
                f"    planned {found.new_items} items in {len(found.batch_ids)} batch(es); "
                f"offsets rows {rows(store, ctx)}",
                flush=True,
            )
            commit_planned(store, ctx)
            print(f"    after their commit: offsets rows {rows(store, ctx)}", flush=True)
        dt = statistics.median(times)
        print(f"    median of {ROUNDS}: {dt:.3f} s", flush=True)
        if relist:
            time.sleep(1.2)
            relist_ctx = context(name, {**config, "relist_every": 1, "relist_margin_s": 0}, wh)
            timed(
                "a re-list (full listing), for reference",
                lambda: discovery.discover(store, relist_ctx),
            )
            print(f"    after the re-list: offsets rows {rows(store, ctx)}", flush=True)
        return dt
    finally:
        store.close()


def file_input(sizes: list[int], base: Path) -> dict[int, float]:
    out = {}
    for n in sizes:
        root = base / f"file_input-{n}"
        folder = root / "drop"
        folder.mkdir(parents=True)
        old = time.time() - 3600

        def make(first: int, count: int, folder: Path = folder, old: float = old) -> list[str]:
            keys = []
            for i in range(first, first + count):
                path = folder / f"{i:07d}.json"
                path.write_bytes(BODY)
                os.utime(path, (old, old))
                keys.append(str(path))
            return keys

        config = {"path": str(folder), "min_file_age": 0}
        out[n] = measure("file_input", n, root, make, config, {}, relist=True)
    return out


def s3_input(sizes: list[int], base: Path, relist_max: int) -> dict[int, float]:
    from airflow_connectors.testing.s3server import S3Server

    out = {}
    with S3Server() as server:
        client = server.client()
        for n in sizes:
            bucket = server.create_bucket(f"bench-{n}")

            def put(i: int, bucket: str = bucket) -> str:
                key = f"in/{i:07d}.json"
                client.put_object(Bucket=bucket, Key=key, Body=BODY)
                return key

            def make(first: int, count: int, put: Callable[[int], str] = put) -> list[str]:
                with ThreadPoolExecutor(8) as pool:
                    return list(pool.map(put, range(first, first + count)))

            config = server.config(bucket, prefix="in/")
            etag = f'"{hashlib.md5(BODY).hexdigest()}"'  # S3's ETag of a one-part upload
            out[n] = measure(
                "s3_input",
                n,
                base / f"s3_input-{n}",
                make,
                config,
                {"etag": etag},
                relist=n <= relist_max,
            )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,100000", help="committed objects per run")
    p.add_argument("--transports", default="file_input,s3_input")
    p.add_argument(
        "--s3-relist-max",
        type=int,
        default=5000,
        help="time the reference re-list of s3_input only up to this many objects (moto "
        "filters every key of the bucket for each 1,000-key page)",
    )
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, dict[int, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-discovery-") as tmp:
        for name in args.transports.split(","):
            (Path(tmp) / name).mkdir()
            if name == "file_input":
                results[name] = file_input(sizes, Path(tmp) / name)
            else:
                results[name] = s3_input(sizes, Path(tmp) / name, args.s3_relist_max)
    print(f"\nsummary: seconds to discover {NEW} new objects (median of {ROUNDS})")
    for name, by_size in results.items():
        line = ", ".join(f"{n:,} committed: {dt:.3f} s" for n, dt in by_size.items())
        lo, hi = min(by_size), max(by_size)
        ratio = by_size[hi] / by_size[lo] if by_size[lo] else float("nan")
        print(f"  {name}: {line}; ratio {hi:,}/{lo:,} = {ratio:.2f}")
    print(json.dumps({k: {str(n): round(v, 4) for n, v in d.items()} for k, d in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
