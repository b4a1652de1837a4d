"""The Spark connection the ingest tasks submit to.

The provider's default connection id is ``connectors_spark``. When no such connection
exists, ingest tasks run on ``[connectors] spark_master`` (``local[*]`` by default), never
on the stock ``spark_default``'s ``yarn``. Point ``conn_id`` at a ``spark`` connection
(host ``spark://host:7077``, ``yarn``, ``k8s://...``) to run on a cluster.
"""

from __future__ import annotations

import os
import sys

DEFAULT_CONN_ID = "connectors_spark"


def connection_exists(conn_id: str) -> bool:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return False
    return True


def spark_submit_binary() -> str:
    """``spark-submit`` beside this interpreter (the pyspark wheel puts it there), so
    tasks work even when the virtual environment is not on ``PATH``."""
    beside = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    return beside if os.access(beside, os.X_OK) else "spark-submit"
