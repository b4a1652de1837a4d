"""The main job: the example pipeline (pipelines/demo.yaml, rendered by dags/demo.py)
through a real Airflow scheduler (``airflow standalone``), on local Spark.

It starts the HTTP server the price backfill reads from (127.0.0.1:8765), starts Airflow
with a fresh home (``.airflow/`` unless AIRFLOW_CONNECTORS_QUICKSTART_HOME is set), runs
the connectors, waits for them, prints each connector's stats and each table's row count,
and stops Airflow. With ``--keep-running`` the UI stays up on http://127.0.0.1:8080
(user admin, password admin) until Ctrl-C.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = "demo"
PRICE_PORT = 8765


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def serve_price_data() -> ThreadingHTTPServer:
    handler = functools.partial(_Quiet, directory=str(ROOT / "pipelines" / "data"))
    try:
        server = ThreadingHTTPServer(("127.0.0.1", PRICE_PORT), handler)
    except OSError as e:
        sys.exit(
            f"quickstart: cannot serve the price backfill on 127.0.0.1:{PRICE_PORT} ({e}); "
            "stop what uses that port and run again"
        )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--keep-running", action="store_true", help="leave Airflow's UI up on port 8080"
    )
    args = parser.parse_args()

    from airflow_connectors.airflow.standalone import StandaloneAirflow, free_port

    home = Path(os.environ.get("AIRFLOW_CONNECTORS_QUICKSTART_HOME") or ROOT / ".airflow")
    if home.exists():
        print(f"quickstart: starting from a fresh Airflow home: removing {home}")
        shutil.rmtree(home)
    home.mkdir(parents=True)
    env = {
        "AIRFLOW__CONNECTORS__STATE_STORE_URL": f"sqlite:///{home / 'connectors' / 'state.db'}",
        "AIRFLOW__CONNECTORS__WAREHOUSE": str(home / "connectors" / "warehouse"),
    }
    port = 8080 if args.keep_running else free_port()
    server = serve_price_data()
    airflow = StandaloneAirflow(home, ROOT / "dags", port=port, env=env)
    t0 = time.monotonic()
    print(f"quickstart: starting Airflow (standalone) in {home} on 127.0.0.1:{port} ...")
    airflow.start()
    try:
        dags = [
            f"{PIPELINE}.{e}"
            for e in ("numbers.backfill", "numbers.live", "price.backfill", "price.live")
        ]
        airflow.wait_for_dags(dags)
        print(
            f"quickstart: Airflow up, {len(dags)} connector DAGs parsed ({time.monotonic() - t0:.0f} s)"
        )
        runs = {
            dag: airflow.trigger(dag)
            for dag in (f"{PIPELINE}.numbers.backfill", f"{PIPELINE}.price.backfill")
        }
        for dag, run_id in runs.items():
            run = airflow.wait_run(dag, run_id, timeout=600)
            print(f"quickstart: {dag}: run {run['state']}")
            if run["state"] != "success":
                return fail(airflow, dag, run_id)
        # price.live starts on price.backfill's asset event (start_after).
        live = airflow.wait_runs(
            f"{PIPELINE}.price.live", 1, timeout=600, run_type="asset_triggered"
        )
        print(f"quickstart: {PIPELINE}.price.live: asset-triggered run {live[0]['state']}")
        if live[0]["state"] != "success":
            return fail(airflow, f"{PIPELINE}.price.live", live[0]["dag_run_id"])
        print(f"quickstart: done in {time.monotonic() - t0:.0f} s\n")
        for dag in dags:
            paused = airflow.client.get(f"/api/v2/dags/{dag}").json()["is_paused"]
            print(f"connector DAG {dag}: {'paused' if paused else 'active'}")
        print()
        report(airflow.env)
        if args.keep_running:
            print(
                f"\nAirflow UI: http://127.0.0.1:{port} (user admin, password admin). "
                "demo.numbers.live is paused: unpause it to start the live generator. Ctrl-C stops."
            )
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        airflow.stop()
        server.shutdown()
    return 0


def fail(airflow: Any, dag: str, run_id: str) -> int:
    for ti in airflow.task_instances(dag, run_id):
        print(f"  {ti['task_id']}[{ti['map_index']}]: {ti['state']}", file=sys.stderr)
    print(f"quickstart: {dag} failed; task logs are under {airflow.home / 'logs'}", file=sys.stderr)
    return 1


def report(env: dict[str, str]) -> None:
    import pyarrow.dataset as ds

    cli = [sys.executable, "-m", "airflow_connectors.cli"]
    subprocess.run([*cli, "pipeline", PIPELINE, "status"], env=env, check=True)
    for endpoint in ("numbers.backfill", "price.backfill", "price.live"):
        print()
        subprocess.run([*cli, "stats", PIPELINE, *endpoint.split(".")], env=env, check=True)
    warehouse = Path(env["AIRFLOW__CONNECTORS__WAREHOUSE"]) / PIPELINE
    print()
    for table in ("numbers", "price"):
        path = warehouse / table
        rows = ds.dataset(str(path), format="parquet").count_rows() if path.is_dir() else 0
        print(f"table {table}: {rows} rows ({path})")


if __name__ == "__main__":
    sys.exit(main())
