"""Transports: where bytes (or records) come from. See :mod:`.base` for the contract."""

from airflow_connectors._registry import Registry
from airflow_connectors.transports.base import Cursor, KeyOffset, Limits, Transport, WorkItem

TRANSPORTS = Registry(
    "transport",
    "airflow_connectors.transports",
    {
        "datagen": "airflow_connectors.transports.datagen:DatagenTransport",
        "file_input": "airflow_connectors.transports.file_input:FileInputTransport",
        "url_input": "airflow_connectors.transports.url_input:UrlInputTransport",
        "s3_input": "airflow_connectors.transports.s3_input:S3InputTransport",
        "azure_blob_input": (
            "airflow_connectors.transports.azure_blob_input:AzureBlobInputTransport"
        ),
        "gcs_input": "airflow_connectors.transports.gcs_input:GcsInputTransport",
        "postgres_input": "airflow_connectors.transports.postgres_input:PostgresInputTransport",
        "postgres_cdc_input": (
            "airflow_connectors.transports.postgres_cdc_input:PostgresCdcInputTransport"
        ),
        "nats_input": "airflow_connectors.transports.nats_input:NatsInputTransport",
        "kafka_input": "airflow_connectors.transports.kafka_input:KafkaInputTransport",
        "delta_table_input": (
            "airflow_connectors.transports.delta_table_input:DeltaTableInputTransport"
        ),
        "iceberg_input": "airflow_connectors.transports.iceberg_input:IcebergInputTransport",
    },
)

__all__ = ["TRANSPORTS", "Cursor", "KeyOffset", "Limits", "Transport", "WorkItem"]
