"""The planning lease is tied to its holder's life (issue 22, item 13).

A run killed while it plans (SIGKILL at the ``while_planning`` fail point, inside
``discover`` with the lease held) must not block its connector: the lease is short,
renewed by a heartbeat while held, and a holder of this host whose process is gone frees
it at once. A one-shot ``airflow-connectors run`` that skips a connector because another
run holds its lease exits non-zero and says so in one line. Real processes, real SIGKILL,
the real CLI on local Spark, both state stores (SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import read_table

from airflow_connectors.cli import EXIT_BUSY
from airflow_connectors.state.signals import LEASE_TTL
from airflow_connectors.state.store import ConnectorRef, StateStore

CLI = str(Path(sys.executable).parent / "airflow-connectors")
REF = ConnectorRef("crash", "events", "files")


# --- helpers ----------------------------------------------------------------------


def write_ids(path: Path, ids: range) -> None:
    pq.write_table(pa.table({"id": list(ids), "name": [f"n{i}" for i in ids]}), path)


def spec_file(root: Path, source: Path) -> Path:
    """Pipeline ``crash``, table ``events`` (Parquet sink), connector ``files``."""
    spec = {
        "pipeline": "crash",
        "tables": {
            "events": {
                "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR"},
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(source), "min_file_age": 0},
                        },
                        "format": {"name": "parquet"},
                    }
                ],
            }
        },
    }
    path = root / "pipeline.json"
    path.write_text(json.dumps(spec))
    return path


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "AIRFLOW_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
    for name in (
        "AIRFLOW__CONNECTORS__STATE_STORE_URL",
        "AIRFLOW__CONNECTORS__WAREHOUSE",
        "AIRFLOW_CONNECTORS_FAILPOINT_DIR",
        "AIRFLOW_CONNECTORS_FAILPOINTS",
    ):
        env.pop(name, None)
    return {**env, **extra}


def run_cli(
    spec: Path, store_url: str, warehouse: Path, home: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, "run", str(spec), "--state-store-url", store_url, "--warehouse", str(warehouse)],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def landed_ids(warehouse: Path) -> list[int]:
    table = read_table(str(warehouse), "crash", "events")
    return sorted(table.column("id").to_pylist()) if table.num_columns else []


def wait_for_marker(marker: Path, proc: subprocess.Popen[str], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"exited ({proc.returncode}) before {marker.name}:\n{out[-3000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise AssertionError(f"did not reach {marker.name} in {timeout} s")
        time.sleep(0.05)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group and reap the leader."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError("processes of the killed run survived SIGKILL")


def start_holder(
    store_url: str, owner: str | None, ttl: float, every: float
) -> subprocess.Popen[str]:
    """A process that holds the lease of ``REF`` (renewed by the heartbeat) until it is
    killed; prints ``held OWNER`` once it has it. ``owner`` None: its own host:pid."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from airflow_connectors.state.signals import local_owner
        from airflow_connectors.state.store import ConnectorRef, StateStore
        store = StateStore({store_url!r})
        owner = {owner!r} or local_owner()
        lease = store.hold_lease(ConnectorRef({REF.pipeline!r}, {REF.table!r}, {REF.connector!r}), owner, ttl={ttl!r}, every={every!r})
        assert lease is not None, "the lease is busy"
        print("held", owner, flush=True)
        while True:
            time.sleep(1)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("held "), line + proc.stdout.read()
    return proc


# --- the lease itself ---------------------------------------------------------------


@pytest.mark.slow
def test_a_held_lease_outlives_its_ttl_and_a_killed_holders_lapses(store_url: str) -> None:
    """An owner that is no process of this host (an Airflow run id): the heartbeat keeps
    its lease past the ttl while it lives; after SIGKILL it is free once the ttl passed,
    not before."""
    ttl, every = 3.0, 0.5
    store = StateStore(store_url)
    holder = start_holder(store_url, "airflow:manual__2024-01-01", ttl, every)
    try:
        time.sleep(2 * ttl)  # twice the ttl: only the renewals keep it
        assert not store.acquire_lease(REF, "another-run")
        assert store.lease_holder(REF) == "airflow:manual__2024-01-01"
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    killed = time.monotonic()
    assert not store.acquire_lease(REF, "another-run"), "held until its ttl passes"
    while not store.acquire_lease(REF, "another-run"):
        assert time.monotonic() - killed < ttl + 5, "the dead holder's lease did not lapse"
        time.sleep(0.1)
    freed = time.monotonic() - killed
    print(f"a killed remote holder's lease was free after {freed:.2f} s (ttl {ttl} s)")
    assert freed <= ttl + 1
    store.close()


@pytest.mark.slow
def test_a_killed_holder_of_this_host_frees_its_lease_at_once(store_url: str) -> None:
    """Owner ``<this host>:<pid>``: held while the process lives (the default ttl), free
    as soon as it is dead, even before its parent reaped it (a zombie)."""
    store = StateStore(store_url)
    holder = start_holder(store_url, None, LEASE_TTL, 10.0)
    owner = f"{socket.gethostname()}:{holder.pid}"
    try:
        assert store.lease_holder(REF) == owner
        assert not store.acquire_lease(REF, "another-run"), "its holder lives"
        os.kill(holder.pid, signal.SIGKILL)
        killed = time.monotonic()
        # Not reaped yet: a zombie is no holder either.
        while not store.acquire_lease(REF, "another-run"):
            assert time.monotonic() - killed < 5, "the dead holder's lease is still held"
            time.sleep(0.01)
        freed = time.monotonic() - killed
        print(f"a killed holder of this host: its lease was free after {freed:.3f} s")
        assert freed < 2
        assert store.lease_holder(REF) == "another-run"
    finally:
        holder.kill()
        holder.wait()
        store.close()


def test_a_lease_lasts_the_short_ttl_without_renewal(store_url: str) -> None:
    store = StateStore(store_url)
    before = time.time()
    assert store.acquire_lease(REF, "other-host:123")
    assert not store.acquire_lease(REF, "another-run")
    assert store.renew_lease(REF, "other-host:123")
    assert not store.renew_lease(REF, "another-run")
    assert store.lease_holder(REF) == "other-host:123"
    assert LEASE_TTL <= 30
    store.release_lease(REF, "other-host:123")
    assert store.lease_holder(REF) is None
    assert store.acquire_lease(REF, "another-run", ttl=-1)  # lapsed at once
    assert store.lease_holder(REF) is None and store.acquire_lease(REF, "third")
    assert time.time() - before < LEASE_TTL
    store.close()


# --- the CLI: a run killed while planning, then the next run ---------------------------


@pytest.mark.spark  # the CLI's run starts local Spark
def test_a_run_killed_while_planning_does_not_block_the_next_run(
    store_url: str, tmp_path: Path
) -> None:
    """Run 1 ingests a.parquet. Run 2 (two new files) is SIGKILLed at ``while_planning``
    with the lease held. Run 3, started at once, must plan and land every record exactly
    once and exit 0 (before the fix it skipped the connector for 600 s, exit 0)."""
    source = tmp_path / "source"
    source.mkdir()
    warehouse = tmp_path / "wh"
    home = tmp_path / "home"
    home.mkdir()
    spec = spec_file(tmp_path, source)
    write_ids(source / "a.parquet", range(0, 10))

    first = run_cli(spec, store_url, warehouse, home)
    assert first.returncode == 0, first.stderr[-3000:]
    assert landed_ids(warehouse) == list(range(10))

    write_ids(source / "b.parquet", range(10, 25))
    write_ids(source / "c.parquet", range(25, 40))
    marks = tmp_path / "failpoints"
    marks.mkdir()
    env = cli_env(
        home,
        AIRFLOW_CONNECTORS_FAILPOINT_DIR=str(marks),
        AIRFLOW_CONNECTORS_FAILPOINTS="while_planning",
    )
    killed_run = subprocess.Popen(
        [CLI, "run", str(spec), "--state-store-url", store_url, "--warehouse", str(warehouse)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    wait_for_marker(marks / "while_planning", killed_run)
    pid = int((marks / "while_planning").read_text())
    store = StateStore(store_url)
    try:
        # The killed run held the lease, as host:pid.
        assert store.lease_holder(REF) == f"{socket.gethostname()}:{pid}"
        kill_group(killed_run)
        assert store.lease_holder(REF) == f"{socket.gethostname()}:{pid}"  # left behind
    finally:
        store.close()

    started = time.monotonic()
    again = run_cli(spec, store_url, warehouse, home)
    took = time.monotonic() - started
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "being planned by another run" not in again.stderr
    assert "events.files: finished, +30 records" in again.stdout, again.stdout
    assert landed_ids(warehouse) == list(range(40)), "every record exactly once"
    print(f"the run after the kill proceeded at once and took {took:.1f} s")

    store = StateStore(store_url)
    try:
        st = store.status(REF)
        assert st is not None and st.total_records == 40
        assert store.lease_holder(REF) is None
    finally:
        store.close()


@pytest.mark.slow
def test_a_run_that_skips_a_busy_connector_exits_non_zero(store_url: str, tmp_path: Path) -> None:
    """Another live run holds the lease: the one-shot run skips the connector, ingests
    nothing, says so in one line naming the connector and what to do, exits 75."""
    source = tmp_path / "source"
    source.mkdir()
    write_ids(source / "a.parquet", range(0, 5))
    home = tmp_path / "home"
    home.mkdir()
    spec = spec_file(tmp_path, source)
    holder = start_holder(store_url, None, LEASE_TTL, 10.0)
    try:
        out = run_cli(spec, store_url, tmp_path / "wh", home)
    finally:
        holder.kill()
        holder.wait()
    assert out.returncode == EXIT_BUSY, out.stdout[-2000:] + out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    told = [line for line in out.stderr.splitlines() if line.startswith("run incomplete")]
    owner = f"{socket.gethostname()}:{holder.pid}"
    assert told == [
        "run incomplete: connector crash.events.files was skipped and ingested nothing: "
        f"another run ({owner}) is planning it; run again once that run ends (the lease "
        f"of a run that died is free within {LEASE_TTL:g} s)"
    ]
    assert "events.files: busy, +0 records" in out.stdout
    assert landed_ids(tmp_path / "wh") == []
