"""The Spark session the engine runs batches in (imported only when a batch runs)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_connectors.settings import Settings


def spark_session(settings: Settings, app_name: str = "airflow-connectors") -> SparkSession:
    # Executors' Python workers must import airflow_connectors: use this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from airflow_connectors.engine.datasource import register

    spark = (
        SparkSession.builder.master(settings.spark_master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", settings.spark_driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
