"""The connector management REST API, mounted in the Airflow API server at ``/connect``
by the provider's plugin, behind Airflow's own authentication.

Two shapes over one truth (the connector DAG's paused flag, the pipeline flag and the
state store):

- Kafka Connect: ``/connectors``, ``/connectors/{name}[/config|/status|/pause|/resume|
  /stop|/offsets]``; a connector's name is ``<pipeline>.<table>.<connector>``.
- Feldera: ``/v0/pipelines/{p}/tables/{t}/connectors/{c}/start|pause|stats``,
  ``/v0/pipelines/{p}/stats``, ``/v0/pipelines/{p}/pause|resume``.

The connectors are the connector DAGs Airflow knows (DAG tags ``pipeline:<p>`` and
``table:<t>``), with their specs from the serialized ``discover`` task: a connector is
listed once its DAG file is parsed, before it ever runs, and rendering writes nothing to
the state store.

Errors are ``{"error_code": <http status>, "message": "..."}``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from fastapi import Body, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_connectors import __version__
from airflow_connectors.settings import Settings
from airflow_connectors.spec.redact import mask_config, mask_text, mask_url, secret_fields
from airflow_connectors.state.store import (
    ConnectorNotStopped,
    ConnectorRef,
    ConnectorState,
    StateStore,
)

UI_PAGE = Path(__file__).with_name("ui.html")


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


PluginType = Literal["source", "converter", "sink"]


class OffsetEntry(BaseModel):
    key: str
    offset: int | None = None
    records: int = 0
    completed: bool = False


class OffsetsPatch(BaseModel):
    offsets: list[OffsetEntry]


@functools.cache
def _store() -> StateStore:
    return StateStore(Settings.load().state_store_url)


def _auth() -> list[Any]:
    """Every route needs a logged-in user (a token or the UI's cookie) and, for a
    connector, the access Airflow's own DAG endpoints need on its DAG: reading needs DAG
    read access, any change (pause, stop, restart, offsets) DAG edit access."""
    from airflow.api_fastapi.core_api.security import get_user

    async def authorize(request: Request, user: Any = Depends(get_user)) -> None:  # noqa: B008
        request.state.connect_user = user
        dag_ids = _dag_ids_of(request.path_params)
        if not dag_ids or request.url.path.endswith("/config/validate"):
            return  # listings, plugins and the page: login only
        method: Literal["GET", "PUT"] = "GET" if request.method in ("GET", "HEAD") else "PUT"
        denied = [d for d in dag_ids if not _may(user, method, d)]
        if denied:
            what = "read" if method == "GET" else "change"
            raise ApiError(
                403,
                f"user {user.get_name()!r} may not {what} connector(s) {', '.join(denied)}: "
                f"that needs DAG {'read' if method == 'GET' else 'edit'} access to their "
                "DAG(s) in Airflow; ask an admin for a role that has it",
            )

    return [Depends(authorize)]


def _dag_ids_of(params: dict[str, Any]) -> list[str]:
    """The connector DAGs a request acts on, from its path parameters."""
    if "name" in params:
        return [_name(_ref(params["name"]))]
    if "connector" in params:
        return [_name(_feldera_ref(params["pipeline"], params["table"], params["connector"]))]
    if "pipeline" in params:
        return [_name(r) for r in _catalog(params["pipeline"])]
    return []


def _may(user: Any, method: Literal["GET", "PUT"], dag_id: str) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
    from airflow.models.dag import DagModel

    team = DagModel.get_team_name(dag_id)
    details = DagDetails(id=dag_id, team_name=team) if team else DagDetails(id=dag_id)
    return bool(get_auth_manager().is_authorized_dag(method=method, details=details, user=user))


def create_app() -> FastAPI:
    from fastapi.openapi.docs import get_swagger_ui_html

    app = FastAPI(
        title="airflow-connectors",
        description="Manage connectors: Kafka Connect and Feldera shapes.",
        version="0.1.0",
        dependencies=_auth(),
        # Served below, behind the same login as every other route.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )

    @app.get("/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, Any]:
        return app.openapi()

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="openapi.json", title="airflow-connectors API")

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse({"error_code": exc.status, "message": exc.message}, exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            {"error_code": exc.status_code, "message": str(exc.detail)},
            exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        return JSONResponse({"error_code": 400, "message": f"invalid request: {problems}"}, 400)

    @app.get("/ui", response_class=HTMLResponse, include_in_schema=False)
    def ui() -> HTMLResponse:
        """The Connectors page (shown in Airflow's navigation by the plugin)."""
        return HTMLResponse(UI_PAGE.read_text())

    # --- Kafka Connect shape ----------------------------------------------------------

    @app.get("/connectors")
    def list_connectors(request: Request, expand: list[str] = Query(default=[])) -> Any:  # noqa: B008
        # Only the connectors whose DAG the user may read.
        user = request.state.connect_user
        names = [_name(ref) for ref in _catalog() if _may(user, "GET", _name(ref))]
        if not expand:
            return names
        out: dict[str, Any] = {}
        for name in names:
            ref = _ref(name)
            entry: dict[str, Any] = {}
            if "status" in expand:
                entry["status"] = _status(ref)
            if "info" in expand:
                entry["info"] = _info(ref)
            out[name] = entry
        return out

    @app.get("/connectors/{name}")
    def get_connector(name: str) -> dict[str, Any]:
        return _info(_ref(name))

    @app.get("/connectors/{name}/config")
    def get_config(name: str) -> dict[str, Any]:
        return _config(_ref(name))

    @app.get("/connectors/{name}/status")
    def get_status(name: str) -> dict[str, Any]:
        return _status(_ref(name))

    @app.get("/connectors/{name}/tasks")
    def get_tasks(name: str) -> list[dict[str, Any]]:
        ref = _ref(name)
        return [
            {"id": {"connector": name, "task": t["id"]}, "config": {"batch_id": t["batch_id"]}}
            for t in _tasks(ref)
        ]

    @app.get("/connectors/{name}/tasks/{task}/status")
    def get_task_status(name: str, task: int) -> dict[str, Any]:
        return _task(_ref(name), task)

    @app.post("/connectors/{name}/restart")
    def restart(name: str, includeTasks: bool = False, onlyFailed: bool = False) -> Response:
        ref = _ref(name)
        state = _status(ref)["connector"]["state"]
        if state == "STOPPED":
            raise ApiError(409, _stopped_message(ref))
        if not includeTasks:
            if onlyFailed and state != "FAILED":
                return JSONResponse(_status(ref), 202)
            _trigger_run(ref)
            if not onlyFailed:
                return Response(status_code=204)
            _store().set_restarting(ref)
            return JSONResponse(_status(ref), 202)
        tasks = [t for t in _tasks(ref) if not onlyFailed or t["state"] == "FAILED"]
        _clear(ref, [t["id"] for t in tasks])
        if tasks or state == "FAILED":
            _store().set_restarting(ref)
        status = _status(ref)
        restarted = {t["id"] for t in tasks}
        for t in status["tasks"]:
            if t["id"] in restarted:
                t["state"] = "RESTARTING"
        return JSONResponse(status, 202)

    @app.post("/connectors/{name}/tasks/{task}/restart", status_code=204)
    def restart_task(name: str, task: int) -> Response:
        ref = _ref(name)
        _task(ref, task)  # 404 for an unknown task
        _clear(ref, [task])
        return Response(status_code=204)

    @app.put("/connectors/{name}/pause", status_code=202)
    def pause(name: str) -> Response:
        from airflow_connectors.engine import control

        ref = _ref(name)
        _set_dag_paused(ref, True)
        control.pause(_store(), ref)  # from STOPPED too, as Kafka Connect
        return Response(status_code=202)

    @app.put("/connectors/{name}/resume", status_code=202)
    def resume(name: str) -> Response:
        from airflow_connectors.engine import control

        ref = _ref(name)
        _set_dag_paused(ref, False)
        control.resume(_store(), ref)
        return Response(status_code=202)

    @app.put("/connectors/{name}/stop", status_code=204)
    def stop(name: str) -> Response:
        from airflow_connectors.engine import control

        ref = _ref(name)
        _set_dag_paused(ref, True)
        control.stop(_store(), ref)
        return Response(status_code=204)

    @app.get("/connectors/{name}/offsets")
    def get_offsets(name: str) -> dict[str, Any]:
        ref = _ref(name)
        # Keys are shown masked (a URL's password); PATCH accepts them as shown.
        return {"offsets": [{**o, "key": mask_url(o["key"])} for o in _store().offsets(ref)]}

    @app.patch("/connectors/{name}/offsets")
    def patch_offsets(name: str, body: OffsetsPatch) -> dict[str, Any]:
        ref = _ref(name)
        _edit_offsets(ref, [e.model_dump() for e in body.offsets])
        return {"message": f"The offsets of connector {name} were altered; resume it to use them."}

    @app.delete("/connectors/{name}/offsets")
    def delete_offsets(name: str) -> dict[str, Any]:
        ref = _ref(name)
        _edit_offsets(ref, None)
        return {
            "message": f"The offsets of connector {name} were reset; resume it to re-read its input."
        }

    @app.get("/connector-plugins")
    def list_plugins() -> list[dict[str, str]]:
        return [
            {"class": name, "type": kind, "version": __version__}
            for kind, registry in _registries()
            for name in registry.names()
        ]

    # ``type`` picks one of two plugins of one name (the parquet format and sink).
    @app.get("/connector-plugins/{plugin}/config")
    def plugin_config(plugin: str, type: PluginType | None = None) -> list[dict[str, Any]]:
        return _definitions(_plugin(plugin, type))

    @app.put("/connector-plugins/{plugin}/config/validate")
    def validate_config(
        plugin: str,
        config: dict[str, Any] = Body(...),  # noqa: B008
        type: PluginType | None = None,
    ) -> dict[str, Any]:
        return _validate(plugin, _plugin(plugin, type), config)

    # --- Feldera shape ----------------------------------------------------------------

    @app.post("/v0/pipelines/{pipeline}/tables/{table}/connectors/{connector}/{action}")
    def feldera_action(pipeline: str, table: str, connector: str, action: str) -> dict[str, Any]:
        if action not in ("start", "pause"):
            raise ApiError(
                400, f"unknown action {action!r}; the connector actions are 'start' and 'pause'"
            )
        from airflow_connectors.engine import control

        ref = _feldera_ref(pipeline, table, connector)
        if action == "start":
            # A stopped connector runs again only after an explicit resume.
            try:
                control.start(_store(), ref)
            except control.ConnectorStopped as e:
                raise ApiError(409, str(e)) from e
            _set_dag_paused(ref, False)
        else:
            _set_dag_paused(ref, True)
            control.pause(_store(), ref)
        return {}

    @app.get("/v0/pipelines/{pipeline}/tables/{table}/connectors/{connector}/stats")
    def feldera_stats(pipeline: str, table: str, connector: str) -> dict[str, Any]:
        return _feldera_status(_feldera_ref(pipeline, table, connector))

    @app.get("/v0/pipelines/{pipeline}/stats")
    def pipeline_stats(pipeline: str) -> dict[str, Any]:
        refs = _catalog(pipeline)
        if not refs:
            raise ApiError(404, f"unknown pipeline {pipeline!r}; known pipelines: {_pipelines()}")
        paused = _store().pipeline_paused(pipeline)
        inputs = [_feldera_status(r) for r in refs]
        return {
            "global_metrics": {
                "state": "Paused" if paused else "Running",
                "total_input_records": sum(i["metrics"]["total_records"] for i in inputs),
            },
            "inputs": inputs,
        }

    @app.post("/v0/pipelines/{pipeline}/{action}")
    def pipeline_action(pipeline: str, action: str) -> dict[str, Any]:
        if action not in ("pause", "resume"):
            raise ApiError(
                400, f"unknown action {action!r}; the pipeline actions are 'pause' and 'resume'"
            )
        if not _catalog(pipeline):
            raise ApiError(404, f"unknown pipeline {pipeline!r}; known pipelines: {_pipelines()}")
        _store().set_pipeline_paused(pipeline, action == "pause")
        return {}

    return app


# --- lookups -----------------------------------------------------------------------------


def _name(ref: ConnectorRef) -> str:
    return f"{ref.pipeline}.{ref.table}.{ref.connector}"


def _catalog(pipeline: str | None = None) -> list[ConnectorRef]:
    """The connectors whose DAGs Airflow knows and their DAG files still render, by name:
    a DAG tagged ``pipeline:<p>`` and ``table:<t>`` whose id is ``<p>.<t>.<connector>``."""
    import sqlalchemy as sa
    from airflow.models.dag import DagModel, DagTag
    from airflow.utils.session import create_session

    q = (
        sa.select(DagTag.dag_id, DagTag.name)
        .join(DagModel, DagModel.dag_id == DagTag.dag_id)
        .where(
            DagModel.is_stale == sa.false(),
            sa.or_(DagTag.name.startswith("pipeline:"), DagTag.name.startswith("table:")),
        )
    )
    if pipeline is not None:
        q = q.where(DagTag.dag_id.startswith(f"{pipeline}.", autoescape=True))
    tags: dict[str, dict[str, str]] = {}
    with create_session() as session:
        for dag_id, tag in session.execute(q):
            kind, _, value = tag.partition(":")
            tags.setdefault(dag_id, {})[kind] = value
    refs = []
    for dag_id, found in tags.items():
        p, t = found.get("pipeline"), found.get("table")
        prefix = f"{p}.{t}."
        ours = p and t and dag_id.startswith(prefix) and len(dag_id) > len(prefix)
        if ours and (pipeline is None or p == pipeline):
            refs.append(ConnectorRef(str(p), str(t), dag_id[len(prefix) :]))
    return sorted(refs, key=lambda r: (r.pipeline, r.table, r.connector))


def _ref(name: str) -> ConnectorRef:
    for ref in _catalog():
        if _name(ref) == name:
            return ref
    raise ApiError(
        404,
        f"Connector {name} not found; connectors are named <pipeline>.<table>.<connector>, "
        "see GET /connect/connectors",
    )


def _pipelines() -> str:
    return ", ".join(sorted({r.pipeline for r in _catalog()})) or "(none)"


def _feldera_ref(pipeline: str, table: str, connector: str) -> ConnectorRef:
    catalog = _catalog(pipeline)
    if not catalog:
        raise ApiError(404, f"unknown pipeline {pipeline!r}; known pipelines: {_pipelines()}")
    # Feldera: unquoted table names are case-insensitive, quoted ones ("Name") exact.
    quoted = len(table) > 1 and table.startswith('"') and table.endswith('"')
    wanted = table[1:-1] if quoted else table.lower()
    tables = {r.table for r in catalog}
    match = next((t for t in tables if (t == wanted if quoted else t.lower() == wanted)), None)
    if match is None:
        raise ApiError(
            404,
            f"pipeline {pipeline!r} has no table {table!r}; its tables: {', '.join(sorted(tables))}",
        )
    ref = ConnectorRef(pipeline, match, connector)
    if ref not in catalog:
        names = sorted(r.connector for r in catalog if r.table == match)
        raise ApiError(
            404,
            f"table {match!r} has no connector {connector!r}; its connectors: {', '.join(names)}",
        )
    return ref


def _config(ref: ConnectorRef) -> dict[str, Any]:
    """The connector's config as users may see it: secrets masked."""
    return masked_connector(_spec(ref)["connector"])


def _spec(ref: ConnectorRef) -> dict[str, Any]:
    """The table and connector as written in the spec, from the serialized DAG."""
    import json

    from airflow.models.serialized_dag import SerializedDagModel

    dag = SerializedDagModel.get_dag(_dag_id(ref))
    task = dag.get_task("discover") if dag is not None and dag.has_task("discover") else None
    text = getattr(task, "spec_json", None)
    if not isinstance(text, str):
        raise ApiError(
            409,
            f"connector {_name(ref)}: its DAG in Airflow was serialized without its spec (by "
            "an older airflow-connectors); wait for its DAG file to be parsed again",
        )
    doc: dict[str, Any] = json.loads(text)
    return doc


def masked_connector(connector: dict[str, Any]) -> dict[str, Any]:
    """A connector config with URL passwords and secret fields masked, including those
    its transport or format model marks secret."""
    out = dict(mask_config(connector))
    for part, registry in (("transport", "source"), ("format", "converter")):
        doc = connector.get(part)
        if isinstance(doc, dict) and isinstance(doc.get("config"), dict):
            plugins = dict(_registries())[registry]
            model = plugins.get(doc["name"]).Config if doc.get("name") in plugins else None
            out[part] = {**out[part], "config": mask_config(doc["config"], secret_fields(model))}
    return out


def _info(ref: ConnectorRef) -> dict[str, Any]:
    tasks = [{"connector": _name(ref), "task": t["id"]} for t in _tasks(ref)]
    return {"name": _name(ref), "config": _config(ref), "tasks": tasks, "type": "source"}


# --- plugins --------------------------------------------------------------------------------

_JSON_TYPES = {
    "string": "STRING",
    "integer": "LONG",
    "number": "DOUBLE",
    "boolean": "BOOLEAN",
    "array": "LIST",
    "object": "MAP",
}


def _registries() -> list[tuple[str, Any]]:
    from airflow_connectors.formats import FORMATS
    from airflow_connectors.sinks import SINKS
    from airflow_connectors.transports import TRANSPORTS

    return [("source", TRANSPORTS), ("converter", FORMATS), ("sink", SINKS)]


def _plugin(name: str, kind: str | None = None) -> type[BaseModel]:
    """The config model of plugin ``name``; of the given type (``source``, ``converter``,
    ``sink``) when given, else of the first type that has one of that name."""
    for k, registry in _registries():
        if name in registry and kind in (None, k):
            return registry.get(name).Config
    known = ", ".join(f"{n} ({k})" for k, r in _registries() for n in r.names())
    raise ApiError(404, f"Plugin {name!r} not found; the plugins are: {known}")


def _definitions(config: type[BaseModel]) -> list[dict[str, Any]]:
    """Kafka Connect's ConfigKeyInfo of each field, from the model's JSON schema: its
    type, whether it is required, its default and its ``Field(description=...)``."""
    schema = config.model_json_schema()
    required = set(schema.get("required", []))
    out = []
    for name, prop in schema.get("properties", {}).items():
        kinds = [prop.get("type")] + [a.get("type") for a in prop.get("anyOf", [])]
        kind = next((k for k in kinds if k and k != "null"), "object")
        if "default" in prop or name in required:
            default = prop.get("default")
        else:  # a default_factory: the schema leaves it out
            field = config.model_fields[name]
            default = _jsonable(field.get_default(call_default_factory=True))
        out.append(
            {
                "name": name,
                "type": _JSON_TYPES.get(kind, "STRING"),
                "required": name in required,
                "default_value": default,
                "documentation": prop.get("description", ""),
            }
        )
    return out


def _jsonable(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value, fallback=str)


def _validate(plugin: str, config: type[BaseModel], values: dict[str, Any]) -> dict[str, Any]:
    """Kafka Connect's ConfigInfos: one entry per field, errors where the value fails."""
    from pydantic import ValidationError

    errors: dict[str, list[str]] = {}
    try:
        config.model_validate(values)
    except ValidationError as e:
        for err in e.errors(include_url=False):
            field = str(err["loc"][0]) if err["loc"] else ""
            errors.setdefault(field, []).append(err["msg"])
    definitions = _definitions(config)
    known = {d["name"] for d in definitions}
    shown = mask_config(values, secret_fields(config))  # never echo a secret
    configs = [
        {
            "definition": {**d, "group": plugin, "order": i},
            "value": {
                "name": d["name"],
                "value": shown.get(d["name"], d["default_value"]),
                "errors": errors.get(d["name"], []),
                "recommended_values": [],
                "visible": True,
            },
        }
        for i, d in enumerate(definitions)
    ]
    for field in sorted(set(errors) - known):  # unknown keys (extra="forbid")
        configs.append(
            {
                "definition": {"name": field, "type": "STRING", "required": False, "group": plugin},
                "value": {
                    "name": field,
                    "value": shown.get(field),
                    "errors": errors[field],
                    "recommended_values": [],
                    "visible": True,
                },
            }
        )
    return {
        "name": plugin,
        "error_count": sum(len(v) for v in errors.values()),
        "groups": [plugin],
        "configs": configs,
    }


# --- Airflow ------------------------------------------------------------------------------


def _dag_id(ref: ConnectorRef) -> str:
    return _name(ref)


def _dag_paused(ref: ConnectorRef) -> bool | None:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        dag = session.get(DagModel, _dag_id(ref))
        return None if dag is None else bool(dag.is_paused)


def _set_dag_paused(ref: ConnectorRef, paused: bool) -> None:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        dag = session.get(DagModel, _dag_id(ref))
        if dag is not None:
            dag.is_paused = paused
    if dag is None:
        raise ApiError(
            409,
            f"connector {_name(ref)} has no DAG in Airflow yet; wait for its DAG file to be parsed",
        )


def _edit_offsets(ref: ConnectorRef, entries: list[dict[str, Any]] | None) -> None:
    if entries:
        # Users see keys masked: map each masked key back to the one real key it shows.
        real: dict[str, list[str]] = {}
        for o in _store().offsets(ref):
            real.setdefault(mask_url(o["key"]), []).append(o["key"])
        for e in entries:
            keys = real.get(e["key"], [])
            if e["key"] not in keys and len(keys) == 1:
                e["key"] = keys[0]
            elif e["key"] not in keys and len(keys) > 1:
                raise ApiError(
                    400,
                    f"offset key {e['key']!r} stands for {len(keys)} keys once secrets are "
                    "masked; give the key with its credentials",
                )
    try:
        _store().edit_offsets(ref, entries)
    except ConnectorNotStopped as e:
        raise ApiError(400, str(e)) from e


_TASK_STATES = {
    "success": "RUNNING",
    "running": "RUNNING",
    "queued": "RUNNING",
    "scheduled": "RUNNING",
    "deferred": "RUNNING",
    "failed": "FAILED",
    "upstream_failed": "FAILED",
    "up_for_retry": "RESTARTING",
    "restarting": "RESTARTING",
    None: "UNASSIGNED",
}


def _latest_tis(ref: ConnectorRef) -> list[Any]:
    """The ingest task instances of the connector DAG's latest run (one per batch)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        run = (
            session.query(DagRun)
            .filter(DagRun.dag_id == _dag_id(ref))
            .order_by(DagRun.run_after.desc(), DagRun.id.desc())
            .first()
        )
        if run is None:
            return []
        tis = (
            session.query(TaskInstance)
            .filter(
                TaskInstance.dag_id == run.dag_id,
                TaskInstance.run_id == run.run_id,
                TaskInstance.task_id == "ingest",
                TaskInstance.map_index >= 0,
            )
            .order_by(TaskInstance.map_index)
            .all()
        )
        session.expunge_all()
        return tis


def _tasks(ref: ConnectorRef) -> list[dict[str, Any]]:
    out = []
    for ti in _latest_tis(ref):
        label = ti.rendered_map_index or ""
        batch_id = int(label.split()[-1]) if label.startswith("batch ") else None
        state = _TASK_STATES.get(str(ti.state) if ti.state else None, "RUNNING")
        task: dict[str, Any] = {
            "id": ti.map_index,
            "state": state,
            "worker_id": ti.hostname or "airflow",
        }
        task["batch_id"] = batch_id
        if state == "FAILED" and batch_id is not None:
            trace = _store().batch_error(batch_id) or f"ingest of batch {batch_id} failed"
            task["trace"] = mask_text(trace)
        out.append(task)
    return out


def _task(ref: ConnectorRef, task: int) -> dict[str, Any]:
    for t in _status(ref)["tasks"]:
        if t["id"] == task:
            return {k: v for k, v in t.items() if k != "batch_id"}
    raise ApiError(
        404,
        f"Task {task} of connector {_name(ref)} not found; see GET /connect/connectors/{_name(ref)}/tasks",
    )


def _clear(ref: ConnectorRef, tasks: list[int]) -> None:
    """Clear the given ingest tasks of the latest run (and finalize/finished after
    them), so the scheduler runs them again."""
    if not tasks:
        return
    from airflow.models.taskinstance import TaskInstance, clear_task_instances
    from airflow.utils.session import create_session

    latest = _latest_tis(ref)
    run_id = latest[0].run_id
    with create_session() as session:
        tis = (
            session.query(TaskInstance)
            .filter(TaskInstance.dag_id == _dag_id(ref), TaskInstance.run_id == run_id)
            .all()
        )
        chosen = [
            ti
            for ti in tis
            if (ti.task_id == "ingest" and ti.map_index in tasks)
            or ti.task_id in ("finalize", "finished")
        ]
        clear_task_instances(chosen, session)


def _trigger_run(ref: ConnectorRef) -> None:
    """A new run of the connector DAG (Kafka Connect's connector restart)."""
    import datetime as dt

    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.utils.types import DagRunTriggeredByType

    trigger_dag(
        dag_id=_dag_id(ref),
        run_id=None,
        logical_date=None,
        triggered_by=DagRunTriggeredByType.REST_API,
        run_after=dt.datetime.now(dt.UTC),
    )


def _stopped_message(ref: ConnectorRef) -> str:
    from airflow_connectors.engine import control

    return control.stopped_message(ref)


def _state(
    ref: ConnectorRef,
    st: ConnectorState | None,
    tasks: list[dict[str, Any]],
    dag_paused: bool | None,
) -> Any:
    """The connector's view (engine.control's one derivation) from what the caller read."""
    from airflow_connectors.engine import control

    # Batches run in parallel: one may fail while another commits after it. The latest
    # run's tasks say whether the connector's last ingest failed.
    failed = [t for t in tasks if t["state"] == "FAILED"]
    return control.connector_view(
        st,
        dag_paused=dag_paused,
        pipeline_paused=_store().pipeline_paused(ref.pipeline),
        failed_task_trace=(failed[0].get("trace") or "") if failed else None,
    )


def _status(ref: ConnectorRef) -> dict[str, Any]:
    from airflow_connectors.engine import control

    tasks = _tasks(ref)
    view = _state(ref, _store().status(ref), tasks, _dag_paused(ref))
    connector: dict[str, Any] = {"state": view.state.value, "worker_id": "airflow"}
    if view.trace:
        connector["trace"] = mask_text(view.trace)
    # Kafka Connect: a stopped connector has no tasks; a paused one's are PAUSED.
    shown = [
        {
            **{k: v for k, v in t.items() if k != "batch_id"},
            "state": control.task_state(view.state, t["state"]),
        }
        for t in tasks
        if view.state != control.State.STOPPED
    ]
    return {"name": _name(ref), "connector": connector, "tasks": shown, "type": "source"}


def _feldera_status(ref: ConnectorRef) -> dict[str, Any]:
    """Feldera's connector status; ``paused`` is the connector's own flag (its DAG's, or
    stopped), ``state`` Kafka Connect's."""
    from airflow_connectors.engine import control

    st = _store().status(ref)
    view = _state(ref, st, _tasks(ref), _dag_paused(ref))
    return dict(mask_config(control.feldera_status(ref, st, view)))
