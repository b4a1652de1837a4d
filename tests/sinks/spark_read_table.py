"""Reads tables with Spark itself and writes what it saw as JSON; run by
test_spark_reads.py in a Python whose pyspark pairs with the Delta/Iceberg jars (see
airflow_connectors/testing/spark_packages.py). Needs only pyspark: it runs in a
virtualenv without the project.

    python spark_read_table.py job.json out.json

job.json: {"master": "local[1]", "conf": {...}, "reads": {key: read}} where a read is
{"format": "delta", "load": "<path>"}, {"table": "<catalog.ns.table>"} or {"sql": "..."},
with "columns": [...] to keep only those.
out.json: {"spark": version, "reads": {key: {"schema": [[name, type, nullable], ...],
"rows": [[value, ...], ...]}}}, rows in Spark's order, values as JSON (decimals, dates and
timestamps as text; timestamps in ISO form, without a zone).
"""

from __future__ import annotations

import datetime
import decimal
import json
import sys
from typing import Any


def plain(value: Any) -> Any:
    """A collected value as JSON."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def main(job_path: str, out_path: str) -> None:
    from pyspark.sql import SparkSession

    with open(job_path) as f:
        job = json.load(f)
    builder = SparkSession.builder.master(job.get("master", "local[1]")).appName("spark-read")
    conf = {
        "spark.driver.memory": "768m",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        **job.get("conf", {}),
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        spark.sparkContext.setLogLevel("ERROR")
        out: dict[str, Any] = {"spark": spark.version, "reads": {}}
        for key, read in job["reads"].items():
            if "load" in read:
                df = spark.read.format(read["format"]).load(read["load"])
            elif "table" in read:
                df = spark.table(read["table"])
            else:
                df = spark.sql(read["sql"])
            if "columns" in read:
                df = df.select(*read["columns"])
            out["reads"][key] = {
                "schema": [[f.name, f.dataType.simpleString(), f.nullable] for f in df.schema],
                "rows": [plain(list(row)) for row in df.collect()],
            }
    finally:
        spark.stop()
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
