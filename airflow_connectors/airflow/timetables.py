"""The cron timetable of connector DAGs: runs on cron ticks, never for a tick that
has already passed.

Airflow's ``CronTriggerTimetable`` with ``catchup=False`` still starts a run for the
most recent past tick as soon as a DAG appears (or comes back after the scheduler was
down): a connector on ``*/5 * * * *`` created at 10:03 runs at once "for 10:00". For a
connector that is surprising (nobody asked for data now), and on the embedded SQLite
metadata DB that run competes with start-up. Connectors only ingest what is there when
the run starts, so a missed tick loses nothing: the next tick reads it. This timetable
therefore schedules the next tick at or after *now*, or after the last run's tick,
whichever is later. Backfills (``airflow backfill create``) and manual runs are not
affected.

Registered with Airflow through the provider's plugin (``timetables``), as custom
timetables must be, so the scheduler can deserialize it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow._shared.timezones.timezone import coerce_datetime, utcnow
from airflow.timetables.base import DagRunInfo
from airflow.timetables.trigger import CronTriggerTimetable

if TYPE_CHECKING:
    from airflow.timetables.base import DataInterval, TimeRestriction


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
        candidates = [self._align_to_next(coerce_datetime(utcnow()))]
        if last_automated_data_interval is not None:
            candidates.append(self._get_next(last_automated_data_interval.end))
        if restriction.earliest is not None:
            candidates.append(self._align_to_next(restriction.earliest))
        next_start = max(candidates)
        if restriction.latest is not None and restriction.latest < next_start:
            return None
        return DagRunInfo.interval(coerce_datetime(next_start - self._interval), next_start)
