"""Airflow API server extensions: the connector management REST API (:mod:`.connect`)
and the Connectors UI page."""
