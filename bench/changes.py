#!/usr/bin/env python
"""Changes into a keyed Delta table: one batch of ``--changes`` changes (70% updates of
existing keys, 10% deletes of existing keys, 20% inserts of new keys; whole rows, as
Debezium's after-images are) published by the ``delta`` sink into a table of ``--rows``
rows (``id BIGINT NOT NULL`` primary key, ``user_name VARCHAR``, ``amount DOUBLE``,
``qty INT``).

Set-up (untimed): the table and its key-state table ``<table>__keys`` (one row per key)
are written with delta-rs in a temporary folder, as the sink leaves them after a first
batch of ``--rows`` inserts. Then, per round, a batch of changes on the table as the last
round left it (its keys drawn without repetition; new keys above every key so far):

* ``stage``: the executors' side, the changes written through the sink's part writer
  (``sink.writer``: Parquet files under ``batch-<id>/<attempt>/``, in 2 parts);
* ``publish``: ``sink.publish``, on the driver, split into what the sink does in turn:
  ``read`` (the staged parts), ``collapse`` (one change per key), ``known`` (the
  key-state rows of the batch's keys: a semi-join of ``__keys``' files), ``resolve``,
  ``state`` (the key-state MERGE commit), ``merge`` (the table's MERGE commit, which
  records the batch), the rest (the lock, the ``_recorded`` look-up, dropping the
  staged parts).

Prints changes/s of the publish, and the MERGE's share of the publish and of the batch
(stage + publish). The row count is checked after each round (outside the clock). A
benchmark reports; it does not judge (exit status 0 unless the count is wrong).

Usage: ``.venv/bin/python bench/changes.py [--rows 10000000] [--changes 1000000]
[--rounds 1] [--dir DIR]``; ``--rows 1000000 --changes 100000`` is a quick run.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from airflow_connectors.catalog import parse_pipeline  # noqa: E402
from airflow_connectors.changes import DELETE, UPSERT, change_fields  # noqa: E402
from airflow_connectors.engine.discovery import context  # noqa: E402
from airflow_connectors.sinks import changes as ch  # noqa: E402
from airflow_connectors.sinks.delta import DeltaSink  # noqa: E402

COLUMNS = {"id": "BIGINT NOT NULL", "user_name": "VARCHAR", "amount": "DOUBLE", "qty": "INT"}
#: Rows per chunk when writing the initial table (memory stays bounded).
CHUNK = 2_000_000
#: What ``publish`` is split into (``collapse`` and ``resolve`` are module functions the
#: sink looks up at call time, the others its methods).
PHASES = ("read", "collapse", "known", "resolve", "state", "merge")


def sink_of(warehouse: str) -> DeltaSink:
    doc = {
        "pipeline": "bench",
        "tables": {
            "events": {
                "columns": COLUMNS,
                "primary_key": ["id"],
                "sink": {"name": "delta", "config": {}},
                "connectors": [
                    {
                        "name": "changes",
                        "transport": {"name": "file_input", "config": {"path": warehouse}},
                        "format": {"name": "json", "config": {}},
                    }
                ],
            }
        },
    }
    spec = parse_pipeline(doc)
    table = spec.tables[0]
    sink = context(spec, table, table.connectors[0], warehouse).sink()
    assert isinstance(sink, DeltaSink)
    return sink


def rows_of(ids: np.ndarray, round_no: int, schema: pa.Schema) -> pa.Table:
    n = len(ids)
    return (
        pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "user_name": pa.array([f"user-{i % 100_000}-{round_no}" for i in ids.tolist()]),
                "amount": pa.array((ids % 10_000).astype(np.float64) / 4 + round_no),
                "qty": pa.array(((ids + round_no) % 1000).astype(np.int32)),
            }
        ).cast(schema)
        if n
        else schema.empty_table()
    )


def initial_table(sink: DeltaSink, rows: int) -> None:
    """The table and its key-state table with keys ``0 .. rows-1``, written with delta-rs
    as a first batch of inserts leaves them (batch 0)."""
    from deltalake import write_deltalake

    schema = sink.schema("rows")
    sschema = ch.state_schema(sink.table)
    now = int(time.time() * 1000)
    for start in range(0, rows, CHUNK):
        ids = np.arange(start, min(rows, start + CHUNK), dtype=np.int64)
        mode = "append" if start else "error"
        write_deltalake(sink.location(), rows_of(ids, 0, schema), mode=mode)
        n = len(ids)
        state = pa.table(
            {
                "id": pa.array(ids),
                ch.SEQ: pa.array(np.zeros(n, np.int64)),
                ch.BATCH: pa.array(np.zeros(n, np.int64)),
                "__order": pa.array(ids),
                ch.DELETED: pa.array(np.zeros(n, np.bool_)),
                ch.CHANGED_MS: pa.array(np.full(n, now, np.int64)),
            }
        ).cast(sschema)
        write_deltalake(sink.keys_location(), state, mode=mode)


def changes_of(
    live: np.ndarray, next_id: int, n: int, round_no: int, schema: pa.Schema
) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """``n`` changes: 70% updates and 10% deletes of distinct live keys, 20% inserts of
    new keys, shuffled; and the keys deleted and inserted."""
    rng = np.random.default_rng(round_no)
    n_upd, n_del = n * 7 // 10, n // 10
    n_ins = n - n_upd - n_del
    picked = rng.choice(live, size=n_upd + n_del, replace=False)
    updated, deleted = picked[:n_upd], picked[n_upd:]
    inserted = np.arange(next_id, next_id + n_ins, dtype=np.int64)
    ids = np.concatenate([updated, deleted, inserted])
    ops = np.concatenate(
        [
            np.full(n_upd, UPSERT, np.int8),
            np.full(n_del, DELETE, np.int8),
            np.full(n_ins, UPSERT, np.int8),
        ]
    )
    order = rng.permutation(n)
    ids, ops = ids[order], ops[order]
    data = rows_of(ids, round_no, schema.remove_metadata())
    staged_schema = pa.schema([*(f.with_nullable(True) for f in schema), *change_fields()])
    table = pa.table(
        {
            **{c: data.column(c) for c in data.column_names},
            "__op": pa.array(ops),
            "__set": pa.nulls(n, pa.list_(pa.string())),
            "__order": pa.array(np.arange(n, dtype=np.int64)),
        }
    ).cast(staged_schema)
    return table, deleted, inserted


def instrument(sink: DeltaSink, spent: dict[str, float]) -> Callable[[], None]:
    """Time the publish's phases (wrapping the sink's methods and the module functions it
    calls); returns the undo."""
    import airflow_connectors.sinks.changes as module

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t0

        return run

    methods = {
        "read": "_read_staged",
        "known": "_known",
        "state": "_commit_state",
        "merge": "_merge",
    }
    for phase, attr in methods.items():
        setattr(sink, attr, timed(phase, getattr(sink, attr)))
    saved = {name: getattr(module, name) for name in ("collapse", "resolve")}
    for name, fn in saved.items():
        setattr(module, name, timed(name, fn))

    def undo() -> None:
        for name, fn in saved.items():
            setattr(module, name, fn)
        for attr in methods.values():
            delattr(sink, attr)

    return undo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--dir", help="work folder (default: a temporary one, removed)")
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="ac-bench-changes-"))
    try:
        sink = sink_of(str(work / "wh"))
        t0 = time.perf_counter()
        initial_table(sink, args.rows)
        print(
            f"set-up: {args.rows:,} rows and their key states in {time.perf_counter() - t0:.1f} s"
        )
        live = np.arange(args.rows, dtype=np.int64)
        next_id, expected, status = args.rows, args.rows, 0
        for r in range(1, args.rounds + 1):
            changes, deleted, inserted = changes_of(
                live, next_id, args.changes, r, sink.schema("rows")
            )
            spent: dict[str, float] = defaultdict(float)
            attempt = f"1-r{r}"
            t0 = time.perf_counter()
            sink.prepare(r, attempt)
            half = changes.num_rows // 2
            for part, piece in enumerate((changes.slice(0, half), changes.slice(half))):
                w = sink.writer(r, attempt, part, "rows")
                w.write(piece)
                w.close()
            t1 = time.perf_counter()
            undo = instrument(sink, spent)
            try:
                sink.publish(r, attempt)
            finally:
                undo()
            t2 = time.perf_counter()
            stage, publish = t1 - t0, t2 - t1
            before = expected
            expected += len(inserted) - len(deleted)
            got = _count(sink)
            live = np.concatenate([np.setdiff1d(live, deleted, assume_unique=True), inserted])
            next_id += len(inserted)
            rest = publish - sum(spent[p] for p in PHASES)
            print(
                f"round {r}: {args.changes:,} changes into {before:,} "
                f"rows: publish {publish:.2f} s = {args.changes / publish:,.0f} changes/s; "
                f"stage {stage:.2f} s; MERGE {spent['merge']:.2f} s = "
                f"{spent['merge'] / publish:.0%} of the publish, "
                f"{spent['merge'] / (stage + publish):.0%} of the batch"
            )
            print(
                "  publish: "
                + ", ".join(f"{p} {spent[p]:.2f}" for p in PHASES)
                + f", rest {rest:.2f} s"
            )
            if got != expected:
                print(f"  WRONG: the table has {got:,} rows, expected {expected:,}")
                status = 1
        return status
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


def _count(sink: DeltaSink) -> int:
    """The table's rows now (through its log)."""
    from deltalake import DeltaTable

    dt = DeltaTable(sink.location())
    actions = pa.table(dt.get_add_actions(flatten=True))
    return sum(int(n) for n in actions.column("num_records").to_pylist())


if __name__ == "__main__":
    sys.exit(main())
