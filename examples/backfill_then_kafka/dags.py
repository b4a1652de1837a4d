"""The example's DAGs: copy this file and pipeline.yaml into Airflow's DAGs folder.
Two DAGs: ``shop.orders.backfill`` and ``shop.orders.stream``; the stream's gate skips
its runs until the backfill finished, then its runs start on the backfill's asset."""

from pathlib import Path

from airflow_connectors.airflow import ConnectorPipeline

ConnectorPipeline.from_file(str(Path(__file__).with_name("pipeline.yaml"))).dags()
