"""Feldera's REST shape (its pipeline manager's ``/v0``):
``/v0/pipelines/{p}/tables/{t}/connectors/{c}/start|pause|stats``,
``/v0/pipelines/{p}/stats`` and ``/v0/pipelines/{p}/pause|resume``, plus the table's
schema and its stored versions at ``/v0/pipelines/{p}/tables/{t}/schema``, with Feldera's
status codes: a connector action answers 200, a pipeline action 202 (accepted), an
unknown action 400 for a connector and 404 for a pipeline (there is no such route),
an unknown pipeline, table or connector 404.

Table names are SQL identifiers as in Feldera: unquoted ones are case-insensitive,
quoted ones (``"Name"``, URL-encoded ``%22Name%22``) exact; connector names are
case-sensitive."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, Field

from airflow_connectors.airflow.api.connect import catalog
from airflow_connectors.airflow.api.connect.errors import ApiError, error_responses

router = APIRouter(prefix="/v0/pipelines")


class GlobalMetrics(BaseModel):
    """The pipeline's state and the records all its connectors ingested."""

    state: str = Field(description="Paused or Running")
    total_input_records: int


class PipelineStats(BaseModel):
    """Feldera's pipeline statistics: global metrics and each connector's status."""

    global_metrics: GlobalMetrics
    inputs: list[dict[str, Any]] = Field(
        description="Each connector's status, as .../connectors/{connector}/stats answers"
    )


def _pipeline_refs(pipeline: str) -> list[Any]:
    refs = catalog.known_connectors(pipeline)
    if not refs:
        raise ApiError(
            404, f"unknown pipeline {pipeline!r}; known pipelines: {catalog.pipeline_names()}"
        )
    return refs


@router.post(
    "/{pipeline}/tables/{table}/connectors/{connector}/{action}",
    response_model=dict[str, Any],
    responses=error_responses(400, 404, 409),
)
def connector_action(pipeline: str, table: str, connector: str, action: str) -> dict[str, Any]:
    """Start or pause one connector (Feldera's ``start``/``pause``). A stopped connector
    does not start (409): resume it first."""
    if action not in ("start", "pause"):
        raise ApiError(
            400, f"unknown action {action!r}; the connector actions are 'start' and 'pause'"
        )
    # start: a stopped connector runs again only after an explicit resume (409).
    ref = catalog.ref_by_feldera_path(pipeline, table, connector)
    catalog.act(ref, "start" if action == "start" else "pause")
    return {}


@router.get(
    "/{pipeline}/tables/{table}/connectors/{connector}/stats",
    response_model=dict[str, Any],
    responses=error_responses(404),
)
def connector_stats(pipeline: str, table: str, connector: str) -> dict[str, Any]:
    """The connector's status in Feldera's shape: config (secrets masked), metrics,
    errors, ``paused`` and the state."""
    return catalog.feldera_status_of(catalog.ref_by_feldera_path(pipeline, table, connector))


class SchemaColumnView(BaseModel):
    """One column: name, SQL type, whether it may be NULL."""

    name: str
    type: str
    nullable: bool


class SchemaChange(BaseModel):
    """A column whose type a schema version changed."""

    name: str
    from_: str = Field(alias="from")
    to: str


class SchemaVersionView(BaseModel):
    """A stored schema version and what it changed from the one before."""

    version: int
    columns: list[SchemaColumnView]
    origin: str = Field(description="what it was inferred from, or which batch added what")
    created_at: str = Field(description="ISO 8601, UTC")
    added: list[str]
    removed: list[str]
    changed: list[SchemaChange]


class TableSchema(BaseModel):
    """A table's columns as batches use them now and its stored schema versions."""

    pipeline: str
    table: str
    inferred: bool | None = Field(description="the spec omits columns: they are inferred")
    schema_evolution: str | None
    schema_hints: dict[str, str]
    primary_key: list[str] = Field(description="the key columns; empty: the table appends")
    sequence_by: str | None = Field(description="what orders two changes of one key")
    version: int | None = Field(description="the latest stored version; null: none stored")
    columns: list[SchemaColumnView]
    versions: list[SchemaVersionView] = Field(description="oldest first")


@router.get(
    "/{pipeline}/tables/{table}/schema",
    response_model=TableSchema,
    response_model_by_alias=True,
    responses=error_responses(404, 409),
)
def table_schema(pipeline: str, table: str) -> dict[str, Any]:
    """The table's current columns (inferred or declared, as evolved, with
    ``_rescued_data`` in rescue mode; empty while an inferred schema awaits data) and
    every schema version stored for it, oldest first. 404: no such pipeline or table;
    409: its DAG was serialized without its spec (by an older airflow-connectors)."""
    from airflow_connectors.engine.schema import schema_view
    from airflow_connectors.spec.models import TableSpec

    refs = catalog.table_refs(pipeline, table)
    doc = catalog.spec_of(refs[0])["table"]
    spec = TableSpec.model_validate({k: v for k, v in doc.items() if k != "connectors"})
    return schema_view(catalog.state_store(), pipeline, refs[0].table, spec)


@router.get("/{pipeline}/stats", response_model=PipelineStats, responses=error_responses(404))
def pipeline_stats(pipeline: str) -> dict[str, Any]:
    """The pipeline's statistics: ``Paused`` or ``Running``, total input records and every
    connector's status."""
    refs = _pipeline_refs(pipeline)
    paused = catalog.state_store().pipeline_paused(pipeline)
    inputs = [catalog.feldera_status_of(r) for r in refs]
    return {
        "global_metrics": {
            "state": "Paused" if paused else "Running",
            "total_input_records": sum(i["metrics"]["total_records"] for i in inputs),
        },
        "inputs": inputs,
    }


def _set_pipeline_paused(pipeline: str, paused: bool) -> Response:
    _pipeline_refs(pipeline)
    catalog.control().set_pipeline_paused(pipeline, paused)
    return Response(status_code=202)


@router.post(
    "/{pipeline}/pause", status_code=202, response_class=Response, responses=error_responses(404)
)
def pause_pipeline(pipeline: str) -> Response:
    """Pause every connector of the pipeline (their own flags are kept)."""
    return _set_pipeline_paused(pipeline, True)


@router.post(
    "/{pipeline}/resume", status_code=202, response_class=Response, responses=error_responses(404)
)
def resume_pipeline(pipeline: str) -> Response:
    """Let the pipeline's running connectors run again."""
    return _set_pipeline_paused(pipeline, False)


@router.post("/{pipeline}/{action}", include_in_schema=False)
def unknown_pipeline_action(pipeline: str, action: str) -> Response:
    """Any other pipeline action: 404 naming the actions there are."""
    # Feldera has no such route: 404, with the actions there are.
    raise ApiError(
        404, f"unknown pipeline action {action!r}; the pipeline actions are 'pause' and 'resume'"
    )
