"""What the Connectors page reads: JSON under ``/connect/ui/``, read-only, behind the
same login and DAG access rules as every other route (:mod:`.auth`: a user who may
read a connector's DAG may read it here; nothing here steers).

**What the user may do**: each connector carries ``can``: ``{"change": bool}``, whether
Airflow's auth manager gives the logged-in user DAG edit access to its DAG, what the
connector API asks (:func:`.auth.may` with ``PUT``) to pause, resume, stop or restart
it or edit its offsets. The page shows those actions only where ``change`` is true (the
API still decides: a refusal is shown on the page).

- ``GET /connect/ui/connectors?q=&status=&offset=&limit=``: one page of the connectors
  the user may read, filtered on the server (``q``: part of the name or of a label,
  any case; ``status``: a state such as ``RUNNING`` or ``FAILED``, or ``HELD`` for the
  connectors ``start_after`` holds), with each one's state, metrics, backlog, what holds
  it, links into Airflow's UI, and the ``start_after`` graph of the pipelines on the
  page. Cheap for hundreds of connectors: the specs come from the serialized DAGs in one
  query, the backlog in one query per page, nothing is read per batch.
- ``GET /connect/ui/connectors/{name}``: one connector's detail, loaded when the page
  opens it: its last 20 batches (duration, rows, errors, status, the Airflow run that
  ran it), records/s per batch, backlog, the table's schema with its stored versions,
  what it waits for and who waits for it.

**Backlog**: what discovery persisted and no commit took yet, like Auto Loader's
``numFilesOutstanding``: the connector's planned (uncommitted) batches, with their work
items (objects), bytes and records where the transport knows them (files: bytes, not
records). Work a transport has not listed yet is unknown to the store, so not counted.

**Held by**: the gate's ``start_after`` rule (``engine.runner.unfinished``, what the
gate task runs): the connectors carrying a label the connector waits for that have not
finished (end of input with nothing in flight). ``gate``: why a run of it would skip
now, in the words of its gate (pipeline paused, stopped, or the connectors it waits
for).

Errors and configs are masked (:mod:`airflow_connectors.spec.redact`)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Query, Request

from airflow_connectors.airflow.api.connect import catalog
from airflow_connectors.airflow.api.connect.errors import error_responses
from airflow_connectors.engine.control import State, connector_view, stopped_message
from airflow_connectors.spec.redact import MASK, mask_config, mask_text
from airflow_connectors.spec.sealed import unseal
from airflow_connectors.state.records import BatchStatus, ConnectorRef, ConnectorState

router = APIRouter(prefix="/ui")

#: Batches the detail shows, newest first.
LAST_BATCHES = 20
#: The ``status`` filter that selects the connectors ``start_after`` holds.
HELD = "HELD"


@dataclass
class Row:
    """One connector as the page shows it: its spec (as written) and its state."""

    ref: ConnectorRef
    table: dict[str, Any]
    connector: dict[str, Any]
    record: ConnectorState | None = None
    state: str = State.UNASSIGNED.value
    paused: bool = False
    finished: bool = False
    #: ``(label, table.connector carrying it)`` for each label of ``start_after``.
    waits_for: list[tuple[str, str]] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        """The labels the connector carries."""
        return [str(x) for x in self.connector.get("labels") or ()]

    @property
    def start_after(self) -> list[str]:
        """The labels the connector waits for."""
        return [str(x) for x in self.connector.get("start_after") or ()]


@dataclass
class Connectors:
    """The connectors of the pipelines asked for: all of them (a carrier the user may
    not read still decides what holds one they may), and those the user may read."""

    every: dict[str, Row]
    readable: list[Row]
    pipeline_paused: dict[str, bool]
    #: The DAG ids of the connectors the user may change (DAG edit access).
    changeable: set[str] = field(default_factory=set)

    def held_by(self, row: Row) -> list[str]:
        """The carriers of ``row``'s ``start_after`` labels that have not finished: the
        gate's rule (``engine.runner.unfinished``: no record, or not finished)."""
        out: list[str] = []
        for _, carrier in row.waits_for:
            other = self.every.get(f"{row.ref.pipeline}.{carrier}")
            if (other is None or not other.finished) and carrier not in out:
                out.append(carrier)
        return out

    def gate(self, row: Row) -> str | None:
        """Why a run of ``row`` would skip at its gate now, as the gate says it; None
        when it would run."""
        ref = row.ref
        if self.pipeline_paused.get(ref.pipeline):
            return (
                f"pipeline {ref.pipeline} is paused, so connector {ref} does not run; "
                f"resume it with `airflow-connectors pipeline {ref.pipeline} resume`"
            )
        if row.record is not None and row.record.stopped:
            return stopped_message(ref)
        blocking = self.held_by(row)
        if blocking:
            return (
                f"connector {ref} waits (start_after {', '.join(row.start_after)}) for "
                f"{', '.join(blocking)} to finish: end of input with nothing in flight"
            )
        return None


# --- routes -----------------------------------------------------------------------


@router.get("/connectors", response_model=dict[str, Any], responses=error_responses(400))
def connectors_page(
    request: Request,
    q: str = Query(default="", max_length=200, description="Part of a name or of a label"),
    status: str = Query(
        default="", max_length=20, description="A state (RUNNING, PAUSED, FAILED...) or HELD"
    ),
    offset: int = Query(default=0, ge=0, le=1_000_000),
    limit: int = Query(default=25, ge=1, le=500),
) -> dict[str, Any]:
    """One page of the connectors the user may read, in name order, filtered by ``q``
    and ``status``: ``total`` matches, ``states`` counts each state (and ``HELD``)
    over every readable connector; ``pipelines`` the state of each pipeline on the
    page (``Paused``/``Running``) and ``graphs`` its ``start_after`` graph."""
    found = load(request.state.connect_user)
    states: dict[str, int] = {}
    for r in found.readable:
        states[r.state] = states.get(r.state, 0) + 1
        if found.held_by(r):
            states[HELD] = states.get(HELD, 0) + 1
    wanted = status.strip().upper()
    chosen = [r for r in found.readable if matches(r, q, wanted, found)]
    page = chosen[offset : offset + limit]
    refs = [r.ref for r in page]
    backlog, assets = backlogs(refs), asset_ids(refs)
    return {
        "total": len(chosen),
        "offset": offset,
        "limit": limit,
        "states": states,
        "connectors": [row_json(r, found, backlog.get(r.ref), assets.get(r.ref)) for r in page],
        "pipelines": {
            p: {"state": "Paused" if found.pipeline_paused.get(p) else "Running"}
            for p in sorted({r.pipeline for r in refs})
        },
        "graphs": {p: graph(p, found) for p in sorted({r.pipeline for r in refs})},
    }


@router.get(
    "/connectors/{name}", response_model=dict[str, Any], responses=error_responses(400, 404)
)
def connector_detail(request: Request, name: str) -> dict[str, Any]:
    """One connector's detail: its row, last batches (newest first), records/s per
    committed batch (oldest first), its table's schema with the stored versions, its
    DAG's latest run (and whether its gate held it), and the connectors that wait for
    it."""
    ref = catalog.ref_by_name(name)
    found = load(request.state.connect_user, ref.pipeline)
    row = found.every[str(ref)]
    batches = last_batches(ref)
    return {
        **row_json(row, found, backlogs([ref]).get(ref), asset_ids([ref]).get(ref)),
        "batches": batches,
        "throughput": throughput(batches),
        "schema": schema_of(ref, row.table),
        "last_run": last_run(ref),
        "downstream": sorted(
            other.ref.endpoint_name
            for other in found.every.values()
            if other.ref.pipeline == ref.pipeline
            and any(c == ref.endpoint_name for _, c in other.waits_for)
        ),
    }


# --- connectors, specs and states -------------------------------------------------


def load(user: Any, pipeline: str | None = None) -> Connectors:
    """The connectors Airflow knows (of ``pipeline``, or all) with their specs from the
    serialized DAGs, states and carriers, which of them ``user`` may read, and which
    they may change: the auth manager's DAG decisions (``is_authorized_dag`` per DAG
    with its team, as :func:`.auth.may` asks them), in one query for all DAGs."""
    from airflow.api_fastapi.app import get_auth_manager

    refs = catalog.known_connectors(pipeline)
    specs = specs_of(refs)
    # A DAG serialized without its spec (an older airflow-connectors) shows no labels.
    every = {str(r): Row(r, *specs.get(r, ({}, {}))) for r in refs}
    paused = fill_states(list(every.values()))
    carriers: dict[tuple[str, str], list[str]] = {}
    for r in every.values():
        for label in r.labels:
            carriers.setdefault((r.ref.pipeline, label), []).append(r.ref.endpoint_name)
    for r in every.values():
        r.waits_for = [
            (label, c) for label in r.start_after for c in carriers.get((r.ref.pipeline, label), [])
        ]
    manager = get_auth_manager()
    allowed = manager.get_authorized_dag_ids(user=user, method="GET")
    readable = [r for r in every.values() if catalog.connector_name(r.ref) in allowed]
    editable = manager.get_authorized_dag_ids(user=user, method="PUT") if readable else set()
    changeable = {n for r in readable if (n := catalog.connector_name(r.ref)) in editable}
    return Connectors(every, readable, paused, changeable)


def specs_of(
    refs: Sequence[ConnectorRef],
) -> dict[ConnectorRef, tuple[dict[str, Any], dict[str, Any]]]:
    """``(table, connector)`` as written, per connector, from the latest serialized DAGs
    (the ``discover`` task's ``spec_json``), read in one query without deserializing
    the DAGs."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session

    by_id = {catalog.connector_name(r): r for r in refs}
    out: dict[ConnectorRef, tuple[dict[str, Any], dict[str, Any]]] = {}
    if not by_id:
        return out
    with create_session() as session:
        models = SerializedDagModel.get_latest_serialized_dags(dag_ids=list(by_id), session=session)
        for model in models:
            text = _discover_spec(model.data or {})
            if text is not None and model.dag_id in by_id:
                # Secrets are stored sealed; opened only to be masked where shown.
                doc = unseal(json.loads(text), unopened=MASK)
                out[by_id[model.dag_id]] = (dict(doc["table"]), dict(doc["connector"]))
    return out


def _discover_spec(data: dict[str, Any]) -> str | None:
    """The ``spec_json`` of the ``discover`` task of a serialized DAG's data."""
    for task in data.get("dag", {}).get("tasks", []):
        var = task.get("__var", task) if isinstance(task, dict) else {}
        if var.get("task_id") == "discover" and isinstance(var.get("spec_json"), str):
            return str(var["spec_json"])
    return None


def fill_states(rows: Sequence[Row]) -> dict[str, bool]:
    """Each row's record and view (``engine.control.connector_view``, the DAG's paused
    flag read once for all); returns each pipeline's paused flag."""
    from airflow_connectors.airflow.dag_switch import AirflowDagSwitch

    store = catalog.state_store()
    flags = AirflowDagSwitch().paused_many([r.ref for r in rows])
    paused = {p: store.pipeline_paused(p) for p in {r.ref.pipeline for r in rows}}
    for r in rows:
        r.record = store.status(r.ref)
        view = connector_view(
            r.record,
            dag_paused=flags.get(r.ref),
            pipeline_paused=paused[r.ref.pipeline],
            spec_paused=bool(r.connector.get("paused")),
        )
        r.state, r.paused, r.finished = view.state.value, view.paused, view.finished
    return paused


def matches(row: Row, q: str, status: str, found: Connectors) -> bool:
    """Whether ``row`` passes the filter: ``q`` in its name or one of its labels (any
    case), and ``status`` its state (or ``HELD`` and ``start_after`` holds it)."""
    needle = q.strip().lower()
    if needle and not any(needle in text.lower() for text in [str(row.ref), *row.labels]):
        return False
    if status == HELD:
        return bool(found.held_by(row))
    return not status or row.state == status


def row_json(
    row: Row, found: Connectors, backlog: dict[str, Any] | None, asset_id: int | None
) -> dict[str, Any]:
    """A connector as the page shows it (secrets masked), with what the user may do
    with it (``can``, see the module docstring)."""
    st = row.record or ConnectorState(ref=row.ref)
    name = catalog.connector_name(row.ref)
    trace = st.fatal_error if row.state == State.FAILED else None
    return {
        "name": name,
        "pipeline": row.ref.pipeline,
        "table": row.ref.table,
        "connector": row.ref.connector,
        "endpoint": row.ref.endpoint_name,
        "state": row.state,
        "paused": row.paused,
        "finished": row.finished,
        "config": {
            "labels": row.labels,
            "start_after": row.start_after,
            "trigger": mask_config(row.connector.get("trigger") or {}),
            "transport": str((row.connector.get("transport") or {}).get("name", "")),
        },
        "metrics": {
            "total_records": st.total_records,
            "total_bytes": st.total_bytes,
            "buffered_records": st.buffered_records,
            "num_parse_errors": st.num_parse_errors,
            "num_transport_errors": st.num_transport_errors,
            "end_of_input": st.end_of_input,
            "lag": st.lag,
        },
        "latest_error": mask_text(trace or _latest_error(st)),
        "waits_for": [
            {
                "label": label,
                "connector": carrier,
                "finished": carrier not in found.held_by(row),
            }
            for label, carrier in row.waits_for
        ],
        "held_by": found.held_by(row),
        "gate": found.gate(row),
        "backlog": backlog or empty_backlog(),
        "links": links(name, asset_id),
        "can": {"change": name in found.changeable},
    }


def _latest_error(st: ConnectorState) -> str:
    """The latest error of a connector that is not failing, with its time, so an old
    one (an empty folder at the first run) is not read as the current state."""
    errors = sorted(st.parse_errors + st.transport_errors, key=lambda e: int(e["index"]))
    if not errors:
        return ""
    latest = errors[-1]
    return f"{latest['message']} (at {latest['timestamp']})"


def links(dag_id: str, asset_id: int | None) -> dict[str, str | None]:
    """Paths in Airflow's UI (3.x routes, from the API server's root): the DAG, its
    runs and the asset its ``finished`` task emits (None until Airflow registered it)."""
    from urllib.parse import quote

    dag = f"/dags/{quote(dag_id, safe='')}"
    return {
        "dag": dag,
        "runs": f"{dag}/runs",
        "asset": f"/assets/{asset_id}" if asset_id is not None else None,
    }


def asset_ids(refs: Sequence[ConnectorRef]) -> dict[ConnectorRef, int]:
    """The id of each connector's asset (``connector://p/t/c``) in Airflow's DB."""
    if not refs:
        return {}
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session

    from airflow_connectors.airflow.render import connector_asset

    by_uri = {connector_asset(r.pipeline, r.table, r.connector).uri: r for r in refs}
    with create_session() as session:
        rows = session.query(AssetModel.uri, AssetModel.id).filter(
            AssetModel.uri.in_(list(by_uri)), AssetModel.active.has()
        )
        return {by_uri[uri]: int(i) for uri, i in rows}


def graph(pipeline: str, found: Connectors) -> dict[str, Any]:
    """The pipeline's ``start_after`` graph: every connector that waits or is waited
    for (by ``table.connector``), whether it finished or is held, and an edge per
    (carrier, label, waiter); ``holding``: the carrier has not finished."""
    rows = [r for r in found.every.values() if r.ref.pipeline == pipeline]
    edges = [
        {
            "from": carrier,
            "to": r.ref.endpoint_name,
            "label": label,
            "holding": carrier in found.held_by(r),
        }
        for r in rows
        for label, carrier in r.waits_for
    ]
    involved = {e["from"] for e in edges} | {e["to"] for e in edges}
    nodes = [
        {
            "connector": r.ref.endpoint_name,
            "state": r.state,
            "finished": r.finished,
            "held": bool(found.held_by(r)),
        }
        for r in rows
        if r.ref.endpoint_name in involved
    ]
    return {"nodes": nodes, "edges": edges}


# --- batches, backlog and schema --------------------------------------------------


def empty_backlog() -> dict[str, Any]:
    """The backlog of a connector with nothing planned."""
    return {"batches": 0, "objects": 0, "bytes": 0, "records": 0, "oldest_planned_at": None}


def backlogs(refs: Sequence[ConnectorRef]) -> dict[ConnectorRef, dict[str, Any]]:
    """Each connector's backlog: its planned (uncommitted) batches, their work items,
    bytes and records (None where a transport does not know them ahead), and when the
    oldest was planned (ISO 8601). One query for all of ``refs``."""
    import sqlalchemy as sa

    from airflow_connectors.state import schema as s

    if not refs:
        return {}
    b = s.batches.c
    wanted = set(refs)
    q = (
        sa.select(
            b.pipeline,
            b.table_name,
            b.connector,
            sa.func.count(),
            sa.func.sum(b.planned_items),
            sa.func.sum(b.planned_bytes),
            sa.func.count(b.planned_bytes),
            sa.func.sum(b.planned_records),
            sa.func.count(b.planned_records),
            sa.func.min(b.created_at),
        )
        .where(
            b.status == BatchStatus.PLANNED.value,
            b.pipeline.in_(sorted({r.pipeline for r in refs})),
        )
        .group_by(b.pipeline, b.table_name, b.connector)
    )
    out: dict[ConnectorRef, dict[str, Any]] = {}
    with catalog.state_store().tx() as conn:
        for p, t, c, n, items, size, sized, records, counted, oldest in conn.execute(q):
            ref = ConnectorRef(p, t, c)
            if ref in wanted:
                out[ref] = {
                    "batches": int(n),
                    "objects": int(items or 0),
                    "bytes": int(size or 0) if sized == n else None,
                    "records": int(records or 0) if counted == n else None,
                    "oldest_planned_at": _iso(oldest),
                }
    return out


def last_batches(ref: ConnectorRef, limit: int = LAST_BATCHES) -> list[dict[str, Any]]:
    """The connector's last ``limit`` batches, newest first: planned and committed
    rows, errors (see :func:`_batch_json`), the latest masked failure, and the Airflow
    ingest task that ran it last (its run, state and duration). ``duration_s``: that task's run time, or plan to commit when
    no task is known (an embedded run)."""
    import sqlalchemy as sa

    from airflow_connectors.state import schema as s

    b = s.batches.c
    with catalog.state_store().tx() as conn:
        rows = conn.execute(
            sa.select(s.batches)
            .where(ref.where(s.batches))
            .order_by(b.batch_id.desc())
            .limit(limit)
        ).all()
        ids = [r.batch_id for r in rows]
        errors: dict[int, list[tuple[str, str]]] = {}
        if ids:
            for batch_id, kind, message in conn.execute(
                sa.select(s.errors.c.batch_id, s.errors.c.kind, s.errors.c.message)
                .where(s.errors.c.batch_id.in_(ids))
                .order_by(s.errors.c.id)
            ):
                errors.setdefault(int(batch_id), []).append((str(kind), str(message)))
    tasks = ingest_tasks(ref, ids)
    return [_batch_json(r, errors.get(r.batch_id, []), tasks.get(r.batch_id)) for r in rows]


def _batch_json(
    r: Any, errors: list[tuple[str, str]], task: dict[str, Any] | None
) -> dict[str, Any]:
    """One batch row. ``errors``: the (kind, message) recorded for it, oldest first. A
    committed batch counts its parse errors (column ``parse_errors``; the kept messages
    are only the latest) and the other errors recorded for it; a planned one every error
    its attempts recorded."""
    committed = r.status == BatchStatus.COMMITTED.value
    duration = task["duration_s"] if task else None
    if duration is None and committed and r.committed_at is not None:
        duration = max(0.0, float(r.committed_at) - float(r.created_at))
    rows = int(r.records) if committed and r.records is not None else None
    if committed:
        count = int(r.parse_errors or 0) + sum(kind != "parse" for kind, _ in errors)
    else:
        count = len(errors)
    return {
        "batch_id": int(r.batch_id),
        "status": _batch_status(committed, bool(errors), task),
        "planned_at": _iso(r.created_at),
        "committed_at": _iso(r.committed_at),
        "duration_s": duration,
        "rows": rows,
        "bytes": int(r.bytes) if committed and r.bytes is not None else None,
        "objects": int(r.planned_items),
        "errors": count,
        "attempts": int(r.attempts or 0),
        "records_per_s": (rows / duration) if rows is not None and duration else None,
        "error": mask_text(errors[-1][1]) if errors and not committed else None,
        "run_id": task["run_id"] if task else None,
        "task_state": task["state"] if task else None,
    }


def _batch_status(committed: bool, failed: bool, task: dict[str, Any] | None) -> str:
    """``committed``; for a planned batch ``running`` (its task runs), ``failed`` (its
    last attempt failed; the next run retries it) or ``planned``."""
    if committed:
        return "committed"
    state = task["state"] if task else None
    if state in ("running", "queued", "scheduled", "deferred", "up_for_retry"):
        return "running"
    if state in ("failed", "upstream_failed") or failed:
        return "failed"
    return "planned"


def ingest_tasks(ref: ConnectorRef, batch_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The latest ingest task instance of each batch (map index rendered ``batch N``),
    across the connector DAG's runs: run id, state and duration in seconds."""
    labels = {f"batch {i}": i for i in batch_ids}
    if not labels:
        return {}
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session

    out: dict[int, dict[str, Any]] = {}
    label: Any = TI.rendered_map_index  # a hybrid property: its SQL expression here
    with create_session() as session:
        rows = (
            session.query(label, TI.run_id, TI.state, TI.start_date, TI.end_date)
            .filter(
                TI.dag_id == catalog.connector_name(ref),
                TI.task_id == "ingest",
                label.in_(list(labels)),
            )
            .order_by(TI.start_date)
            .all()
        )
    now = dt.datetime.now(dt.UTC)
    for text, run_id, state, start, end in rows:
        duration = ((end or now) - start).total_seconds() if start else None
        out[labels[text]] = {
            "run_id": run_id,
            "state": str(state) if state else None,
            "duration_s": duration,
        }
    return out


def last_run(ref: ConnectorRef) -> dict[str, Any] | None:
    """The connector DAG's latest run: its id, state, and its gate's state (the
    ``discover`` task, which the gate starts; ``skipped``: the gate held the run, see
    ``gate`` for why); None before any run."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session

    dag_id = catalog.connector_name(ref)
    with create_session() as session:
        run = (
            session.query(DagRun.run_id, DagRun.state)
            .filter(DagRun.dag_id == dag_id)
            .order_by(DagRun.run_after.desc(), DagRun.id.desc())
            .first()
        )
        if run is None:
            return None
        # The gate starts discover (a run rendered before issue 26 has a gate task).
        states = dict(
            session.query(TI.task_id, TI.state).filter(
                TI.dag_id == dag_id,
                TI.run_id == run.run_id,
                TI.task_id.in_(("gate", "discover")),
                TI.map_index == -1,
            )
        )
        gate = states.get("gate", states.get("discover"))
    return {
        "run_id": run.run_id,
        "state": str(run.state) if run.state else None,
        "gate": str(gate) if gate else None,
    }


def throughput(batches: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records per second of each committed batch with a duration, oldest first: the
    points of the page's chart."""
    return [
        {
            "batch_id": b["batch_id"],
            "committed_at": b["committed_at"],
            "records_per_s": b["records_per_s"],
            "rows": b["rows"],
        }
        for b in reversed(batches)
        if b["status"] == "committed" and b["records_per_s"] is not None
    ]


def schema_of(ref: ConnectorRef, table: dict[str, Any]) -> dict[str, Any]:
    """The table's declared columns (empty: inferred) and its schema versions stored in
    the state store (``state.schemas``, oldest first; empty while none is stored)."""
    declared = [
        {
            "name": str(c.get("name")),
            "type": _type_text(c.get("type")),
            "nullable": bool(c.get("nullable", True)),
        }
        for c in table.get("columns") or ()
        if isinstance(c, dict)
    ]
    versions = [v.to_json() for v in catalog.state_store().schema_versions(ref.pipeline, ref.table)]
    for v in versions:
        v["created_at"] = _iso(v.get("created_at"))
    return {
        "declared": declared,
        "inferred": not declared,
        "evolution": table.get("schema_evolution"),
        "versions": versions,
    }


def _type_text(value: Any) -> str:
    """A column type as SQL text: the spec's JSON holds ``SqlType`` as a dict."""
    from airflow_connectors.spec.types import SqlType

    if isinstance(value, dict) and "kind" in value:
        return str(SqlType(str(value["kind"]), value.get("precision"), value.get("scale")))
    return str(value)


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return (
        dt.datetime.fromtimestamp(float(ts), dt.UTC)
        .isoformat(timespec="seconds")
        .replace("+00:00", "Z")
    )
