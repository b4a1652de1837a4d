"""The main job: the example pipeline (pipelines/demo.yaml, rendered by dags/demo.py)
through a real Airflow scheduler (``airflow standalone``), on local Spark.

It starts the HTTP server the price backfill reads from (127.0.0.1:8765), starts Airflow
in ``.airflow/`` (or AIRFLOW_CONNECTORS_QUICKSTART_HOME), runs the connectors, waits for
them, prints each connector's stats and each table's row count, and stops Airflow.

The home of an earlier run is kept: its tables, connector state and Airflow runs stay,
and running again ingests only what is new (nothing, for the example), so the counts
stay the same. ``--fresh`` deletes it first. With ``--keep-running`` the UI stays up on
http://127.0.0.1:8080 (another free port when 8080 is taken; the address is printed;
user admin, password admin) until Ctrl-C or SIGTERM, which stop Airflow and everything
it started.

``--spark connect`` also starts a Spark Connect server on local Spark
(sc://127.0.0.1:15002, or a free port when that is taken; its log in
``<home>/spark-connect/logs``) and runs every batch on it (``[connectors] execution =
spark_connect``, ``[connectors] spark_connect_url``) instead of a spark-submit per batch;
the server stops with Airflow.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import signal
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
#: Spark Connect's usual port; a free one when it is taken.
SPARK_CONNECT_PORT = 15002


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


class Stop(Exception):
    """SIGTERM or SIGHUP: stop like Ctrl-C does."""


def _stop_on_signal(signum: int, frame: Any) -> None:
    raise Stop(signal.Signals(signum).name)


def main() -> int:
    # The results, not the HTTP client's request lines (INFO once Airflow is imported),
    # in the order they happen.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="leave Airflow's UI up (port 8080, or a free one when 8080 is taken) until "
        "Ctrl-C or SIGTERM",
    )
    parser.add_argument(
        "--port", type=int, default=8080, help="UI port with --keep-running (default 8080)"
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="delete the home of an earlier run (tables, connector state, Airflow runs) first",
    )
    parser.add_argument(
        "--no-demo",
        action="store_true",
        help="start Airflow on dags/ (your own pipelines beside the demo's) and keep it up "
        "without triggering the demo's runs; implies --keep-running",
    )
    parser.add_argument(
        "--spark",
        choices=("submit", "connect"),
        default="submit",
        help="how batches run: submit (default) a spark-submit per batch on local Spark; "
        "connect on a Spark Connect server (local Spark) that the quickstart starts",
    )
    parser.add_argument(
        "--user",
        action="append",
        default=[],
        metavar="NAME:ROLE:PASSWORD",
        help="another Airflow user besides admin (roles: viewer, user, op, admin); repeatable",
    )
    args = parser.parse_args()
    if args.no_demo:
        args.keep_running = True
    users: dict[str, tuple[str, str]] = {}
    for given in args.user:
        name, _, rest = given.partition(":")
        role, _, password = rest.partition(":")
        if not (name and role.lower() in ("viewer", "user", "op", "admin") and password):
            parser.error(
                f"--user {given!r}: expected NAME:ROLE:PASSWORD, ROLE one of viewer, "
                "user, op, admin"
            )
        users[name] = (role.lower(), password)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_on_signal)

    from airflow_connectors.testing.standalone import StandaloneAirflow, free_port, port_free

    home = Path(os.environ.get("AIRFLOW_CONNECTORS_QUICKSTART_HOME") or ROOT / ".airflow")
    if home.exists() and args.fresh:
        print(f"quickstart: --fresh: removing {home} (tables, connector state, Airflow runs)")
        shutil.rmtree(home)
    elif home.exists():
        print(
            f"quickstart: reusing {home} from an earlier run (its tables and connector state "
            "are kept, so only new data is ingested); --fresh starts over"
        )
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "AIRFLOW__CONNECTORS__STATE_STORE_URL": f"sqlite:///{home / 'connectors' / 'state.db'}",
        "AIRFLOW__CONNECTORS__WAREHOUSE": str(home / "connectors" / "warehouse"),
    }
    port = free_port()
    if args.keep_running:
        port = args.port
        if not port_free(port):
            port = free_port()
            print(f"quickstart: port {args.port} is in use; the UI will be on port {port}")
    airflow = StandaloneAirflow(home, ROOT / "dags", port=port, env=env, users=users)
    server = None
    connect: Any = None
    t0 = time.monotonic()
    try:
        server = serve_price_data()
        if args.spark == "connect":
            connect = start_spark_connect(home, airflow.env)
        print(f"quickstart: starting Airflow (standalone) in {home} on 127.0.0.1:{port} ...")
        airflow.start()
        dags = [
            f"{PIPELINE}.{e}"
            for e in ("numbers.backfill", "numbers.live", "price.backfill", "price.live")
        ]
        airflow.wait_for_dags(dags)
        print(
            f"quickstart: Airflow up, {len(dags)} connector DAGs parsed ({time.monotonic() - t0:.0f} s)"
        )
        if args.no_demo:
            print(
                f"\nAirflow UI: http://127.0.0.1:{port} (user admin, password admin). "
                f"--no-demo: no demo run was triggered; DAG files in {ROOT / 'dags'} are "
                f"picked up within seconds. For the CLI and `airflow connections add` in "
                f"another shell: export AIRFLOW_HOME={home}. Ctrl-C stops."
            )
            while True:
                time.sleep(3600)
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
        report(airflow.env, airflow.url)
        if args.keep_running:
            print(
                f"\nAirflow UI: http://127.0.0.1:{port} (user admin, password admin). "
                "demo.numbers.live is paused: unpause it to start the live generator. Ctrl-C stops."
            )
            while True:
                time.sleep(3600)
    except (KeyboardInterrupt, Stop) as e:
        print(f"\nquickstart: {e or 'interrupted'}: stopping Airflow", flush=True)
    except (RuntimeError, TimeoutError) as e:
        print(f"quickstart: {e}", file=sys.stderr)
        return 1
    finally:
        # Signals again while stopping would leave Airflow half-stopped: ignore them.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        airflow.stop()
        if connect is not None:
            connect.stop()
        if server is not None:
            server.shutdown()
    return 0


def start_spark_connect(home: Path, env: dict[str, str]) -> Any:
    """Start a Spark Connect server on local Spark and point the connectors at it (``env``
    is Airflow's, before it starts)."""
    from airflow_connectors.testing.spark_connect import SparkConnectServer
    from airflow_connectors.testing.standalone import free_port, port_free

    port = SPARK_CONNECT_PORT if port_free(SPARK_CONNECT_PORT) else free_port()
    connect = SparkConnectServer(home / "spark-connect", "local[2]", port=port)
    print(f"quickstart: starting a Spark Connect server (local[2]) on {connect.url} ...")
    t0 = time.monotonic()
    connect.start()
    print(
        f"quickstart: Spark Connect server up ({time.monotonic() - t0:.0f} s; log "
        f"{connect.log_path}); every batch runs on it"
    )
    env["AIRFLOW__CONNECTORS__EXECUTION"] = "spark_connect"
    env["AIRFLOW__CONNECTORS__SPARK_CONNECT_URL"] = connect.url
    return connect


def fail(airflow: Any, dag: str, run_id: str) -> int:
    for ti in airflow.task_instances(dag, run_id):
        print(f"  {ti['task_id']}[{ti['map_index']}]: {ti['state']}", file=sys.stderr)
    print(f"quickstart: {dag} failed; task logs are under {airflow.home / 'logs'}", file=sys.stderr)
    return 1


def report(env: dict[str, str], url: str) -> None:
    import pyarrow.dataset as ds

    cli = [sys.executable, "-m", "airflow_connectors.cli"]
    # Through the REST API: every connector, the paused one that never ran included.
    # Airflow's INFO lines (read config, time zone) would come between the results.
    api = {**env, "AIRFLOW_CONNECTORS_API_URL": url, "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING"}
    api.setdefault("AIRFLOW_CONNECTORS_API_USER", "admin")
    api.setdefault("AIRFLOW_CONNECTORS_API_PASSWORD", "admin")
    sys.stdout.flush()
    subprocess.run([*cli, "pipeline", PIPELINE, "status"], env=api, check=True)
    for endpoint in ("numbers.backfill", "price.backfill", "price.live"):
        print(flush=True)
        subprocess.run([*cli, "stats", PIPELINE, *endpoint.split(".")], env=api, check=True)
    warehouse = Path(env["AIRFLOW__CONNECTORS__WAREHOUSE"]) / PIPELINE
    print()
    for table in ("numbers", "price"):
        path = warehouse / table
        rows = ds.dataset(str(path), format="parquet").count_rows() if path.is_dir() else 0
        print(f"table {table}: {rows} rows ({path})")


if __name__ == "__main__":
    sys.exit(main())
