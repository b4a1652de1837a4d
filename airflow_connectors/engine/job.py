"""The ingest job: ``python -m airflow_connectors.engine.job --batch-id N`` (what
spark-submit runs, through :mod:`airflow_connectors.engine.submit`). Everything else
comes from the batch plan in the state store."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

from airflow_connectors.engine.batch import BatchFailed, run_batch
from airflow_connectors.settings import Settings
from airflow_connectors.sinks.base import SinkUnwritable
from airflow_connectors.state.store import StateStore

log = logging.getLogger("airflow_connectors.engine.job")


def main(argv: list[str] | None = None) -> int:
    """Ingest the ``--batch-id`` batches in order; returns the exit status: 0, or 1 after
    printing a batch's one-line failure (the batch stays planned for the next run)."""
    parser = argparse.ArgumentParser(prog="airflow-connectors-ingest", description=__doc__)
    parser.add_argument(
        "--batch-id", type=int, required=True, action="append", help="batch to ingest (repeatable)"
    )
    parser.add_argument("--state-store-url")
    parser.add_argument("--spark-master")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = Settings.load(state_store_url=args.state_store_url, spark_master=args.spark_master)
    store = StateStore(settings.state_store_url)
    session = None

    def spark() -> Any:
        nonlocal session
        if session is None:
            from pyspark.sql import SparkSession

            from airflow_connectors.engine.spark import spark_session

            t0 = time.monotonic()
            if "PYSPARK_GATEWAY_PORT" in os.environ:
                # Under spark-submit: master, memory and the rest come from its flags.
                session = SparkSession.builder.getOrCreate()
                session.sparkContext.setLogLevel("WARN")
            else:
                session = spark_session(settings)
            log.info("Spark session ready in %.1f s", time.monotonic() - t0)
        return session

    try:
        for batch_id in args.batch_id:
            run_batch(store, batch_id, spark)
    except (BatchFailed, SinkUnwritable) as e:
        # One line (the batch's failure is stored as the connector's fatal error); the
        # traces of the Spark tasks are logged at DEBUG.
        print(f"ingest failed: {e}", file=sys.stderr)
        return 1
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
