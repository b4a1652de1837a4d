"""The connector management REST API, mounted in the Airflow API server at ``/connect``
by the provider's plugin, behind Airflow's own authentication.

Two shapes over one truth (the connector DAG's paused flag, the pipeline flag and the
state store):

- Kafka Connect (:mod:`.kafka_connect`): ``/``, ``/connectors``,
  ``/connectors/{name}[/config|/status|/pause|/resume|/stop|/offsets]``,
  ``/connector-plugins``; a connector's name is ``<pipeline>.<table>.<connector>``.
- Feldera (:mod:`.feldera`): ``/v0/pipelines/{p}/tables/{t}/connectors/{c}/start|pause|
  stats``, ``/v0/pipelines/{p}/stats``, ``/v0/pipelines/{p}/start|pause|resume``.

The connectors are the connector DAGs Airflow knows (DAG tags ``pipeline:<p>`` and
``table:<t>``), with their specs from the serialized ``discover`` task (:mod:`.catalog`):
a connector is listed once its DAG file is parsed, before it ever runs, and rendering
writes nothing to the state store. Plugin config introspection (:mod:`.plugin_config`)
needs no Airflow. Who may call what: :mod:`.auth`. Errors are Kafka Connect's
``{"error_code": <http status>, "message": "..."}`` on its routes and Feldera's
``ErrorResponse`` on the Feldera routes (:mod:`.errors`).
"""

from __future__ import annotations

from airflow_connectors.airflow.api.connect.app import create_app

__all__ = ["create_app"]
