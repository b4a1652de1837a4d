"""Layer 1: pipeline specs. Pure: imports neither Airflow nor Spark, nor the plugins
(transports, formats, sinks): validation looks them up in the :class:`Plugins` it is
given (:mod:`airflow_connectors.catalog` passes the installed ones).

- :mod:`.models`: the validated, immutable models; :mod:`.config`: their base model,
  also the base of every plugin's ``Config``; :mod:`.types`: SQL column types.
- :mod:`.files`: reading YAML/JSON/SQL spec files; :mod:`.validate`: validation;
  :mod:`.errors`: the error type and its messages; :mod:`.graph`: the ``start_after``
  graph; :mod:`.load`: a file read, then validated.
"""

from airflow_connectors.spec.errors import SpecError, SpecValidationError
from airflow_connectors.spec.load import load_pipeline
from airflow_connectors.spec.models import (
    ColumnSpec,
    ConnectorSpec,
    ErrorsSpec,
    FormatSpec,
    PipelineSpec,
    SinkSpec,
    TableSpec,
    TransportSpec,
    TriggerSpec,
)
from airflow_connectors.spec.plugins import Plugins
from airflow_connectors.spec.types import SqlType
from airflow_connectors.spec.validate import parse_pipeline, resolve_connector, validate_pipeline

__all__ = [
    "ColumnSpec",
    "ConnectorSpec",
    "ErrorsSpec",
    "FormatSpec",
    "PipelineSpec",
    "Plugins",
    "SinkSpec",
    "SpecError",
    "SpecValidationError",
    "SqlType",
    "TableSpec",
    "TransportSpec",
    "TriggerSpec",
    "load_pipeline",
    "parse_pipeline",
    "resolve_connector",
    "validate_pipeline",
]
