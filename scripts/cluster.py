"""The scale-out deployment on this machine (``bash scripts/cluster.sh up|down|status``):
Spark standalone (a master and two workers), Airflow with the CeleryExecutor (API
server, scheduler, dag-processor, triggerer and two Celery workers as separate
processes, Redis as broker, PostgreSQL metadata DB), the connectors' state store in
PostgreSQL and the warehouse on an S3-compatible server, all on 127.0.0.1 and serving
this repository's ``dags/`` (the example pipeline, pipelines/demo.yaml), with the HTTP
server its price backfill reads from (127.0.0.1:8765).

``up`` starts everything detached and returns; its PIDs, ports, databases and logs are in
``.cluster/`` (or ``--root``, or ``$AIRFLOW_CONNECTORS_CLUSTER_ROOT``). ``status`` says
what runs; ``down`` stops exactly what ``up`` started and drops its databases.
It needs Redis on 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432 (user postgres).

``up --spark connect`` also starts a Spark Connect server on the standalone master
(sc://127.0.0.1:15002, or a free port; its executors run the cluster's executor Python,
which lacks this repository: the package reaches them as an artifact of each client
session) and every batch runs on it (``[connectors] execution = spark_connect``) instead
of a spark-submit per batch. The server holds the workers' cores while it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from airflow_connectors.spec.redact import mask_url

ROOT = Path(__file__).resolve().parents[1]
PRICE_PORT = 8765
#: Spark Connect's usual port; a free one when it is taken.
SPARK_CONNECT_PORT = 15002


def default_root() -> Path:
    return Path(os.environ.get("AIRFLOW_CONNECTORS_CLUSTER_ROOT") or ROOT / ".cluster")


def say(message: str) -> None:
    print(f"cluster: {message}", flush=True)


def fail(message: str) -> int:
    print(f"cluster: {message}", file=sys.stderr, flush=True)
    return 1


def load(root: Path) -> Any:
    from airflow_connectors.testing.cluster import Cluster

    try:
        return Cluster.load(root)
    except FileNotFoundError:
        return None


def up(root: Path, port: int | None, dags: Path, data_port: int, spark: str = "submit") -> int:
    from airflow_connectors.testing.cluster import Cluster, ClusterError, check_services
    from airflow_connectors.testing.standalone import free_port, port_free

    old = load(root)
    if old is not None and old.running():
        running = old.running()
        say(f"already running in {root} ({len(running)} processes); "
            "`bash scripts/cluster.sh status` shows them, `down` stops them")  # fmt: skip
        return 0
    try:
        check_services()
    except ClusterError as e:
        return fail(str(e))
    if old is not None:
        old.stop()  # what an interrupted earlier up left: its databases, stray processes
    if port is None:
        port = 8080 if port_free(8080) else free_port()
        if port != 8080:
            say(f"port 8080 is in use; the Airflow UI will be on port {port}")
    elif not port_free(port):
        return fail(f"port {port} on 127.0.0.1 is in use; stop what uses it or pass another --port")
    if data_port and not port_free(data_port):
        return fail(
            f"port {data_port} on 127.0.0.1 is in use (the example's price data is served "
            "there); stop what uses it (a quickstart --keep-running?) or pass --data-port 0"
        )
    env: dict[str, str] = {}
    connect_port = None
    if spark == "connect":
        connect_port = SPARK_CONNECT_PORT if port_free(SPARK_CONNECT_PORT) else free_port()
        env = {
            "AIRFLOW__CONNECTORS__EXECUTION": "spark_connect",
            "AIRFLOW__CONNECTORS__SPARK_CONNECT_URL": f"sc://127.0.0.1:{connect_port}",
        }
    cluster = Cluster(root, dags, api_port=port, env=env)
    say(f"starting in {root} (logs in {root / 'logs'}) ...")
    try:
        cluster.start()
        if data_port:
            cluster.add_process(
                "price-data",
                [sys.executable, "-m", "http.server", str(data_port), "--bind", "127.0.0.1",
                 "--directory", str(ROOT / "pipelines" / "data")],
            )  # fmt: skip
        if connect_port is not None:
            start_spark_connect(cluster, connect_port)
    except KeyboardInterrupt:
        cluster.stop()
        return fail("interrupted; stopped what had started")
    except (ClusterError, TimeoutError, OSError) as e:
        cluster.stop()
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return fail(f"{first} (logs in {root / 'logs'}; stopped what had started)")
    info = cluster.status()
    say(f"up in {cluster.up_seconds:.0f} s\n")
    print(f"  Airflow UI     {info['airflow_url']}  (user admin, password admin)")
    print(f"  Spark master   {info['spark_master']}  (UI {info['spark_ui']})")
    if connect_port is not None:
        print(f"  Spark Connect  sc://127.0.0.1:{connect_port}  (every batch runs there)")
    print(f"  S3 endpoint    {info['s3_endpoint']}  (moto; tables in {info['warehouse']})")
    print(f"  state store    {mask_url(info['state_store_url'])}")
    print(f"  Celery broker  {mask_url(info['broker_url'])}  (queue {info['queue']})")
    if data_port:
        print(f"  price data     http://127.0.0.1:{data_port}/prices.json")
    print(f"  DAGs           {dags}")
    print(f"  logs           {root / 'logs'} (Airflow task logs in {root / 'airflow' / 'logs'})")
    print("\n  status: bash scripts/cluster.sh status    stop: bash scripts/cluster.sh down")
    return 0


def start_spark_connect(cluster: Any, port: int, timeout: float = 300) -> None:
    """Start a Spark Connect server on the cluster's standalone master as the cluster's
    process ``spark-connect`` (``status`` lists it, ``down`` stops it) and wait until it
    serves."""
    from airflow_connectors.testing.cluster import ClusterError
    from airflow_connectors.testing.spark_connect import (
        SparkConnectServer,
        log_says_started,
        port_open,
    )
    from airflow_connectors.testing.standalone import alive

    server = SparkConnectServer(
        cluster.root / "spark-connect",
        cluster.spark.master_url,
        port=port,
        executor_python=cluster.spark.executor_python,
    )
    (server.root / "local").mkdir(parents=True, exist_ok=True)
    say(f"starting a Spark Connect server on {server.url} (master {cluster.spark.master_url}) ...")
    log = cluster.root / "logs" / "spark-connect.log"
    offset = log.stat().st_size if log.exists() else 0
    cluster.add_process("spark-connect", server.command(), server.environment())
    deadline = time.monotonic() + timeout
    while not (log_says_started(log, offset) and port_open(port)):
        if not alive(cluster.pids["spark-connect"]):
            raise ClusterError(
                f"the Spark Connect server exited:\n{cluster.log_tail('spark-connect')}"
            )
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the Spark Connect server on {server.url} did not start in {timeout:.0f} s"
            )
        time.sleep(1)


def status(root: Path) -> int:
    cluster = load(root)
    if cluster is None:
        say(f"not started ({root / 'cluster.json'} does not exist); bash scripts/cluster.sh up")
        return 3
    info = cluster.status()
    components = info["components"]
    for name, comp in components.items():
        state = "running" if comp["running"] else "stopped"
        extra = ""
        if "health" in comp and comp["running"]:
            extra = f"  health {comp['health']}"
        if "answers" in comp and comp["running"]:
            extra = "  answers ping" if comp["answers"] else "  does not answer ping"
        pid = f"pid {comp['pid']}" if comp["running"] else ""
        print(f"  {name:<15} {state:<8} {pid:<11}{extra}")
    running = sum(1 for c in components.values() if c["running"])
    if running:
        print(f"\n  Airflow UI {info['airflow_url']}  Spark UI {info['spark_ui']}  "
              f"S3 {info['s3_endpoint']}")  # fmt: skip
    say(f"{running} of {len(components)} processes running ({root})")
    return 0 if running == len(components) else 3


def down(root: Path) -> int:
    cluster = load(root)
    if cluster is None:
        say(f"nothing to stop ({root / 'cluster.json'} does not exist)")
        return 0
    running = cluster.running()
    databases = list(cluster.databases)
    cluster.stop()
    stopped = f"stopped {len(running)} processes" if running else "no process was running"
    dropped = f"; dropped databases {', '.join(databases)}" if databases else ""
    say(f"{stopped}{dropped}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument(
        "--root",
        type=Path,
        default=default_root(),
        help="the cluster's folder: state, logs, PIDs (default .cluster/ of the repository, "
        "or $AIRFLOW_CONNECTORS_CLUSTER_ROOT)",
    )
    parser.add_argument(
        "--port", type=int, help="Airflow UI/API port for up (default 8080, or a free one)"
    )
    parser.add_argument(
        "--data-port",
        type=int,
        default=PRICE_PORT,
        help=f"up: serve pipelines/data (the example's price backfill) on this port (default "
        f"{PRICE_PORT}, which pipelines/demo.yaml reads; 0: do not serve it)",
    )
    parser.add_argument(
        "--spark",
        choices=("submit", "connect"),
        default="submit",
        help="up: how batches run: submit (default) a spark-submit per batch on the "
        "standalone master; connect on a Spark Connect server on it that up starts",
    )
    parser.add_argument(
        "--dags", type=Path, default=ROOT / "dags", help="DAGs folder for up (default dags/)"
    )
    args = parser.parse_args()
    root = args.root.resolve()
    if args.command == "up":
        return up(root, args.port, args.dags.resolve(), args.data_port, args.spark)
    if args.command == "status":
        return status(root)
    return down(root)


if __name__ == "__main__":
    sys.exit(main())
