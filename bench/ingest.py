#!/usr/bin/env python
"""Ingest benchmark: the engine against raw Spark on the same JSON-lines and CSV files.

Generates about ``--size-mib`` MiB per format in ``--files`` files (reused when already
generated with the same parameters), then, in one process and one SparkSession, times
for each format and round:

* engine: ``EmbeddedRunner(spec, ...).run()`` ingesting every file into a Parquet table
  (a fresh state store and warehouse per round);
* raw:    ``spark.read.schema(s).json(dir).write.parquet(out)`` (``.csv(dir)`` for CSV);
* with ``--sinks parquet,delta``, the engine once per sink (``engine`` into Parquet,
  ``engine-delta`` into a Delta Lake table through the ``delta`` sink), each with its
  ratio to the same raw Spark runs.

Rounds interleave the two paths (alternating which goes first) after an untimed warm-up
of each. Row counts of both outputs are checked outside the timed sections. Prints the
per-round times, min and median per path and the ratio engine/raw against the targets
(<= 0.7 for JSON-lines, <= 1.0 for CSV), and times a "nothing new" run (a second run on
an ingested store), which must not start Spark.

Exit status: 0 (a benchmark reports, it does not judge) unless a correctness check fails
(row counts, or Spark started by a run that found nothing new): then 1.

Usage: ``.venv/bin/python bench/ingest.py [--size-mib 1024] [--files 64] [--rounds 3] [--s3]
[--sinks parquet,delta]``
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
GENERATOR_VERSION = 2
SEED = 20260101
MIB = 1 << 20
FORMATS = ("json", "csv")
SINKS = ("parquet", "delta")
TARGETS = {"json": 0.7, "csv": 1.0}
EXTENSIONS = {"json": "json", "csv": "csv"}

COLUMNS = {
    "id": "BIGINT NOT NULL",
    "user_name": "VARCHAR",
    "amount": "DOUBLE",
    "qty": "INT",
    "ts": "TIMESTAMP",
    "flag": "BOOLEAN",
    "note": "VARCHAR",
}
BASE_EPOCH = 1767225600  # 2026-01-01T00:00:00 (naive)
NOTE_NULL_FRACTION = 0.05
CHUNK_ROWS = 1 << 20  # rows generated and encoded at a time


# --- data generation ---------------------------------------------------------------------

WORDS = (
    "order shipped delayed customer refund invoice payment pending approved warehouse "
    "express standard return exchange gift priority backorder coupon loyalty review "
    "damaged replacement tracking signature weekend holiday café naïve zürich straße "
    "north south east west large small blue green red"
)
FIRST = (
    "alice bob carol dave erin frank grace heidi ivan judy mallory niaj olivia peggy "
    "rupert sybil trent victor walter yolanda"
)
LAST = (
    "smith jones brown taylor wilson davies evans thomas johnson roberts walker wright "
    "robinson thompson white hughes edwards green hall wood"
)


@functools.lru_cache(maxsize=1)
def pools() -> dict[str, pa.Array]:
    """Value pools rows index into (vectorised generation): names and notes of varying
    length (0 to ~200 characters, some with commas and non-ASCII letters)."""
    rng = np.random.default_rng(SEED)
    words, first, last = WORDS.split(), FIRST.split(), LAST.split()
    names = [
        f"{first[i % len(first)]}.{last[(i // len(first)) % len(last)]}{i // 400}"
        for i in range(20_000)
    ]
    notes = []
    for _ in range(4096):
        k = int(rng.geometric(0.12)) - 1  # mostly short, a long tail
        text = " ".join(rng.choice(words, size=min(k, 30)))
        if k > 3 and rng.random() < 0.3:
            text = text.replace(" ", ", ", 1)
        notes.append(text)
    notes_json = [json.dumps(n, ensure_ascii=False) for n in notes] + ["null"]
    return {
        "names": pa.array(names, pa.string()),
        "notes": pa.array([*notes, None], pa.string()),
        "notes_json": pa.array(notes_json, pa.string()),
    }


def make_rows(key: int, first_id: int, n: int) -> dict[str, pa.Array]:
    """``n`` rows with ids from ``first_id``, determined by ``key`` (strings already
    formatted where both encodings share them)."""
    import pyarrow.compute as pc

    p = pools()
    rng = np.random.default_rng([SEED, key])
    note_idx = rng.integers(0, len(p["notes"]) - 1, n)
    note_idx[rng.random(n) < NOTE_NULL_FRACTION] = len(p["notes"]) - 1  # the null entry
    ts = pa.array(BASE_EPOCH + rng.integers(0, 365 * 86400, n), pa.timestamp("s"))
    note_take = pa.array(note_idx)
    return {
        "id": pa.array(np.arange(first_id, first_id + n, dtype=np.int64)),
        "user_name": p["names"].take(pa.array(rng.integers(0, len(p["names"]), n))),
        "amount": pa.array(np.round(rng.lognormal(3.5, 1.2, n), 2)),
        "qty": pa.array(rng.integers(1, 500, n, dtype=np.int32)),
        "ts": pc.strftime(ts, "%Y-%m-%dT%H:%M:%S"),
        "flag": pa.array(rng.random(n) < 0.3),
        "note": p["notes"].take(note_take),
        "note_json": p["notes_json"].take(note_take),
    }


def encode(fmt: str, rows: dict[str, pa.Array]) -> bytes | memoryview:
    import pyarrow.compute as pc

    if fmt == "json":

        def s(a: pa.Array) -> pa.Array:
            return pc.cast(a, pa.string())

        lines = pc.binary_join_element_wise(
            '{"id":',
            s(rows["id"]),
            ',"user_name":"',
            rows["user_name"],
            '","amount":',
            s(rows["amount"]),
            ',"qty":',
            s(rows["qty"]),
            ',"ts":"',
            rows["ts"],
            '","flag":',
            pc.if_else(rows["flag"], "true", "false"),
            ',"note":',
            rows["note_json"],
            "}\n",
            "",  # separator
        )
        # No nulls and offset 0: the data buffer is the file's bytes, line after line.
        offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)
        return memoryview(lines.buffers()[2])[offsets[0] : offsets[len(lines)]]
    import io

    import pyarrow.csv as pcsv

    table = pa.table({c: rows[c] for c in COLUMNS})
    out = io.BytesIO()
    pcsv.write_csv(table, out, pcsv.WriteOptions(include_header=False, batch_size=1 << 16))
    return out.getbuffer()


def bytes_per_row(fmt: str) -> float:
    n = 20_000
    return len(encode(fmt, make_rows(1 << 62, 0, n))) / n  # a sample unlike any file


def write_file(fmt: str, path: str, file_index: int, first_id: int, n: int) -> int:
    """Write rows ``first_id`` .. ``first_id + n - 1`` in chunks (any file size)."""
    tmp = f"{path}.tmp"
    size = 0
    with open(tmp, "wb") as fh:
        for chunk, start in enumerate(range(0, n, CHUNK_ROWS)):
            rows = make_rows(
                file_index * 1_000_000 + chunk, first_id + start, min(CHUNK_ROWS, n - start)
            )
            size += fh.write(encode(fmt, rows))
    os.replace(tmp, path)
    return size


def ensure_data(data_dir: Path, fmt: str, size_mib: int, files: int) -> dict[str, Any]:
    """Generate ``fmt`` data (or reuse it when the manifest matches); returns its manifest
    entry: rows, bytes, dir, files."""
    manifest_path = data_dir / "manifest.json"
    manifest: dict[str, Any] = {}
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
    fdir = data_dir / fmt
    want = {"generator": GENERATOR_VERSION, "seed": SEED, "size_mib": size_mib, "files": files}
    entry = manifest.get(fmt)
    if entry and all(entry.get(k) == v for k, v in want.items()):
        paths = [fdir / name for name in entry["names"]]
        if (
            all(p.is_file() for p in paths)
            and sum(p.stat().st_size for p in paths) == entry["bytes"]
        ):
            print(
                f"  {fmt}: reusing {fdir} ({entry['bytes'] / MIB:.0f} MiB, {entry['rows']:,} rows)"
            )
            return {**entry, "dir": str(fdir), "paths": [str(p) for p in paths]}
    shutil.rmtree(fdir, ignore_errors=True)
    fdir.mkdir(parents=True)
    t0 = time.perf_counter()
    per_file = max(1, round(size_mib * MIB / files / bytes_per_row(fmt)))
    names = [f"part-{i:05d}.{EXTENSIONS[fmt]}" for i in range(files)]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        sizes = list(
            pool.map(
                write_file,
                [fmt] * files,
                [str(fdir / n) for n in names],
                range(files),
                [i * per_file for i in range(files)],
                [per_file] * files,
            )
        )
    entry = {**want, "rows": per_file * files, "bytes": sum(sizes), "names": names}
    manifest[fmt] = entry
    manifest_path.write_text(json.dumps(manifest, indent=2))
    print(
        f"  {fmt}: generated {files} files, {entry['bytes'] / MIB:.0f} MiB, "
        f"{entry['rows']:,} rows in {time.perf_counter() - t0:.1f} s"
    )
    return {**entry, "dir": str(fdir), "paths": [str(fdir / n) for n in names]}


def warm_page_cache(paths: list[str]) -> None:
    """Read the inputs once so every timed round reads from the page cache."""
    for p in paths:
        with open(p, "rb") as fh:
            while fh.read(16 * MIB):
                pass


# --- the two paths -------------------------------------------------------------------------


def pipeline_doc(fmt: str, path: str, sink: str = "parquet") -> dict[str, Any]:
    fmt_spec = (
        {"name": "json", "config": {"update_format": "raw", "lines": "single"}}
        if fmt == "json"
        else {"name": "csv", "config": {}}
    )
    return {
        "pipeline": "bench",
        "tables": {
            "events": {
                "columns": COLUMNS,
                "sink": {"name": sink},
                "connectors": [
                    {
                        "name": fmt,
                        "transport": {
                            "name": "file_input",
                            "config": {"path": path, "min_file_age": 0},
                        },
                        "format": fmt_spec,
                    }
                ],
            }
        },
    }


def spark_ddl(doc: dict[str, Any]) -> str:
    """The table's columns as a Spark read schema (TIMESTAMP -> TIMESTAMP_NTZ, ...)."""
    from airflow_connectors.catalog import parse_pipeline

    table = parse_pipeline(doc).table("events")
    return ", ".join(f"{c.name} {c.type.spark_ddl()}" for c in table.columns)


def engine_settings(work: Path, driver_memory: str) -> Any:
    from airflow_connectors.settings import Settings

    return Settings(
        state_store_url=f"sqlite:///{work}/state.db",
        warehouse=str(work / "wh"),
        spark_master="local[*]",
        spark_driver_memory=driver_memory,
    )


def run_engine(spark: Any, doc: dict[str, Any], work: Path, driver_memory: str) -> dict[str, Any]:
    """One engine ingest into a fresh state store and warehouse under ``work``."""
    from airflow_connectors.catalog import parse_pipeline
    from airflow_connectors.engine.runner import EmbeddedRunner
    from airflow_connectors.state.store import StateStore

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    settings = engine_settings(work, driver_memory)
    spec = parse_pipeline(doc)
    store = StateStore(settings.state_store_url)
    runner = EmbeddedRunner(spec, settings, store=store, spark=lambda: spark)
    jobs = spark_jobs(spark)
    t0 = time.perf_counter()
    report = runner.run()
    seconds = time.perf_counter() - t0
    end = time.time()
    first = first_task_launched(spark, spark_jobs(spark) - jobs)
    table = spec.table("events")
    out = runner.context(table, table.connectors[0]).sink().location()
    (rep,) = report.connectors.values()
    return {
        "seconds": seconds,
        # The "batch": from its first Spark task's launch to the end of the
        # commit (run() less discovery, planning and the job's start).
        "batch_seconds": end - first if first is not None else seconds,
        "out": out,
        "records": rep.records,
        "parse_errors": rep.parse_errors,
        "batches": rep.batches,
        "spark_started": report.spark_started,
    }


def spark_jobs(spark: Any) -> set[int]:
    """The ids of the session's jobs so far (the engine sets no job group here)."""
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup())


def first_task_launched(spark: Any, jobs: set[int]) -> float | None:
    """When the first task of ``jobs`` was launched (epoch seconds, from Spark's status
    store), or None."""
    tracker = spark.sparkContext.statusTracker()
    store = spark.sparkContext._jsc.sc().statusStore()
    times = []
    for job in jobs:
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else ():
            launched = store.lastStageAttempt(stage).firstTaskLaunchedTime()
            if launched.isDefined():
                times.append(launched.get().getTime() / 1000)
    return min(times) if times else None


def count_rows(spark: Any, path: str, out: str) -> int:
    """Rows of an output: a Delta table (through its log) or a Parquet folder."""
    if path == "engine-delta":
        from deltalake import DeltaTable

        return int(DeltaTable(out).to_pyarrow_dataset().count_rows())
    return int(spark.read.parquet(out).count())


def start_s3(data: dict[str, dict[str, Any]]) -> Any:
    """An S3 test server on 127.0.0.1 holding every generated file under ``<format>/``."""
    from airflow_connectors.testing.s3server import S3Server

    server = S3Server().start()
    server.create_bucket("bench")
    client = server.client()
    t0 = time.perf_counter()
    for fmt, d in data.items():
        for path in d["paths"]:
            client.upload_file(path, "bench", f"{fmt}/{os.path.basename(path)}")
    print(f"S3 test server {server.endpoint_url}: uploaded in {time.perf_counter() - t0:.1f} s")
    return server


def s3_doc(server: Any, fmt: str, key: str | None = None) -> dict[str, Any]:
    """The benchmark pipeline reading ``<format>/`` (or one ``key``) of the S3 test
    server into Parquet."""
    doc = pipeline_doc(fmt, "unused")
    (connector,) = doc["tables"]["events"]["connectors"]
    where = {"key": key} if key else {"prefix": f"{fmt}/"}
    connector["transport"] = {
        "name": "s3_input",
        "config": server.config("bench", relist_margin_s=0, **where),
    }
    return doc


def engine_path(sink: str) -> str:
    """The name of the engine's timed path into ``sink``."""
    return "engine" if sink == "parquet" else f"engine-{sink}"


#: DuckDB's types for the table's columns (``read_json``/``read_csv`` ``columns=``).
DUCKDB_TYPES = {"INT": "INTEGER"}

#: One DuckDB COPY, timed inside its process (without the interpreter's start and the
#: import): what the engine's batch is compared with.
DUCKDB_COPY = """
import sys, time, duckdb
src, out = sys.argv[1], sys.argv[2]
con = duckdb.connect()
t = time.perf_counter()
con.execute(f"COPY (SELECT * FROM {src}) TO '{out}' (FORMAT parquet, COMPRESSION snappy)")
print(time.perf_counter() - t)
"""


def duckdb_python() -> Path | None:
    """``bench/.venv``'s Python when it has DuckDB (``bench/setup.sh``), else None."""
    python = HERE / ".venv" / "bin" / "python"
    if not python.exists():
        return None
    ok = subprocess.run([str(python), "-c", "import duckdb"], capture_output=True).returncode
    return python if ok == 0 else None


def run_duckdb(python: Path, fmt: str, folder: str, work: Path) -> dict[str, Any]:
    """DuckDB's whole ``COPY (SELECT * FROM read_json/read_csv(...)) TO parquet`` of the
    same files with the table's column types, snappy as the engine's sink writes."""
    work.mkdir(parents=True, exist_ok=True)
    out = str(work / "duckdb.parquet")
    types = ", ".join(
        f"'{name}': '{DUCKDB_TYPES.get(t.split()[0], t.split()[0])}'" for name, t in COLUMNS.items()
    )
    files = os.path.join(folder, f"*.{EXTENSIONS[fmt]}")
    src = (
        f"read_json('{files}', format='newline_delimited', columns={{{types}}})"
        if fmt == "json"
        else f"read_csv('{files}', header=false, columns={{{types}}})"
    )
    done = subprocess.run(
        [str(python), "-c", DUCKDB_COPY, src, out], capture_output=True, text=True, check=True
    )
    return {"seconds": float(done.stdout.strip().splitlines()[-1]), "out": out}


def run_raw(spark: Any, fmt: str, ddl: str, src: str, work: Path) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out = str(work / "out")
    t0 = time.perf_counter()
    reader = spark.read.schema(ddl)
    df = reader.json(src) if fmt == "json" else reader.csv(src)
    df.write.parquet(out)
    return {"seconds": time.perf_counter() - t0, "out": out}


NOTHING_NEW = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    from airflow_connectors.engine.runner import EmbeddedRunner
    from airflow_connectors.settings import Settings
    from airflow_connectors.catalog import parse_pipeline
    from airflow_connectors.state.store import StateStore
    args = json.loads(sys.argv[1])
    settings = Settings(**args["settings"])
    def no_spark():
        raise RuntimeError("a run that finds nothing new started Spark")
    t1 = time.perf_counter()
    report = EmbeddedRunner(
        parse_pipeline(args["doc"]), settings, store=StateStore(settings.state_store_url),
        spark=no_spark,
    ).run()
    t2 = time.perf_counter()
    print(json.dumps({
        "run_seconds": t2 - t1, "total_seconds": t2 - t0, "batches": report.batches,
        "spark_started": report.spark_started, "pyspark_imported": "pyspark" in sys.modules,
    }))
    """
)


def nothing_new(doc: dict[str, Any], work: Path, driver_memory: str) -> dict[str, Any]:
    """A second run on an already-ingested store: in this process with a Spark factory
    that raises, and in a fresh interpreter (wall time including imports)."""
    from dataclasses import asdict

    from airflow_connectors.catalog import parse_pipeline
    from airflow_connectors.engine.runner import EmbeddedRunner
    from airflow_connectors.state.store import StateStore

    settings = engine_settings(work, driver_memory)
    started = []

    def no_spark() -> Any:
        started.append(True)
        raise RuntimeError("a run that finds nothing new started Spark")

    t0 = time.perf_counter()
    report = EmbeddedRunner(
        parse_pipeline(doc), settings, store=StateStore(settings.state_store_url), spark=no_spark
    ).run()
    in_process = time.perf_counter() - t0
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", NOTHING_NEW, json.dumps({"doc": doc, "settings": asdict(settings)})],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        sub: dict[str, Any] = {"error": proc.stderr.strip().splitlines()[-1:]}
    else:
        sub = json.loads(proc.stdout.strip().splitlines()[-1])
    ok = (
        not started
        and not report.spark_started
        and report.batches == 0
        and sub.get("spark_started") is False
        and sub.get("batches") == 0
    )
    return {
        "in_process_seconds": in_process,
        "subprocess_wall_seconds": wall,
        "subprocess": sub,
        "spark_started": bool(started) or report.spark_started or sub.get("spark_started", True),
        "ok": ok,
    }


# --- driver --------------------------------------------------------------------------------


def fmt_s(x: float) -> str:
    return f"{x:8.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time the engine against raw Spark ingesting JSON-lines and CSV into Parquet."
    )
    parser.add_argument("--size-mib", type=int, default=1024, help="data per format (MiB)")
    parser.add_argument("--files", type=int, default=64, help="files per format")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per path")
    parser.add_argument("--data-dir", type=Path, default=HERE / "data", help="generated inputs")
    parser.add_argument(
        "--out-dir", type=Path, default=HERE / "out", help="outputs (a temp folder below it)"
    )
    parser.add_argument("--formats", default="json,csv", help="comma-separated: json,csv")
    parser.add_argument(
        "--sinks", default="parquet", help="comma-separated engine sinks: parquet,delta"
    )
    parser.add_argument(
        "--s3",
        action="store_true",
        help="also time the engine reading the same files from an S3 test server on "
        "127.0.0.1 (s3_input, moto) into Parquet: the 'engine-s3' path",
    )
    parser.add_argument("--keep", action="store_true", help="keep the Parquet outputs")
    parser.add_argument(
        "--duckdb",
        action="store_true",
        help="also time DuckDB's whole COPY of the same files into Parquet in each round "
        "(bench/.venv from bench/setup.sh) and print engine / DuckDB per round",
    )
    parser.add_argument("--driver-memory", default="4g")
    args = parser.parse_args(argv)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = set(formats) - set(FORMATS)
    if unknown or not formats:
        parser.error(
            f"--formats: use json and/or csv, not {', '.join(sorted(unknown)) or '(none)'}"
        )
    sinks = [x.strip() for x in args.sinks.split(",") if x.strip()]
    if set(sinks) - set(SINKS) or not sinks:
        parser.error(f"--sinks: use parquet and/or delta, not {args.sinks!r}")
    if args.rounds < 1 or args.files < 1 or args.size_mib < 1:
        parser.error("--rounds, --files and --size-mib must be >= 1")

    import pyspark

    print(
        f"ingest benchmark: {args.size_mib} MiB x {args.files} files per format, "
        f"{args.rounds} rounds; {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"pyspark {pyspark.__version__}, pyarrow {pa.__version__}"
    )
    print(f"data: {args.data_dir}")
    args.data_dir.mkdir(parents=True, exist_ok=True)
    data = {f: ensure_data(args.data_dir, f, args.size_mib, args.files) for f in formats}

    args.out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="ingest-", dir=args.out_dir))
    print(f"outputs: {tmp}{' (kept)' if args.keep else ''}")

    from airflow_connectors.engine.spark import spark_session

    t0 = time.perf_counter()
    spark = spark_session(engine_settings(tmp / "session", args.driver_memory), "ingest-bench")
    print(
        f"Spark {spark.version} {spark.sparkContext.master} started in "
        f"{time.perf_counter() - t0:.1f} s; parquet codec "
        f"{spark.conf.get('spark.sql.parquet.compression.codec')}"
    )

    failures: list[str] = []
    results: dict[str, dict[str, Any]] = {}
    duck = duckdb_python() if args.duckdb else None
    if args.duckdb and duck is None:
        parser.error("--duckdb needs bench/.venv with DuckDB: run bench/setup.sh first")
    s3 = start_s3(data) if args.s3 else None
    try:
        for fmt in formats:
            d = data[fmt]
            src_glob = os.path.join(d["dir"], f"*.{EXTENSIONS[fmt]}")
            docs = {engine_path(k): pipeline_doc(fmt, src_glob, k) for k in sinks}
            if s3 is not None:
                docs["engine-s3"] = s3_doc(s3, fmt)
            doc = next(iter(docs.values()))
            ddl = spark_ddl(doc)
            print(
                f"\n== {fmt}: {len(d['paths'])} files, {d['bytes'] / MIB:.0f} MiB, {d['rows']:,} rows"
            )
            print(f"   raw schema: {ddl}")

            # Untimed warm-up on the first files (~1/8 of the data, at least one per core so
            # every Python worker starts): JIT, Python workers, data source planning; then
            # the page cache.
            t0 = time.perf_counter()
            n_warm = min(len(d["paths"]), max(os.cpu_count() or 1, len(d["paths"]) // 8), 10)
            warm = os.path.join(d["dir"], f"part-0000[0-{n_warm - 1}].{EXTENSIONS[fmt]}")
            for k in sinks:
                run_engine(
                    spark,
                    pipeline_doc(fmt, warm, k),
                    tmp / fmt / f"warm-{engine_path(k)}",
                    args.driver_memory,
                )
            if s3 is not None:  # one object: the S3 client and its connections
                first = os.path.basename(d["paths"][0])
                run_engine(
                    spark,
                    s3_doc(s3, fmt, key=f"{fmt}/{first}"),
                    tmp / fmt / "warm-s3",
                    args.driver_memory,
                )
            run_raw(spark, fmt, ddl, warm, tmp / fmt / "warm-raw")
            warm_page_cache(d["paths"])
            print(f"   warm-up ({n_warm} files each, page cache): {time.perf_counter() - t0:.1f} s")

            paths = [*docs, "raw", *(["duckdb"] if duck is not None else [])]
            times: dict[str, list[float]] = {p: [] for p in paths}
            batch_times: dict[str, list[float]] = {}
            nn: dict[str, Any] | None = None
            for r in range(args.rounds):
                order = paths[r % len(paths) :] + paths[: r % len(paths)]
                line = []
                failed_before = len(failures)
                for path in order:
                    work = tmp / fmt / f"{path}-{r + 1}"
                    os.sync()  # start each timed run without the previous run's dirty pages
                    gc.collect()
                    if path == "duckdb":
                        assert duck is not None
                        res = run_duckdb(duck, fmt, d["dir"], work)
                    elif path != "raw":
                        res = run_engine(spark, docs[path], work, args.driver_memory)
                        if res["records"] != d["rows"] or res["parse_errors"]:
                            failures.append(
                                f"{fmt} engine round {r + 1}: report says {res['records']:,} "
                                f"records, {res['parse_errors']} parse errors; expected {d['rows']:,}"
                            )
                    else:
                        res = run_raw(spark, fmt, ddl, d["dir"], work)
                    count = count_rows(spark, path, res["out"])
                    if count != d["rows"]:
                        failures.append(
                            f"{fmt} {path} round {r + 1}: {count:,} rows in the output, "
                            f"expected {d['rows']:,}"
                        )
                    times[path].append(res["seconds"])
                    if "batch_seconds" in res:
                        batch_times.setdefault(path, []).append(res["batch_seconds"])
                    line.append(f"{path} {res['seconds']:7.2f} s")
                    if path == paths[0] and r == args.rounds - 1:
                        nn = nothing_new(docs[path], work, args.driver_memory)
                        if not nn["ok"]:
                            failures.append(f"{fmt}: nothing-new run: {nn}")
                    if not args.keep:
                        shutil.rmtree(work, ignore_errors=True)
                check = "ok" if len(failures) == failed_before else "WRONG"
                print(f"   round {r + 1}: " + "   ".join(line) + f"   (rows {d['rows']:,} {check})")
            results[fmt] = {"times": times, "batch": batch_times, "nothing_new": nn, "data": d}
            if not args.keep:
                shutil.rmtree(tmp / fmt, ignore_errors=True)
    finally:
        spark.stop()
        if s3 is not None:
            s3.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    print("\n== summary (seconds; ratio = engine / raw Spark, lower is better)")
    header = (
        f"{'format':13} {'MiB':>6} {'rows':>11} {'eng min':>8} {'eng med':>8} {'raw min':>8} "
        f"{'raw med':>8} {'ratio med':>9} {'ratio min':>9} {'target':>7}  result"
    )
    print(header)
    print("-" * len(header))
    for fmt, res in results.items():
        w = res["times"]["raw"]
        for path, e in res["times"].items():
            if path in ("raw", "duckdb"):
                continue
            ratio_med = statistics.median(e) / statistics.median(w)
            ratio_min = min(e) / min(w)
            target = TARGETS[fmt]
            verdict = "PASS" if ratio_med <= target else "MISS"
            label = fmt if path == "engine" else f"{fmt}/{path.removeprefix('engine-')}"
            print(
                f"{label:13} {res['data']['bytes'] / MIB:6.0f} {res['data']['rows']:11,} "
                f"{fmt_s(min(e))} {fmt_s(statistics.median(e))} {fmt_s(min(w))} "
                f"{fmt_s(statistics.median(w))} {ratio_med:9.2f} {ratio_min:9.2f} "
                f"{'<=' + str(target):>7}  {verdict} (by median)"
            )
    for fmt, res in results.items():
        if "engine-s3" in res["times"]:
            local = statistics.median(res["times"]["engine"])
            remote = statistics.median(res["times"]["engine-s3"])
            print(
                f"S3 overhead ({fmt}): engine from the S3 test server {remote:.2f} s vs from local "
                f"files {local:.2f} s (median): x{remote / local:.2f}"
            )
    for fmt, res in results.items():
        if "duckdb" not in res["times"]:
            continue
        e, k = res["times"]["engine"], res["times"]["duckdb"]
        b = res["batch"]["engine"]
        rounds = [x / y for x, y in zip(b, k, strict=True)]
        print(
            f"DuckDB ({fmt}): COPY median {statistics.median(k):.2f} s (min {min(k):.2f}); "
            f"engine batch (first task -> commit) median {statistics.median(b):.2f} s, "
            f"/ DuckDB {statistics.median(b) / statistics.median(k):.2f}x by median, per round "
            f"{', '.join(f'{x:.2f}' for x in rounds)} (target <= 1.5x); engine run() / DuckDB "
            f"{statistics.median(e) / statistics.median(k):.2f}x"
        )
    for fmt, res in results.items():
        nn = res["nothing_new"]
        if nn is None:
            continue
        sub = nn["subprocess"]
        print(
            f"nothing new ({fmt}): run() {nn['in_process_seconds'] * 1000:.0f} ms in-process; "
            f"fresh interpreter {nn['subprocess_wall_seconds']:.2f} s wall "
            f"(run() {sub.get('run_seconds', float('nan')) * 1000:.0f} ms); "
            f"Spark started: {'yes' if nn['spark_started'] else 'no'}; "
            f"pyspark imported: {'yes' if sub.get('pyspark_imported') else 'no'}"
            f" -> {'OK' if nn['ok'] else 'FAIL'}"
        )
    if failures:
        print("\nCORRECTNESS FAILURES:")
        for f in failures:
            print(f"  {f}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
