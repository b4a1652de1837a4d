"""Named points in the batch protocol where tests inject crashes (Feldera-style fail
points). With ``AIRFLOW_CONNECTORS_FAILPOINT_DIR`` set, passing a point creates a marker
file there. ``AIRFLOW_CONNECTORS_FAILPOINTS`` lists points (comma-separated) where the
process stops:

- ``name``: until it is killed, so a test can SIGKILL it at exactly that point;
- ``name:pause``: until the file ``<name>.resume`` appears in the folder, so a test can
  line two processes up at one point (two attempts of a batch racing to commit) and
  release them together.

The points, in the order a batch passes them: ``before_sink_write``,
``sink_write_started``, ``after_sink_write``, ``after_widened_write`` (a batch that
added columns, staged again with them, before its commit), ``mid_combine`` (small staged
parts written as one file, before they are deleted: :mod:`airflow_connectors.sinks.combine`),
``after_commit`` (:mod:`airflow_connectors.engine.batch`) and
``mid_publish`` (the Parquet sink, after publishing one part of a committed batch while
more remain), ``iceberg_committed`` (the Iceberg sink, after its commit of a batch and
before the engine marks the batch published), ``delta_rows_listed`` (the Delta sink
has listed an attempt's staged rows and not read them yet: a publisher racing another
one of the same batch), ``delta_committed`` (the same as ``iceberg_committed`` in the
Delta sink), ``postgres_committed`` (the same in the PostgreSQL sink). A keyed table's
publish (:mod:`airflow_connectors.sinks.changes`) passes ``delta_keys_committed`` and
``iceberg_keys_committed`` (its key states committed to ``<table>__keys``, the table's
own commit not yet made) and ``postgres_changes_applied`` (the changes applied inside
the publish transaction, before it commits).

Before those, while a run plans: ``while_planning``
(:func:`airflow_connectors.engine.discovery.discover`, right after it took the
connector's planning lease and before it lists or plans anything), so a test can kill a
run that holds the lease. Around a stop: ``before_release``
(``StateStore.drop_planned_batch``, before a stop releases a planned batch), so a test
can line a stop up with a job committing that batch.

Standard library only, and at the package's top so every layer that has a point (the
engine, the sinks) can import it without importing upward.
"""

from __future__ import annotations

import os
import time


def reach(name: str) -> None:
    """Pass the fail point ``name``: a no-op unless a test set
    ``AIRFLOW_CONNECTORS_FAILPOINT_DIR`` (see the module docstring)."""
    folder = os.environ.get("AIRFLOW_CONNECTORS_FAILPOINT_DIR")
    if not folder:
        return
    with open(os.path.join(folder, name), "w") as fh:
        fh.write(str(os.getpid()))
    stops = os.environ.get("AIRFLOW_CONNECTORS_FAILPOINTS", "").split(",")
    if name in stops:
        while True:  # wait for the test's SIGKILL
            time.sleep(1)
    if f"{name}:pause" in stops:
        resume = os.path.join(folder, f"{name}.resume")
        while not os.path.exists(resume):
            time.sleep(0.02)
