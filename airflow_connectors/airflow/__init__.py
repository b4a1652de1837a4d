"""Layer 5: the Airflow provider. Renders a parsed pipeline into one DAG per connector
(``ConnectorPipeline``), or one connector into a task group of a user's own DAG
(``ConnectorTaskGroup``); all logic lives in the layers below (spec, engine, state).

``from airflow_connectors.airflow import ConnectorPipeline`` imports Airflow's task SDK
but never pyspark: DAG files stay fast to parse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_connectors.airflow.render import ConnectorPipeline, connector_asset, render_dags
    from airflow_connectors.airflow.task_group import ConnectorTaskGroup

__all__ = ["ConnectorPipeline", "ConnectorTaskGroup", "connector_asset", "render_dags"]


def __getattr__(name: str) -> Any:
    # Lazy, so importing a submodule of the package does not import Airflow.
    if name == "ConnectorTaskGroup":
        from airflow_connectors.airflow.task_group import ConnectorTaskGroup

        return ConnectorTaskGroup
    if name in __all__:
        from airflow_connectors.airflow import render

        return getattr(render, name)
    raise AttributeError(name)
