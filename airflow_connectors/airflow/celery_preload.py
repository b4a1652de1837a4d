"""Imported by a Celery worker at its start (``imports`` of
:data:`.celery_config.CELERY_CONFIG`), in the worker's main process before it forks its
pool: imports :data:`.preload.PRELOAD` there, so the task processes Airflow forks from
the pool's processes inherit them. Importing this module anywhere else preloads too,
and does nothing more."""

from __future__ import annotations

import gc

from airflow_connectors.airflow.preload import preload

preload(who="Celery worker")
# As Airflow's own preload does (celery_executor_utils.on_celery_import_modules): the
# imported objects are left out of the collector, so the forked pool processes do not
# copy their pages when it runs; Airflow unfreezes once the worker is ready.
gc.freeze()
