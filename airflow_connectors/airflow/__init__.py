"""Layer 5: the Airflow provider. Renders a parsed pipeline into one DAG per connector;
all logic lives in the layers below (spec, engine, state).

``from airflow_connectors.airflow import ConnectorPipeline`` imports Airflow's task SDK
but never pyspark: DAG files stay fast to parse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_connectors.airflow.render import ConnectorPipeline, connector_asset, render_dags

__all__ = ["ConnectorPipeline", "connector_asset", "render_dags"]


def __getattr__(name: str) -> Any:
    # Lazy, so importing a submodule of the package does not import Airflow.
    if name in __all__:
        from airflow_connectors.airflow import render

        return getattr(render, name)
    raise AttributeError(name)
