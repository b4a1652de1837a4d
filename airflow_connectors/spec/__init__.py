"""Layer 1: pipeline specs. Pure: imports neither Airflow nor Spark."""

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
from airflow_connectors.spec.types import SqlType
from airflow_connectors.spec.validate import parse_pipeline, validate_pipeline

__all__ = [
    "ColumnSpec",
    "ConnectorSpec",
    "ErrorsSpec",
    "FormatSpec",
    "PipelineSpec",
    "SinkSpec",
    "SpecError",
    "SpecValidationError",
    "SqlType",
    "TableSpec",
    "TransportSpec",
    "TriggerSpec",
    "load_pipeline",
    "parse_pipeline",
    "validate_pipeline",
]
