#!/usr/bin/env python
"""Many small files: the engine against raw Spark on folders of tiny JSON-lines files.

For each ``--files`` count (default 5,000 and 50,000) of ``--rows`` rows each (default
10), generated once under ``--data-dir`` and reused, times:

* engine (warm): ``EmbeddedRunner(spec, ...).run()`` in this process on the session
  below: file_input discovery, planning, the Spark job (work items packed into tasks by
  size) and the commit into a fresh state store and Parquet table;
* raw (warm): ``spark.read.json(folder).write.parquet(out)`` on the same session
  (schema inferred, as a user would write it), and with the table's schema given;
* with ``--cli``: ``airflow-connectors run`` as a user runs it (a fresh process that
  starts its own Spark) against a raw Spark script in a fresh process, wall clock;
* with ``--s3`` (when the ``s3_input`` transport exists): the same files as objects in
  moto's S3 server on 127.0.0.1 (``airflow_connectors.testing.s3server``), ingested by
  an ``s3_input`` connector (``--s3-files``, default 5,000 objects).

Prints seconds, the ratio engine / raw, the table files written and the bound
``tasks + batch bytes / target_file_size`` (tasks as the engine packs them). A
benchmark reports; it does not judge (no asserts). Row counts are checked outside the
timed sections and reported.

Usage: ``.venv/bin/python bench/smallfiles.py [--files 5000,50000] [--rows 10] [--cli]
[--s3]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MIB = 1 << 20
COLUMNS = {"id": "BIGINT NOT NULL", "user_name": "VARCHAR", "amount": "DOUBLE", "qty": "INT"}
GENERATOR_VERSION = 1


# --- data ---------------------------------------------------------------------------------


def ensure_files(root: Path, files: int, rows: int) -> dict[str, Any]:
    """``files`` JSON-lines files of ``rows`` rows under ``root/<files>x<rows>`` (reused
    when already there); returns folder, rows and bytes."""
    folder = root / f"{files}x{rows}"
    manifest = folder / "_manifest.json"  # '_' names are skipped by file_input and Spark
    want = {"generator": GENERATOR_VERSION, "files": files, "rows": rows}
    if manifest.is_file():
        have = json.loads(manifest.read_text())
        if {k: have.get(k) for k in want} == want:
            return {**have, "dir": str(folder)}
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    total = 0
    for f in range(files):
        lines = []
        for i in range(f * rows, (f + 1) * rows):
            lines.append(
                f'{{"id":{i},"user_name":"user-{i % 977}","amount":{i * 0.25},"qty":{i % 50}}}'
            )
        data = ("\n".join(lines) + "\n").encode()
        # Sub-folders of 1,000 files, as drop folders are often laid out by day or hour.
        sub = folder / f"d{f // 1000:03d}"
        if f % 1000 == 0:
            sub.mkdir()
        (sub / f"f{f:06d}.json").write_bytes(data)
        total += len(data)
    info = {**want, "total_rows": files * rows, "bytes": total}
    manifest.write_text(json.dumps(info))
    print(
        f"  generated {files:,} files ({total / MIB:.1f} MiB) in {time.perf_counter() - t0:.1f} s"
    )
    return {**info, "dir": str(folder)}


def warm_page_cache(folder: str) -> None:
    for root, _dirs, names in os.walk(folder):
        for n in names:
            with open(os.path.join(root, n), "rb") as fh:
                fh.read()


# --- the engine ---------------------------------------------------------------------------


def pipeline_doc(transport: dict[str, Any]) -> dict[str, Any]:
    return {
        "pipeline": "bench",
        "tables": {
            "events": {
                "columns": COLUMNS,
                "connectors": [
                    {
                        "name": "small",
                        "transport": transport,
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        },
    }


def file_transport(folder: str) -> dict[str, Any]:
    return {"name": "file_input", "config": {"path": folder, "min_file_age": 0}}


def spark_ddl(doc: dict[str, Any]) -> str:
    from airflow_connectors.catalog import parse_pipeline

    table = parse_pipeline(doc).table("events")
    return ", ".join(f"{c.name} {c.type.spark_ddl()}" for c in table.columns)


def settings(work: Path) -> Any:
    from airflow_connectors.settings import Settings

    return Settings(
        state_store_url=f"sqlite:///{work}/state.db",
        warehouse=str(work / "wh"),
        spark_master="local[*]",
        spark_driver_memory="2g",
    )


def table_parts(folder: str) -> int:
    return sum(1 for p in Path(folder).rglob("*.parquet"))


def run_engine(spark: Any, doc: dict[str, Any], work: Path) -> dict[str, Any]:
    """One engine ingest into a fresh state store and warehouse under ``work``."""
    from airflow_connectors.catalog import parse_pipeline
    from airflow_connectors.engine.batch import pack
    from airflow_connectors.engine.runner import EmbeddedRunner
    from airflow_connectors.state.store import StateStore

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spec = parse_pipeline(doc)
    store = StateStore(settings(work).state_store_url)
    runner = EmbeddedRunner(spec, settings(work), store=store, spark=lambda: spark)
    t0 = time.perf_counter()
    report = runner.run(raise_on_failure=False)
    seconds = time.perf_counter() - t0
    for endpoint, message in report.failed.items():
        print(f"   FAILED {endpoint}: {message}")
    table = spec.table("events")
    conn = table.connectors[0]
    sink = runner.context(table, conn).sink()
    (rep,) = report.connectors.values()
    # The tasks the engine packed each batch into (from the committed plans).
    tasks = 0
    bytes_read = 0
    for batch_id in range(1, rep.batches + 1):
        try:
            plan = store.load_batch(batch_id).plan
        except Exception:
            continue
        tasks += len(
            pack(
                plan.items,
                conn.max_partition_bytes,
                conn.open_cost_bytes,
                spark.sparkContext.defaultParallelism,
            )
        )
    status = store.status(runner.context(table, conn).ref)
    if status is not None:
        bytes_read = status.total_bytes
    store.close()
    target = getattr(sink.config, "target_file_size", 128 * MIB)
    return {
        "seconds": seconds,
        "out": sink.location(),
        "records": rep.records,
        "batches": rep.batches,
        "files": table_parts(sink.location()),
        "tasks": tasks,
        "bound": tasks + bytes_read / target,
    }


def run_raw(spark: Any, src: str, work: Path, ddl: str | None) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out = str(work / "out")
    t0 = time.perf_counter()
    reader = spark.read if ddl is None else spark.read.schema(ddl)
    reader.option("recursiveFileLookup", "true").json(src).write.parquet(out)
    return {"seconds": time.perf_counter() - t0, "out": out, "files": table_parts(out)}


# --- fresh processes (--cli) --------------------------------------------------------------

RAW_SCRIPT = textwrap.dedent(
    """
    import sys, time
    t0 = time.perf_counter()
    from airflow_connectors.engine.spark import spark_session
    from airflow_connectors.settings import Settings
    spark = spark_session(Settings(state_store_url="sqlite://", warehouse=sys.argv[2]), "raw")
    spark.read.option("recursiveFileLookup", "true").json(sys.argv[1]).write.parquet(sys.argv[2])
    spark.stop()
    print(time.perf_counter() - t0)
    """
)


def cli_runs(doc: dict[str, Any], src: str, work: Path) -> dict[str, Any]:
    """``airflow-connectors run`` and a raw Spark script, each a fresh process."""
    import yaml

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spec_file = work / "pipeline.yaml"
    spec_file.write_text(yaml.safe_dump(doc))
    cli = str(Path(sys.executable).parent / "airflow-connectors")
    env = {**os.environ, "AIRFLOW_HOME": str(work / "airflow")}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            cli,
            "run",
            str(spec_file),
            "--state-store-url",
            f"sqlite:///{work}/state.db",
            "--warehouse",
            str(work / "wh"),
            "--show",
            "0",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    engine = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
    t0 = time.perf_counter()
    raw = subprocess.run(
        [sys.executable, "-c", RAW_SCRIPT, src, str(work / "raw")],
        capture_output=True,
        text=True,
        check=False,
    )
    raw_wall = time.perf_counter() - t0
    if raw.returncode != 0:
        print(raw.stderr[-2000:], file=sys.stderr)
    return {
        "engine": engine,
        "engine_ok": proc.returncode == 0,
        "raw": raw_wall,
        "raw_ok": raw.returncode == 0,
        "files": table_parts(str(work / "wh" / "bench" / "events")),
        "raw_files": table_parts(str(work / "raw")),
    }


# --- s3_input (--s3) ----------------------------------------------------------------------


def s3_case(spark: Any, data: dict[str, Any], work: Path) -> dict[str, Any] | None:
    """The files as objects in moto's S3 server, ingested by an s3_input connector."""
    try:
        from airflow_connectors.testing.s3server import S3Server
        from airflow_connectors.transports import TRANSPORTS

        if "s3_input" not in TRANSPORTS:
            return None
    except ImportError:
        return None
    from concurrent.futures import ThreadPoolExecutor

    (work / "s3").mkdir(parents=True, exist_ok=True)
    server = S3Server(log=work / "s3" / "moto.log").start()
    saved = dict(os.environ)
    try:
        client = server.client()
        bucket = "smallfiles"
        server.create_bucket(bucket)
        root = Path(data["dir"])
        paths = sorted(p for p in root.rglob("*.json") if not p.name.startswith("_"))
        t0 = time.perf_counter()

        def put(p: Path) -> None:
            client.put_object(Bucket=bucket, Key=f"in/{p.relative_to(root)}", Body=p.read_bytes())

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(put, paths))
        print(f"  uploaded {len(paths):,} objects in {time.perf_counter() - t0:.1f} s")
        os.environ.update(server.env())
        config = server.config(bucket, prefix="in/")
        doc = pipeline_doc({"name": "s3_input", "config": config})
        return run_engine(spark, doc, work / "engine")
    finally:
        os.environ.clear()
        os.environ.update(saved)
        server.stop()


# --- driver -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", default="5000,50000", help="comma-separated file counts")
    parser.add_argument("--rows", type=int, default=10, help="rows per file")
    parser.add_argument("--data-dir", type=Path, default=HERE / "data" / "smallfiles")
    parser.add_argument("--out-dir", type=Path, default=HERE / "out")
    parser.add_argument("--cli", action="store_true", help="also time fresh processes")
    parser.add_argument("--s3", action="store_true", help="also time s3_input (moto)")
    parser.add_argument("--s3-files", type=int, default=5000)
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.files.split(",") if x.strip()]

    import pyspark

    from airflow_connectors.engine.spark import spark_session

    print(
        f"small files benchmark: {', '.join(f'{c:,}' for c in counts)} files of {args.rows} "
        f"JSON rows; {os.cpu_count()} cores, pyspark {pyspark.__version__}"
    )
    args.out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="smallfiles-", dir=args.out_dir))
    t0 = time.perf_counter()
    spark = spark_session(settings(tmp / "session"), "smallfiles-bench")
    print(f"Spark {spark.version} {spark.sparkContext.master} in {time.perf_counter() - t0:.1f} s")
    results: list[tuple[str, dict[str, Any]]] = []
    try:
        # Warm-up: the JVM, Python workers and planner on a tiny folder (untimed).
        warm = ensure_files(args.data_dir, 20, args.rows)
        run_engine(spark, pipeline_doc(file_transport(warm["dir"])), tmp / "warm-engine")
        run_raw(spark, warm["dir"], tmp / "warm-raw", None)
        for files in counts:
            data = ensure_files(args.data_dir, files, args.rows)
            warm_page_cache(data["dir"])
            doc = pipeline_doc(file_transport(data["dir"]))
            ddl = spark_ddl(doc)
            print(
                f"\n== {files:,} files, {data['bytes'] / MIB:.1f} MiB, {data['total_rows']:,} rows"
            )
            raw = run_raw(spark, data["dir"], tmp / f"raw-{files}", None)
            raw_schema = run_raw(spark, data["dir"], tmp / f"raws-{files}", ddl)
            eng = run_engine(spark, doc, tmp / f"engine-{files}")
            rows_ok = (
                eng["records"] == data["total_rows"]
                and spark.read.parquet(eng["out"]).count() == data["total_rows"]
                and spark.read.parquet(raw["out"]).count() == data["total_rows"]
            )
            print(
                f"   engine      {eng['seconds']:7.2f} s   {eng['files']:5} table files "
                f"(bound tasks + bytes/target = {eng['tasks']} + "
                f"{eng['bound'] - eng['tasks']:.3f}), {eng['batches']} batch(es)"
            )
            print(
                f"   raw Spark   {raw['seconds']:7.2f} s   {raw['files']:5} files (schema inferred)"
            )
            print(
                f"   raw+schema  {raw_schema['seconds']:7.2f} s   {raw_schema['files']:5} files "
                "(schema given)"
            )
            print(
                f"   ratio engine/raw {eng['seconds'] / raw['seconds']:.2f}, "
                f"engine/raw+schema {eng['seconds'] / raw_schema['seconds']:.2f}; "
                f"rows {'ok' if rows_ok else 'WRONG'}"
            )
            res = {"files": files, "engine": eng, "raw": raw, "raw_schema": raw_schema}
            if args.cli:
                cli = cli_runs(doc, data["dir"], tmp / f"cli-{files}")
                print(
                    f"   fresh processes: airflow-connectors run {cli['engine']:7.2f} s "
                    f"({cli['files']} table files{'' if cli['engine_ok'] else ', FAILED'}); "
                    f"raw Spark script {cli['raw']:7.2f} s ({cli['raw_files']} files"
                    f"{'' if cli['raw_ok'] else ', FAILED'})"
                )
                res["cli"] = cli
            results.append(("file_input", res))
            shutil.rmtree(tmp / f"engine-{files}", ignore_errors=True)
            shutil.rmtree(tmp / f"raw-{files}", ignore_errors=True)
            shutil.rmtree(tmp / f"raws-{files}", ignore_errors=True)
        if args.s3:
            data = ensure_files(args.data_dir, args.s3_files, args.rows)
            print(f"\n== s3_input: {args.s3_files:,} objects, {data['bytes'] / MIB:.1f} MiB")
            s3 = s3_case(spark, data, tmp / "s3")
            if s3 is None:
                print("   s3_input is not available in this checkout; skipped")
            else:
                print(
                    f"   engine (s3_input) {s3['seconds']:7.2f} s   {s3['files']} table files "
                    f"(bound {s3['tasks']} + {s3['bound'] - s3['tasks']:.3f}); rows "
                    f"{'ok' if s3['records'] == data['total_rows'] else 'WRONG'}"
                )
                results.append(("s3_input", {"files": args.s3_files, "engine": s3}))
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print("\n== summary (seconds)")
    print(
        f"{'source':10} {'files':>7} {'engine':>8} {'raw':>8} {'ratio':>6} {'tables':>7} {'bound':>7}"
    )
    for source, res in results:
        eng = res["engine"]
        raw = res.get("raw")
        print(
            f"{source:10} {res['files']:7,} {eng['seconds']:8.2f} "
            f"{raw['seconds'] if raw else float('nan'):8.2f} "
            f"{eng['seconds'] / raw['seconds'] if raw else float('nan'):6.2f} "
            f"{eng['files']:7} {eng['bound']:7.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
