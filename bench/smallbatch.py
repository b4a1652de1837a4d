#!/usr/bin/env python
"""Per-batch overhead: one small batch from ``spark-submit`` to its commit.

A watched folder (``file_input``, JSON lines, a Parquet table) gets one new small file
per round; the batch is planned as the DAG's discover task plans it
(:func:`airflow_connectors.engine.discovery.discover`), then ingested exactly as the
ingest task runs it: ``spark-submit ... airflow_connectors/engine/submit/ingest_batch.py
--batch-id N`` with the operator's ``--conf`` (``spark.ui.enabled=false``,
``spark.log.level=WARN``, :func:`airflow_connectors.engine.spark.ingest_submit_conf`,
the loopback driver address on ``local``) and environment (``PYSPARK_PYTHON``, the state
store URL in ``AIRFLOW__CONNECTORS__STATE_STORE_URL``).

Each round prints the wall time from ``spark-submit``'s start to the batch's commit (the
job's ``committed`` log line) and to the process's exit, and a breakdown taken from the
job's log lines and the driver's Python process start:

* ``jvm``: spark-submit's launcher and the driver JVM, until it starts the Python driver;
* ``py``: the Python driver's start and first imports, until the job's first log line;
* ``plan``: the engine's imports, loading the batch plan from the state store,
  preparing the sink, until the batch asks for Spark;
* ``wait``: what the batch then still waits for the SparkSession (the job starts it
  with its first line, so it overlaps ``plan``);
* ``batch``: the Spark job over the batch's items, the state-store commit and the
  publish (until the job's ``committed`` line);
* ``exit``: from the commit to the process's exit (Spark's shutdown).

``session`` is the SparkSession's start on its own (SparkContext, executors on a
cluster), ``cpu`` the CPU seconds of spark-submit and all its processes (a figure that
other load on the machine disturbs less than wall time).

Min / median / max over ``--rounds`` (default 5) after ``--warmup`` untimed rounds
(default 1). ``--cluster`` runs the same on a Spark standalone cluster on 127.0.0.1
(2 workers x 1 core, :class:`airflow_connectors.testing.spark_standalone.SparkStandalone`),
shipping the package to the executors as the ingest operator does. ``--conf K=V`` and
``--env K=V`` add to (or override) what the operator passes, to measure one setting;
``--no-cds`` leaves out the driver's class-data-sharing archive. A benchmark reports; it
does not judge (no asserts).

``--execution spark_connect`` runs each batch as the ingest task does with
``execution: spark_connect``: a new client process per round (the task's process) that
connects to a warm Spark Connect server (started here on the same master:
:class:`airflow_connectors.testing.spark_connect.SparkConnectServer`, on the standalone
cluster with ``--cluster``), sends the package as its session's artifact and runs
:func:`airflow_connectors.engine.batch.run_batch` on it. Each round prints the seconds
from the task's start (the client's first line, before it imports the engine or pyspark)
to the batch's commit, split into ``connect`` (client session and artifact) and
``batch`` (the job on the server, the state-store commit and the publish), and the
process's whole wall time (``total``, with the interpreter's start and exit).

``--warm`` (with ``--execution spark_connect``) forks each round's client from a process
that imported the batch path's modules first (pandas, pyspark's Spark Connect client,
the engine), as :class:`airflow_connectors.airflow.executors.WarmLocalExecutor`'s task
processes start; its CPU seconds are not counted.

Usage: ``.venv/bin/python bench/smallbatch.py [--rounds 5] [--cluster] [--conf K=V]...
[--execution spark_submit|spark_connect]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
APPLICATION = REPO / "airflow_connectors" / "engine" / "submit" / "ingest_batch.py"
COLUMNS = {"id": "BIGINT NOT NULL", "user_name": "VARCHAR", "amount": "DOUBLE", "qty": "INT"}
ROWS = 20
#: The breakdown's segments, in order, and the log lines that end them.
SEGMENTS = ("jvm", "py", "plan", "wait", "batch", "exit")


def pipeline_doc(folder: Path) -> dict[str, Any]:
    """A pipeline with one ``file_input`` connector on ``folder`` into a Parquet table."""
    return {
        "pipeline": "smallbatch",
        "tables": {
            "events": {
                "columns": COLUMNS,
                "connectors": [
                    {
                        "name": "drop",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(folder), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        },
    }


def drop_file(folder: Path, n: int) -> None:
    """The ``n``-th small JSON-lines file of the watched folder (written, then renamed)."""
    lines = [
        json.dumps({"id": n * ROWS + i, "user_name": f"u{i}", "amount": i * 0.5, "qty": i})
        for i in range(ROWS)
    ]
    tmp = folder / f".f{n:04d}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.rename(folder / f"f{n:04d}.json")


def plan_batch(store: Any, ctx: Any) -> int:
    """Plan the new file as the discover task does; returns the batch id."""
    from airflow_connectors.engine.discovery import discover

    found = discover(store, ctx, owner="bench:smallbatch")
    if len(found.batch_ids) != 1:
        raise SystemExit(f"expected one planned batch, got {found.batch_ids}")
    return found.batch_ids[0]


def submit_command(
    master: str, batch_id: int, conf: dict[str, str], py_files: str | None, app: str
) -> list[str]:
    """spark-submit as SparkSubmitHook builds it for the ingest operator."""
    cmd = [str(REPO / ".venv" / "bin" / "spark-submit"), "--master", master]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    if py_files:
        cmd += ["--py-files", py_files]
    cmd += ["--name", f"smallbatch.events.drop.batch-{batch_id}", app]
    return [*cmd, "--batch-id", str(batch_id)]


def _log_time(line: str) -> float | None:
    """The epoch seconds of a job log line (``%(asctime)s`` = local time, ms)."""
    try:
        return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


def _driver_start(proc: subprocess.Popen[bytes], app: str, found: dict[str, float]) -> None:
    """Polls spark-submit's process tree for the Python driver; records its start."""
    import psutil

    try:
        root = psutil.Process(proc.pid)
    except psutil.NoSuchProcess:
        return
    while proc.poll() is None:
        try:
            children = root.children(recursive=True)
        except psutil.Error:
            children = []
        for child in children:
            try:
                argv = child.cmdline()
                if argv and "python" in Path(argv[0]).name and app in argv:
                    found["python"] = child.create_time()
                    return
            except psutil.Error:  # a process that just exited (or a zombie)
                continue
        time.sleep(0.02)


def run_once(cmd: list[str], env: dict[str, str], batch_id: int, app: str) -> dict[str, float]:
    """One spark-submit; returns the breakdown in seconds (and ``to_commit``, ``total``)."""
    found: dict[str, float] = {}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    watcher = threading.Thread(target=_driver_start, args=(proc, app, found), daemon=True)
    watcher.start()
    out, _ = proc.communicate()
    t_exit = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    watcher.join()
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"spark-submit failed ({proc.returncode}):\n{text[-4000:]}")
    marks: dict[str, float] = {}
    for line in text.splitlines():
        at = _log_time(line)
        if at is None:
            continue
        if "airflow_connectors.engine.job: ingest job:" in line and "job" not in marks:
            marks["job"] = at
        elif "Spark session ready in" in line:
            marks["session_start"] = at - _seconds(line, "ready in")
            marks["ready"] = at
        elif "waited" in line and "for the Spark session" in line:
            marks["need"] = at - _seconds(line, "waited")
        elif f"batch {batch_id} committed" in line:
            marks["commit"] = at
    if "commit" not in marks:
        raise SystemExit(f"no commit line for batch {batch_id} in the job's output:\n{text}")
    python = found.get("python", marks.get("job", t0))
    job = marks.get("job", python)
    session_start = marks.get("session_start", job)
    ready = marks.get("ready", session_start)
    # A job that starts its session only when the batch asks for it logs no wait.
    need = marks.get("need", session_start)
    got = max(need, ready)
    return {
        "jvm": python - t0,
        "py": job - python,
        "plan": need - job,
        "wait": got - need,
        "batch": marks["commit"] - got,
        "exit": t_exit - marks["commit"],
        "session": ready - session_start,
        "to_commit": marks["commit"] - t0,
        "total": t_exit - t0,
        "cpu": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
    }


def _seconds(line: str, after: str) -> float:
    return float(line.rsplit(after, 1)[1].split()[0])


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"{what} {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def operator_conf(master: str, *, cds: bool) -> dict[str, str]:
    """The ``--conf`` the ingest operator gives spark-submit on ``master``."""
    from airflow_connectors.engine.spark import ingest_submit_conf

    conf = {"spark.ui.enabled": "false", "spark.log.level": "WARN"}
    conf.update(ingest_submit_conf(master, cds=cds))
    if master.startswith("local"):
        conf = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1", **conf}
    return conf


def operator_env(master: str) -> dict[str, str]:
    """Extra environment the ingest operator gives spark-submit on ``master``."""
    env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    try:
        from airflow_connectors.engine.spark import ingest_submit_env  # type: ignore[attr-defined]

        env.update(ingest_submit_env(master))
    except ImportError:
        pass
    if master.startswith("local"):
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def shipping(master: str, executor_python: str | None) -> tuple[str | None, dict[str, str]]:
    """``--py-files`` and ``--conf`` that send the package to a cluster's executors."""
    if executor_python is None:
        return None, {}
    try:
        from airflow_connectors.engine.package import submit_options
        from airflow_connectors.settings import Settings

        settings = Settings(
            state_store_url="", warehouse="", executor_python=executor_python, ship_package="auto"
        )
        opts = submit_options(settings, master, sys.executable)
        return opts.py_files, dict(opts.conf)
    except ImportError:  # no shipping yet: the executors run this venv's Python
        return None, {"spark.pyspark.python": sys.executable}


CLIENT = """
import sys, time
t0 = time.time()
batch_id, url, state_store_url = int(sys.argv[1]), sys.argv[2], sys.argv[3]
from airflow_connectors.engine.batch import run_batch
from airflow_connectors.engine.connect import connect_session
from airflow_connectors.settings import Settings
from airflow_connectors.state.store import StateStore

settings = Settings.load(state_store_url=state_store_url)
store = StateStore(settings.state_store_url)
t1 = time.time()
session = connect_session(url, settings, data_sources=False)
t2 = time.time()
result = run_batch(store, batch_id, lambda: session)
t3 = time.time()
store.close()
assert result.committed, result
print("ROUND", t0, t1, t2, t3, result.records, flush=True)
"""

#: The breakdown of a round on Spark Connect.
CONNECT_SEGMENTS = ("imports", "connect", "batch")

#: ``--warm``: a process that imports what ``WarmLocalExecutor`` imports for the batch
#: path (no Airflow here) once, then forks one client per round from itself, as the
#: executor's workers fork task processes. Reads ``batch_id url store_url`` lines and
#: answers each with the client's ``ROUND`` line.
WARM_PARENT = """
import os, sys
from airflow_connectors.airflow.preload import PRELOAD, preload
preload(tuple(m for m in PRELOAD if not m.startswith(("airflow.", "airflow_connectors.airflow"))),
        asset_handlers=False)
client = sys.argv[1]
print("READY", flush=True)
for line in sys.stdin:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        sys.argv = ["client", *line.split()]
        try:
            exec(compile(client, "client", "exec"), {"__name__": "__main__"})
        finally:
            sys.stdout.flush()
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as out:
        answer = out.read()
    os.waitpid(pid, 0)
    print(answer.strip() or "FAILED", flush=True)
"""


class WarmClients:
    """The ``--warm`` parent process: one client forked per round."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WARM_PARENT, CLIENT],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "READY"

    def run(self, url: str, batch_id: int, store_url: str) -> dict[str, float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        start = time.time()
        self.proc.stdin.write(f"{batch_id} {url} {store_url}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        end = time.time()
        if not line.startswith("ROUND "):
            raise SystemExit(f"the warm client failed: {line!r}")
        return connect_round(line, end - start, 0.0)  # its CPU: the parent's, not reaped here

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(30)


def run_connect_once(
    url: str, env: dict[str, str], batch_id: int, store_url: str
) -> dict[str, float]:
    """One ingest task on Spark Connect: a client process running the batch."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    proc = subprocess.run(
        [sys.executable, "-c", CLIENT, str(batch_id), url, store_url],
        env=env,
        capture_output=True,
        text=True,
    )
    end = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ROUND ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"the client failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return connect_round(line, end - start, cpu)


def connect_round(line: str, total: float, cpu: float) -> dict[str, float]:
    """A round's breakdown from the client's ``ROUND t0 t1 t2 t3 records`` line."""
    t0, t1, t2, t3 = (float(x) for x in line.split()[1:5])
    return {
        "imports": t1 - t0,
        "connect": t2 - t1,
        "batch": t3 - t2,
        "to_commit": t3 - t0,
        "total": total,
        "cpu": cpu,
    }


def summary(rounds: list[dict[str, float]], segments: tuple[str, ...] = SEGMENTS) -> str:
    lines = []
    extra = ("session",) if segments == SEGMENTS else ()
    for key in (*segments, *extra, "to_commit", "total", "cpu"):
        values = [r[key] for r in rounds]
        lines.append(
            f"  {key:<10} min {min(values):6.2f}  median {statistics.median(values):6.2f}"
            f"  max {max(values):6.2f}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--cluster", action="store_true", help="a standalone cluster")
    parser.add_argument("--master", default="local[*]", help="the local master (default local[*])")
    parser.add_argument("--conf", action="append", default=[], help="extra --conf K=V")
    parser.add_argument("--env", action="append", default=[], help="extra environment K=V")
    parser.add_argument("--no-cds", action="store_true", help="no class-data-sharing archive")
    parser.add_argument(
        "--cds-dir", help="a CDS cache to use and keep (default: a fresh one in the work dir)"
    )
    parser.add_argument(
        "--application", default=str(APPLICATION), help="the ingest script spark-submit runs"
    )
    parser.add_argument("--work-dir", help="scratch folder (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print the rounds as JSON too")
    parser.add_argument(
        "--execution",
        choices=("spark_submit", "spark_connect"),
        default="spark_submit",
        help="spark-submit per batch (default), or a client of a warm Spark Connect server",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="with spark_connect: each client forked from a process that imported the "
        "batch path's modules first, as WarmLocalExecutor's task processes are",
    )
    args = parser.parse_args()

    from airflow_connectors.catalog import parse_pipeline
    from airflow_connectors.engine.discovery import context
    from airflow_connectors.state.store import StateStore

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="smallbatch-"))
    shutil.rmtree(work / "run", ignore_errors=True)
    folder, warehouse = work / "run" / "drop", work / "run" / "wh"
    folder.mkdir(parents=True)
    url = f"sqlite:///{work}/run/state.db"
    spec = parse_pipeline(pipeline_doc(folder))
    table = spec.table("events")
    ctx = context(spec, table, table.connectors[0], str(warehouse))
    store = StateStore(url)
    # A CDS cache of its own (the first job, a warm-up, records the archive), or the one
    # given, kept between runs.
    cds_dir = Path(args.cds_dir) if args.cds_dir else work / "cds"
    if not args.cds_dir:
        shutil.rmtree(cds_dir, ignore_errors=True)
    os.environ["AIRFLOW__CONNECTORS__CDS_DIR"] = str(cds_dir)

    cluster = None
    server = None
    try:
        if args.cluster:
            from airflow_connectors.testing.spark_standalone import SparkStandalone

            cluster = SparkStandalone(work / "spark", workers=2, cores=1).start()
            master = cluster.master_url
            py_files, ship_conf = shipping(master, cluster.executor_python)
        else:
            master, py_files, ship_conf = args.master, None, {}
        extra_conf = {**ship_conf, **_pairs(args.conf, "--conf")}
        env = {
            **os.environ,
            "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW__CONNECTORS__STATE_STORE_URL": url,
            **operator_env(master),
            **_pairs(args.env, "--env"),
        }
        print(f"master {master}; {args.warmup} warm-up + {args.rounds} rounds")
        rounds: list[dict[str, float]] = []
        if args.execution == "spark_connect":
            from airflow_connectors.testing.spark_connect import SparkConnectServer

            t = time.monotonic()
            server = SparkConnectServer(
                work / "connect",
                master,
                conf=extra_conf,
                executor_python=cluster.executor_python if cluster else None,
            )
            server.start()
            print(
                f"Spark Connect server {server.url} on {master} ready in {time.monotonic() - t:.1f} s"
            )
            warm = WarmClients(env) if args.warm else None
            for n in range(args.warmup + args.rounds):
                drop_file(folder, n)
                batch_id = plan_batch(store, ctx)
                if warm is not None:
                    result = warm.run(server.url, batch_id, url)
                else:
                    result = run_connect_once(server.url, env, batch_id, url)
                tag = "warm-up" if n < args.warmup else f"round {n - args.warmup + 1}"
                print(
                    f"{tag:>8}: to commit {result['to_commit']:5.2f} s, exit {result['total']:5.2f} s, "
                    f"cpu {result['cpu']:5.2f} s  ("
                    + ", ".join(f"{k} {result[k]:.2f}" for k in CONNECT_SEGMENTS)
                    + ")",
                    flush=True,
                )
                if n >= args.warmup:
                    rounds.append(result)
            if warm is not None:
                warm.close()
            print(f"\nseconds from the task's start, {len(rounds)} rounds on Spark Connect:")
            print(summary(rounds, CONNECT_SEGMENTS))
            if args.json:
                print(json.dumps(rounds))
            return 0
        for n in range(args.warmup + args.rounds):
            drop_file(folder, n)
            batch_id = plan_batch(store, ctx)
            # Per task, as the operator does: the first job records the CDS archive.
            conf = {**operator_conf(master, cds=not args.no_cds), **extra_conf}
            if n == 0:
                print("conf: " + " ".join(f"{k}={v}" for k, v in conf.items()))
            cmd = submit_command(master, batch_id, conf, py_files, args.application)
            result = run_once(cmd, env, batch_id, args.application)
            tag = "warm-up" if n < args.warmup else f"round {n - args.warmup + 1}"
            print(
                f"{tag:>8}: to commit {result['to_commit']:5.2f} s, exit {result['total']:5.2f} s, "
                f"cpu {result['cpu']:5.2f} s  ("
                + ", ".join(f"{k} {result[k]:.2f}" for k in SEGMENTS)
                + ")",
                flush=True,
            )
            if n >= args.warmup:
                rounds.append(result)
        rows = sum(1 for _ in (warehouse.rglob("*.parquet")))  # parts written (one per batch here)
        print(f"\nseconds, {len(rounds)} rounds ({rows} Parquet parts in the table):")
        print(summary(rounds))
        if args.json:
            print(json.dumps(rounds))
    finally:
        store.close()
        if server is not None:
            server.stop()
        if cluster is not None:
            cluster.stop()
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
