"""Airflow hooks: the Spark connection ingest tasks submit to."""
