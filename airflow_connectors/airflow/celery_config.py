"""Celery configuration for a CeleryExecutor whose task processes start warm: Airflow's
default Celery configuration plus the worker-start import of :mod:`.celery_preload`,
which imports :data:`..preload.PRELOAD` (this package's DAG rendering, operators and
batch path, pandas and the Spark Connect client) in the Celery worker before it forks
its pool. Airflow's task processes are forked from the pool's processes, so each task
inherits those modules instead of importing them (about a second of every connector
task's start on a 2-core machine): the CeleryExecutor's :class:`..executors.WarmLocalExecutor`.

Use it in the Airflow configuration of the Celery workers (and the scheduler, which
reads the same option)::

    [celery]
    celery_config_options = airflow_connectors.airflow.celery_config.CELERY_CONFIG

Only imports happen before the fork: no thread, connection or session is opened.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

#: Airflow's default Celery configuration, and the preload at worker start.
CELERY_CONFIG: dict[str, Any] = {
    **DEFAULT_CELERY_CONFIG,
    "imports": (
        *(DEFAULT_CELERY_CONFIG.get("imports") or ()),
        "airflow_connectors.airflow.celery_preload",
    ),
}

__all__ = ["CELERY_CONFIG"]
