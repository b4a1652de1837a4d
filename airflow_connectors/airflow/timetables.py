"""The cron timetables of connector DAGs: runs on cron ticks, never for a tick that
has already passed; the partitioned one (``trigger: {partitioned: true}``) makes each
run an Airflow partition.

Airflow's ``CronTriggerTimetable`` with ``catchup=False`` still starts a run for the
most recent past tick as soon as a DAG appears (or comes back after the scheduler was
down): a connector on ``*/5 * * * *`` created at 10:03 runs at once "for 10:00". For a
connector that is surprising (nobody asked for data now), and on the embedded SQLite
metadata DB that run competes with start-up. This timetable therefore schedules the next
tick at or after *now* when the DAG has no run yet or was off for more than one tick,
and otherwise always the tick right after the last run's, even a moment after it passed
(the dag-processor recomputes the next run every few seconds, often a moment after a
tick and before the scheduler made its run; skipping that tick would lose a templated
connector's slice). Backfills (``airflow backfill create``) and manual runs are not
affected.

``ConnectorPartitionTimetable`` is Airflow's ``CronPartitionTimetable`` with the same
rule: each run carries a partition key (the tick, ``%Y-%m-%dT%H:%M:%S`` in UTC, the
format Airflow's temporal partition mappers read) and no logical date; the connector's
finished event is a partitioned asset event, and ``airflow backfill create`` makes one
run per partition (``--reprocess-behavior failed`` re-runs the failed ones only).

Both are registered with Airflow through the provider's plugin (``timetables``), as custom
timetables must be, so the scheduler can deserialize them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow._shared.timezones.timezone import coerce_datetime, utcnow
from airflow.timetables.base import DagRunInfo
from airflow.timetables.trigger import CronPartitionTimetable, CronTriggerTimetable

if TYPE_CHECKING:
    from airflow.timetables.base import DataInterval, TimeRestriction
    from pendulum import DateTime


def _next_tick(
    timetable: CronTriggerTimetable, last_tick: DateTime | None, restriction: TimeRestriction
) -> DateTime | None:
    """The tick after ``last_tick`` when that is the latest tick at or before now, or one
    still to come; else (no run yet, or more than one tick passed without a run: the DAG
    was off) the next tick at or after now. Never before ``earliest``; None past
    ``latest``.

    The dag-processor recomputes a DAG's next run every few seconds, so it often does a
    moment after a tick and before the scheduler has made that tick's run: "the next
    tick after now" would then skip the tick (a templated daily connector would lose
    that day's slice), so the tick right after the last run is kept even once passed."""
    now = coerce_datetime(utcnow())
    next_start = timetable._align_to_next(now)
    if last_tick is not None:
        after_last = timetable._get_next(coerce_datetime(last_tick))
        if after_last >= timetable._align_to_prev(now):
            next_start = after_last
    if restriction.earliest is not None:
        next_start = max(
            next_start, timetable._align_to_next(coerce_datetime(restriction.earliest))
        )
    next_start = coerce_datetime(next_start)
    if restriction.latest is not None and restriction.latest < next_start:
        return None
    return next_start


class ConnectorCronTimetable(CronTriggerTimetable):
    """``CronTriggerTimetable`` whose scheduled runs are only for ticks not yet passed."""

    def next_dagrun_info(
        self,
        *,
        last_automated_data_interval: DataInterval | None,
        restriction: TimeRestriction,
    ) -> DagRunInfo | None:
        """Without catchup: the next tick after now (or after the last run, or ``earliest``,
        whichever is latest), never a tick that passed while the DAG was off."""
        if restriction.catchup:
            return super().next_dagrun_info(
                last_automated_data_interval=last_automated_data_interval,
                restriction=restriction,
            )
        last = last_automated_data_interval.end if last_automated_data_interval else None
        next_start = _next_tick(self, last, restriction)
        if next_start is None:
            return None
        return DagRunInfo.interval(coerce_datetime(next_start - self._interval), next_start)


class ConnectorPartitionTimetable(CronPartitionTimetable):
    """``CronPartitionTimetable`` whose scheduled runs are only for ticks not yet passed:
    one partition per tick, keyed by the tick."""

    def next_dagrun_info_v2(
        self,
        *,
        last_dagrun_info: DagRunInfo | None,
        restriction: TimeRestriction,
    ) -> DagRunInfo | None:
        """Without catchup: the partition of the next tick after now (or after the last
        run's, or ``earliest``, whichever is latest), never one of a tick that passed
        while the DAG was off; those are for ``airflow backfill create``."""
        if restriction.catchup:
            return super().next_dagrun_info_v2(
                last_dagrun_info=last_dagrun_info, restriction=restriction
            )
        last = last_dagrun_info.run_after if last_dagrun_info else None
        next_start = _next_tick(self, last, restriction)
        if next_start is None:
            return None
        partition_date, partition_key = self._get_partition_info(
            run_date=coerce_datetime(next_start)
        )
        return DagRunInfo(
            run_after=coerce_datetime(next_start),
            data_interval=None,
            partition_date=partition_date,
            partition_key=partition_key,
        )
