#!/usr/bin/env python
"""NATS JetStream benchmark: ``nats_input`` end to end, and the transport's reads alone.

Creates a stream of its own (``ac_nats_bench_<random>``, deleted at the end) on
``--server`` (default: the local server), publishes ``--messages`` JSON messages (one
record each: ``id, user_name, amount, qty, flag``) and waits until the stream holds them
all, then times:

* ``engine``: ``EmbeddedRunner(spec).run()`` of a ``nats_input`` connector (JSON format,
  ``tasks_max``, ``max_batch_size``) into the Parquet table on one ``local[2]``
  SparkSession started before the clock (discovery, the durable consumer's acks, every
  batch's Spark job and commit are inside); a fresh state store and warehouse per round.
  The embedded runner runs a discovery's batches one after another (under Airflow they
  are parallel tasks); each batch's work items are Spark tasks side by side;
* ``raw read``: the transport's ``read`` of every planned range in this process, bytes
  only (no decoding, no Spark): what the NATS client delivers.

Prints messages/s per path (median of the rounds). Row counts are checked outside the
timed sections. Exit status 0 unless a count is wrong.

Usage: ``.venv/bin/python bench/nats.py [--messages 200000] [--rounds 2] [--tasks-max 2]
[--batch 100000]``
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# This file is named like the client library: run as a script, its folder comes first
# on sys.path and `import nats` would import this file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]


def nats_client() -> Any:
    """The nats-py package (not this file)."""
    return importlib.import_module("nats")


COLUMNS = {
    "id": "BIGINT NOT NULL",
    "user_name": "VARCHAR",
    "amount": "DOUBLE",
    "qty": "INT",
    "flag": "BOOLEAN",
}


def message(i: int) -> bytes:
    return json.dumps(
        {
            "id": i,
            "user_name": f"user{i % 1000}",
            "amount": i / 8,
            "qty": i % 97,
            "flag": i % 3 == 0,
        }
    ).encode()


async def fill(server: str, stream: str, n: int) -> float:
    """Create ``stream`` and publish ``n`` messages (core publishes, then wait for the
    stream to hold them); returns the seconds it took."""
    t0 = time.perf_counter()
    nc = await nats_client().connect(server)
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[f"{stream}.>"])
    for i in range(1, n + 1):
        await nc.publish(f"{stream}.events", message(i))
        if i % 10_000 == 0:
            await nc.flush()
    await nc.flush()
    for _ in range(600):
        info = await js.stream_info(stream)
        if info.state.messages >= n:
            break
        await asyncio.sleep(0.1)
    await nc.close()
    if info.state.messages != n:
        raise SystemExit(f"the stream holds {info.state.messages} messages, expected {n}")
    return time.perf_counter() - t0


async def drop(server: str, stream: str) -> None:
    nc = await nats_client().connect(server)
    await nc.jetstream().delete_stream(stream)
    await nc.close()


def pipeline_doc(server: str, stream: str, tasks_max: int, batch: int) -> dict[str, Any]:
    return {
        "pipeline": "natsbench",
        "tables": {
            "events": {
                "columns": COLUMNS,
                "connectors": [
                    {
                        "name": "nats",
                        "tasks_max": tasks_max,
                        "max_batch_size": batch,
                        "transport": {
                            "name": "nats_input",
                            "config": {
                                "connection_config": {"server_url": server},
                                "stream_name": stream,
                                "consumer_config": {"name": f"bench_{uuid.uuid4().hex[:8]}"},
                            },
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        },
    }


def run_engine(spark: Any, doc: dict[str, Any], work: Path) -> tuple[float, int, str]:
    from airflow_connectors.catalog import parse_pipeline
    from airflow_connectors.engine.runner import EmbeddedRunner
    from airflow_connectors.settings import Settings
    from airflow_connectors.state.store import StateStore

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    settings = Settings(
        state_store_url=f"sqlite:///{work}/state.db",
        warehouse=str(work / "wh"),
        spark_master="local[2]",
    )
    spec = parse_pipeline(doc)
    store = StateStore(settings.state_store_url)
    runner = EmbeddedRunner(spec, settings, store=store, spark=lambda: spark)
    t0 = time.perf_counter()
    report = runner.run()
    seconds = time.perf_counter() - t0
    (rep,) = report.connectors.values()
    table = spec.table("events")
    out = runner.context(table, table.connectors[0]).sink().location()
    store.close()
    return seconds, rep.records, out


def raw_read(doc: dict[str, Any]) -> tuple[float, int]:
    """Every range of the stream read by the transport alone; (seconds, messages)."""
    from airflow_connectors.catalog import parse_pipeline, transport_of
    from airflow_connectors.transports import Cursor, Limits

    spec = parse_pipeline(doc)
    table = spec.table("events")
    transport = transport_of(table.connectors[0], table)
    items = list(transport.discover(Cursor(), Limits()))
    t0 = time.perf_counter()
    lines = 0
    for item in items:
        for chunk in transport.read(item):
            lines += chunk.count(b"\n")
    return time.perf_counter() - t0, lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", default="nats://127.0.0.1:4222")
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tasks-max", type=int, default=2)
    p.add_argument("--batch", type=int, default=100_000, help="max_batch_size")
    args = p.parse_args(argv)
    n = args.messages
    stream = f"ac_nats_bench_{uuid.uuid4().hex[:8]}"
    print(f"publishing {n} messages to stream {stream} ...", flush=True)
    publish_s = asyncio.run(fill(args.server, stream, n))
    print(f"published in {publish_s:.1f} s ({n / publish_s:,.0f} msgs/s)", flush=True)
    ok = True
    try:
        from airflow_connectors.engine.spark import spark_session
        from airflow_connectors.settings import Settings

        tmp = Path(tempfile.mkdtemp(prefix="ac_nats_bench_"))
        spark = spark_session(
            Settings(
                state_store_url=f"sqlite:///{tmp}/x.db",
                warehouse=str(tmp / "wh"),
                spark_master="local[2]",
            )
        )
        results: dict[str, list[float]] = {"engine": [], "raw read": []}
        doc = pipeline_doc(args.server, stream, args.tasks_max, args.batch)
        run_engine(spark, pipeline_doc(args.server, stream, args.tasks_max, args.batch), tmp / "w")
        for r in range(args.rounds):
            secs, records, out = run_engine(
                spark, pipeline_doc(args.server, stream, args.tasks_max, args.batch), tmp / "e"
            )
            rows = spark.read.parquet(out).count()
            if records != n or rows != n:
                print(f"engine round {r}: {records} records, {rows} rows; expected {n}")
                ok = False
            results["engine"].append(secs)
            secs, lines = raw_read(doc)
            if lines != n:
                print(f"raw read round {r}: {lines} messages; expected {n}")
                ok = False
            results["raw read"].append(secs)
            print(
                f"round {r}: engine {results['engine'][-1]:.2f} s, "
                f"raw read {results['raw read'][-1]:.2f} s",
                flush=True,
            )
        print(f"\n{n} messages, tasks_max={args.tasks_max}, max_batch_size={args.batch}")
        for path, times in results.items():
            med = statistics.median(times)
            print(f"  {path:10s} median {med:6.2f} s  {n / med:>12,.0f} msgs/s")
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    finally:
        asyncio.run(drop(args.server, stream))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
