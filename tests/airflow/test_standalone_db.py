"""The embedded Airflow's SQLite metadata DB waits out a lock held longer than Python's
5 s sqlite3 default (CI once failed with "database is locked" from
``airflow backfill create`` while the scheduler held the write lock)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_connectors.testing.standalone import StandaloneAirflow

# Airflow's metadata DB (SQLite) and its engine, in a subprocess.
pytestmark = pytest.mark.airflow

WRITER = """
import sqlalchemy as sa
from airflow import settings
print("ready", flush=True)
with settings.engine.begin() as conn:
    conn.execute(sa.text("INSERT INTO probe VALUES (2)"))
print("written", flush=True)
"""


def test_airflow_engine_waits_for_a_sqlite_lock_held_over_5_seconds(tmp_path: Path) -> None:
    airflow = StandaloneAirflow(tmp_path / "home", tmp_path / "dags")
    airflow.home.mkdir(parents=True)
    holder = sqlite3.connect(airflow.home / "airflow.db", isolation_level=None)
    holder.execute("PRAGMA journal_mode=WAL")  # as Airflow's engine sets it on connect
    holder.execute("CREATE TABLE probe (x INTEGER)")
    holder.execute("BEGIN IMMEDIATE")  # the write lock, as a busy scheduler holds it
    holder.execute("INSERT INTO probe VALUES (1)")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER],
        env=airflow.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(7)  # Airflow's engine is now blocked on the lock, past the 5 s default
        holder.execute("COMMIT")
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0, err[-2000:]
    assert "written" in out
    assert holder.execute("SELECT x FROM probe ORDER BY x").fetchall() == [(1,), (2,)]
    holder.close()
