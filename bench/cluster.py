#!/usr/bin/env python
"""The 1 GiB JSON-lines ingest on ``local[*]`` and on a Spark standalone cluster, and the
driver-side commit as the files per batch grow.

Every batch runs as the ingest task runs it: planned by discovery
(:func:`airflow_connectors.engine.discovery.discover`, as the DAG's discover task), then
``spark-submit ... ingest_batch.py --batch-id N`` with the operator's ``--conf``,
environment and, on the cluster, the package shipped to the executors
(``--py-files``, ``spark.pyspark.python`` = the cluster's executor Python, which cannot
import the repository; ``airflow_connectors.engine.package.submit_options``), built as
``ConnectorIngestOperator`` builds them.
The state store is a fresh PostgreSQL database (the scale-out deployment's store; or
``--state-store-url``); the warehouse is a folder under ``--work-dir`` (every process is
on this machine; the executors write there directly).

The cluster is :class:`airflow_connectors.testing.spark_standalone.SparkStandalone` on
127.0.0.1: a master and 2 workers x 1 core (``--workers``, ``--cores``).

1. **ingest**: the data of ``bench/ingest.py`` (``--size`` of JSON lines in ``--files``
   files, generated once and reused) in one batch per master, ``--rounds`` times. Prints
   throughput (MiB/s and rows/s from ``spark-submit`` start to the commit, and over the
   Spark tasks alone) and the batch's timeline: ``spark-submit`` start -> SparkSession
   ready -> first task -> last task done -> commit logged -> process exit.
2. **commit**: batches of ``--commit-files`` small files each (default 10, 100, 1000,
   5000; 10 rows per file), ``--commit-batches`` batches per size (default 2, each over
   new files in the watched folder). Prints per batch the Spark tasks' time, the
   driver-side commit (from the last task's end to the committed log line: collecting
   the receipts, the state-store transaction with the offsets, the publish into the
   table), and what share of ``spark-submit`` -> commit that is.

Task times come from Spark's event log (``spark.eventLog.enabled``, written to the work
folder), the commit from the job's own log line and the batch's ``committed_at`` in the
state store. The machine's load average is printed with each row: the machine is shared.
A benchmark reports; it does not judge (no asserts). Exit status 1 only when a batch's row
count is wrong or a spark-submit fails.

Usage: ``.venv/bin/python bench/cluster.py [--size 1GiB] [--masters local,cluster]
[--commit-files 10,100,1000,5000] [--rounds 1]``; quick: ``--size 64MiB --files 8
--commit-files 10,100``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import ingest  # the 1 GiB data set and its pipeline (bench/ingest.py)
import smallfiles  # folders of small JSON-lines files (bench/smallfiles.py)

HERE = Path(__file__).resolve().parent
APPLICATION = HERE.parent / "airflow_connectors" / "engine" / "submit" / "ingest_batch.py"
MIB = 1 << 20
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
#: Records per batch large enough that one batch takes every new file.
BATCH_RECORDS = 1 << 40


# --- arguments --------------------------------------------------------------------------------


def parse_size(text: str) -> int:
    """``1GiB``, ``1g``, ``256MiB``, ``256m`` or a number of MiB -> MiB."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([gGmM])?(?:i?[bB])?\s*", text)
    if m is None:
        raise argparse.ArgumentTypeError(f"--size {text!r}: use e.g. 1GiB, 256MiB or 64 (MiB)")
    value = float(m.group(1)) * (1024 if (m.group(2) or "m").lower() == "g" else 1)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--size {text!r}: at least 1 MiB")
    return round(value)


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected numbers separated by commas"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive numbers")
    return values


# --- spark-submit as the ingest operator runs it ---------------------------------------------


def operator_conf(master: str) -> dict[str, str]:
    """The ``--conf`` ConnectorIngestOperator gives spark-submit on ``master``."""
    from airflow_connectors.engine.spark import ingest_submit_conf

    conf = {"spark.ui.enabled": "false", "spark.log.level": "WARN", **ingest_submit_conf(master)}
    if master.startswith("local"):
        conf = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1", **conf}
    return conf


def shipping(master: str, executor_python: str | None) -> tuple[str | None, dict[str, str]]:
    """``--py-files`` and ``--conf`` that send the package to the executors, as the
    operator does with ``[connectors] executor_python`` set (engine/package.py)."""
    if executor_python is None:
        return None, {}
    try:
        from airflow_connectors.engine.package import submit_options
    except ImportError:  # before shipping existed: the executors run this venv's Python
        return None, {"spark.pyspark.python": sys.executable}
    from airflow_connectors.settings import Settings

    settings = Settings(state_store_url="", warehouse="", executor_python=executor_python)
    opts = submit_options(settings, master, sys.executable)
    return opts.py_files, dict(opts.conf)


def submit_command(
    master: str, batch_id: int, conf: dict[str, str], py_files: str | None
) -> list[str]:
    """spark-submit as SparkSubmitHook builds it for the ingest operator."""
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", master]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    if py_files:
        cmd += ["--py-files", py_files]
    cmd += ["--name", f"bench-cluster.batch-{batch_id}", str(APPLICATION)]
    return [*cmd, "--batch-id", str(batch_id)]


def log_time(line: str) -> float | None:
    """The epoch seconds of a job log line (``%(asctime)s``: local time, ms)."""
    try:
        return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


# --- state store ------------------------------------------------------------------------------


def fresh_pg_database() -> tuple[str, str] | None:
    """A new database on the PostgreSQL server on 127.0.0.1 (name, SQLAlchemy URL), or
    None when the server cannot be reached."""
    try:
        import psycopg

        name = f"bench_cluster_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"CREATE DATABASE {name}")
    except Exception as e:  # no server: the benchmark falls back to SQLite
        print(f"PostgreSQL on 127.0.0.1:5432 not usable ({type(e).__name__}: {e}); using SQLite")
        return None
    return name, f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def drop_pg_database(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# --- one batch --------------------------------------------------------------------------------


def connector_context(pipeline: str, source: str, warehouse: str) -> tuple[Any, Any]:
    """The benchmark's JSON-lines connector on ``source`` (a folder or a glob) under
    ``pipeline``, planning every new file into one batch: its spec and batch context."""
    from airflow_connectors.catalog import parse_pipeline
    from airflow_connectors.engine.discovery import context

    doc = ingest.pipeline_doc("json", source)
    doc["pipeline"] = pipeline
    (connector,) = doc["tables"]["events"]["connectors"]
    connector["max_batch_size"] = BATCH_RECORDS
    spec = parse_pipeline(doc)
    table = spec.table("events")
    return spec, context(spec, table, table.connectors[0], warehouse)


def event_timeline(event_dir: Path) -> dict[str, Any]:
    """Times (epoch seconds) and task placement from the run's Spark event log."""
    # Spark 4 writes rolling logs by default: eventlog_v2_<app>/events_<n>_<app>.
    files = sorted(
        (
            p
            for p in event_dir.rglob("*")
            if p.is_file() and p.name.startswith(("events_", "app-", "local-"))
        ),
        key=lambda p: int(p.name.split("_")[1]) if p.name.startswith("events_") else 0,
    )
    if not files:
        raise RuntimeError(f"no Spark event log in {event_dir}")
    out: dict[str, Any] = {
        "task_starts": [],
        "task_ends": [],
        "executors": {},
        "tasks_on": [],
        "failed_tasks": [],
        "executors_removed": [],
    }
    for line in (ln for f in files for ln in f.read_text().splitlines()):
        ev = json.loads(line)
        kind = ev.get("Event")
        if kind == "SparkListenerApplicationStart":
            out["app_start"] = ev["Timestamp"] / 1000
        elif kind == "SparkListenerExecutorAdded":
            info = ev["Executor Info"]
            out["executors"][ev["Executor ID"]] = info.get("Host")
            out.setdefault("first_executor", ev["Timestamp"] / 1000)
        elif kind == "SparkListenerTaskStart":
            info = ev["Task Info"]
            out["task_starts"].append(info["Launch Time"] / 1000)
            out["tasks_on"].append(f"{info['Executor ID']}@{info['Host']}")
        elif kind == "SparkListenerTaskEnd":
            out["task_ends"].append(ev["Task Info"]["Finish Time"] / 1000)
            reason = ev.get("Task End Reason", {}).get("Reason", "Success")
            if reason != "Success":
                out["failed_tasks"].append(reason)
        elif kind == "SparkListenerExecutorRemoved":
            out["executors_removed"].append(f"{ev['Executor ID']}: {ev.get('Removed Reason')}")
    return out


def run_batch_submit(
    master: str,
    batch_id: int,
    store: Any,
    work: Path,
    base_env: dict[str, str],
    py_files: str | None,
    ship_conf: dict[str, str],
) -> dict[str, Any]:
    """spark-submit the ingest job of ``batch_id``; returns its timeline in seconds from
    the spark-submit start."""
    event_dir = work / f"events-{batch_id}"
    event_dir.mkdir(parents=True)
    conf = {
        **operator_conf(master),
        **ship_conf,
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": event_dir.as_uri(),
        "spark.eventLog.compress": "false",
    }
    cmd = submit_command(master, batch_id, conf, py_files)
    # The operator's environment: this interpreter for the driver and, on local[*], the
    # executors' Python workers; the state store URL (in base_env).
    env = {**base_env, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    load = os.getloadavg()[0]
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    t_exit = time.time()
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"spark-submit of batch {batch_id} failed:\n{output[-4000:]}")
    marks: dict[str, float] = {}
    for line in output.splitlines():
        at = log_time(line)
        if at is None:
            continue
        if "Spark session ready in" in line:
            marks["session"] = at
        elif f"batch {batch_id} committed" in line:
            marks["commit"] = at
    if "commit" not in marks:
        raise RuntimeError(f"no commit line for batch {batch_id}:\n{output[-4000:]}")
    ev = event_timeline(event_dir)
    batch = store.load_batch(batch_id)
    last_task = max(ev["task_ends"])
    first_task = min(ev["task_starts"])
    return {
        "batch_id": batch_id,
        "load": load,
        "records": batch.records,
        "items": len(batch.plan.items),
        "tasks": len(ev["task_starts"]),
        "tasks_on": Counter(ev["tasks_on"]),
        "failed_tasks": ev["failed_tasks"],
        "executors_removed": ev["executors_removed"],
        "executors": ev["executors"],
        "to_session": marks.get("session", ev["app_start"]) - t0,
        "to_first_task": first_task - t0,
        "task_seconds": last_task - first_task,
        "collect": batch.committed_at - last_task,
        "commit_publish": marks["commit"] - batch.committed_at,
        "driver_commit": marks["commit"] - last_task,
        "to_commit": marks["commit"] - t0,
        "exit": t_exit - marks["commit"],
        "total": t_exit - t0,
    }


def plan(store: Any, ctx: Any) -> int:
    """Plan the new files as the discover task does (one batch)."""
    from airflow_connectors.state.store import ConnectorRef

    store.ensure_connector(ConnectorRef(ctx.pipeline, ctx.table.name, ctx.connector.name))
    from airflow_connectors.engine.discovery import discover

    found = discover(store, ctx, owner="bench:cluster")
    if len(found.batch_ids) != 1:
        raise RuntimeError(f"expected one planned batch, got {found.batch_ids}")
    return found.batch_ids[0]


def table_rows(warehouse: Path, pipeline: str) -> int:
    import pyarrow.dataset as ds

    files = sorted(str(p) for p in (warehouse / pipeline / "events").glob("*.parquet"))
    return int(ds.dataset(files, format="parquet").count_rows()) if files else 0


# --- the two parts ----------------------------------------------------------------------------


def ingest_part(
    masters: dict[str, dict[str, Any]],
    data: dict[str, Any],
    store: Any,
    work: Path,
    rounds: int,
    env: dict[str, str],
    failures: list[str],
) -> list[dict[str, Any]]:
    mib = data["bytes"] / MIB
    print(
        f"\n== ingest: {len(data['paths'])} files, {mib:.0f} MiB, {data['rows']:,} rows, one batch"
    )
    src = os.path.join(data["dir"], "*.json")
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        for name, m in masters.items():
            pipeline = f"ingest_{name}_{r + 1}"
            wh = work / f"wh-{pipeline}"
            _, ctx = connector_context(pipeline, src, str(wh))
            batch_id = plan(store, ctx)
            res = run_batch_submit(
                m["url"], batch_id, store, work / pipeline, env, m["py_files"], m["conf"]
            )
            res.update(master=name, round=r + 1, mib=mib)
            got = table_rows(wh, pipeline)
            if res["records"] != data["rows"] or got != data["rows"]:
                failures.append(
                    f"ingest {name} round {r + 1}: batch says {res['records']:,} records, "
                    f"table has {got:,}; expected {data['rows']:,}"
                )
            rows.append(res)
            print(
                f"   {name:8} round {r + 1}: to session {res['to_session']:5.1f} s, "
                f"to first task {res['to_first_task']:5.1f} s, tasks {res['task_seconds']:6.1f} s "
                f"({res['tasks']} tasks: {fmt_counter(res['tasks_on'])}), driver commit "
                f"{res['driver_commit']:5.2f} s, to commit {res['to_commit']:6.1f} s, exit "
                f"{res['exit']:4.1f} s -> {mib / res['to_commit']:6.1f} MiB/s, "
                f"{data['rows'] / res['to_commit']:,.0f} rows/s (load {res['load']:.1f}, "
                f"rows {'ok' if got == data['rows'] else 'WRONG'})"
            )
            print_incidents(res)
            shutil.rmtree(wh, ignore_errors=True)
    return rows


def commit_part(
    masters: dict[str, dict[str, Any]],
    sizes: list[int],
    batches: int,
    rows_per_file: int,
    data_dir: Path,
    store: Any,
    work: Path,
    env: dict[str, str],
    failures: list[str],
) -> list[dict[str, Any]]:
    print(
        f"\n== commit: batches of N small files ({rows_per_file} rows each), "
        f"{batches} batches per N, each over new files"
    )
    out: list[dict[str, Any]] = []
    for n in sizes:
        files = smallfiles.ensure_files(data_dir / "small", n, rows_per_file)
        sources = sorted(
            p for p in Path(files["dir"]).rglob("*.json") if not p.name.startswith("_")
        )
        for name, m in masters.items():
            pipeline = f"commit_{name}_{n}"
            watch = work / f"watch-{pipeline}"
            wh = work / f"wh-{pipeline}"
            _, ctx = connector_context(pipeline, str(watch), str(wh))
            for b in range(batches):
                folder = watch / f"b{b:02d}"
                folder.mkdir(parents=True)
                for src in sources:  # new keys, the same bytes
                    os.link(src, folder / f"{src.parent.name}-{src.name}")
                batch_id = plan(store, ctx)
                res = run_batch_submit(
                    m["url"], batch_id, store, work / pipeline, env, m["py_files"], m["conf"]
                )
                res.update(master=name, files=n, batch=b + 1)
                if res["records"] != n * rows_per_file:
                    failures.append(
                        f"commit {name} N={n} batch {b + 1}: {res['records']} records, "
                        f"expected {n * rows_per_file}"
                    )
                out.append(res)
                print(
                    f"   {name:8} N={n:5} batch {b + 1}: tasks {res['tasks']:2} "
                    f"{res['task_seconds']:6.2f} s, driver commit {res['driver_commit']:6.2f} s "
                    f"(collect {res['collect']:5.2f} + commit/publish "
                    f"{res['commit_publish']:5.2f}), to commit {res['to_commit']:5.1f} s, "
                    f"commit share {res['driver_commit'] / res['to_commit']:4.0%} "
                    f"(load {res['load']:.1f})"
                )
                print_incidents(res)
            got = table_rows(wh, pipeline)
            if got != n * rows_per_file * batches:
                failures.append(
                    f"commit {name} N={n}: table has {got} rows, expected {n * rows_per_file * batches}"
                )
            shutil.rmtree(wh, ignore_errors=True)
            shutil.rmtree(watch, ignore_errors=True)
    return out


# --- output -----------------------------------------------------------------------------------


def print_incidents(res: dict[str, Any]) -> None:
    """Task retries and lost executors of a run (they explain an outlier)."""
    if res["failed_tasks"]:
        print(f"      retried tasks: {', '.join(res['failed_tasks'])}")
    for removed in res["executors_removed"]:
        print(f"      executor removed: {removed}")


def fmt_counter(c: Counter[str]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(c.items()))


def med(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def print_summary(ingest_rows: list[dict[str, Any]], commit_rows: list[dict[str, Any]]) -> None:
    if ingest_rows:
        print("\n== ingest summary (median over rounds; seconds from spark-submit start)")
        print(
            f"{'master':8} {'MiB':>6} {'session':>8} {'1st task':>8} {'tasks':>7} "
            f"{'commit':>7} {'to commit':>9} {'exit':>5} {'MiB/s':>6} {'rows/s':>9} "
            f"{'MiB/s in tasks':>14}"
        )
        for name in dict.fromkeys(r["master"] for r in ingest_rows):
            rs = [r for r in ingest_rows if r["master"] == name]
            mib, rows = rs[0]["mib"], rs[0]["records"]
            to_commit = med(rs, "to_commit")
            print(
                f"{name:8} {mib:6.0f} {med(rs, 'to_session'):8.1f} {med(rs, 'to_first_task'):8.1f} "
                f"{med(rs, 'task_seconds'):7.1f} {med(rs, 'driver_commit'):7.2f} {to_commit:9.1f} "
                f"{med(rs, 'exit'):5.1f} {mib / to_commit:6.1f} {rows / to_commit:9,.0f} "
                f"{mib / med(rs, 'task_seconds'):14.1f}"
            )
    if commit_rows:
        print("\n== commit summary (median over the batches of each N; seconds)")
        print(
            f"{'master':8} {'files':>6} {'tasks':>5} {'task s':>7} {'collect':>7} "
            f"{'commit+publish':>14} {'driver commit':>13} {'ms/file':>7} {'to commit':>9} "
            f"{'share':>6}"
        )
        for name in dict.fromkeys(r["master"] for r in commit_rows):
            for n in dict.fromkeys(r["files"] for r in commit_rows):
                rs = [r for r in commit_rows if r["master"] == name and r["files"] == n]
                if not rs:
                    continue
                dc = med(rs, "driver_commit")
                print(
                    f"{name:8} {n:6} {statistics.median(r['tasks'] for r in rs):5.0f} "
                    f"{med(rs, 'task_seconds'):7.2f} {med(rs, 'collect'):7.2f} "
                    f"{med(rs, 'commit_publish'):14.2f} {dc:13.2f} {dc / n * 1000:7.2f} "
                    f"{med(rs, 'to_commit'):9.1f} {dc / med(rs, 'to_commit'):6.0%}"
                )


# --- driver -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="The 1 GiB JSON-lines ingest on local[*] and a Spark standalone cluster, "
        "and the driver-side commit as files per batch grow."
    )
    parser.add_argument("--size", type=parse_size, default=1024, help="ingest data (1GiB)")
    parser.add_argument("--files", type=int, default=64, help="files of the ingest data")
    parser.add_argument("--rounds", type=int, default=1, help="ingest rounds per master")
    parser.add_argument("--masters", default="local,cluster", help="local and/or cluster")
    parser.add_argument("--workers", type=int, default=2, help="cluster workers")
    parser.add_argument("--cores", type=int, default=1, help="cores per cluster worker")
    parser.add_argument(
        "--commit-files", type=int_list, default=[10, 100, 1000, 5000], help="files per batch"
    )
    parser.add_argument("--commit-batches", type=int, default=2, help="batches per size")
    parser.add_argument("--commit-rows", type=int, default=10, help="rows per small file")
    parser.add_argument("--skip-ingest", action="store_true", help="only the commit part")
    parser.add_argument("--skip-commit", action="store_true", help="only the ingest part")
    parser.add_argument("--data-dir", type=Path, default=HERE / "data", help="generated inputs")
    parser.add_argument("--work-dir", type=Path, default=HERE / "out", help="a temp folder below")
    parser.add_argument("--state-store-url", help="default: a fresh PostgreSQL database")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    names = [m.strip() for m in args.masters.split(",") if m.strip()]
    if not names or set(names) - {"local", "cluster"}:
        parser.error(f"--masters: local and/or cluster, not {args.masters!r}")

    import pyspark

    from airflow_connectors.state.store import StateStore
    from airflow_connectors.testing.spark_standalone import SparkStandalone

    print(
        f"cluster benchmark: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
        f"Python {sys.version.split()[0]}, pyspark {pyspark.__version__}"
    )
    args.data_dir.mkdir(parents=True, exist_ok=True)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cluster-", dir=args.work_dir))
    data = (
        None
        if args.skip_ingest
        else ingest.ensure_data(args.data_dir, "json", args.size, args.files)
    )
    if data is not None:
        ingest.warm_page_cache(data["paths"])
    pg = None if args.state_store_url else fresh_pg_database()
    url = args.state_store_url or (pg[1] if pg else f"sqlite:///{work}/state.db")
    store = StateStore(url)
    print(f"state store: {re.sub(r'//[^@/]*@', '//', url)}; work: {work}")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "AIRFLOW__CONNECTORS__STATE_STORE_URL": url,
        "SPARK_LOCAL_IP": "127.0.0.1",  # loopback only, on the cluster too
    }
    masters: dict[str, dict[str, Any]] = {}
    cluster = None
    failures: list[str] = []
    ingest_rows: list[dict[str, Any]] = []
    commit_rows: list[dict[str, Any]] = []
    try:
        if "local" in names:
            masters["local"] = {"url": "local[*]", "py_files": None, "conf": {}}
        if "cluster" in names:
            t0 = time.perf_counter()
            cluster = SparkStandalone(
                work / "spark",
                workers=args.workers,
                cores=args.cores,
                memory="2g",
                # Spark's default: the test harness's 10 s drops workers whose heartbeat
                # is late on a loaded machine, and the benchmark would time that.
                worker_timeout=60,
            ).start()
            py_files, conf = shipping(cluster.master_url, cluster.executor_python)
            masters["cluster"] = {"url": cluster.master_url, "py_files": py_files, "conf": conf}
            print(
                f"standalone {cluster.master_url}: {args.workers} workers x {args.cores} core(s) "
                f"up in {time.perf_counter() - t0:.1f} s; executors run "
                f"{conf.get('spark.pyspark.python', 'PYSPARK_PYTHON')}"
                f"{' with --py-files ' + Path(py_files).name if py_files else ''}"
            )
        if data is not None:
            ingest_rows = ingest_part(masters, data, store, work, args.rounds, env, failures)
        if not args.skip_commit:
            commit_rows = commit_part(
                masters,
                args.commit_files,
                args.commit_batches,
                args.commit_rows,
                args.data_dir,
                store,
                work,
                env,
                failures,
            )
    except RuntimeError as e:
        failures.append(str(e))
    finally:
        if cluster is not None:
            cluster.stop()
        store.close()
        if pg is not None:
            drop_pg_database(pg[0])
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print_summary(ingest_rows, commit_rows)
    print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if failures:
        print("\nFAILURES:")
        for f in failures:
            print(f"  {f}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
