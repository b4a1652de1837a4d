"""The embedded SQLite state store under parallel openers (issue 22): a fresh file is
switched to WAL once, by whichever opener comes first, the others wait for it; a store
held by another process longer than the wait says "locked" (not "the folder must be
writable")."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_connectors.state.store import StateStore, StateStoreUnavailable

OPEN = """
import sys
from airflow_connectors.state.store import StateStore
StateStore(sys.argv[1]).close()
"""


@pytest.mark.slow
def test_twelve_processes_opening_one_fresh_file_all_succeed(tmp_path: Path) -> None:
    for attempt in range(3):
        url = f"sqlite:///{tmp_path / f'fresh{attempt}.db'}"
        procs = [
            subprocess.Popen([sys.executable, "-c", OPEN, url], stderr=subprocess.PIPE, text=True)
            for _ in range(12)
        ]
        errors = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 12, errors
    mode = sqlite3.connect(tmp_path / "fresh0.db").execute("PRAGMA journal_mode").fetchone()
    assert mode[0] == "wal"


@pytest.mark.slow
def test_a_store_held_longer_than_the_wait_says_it_is_locked(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    StateStore(f"sqlite:///{path}").close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StateStoreUnavailable) as locked:
            StateStore(f"sqlite:///{path}?timeout=0.5")
        message = str(locked.value)
        assert "is locked: another process held it longer than this one waits" in message
        assert "must exist and be writable" not in message
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    StateStore(f"sqlite:///{path}?timeout=0.5").close()  # free again: opens
