"""Kafka Connect's REST shape: ``/`` (cluster info), ``/connectors``,
``/connectors/{name}[/config|/status|/tasks|/pause|/resume|/stop|/restart|/offsets]``
and ``/connector-plugins``. A connector's name is ``<pipeline>.<table>.<connector>``.

Kafka Connect tools (clients, CLIs) work against ``<airflow>/connect`` unchanged,
logging in with HTTP Basic as they do with Kafka Connect."""

from __future__ import annotations

import json
from typing import Any, Literal

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from airflow_connectors import __version__
from airflow_connectors.airflow.api.connect import catalog, plugin_config
from airflow_connectors.airflow.api.connect.errors import ApiError, error_responses
from airflow_connectors.airflow.api.connect.plugin_config import PluginType
from airflow_connectors.engine.control import (
    ConnectorStopped,
    State,
    check_watermark_entries,
    is_watermark_entry,
    kip875_offsets,
    offset_entry,
)
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
    version: str | None = Field(default=None, description="The plugin's version")


class TaskStateInfo(ConnectorStateInfo):
    """One task's state: an ingest task (one batch) of the latest run of the connector DAG that planned batches."""

    id: int = Field(
        description="The ingest task's map index in the latest run that planned batches"
    )


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
    config: dict[str, str] = Field(
        description="The connector's spec as Kafka Connect's flat map of strings: "
        "connector.class (the transport), tasks.max, transport.config.<field>, "
        "format.name, format.config.<field>, errors.<field>, ...; secrets masked"
    )
    tasks: list[TaskId]
    type: str


class ConnectorExpanded(BaseModel):
    """A connector in ``GET /connectors?expand=...``: what was asked for."""

    status: ConnectorStatus | None = None
    info: ConnectorInfo | None = None


class TaskInfo(BaseModel):
    """A task and its config: the batch it ingests."""

    id: TaskId
    config: dict[str, str] = Field(description="batch_id: the batch the task ingests")


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
        return offset_entry(data)


class OffsetsPatch(BaseModel):
    """The offsets to set (``PATCH .../offsets``); keys not listed are kept. The
    watermark's entry may come back as GET showed it (it is derived, not edited)."""

    offsets: list[OffsetEntry]
    #: The watermark's entries given (taken out of ``offsets`` before validation).
    watermarks: list[dict[str, Any]] = Field(default_factory=list, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _watermarks(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("offsets"), list):
            entries = data["offsets"]
            return {
                **data,
                "offsets": [e for e in entries if not is_watermark_entry(e)],
                "watermarks": [e for e in entries if is_watermark_entry(e)],
            }
        return data


class ConnectorOffset(BaseModel):
    """One KIP-875 entry: a source key's ``partition`` and its ``offset``."""

    partition: dict[str, Any] = Field(
        description='{"key": <source key, secrets masked>}; the watermark\'s entry is '
        '{"watermark": <connector name>}'
    )
    offset: dict[str, Any] | None = Field(
        description="offset (where reading resumes), records, completed, meta (the "
        "transport's own resume data, if any); the watermark's: key (every key up to it "
        "is committed; committed keys below it older than late_after have no entry), "
        "late_after (epoch seconds), since_relist (discoveries since the last full "
        "listing)"
    )


class Offsets(BaseModel):
    """A connector's committed offsets in KIP-875's shape, one entry per source key, and
    its watermark's entry once it has one."""

    offsets: list[ConnectorOffset]


class ActiveTopics(BaseModel):
    """KIP-558's topics of one connector: for a connector here, its table."""

    topics: list[str]


class LoggerLevel(BaseModel):
    """KIP-495's level of one logger (``last_modified``: epoch milliseconds of the last
    change through this API, null when never changed)."""

    level: str
    last_modified: int | None = None


class LevelChange(BaseModel):
    """The level to set (``DEBUG``, ``INFO``, ``WARN``, ``ERROR``, ...)."""

    level: str


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
    """One field of a plugin's config, as Kafka's ConfigKeyInfo (4.x): name, type
    (Kafka's ConfigDef type), whether required, default (a config string), importance,
    documentation, group, order_in_group, width, display name and dependents."""

    name: str
    type: str
    required: bool
    default_value: str | None
    importance: Literal["HIGH", "MEDIUM", "LOW"]
    documentation: str
    group: str
    order_in_group: int
    width: Literal["NONE", "SHORT", "MEDIUM", "LONG"]
    display_name: str
    dependents: list[str]


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
    response_model=dict[str, str],
    responses={**_CONNECTOR_ERRORS, **error_responses(409)},
)
def get_config(name: str) -> dict[str, str]:
    """The connector's config as Kafka Connect's flat map of strings, secrets masked."""
    return catalog.flat_config(catalog.ref_by_name(name))


@router.put(
    "/connectors/{name}/config",
    response_model=ConnectorInfo,
    responses={**_CONNECTOR_ERRORS, **error_responses(400, 409)},
)
def put_config(
    request: Request,
    name: str,
    config: dict[str, Any] = Body(  # noqa: B008
        ..., description="The connector's flat config, as GET .../config answers it"
    ),
) -> dict[str, Any]:
    """Kafka Connect's create-or-update. Connectors are declared in pipeline specs (their
    DAG files), which the API does not rewrite: an existing connector's config given
    as GET shows it (secrets as shown, masked) answers 200 with its info, unchanged; an
    invalid config 400 with its errors, as Kafka Connect answers; a config that would
    change the connector, or create one, 409 naming what differs and where to change
    it."""
    from airflow_connectors.spec.flat import flat_value

    given = {k: flat_value(v) for k, v in config.items()}
    if given.get("name") not in (None, name):
        raise ApiError(
            400,
            f"Connector name configuration ({given['name']}) doesn't match connector name "
            f"in the URL ({name})",
        )
    given["name"] = name
    try:
        ref = catalog.ref_by_name(name)
    except ApiError as e:
        if e.status != 404:
            raise
        raise ApiError(
            409,
            f"Connector {name} does not exist, and connectors are not created through this "
            "API: declare it in a pipeline spec (a table's connectors) and its DAG file "
            "makes it; its name is <pipeline>.<table>.<connector>",
        ) from e
    spec = catalog.spec_of(ref)  # one read of the serialized DAG for both uses
    checked = plugin_config.validate_connector(given, table=catalog.table_of(ref, spec))
    if checked["error_count"]:
        problems = [
            f"{c['value']['name']}: {err}"
            for c in checked["configs"]
            for err in c["value"]["errors"]
        ]
        raise ApiError(
            400,
            f"Connector configuration is invalid and contains the following "
            f"{len(problems)} error(s):\n" + "\n".join(problems) + "\nYou can also find the "
            "above list of errors at the endpoint `/connector-plugins/{connectorType}/config/validate`",
        )
    current = catalog.flat_config(ref, spec)
    changed = sorted(k for k in set(current) | set(given) if current.get(k) != given.get(k))
    if changed:
        raise ApiError(
            409,
            f"connector {name}: this config changes {', '.join(changed)}; connectors are "
            "declared in pipeline specs and the API does not rewrite them: change the "
            "connector in its spec (its DAG file) and Airflow renders it anew. A config "
            "given back as GET .../config shows it (secrets masked) changes nothing",
        )
    return catalog.connector_info(ref)


@router.delete(
    "/connectors/{name}",
    status_code=204,
    response_class=Response,
    responses={**_CONNECTOR_ERRORS, **error_responses(409)},
)
def delete_connector(name: str) -> Response:
    """Kafka Connect's delete. A connector here is its pipeline spec's: 409, naming
    where to remove it (``stop`` pauses it and releases its batches meanwhile)."""
    catalog.ref_by_name(name)  # 404 for an unknown connector
    raise ApiError(
        409,
        f"Connector {name} cannot be deleted through this API: it is declared in a "
        "pipeline spec, and it goes when its spec no longer declares it (its DAG file is "
        f"parsed again); meanwhile PUT /connectors/{name}/stop stops it",
    )


@router.post(
    "/connectors",
    status_code=201,
    response_model=ConnectorInfo,
    responses={**error_responses(400, 409)},
)
def create_connector(
    body: dict[str, Any] = Body(  # noqa: B008
        ..., description="Kafka Connect's {name, config, initial_state}"
    ),
) -> dict[str, Any]:
    """Kafka Connect's create. Connectors are declared in pipeline specs: 409, naming
    where to declare one (an existing name: Kafka Connect's 409, it exists)."""
    name = body.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ApiError(400, "invalid request: body: a connector needs a name")
    name = name.strip()
    try:
        catalog.ref_by_name(name)
    except ApiError as e:
        if e.status != 404:
            raise
        raise ApiError(
            409,
            f"Connector {name} cannot be created through this API: connectors are "
            "declared in pipeline specs (a table's connectors) and their DAG files make "
            "them; its name would be <pipeline>.<table>.<connector>",
        ) from e
    raise ApiError(409, f"Connector {name} already exists")


@router.get(
    "/connectors/{name}/status",
    response_model=ConnectorStatus,
    response_model_exclude_unset=True,
    responses=_CONNECTOR_ERRORS,
)
def get_status(name: str) -> dict[str, Any]:
    """The connector's state and its tasks' (the ingest tasks of the latest run of its DAG that planned batches)."""
    return catalog.connector_status(catalog.ref_by_name(name))


@router.get("/connectors/{name}/tasks", response_model=list[TaskInfo], responses=_CONNECTOR_ERRORS)
def get_tasks(name: str) -> list[dict[str, Any]]:
    """The connector's tasks, each with the batch it ingests."""
    ref = catalog.ref_by_name(name)
    return [
        {
            "id": {"connector": name, "task": t["id"]},
            "config": {} if t["batch_id"] is None else {"batch_id": str(t["batch_id"])},
        }
        for t in catalog.task_list(ref)
    ]


@router.get(
    "/connectors/{name}/tasks/{task}/status",
    response_model=TaskStateInfo,
    response_model_exclude_unset=True,
    responses=_CONNECTOR_ERRORS,
)
def get_task_status(name: str, task: int) -> dict[str, Any]:
    """One task's state; 404 when the latest run that planned batches has no such task."""
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
    responses=_CONNECTOR_ERRORS,
)
def get_offsets(name: str) -> dict[str, Any]:
    """The connector's committed offsets, and its watermark once it has one; keys with
    secrets are shown masked."""
    ref = catalog.ref_by_name(name)
    # Keys are shown masked (a URL's password); PATCH accepts them as shown.
    store = catalog.state_store()
    offsets = [{**o, "key": mask_url(o["key"])} for o in store.offsets(ref)]
    watermark = store.watermark(ref)
    if watermark is not None:
        watermark = {**watermark, "key": mask_url(watermark["key"])}
    return kip875_offsets(offsets, watermark, name)


@router.patch(
    "/connectors/{name}/offsets",
    response_model=Message,
    responses={**_CONNECTOR_ERRORS, **error_responses(400)},
)
def patch_offsets(name: str, body: OffsetsPatch) -> dict[str, Any]:
    """Set offsets of a stopped connector (400 otherwise); ``offset: null`` forgets a
    key. Masked keys are accepted as GET shows them."""
    ref = catalog.ref_by_name(name)
    if body.watermarks:
        shown = [e for e in get_offsets(name)["offsets"] if is_watermark_entry(e)]
        try:
            check_watermark_entries(body.watermarks, shown[0] if shown else None)
        except ValueError as e:
            raise ApiError(400, f"invalid request: body.offsets: {e}") from e
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
def list_plugins(connectorsOnly: bool = True) -> list[dict[str, str]]:
    """The transports (``source``) and sinks (``sink``) installed, built in or by entry
    point; with ``connectorsOnly=false`` the formats (``converter``) too, as Kafka
    Connect lists its converters then."""
    return [
        {"class": name, "type": kind, "version": __version__}
        for kind, registry in plugin_config.registries()
        if kind != "converter" or not connectorsOnly
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
    return plugin_config.definitions(plugin_config.plugin_model(plugin, type), group=plugin)


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
    if "connector.class" in values:  # a whole connector's flat config
        return _validate_connector(request, plugin, values)
    model = plugin_config.plugin_model(plugin, type)
    named = conn_ids(values)
    require_connection_tests(request, named)
    check = check_connections if named and connection_testing_enabled() else None
    return plugin_config.validate(plugin, model, values, check)


def _validate_connector(request: Request, plugin: str, values: dict[str, Any]) -> dict[str, Any]:
    """A whole connector's flat config checked (as PUT .../config checks it), against
    the table of the connector its ``name`` names when the caller may read it."""
    from airflow_connectors.airflow.api.connect.auth import (
        connection_testing_enabled,
        may,
        require_connection_tests,
    )
    from airflow_connectors.airflow.connections import check_connections, conn_ids
    from airflow_connectors.spec.flat import TRANSPORT_PREFIX

    if values["connector.class"] != plugin:
        raise ApiError(
            400,
            f"invalid request: the config's connector.class ({values['connector.class']}) is "
            f"not the plugin in the URL ({plugin})",
        )
    transport = {
        k[len(TRANSPORT_PREFIX) :]: v for k, v in values.items() if k.startswith(TRANSPORT_PREFIX)
    }
    named = conn_ids(transport)
    require_connection_tests(request, named)
    check = check_connections if named and connection_testing_enabled() else None
    table = None
    name = values.get("name")
    if isinstance(name, str) and may(request.state.connect_user, "GET", name):
        try:
            table = catalog.table_of(catalog.ref_by_name(name))
        except ApiError:
            table = None
    return plugin_config.validate_connector(values, table=table, check_connections=check)


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


@router.get(
    "/connectors/{name}/topics",
    response_model=dict[str, ActiveTopics],
    responses=_CONNECTOR_ERRORS,
)
def get_topics(name: str) -> dict[str, Any]:
    """KIP-558's active topics: for a connector here, the table it writes (by the name
    its pipeline gives it), whether or not it has written yet."""
    ref = catalog.ref_by_name(name)
    return {name: {"topics": [ref.table]}}


@router.put(
    "/connectors/{name}/topics/reset",
    status_code=202,
    response_class=Response,
    responses=_CONNECTOR_ERRORS,
)
def reset_topics(name: str) -> Response:
    """KIP-558's reset: a connector's table comes from its spec, not from what it wrote,
    so there is nothing to forget (202, as Kafka Connect answers)."""
    catalog.ref_by_name(name)
    return Response(status_code=202)


@router.get("/admin/loggers", response_model=dict[str, LoggerLevel])
def list_loggers() -> dict[str, Any]:
    """KIP-495's loggers: this package's Python loggers in the API server's process
    (``root`` and every ``airflow_connectors`` logger), with their effective levels."""
    from airflow_connectors.airflow.api.connect import loggers

    return loggers.levels()


@router.get("/admin/loggers/{logger}", response_model=LoggerLevel, responses=error_responses(404))
def get_logger(logger: str) -> dict[str, Any]:
    """One logger's level; 404 for a logger that does not exist."""
    from airflow_connectors.airflow.api.connect import loggers

    return loggers.level(logger)


@router.put(
    "/admin/loggers/{logger}",
    response_model=list[str],
    responses=error_responses(400, 403, 404),
)
def set_logger(
    request: Request, logger: str, body: LevelChange, scope: str = "worker"
) -> list[str]:
    """Set a logger's level in the API server's process (Kafka Connect's default scope,
    ``worker``), its descendants with it; answers the loggers changed. Needs Airflow's
    configuration edit access. ``scope=cluster`` is refused (400): the tasks' log level
    is Airflow's ``[logging] logging_level``; another scope is ``worker``, and a level
    that is not one answers 404, as in Kafka Connect."""
    from airflow_connectors.airflow.api.connect import loggers
    from airflow_connectors.airflow.api.connect.auth import require_config_edit

    require_config_edit(request)
    if scope.lower() == "cluster":
        raise ApiError(
            400,
            "scope=cluster is not supported: loggers are set in the API server's process "
            "(scope=worker); the tasks' log level is Airflow's [logging] logging_level",
        )
    return loggers.set_level(logger, body.level)
