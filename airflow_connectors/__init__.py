"""airflow-connectors: Airflow + Spark ingestion connectors (Feldera/Kafka Connect style).

Importing this package is cheap: it imports neither pyspark nor Airflow.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def get_provider_info() -> dict[str, Any]:
    """Airflow provider metadata (entry point ``apache_airflow_provider``)."""
    return {
        "package-name": "airflow-connectors",
        "name": "Airflow Connectors",
        "description": "Ingestion connectors (files, HTTP, generators, ...) running as PySpark batches, exactly once.",
        "versions": [__version__],
        "config": {
            "connectors": {
                "description": "airflow-connectors settings.",
                "options": {
                    "state_store_url": {
                        "description": "SQLAlchemy URL of the connector state store (offsets, batches, metrics).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "postgresql+psycopg://airflow@db/connectors",
                        "default": None,
                    },
                    "warehouse": {
                        "description": "Folder where Parquet tables are written.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/data/warehouse",
                        "default": None,
                    },
                },
            }
        },
    }
