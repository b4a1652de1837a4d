"""airflow-connectors: Airflow + Spark ingestion connectors (Feldera/Kafka Connect style).

Importing this package is cheap: it imports neither pyspark nor Airflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_connectors.spec.builder import Pipeline as Pipeline

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Lazy, so that importing the package (a DAG file does) stays cheap.
    if name == "Pipeline":
        from airflow_connectors.spec.builder import Pipeline

        return Pipeline
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_provider_info() -> dict[str, Any]:
    """Airflow provider metadata (entry point ``apache_airflow_provider``)."""
    integration = "Airflow Connectors"
    modules = "airflow_connectors.airflow"
    return {
        "package-name": "airflow-connectors",
        "name": "Airflow Connectors",
        "description": "Ingestion connectors (files, HTTP, generators, ...) rendered as one DAG "
        "per connector, every batch a PySpark job, exactly once.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": integration,
                "external-doc-url": "https://airflow.apache.org/docs/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {"integration-name": integration, "python-modules": [f"{modules}.operators.connector"]}
        ],
        "sensors": [
            {"integration-name": integration, "python-modules": [f"{modules}.sensors.new_data"]}
        ],
        "triggers": [
            {"integration-name": integration, "python-modules": [f"{modules}.triggers.new_data"]}
        ],
        "hooks": [{"integration-name": integration, "python-modules": [f"{modules}.hooks.spark"]}],
        # connector://<pipeline>/<table>/<connector>: the asset a connector emits an event
        # on when it finishes; OpenLineage names it <table>/<connector> in
        # connector://<pipeline>.
        "asset-uris": [
            {
                "schemes": ["connector"],
                "handler": f"{modules}.lineage.sanitize_uri",
                "to_openlineage_converter": f"{modules}.lineage.convert_asset_to_openlineage",
            }
        ],
        "config": {
            "connectors": {
                "description": "airflow-connectors settings.",
                "options": {
                    "state_store_url": {
                        "description": "SQLAlchemy URL of the connector state store (offsets, "
                        "batches, metrics). Default: SQLite under $AIRFLOW_HOME/connectors.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "postgresql+psycopg://airflow@db/connectors",
                        "default": None,
                    },
                    "warehouse": {
                        "description": "Folder or s3://bucket/prefix URL where tables are "
                        "written (S3 endpoint and credentials from the AWS_* environment). "
                        "Default: $AIRFLOW_HOME/connectors/warehouse.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/data/warehouse",
                        "default": None,
                    },
                    "spark_master": {
                        "description": "Spark master of ingest tasks while their Spark "
                        "connection (connectors_spark) does not exist.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "local[*]",
                        "default": "local[*]",
                    },
                    "executor_python": {
                        "description": "The Python Spark's executors run "
                        "(spark.pyspark.python), a path on the worker machines. Default: "
                        "the Python of the ingest task.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/opt/venv/bin/python",
                        "default": None,
                    },
                    "ship_package": {
                        "description": "Whether ingest jobs send airflow-connectors to the "
                        "executors (a zip on --py-files): auto (on every master but local), "
                        "always, or never (the workers' Python has it installed).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "never",
                        "default": "auto",
                    },
                },
            }
        },
    }
