#!/usr/bin/env python
"""Whole-process comparison: the engine's CLI against raw Spark, Polars, DuckDB and the
table-format floors, on the same generated files.

Every timed run is a process of its own, started and waited for here (wall clock from
the start to the exit); rounds interleave the paths of a case, the first path rotating
each round. Paths:

* ``engine``: ``.venv/bin/airflow-connectors run SPEC`` on embedded defaults (a SQLite
  state store and a warehouse in a fresh folder, ``local[*]`` Spark with
  ``--driver-memory``), a ``file_input`` connector into the table's sink. Besides the
  wall time, the engine's own log gives ``batch``: from its first batch's Spark tasks
  (the ``work item(s) in N Spark task(s)`` line, logged once the session is up) to its
  last ``committed`` line, so without Python's start, discovery and Spark's start; and
  ``to commit``: the process's start to that line (the wall time adds Spark's stop and
  the CLI's summary, which reads each table back to print its row count);
* ``spark``: ``spark.read.schema(s).json(dir)`` (``.csv``, ``.parquet``)
  ``.write.parquet(out)`` in a process of the project's ``.venv``, the session made by
  the engine's ``spark_session`` as ``bench/ingest.py`` makes it; ``job`` is the read and
  write alone;
* ``polars``: ``scan_ndjson``/``scan_csv``/``scan_parquet(..., schema=s).sink_parquet``,
  ``duckdb``: ``COPY (SELECT * FROM read_json/read_csv(..., columns=s)) TO out (FORMAT
  parquet)``: both in ``bench/.venv`` (``bench/setup.sh``, ``bench/requirements.txt``:
  neither is a dependency of the project), snappy as the others;
* ``fastavro``: fastavro -> pyarrow -> Parquet, one process per core over the files;
* ``delta-rs``, ``pyiceberg``: the JSON files read with ``pyarrow.json`` (explicit
  schema) and written with ``write_deltalake`` / a pyiceberg SQL catalog's ``append``:
  the floor of the ``delta`` and ``iceberg`` sinks (``write`` is the write alone).

Row counts of every output are checked after each run, outside its clock. Exit status:
0 unless a count is wrong (or the engine failed), then 1.

Usage: ``.venv/bin/python bench/compare.py [--size-mib 64] [--files 8] [--rounds 3]
[--cases json,csv,avro,parquet,smallfiles,delta,iceberg]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROJECT_PY = ROOT / ".venv" / "bin" / "python"
CLI = ROOT / ".venv" / "bin" / "airflow-connectors"
BENCH_PY = HERE / ".venv" / "bin" / "python"
MIB = 1 << 20
CASES = ("json", "csv", "avro", "parquet", "smallfiles", "delta", "iceberg")
#: The paths of each case, in their first round's order.
PATHS = {
    "json": ("engine", "spark", "polars", "duckdb"),
    "csv": ("engine", "spark", "polars", "duckdb"),
    "avro": ("engine", "fastavro", "duckdb"),
    "parquet": ("engine", "spark", "polars", "duckdb"),
    "smallfiles": ("engine", "spark", "duckdb", "polars"),
    "delta": ("engine", "delta-rs"),
    "iceberg": ("engine", "pyiceberg"),
}
#: The input files each case reads.
INPUT = {
    "json": "json",
    "csv": "csv",
    "avro": "avro",
    "parquet": "parquet",
    "smallfiles": "smallfiles",
    "delta": "json",
    "iceberg": "json",
}
SINK = {"delta": "delta", "iceberg": "iceberg"}
EXT = {"json": "json", "csv": "csv", "avro": "avro", "parquet": "parquet", "smallfiles": "json"}
#: The table's columns (bench/ingest.py's) in each tool's types.
POLARS_TYPES = {
    "id": "Int64",
    "user_name": "String",
    "amount": "Float64",
    "qty": "Int32",
    "ts": "Datetime",
    "flag": "Boolean",
    "note": "String",
}
DUCKDB_TYPES = {
    "id": "BIGINT",
    "user_name": "VARCHAR",
    "amount": "DOUBLE",
    "qty": "INTEGER",
    "ts": "TIMESTAMP",
    "flag": "BOOLEAN",
    "note": "VARCHAR",
}
SMALL_ROWS = 10


# --- workers: one timed process each (run by the project's or the bench interpreter) ------


def _arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("user_name", pa.string()),
            pa.field("amount", pa.float64()),
            pa.field("qty", pa.int32()),
            pa.field("ts", pa.timestamp("us")),
            pa.field("flag", pa.bool_()),
            pa.field("note", pa.string()),
        ]
    )


def worker_spark(job: dict[str, Any]) -> dict[str, Any]:
    from airflow_connectors.engine.spark import spark_session
    from airflow_connectors.settings import Settings

    t0 = time.perf_counter()
    settings = Settings(
        state_store_url=f"sqlite:///{job['out']}.state.db",
        warehouse=job["out"] + ".wh",
        spark_master="local[*]",
        spark_driver_memory=job["driver_memory"],
    )
    spark = spark_session(settings, "compare-raw-spark")
    session = time.perf_counter() - t0
    t0 = time.perf_counter()
    reader = spark.read
    if job["input"] != "parquet":
        reader = reader.schema(job["ddl"])
    src = job["dir"]
    df = getattr(reader, {"smallfiles": "json"}.get(job["input"], job["input"]))(src)
    df.write.parquet(job["out"])
    seconds = time.perf_counter() - t0
    spark.stop()
    return {"job": seconds, "session": session}


def worker_polars(job: dict[str, Any]) -> dict[str, Any]:
    import polars as pl

    t0 = time.perf_counter()
    schema = {
        c: getattr(pl, t)("us") if t == "Datetime" else getattr(pl, t)
        for c, t in POLARS_TYPES.items()
    }
    glob = job["glob"]
    kind = job["input"]
    if kind in ("json", "smallfiles"):
        lf = pl.scan_ndjson(glob, schema=schema)
    elif kind == "csv":
        lf = pl.scan_csv(glob, has_header=False, schema=schema)
    else:
        lf = pl.scan_parquet(glob)
    os.makedirs(job["out"], exist_ok=True)
    lf.sink_parquet(os.path.join(job["out"], "data.parquet"), compression="snappy")
    return {"job": time.perf_counter() - t0, "version": pl.__version__}


def worker_duckdb(job: dict[str, Any]) -> dict[str, Any]:
    import duckdb

    t0 = time.perf_counter()
    con = duckdb.connect()
    cols = "{" + ", ".join(f"'{c}': '{t}'" for c, t in DUCKDB_TYPES.items()) + "}"
    glob = job["glob"].replace("'", "''")
    kind = job["input"]
    if kind in ("json", "smallfiles"):
        src = f"read_json('{glob}', format='newline_delimited', columns={cols})"
    elif kind == "csv":
        src = (
            f"read_csv('{glob}', header=false, delim=',', quote='\"', escape='\"', columns={cols})"
        )
    elif kind == "avro":
        con.execute("LOAD avro")
        src = f"read_avro('{glob}')"
    else:
        src = f"read_parquet('{glob}')"
    os.makedirs(job["out"], exist_ok=True)
    out = os.path.join(job["out"], "data.parquet").replace("'", "''")
    con.execute(f"COPY (SELECT * FROM {src}) TO '{out}' (FORMAT parquet, COMPRESSION snappy)")
    con.close()
    return {"job": time.perf_counter() - t0, "version": duckdb.__version__}


def worker_duckdb_avro_check(job: dict[str, Any]) -> dict[str, Any]:
    """Whether DuckDB's avro extension installs (it is downloaded on first use)."""
    import duckdb

    con = duckdb.connect()
    try:
        con.execute("INSTALL avro")
        con.execute("LOAD avro")
    except Exception as e:
        # The first line, without the download address.
        return {"ok": False, "reason": re.sub(r' at URL "[^"]*"', "", str(e).splitlines()[0])}
    return {"ok": True}


def _avro_file_to_parquet(src: str, out: str) -> int:
    import fastavro
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _arrow_schema()
    n = 0
    with open(src, "rb") as fh, pq.ParquetWriter(out, schema, compression="snappy") as w:
        batch: list[dict[str, Any]] = []
        for record in fastavro.reader(fh):
            batch.append(record)
            if len(batch) == 65536:
                w.write_table(pa.Table.from_pylist(batch, schema=schema))
                n += len(batch)
                batch = []
        if batch:
            w.write_table(pa.Table.from_pylist(batch, schema=schema))
            n += len(batch)
    return n


def worker_fastavro(job: dict[str, Any]) -> dict[str, Any]:
    from concurrent.futures import ProcessPoolExecutor

    t0 = time.perf_counter()
    os.makedirs(job["out"], exist_ok=True)
    files = job["files"]
    outs = [os.path.join(job["out"], f"part-{i:05d}.parquet") for i in range(len(files))]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(_avro_file_to_parquet, files, outs))
    return {"job": time.perf_counter() - t0}


def _read_json_arrow(files: list[str]) -> Any:
    import pyarrow as pa
    import pyarrow.json as pj

    schema = _arrow_schema()
    opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    return pa.concat_tables([pj.read_json(f, parse_options=opts) for f in files])


def worker_deltars(job: dict[str, Any]) -> dict[str, Any]:
    from deltalake import write_deltalake

    t0 = time.perf_counter()
    table = _read_json_arrow(job["files"])
    t1 = time.perf_counter()
    write_deltalake(job["out"], table, mode="append")
    t2 = time.perf_counter()
    return {"job": t2 - t0, "read": t1 - t0, "write": t2 - t1}


def worker_pyiceberg(job: dict[str, Any]) -> dict[str, Any]:
    from pyiceberg.catalog.sql import SqlCatalog

    t0 = time.perf_counter()
    table = _read_json_arrow(job["files"])
    t1 = time.perf_counter()
    os.makedirs(job["out"], exist_ok=True)
    catalog = SqlCatalog(
        "bench",
        uri=f"sqlite:///{job['out']}/catalog.db",
        warehouse=f"file://{job['out']}",
        init_catalog_tables="true",
    )
    catalog.create_namespace("bench")
    ice = catalog.create_table("bench.events", schema=table.schema)
    ice.append(table)
    t2 = time.perf_counter()
    return {"job": t2 - t0, "read": t1 - t0, "write": t2 - t1}


WORKERS = {
    "spark": worker_spark,
    "polars": worker_polars,
    "duckdb": worker_duckdb,
    "duckdb-avro-check": worker_duckdb_avro_check,
    "fastavro": worker_fastavro,
    "delta-rs": worker_deltars,
    "pyiceberg": worker_pyiceberg,
}
#: The interpreter each worker runs in: the benchmark's own env for DuckDB and Polars.
BENCH_ENV_WORKERS = {"polars", "duckdb", "duckdb-avro-check"}


# --- data ---------------------------------------------------------------------------------


def _ingest() -> Any:
    sys.path.insert(0, str(HERE))
    import ingest

    return ingest


def _encode_other(fmt: str, path: str, key: int, first_id: int, n: int) -> int:
    """The rows of JSON file ``key`` (same ids and values) as Avro or Parquet."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    ingest = _ingest()
    schema = _arrow_schema()
    tmp = f"{path}.tmp"
    chunks = []
    for chunk, start in enumerate(range(0, n, ingest.CHUNK_ROWS)):
        rows = ingest.make_rows(
            key * 1_000_000 + chunk, first_id + start, min(ingest.CHUNK_ROWS, n - start)
        )
        ts = pc.strptime(rows["ts"], "%Y-%m-%dT%H:%M:%S", "us")
        chunks.append(
            pa.table({**{c: rows[c] for c in schema.names if c != "ts"}, "ts": ts})
            .select(schema.names)
            .cast(schema)
        )
    if fmt == "parquet":
        with pq.ParquetWriter(tmp, schema, compression="snappy") as w:
            for t in chunks:
                w.write_table(t, row_group_size=1 << 20)
    else:
        import fastavro

        avro_schema = {
            "type": "record",
            "name": "events",
            "fields": [
                {"name": "id", "type": "long"},
                {"name": "user_name", "type": ["null", "string"]},
                {"name": "amount", "type": ["null", "double"]},
                {"name": "qty", "type": ["null", "int"]},
                {
                    "name": "ts",
                    "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
                },
                {"name": "flag", "type": ["null", "boolean"]},
                {"name": "note", "type": ["null", "string"]},
            ],
        }
        parsed = fastavro.parse_schema(avro_schema)
        records = (
            r
            for t in chunks
            for r in t.set_column(4, "ts", pc.cast(t["ts"], pa.int64())).to_pylist()
        )
        with open(tmp, "wb") as fh:
            fastavro.writer(fh, parsed, records, codec="null")
    os.replace(tmp, path)
    return os.path.getsize(path)


def ensure_derived(data_dir: Path, fmt: str, base: dict[str, Any]) -> dict[str, Any]:
    """Avro or Parquet files holding the rows of the JSON files ``base``, file by file."""
    from concurrent.futures import ProcessPoolExecutor

    fdir = data_dir / fmt
    manifest_path = data_dir / f"{fdir.name}.manifest.json"  # outside the globs
    want = {"json_bytes": base["bytes"], "rows": base["rows"], "files": base["files"], "v": 1}
    names = [f"part-{i:05d}.{fmt}" for i in range(base["files"])]
    paths = [fdir / n for n in names]
    if manifest_path.is_file():
        got = json.loads(manifest_path.read_text())
        if {k: got.get(k) for k in want} == want and all(p.is_file() for p in paths):
            print(f"  {fmt}: reusing {fdir} ({got['bytes'] / MIB:.0f} MiB, {got['rows']:,} rows)")
            return {**got, "dir": str(fdir), "paths": [str(p) for p in paths]}
    shutil.rmtree(fdir, ignore_errors=True)
    fdir.mkdir(parents=True)
    t0 = time.perf_counter()
    per_file = base["rows"] // base["files"]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        sizes = list(
            pool.map(
                _encode_other,
                [fmt] * len(paths),
                [str(p) for p in paths],
                range(len(paths)),
                [i * per_file for i in range(len(paths))],
                [per_file] * len(paths),
            )
        )
    entry = {**want, "bytes": sum(sizes)}
    manifest_path.write_text(json.dumps(entry))
    print(
        f"  {fmt}: generated {len(paths)} files, {entry['bytes'] / MIB:.0f} MiB, "
        f"{entry['rows']:,} rows in {time.perf_counter() - t0:.1f} s"
    )
    return {**entry, "dir": str(fdir), "paths": [str(p) for p in paths]}


def ensure_smallfiles(data_dir: Path, files: int) -> dict[str, Any]:
    """``files`` JSON-lines files of 10 rows each."""
    ingest = _ingest()
    fdir = data_dir / "smallfiles"
    manifest_path = data_dir / f"{fdir.name}.manifest.json"  # outside the globs
    want = {"files": files, "rows_per_file": SMALL_ROWS, "v": 1}
    names = [f"part-{i:06d}.json" for i in range(files)]
    paths = [fdir / n for n in names]
    if manifest_path.is_file():
        got = json.loads(manifest_path.read_text())
        if {k: got.get(k) for k in want} == want and all(p.is_file() for p in paths):
            print(f"  smallfiles: reusing {fdir} ({files} files)")
            return {**got, "dir": str(fdir), "paths": [str(p) for p in paths]}
    shutil.rmtree(fdir, ignore_errors=True)
    fdir.mkdir(parents=True)
    rows = ingest.make_rows(7_777, 0, files * SMALL_ROWS)
    lines = bytes(ingest.encode("json", rows)).splitlines(keepends=True)
    total = 0
    for i, p in enumerate(paths):
        chunk = b"".join(lines[i * SMALL_ROWS : (i + 1) * SMALL_ROWS])
        p.write_bytes(chunk)
        total += len(chunk)
    entry = {**want, "rows": files * SMALL_ROWS, "bytes": total}
    manifest_path.write_text(json.dumps(entry))
    print(f"  smallfiles: generated {files} files of {SMALL_ROWS} rows ({total / MIB:.1f} MiB)")
    return {**entry, "dir": str(fdir), "paths": [str(p) for p in paths]}


# --- running the paths -------------------------------------------------------------------


LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\w+) ([\w.]+): (.*)$")
RECORDS = re.compile(r"\+(\d+) records \((\d+) batches, (\d+) parse errors")


def _log_time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def engine_doc(case: str, glob: str) -> dict[str, Any]:
    ingest = _ingest()
    kind = INPUT[case]
    fmt: dict[str, Any] = {
        "json": {"name": "json", "config": {"update_format": "raw", "lines": "single"}},
        "smallfiles": {"name": "json", "config": {"update_format": "raw", "lines": "single"}},
        "csv": {"name": "csv", "config": {}},
        "avro": {"name": "avro", "config": {}},
        "parquet": {"name": "parquet", "config": {}},
    }[kind]
    return {
        "pipeline": "bench",
        "tables": {
            "events": {
                "columns": ingest.COLUMNS,
                "sink": {"name": SINK.get(case, "parquet")},
                "connectors": [
                    {
                        "name": "src",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": glob, "min_file_age": 0},
                        },
                        "format": fmt,
                    }
                ],
            }
        },
    }


def run_engine(case: str, glob: str, work: Path, driver_memory: str) -> dict[str, Any]:
    """One ``airflow-connectors run`` of the case's pipeline into a fresh store and
    warehouse under ``work``."""
    work.mkdir(parents=True)
    spec = work / "pipeline.yaml"
    doc = engine_doc(case, glob)
    spec.write_text(json.dumps(doc, indent=1))  # JSON is YAML
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(work / "home"),
        "AIRFLOW__CONNECTORS__SPARK_MASTER": "local[*]",
        "AIRFLOW__CONNECTORS__SPARK_DRIVER_MEMORY": driver_memory,
        "AIRFLOW__CONNECTORS__EXECUTION": "spark_submit",
    }
    cmd = [
        str(CLI),
        "run",
        str(spec),
        "--state-store-url",
        f"sqlite:///{work}/state.db",
        "--warehouse",
        str(work / "wh"),
        "--show",
        "0",
    ]
    start = time.time()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    first_task = last_commit = None
    commits = 0
    for line in proc.stderr.splitlines():
        m = LOG_LINE.match(line)
        if not m:
            continue
        msg = m.group(4)
        if " work item(s) in " in msg and first_task is None:
            first_task = _log_time(m.group(1))
        elif " committed: " in msg:
            last_commit = _log_time(m.group(1))
            commits += 1
    rec = RECORDS.search(proc.stdout)
    res: dict[str, Any] = {
        "wall": wall,
        "rc": proc.returncode,
        "work": work,
        "doc": doc,
        "records": int(rec.group(1)) if rec else None,
        "parse_errors": int(rec.group(3)) if rec else None,
        "batches": commits,
    }
    if first_task is not None and last_commit is not None:
        res["batch"] = last_commit - first_task
        res["to_commit"] = last_commit - start
    if proc.returncode != 0:
        res["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
        (work / "stderr.log").write_text(f"{proc.stderr}\n--- stdout ---\n{proc.stdout}")
    return res


def run_worker(kind: str, job: dict[str, Any], timeout: float = 3600) -> dict[str, Any]:
    py = BENCH_PY if kind in BENCH_ENV_WORKERS else PROJECT_PY
    cmd = [str(py), str(Path(__file__).resolve()), "--worker", kind, json.dumps(job)]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, check=False, env=env, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {
            "wall": time.perf_counter() - t0,
            "rc": -1,
            "error": f"timed out after {timeout:.0f} s",
        }
    wall = time.perf_counter() - t0
    res: dict[str, Any] = {"wall": wall, "rc": proc.returncode}
    out = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and out:
        res.update(json.loads(out[-1]))
    else:
        res["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return res


def count_output(case: str, path: str, res: dict[str, Any]) -> tuple[int | None, int | None]:
    """(rows, table files) of a run's output, read after the run."""
    import pyarrow.dataset as ds

    if path == "engine":
        from airflow_connectors.catalog import parse_pipeline
        from airflow_connectors.engine.context import table_sink

        spec = parse_pipeline(res["doc"])
        table = spec.table("events")
        sink = table_sink(spec.name, table, str(res["work"] / "wh"))
        sink.state_store_url = f"sqlite:///{res['work']}/state.db"
        location = sink.location()
        files = sum(1 for _ in Path(location).rglob("*.parquet")) if os.path.isdir(location) else 0
        if case == "delta":
            from deltalake import DeltaTable

            dt = DeltaTable(location)
            return int(dt.to_pyarrow_dataset().count_rows()), len(dt.file_uris())
        if case == "iceberg":
            with sink.catalog() as catalog:  # type: ignore[attr-defined]
                t = catalog.load_table(sink.identifier())  # type: ignore[attr-defined]
                return int(t.scan().count()), files
        if not os.path.isdir(location):
            return 0, 0
        d = ds.dataset(location, format="parquet")
        return int(d.count_rows()), len(d.files)
    out = res["out"]
    if path == "delta-rs":
        from deltalake import DeltaTable

        dt = DeltaTable(out)
        return int(dt.to_pyarrow_dataset().count_rows()), len(dt.file_uris())
    if path == "pyiceberg":
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog("bench", uri=f"sqlite:///{out}/catalog.db", warehouse=f"file://{out}")
        t = catalog.load_table("bench.events")
        return int(t.scan().count()), sum(1 for _ in Path(out).rglob("*.parquet"))
    d = ds.dataset(out, format="parquet")
    return int(d.count_rows()), len(d.files)


def run_path(case: str, path: str, data: dict[str, Any], work: Path, args: Any) -> dict[str, Any]:
    kind = INPUT[case]
    glob = os.path.join(data["dir"], f"*.{EXT[kind]}")
    if path == "engine":
        return run_engine(case, glob, work, args.driver_memory)
    work.mkdir(parents=True)
    out = str(work / "out")
    job: dict[str, Any] = {"input": kind, "dir": data["dir"], "glob": glob, "out": out}
    if path == "spark":
        job.update(ddl=spark_ddl(), driver_memory=args.driver_memory)
        job["dir"] = glob
    elif path in ("fastavro", "delta-rs", "pyiceberg"):
        job["files"] = data["paths"]
    res = run_worker(path, job)
    res["out"] = out
    return res


def spark_ddl() -> str:
    ingest = _ingest()
    return ingest.spark_ddl(ingest.pipeline_doc("json", "unused"))


def load_avg() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


def machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    with open("/proc/meminfo") as fh:
        mem = int(fh.readline().split()[1]) / (1 << 20)
    return f"{os.cpu_count()} cores ({model or platform.machine()}), {mem:.0f} GiB RAM, {platform.platform()}"


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def fmt_times(xs: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in xs) or "-"


# --- driver --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Whole processes on the same files: the engine's CLI against raw Spark, "
        "Polars, DuckDB and the Delta/Iceberg floors."
    )
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated: {','.join(CASES)}"
    )
    parser.add_argument("--size-mib", type=int, default=64, help="JSON-lines (and CSV) MiB")
    parser.add_argument("--files", type=int, default=8, help="files per format")
    parser.add_argument("--small-files", type=int, default=2000, help="files of 10 JSON rows")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per path")
    parser.add_argument("--data-dir", type=Path, default=HERE / "data" / "compare")
    parser.add_argument("--out-dir", type=Path, default=HERE / "out")
    parser.add_argument("--driver-memory", default="4g", help="spark.driver.memory (engine, spark)")
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed first runs")
    parser.add_argument("--setup", action="store_true", help="run bench/setup.sh first")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("job", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(WORKERS[args.worker](json.loads(args.job))))
        return 0
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if not cases or set(cases) - set(CASES):
        parser.error(f"--cases: from {','.join(CASES)}, not {args.cases!r}")
    if args.setup or not BENCH_PY.exists():
        if not args.setup:
            print("bench/.venv missing: running bench/setup.sh")
        subprocess.run(["bash", str(HERE / "setup.sh")], check=True)

    load_before = load_avg()
    print(
        f"compare: cases {','.join(cases)}; {args.size_mib} MiB x {args.files} files, {args.rounds} rounds"
    )
    print(f"machine: {machine()}; load average before: {load_before}")
    versions = subprocess.run(
        [
            str(BENCH_PY),
            "-c",
            "import duckdb, polars; print(duckdb.__version__, polars.__version__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    import pyspark

    print(f"pyspark {pyspark.__version__}; bench/.venv: duckdb {versions[0]}, polars {versions[1]}")

    args.data_dir.mkdir(parents=True, exist_ok=True)
    ingest = _ingest()
    data: dict[str, dict[str, Any]] = {}
    needed = {INPUT[c] for c in cases}
    for fmt in ("json", "csv"):
        if fmt in needed or (fmt == "json" and needed & {"avro", "parquet"}):
            data[fmt] = ingest.ensure_data(args.data_dir, fmt, args.size_mib, args.files)
    for fmt in ("avro", "parquet"):
        if fmt in needed:
            data[fmt] = ensure_derived(args.data_dir, fmt, data["json"])
    if "smallfiles" in needed:
        data["smallfiles"] = ensure_smallfiles(args.data_dir, args.small_files)

    notes: list[str] = []
    paths_of = {c: list(PATHS[c]) for c in cases}
    if "avro" in cases:
        check = run_worker("duckdb-avro-check", {}, timeout=120)
        if not check.get("ok"):
            paths_of["avro"].remove("duckdb")
            reason = check.get("reason") or check.get("error")
            notes.append(
                f"avro: DuckDB's avro extension is not available here ({reason}); no duckdb path"
            )
            print(f"  {notes[-1]}")
        notes.append(
            "avro: no raw Spark path (Spark's Avro source is the spark-avro package, not installed)"
        )

    args.out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="compare-", dir=args.out_dir))
    failures: list[str] = []
    results: dict[str, dict[str, Any]] = {}
    try:
        if not args.no_warmup:
            # Untimed: the jars, the Python libraries and both environments into the page
            # cache (a first JVM start here is seconds slower than the next).
            t0 = time.perf_counter()
            # One file of the first case, copied into a folder of its own.
            src = Path(data[INPUT[cases[0]]]["paths"][0])
            one_dir = tmp / "warm-in"
            one_dir.mkdir()
            shutil.copy(src, one_dir / src.name)
            one = {"dir": str(one_dir), "paths": [str(one_dir / src.name)]}
            for p in paths_of[cases[0]]:
                run_path(cases[0], p, one, tmp / f"warm-{p}", args)
            print(f"warm-up ({cases[0]}, one file, each path): {time.perf_counter() - t0:.1f} s")
        for case in cases:
            d = data[INPUT[case]]
            ingest.warm_page_cache(d["paths"])
            paths = paths_of[case]
            la0 = load_avg()
            print(
                f"\n== {case}: {len(d['paths'])} {INPUT[case]} files, {d['bytes'] / MIB:.1f} MiB, "
                f"{d['rows']:,} rows; paths {', '.join(paths)}; load {la0}"
            )
            runs: dict[str, list[dict[str, Any]]] = {p: [] for p in paths}
            for r in range(args.rounds):
                order = paths[r % len(paths) :] + paths[: r % len(paths)]
                line = []
                for path in order:
                    os.sync()
                    work = tmp / case / f"{path}-{r + 1}"
                    res = run_path(case, path, d, work, args)
                    if res.get("rc") != 0:
                        msg = f"{case} {path} round {r + 1}: exit status {res.get('rc')}: {res.get('error')}"
                        if path == "engine":  # what it left: committed rows or none
                            log = args.out_dir / f"failed-{case}-{path}-{r + 1}.log"
                            (work / "stderr.log").replace(log)
                            try:
                                rows, _ = count_output(case, path, res)
                            except Exception as e:
                                rows = f"unreadable ({type(e).__name__}: {e})"
                            msg += f" (the table holds {rows} rows; its log: {log})"
                            failures.append(msg)
                        else:
                            notes.append(msg)
                        print(f"   {msg}")
                        shutil.rmtree(work, ignore_errors=True)
                        continue
                    rows, nfiles = count_output(case, path, res)
                    res["rows"], res["table_files"] = rows, nfiles
                    if rows != d["rows"]:
                        failures.append(
                            f"{case} {path} round {r + 1}: {rows:,} rows, expected {d['rows']:,}"
                        )
                    if path == "engine" and (
                        res.get("records") != d["rows"] or res.get("parse_errors")
                    ):
                        failures.append(
                            f"{case} engine round {r + 1}: report says {res.get('records')} records, "
                            f"{res.get('parse_errors')} parse errors; expected {d['rows']:,}"
                        )
                    runs[path].append({k: v for k, v in res.items() if k not in ("doc", "work")})
                    extra = f" (batch {res['batch']:.2f})" if "batch" in res else ""
                    extra += f" (job {res['job']:.2f})" if "job" in res else ""
                    line.append(f"{path} {res['wall']:.2f}{extra}")
                    shutil.rmtree(work, ignore_errors=True)
                print(f"   round {r + 1}: " + "   ".join(line))
            results[case] = {
                "runs": runs,
                "load_before": la0,
                "load_after": load_avg(),
                "data": {k: d[k] for k in ("rows", "bytes")},
            }
            shutil.rmtree(tmp / case, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    load_after = load_avg()
    report(results, cases)
    print(f"\nmachine: {machine()}")
    print(f"load average (1, 5, 15 min): before {load_before}, after {load_after}")
    for case, res in results.items():
        print(f"  {case}: {res['load_before']} -> {res['load_after']}")
    for n in notes:
        print(f"note: {n}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "cases": results,
                    "load_before": load_before,
                    "load_after": load_after,
                    "machine": machine(),
                    "notes": notes,
                },
                indent=1,
                default=str,
            )
        )
    if failures:
        print("\nCORRECTNESS FAILURES:")
        for f in failures:
            print(f"  {f}")
        return 1
    return 0


def report(results: dict[str, dict[str, Any]], cases: list[str]) -> None:
    print(
        "\n== per path (seconds; wall = the whole process; inner = the engine's batch from its log, else the tool's own read+write)"
    )
    header = f"{'case':11} {'path':10} {'wall per round':28} {'min':>7} {'median':>7} {'inner med':>9} {'to commit':>9} {'files':>6}"
    print(header)
    print("-" * len(header))
    for case in cases:
        if case not in results:
            continue
        for path, runs in results[case]["runs"].items():
            walls = [r["wall"] for r in runs]
            inner = [
                r.get("batch", r.get("job"))
                for r in runs
                if r.get("batch", r.get("job")) is not None
            ]
            commit = [r["to_commit"] for r in runs if "to_commit" in r]
            files = runs[-1]["table_files"] if runs else None
            print(
                f"{case:11} {path:10} {fmt_times(walls):28} {min(walls) if walls else float('nan'):7.2f} "
                f"{med(walls):7.2f} {med(inner):9.2f} {med(commit) if commit else float('nan'):9.2f} "
                f"{files if files is not None else '-':>6}"
            )
            writes = [r["write"] for r in runs if "write" in r]
            if writes:
                print(
                    f"{'':11} {'':10} (write alone: median {med(writes):.2f}, read {med([r['read'] for r in runs]):.2f})"
                )
    print(
        "\n== ratios by median (engine = its process's wall time, batch = its batch from the "
        "log; spark job = raw Spark's read+write without its session's start; lower is "
        "better for the engine)"
    )
    pairs = [
        ("eng/spark", "wall", "spark"),
        ("batch/sjob", "batch", "spark job"),
        ("eng/duckdb", "wall", "duckdb"),
        ("batch/duckdb", "batch", "duckdb"),
        ("eng/polars", "wall", "polars"),
        ("batch/polars", "batch", "polars"),
        ("eng/floor", "wall", "floor"),
        ("batch/floor", "batch", "floor"),
    ]
    header = f"{'case':11} " + " ".join(f"{label:>12}" for label, _, _ in pairs)
    print(header)
    print("-" * len(header))
    for case in cases:
        if case not in results:
            continue
        runs = results[case]["runs"]
        engine = {
            "wall": med([r["wall"] for r in runs.get("engine", [])]),
            "batch": med([r["batch"] for r in runs.get("engine", []) if "batch" in r]),
        }
        others = {
            "spark": [r["wall"] for r in runs.get("spark", [])],
            "spark job": [r["job"] for r in runs.get("spark", []) if "job" in r],
            "duckdb": [r["wall"] for r in runs.get("duckdb", [])],
            "polars": [r["wall"] for r in runs.get("polars", [])],
            "floor": [
                r["wall"] for p in ("fastavro", "delta-rs", "pyiceberg") for r in runs.get(p, [])
            ],
        }
        cells = []
        for _, mine, other in pairs:
            ok = bool(others[other])
            cells.append(f"{engine[mine] / med(others[other]):12.2f}" if ok else f"{'-':>12}")
        print(f"{case:11} " + " ".join(cells))
    print(
        "  (floor: fastavro -> pyarrow -> Parquet for avro, delta-rs for delta, pyiceberg for iceberg)"
    )


if __name__ == "__main__":
    sys.exit(main())
