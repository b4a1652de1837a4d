"""``WarmLocalExecutor``: Airflow's ``LocalExecutor`` whose task processes start with this
package, pandas and the Spark Connect client already imported.

The LocalExecutor forks its worker processes from the scheduler, and each worker forks
a process per task (on Linux). Every connector task then imports what its DAG file and
its work need afresh: the spec and the operators to parse the DAG file (with the asset
URI handlers of the installed providers), and on Spark Connect pandas and pyspark's
client (half a second of a small batch's path on a 2-core machine, before it connects).
This executor imports them once, in the scheduler, before it forks its workers, so the
task processes inherit them (copy-on-write memory, no CPU per task).

Use it where freshness matters (``execution: spark_connect`` with ``on: new_data``)::

    [core]
    executor = airflow_connectors.airflow.executors.WarmLocalExecutor

It is a ``LocalExecutor`` in every other way (``airflow standalone`` accepts it). Only
imports happen before the fork: no thread, connection or session is opened.
"""

from __future__ import annotations

import importlib
import logging
import time

from airflow.executors.local_executor import LocalExecutor

log = logging.getLogger(__name__)

#: What every connector task imports: Airflow's task runtime, the DAG file's rendering
#: and the operators, the engine's batch path, and the Spark Connect client with pandas.
PRELOAD = (
    "airflow.sdk.execution_time.task_runner",
    "airflow_connectors.airflow.render",
    "airflow_connectors.airflow.operators.connector",
    "airflow_connectors.airflow.triggers.new_data",
    "airflow_connectors.engine.discovery",
    "airflow_connectors.engine.batch",
    "airflow_connectors.engine.connect",
    "pandas",
    "pyarrow",
    "pyspark.sql.connect.session",
)


def preload() -> list[str]:
    """Imports :data:`PRELOAD` (a module that fails to import is skipped: the task
    imports it itself, and says why) and the providers' asset URI handlers (which
    every DAG file's ``Asset`` loads); returns what failed."""
    t0 = time.monotonic()
    failed = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:
            log.debug("preloading %s failed", name, exc_info=True)
            failed.append(name)
    try:
        from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

        ProvidersManagerTaskRuntime().asset_uri_handlers  # type: ignore[no-untyped-call]  # noqa: B018
    except Exception:
        log.debug("loading the asset URI handlers failed", exc_info=True)
        failed.append("asset URI handlers")
    log.info(
        "WarmLocalExecutor: task processes start with %d module(s) imported (%.1f s)%s",
        len(PRELOAD) - len([f for f in failed if f in PRELOAD]),
        time.monotonic() - t0,
        f"; not: {', '.join(failed)}" if failed else "",
    )
    return failed


class WarmLocalExecutor(LocalExecutor):
    """A ``LocalExecutor`` that imports :data:`PRELOAD` before it forks its workers."""

    def start(self) -> None:
        """Preloads, then starts the workers as the ``LocalExecutor`` does."""
        preload()
        super().start()
