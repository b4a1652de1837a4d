"""Sinks: where a table's rows land. See :mod:`.base` for the contract."""

from airflow_connectors._registry import Registry
from airflow_connectors.sinks.base import PartWriter, Sink, SinkUnwritable

SINKS = Registry(
    "sink",
    "airflow_connectors.sinks",
    {
        "parquet": "airflow_connectors.sinks.parquet:ParquetSink",
        "delta": "airflow_connectors.sinks.delta:DeltaSink",
        "iceberg": "airflow_connectors.sinks.iceberg:IcebergSink",
        "postgres": "airflow_connectors.sinks.postgres:PostgresSink",
    },
)

__all__ = ["SINKS", "PartWriter", "Sink", "SinkUnwritable"]
