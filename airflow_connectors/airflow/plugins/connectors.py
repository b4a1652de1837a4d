"""The provider's Airflow plugin (entry point ``airflow.plugins``): mounts the
connector management REST API in the API server at ``/connect`` and adds the
"Connectors" page to the Airflow UI's navigation."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_connectors.airflow.api.connect import create_app
from airflow_connectors.airflow.api.connect.app import BaseUrlWithoutSlash
from airflow_connectors.airflow.freshness import ConnectorLastCommit
from airflow_connectors.airflow.timetables import (
    ConnectorCronTimetable,
    ConnectorPartitionTimetable,
)


class AirflowConnectorsPlugin(AirflowPlugin):
    """The plugin Airflow loads: the ``/connect`` REST API, the Connectors page and the
    cron timetables of connector DAGs (plain and partitioned)."""

    name = "airflow_connectors"
    # Custom timetables must be registered for the scheduler to deserialize them.
    timetables = [ConnectorCronTimetable, ConnectorPartitionTimetable]  # noqa: RUF012 - Airflow's plugin attribute
    # Custom deadline references too: the freshness alert's "time since the last commit".
    deadline_references = [ConnectorLastCommit]  # noqa: RUF012 - Airflow's plugin attribute
    fastapi_apps = [  # noqa: RUF012 - Airflow's plugin attribute
        {"app": create_app(), "url_prefix": "/connect", "name": "Connectors API"},
    ]
    # Kafka Connect clients read the cluster info at the base URL, /connect, no slash.
    fastapi_root_middlewares = [  # noqa: RUF012 - Airflow's plugin attribute
        {"middleware": BaseUrlWithoutSlash, "name": "Connectors API base URL"},
    ]
    external_views = [  # noqa: RUF012 - Airflow's plugin attribute
        {
            "name": "Connectors",
            "href": "/connect/ui",
            "url_route": "connectors",
            "destination": "nav",
            "category": "browse",
        }
    ]
