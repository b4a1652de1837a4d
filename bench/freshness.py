"""Freshness end to end: from a new file (or Kafka message) to its rows in the table.

Starts ``airflow standalone`` (SQLite metadata DB, LocalExecutor) with one pipeline: a
``file_input`` connector (CSV) watching a folder with ``trigger: {on: new_data,
poll_interval: 2}`` and ``min_file_age: 0`` into a Parquet table. After a warm-up drop it
drops files one at a time (written beside the folder, then renamed into it) and, for
each, times the rename until its rows are visible in the table (read with pyarrow), then
takes each hop from Airflow's records (REST API) and the ingest task's log:

- ``trigger_event``: the watched asset's event (the trigger's poll and probe);
- ``run_queued`` / ``run_start`` / ``run_end``: the DAG run;
- ``<task>.queued`` / ``.start`` / ``.end``: each task instance;
- ``spark_ready`` / ``batch_start`` / ``commit``: the Spark session ready (or Spark
  Connect client connected), the batch started and committed (the timestamps of the log
  lines of the discover task, which runs a single planned batch itself on Spark Connect,
  else of the first ingest task);
- ``finished.end``: the connector's asset event, when emitted.

Each is in seconds after the rename.

It prints one line per drop and the medians. ``--source kafka``: a ``kafka_input``
connector; one message produced at a time (a KRaft broker of
:mod:`airflow_connectors.testing.kafka`), message -> row visible.
``--execution spark_connect``: the ingest runs on a Spark Connect server started here.

```sh
.venv/bin/python bench/freshness.py --drops 5
.venv/bin/python bench/freshness.py --execution spark_connect --drops 10
.venv/bin/python bench/freshness.py --source kafka --execution spark_connect --drops 20
.venv/bin/python bench/freshness.py --execution spark_connect --scheduler-idle-sleep 0.2
```

Timings are wall-clock on a shared machine: run it on an idle one. Exit status 0 unless
rows went missing (a drop not visible within the timeout, or wrong row counts).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_connectors.testing.standalone import StandaloneAirflow  # noqa: E402

PIPELINE = "fresh"
TABLE = "events"
CONNECTOR = "drops"
DAG_ID = f"{PIPELINE}.{TABLE}.{CONNECTOR}"
ROWS = 50

#: Ingest task log lines whose timestamps mark a hop (first line containing the text).
LOG_MARKS = {
    "spark_ready": ("Spark session ready", "Spark Connect: connected"),
    "batch_start": ("work item(s) in",),
    "commit": (" committed: ",),
}


def ts(value: str | None) -> float | None:
    """An ISO timestamp of the REST API as epoch seconds."""
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def csv_rows(first: int, n: int) -> str:
    lines = ["id,name,amount"]
    lines += [f"{i},name-{i},{i * 1.5}" for i in range(first, first + n)]
    return "\n".join(lines) + "\n"


def table_rows(path: Path) -> int:
    """Rows visible in the Parquet table (0 before the first commit)."""
    import pyarrow.dataset as ds

    files = [
        p
        for p in path.rglob("*.parquet")
        if not any(s.startswith(("_", ".")) for s in p.parts[len(path.parts) :])
    ]
    if not files:
        return 0
    return int(ds.dataset([str(p) for p in files], format="parquet").count_rows())


def spec(
    source: str, folder: Path, warehouse: Path, execution: str, bootstrap: str
) -> dict[str, Any]:
    if source == "files":
        connector: dict[str, Any] = {
            "name": CONNECTOR,
            "transport": {
                "name": "file_input",
                "config": {"path": str(folder), "min_file_age": 0},
            },
            "format": {"name": "csv", "config": {"headers": True}},
            "trigger": {"on": "new_data", "poll_interval": 2},
        }
    else:
        connector = {
            "name": CONNECTOR,
            "transport": {
                "name": "kafka_input",
                "config": {"bootstrap.servers": bootstrap, "topic": "fresh"},
            },
            "format": {"name": "csv", "config": {"headers": False}},
            "trigger": {"on": "new_data", "poll_interval": 2},
        }
    if execution != "spark_submit":
        connector["execution"] = execution
    return {
        "pipeline": PIPELINE,
        "tables": {
            TABLE: {
                "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"},
                "connectors": [connector],
            }
        },
    }


@contextlib.contextmanager
def spark_connect(root: Path) -> Iterator[str]:
    """A Spark Connect server (local[2]) for the run; yields its URL."""
    from airflow_connectors.testing.spark_connect import SparkConnectServer

    with SparkConnectServer(root / "spark-connect", master="local[2]") as server:
        yield server.url


def log_lines(
    api: StandaloneAirflow, run_id: str, task_id: str, map_index: int
) -> list[tuple[float, str]]:
    """``(epoch, text)`` of each line of a task's first try that has a timestamp."""
    try:
        doc = api._json(
            "GET",
            f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}/logs/1",
            params={"full_content": "true", "map_index": map_index},
            headers={"Accept": "application/json"},
            retry_for=20,
        )
    except RuntimeError:
        return []
    out = []
    for line in doc.get("content", []) or []:
        if isinstance(line, dict) and line.get("timestamp"):
            t = ts(str(line["timestamp"]))
            if t is not None:
                out.append((t, str(line.get("event", ""))))
    return out


def watched_events(api: StandaloneAirflow) -> list[float]:
    """Timestamps of the watched asset's events (one per trigger firing)."""
    uri = f"connector-new-data://{PIPELINE}/{TABLE}/{CONNECTOR}"
    assets = api._json("GET", "/api/v2/assets", params={"uri_pattern": uri})["assets"]
    if not assets:
        return []
    events = api._json(
        "GET", "/api/v2/assets/events", params={"asset_id": assets[0]["id"], "limit": 100}
    )["asset_events"]
    return sorted(t for e in events if (t := ts(e.get("timestamp"))) is not None)


def hops(api: StandaloneAirflow, t0: float, known_runs: set[str]) -> dict[str, float]:
    """Each hop of the run that the drop at ``t0`` started, in seconds after ``t0``."""
    out: dict[str, float] = {}
    after = [t for t in watched_events(api) if t >= t0 - 0.5]
    if after:
        out["trigger_event"] = after[0] - t0
    runs = [r for r in api.runs(DAG_ID) if r["dag_run_id"] not in known_runs]
    if not runs:
        return out
    run = runs[0]
    known_runs.add(run["dag_run_id"])
    for key in ("queued_at", "start_date", "end_date"):
        if (t := ts(run.get(key))) is not None:
            out[f"run_{key.removesuffix('_date').removesuffix('_at')}"] = t - t0
    for ti in api.task_instances(DAG_ID, run["dag_run_id"]):
        name = ti["task_id"] + (f"[{ti['map_index']}]" if ti["map_index"] >= 0 else "")
        for key, label in (("queued_when", "queued"), ("start_date", "start"), ("end_date", "end")):
            if (t := ts(ti.get(key))) is not None:
                out[f"{name}.{label}"] = t - t0
    # The batch's marks: in the discover task's log when it ran the single planned batch
    # itself (spark_connect), else in the first ingest task's.
    for task_id, index in (("discover", -1), ("ingest", 0)):
        for t, text in log_lines(api, run["dag_run_id"], task_id, index):
            for mark, needles in LOG_MARKS.items():
                if mark not in out and any(n in text for n in needles):
                    out[mark] = t - t0
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--execution", choices=("spark_submit", "spark_connect"), default="spark_submit"
    )
    parser.add_argument("--source", choices=("files", "kafka"), default="files")
    parser.add_argument("--drops", type=int, default=5, help="timed drops (after one warm-up)")
    parser.add_argument("--timeout", type=float, default=180, help="seconds per drop")
    parser.add_argument("--root", type=Path, default=None, help="work folder (default: a temp one)")
    parser.add_argument("--quiet-hops", action="store_true", help="no per-drop hop lines")
    parser.add_argument(
        "--scheduler-idle-sleep",
        type=float,
        default=None,
        help="the scheduler's [scheduler] scheduler_idle_sleep_time (Airflow's default: 1 s; "
        "it waits up to that long between a DAG run's steps when idle)",
    )
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        root = args.root or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="freshness-"))
        )
        root.mkdir(parents=True, exist_ok=True)
        dags, folder, staging = root / "dags", root / "in", root / "staging"
        for d in (dags, folder, staging):
            d.mkdir(exist_ok=True)
        warehouse = root / "warehouse"
        env = {
            "AIRFLOW__CONNECTORS__STATE_STORE_URL": f"sqlite:///{root / 'state.db'}",
            "AIRFLOW__CONNECTORS__WAREHOUSE": str(warehouse),
            "AIRFLOW__CONNECTORS__SPARK_MASTER": "local[2]",
        }
        if args.scheduler_idle_sleep is not None:
            env["AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME"] = str(args.scheduler_idle_sleep)
        bootstrap = ""
        producer = None
        if args.source == "kafka":
            from confluent_kafka import Producer
            from confluent_kafka.admin import NewTopic

            from airflow_connectors.testing.kafka import KafkaBroker

            broker = stack.enter_context(KafkaBroker(root / "kafka"))
            bootstrap = broker.bootstrap_servers
            admin = broker.admin()
            admin.create_topics([NewTopic("fresh", 1, 1)])["fresh"].result(30)

            producer = Producer({"bootstrap.servers": bootstrap})
        if args.execution == "spark_connect":
            t = time.monotonic()
            url = stack.enter_context(spark_connect(root))
            env["AIRFLOW__CONNECTORS__SPARK_CONNECT_URL"] = url
            print(f"Spark Connect server {url} up in {time.monotonic() - t:.1f} s", flush=True)
        (dags / "fresh.yaml").write_text(
            yaml.safe_dump(
                spec(args.source, folder, warehouse, args.execution, bootstrap), sort_keys=False
            )
        )
        (dags / "fresh_dags.py").write_text(
            "from airflow_connectors.airflow import ConnectorPipeline\n"
            "ConnectorPipeline.from_file('fresh.yaml').dags()\n"
        )
        airflow = StandaloneAirflow(root / "home", dags, env=env)
        t = time.monotonic()
        stack.callback(airflow.stop)
        airflow.start()
        print(f"airflow standalone healthy in {time.monotonic() - t:.1f} s", flush=True)
        airflow.wait_for_dags([DAG_ID], timeout=180)
        airflow.set_paused(DAG_ID, False)
        table = warehouse / PIPELINE / TABLE
        known: set[str] = set()
        # Runs made before the first drop (none expected) do not count.
        known.update(r["dag_run_id"] for r in airflow.runs(DAG_ID))

        results: list[dict[str, float]] = []
        expected = 0
        for i in range(args.drops + 1):
            first = i * ROWS
            t0 = time.time()
            if producer is not None:
                producer.produce("fresh", csv_rows(first, 1).splitlines()[1].encode())
                producer.flush()
                n = 1
            else:
                staged = staging / f"part-{i:04d}.csv"
                staged.write_text(csv_rows(first, ROWS))
                t0 = time.time()
                staged.rename(folder / staged.name)
                n = ROWS
            expected += n
            while table_rows(table) < expected:
                if time.time() - t0 > args.timeout:
                    print(f"drop {i}: rows not visible after {args.timeout:.0f} s", flush=True)
                    print(airflow.log_tail(40))
                    return 1
                time.sleep(0.05)
            visible = time.time() - t0
            if table_rows(table) != expected:
                print(f"drop {i}: {table_rows(table)} rows, expected {expected}")
                return 1
            # Let the run end (finalize, finished) before the next drop; then read its hops.
            deadline = time.time() + 60
            while time.time() < deadline:
                fresh = [r for r in airflow.runs(DAG_ID) if r["dag_run_id"] not in known]
                if fresh and fresh[0]["state"] in ("success", "failed"):
                    break
                time.sleep(0.5)
            h = hops(airflow, t0, known)
            h["visible"] = visible
            label = "warm-up" if i == 0 else f"drop {i}"
            print(f"{label}: visible after {visible:.2f} s", flush=True)
            if not args.quiet_hops:
                print(
                    "   "
                    + "  ".join(f"{k}={v:.2f}" for k, v in sorted(h.items(), key=lambda kv: kv[1]))
                )
            if i > 0:
                results.append(h)
            time.sleep(1)

        print(f"\n{args.source} / {args.execution}: {len(results)} drops")
        keys = sorted(
            {k for r in results for k in r},
            key=lambda k: statistics.median(r[k] for r in results if k in r),
        )
        print("  mark (seconds after the rename)   median   +hop     min     max")
        previous = 0.0
        for k in keys:
            vals = [r[k] for r in results if k in r]
            median = statistics.median(vals)
            print(
                f"  {k:<32} {median:6.2f} {median - previous:+6.2f} "
                f"{min(vals):7.2f} {max(vals):7.2f}"
            )
            previous = median
        print(
            f"MEDIAN rename/produce -> rows visible: {statistics.median(r['visible'] for r in results):.2f} s"
        )
        # The producer goes before the broker stops (else librdkafka logs the lost link).
        producer = None
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
