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
  an ``s3_input`` connector (``--s3-files``, default 5,000 objects), against raw Spark
  reading them through Hadoop's S3A filesystem:
  ``spark.read.schema(ddl).json("s3a://bucket/in/").write.parquet(out)`` on the same
  session. S3A is not in pyspark: ``--s3`` resolves the jar set
  ``deploy/maven/spark-s3a/pom.xml`` (hadoop-aws 3.5.0 and the AWS SDK v2 modules it
  loads, ~13 MB, with Maven into the cache outside the repository on first use,
  ``airflow_connectors.testing.maven``) and starts the session with them
  (``--jars``); the session's Hadoop configuration gets ``fs.s3a.endpoint`` (the
  server's ``http://127.0.0.1:<port>``), path-style access, the server's credentials
  and region, no SSL. Both are warmed on 20 objects first. Without Maven or the jars
  (``--no-s3a``) the raw baseline is skipped with the reason.

Prints seconds, the ratio engine / raw, the table files written and the bound
``tasks + batch bytes / target_file_size`` (tasks as the engine packs them). A
benchmark reports; it does not judge (no asserts). Row counts are checked outside the
timed sections and reported.

Usage: ``.venv/bin/python bench/smallfiles.py [--files 5000,50000] [--rows 10] [--cli]
[--s3 [--s3-files 5000] [--no-s3a]]``
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


def s3_available() -> bool:
    """Whether this checkout has the ``s3_input`` transport and the S3 test server."""
    try:
        from airflow_connectors.testing.s3server import S3Server  # noqa: F401
        from airflow_connectors.transports import TRANSPORTS
    except ImportError:
        return False
    return "s3_input" in TRANSPORTS


def s3a_jars() -> tuple[list[str], str]:
    """The jars of S3A (``deploy/maven/spark-s3a``, resolved on first use) and, when they
    cannot be had, why (an empty list)."""
    from airflow_connectors.testing import maven

    t0 = time.perf_counter()
    try:
        jars = [str(p) for p in maven.resolve("spark-s3a")]
    except maven.MavenError as e:
        return [], str(e).splitlines()[0]
    if not jars:
        return [], "Maven resolved no jars for spark-s3a"
    size = sum(os.path.getsize(j) for j in jars) / MIB
    print(
        f"S3A jars (spark-s3a): {len(jars)} jars, {size:.1f} MiB, "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    return jars, ""


def s3a_conf(server: Any) -> dict[str, str]:
    """Hadoop settings that point S3A at the test server (loopback, no SSL, path-style,
    its credentials and region: no credential chain, no instance metadata, no lookups)."""
    from airflow_connectors.testing.s3server import ACCESS_KEY, REGION, SECRET_KEY

    return {
        "fs.s3a.endpoint": server.endpoint_url,
        "fs.s3a.endpoint.region": REGION,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.access.key": ACCESS_KEY,
        "fs.s3a.secret.key": SECRET_KEY,
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }


def s3_case(
    spark: Any, data: dict[str, Any], warm: dict[str, Any], work: Path, s3a: bool
) -> dict[str, Any]:
    """The files as objects in moto's S3 server: ingested by an s3_input connector and,
    with ``s3a`` (the session has the S3A jars), read by raw Spark through ``s3a://``."""
    from concurrent.futures import ThreadPoolExecutor

    from airflow_connectors.testing.s3server import S3Server

    (work / "s3").mkdir(parents=True, exist_ok=True)
    server = S3Server(log=work / "s3" / "moto.log").start()
    saved = dict(os.environ)
    try:
        client = server.client()
        bucket = "smallfiles"
        server.create_bucket(bucket)

        def upload(folder: str, prefix: str) -> int:
            root = Path(folder)
            paths = sorted(p for p in root.rglob("*.json") if not p.name.startswith("_"))

            def put(p: Path) -> None:
                key = f"{prefix}{p.relative_to(root)}"
                client.put_object(Bucket=bucket, Key=key, Body=p.read_bytes())

            with ThreadPoolExecutor(16) as pool:
                list(pool.map(put, paths))
            return len(paths)

        upload(warm["dir"], "warm/")
        t0 = time.perf_counter()
        count = upload(data["dir"], "in/")
        print(f"  uploaded {count:,} objects in {time.perf_counter() - t0:.1f} s")
        os.environ.update(server.env())

        def doc(prefix: str) -> dict[str, Any]:
            return pipeline_doc(
                {"name": "s3_input", "config": server.config(bucket, prefix=prefix)}
            )

        ddl = spark_ddl(doc("in/"))
        # Warm-up (untimed): the engine's S3 client in the Python workers, S3A's
        # filesystem and the SDK's classes in the JVM, on the 20 warm-up objects.
        run_engine(spark, doc("warm/"), work / "warm-engine")
        raw = None
        if s3a:
            hadoop = spark.sparkContext._jsc.hadoopConfiguration()
            for key, value in s3a_conf(server).items():
                hadoop.set(key, value)
            run_raw(spark, f"s3a://{bucket}/warm/", work / "warm-raw", ddl)
            raw = run_raw(spark, f"s3a://{bucket}/in/", work / "raw", ddl)
            raw["rows"] = spark.read.parquet(raw["out"]).count()
        eng = run_engine(spark, doc("in/"), work / "engine")
        eng["rows"] = spark.read.parquet(eng["out"]).count()
        return {"engine": eng, "raw": raw}
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
    parser.add_argument(
        "--no-s3a", action="store_true", help="with --s3: no raw Spark s3a:// baseline"
    )
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
    s3 = args.s3 and s3_available()
    jars: list[str] = []
    no_s3a = "--no-s3a" if args.no_s3a else ""
    if s3 and not args.no_s3a:
        jars, no_s3a = s3a_jars()
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS")
    if jars:
        # The session starts with S3A's jars (pyspark reads this when it starts the JVM);
        # the variable is put back after, so that --cli's processes do not inherit it.
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {','.join(jars)} pyspark-shell"
    t0 = time.perf_counter()
    try:
        spark = spark_session(settings(tmp / "session"), "smallfiles-bench")
    finally:
        if submit_args is None:
            os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
        else:
            os.environ["PYSPARK_SUBMIT_ARGS"] = submit_args
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
            if not s3:
                print("   s3_input is not available in this checkout; skipped")
            else:
                case = s3_case(spark, data, warm, tmp / "s3", bool(jars))
                eng, raw = case["engine"], case["raw"]
                total = data["total_rows"]
                print(
                    f"   engine (s3_input)  {eng['seconds']:7.2f} s   {eng['files']:5} table files "
                    f"(bound tasks + bytes/target = {eng['tasks']} + "
                    f"{eng['bound'] - eng['tasks']:.3f}), {eng['batches']} batch(es); rows "
                    f"{'ok' if eng['records'] == total and eng['rows'] == total else 'WRONG'}"
                )
                if raw is None:
                    print(f"   raw Spark s3a://   skipped: {no_s3a}")
                else:
                    print(
                        f"   raw Spark s3a://   {raw['seconds']:7.2f} s   {raw['files']:5} files "
                        f"(schema given); rows {'ok' if raw['rows'] == total else 'WRONG'}"
                    )
                    print(f"   ratio engine/raw s3a {eng['seconds'] / raw['seconds']:.2f}")
                res = {"files": args.s3_files, "engine": eng}
                if raw is not None:
                    res["raw"] = raw
                results.append(("s3_input", res))
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
    print("(raw: file_input's with the schema inferred; s3_input's through s3a:// with it given)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
