"""The ingest job: ``python -m airflow_connectors.engine.job --batch-id N`` (what
spark-submit runs, through :mod:`airflow_connectors.engine.submit`). Everything else
comes from the batch plan in the state store."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from typing import Any

log = logging.getLogger("airflow_connectors.engine.job")


class SessionStarter:
    """Under spark-submit, gets the SparkSession in a thread from the job's first line
    on: the driver JVM builds its SparkContext (seconds, mostly in the JVM, with the GIL
    released) while this process imports the engine and loads the batch plan, instead
    of after them. :meth:`get` waits for it; a failure to start raises there, as
    ``getOrCreate()`` would have."""

    def __init__(self) -> None:
        self.session: Any = None
        self.error: BaseException | None = None
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="spark-session", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            from pyspark.sql import SparkSession

            # Under spark-submit: master, memory and the rest come from its flags.
            session = SparkSession.builder.getOrCreate()
            session.sparkContext.setLogLevel("WARN")
            log.info("Spark session ready in %.1f s", time.monotonic() - self.started)
            _check_driver_archive(session)
            self.session = session
        except BaseException as exc:  # re-raised by get() in the main thread
            self.error = exc

    def get(self) -> Any:
        """The session, once ready (raises what starting it raised)."""
        waited = time.monotonic()
        self._thread.join()
        waited = time.monotonic() - waited
        if self.error is not None:
            raise self.error
        log.info("the batch waited %.1f s for the Spark session", waited)
        return self.session

    def finish(self) -> None:
        """Waits for a start no batch needed (a committed batch, a failed prepare), so
        the process does not exit in the middle of the SparkContext's start."""
        self._thread.join()


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
    log.info("ingest job: batch(es) %s", ", ".join(map(str, args.batch_id)))
    starter = SessionStarter() if "PYSPARK_GATEWAY_PORT" in os.environ else None
    try:
        return _ingest(args, starter)
    finally:
        if starter is not None:
            starter.finish()  # at once when a batch got the session


def _ingest(args: argparse.Namespace, starter: SessionStarter | None) -> int:
    # Imported after the session's start began: these imports overlap with it.
    from airflow_connectors.engine.batch import BatchFailed, run_batch
    from airflow_connectors.settings import Settings
    from airflow_connectors.sinks.base import SinkUnwritable
    from airflow_connectors.state.store import StateStore

    settings = Settings.load(state_store_url=args.state_store_url, spark_master=args.spark_master)
    store = StateStore(settings.state_store_url)
    session = None

    def spark() -> Any:
        nonlocal session
        if session is None:
            if starter is not None:
                session = starter.get()
            else:
                from airflow_connectors.engine.spark import spark_session

                t0 = time.monotonic()
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


def _check_driver_archive(session: Any) -> None:
    """Logs a class-data-sharing archive the driver JVM was given but did not use
    (:mod:`airflow_connectors.engine.jvm`)."""
    from airflow_connectors.engine.jvm import check_driver_archive

    try:
        options = session.sparkContext.getConf().get("spark.driver.extraJavaOptions", "")
        pid = int(session.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    except Exception:  # a stand-in session, or a JVM without ProcessHandle
        return
    check_driver_archive(options or "", pid)


if __name__ == "__main__":
    sys.exit(main())
