"""Kafka Connect's REST shape: ``/`` (cluster info), ``/connectors``,
``/connectors/{name}[/config|/status|/tasks|/pause|/resume|/stop|/restart|/offsets]``
and ``/connector-plugins``. A connector's name is ``<pipeline>.<table>.<connector>``.

Kafka Connect tools (clients, CLIs) work against ``<airflow>/connect`` unchanged,
logging in with HTTP Basic as they do with Kafka Connect."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from airflow_connectors import __version__
from airflow_connectors.airflow.api.connect import catalog, plugin_config
from airflow_connectors.airflow.api.connect.errors import ApiError, error_responses
from airflow_connectors.airflow.api.connect.plugin_config import PluginType
from airflow_connectors.engine.control import ConnectorStopped, State
from airflow_connectors.spec.redact import mask_url

router = APIRouter()

# --- shapes --------------------------------------------------------------------------------


class ClusterInfo(BaseModel):
    """Kafka Connect's ``GET /``: what answers here, for tools that check it first."""

    version: str = Field(description="The airflow-connectors version")
    commit: str = Field(description="The Airflow version serving the API")
    kafka_cluster_id: str = Field(description="No Kafka cluster: always 'airflow'")


class ConnectorStateInfo(BaseModel):
    """A connector's state as Kafka Connect reports it."""

    state: str = Field(description="UNASSIGNED, RUNNING, PAUSED, STOPPED, FAILED, RESTARTING")
    worker_id: str
    trace: str | None = Field(default=None, description="Why it failed (only when FAILED)")


class TaskStateInfo(ConnectorStateInfo):
    """One task's state: an ingest task (one batch) of the connector DAG's latest run."""

    id: int = Field(description="The ingest task's map index in the latest run")


class ConnectorStatus(BaseModel):
    """Kafka Connect's connector status: the connector's state and its tasks'."""

    name: str
    connector: ConnectorStateInfo
    tasks: list[TaskStateInfo]
    type: str


class TaskId(BaseModel):
    """Names a task: the connector and the task's number."""

    connector: str
    task: int


class ConnectorInfo(BaseModel):
    """Kafka Connect's connector info: name, config (secrets masked), tasks, type."""

    name: str
    config: dict[str, Any] = Field(description="The connector as written in its spec")
    tasks: list[TaskId]
    type: str


class ConnectorExpanded(BaseModel):
    """A connector in ``GET /connectors?expand=...``: what was asked for."""

    status: ConnectorStatus | None = None
    info: ConnectorInfo | None = None


class TaskInfo(BaseModel):
    """A task and its config: the batch it ingests."""

    id: TaskId
    config: dict[str, Any]


class OffsetEntry(BaseModel):
    """One source key's committed offset. PATCH also takes Kafka Connect's KIP-875 shape,
    ``{"partition": {"key": K}, "offset": {"offset": N, "records": R, "completed": C}}``,
    where ``"offset": null`` forgets the key."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="The source key (masked as GET shows it, or with its secrets)")
    offset: int | None = Field(default=None, description="Where reading resumes; null forgets")
    records: int = 0
    completed: bool = False
    meta: Any = Field(default=None, description="The transport's own resume data, if any")

    @model_validator(mode="before")
    @classmethod
    def _kip_875(cls, data: Any) -> Any:
        if not (isinstance(data, dict) and "partition" in data):
            return data
        partition, offset = data.get("partition"), data.get("offset")
        if not isinstance(partition, dict) or set(partition) != {"key"}:
            raise ValueError('a KIP-875 entry\'s partition is {"key": "<source key>"}')
        if offset is None:
            return {"key": partition["key"], "offset": None}
        if not isinstance(offset, dict):
            raise ValueError('a KIP-875 entry\'s offset is an object ({"offset": N, ...}) or null')
        return {"key": partition["key"], **offset}


class OffsetsPatch(BaseModel):
    """The offsets to set (``PATCH .../offsets``); keys not listed are kept."""

    offsets: list[OffsetEntry]


class Offsets(BaseModel):
    """A connector's committed offsets, one entry per source key."""

    offsets: list[dict[str, Any]] = Field(
        description="Per source key: key (secrets masked), offset, records, completed, meta"
    )
    watermark: dict[str, Any] | None = Field(
        default=None,
        description="Absent until set: key (every key up to it is committed; committed "
        "keys below it that are older than late_after have no entry in offsets), "
        "late_after (epoch seconds) and since_relist (discoveries since the last full "
        "listing)",
    )


class Message(BaseModel):
    """A one-line answer for the user."""

    message: str


class PluginInfo(BaseModel):
    """A transport, format or sink that connectors may name."""

    model_config = ConfigDict(populate_by_name=True)

    class_: str = Field(alias="class")
    type: PluginType
    version: str


class ConfigKeyInfo(BaseModel):
    """One field of a plugin's config: name, type, whether required, default and its
    documentation."""

    name: str
    type: str
    required: bool
    default_value: Any
    documentation: str


class ConfigInfos(BaseModel):
    """Kafka Connect's validation answer: each field with its value and errors, and the
    number of errors."""

    name: str
    error_count: int
    groups: list[str]
    configs: list[dict[str, Any]] = Field(description="Per field: definition and value")


# --- routes --------------------------------------------------------------------------------

_CONNECTOR_ERRORS = error_responses(404)


@router.get("/", response_model=ClusterInfo)
def cluster_info() -> dict[str, Any]:
    """Kafka Connect's cluster info: this package's and Airflow's versions."""
    from airflow import __version__ as airflow_version

    return {
        "version": __version__,
        "commit": f"airflow {airflow_version}",
        "kafka_cluster_id": "airflow",
    }


@router.get("/connectors", response_model=list[str] | dict[str, ConnectorExpanded])
def list_connectors(request: Request, expand: list[str] = Query(default=[])) -> Any:  # noqa: B008
    """The names of the connectors the user may read; with ``expand=status`` and/or
    ``expand=info``, each one's status and info by name."""
    # Only the connectors whose DAG the user may read.
    from airflow_connectors.airflow.api.connect.auth import may

    user = request.state.connect_user
    names = [
        catalog.connector_name(ref)
        for ref in catalog.known_connectors()
        if may(user, "GET", catalog.connector_name(ref))
    ]
    if not expand:
        return names
    out: dict[str, Any] = {}
    for name in names:
        ref = catalog.ref_by_name(name)
        entry: dict[str, Any] = {}
        if "status" in expand:
            entry["status"] = catalog.connector_status(ref)
        if "info" in expand:
            entry["info"] = catalog.connector_info(ref)
        out[name] = entry
    return JSONResponse(out)  # as built: no nulls for what was not asked


@router.get(
    "/connectors/{name}",
    response_model=ConnectorInfo,
    responses={**_CONNECTOR_ERRORS, **error_responses(409)},
)
def get_connector(name: str) -> dict[str, Any]:
    """The connector's info: config (secrets masked) and tasks."""
    return catalog.connector_info(catalog.ref_by_name(name))


@router.get(
    "/connectors/{name}/config",
    response_model=dict[str, Any],
    responses={**_CONNECTOR_ERRORS, **error_responses(409)},
)
def get_config(name: str) -> dict[str, Any]:
    """The connector's config as written in its spec, secrets masked."""
    return catalog.masked_config(catalog.ref_by_name(name))


@router.get(
    "/connectors/{name}/status",
    response_model=ConnectorStatus,
    response_model_exclude_unset=True,
    responses=_CONNECTOR_ERRORS,
)
def get_status(name: str) -> dict[str, Any]:
    """The connector's state and its tasks' (the ingest tasks of its DAG's latest run)."""
    return catalog.connector_status(catalog.ref_by_name(name))


@router.get("/connectors/{name}/tasks", response_model=list[TaskInfo], responses=_CONNECTOR_ERRORS)
def get_tasks(name: str) -> list[dict[str, Any]]:
    """The connector's tasks, each with the batch it ingests."""
    ref = catalog.ref_by_name(name)
    return [
        {"id": {"connector": name, "task": t["id"]}, "config": {"batch_id": t["batch_id"]}}
        for t in catalog.task_list(ref)
    ]


@router.get(
    "/connectors/{name}/tasks/{task}/status",
    response_model=TaskStateInfo,
    response_model_exclude_unset=True,
    responses=_CONNECTOR_ERRORS,
)
def get_task_status(name: str, task: int) -> dict[str, Any]:
    """One task's state; 404 when the latest run has no such task."""
    return catalog.task_status(catalog.ref_by_name(name), task)


@router.post(
    "/connectors/{name}/restart",
    status_code=202,
    response_model=None,
    responses={
        202: {
            "model": ConnectorStatus,
            "description": "Restarting (onlyFailed or includeTasks): the status, what restarts RESTARTING",
        },
        204: {"description": "A new run of the connector's DAG was triggered"},
        **_CONNECTOR_ERRORS,
        **error_responses(409),
    },
)
def restart(name: str, includeTasks: bool = False, onlyFailed: bool = False) -> Response:
    """Kafka Connect's restart. Plain: a new run of the connector's DAG (204).
    ``onlyFailed``: only a FAILED connector restarts. ``includeTasks``: the latest run's
    ingest tasks (with ``onlyFailed``, the failed ones) run again. Those answer 202 with
    the status, what restarts RESTARTING. A stopped connector: 409."""
    ref = catalog.ref_by_name(name)
    tasks = catalog.task_list(ref)
    try:
        plan = catalog.control().restart(
            ref,
            include_tasks=includeTasks,
            only_failed=onlyFailed,
            tasks=[t["id"] for t in tasks],
            failed_tasks=[t["id"] for t in tasks if t["state"] == State.FAILED],
            failed_task_trace=catalog.failed_task_trace(tasks),
        )
    except ConnectorStopped as e:
        raise ApiError(409, str(e)) from e
    if plan.run:
        catalog.trigger_run(ref)
    if plan.run and not plan.restarting:
        return Response(status_code=204)
    catalog.clear_tasks(ref, list(plan.tasks))
    status = catalog.connector_status(ref)
    for t in status["tasks"]:
        if t["id"] in plan.tasks:
            t["state"] = State.RESTARTING
    return JSONResponse(status, 202)


@router.post(
    "/connectors/{name}/tasks/{task}/restart",
    status_code=204,
    response_class=Response,
    responses=_CONNECTOR_ERRORS,
)
def restart_task(name: str, task: int) -> Response:
    """Run one ingest task of the latest run again (and the tasks after it)."""
    ref = catalog.ref_by_name(name)
    catalog.task_status(ref, task)  # 404 for an unknown task
    catalog.clear_tasks(ref, [task])
    return Response(status_code=204)


@router.put(
    "/connectors/{name}/pause",
    status_code=202,
    response_class=Response,
    responses={**_CONNECTOR_ERRORS, **error_responses(409)},
)
def pause(name: str) -> Response:
    """Pause the connector (its DAG); from STOPPED too, as Kafka Connect does."""
    catalog.act(catalog.ref_by_name(name), "pause")  # from STOPPED too, as Kafka Connect
    return Response(status_code=202)


@router.put(
    "/connectors/{name}/resume",
    status_code=202,
    response_class=Response,
    responses={**_CONNECTOR_ERRORS, **error_responses(409)},
)
def resume(name: str) -> Response:
    """Resume a paused or stopped connector."""
    catalog.act(catalog.ref_by_name(name), "resume")
    return Response(status_code=202)


@router.put(
    "/connectors/{name}/stop",
    status_code=204,
    response_class=Response,
    responses={**_CONNECTOR_ERRORS, **error_responses(409)},
)
def stop(name: str) -> Response:
    """Stop the connector: paused, with its planned batches released, so its offsets may
    be edited."""
    catalog.act(catalog.ref_by_name(name), "stop")
    return Response(status_code=204)


@router.get(
    "/connectors/{name}/offsets",
    response_model=Offsets,
    response_model_exclude_none=True,
    responses=_CONNECTOR_ERRORS,
)
def get_offsets(name: str) -> dict[str, Any]:
    """The connector's committed offsets, and its watermark once it has one; keys with
    secrets are shown masked."""
    ref = catalog.ref_by_name(name)
    # Keys are shown masked (a URL's password); PATCH accepts them as shown.
    store = catalog.state_store()
    offsets = store.offsets(ref)
    answer: dict[str, Any] = {"offsets": [{**o, "key": mask_url(o["key"])} for o in offsets]}
    watermark = store.watermark(ref)
    if watermark is not None:
        answer["watermark"] = {**watermark, "key": mask_url(watermark["key"])}
    return answer


@router.patch(
    "/connectors/{name}/offsets",
    response_model=Message,
    responses={**_CONNECTOR_ERRORS, **error_responses(400)},
)
def patch_offsets(name: str, body: OffsetsPatch) -> dict[str, Any]:
    """Set offsets of a stopped connector (400 otherwise); ``offset: null`` forgets a
    key. Masked keys are accepted as GET shows them."""
    ref = catalog.ref_by_name(name)
    catalog.edit_offsets(ref, [e.model_dump() for e in body.offsets])
    return {"message": f"The offsets of connector {name} were altered; resume it to use them."}


@router.delete(
    "/connectors/{name}/offsets",
    response_model=Message,
    responses={**_CONNECTOR_ERRORS, **error_responses(400)},
)
def delete_offsets(name: str) -> dict[str, Any]:
    """Forget every offset of a stopped connector (400 otherwise): resumed, it reads its
    input again from the start."""
    catalog.edit_offsets(catalog.ref_by_name(name), None)
    return {
        "message": f"The offsets of connector {name} were reset; resume it to re-read its input."
    }


@router.get("/connector-plugins", response_model=list[PluginInfo])
def list_plugins() -> list[dict[str, str]]:
    """Every transport, format and sink installed (built in or by entry point)."""
    return [
        {"class": name, "type": kind, "version": __version__}
        for kind, registry in plugin_config.registries()
        for name in registry.names()
    ]


# ``type`` picks one of two plugins of one name (the parquet format and sink).
@router.get(
    "/connector-plugins/{plugin}/config",
    response_model=list[ConfigKeyInfo],
    responses=error_responses(404),
)
def plugin_definitions(plugin: str, type: PluginType | None = None) -> list[dict[str, Any]]:
    """The fields of the plugin's config; ``type`` picks one of two plugins of one name."""
    return plugin_config.definitions(plugin_config.plugin_model(plugin, type))


@router.put(
    "/connector-plugins/{plugin}/config/validate",
    response_model=ConfigInfos,
    responses=error_responses(404),
)
def validate_config(
    request: Request,
    plugin: str,
    config: dict[str, Any] | str = Body(  # noqa: B008
        ...,
        description="The config to check: a JSON object (or, as some Kafka Connect clients "
        "send it, a JSON string holding one)",
    ),
    type: PluginType | None = None,
) -> dict[str, Any]:
    """Check a config against the plugin's fields; errors are per field, as Kafka Connect
    answers. A valid config's named Airflow connections are tested as ``airflow
    connections test`` does (they exist, their service answers), with the rights and
    the setting Airflow asks for that: a caller who may not test a named connection gets
    403 (whether or not it exists); while Airflow's ``[core] test_connection`` is not
    ``Enabled`` (its default), connections are not tested, only the config is."""
    from airflow_connectors.airflow.api.connect.auth import (
        connection_testing_enabled,
        require_connection_tests,
    )
    from airflow_connectors.airflow.connections import check_connections, conn_ids

    values = _object(config)
    model = plugin_config.plugin_model(plugin, type)
    named = conn_ids(values)
    require_connection_tests(request, named)
    check = check_connections if named and connection_testing_enabled() else None
    return plugin_config.validate(plugin, model, values, check)


def _object(config: dict[str, Any] | str) -> dict[str, Any]:
    """The config object; kafka-connect-py's validate sends it JSON-encoded twice."""
    if isinstance(config, dict):
        return config
    try:
        parsed = json.loads(config)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ApiError(400, "invalid request: body: the config must be a JSON object")
    return parsed
