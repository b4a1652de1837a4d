"""The example pipeline as Airflow DAGs: one DAG per connector of pipelines/demo.yaml."""

from airflow_connectors.airflow import ConnectorPipeline

ConnectorPipeline.from_file("../pipelines/demo.yaml").dags()
