"""Formats: how bytes become rows. See :mod:`.base` for the contract."""

from airflow_connectors._registry import Registry
from airflow_connectors.formats.base import Decoded, Format, RecordError

FORMATS = Registry(
    "format",
    "airflow_connectors.formats",
    {
        "json": "airflow_connectors.formats.json_format:JsonFormat",
        "csv": "airflow_connectors.formats.csv_format:CsvFormat",
        "parquet": "airflow_connectors.formats.parquet_format:ParquetFormat",
        "avro": "airflow_connectors.formats.avro_format:AvroFormat",
        "raw": "airflow_connectors.formats.raw_format:RawFormat",
    },
)

__all__ = ["FORMATS", "Decoded", "Format", "RecordError"]
