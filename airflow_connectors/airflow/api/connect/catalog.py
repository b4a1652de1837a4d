"""The connectors as Airflow knows them, for both API shapes: the catalog (connector DAGs
by their tags), each connector's spec, status and tasks from Airflow's metadata DB and
the state store, and the changes the API makes in Airflow (cleared task instances, a new
run).

A connector's state and its pause, resume, stop and start are ``engine.control``'s
service (one for the API, the gate, the CLI and embedded runs), here over the DAGs'
paused flags (``airflow.dag_switch``); this module only adds what the latest run's
tasks say."""

from __future__ import annotations

import functools
from typing import Any, Literal

from airflow_connectors import __version__
from airflow_connectors.airflow.api.connect.errors import ApiError
from airflow_connectors.airflow.api.connect.plugin_config import masked_connector
from airflow_connectors.airflow.dag_switch import AirflowDagSwitch, dag_id_of
from airflow_connectors.engine.control import (
    ConnectorControl,
    ConnectorStopped,
    DagNotFound,
    State,
    task_state,
)
from airflow_connectors.settings import Settings
from airflow_connectors.spec.redact import mask_config, mask_text, mask_url
from airflow_connectors.state.store import ConnectorNotStopped, ConnectorRef, StateStore


@functools.cache
def state_store() -> StateStore:
    """The state store of ``[connectors] state_store_url``, opened once per API server
    process."""
    return StateStore(Settings.load().state_store_url)


def connector_name(ref: ConnectorRef) -> str:
    """The connector's name in the API: its DAG id, ``<pipeline>.<table>.<connector>``."""
    return dag_id_of(ref)


def known_connectors(pipeline: str | None = None) -> list[ConnectorRef]:
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


def ref_by_name(name: str) -> ConnectorRef:
    """The known connector called ``name``; ``ApiError`` 404 naming the naming rule."""
    for ref in known_connectors():
        if connector_name(ref) == name:
            return ref
    raise ApiError(
        404,
        f"Connector {name} not found; connectors are named <pipeline>.<table>.<connector>, "
        "see GET /connect/connectors",
    )


def pipeline_names() -> str:
    """The known pipelines, comma-separated, for error messages; ``(none)`` when empty."""
    return ", ".join(sorted({r.pipeline for r in known_connectors()})) or "(none)"


def table_refs(pipeline: str, table: str) -> list[ConnectorRef]:
    """The connectors of a table named as in a Feldera path (unquoted: any case; quoted:
    exact), in name order. ``ApiError`` 404 naming what exists."""
    catalog = known_connectors(pipeline)
    if not catalog:
        raise unknown_pipeline(pipeline)
    # Feldera: unquoted table names are case-insensitive, quoted ones ("Name") exact.
    quoted = len(table) > 1 and table.startswith('"') and table.endswith('"')
    wanted = table[1:-1] if quoted else table.lower()
    tables = {r.table for r in catalog}
    match = next((t for t in tables if (t == wanted if quoted else t.lower() == wanted)), None)
    if match is None:
        raise ApiError(
            404,
            f"pipeline {pipeline!r} has no table {table!r}; its tables: {', '.join(sorted(tables))}",
            code="UnknownTableName",
            details={"pipeline_name": pipeline, "table_name": table},
        )
    return sorted((r for r in catalog if r.table == match), key=lambda r: r.connector)


def unknown_pipeline(pipeline: str) -> ApiError:
    """404 for a pipeline no DAG renders (Feldera's ``UnknownPipelineName``)."""
    return ApiError(
        404,
        f"Unknown pipeline name {pipeline!r}; known pipelines: {pipeline_names()}",
        code="UnknownPipelineName",
        details={"pipeline_name": pipeline},
    )


def ref_by_feldera_path(pipeline: str, table: str, connector: str) -> ConnectorRef:
    """The connector of a Feldera path, the table name matched as Feldera does (unquoted:
    any case; quoted: exact). ``ApiError`` 404 naming what exists."""
    try:
        catalog = table_refs(pipeline, table)
    except ApiError as e:
        if e.code != "UnknownTableName":
            raise
        # Feldera's runtime names the endpoint: unknown table and unknown connector alike.
        raise ApiError(
            404,
            f"unknown input endpoint name '{table}.{connector}': {e.message}",
            code="UnknownInputEndpoint",
            details={"endpoint_name": f"{table}.{connector}"},
        ) from e
    match = catalog[0].table
    ref = ConnectorRef(pipeline, match, connector)
    if ref not in catalog:
        names = sorted(r.connector for r in catalog if r.table == match)
        raise ApiError(
            404,
            f"unknown input endpoint name '{match}.{connector}': table {match!r} has no "
            f"connector {connector!r}; its connectors: {', '.join(names)}",
            code="UnknownInputEndpoint",
            details={"endpoint_name": f"{match}.{connector}"},
        )
    return ref


def flat_config(ref: ConnectorRef, spec: dict[str, Any] | None = None) -> dict[str, str]:
    """The connector's config as Kafka Connect shows one: a flat map of strings
    (:mod:`airflow_connectors.spec.flat`), secrets masked. ``spec``: its
    :func:`spec_of`, when the caller has it already."""
    from airflow_connectors.spec.flat import flatten_connector

    connector = masked_connector((spec or spec_of(ref))["connector"])
    return flatten_connector(connector, connector_name(ref))


def table_of(ref: ConnectorRef, spec: dict[str, Any] | None = None) -> Any:
    """The connector's table as its spec declares it (a ``TableSpec``), or None when the
    serialized DAG's copy cannot be read back. ``spec``: as for :func:`flat_config`."""
    from airflow_connectors.spec.models import TableSpec

    try:
        return TableSpec.model_validate((spec or spec_of(ref))["table"])
    except Exception:  # an older serialization: validate without the table
        return None


def spec_of(ref: ConnectorRef) -> dict[str, Any]:
    """The table and connector as written in the spec, from the serialized DAG."""
    import json

    from airflow.models.serialized_dag import SerializedDagModel

    dag = SerializedDagModel.get_dag(dag_id_of(ref))
    task = dag.get_task("discover") if dag is not None and dag.has_task("discover") else None
    text = getattr(task, "spec_json", None)
    if not isinstance(text, str):
        raise ApiError(
            409,
            f"connector {connector_name(ref)}: its DAG in Airflow was serialized without its spec (by "
            "an older airflow-connectors); wait for its DAG file to be parsed again",
        )
    from airflow_connectors.spec.redact import MASK
    from airflow_connectors.spec.sealed import unseal

    # Secrets are stored sealed; opened here only to be masked where they are shown.
    doc: dict[str, Any] = unseal(json.loads(text), unopened=MASK)
    return doc


def connector_info(ref: ConnectorRef) -> dict[str, Any]:
    """Kafka Connect's connector info: name, masked config, tasks, type ``source``."""
    tasks = [{"connector": connector_name(ref), "task": t["id"]} for t in task_list(ref)]
    return {
        "name": connector_name(ref),
        "config": flat_config(ref),
        "tasks": tasks,
        "type": "source",
    }


def control() -> ConnectorControl:
    """The connector control service over the state store and the DAGs' paused flags."""
    return ConnectorControl(state_store(), AirflowDagSwitch())


def act(ref: ConnectorRef, action: Literal["pause", "resume", "stop", "start"]) -> None:
    """A transition of the control service (``pause``, ``resume``, ``stop``, ``start``)
    with the API's status codes: 409 for a stopped connector's start and for a
    connector whose DAG Airflow has not parsed yet."""
    try:
        getattr(control(), action)(ref)
    except (ConnectorStopped, DagNotFound) as e:
        raise ApiError(409, str(e)) from e


def edit_offsets(ref: ConnectorRef, entries: list[dict[str, Any]] | None) -> None:
    """Set the given offsets (``None``: forget them all) of a stopped connector.
    A key may be given as users see it, masked, when it stands for one real key.
    ``ApiError`` 400 when it is ambiguous or the connector is not stopped."""
    if entries:
        # Users see keys masked: map each masked key back to the one real key it shows.
        real: dict[str, list[str]] = {}
        for o in state_store().offsets(ref):
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
        state_store().edit_offsets(ref, entries)
    except ConnectorNotStopped as e:
        raise ApiError(400, str(e)) from e


_TASK_STATES = {
    "success": State.RUNNING,
    "running": State.RUNNING,
    "queued": State.RUNNING,
    "scheduled": State.RUNNING,
    "deferred": State.RUNNING,
    "failed": State.FAILED,
    "upstream_failed": State.FAILED,
    "up_for_retry": State.RESTARTING,
    "restarting": State.RESTARTING,
    None: State.UNASSIGNED,
}


def latest_ingest_tis(ref: ConnectorRef) -> list[Any]:
    """The connector's tasks as task instances: the ingest tasks (one per batch) of the
    latest run of its DAG that planned batches. A run that has not planned yet (queued,
    or just restarted) or found nothing new leaves the previous run's tasks the
    connector's, as Kafka Connect's tasks live on while their connector restarts; so
    ``tasks/{n}/restart`` right after a connector restart reruns task n of that run."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    dag_id = dag_id_of(ref)
    with create_session() as session:
        run_id = (
            session.query(TaskInstance.run_id)
            .join(
                DagRun,
                (DagRun.dag_id == TaskInstance.dag_id) & (DagRun.run_id == TaskInstance.run_id),
            )
            .filter(
                TaskInstance.dag_id == dag_id,
                TaskInstance.task_id == "ingest",
                TaskInstance.map_index >= 0,
            )
            .order_by(DagRun.run_after.desc(), DagRun.id.desc())
            .limit(1)
            .scalar()
        )
        if run_id is None:
            return []
        tis = (
            session.query(TaskInstance)
            .filter(
                TaskInstance.dag_id == dag_id,
                TaskInstance.run_id == run_id,
                TaskInstance.task_id == "ingest",
                TaskInstance.map_index >= 0,
            )
            .order_by(TaskInstance.map_index)
            .all()
        )
        session.expunge_all()
        return tis


def task_list(ref: ConnectorRef) -> list[dict[str, Any]]:
    """The connector's tasks: the ingest task instances of the latest run (one per batch)
    with id (map index), state, worker and batch id, and a masked trace when failed."""
    out = []
    for ti in latest_ingest_tis(ref):
        label = ti.rendered_map_index or ""
        batch_id = int(label.split()[-1]) if label.startswith("batch ") else None
        state = _TASK_STATES.get(str(ti.state) if ti.state else None, State.RUNNING)
        task: dict[str, Any] = {
            "id": ti.map_index,
            "state": state,
            "worker_id": ti.hostname or "airflow",
        }
        task["batch_id"] = batch_id
        if state == State.FAILED and batch_id is not None:
            trace = state_store().batch_error(batch_id) or f"ingest of batch {batch_id} failed"
            task["trace"] = mask_text(trace)
        out.append(task)
    return out


def task_status(ref: ConnectorRef, task: int) -> dict[str, Any]:
    """Kafka Connect's status of one task; ``ApiError`` 404 when the latest run has no such
    task."""
    for t in connector_status(ref)["tasks"]:
        if t["id"] == task:
            return {k: v for k, v in t.items() if k != "batch_id"}
    raise ApiError(
        404,
        f"Task {task} of connector {connector_name(ref)} not found; see GET /connect/connectors/{connector_name(ref)}/tasks",
    )


def clear_tasks(ref: ConnectorRef, tasks: list[int]) -> None:
    """Clear the given ingest tasks of the latest run (and finalize/finished after
    them), so the scheduler runs them again."""
    if not tasks:
        return
    from airflow.models.taskinstance import TaskInstance, clear_task_instances
    from airflow.utils.session import create_session

    latest = latest_ingest_tis(ref)
    run_id = latest[0].run_id
    with create_session() as session:
        tis = (
            session.query(TaskInstance)
            .filter(TaskInstance.dag_id == dag_id_of(ref), TaskInstance.run_id == run_id)
            .all()
        )
        chosen = [
            ti
            for ti in tis
            if (ti.task_id == "ingest" and ti.map_index in tasks)
            or ti.task_id in ("finalize", "finished")
        ]
        clear_task_instances(chosen, session)


def trigger_run(ref: ConnectorRef) -> None:
    """A new run of the connector DAG (Kafka Connect's connector restart)."""
    import datetime as dt

    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.utils.types import DagRunTriggeredByType

    trigger_dag(
        dag_id=dag_id_of(ref),
        run_id=None,
        logical_date=None,
        triggered_by=DagRunTriggeredByType.REST_API,
        run_after=dt.datetime.now(dt.UTC),
    )


def failed_task_trace(tasks: list[dict[str, Any]]) -> str | None:
    """The trace of a failed ingest task of the latest run, "" without one, None when no
    task failed: batches run in parallel, one may fail while another commits after it."""
    failed = [t for t in tasks if t["state"] == State.FAILED]
    return (failed[0].get("trace") or "") if failed else None


def connector_status(ref: ConnectorRef) -> dict[str, Any]:
    """Kafka Connect's connector status: the control service's state (with a masked trace)
    and the tasks' states; a stopped connector lists no tasks."""
    tasks = task_list(ref)
    view = control().view(ref, failed_task_trace=failed_task_trace(tasks))
    # Kafka Connect (4.x) gives each state the plugin's version.
    connector: dict[str, Any] = {
        "state": view.state.value,
        "worker_id": "airflow",
        "version": __version__,
    }
    if view.trace:
        connector["trace"] = mask_text(view.trace)
    # Kafka Connect: a stopped connector has no tasks; a paused one's are PAUSED.
    shown = [
        {
            **{k: v for k, v in t.items() if k != "batch_id"},
            "state": task_state(view.state, t["state"]),
            "version": __version__,
        }
        for t in tasks
        if view.state != State.STOPPED
    ]
    return {"name": connector_name(ref), "connector": connector, "tasks": shown, "type": "source"}


def feldera_status_of(ref: ConnectorRef) -> dict[str, Any]:
    """Feldera's connector status; ``paused`` is the connector's own flag (its DAG's, or
    stopped), ``state`` Kafka Connect's."""
    status = control().status(ref, failed_task_trace=failed_task_trace(task_list(ref)))
    return dict(mask_config(status))
