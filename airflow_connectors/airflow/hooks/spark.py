"""The Spark connections of the ingest tasks: the ``spark`` one they submit to, and the
``spark_connect`` one (``[connectors] spark_connect_conn_id``, default
``connectors_spark_connect``) of the Spark Connect server that connectors with
``execution: spark_connect`` run their batches on.

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
    """Whether Airflow knows the connection ``conn_id`` (checked before falling back to
    ``[connectors] spark_master``)."""
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


def connection_master(conn_id: str) -> str:
    """The master URL a ``spark`` connection names (host, or ``type://host:port``), as
    the Spark provider's hook reads it."""
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    host = conn.host or ""
    if conn.conn_type == "spark" and host and ("://" in host or not conn.port):
        master = host
    else:
        master = f"{conn.conn_type}://{host}"
    return f"{master}:{conn.port}" if conn.port else master


def define_local_connection(conn_id: str, master: str) -> None:
    """Provide ``conn_id`` as a ``spark`` connection to ``master`` for this process (an
    ``AIRFLOW_CONN_*`` environment variable, Airflow's own way to define connections)."""
    import json

    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(
        {"conn_type": "spark", "host": master}
    )


def spark_connect_url(conn_id: str) -> str | None:
    """The ``sc://host:port/;token=...`` URL of the ``spark_connect`` connection
    ``conn_id`` as the Spark provider's ``SparkConnectHook`` writes it (the password is
    the token), or None when Airflow has no such connection. A secret when it carries
    a token."""
    if not connection_exists(conn_id):
        return None
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    url: str = SparkConnectHook(conn_id).get_connection_url()
    return url
