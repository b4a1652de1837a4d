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

from airflow.executors.local_executor import LocalExecutor

from airflow_connectors.airflow.preload import PRELOAD, preload

__all__ = ["PRELOAD", "WarmLocalExecutor", "preload"]


class WarmLocalExecutor(LocalExecutor):
    """A ``LocalExecutor`` that imports :data:`PRELOAD` before it forks its workers."""

    def start(self) -> None:
        """Preloads, then starts the workers as the ``LocalExecutor`` does."""
        preload()
        super().start()
