"""Freshness alerts: ``freshness: 2h`` on a connector is an Airflow deadline alert that
fires when no batch of the connector has committed within that time.

Airflow's built-in deadline references count from a run's logical date, from when it
was queued, or from a fixed datetime, and the deadline of a run that succeeds before
it is dropped. A connector goes stale precisely while its runs succeed quickly with
nothing to commit (the source stopped delivering), so none of them says "time since the
last commit". :class:`ConnectorLastCommit` is a custom deadline reference (registered by
the provider's plugin, as Airflow requires) that does: when a run of the connector's
DAG is created, the scheduler sets its deadline to *the end of the DAG's latest
successful ingest task* (a batch committed; before any, the DAG's first run) plus
``freshness``. Its evaluation reads only Airflow's metadata database, in the
scheduler's own session: the scheduler needs no access to the state store.

A run created while the connector is fresh gets a deadline in the future, which its
success drops unless it outlives it; a run created once the last commit is older than
``freshness`` gets a deadline already past, so the scheduler marks it missed at once.
The callback, :func:`connector_stale`, runs in the triggerer (an ``AsyncCallback``)
and asks the state store, which has the last word: a batch committed meanwhile (by a
run still going, or outside Airflow) means no alert, and so does a pipeline paused or a
connector stopped by a user. Otherwise it logs one warning naming the connector, its
last commit and the freshness, and returns the line, which Airflow keeps as the
callback's output; the missed deadline shows on the run in the UI.

The deadline is evaluated when a run is created, so a connector is checked as often as
runs of it start: give a connector with ``freshness`` a ``trigger.schedule`` (with
``on: new_data`` too, when it is event-driven) no longer than its freshness.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk.definitions.callback import AsyncCallback
from airflow.sdk.definitions.deadline import BaseDeadlineReference, DeadlineAlert

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

#: The task of a connector DAG whose success means a batch committed.
INGEST_TASK = "ingest"


class ConnectorLastCommit(BaseDeadlineReference):
    """Deadline reference: when the connector DAG's latest ``ingest`` task succeeded (a
    batch committed), or, before any did, when the DAG's first run was due. Backfill
    runs get no deadline: they re-read past slices, freshness is about new data."""

    #: What Airflow hands :meth:`_evaluate_with` when a run is created.
    required_kwargs: ClassVar[set[str]] = {"dag_id", "run_id"}

    def __init__(self, ingest_task_id: str = INGEST_TASK) -> None:
        self.ingest_task_id = ingest_task_id

    def serialize_reference(self) -> dict[str, Any]:
        """The reference as the DAG's serialization stores it."""
        return {**super().serialize_reference(), "ingest_task_id": self.ingest_task_id}

    @classmethod
    def deserialize_reference(cls, reference_data: dict[str, Any]) -> ConnectorLastCommit:
        """The reference back from its serialized form."""
        return cls(str(reference_data.get("ingest_task_id") or INGEST_TASK))

    def _evaluate_with(self, *, session: Session, **kwargs: Any) -> dt.datetime | None:
        """The base time of the deadline (Airflow adds the interval), read in the
        scheduler's session of the metadata database."""
        import sqlalchemy as sa
        from airflow.models.dagrun import DagRun
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.state import TaskInstanceState
        from airflow.utils.types import DagRunType

        dag_id = kwargs["dag_id"]
        run_type = session.scalar(
            sa.select(DagRun.run_type).where(
                DagRun.dag_id == dag_id, DagRun.run_id == kwargs["run_id"]
            )
        )
        if run_type == DagRunType.BACKFILL_JOB:
            return None
        committed = session.scalar(
            sa.select(sa.func.max(TaskInstance.end_date)).where(
                TaskInstance.dag_id == dag_id,
                TaskInstance.task_id == self.ingest_task_id,
                TaskInstance.state == TaskInstanceState.SUCCESS,
            )
        )
        if committed is not None:
            return _utc(committed)
        first = session.scalar(
            sa.select(sa.func.min(DagRun.run_after)).where(DagRun.dag_id == dag_id)
        )
        return None if first is None else _utc(first)

    def __repr__(self) -> str:
        return f"ConnectorLastCommit(ingest_task_id={self.ingest_task_id!r})"


def _utc(value: dt.datetime) -> dt.datetime:
    """``value`` as an aware UTC datetime (SQLite hands back naive ones)."""
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value


def freshness_alert(
    pipeline: str,
    table: str,
    connector: str,
    freshness: dt.timedelta,
    *,
    ingest_task_id: str = INGEST_TASK,
) -> DeadlineAlert:
    """The deadline alert of a connector with ``freshness``. For a connector placed in a
    DAG of one's own (a ``ConnectorTaskGroup``), pass it to that DAG's ``deadline`` with
    ``ingest_task_id`` the group's ingest task (``<group>.ingest``)."""
    return DeadlineAlert(
        reference=ConnectorLastCommit(ingest_task_id),
        interval=freshness,
        callback=AsyncCallback(
            connector_stale,
            kwargs={
                "pipeline": pipeline,
                "table": table,
                "connector": connector,
                "freshness_seconds": freshness.total_seconds(),
            },
        ),
        name=f"freshness {format_duration(freshness)}",
    )


def with_freshness(
    deadline: DeadlineAlert | Sequence[DeadlineAlert] | None,
    pipeline: str,
    table: str,
    connector: str,
    freshness: dt.timedelta | None,
) -> DeadlineAlert | Sequence[DeadlineAlert] | None:
    """A DAG's ``deadline`` argument: the one given (``dag_kwargs``), plus the connector's
    freshness alert when it has a ``freshness``."""
    if freshness is None:
        return deadline
    alert = freshness_alert(pipeline, table, connector, freshness)
    if deadline is None:
        return alert
    given = [deadline] if isinstance(deadline, DeadlineAlert) else list(deadline)
    return [*given, alert]


async def connector_stale(
    *,
    pipeline: str,
    table: str,
    connector: str,
    freshness_seconds: float,
    context: dict[str, Any] | None = None,
) -> str:
    """The freshness deadline of a connector's run was missed (runs in the triggerer).
    Logs one line and returns it (Airflow keeps it as the callback's output): a warning
    when the state store shows no batch committed within ``freshness_seconds``; else,
    or while the pipeline is paused or the connector stopped (on purpose, by a user),
    an info line saying why there is no alert."""
    last, idle = await asyncio.to_thread(_last_commit, pipeline, table, connector)
    run = ((context or {}).get("dag_run") or {}).get("dag_run_id")
    name = f"{pipeline}.{table}.{connector}"
    stale, line = freshness_verdict(name, freshness_seconds, last, idle)
    if stale:
        log.warning("%s%s", line, f"; deadline of run {run} missed" if run else "")
    else:
        log.info("%s", line)
    return line


def _last_commit(pipeline: str, table: str, connector: str) -> tuple[float | None, str | None]:
    """The connector's last commit, and why it is idle on purpose (None: it is not)."""
    from airflow_connectors.settings import Settings
    from airflow_connectors.state.store import ConnectorRef, StateStore

    ref = ConnectorRef(pipeline, table, connector)
    store = StateStore(Settings.load().state_store_url)
    try:
        last = store.last_committed_at(ref)
        state = store.status(ref)
        if store.pipeline_paused(pipeline):
            return last, f"pipeline {pipeline} is paused"
        if state is not None and state.stopped:
            return last, "the connector is stopped"
        return last, None
    finally:
        store.close()


def freshness_verdict(
    connector: str,
    freshness_seconds: float,
    last_commit: float | None,
    idle: str | None = None,
    now: float | None = None,
) -> tuple[bool, str]:
    """Whether to alert: ``connector`` is stale given its last commit (epoch seconds;
    None: never) and not ``idle`` on purpose; and the one line that says so."""
    import time

    now = time.time() if now is None else now
    freshness = format_duration(dt.timedelta(seconds=freshness_seconds))
    if last_commit is None:
        what = "no batch ever committed"
    elif now - last_commit < freshness_seconds:
        return False, (
            f"connector {connector} is fresh: last batch committed at {_iso(last_commit)} "
            f"(freshness {freshness}); no alert"
        )
    else:
        what = f"no batch committed since {_iso(last_commit)}"
    line = f"connector {connector} is stale: {what} (freshness {freshness})"
    if idle is not None:
        return False, f"{line}; no alert: {idle}"
    return True, line


def _iso(ts: float) -> str:
    return (
        dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


def format_duration(value: dt.timedelta) -> str:
    """``2h``, ``90m``, ``45s``, ``1d``: the largest unit that divides it."""
    seconds = value.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
