"""Partitioned connector runs (``trigger: {schedule: ..., partitioned: true}``).

The DAG of such a connector runs on :class:`.timetables.ConnectorPartitionTimetable`:
each run is an Airflow partition keyed by its cron tick and has no logical date. Its
tasks still render ``{{ ds }}``-templated configs: the date-slice variables are taken
from the run's ``partition_date`` (:func:`with_partition_dates`), so the same spec reads
the same slice with or without ``partitioned``. The run's ``finished`` task emits a
partitioned asset event, carrying the partition key, once the run's own slice is
completely ingested (:func:`slice_finished`), whatever other slices are doing: a failed
day leaves its batch planned, which must not hold back the events of the days after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_connectors.engine.context import BatchContext
    from airflow_connectors.state.store import StateStore


def with_partition_dates(context: Any) -> Any:
    """``context`` with the date variables of a run that has a ``partition_date`` but
    no logical date (a partitioned run): ``ds``, ``ts``, ``logical_date`` and the data
    interval, as an exact cron run at the partition's tick would have them. Other
    contexts are returned as they are."""
    date = context.get("partition_date")
    if context.get("logical_date") is not None or date is None:
        return context
    ts = date.isoformat()
    return {
        **context,
        "logical_date": date,
        "ds": date.strftime("%Y-%m-%d"),
        "ds_nodash": date.strftime("%Y%m%d"),
        "ts": ts,
        "ts_nodash": date.strftime("%Y%m%dT%H%M%S"),
        "ts_nodash_with_tz": ts.replace("-", "").replace(":", ""),
        "data_interval_start": date,
        "data_interval_end": date,
    }


def slice_finished(store: StateStore, ctx: BatchContext) -> bool:
    """Whether the slice ``ctx`` renders (this run's partition) is completely ingested:
    none of its batches is planned-but-uncommitted and its discovery would find nothing
    more. Batches of other slices do not count."""
    import time

    from airflow_connectors.engine.discovery import _sliced, same_source
    from airflow_connectors.transports import Limits

    if any(same_source(b.plan, ctx) for b in store.pending_batches(ctx.ref)):
        return False
    transport = ctx.transport()
    verdict = transport.exhausted(_sliced(store.cursor(ctx.ref)))
    if verdict is not None:
        return verdict
    more = transport.discover(
        _sliced(store.cursor(ctx.ref)), Limits(max_records=1, max_items=1, now=time.time())
    )
    return next(iter(more), None) is None


def emit_partition_event(finished: Any, context: Any, metrics: dict[str, Any]) -> None:
    """The ``finished`` task of a partitioned run: the connector's asset event for the
    run's partition, once ``finalize`` (its upstream task) found the run's slice
    completely ingested. Otherwise the task fails naming the partition: a partition
    whose run succeeded is one whose data landed, and ``airflow backfill create
    --reprocess-behavior failed`` runs the failed ones again."""
    from airflow.sdk.exceptions import AirflowFailException

    key = context["partition_key"]
    name = f"{finished.pipeline}.{finished.endpoint}"
    reports = context["ti"].xcom_pull(task_ids=sorted(finished.upstream_task_ids)) or []
    if isinstance(reports, dict):
        reports = [reports]
    done = [r.get("slice_finished") for r in reports if isinstance(r, dict)]
    if done != [True]:
        raise AirflowFailException(
            f"connector {name}: partition {key} is not completely ingested (its slice has "
            "work left: more than tasks_max batches, or a batch that did not commit); "
            "run the partition again, e.g. airflow backfill create --dag-id "
            f"{context['dag'].dag_id} --from-date ... --to-date ... --reprocess-behavior failed"
        )
    event = context["outlet_events"][finished.asset]
    event.extra.update({**metrics, "partition_key": key})
    finished.log.info(
        "connector %s: partition %s ingested: partitioned asset event on %s",
        name,
        key,
        finished.asset.uri,
    )
