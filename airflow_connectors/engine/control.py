"""Connector control: the state a user sees, the rule for whether a connector may run,
and Kafka Connect's pause, resume, stop and start transitions.

Every surface asks here, through one service, :class:`ConnectorControl`: the REST API,
the CLI (``stats``, ``connector ... --local``, ``pipeline status``), the gate task and
the embedded runner. The service reads the state store and asks a :class:`DagSwitch`
whether the connector's DAG is paused, and pauses it: under Airflow the DAG's flag
(``airflow_connectors.airflow.dag_switch``), in embedded runs the store's own flag
(:class:`StoreSwitch`). Nothing here imports Airflow.

Transitions (Kafka Connect's, KIP-875):

- ``stop``: STOPPED. The connector's planned batches are released (their items become new
  work again), nothing is planned while it is stopped (the gate skips, the embedded
  runner passes it over, planning refuses), and only now may its offsets be edited.
- ``resume``: from any state to RUNNING (the DAG is unpaused through the switch).
- ``pause``: PAUSED; from STOPPED as well (the offsets are then no longer editable).
- ``start`` (Feldera's): unpauses a paused connector; a STOPPED one is refused
  (:class:`ConnectorStopped`, HTTP 409): it runs again only after an explicit ``resume``.
  Unpausing its DAG in the Airflow UI does not run it either: the gate skips while it
  is stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from airflow_connectors.engine.context import BatchContext
from airflow_connectors.state.store import (
    ConnectorRef,
    ConnectorState,
    ConnectorStatus,
    ConnectorStopped,
    StateStore,
)

__all__ = [
    "ConnectorControl",
    "ConnectorStopped",
    "ConnectorView",
    "DagNotFound",
    "DagSwitch",
    "RestartPlan",
    "State",
    "StoreSwitch",
    "connector_view",
    "feldera_status",
    "stopped_message",
    "task_state",
]

log = logging.getLogger(__name__)


class State(StrEnum):
    """Kafka Connect's connector states: the store's :class:`ConnectorStatus` (what the
    connector's runs did) plus PAUSED and STOPPED, which come from flags."""

    UNASSIGNED = ConnectorStatus.UNASSIGNED.value
    RUNNING = ConnectorStatus.RUNNING.value
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"
    FAILED = ConnectorStatus.FAILED.value
    RESTARTING = ConnectorStatus.RESTARTING.value


@dataclass(frozen=True)
class ConnectorView:
    """What every surface shows for one connector."""

    state: State
    #: Feldera's ``paused``: the connector's own flag (its DAG's, or the store's in
    #: embedded runs), true while stopped; the pipeline's flag is not part of it.
    paused: bool
    end_of_input: bool
    #: End of input with nothing planned-but-uncommitted.
    finished: bool
    #: Why it failed (state FAILED only).
    trace: str | None = None


@dataclass(frozen=True)
class RestartPlan:
    """What Kafka Connect's restart of a connector does, as :meth:`ConnectorControl.restart`
    decided it; the caller carries it out (under Airflow: trigger a run, clear tasks)."""

    #: Start a new run of the connector.
    run: bool
    #: Tasks (batches) of the latest run to run again.
    tasks: tuple[int, ...]
    #: The connector now shows RESTARTING (and the restarted tasks do).
    restarting: bool


def connector_view(
    record: ConnectorState | None,
    *,
    dag_paused: bool | None,
    pipeline_paused: bool = False,
    spec_paused: bool = False,
    failed_task_trace: str | None = None,
) -> ConnectorView:
    """The one derivation of a connector's user-visible state.

    ``record``: the state-store row (None: it never ran). ``dag_paused``: the Airflow
    DAG's flag, None when no Airflow knows the connector (then the store's flag, else
    ``spec_paused``). ``failed_task_trace``: the trace of a failed ingest task of the
    DAG's latest run (Airflow only: batches run in parallel, one may fail while another
    commits after it).

    Precedence: STOPPED, PAUSED (connector or pipeline), UNASSIGNED, RESTARTING, FAILED,
    RUNNING. FAILED lasts while the failed batch is still planned (it is retried by the
    next run); once no batch is in flight, because another attempt committed it or a stop
    released it, a later clean run shows RUNNING again. A failed discovery (a missing
    bucket, refused credentials, an unreachable endpoint) is FAILED with its one line
    until a later discovery succeeds.
    """
    stopped = bool(record and record.stopped)
    if dag_paused is not None:
        own_paused = dag_paused
    elif record is not None and record.paused is not None:
        own_paused = bool(record.paused)
    else:
        own_paused = spec_paused
    eoi = bool(record and record.end_of_input)
    finished = bool(record and record.finished)

    def view(state: State, trace: str | None = None) -> ConnectorView:
        return ConnectorView(state, own_paused or stopped, eoi, finished, trace)

    if stopped:
        return view(State.STOPPED)
    if own_paused or pipeline_paused:
        return view(State.PAUSED)
    if record is None or record.state == ConnectorStatus.UNASSIGNED:
        return view(State.UNASSIGNED)
    if record.state == ConnectorStatus.RESTARTING:
        return view(State.RESTARTING)
    if failed_task_trace is not None:
        return view(State.FAILED, failed_task_trace or record.fatal_error)
    if record.state == ConnectorStatus.FAILED and (
        record.buffered_batches > 0 or record.fatal_error
    ):
        return view(State.FAILED, record.fatal_error)
    return view(State.RUNNING)


def task_state(connector: State, task: str) -> str:
    """A task's state as shown beside its connector's: the tasks of a paused connector
    are PAUSED, not RUNNING (failed and restarting tasks keep their state)."""
    if connector == State.PAUSED and task in (State.RUNNING, State.UNASSIGNED):
        return State.PAUSED
    return task


def feldera_status(
    ref: ConnectorRef, record: ConnectorState | None, view: ConnectorView
) -> dict[str, Any]:
    """Feldera's ``InputEndpointStatus`` with the Kafka Connect ``state`` and the
    ``paused`` of ``view`` (the record alone does not know whether the connector's DAG
    is paused); ``record`` None: a connector that never ran."""
    st = record or ConnectorState(ref=ref)
    return {
        "endpoint_name": ref.endpoint_name,
        "config": {"stream": ref.table},
        "metrics": {
            "total_bytes": st.total_bytes,
            "total_records": st.total_records,
            "buffered_records": st.buffered_records,
            "buffered_bytes": st.buffered_bytes,
            "num_transport_errors": st.num_transport_errors,
            "num_parse_errors": st.num_parse_errors,
            "end_of_input": st.end_of_input,
            # Not Feldera's: the source's lag (messages not committed) as the latest
            # discovery measured it; None where the transport cannot tell.
            "lag": st.lag,
        },
        "paused": view.paused,
        # No batch holds back anything else: a batch commits alone, with its offsets.
        "barrier": False,
        "state": view.state.value,
        # A failure another attempt or a later run superseded is not fatal any more
        # (it stays in the transport errors).
        "fatal_error": st.fatal_error if view.state == State.FAILED else None,
        "parse_errors": st.parse_errors,
        "transport_errors": st.transport_errors,
    }


def kip875_offsets(
    offsets: Sequence[dict[str, Any]], watermark: dict[str, Any] | None, name: str
) -> dict[str, Any]:
    """A connector's committed offsets in Kafka Connect's KIP-875 shape: per source key
    ``{"partition": {"key": K}, "offset": {"offset", "records", "completed", "meta"}}``,
    then the watermark's entry ``{"partition": {"watermark": name}, "offset": {...}}``
    once it has one. Keys are shown as given (the caller masks them)."""
    entries: list[dict[str, Any]] = [
        {"partition": {"key": o["key"]}, "offset": {k: v for k, v in o.items() if k != "key"}}
        for o in offsets
    ]
    if watermark is not None:
        entries.append({"partition": {"watermark": name}, "offset": dict(watermark)})
    return {"offsets": entries}


def is_watermark_entry(data: Any) -> bool:
    """Whether ``data`` is the watermark's KIP-875 entry (``{"partition": {"watermark":
    ...}, ...}``)."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("partition"), dict)
        and "watermark" in data["partition"]
    )


def check_watermark_entries(given: Sequence[Any], shown: dict[str, Any] | None) -> None:
    """An offsets edit may carry the watermark's entry back as it was shown (a GET's
    answer edited and sent back); ``ValueError`` when one differs from ``shown`` (the
    entry as shown now, or None): it is derived from the committed offsets and not
    edited."""
    for entry in given:
        if entry != shown:
            raise ValueError(
                "the watermark's entry is derived from the committed offsets and is not "
                "edited: leave it out, or give it as the offsets show it now (resetting "
                "the offsets resets it)"
            )


def offset_entry(data: Any) -> Any:
    """An offsets edit entry in our own shape (``{"key", "offset", "records",
    "completed", "meta"}``), from Kafka Connect's KIP-875 shape (``{"partition": {"key":
    K}, "offset": {...} | null}``; a null offset forgets the key) or as given. Raises
    ``ValueError`` for a partition that is not a key's."""
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


def stopped_message(ref: ConnectorRef) -> str:
    """What a stopped connector says when asked to run: one line naming how to resume it
    (REST API and CLI)."""
    return (
        f"connector {ref} is stopped: it runs again only after resume "
        f"(PUT /connect/connectors/{ref}/resume, or `airflow-connectors connector "
        f"{ref.pipeline} {ref.table} {ref.connector} resume`)"
    )


class DagNotFound(LookupError):
    """The connector has no DAG where the switch looks (Airflow has not parsed its DAG
    file yet): its paused flag could not be changed."""


class DagSwitch(Protocol):
    """Whether a connector's DAG is paused, and pausing it: the one thing control needs
    from whatever runs the connector. Under Airflow the DAG's paused flag *is* the
    connector's (``airflow.dag_switch.AirflowDagSwitch``); embedded runs keep it in the
    state store (:class:`StoreSwitch`)."""

    def paused(self, ref: ConnectorRef) -> bool | None:
        """The connector's paused flag; None when the switch does not know the connector
        (the view then takes the store's flag, else the spec's)."""
        ...

    def paused_many(self, refs: Sequence[ConnectorRef]) -> dict[ConnectorRef, bool]:
        """The flags of the connectors the switch knows, in one read."""
        ...

    def set_paused(self, ref: ConnectorRef, paused: bool) -> None:
        """Pause or unpause; :class:`DagNotFound` when the switch does not know it."""
        ...


class StoreSwitch:
    """The embedded runs' switch: the state store's own paused flag."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def paused(self, ref: ConnectorRef) -> bool | None:
        """The store's flag; None when the store has no row for the connector or no flag set."""
        st = self.store.status(ref)
        return None if st is None or st.paused is None else bool(st.paused)

    def paused_many(self, refs: Sequence[ConnectorRef]) -> dict[ConnectorRef, bool]:
        """One store read per connector; connectors without a flag are left out."""
        flags = {ref: self.paused(ref) for ref in refs}
        return {ref: flag for ref, flag in flags.items() if flag is not None}

    def set_paused(self, ref: ConnectorRef, paused: bool) -> None:
        """Sets the store's flag (creating the connector's row); never raises DagNotFound."""
        self.store.set_connector_paused(ref, paused)


class ConnectorControl:
    """The one way to read a connector's view and to change its state: the gate task,
    the embedded runner, the CLI and the REST API all call it, each with its switch.

    Transitions write the state store first, then the switch: the store keeps the
    connector's own flag too, so a connector keeps its state when it later runs
    embedded; a :class:`DagNotFound` from the switch leaves the store changed."""

    def __init__(self, store: StateStore, switch: DagSwitch | None = None) -> None:
        self.store = store
        self.switch: DagSwitch = switch if switch is not None else StoreSwitch(store)

    def view(
        self,
        ref: ConnectorRef,
        *,
        spec_paused: bool = False,
        failed_task_trace: str | None = None,
    ) -> ConnectorView:
        """The connector's view (:func:`connector_view`) from the store and the switch."""
        return self._view(
            ref,
            self.store.status(ref),
            self.switch.paused(ref),
            spec_paused=spec_paused,
            failed_task_trace=failed_task_trace,
        )

    def status(self, ref: ConnectorRef, *, failed_task_trace: str | None = None) -> dict[str, Any]:
        """Feldera's status of the connector (:func:`feldera_status`), one that never
        ran included."""
        record = self.store.status(ref)
        view = self._view(ref, record, self.switch.paused(ref), failed_task_trace=failed_task_trace)
        return feldera_status(ref, record, view)

    def statuses(self, refs: Sequence[ConnectorRef]) -> dict[ConnectorRef, dict[str, Any]]:
        """Feldera's status of each connector of ``refs`` that has run (has a record),
        the switch read once for all."""
        flags = self.switch.paused_many(refs)
        out = {}
        for ref in refs:
            record = self.store.status(ref)
            if record is not None:
                out[ref] = feldera_status(ref, record, self._view(ref, record, flags.get(ref)))
        return out

    def _view(
        self,
        ref: ConnectorRef,
        record: ConnectorState | None,
        dag_paused: bool | None,
        *,
        spec_paused: bool = False,
        failed_task_trace: str | None = None,
    ) -> ConnectorView:
        return connector_view(
            record,
            dag_paused=dag_paused,
            pipeline_paused=self.store.pipeline_paused(ref.pipeline),
            spec_paused=spec_paused,
            failed_task_trace=failed_task_trace,
        )

    def halted(self, ref: ConnectorRef, *, spec_paused: bool = False) -> str | None:
        """Why an embedded run passes the connector over (``"stopped"``, ``"paused"``),
        or None. The pipeline flag and ``start_after`` are checked by the caller."""
        view = self.view(ref, spec_paused=spec_paused)
        if view.state == State.STOPPED:
            return "stopped"
        if view.paused:
            return "paused"
        return None

    def gate_blocker(self, ref: ConnectorRef) -> str | None:
        """The gate's rule before ``start_after``: why a run of the connector must skip
        (the pipeline is paused, or the connector is stopped), or None. It does not read
        the switch: a running gate task means Airflow let the run start (and an Airflow
        task has no access to the metadata database)."""
        if self.store.pipeline_paused(ref.pipeline):
            return (
                f"pipeline {ref.pipeline} is paused, so connector {ref} does not run; "
                f"resume it with `airflow-connectors pipeline {ref.pipeline} resume`"
            )
        st = self.store.status(ref)
        if st is not None and st.stopped:
            return stopped_message(ref)
        return None

    def stop(self, ref: ConnectorRef) -> list[int]:
        """STOPPED: mark it stopped, release its planned batches (returns their ids),
        pause its DAG."""
        self.store.set_stopped(ref, True)
        released = []
        for batch in self.store.pending_batches(ref):
            # Released first, its staged files removed only then: a job that commits
            # the batch meanwhile wins (its files are published, not deleted), and once
            # released no commit of it is accepted any more.
            if self.store.drop_planned_batch(batch.batch_id):
                BatchContext.from_plan(batch.plan).sink().discard(batch.batch_id)
                released.append(batch.batch_id)
        if released:
            log.info("connector %s stopped: released planned batch(es) %s", ref, released)
        self.switch.set_paused(ref, True)
        return released

    def resume(self, ref: ConnectorRef) -> None:
        """From any state to running: not stopped, unpaused. A failure whose batch the
        stop released (or a failed discovery) is over: nothing is failing any more."""
        self.store.set_stopped(ref, False)
        self.store.set_connector_paused(ref, False)
        self.switch.set_paused(ref, False)
        if not self.store.pending_batches(ref):
            self.store.clear_failure(ref)

    def pause(self, ref: ConnectorRef) -> None:
        """PAUSED, from STOPPED as well."""
        self.store.set_stopped(ref, False)
        self.store.set_connector_paused(ref, True)
        self.switch.set_paused(ref, True)

    def start(self, ref: ConnectorRef) -> None:
        """Feldera's ``start``: unpause; refused for a stopped connector (resume it)."""
        st = self.store.status(ref)
        if st is not None and st.stopped:
            raise ConnectorStopped(stopped_message(ref))
        self.store.set_connector_paused(ref, False)
        self.switch.set_paused(ref, False)

    def restart(
        self,
        ref: ConnectorRef,
        *,
        include_tasks: bool,
        only_failed: bool,
        tasks: Sequence[int] = (),
        failed_tasks: Sequence[int] = (),
        failed_task_trace: str | None = None,
    ) -> RestartPlan:
        """Kafka Connect's restart (KIP-745). A stopped connector is refused
        (:class:`ConnectorStopped`). Without ``include_tasks``: a new run, or with
        ``only_failed`` a new run only of a FAILED connector, which then shows
        RESTARTING. With ``include_tasks``: the latest run's ``tasks`` (with
        ``only_failed``, its ``failed_tasks``) run again, and the connector shows
        RESTARTING when any do or it had failed."""
        state = self.view(ref, failed_task_trace=failed_task_trace).state
        if state == State.STOPPED:
            raise ConnectorStopped(stopped_message(ref))
        if not include_tasks:
            if only_failed and state != State.FAILED:
                return RestartPlan(run=False, tasks=(), restarting=False)
            if only_failed:
                self.store.set_restarting(ref)
            return RestartPlan(run=True, tasks=(), restarting=only_failed)
        chosen = tuple(failed_tasks if only_failed else tasks)
        restarting = bool(chosen) or state == State.FAILED
        if restarting:
            self.store.set_restarting(ref)
        return RestartPlan(run=False, tasks=chosen, restarting=restarting)

    def set_pipeline_paused(self, pipeline: str, paused: bool) -> None:
        """Pause or resume a whole pipeline (Feldera's pipeline pause): its connectors'
        gates skip and event triggers hold, while their own flags are kept."""
        self.store.set_pipeline_paused(pipeline, paused)
