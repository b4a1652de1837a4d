"""What connector task processes import, imported ahead: :class:`..executors.WarmLocalExecutor`
imports it in the scheduler before it forks its workers, :mod:`.celery_preload` in a
Celery worker before it forks its pool (and ``bench/smallbatch.py --warm`` in the
process it forks its clients from). This module imports nothing itself
until :func:`preload` runs."""

from __future__ import annotations

import importlib
import logging
import time

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


def preload(
    modules: tuple[str, ...] = PRELOAD,
    *,
    asset_handlers: bool = True,
    who: str = "WarmLocalExecutor",
) -> list[str]:
    """Imports ``modules`` (a module that fails to import is skipped: the task imports
    it itself, and says why) and, with ``asset_handlers``, the providers' asset URI
    handlers (which every DAG file's ``Asset`` loads); returns what failed. ``who``
    names the process in the one line it logs."""
    t0 = time.monotonic()
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            log.debug("preloading %s failed", name, exc_info=True)
            failed.append(name)
    if asset_handlers:
        try:
            from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

            ProvidersManagerTaskRuntime().asset_uri_handlers  # type: ignore[no-untyped-call]  # noqa: B018
        except Exception:
            log.debug("loading the asset URI handlers failed", exc_info=True)
            failed.append("asset URI handlers")
    log.info(
        "%s: task processes start with %d module(s) imported (%.1f s)%s",
        who,
        len(modules) - len([f for f in failed if f in modules]),
        time.monotonic() - t0,
        f"; not: {', '.join(failed)}" if failed else "",
    )
    return failed
