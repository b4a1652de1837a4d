"""Named points in the batch protocol where tests inject crashes (Feldera-style fail
points). With ``AIRFLOW_CONNECTORS_FAILPOINT_DIR`` set, passing a point creates a marker
file there; a point listed in ``AIRFLOW_CONNECTORS_FAILPOINTS`` also stops the process
there until it is killed, so a test can SIGKILL it at exactly that point."""

from __future__ import annotations

import os
import time


def reach(name: str) -> None:
    folder = os.environ.get("AIRFLOW_CONNECTORS_FAILPOINT_DIR")
    if not folder:
        return
    with open(os.path.join(folder, name), "w") as fh:
        fh.write(str(os.getpid()))
    if name in os.environ.get("AIRFLOW_CONNECTORS_FAILPOINTS", "").split(","):
        while True:  # wait for the test's SIGKILL
            time.sleep(1)
