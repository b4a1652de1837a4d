"""``WarmLocalExecutor`` (``airflow/executors.py``) in the end-to-end Airflow: a task's
process starts with the connector modules, pandas and the Spark Connect client already
imported (inherited from the scheduler, which imported them before forking its
workers), though its DAG file imports none of them."""

from __future__ import annotations

import json
from typing import Any

#: A DAG file that imports nothing of this package; its task reports which of the
#: preloaded modules its process has when it starts executing.
PROBE = """
import sys

from airflow.sdk import dag, task


@dag(dag_id="warm_probe", schedule=None)
def warm_probe():
    @task
    def modules():
        wanted = ("pandas", "pyspark.sql.connect.session", "airflow_connectors.engine.batch")
        return [m for m in wanted if m in sys.modules]

    modules()


warm_probe()
"""


def test_task_processes_start_with_the_preloaded_modules(e2e: Any) -> None:
    from airflow_connectors.airflow.executors import PRELOAD, preload

    assert preload() == []  # every module of the list imports here
    assert {"pandas", "pyspark.sql.connect.session", "airflow_connectors.engine.batch"} <= set(
        PRELOAD
    )
    af = e2e.airflow
    (e2e.root / "dags" / "warm_probe.py").write_text(PROBE)
    af.wait_for_dags(["warm_probe"])
    af.set_paused("warm_probe", False)
    run_id = af.trigger("warm_probe")
    run = af.wait_run("warm_probe", run_id)
    assert run["state"] == "success", af.explain_run("warm_probe", run_id)
    xcom = af._json(
        "GET",
        f"/api/v2/dags/warm_probe/dagRuns/{run_id}/taskInstances/modules/xcomEntries/return_value",
    )
    value = xcom["value"]
    found = json.loads(value) if isinstance(value, str) else value
    assert found == ["pandas", "pyspark.sql.connect.session", "airflow_connectors.engine.batch"]
    log = af.log_file.read_text(errors="replace")
    assert "WarmLocalExecutor: task processes start with" in log
