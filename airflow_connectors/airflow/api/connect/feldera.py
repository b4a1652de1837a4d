"""Feldera's REST shape (its pipeline manager's ``/v0``):
``/v0/pipelines/{p}/tables/{t}/connectors/{c}/start|pause|stats``,
``/v0/pipelines/{p}/stats`` and ``/v0/pipelines/{p}/start|pause|resume``, plus the
table's schema and its stored versions at ``/v0/pipelines/{p}/tables/{t}/schema``, with
Feldera's status codes: a connector action answers 200, a pipeline action 202
(accepted), an unknown action 400 for a connector and 404 for a pipeline (there is no
such route), an unknown pipeline, table or connector 404; errors in Feldera's
``ErrorResponse`` (:mod:`.errors`).

``stats`` answers Feldera's ``ControllerStatus``: ``global_metrics`` holds every field
Feldera requires, real where this engine has the figure and Feldera's neutral value where
the concept does not exist here (:data:`NEUTRAL_METRICS`):

=============================================  ===============================================
field                                          value here
=============================================  ===============================================
``state``                                      ``Paused`` (the pipeline's flag) or ``Running``
``total_input_records``, ``_bytes``            committed records and bytes of its connectors
``total_processed_records``, ``_bytes``,       the same: a record counts once its batch
``total_completed_records``                    committed (input, processed, complete at once)
``buffered_input_records``, ``_bytes``         what planned batches hold, not committed yet
``total_initiated_steps``,                     batches planned (still planned or committed)
``total_completed_steps``                      and batches committed (a batch is a step)
``pipeline_complete``                          every connector at end of input, none in flight
``incarnation_uuid``                           a UUID derived from the pipeline's name
``transaction_status``, ``transaction_id``,    ``NoTransaction``, 0, none: each batch commits
``transaction_initiators``                     alone, there are no user transactions
``bootstrap_in_progress``,                     false, ``Inactive``: nothing bootstraps
``concurrent_bootstrap_phase``
``memory_pressure``                            ``low``; ``memory_pressure_epoch`` 0
``rss_bytes``, ``cpu_msecs``, ``uptime_msecs``, 0: no long-running pipeline process exists
``start_time``, ``initial_start_time``,        (each run is an Airflow task and a Spark job)
``runtime_elapsed_msecs``, ``storage_bytes``,
``storage_mb_secs``, ``output_stall_msecs``
=============================================  ===============================================

``outputs`` is empty (no output connectors). A connector's ``InputEndpointStatus`` says
``barrier: false`` (a batch commits alone, holding nothing else back) and
``buffered_bytes`` (planned, not committed); ``state`` and ``metrics.lag`` are extras.
As in Feldera, the pipeline's ``inputs`` carry error lists only with
``?include_connector_errors=true``.

Table names are SQL identifiers as in Feldera: unquoted ones are case-insensitive,
quoted ones (``"Name"``, URL-encoded ``%22Name%22``) exact; connector names are
case-sensitive."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, Field

from airflow_connectors.airflow.api.connect import catalog
from airflow_connectors.airflow.api.connect.errors import ApiError
from airflow_connectors.airflow.api.connect.errors import (
    feldera_error_responses as error_responses,
)

router = APIRouter(prefix="/v0/pipelines", responses=error_responses(400, 401, 403))

#: ``global_metrics`` fields whose concept does not exist here, at Feldera's neutral
#: value (see the module's table).
NEUTRAL_METRICS: dict[str, Any] = {
    "bootstrap_in_progress": False,
    "transaction_status": "NoTransaction",
    "transaction_id": 0,
    "transaction_initiators": {"initiated_by_connectors": {}},
    "concurrent_bootstrap_phase": "Inactive",
    "rss_bytes": 0,
    "memory_pressure": "low",
    "memory_pressure_epoch": 0,
    "cpu_msecs": 0,
    "uptime_msecs": 0,
    "start_time": 0,
    "initial_start_time": 0,
    "storage_bytes": 0,
    "storage_mb_secs": 0,
    "runtime_elapsed_msecs": 0,
    "output_stall_msecs": 0,
}


class GlobalMetrics(BaseModel):
    """Feldera's ``GlobalControllerMetrics`` (see the module's table)."""

    state: str = Field(description="Paused or Running")
    total_input_records: int
    total_input_bytes: int
    total_processed_records: int
    total_processed_bytes: int
    total_completed_records: int
    buffered_input_records: int
    buffered_input_bytes: int
    total_initiated_steps: int
    total_completed_steps: int
    pipeline_complete: bool
    incarnation_uuid: str
    bootstrap_in_progress: bool
    transaction_status: str
    transaction_id: int
    transaction_initiators: dict[str, Any]
    concurrent_bootstrap_phase: str
    rss_bytes: int
    memory_pressure: str
    memory_pressure_epoch: int
    cpu_msecs: int
    uptime_msecs: int
    start_time: int
    initial_start_time: int
    storage_bytes: int
    storage_mb_secs: int
    runtime_elapsed_msecs: int
    output_stall_msecs: int


class PipelineStats(BaseModel):
    """Feldera's ``ControllerStatus``: global metrics, each connector's status, and no
    outputs."""

    global_metrics: GlobalMetrics
    inputs: list[dict[str, Any]] = Field(
        description="Each connector's status, as .../connectors/{connector}/stats answers "
        "(error lists only with include_connector_errors=true), by endpoint name"
    )
    outputs: list[dict[str, Any]] = Field(description="Always empty: no output connectors")


def _pipeline_refs(pipeline: str) -> list[Any]:
    refs = catalog.known_connectors(pipeline)
    if not refs:
        raise catalog.unknown_pipeline(pipeline)
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
            400,
            f"Invalid connector action {action!r}; valid actions are: 'start' or 'pause'",
            code="InvalidConnectorAction",
            details={"action": action},
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
def pipeline_stats(pipeline: str, include_connector_errors: bool = False) -> dict[str, Any]:
    """The pipeline's statistics (Feldera's ``ControllerStatus``): ``Paused`` or
    ``Running``, the totals of its connectors and every connector's status."""
    import uuid

    refs = _pipeline_refs(pipeline)
    store = catalog.state_store()
    paused = store.pipeline_paused(pipeline)
    inputs = sorted((catalog.feldera_status_of(r) for r in refs), key=lambda i: i["endpoint_name"])
    if not include_connector_errors:
        for i in inputs:
            i["parse_errors"] = i["transport_errors"] = None
    records = sum(i["metrics"]["total_records"] for i in inputs)
    nbytes = sum(i["metrics"]["total_bytes"] for i in inputs)
    initiated, completed = store.batch_counts(pipeline)
    return {
        "global_metrics": {
            **NEUTRAL_METRICS,
            "state": "Paused" if paused else "Running",
            "total_input_records": records,
            "total_input_bytes": nbytes,
            "total_processed_records": records,
            "total_processed_bytes": nbytes,
            "total_completed_records": records,
            "buffered_input_records": sum(i["metrics"]["buffered_records"] for i in inputs),
            "buffered_input_bytes": sum(i["metrics"]["buffered_bytes"] for i in inputs),
            "total_initiated_steps": initiated,
            "total_completed_steps": completed,
            "pipeline_complete": all(
                i["metrics"]["end_of_input"] and not i["metrics"]["buffered_records"]
                for i in inputs
            ),
            "incarnation_uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"pipeline:{pipeline}")),
        },
        "inputs": inputs,
        "outputs": [],
    }


class PipelineStatus(BaseModel):
    """Feldera's ``PipelineSelectedInfo`` with its required fields: what Feldera's SDK and
    ``fda`` poll (see :func:`pipeline_status`)."""

    id: str = Field(description="A UUID derived from the pipeline's name")
    name: str
    description: str
    tags: list[str]
    created_at: str
    version: int
    platform_version: str
    program_version: int
    program_status: str
    program_status_since: str
    refresh_version: int
    storage_status: str
    deployment_status: str
    deployment_status_since: str
    deployment_desired_status: str
    deployment_desired_status_since: str
    deployment_resources_status: str
    deployment_resources_status_since: str
    deployment_resources_desired_status: str
    deployment_resources_desired_status_since: str


@router.get("/{pipeline}", response_model=PipelineStatus, responses=error_responses(404))
def pipeline_status(pipeline: str) -> dict[str, Any]:
    """The pipeline's status in Feldera's shape. Its program is the spec its DAGs render
    (``Success``: they rendered; versions 1); it is always deployed and provisioned
    (its connectors run on their DAGs' schedules): ``Paused`` or ``Running`` as its flag
    says, desired alike; storage ``InUse`` once a connector planned a batch (offsets are
    kept), else ``Cleared``. ``created_at`` and every ``*_since``: when its first
    connector first planned a batch (the epoch before), the state store keeping no
    earlier time."""
    import datetime as dt
    import uuid

    from airflow_connectors import __version__

    _pipeline_refs(pipeline)
    store = catalog.state_store()
    state = "Paused" if store.pipeline_paused(pipeline) else "Running"
    first = store.first_discovered_at(pipeline)
    since = (
        dt.datetime.fromtimestamp(first or 0, dt.UTC)
        .isoformat(timespec="microseconds")
        .replace("+00:00", "Z")
    )
    return {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"pipeline:{pipeline}")),
        "name": pipeline,
        "description": "",
        "tags": [],
        "created_at": since,
        "version": 1,
        "platform_version": f"airflow-connectors {__version__}",
        "program_version": 1,
        "program_status": "Success",
        "program_status_since": since,
        "refresh_version": 1,
        "storage_status": "InUse" if first is not None else "Cleared",
        "deployment_status": state,
        "deployment_status_since": since,
        "deployment_desired_status": state,
        "deployment_desired_status_since": since,
        "deployment_resources_status": "Provisioned",
        "deployment_resources_status_since": since,
        "deployment_resources_desired_status": "Provisioned",
        "deployment_resources_desired_status_since": since,
    }


def _set_pipeline_paused(pipeline: str, paused: bool) -> Response:
    _pipeline_refs(pipeline)
    catalog.control().set_pipeline_paused(pipeline, paused)
    return Response(status_code=202)


@router.post(
    "/{pipeline}/start", status_code=202, response_class=Response, responses=error_responses(404)
)
def start_pipeline(pipeline: str, initial: str = "running") -> Response:
    """Feldera's start: run the pipeline (resume it when paused; ``initial=paused``:
    pause it instead). Its connectors' own flags are kept. There is no deployment to
    start: the connectors run on their DAGs' schedules."""
    if initial not in ("running", "paused"):
        raise ApiError(
            400,
            f"initial={initial!r}: this pipeline starts 'running' or 'paused' (there is "
            "no standby)",
            details={"initial": initial},
        )
    return _set_pipeline_paused(pipeline, initial == "paused")


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
        404,
        f"unknown pipeline action {action!r}; the pipeline actions are 'start', 'pause' "
        "and 'resume'",
        code="UnsupportedPipelineAction",
        details={"action": action},
    )
