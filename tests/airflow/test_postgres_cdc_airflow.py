"""postgres_cdc_input under real Airflow (``DagBag``, ``dag.test()``, real spark-submit on
local Spark) against the private logical-replication cluster (``pg_logical``): a table
of 20,000 rows, then a workload of 100,000 changes (70% updates, some of them leaving a
TOASTed column alone, 20% inserts, 10% deletes) written while the connectors run, into
a Delta table and a PostgreSQL table. The Delta connector's second run is killed
(SIGKILL) right after the Delta commit of its batch, before the engine commits it; the
next run finishes that batch. At the end each target equals the source table, compared
with ``EXCEPT`` both ways, and each slot is acknowledged up to what its table holds."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from conftest import DAGS, dag_file, task_states

from airflow_connectors.state.store import ConnectorRef, StateStore
from airflow_connectors.transports.postgres_cdc_input import lsn_int

pytestmark = [pytest.mark.sources]

ROWS = 20_000
CHANGES = 100_000
COLUMNS = {
    "id": "BIGINT NOT NULL",
    "customer": "VARCHAR",
    "qty": "INT",
    "price": "DECIMAL(10, 2)",
    "at": "TIMESTAMP",
    "ok": "BOOLEAN",
    "note": "VARCHAR",
}
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("customer", pa.string()),
        ("qty", pa.int32()),
        ("price", pa.decimal128(10, 2)),
        ("at", pa.timestamp("us")),
        ("ok", pa.bool_()),
        ("note", pa.string()),
    ]
)
#: The source's rows (timestamptz as UTC) and the PostgreSQL target's (timestamp).
SELECT = "SELECT id, customer, qty, price, {at}, ok, note FROM {table}"


class Workload(threading.Thread):
    """Writes :data:`CHANGES` row changes in transactions of 100 (70 updates, half of
    them leaving ``note`` alone; 20 inserts; 10 deletes), counting what changed."""

    def __init__(self, connect: Any, table: str) -> None:
        super().__init__(daemon=True)
        self.connect, self.table = connect, table
        self.done = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.connect() as conn:
                step, next_id = 0, ROWS + 1
                while self.done < CHANGES:
                    step += 1
                    with conn.transaction():
                        low = (step * 97) % ROWS
                        n = conn.execute(
                            f"UPDATE {self.table} SET qty = qty + 1, ok = NOT ok "
                            "WHERE id IN (SELECT id FROM "
                            f"{self.table} WHERE id > %s ORDER BY id LIMIT 35)",
                            (low,),
                        ).rowcount
                        n += conn.execute(
                            f"UPDATE {self.table} SET note = note || '.', price = price + 1 "
                            f"WHERE id IN (SELECT id FROM {self.table} WHERE id > %s "
                            "ORDER BY id DESC LIMIT 35)",
                            (ROWS + next_id // 2 - low,),
                        ).rowcount
                        n += conn.execute(
                            f"INSERT INTO {self.table} SELECT g, 'c' || g, g %% 50, g / 8.0, "
                            "now(), g %% 2 = 0, NULL FROM generate_series(%s::bigint, %s::bigint) g",
                            (next_id, next_id + 19),
                        ).rowcount
                        next_id += 20
                        n += conn.execute(
                            f"DELETE FROM {self.table} WHERE id IN (SELECT id FROM {self.table} "
                            "WHERE id > %s ORDER BY id LIMIT 10)",
                            ((step * 31) % next_id,),
                        ).rowcount
                    self.done += n
                    time.sleep(0.05)  # spread over the first runs of both connectors
        except BaseException as e:
            self.error = e


def _rows(conn: Any, table: str, at: str = "at AT TIME ZONE 'UTC'") -> pa.Table:
    rows = conn.execute(SELECT.format(at=at, table=table)).fetchall()
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], SCHEMA)


def _except_both_ways(target: pa.Table, source: pa.Table, what: str) -> None:
    import duckdb

    con = duckdb.connect()
    con.register("t", target.select(SCHEMA.names).cast(SCHEMA))
    con.register("s", source)
    got = tuple(
        con.execute(
            f"SELECT count(*) FROM (SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b})"
        ).fetchall()[0][0]
        for a, b in (("t", "s"), ("s", "t"))
    )
    if got != (0, 0):
        sample = [
            con.execute(
                f"SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b} ORDER BY id LIMIT 3"
            ).fetchall()
            for a, b in (("t", "s"), ("s", "t"))
        ]
        pytest.fail(
            f"{what}: {got[0]} rows not in the source, {got[1]} missing; e.g. "
            f"{sample[0]} instead of {sample[1]}"
        )
    assert target.num_rows == source.num_rows


def _kill_at(folder: Path, point: str, stop: threading.Event) -> threading.Thread:
    """SIGKILL the process that reaches fail point ``point`` (it waits there)."""

    def watch() -> None:
        marker = folder / point
        while not stop.is_set():
            if marker.exists() and marker.read_text().strip():
                pid = int(marker.read_text())
                if pid != os.getpid():  # the ingest job's process, never the test's
                    os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_changes_under_airflow_land_exactly_in_delta_and_postgres(
    pg_logical: Any, connectors_env: dict[str, str], tmp_path: Path
) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from deltalake import DeltaTable

    suffix = uuid.uuid4().hex[:8]
    db, target_db = f"shop_{suffix}", f"wh_{suffix}"
    pg_logical.create_database(db)
    pg_logical.create_database(target_db)
    table = "orders"
    with pg_logical.connect(db) as conn:
        conn.execute(
            f"CREATE TABLE {table} (id bigint PRIMARY KEY, customer text, qty int, "
            "price numeric(10, 2), at timestamptz, ok boolean, note text)"
        )
        conn.execute(f"ALTER TABLE {table} ALTER COLUMN note SET STORAGE EXTERNAL")
        conn.execute(
            f"INSERT INTO {table} SELECT g, 'c' || g, g % 50, g / 4.0, "
            "timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', g % 3 = 0, "
            f"CASE WHEN g > {ROWS - 100} THEN repeat('n', 3000) END "
            f"FROM generate_series(1, {ROWS}) g"
        )
        conn.execute(f"CREATE PUBLICATION orders_pub FOR TABLE {table}")

    pipeline = f"cdc_{suffix}"
    source = {"uri": pg_logical.url(db), "publication": "orders_pub", "source_table": table}

    def connector() -> dict[str, Any]:
        return {"name": "cdc", "transport": {"name": "postgres_cdc_input", "config": source}}

    spec = {
        "pipeline": pipeline,
        "tables": {
            "lake": {
                "columns": COLUMNS,
                "primary_key": ["id"],
                "sink": {"name": "delta"},
                "connectors": [connector()],
            },
            "mirror": {
                "columns": COLUMNS,
                "primary_key": ["id"],
                "sink": {
                    "name": "postgres",
                    "config": {"uri": pg_logical.url(target_db), "table": "orders"},
                },
                "connectors": [connector()],
            },
        },
    }
    (DAGS / f"{pipeline}.yaml").write_text(yaml.safe_dump(spec))
    bag = DagBag(dag_folder=str(dag_file(DAGS, f"{pipeline}.yaml")))
    assert bag.import_errors == {}, bag.import_errors
    lake, mirror = bag.dags[f"{pipeline}.lake.cdc"], bag.dags[f"{pipeline}.mirror.cdc"]

    def ran(dag: Any) -> dict[tuple[str, int], str]:
        return task_states(dag.test())

    def succeeded(states: dict[tuple[str, int], str]) -> bool:
        """Every task of the run succeeded (``finished`` may skip: a CDC connector
        never ends): not failed, and not left waiting for a retry either."""
        return all(
            st == "success" or (t == "finished" and st == "skipped")
            for (t, _), st in states.items()
        ) and any(t == "ingest" and i >= 0 for t, i in states)

    def run_ok(dag: Any) -> None:
        """A run that ingests; a transient failure (a busy machine) is run again, as
        Airflow's retries and the next scheduled run would, at most twice."""
        seen = []
        for _ in range(3):
            states = ran(dag)
            if succeeded(states):
                return
            seen.append(states)
        pytest.fail(f"{dag.dag_id}: no run succeeded: {seen}")

    writer = Workload(lambda: pg_logical.connect(db), table)
    writer.start()
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    try:
        # Both connectors start while the workload runs: a snapshot, then the changes.
        for dag in (mirror, lake):
            run_ok(dag)
        assert writer.error is None, writer.error
        # The lake's next run is killed after the Delta commit, before the engine's.
        os.environ["AIRFLOW_CONNECTORS_FAILPOINT_DIR"] = str(failpoints)
        os.environ["AIRFLOW_CONNECTORS_FAILPOINTS"] = "delta_committed"
        stop = threading.Event()
        killer = _kill_at(failpoints, "delta_committed", stop)
        try:
            killed = ran(lake)
        finally:
            stop.set()
            os.environ.pop("AIRFLOW_CONNECTORS_FAILPOINT_DIR")
            os.environ.pop("AIRFLOW_CONNECTORS_FAILPOINTS")
        killer.join(5)
        assert (failpoints / "delta_committed").exists(), killed
        assert "failed" in str(killed), killed
        writer.join(600)
        assert not writer.is_alive() and writer.error is None, writer.error
        assert writer.done >= CHANGES
        for dag in (lake, mirror):  # the killed batch again, and the rest
            run_ok(dag)
    finally:
        writer.join(60)

    with pg_logical.connect(db) as conn:
        want = _rows(conn, table)
        slots = dict(
            conn.execute(
                "SELECT slot_name, confirmed_flush_lsn::text FROM pg_replication_slots "
                "WHERE database = %s",
                (db,),
            ).fetchall()
        )
    assert want.num_rows > ROWS
    lake_path = Path(connectors_env["AIRFLOW__CONNECTORS__WAREHOUSE"]) / pipeline / "lake"
    _except_both_ways(DeltaTable(str(lake_path)).to_pyarrow_table(), want, "delta")
    with pg_logical.connect(target_db) as conn:
        _except_both_ways(_rows(conn, "orders", "at"), want, "postgres")
    # One slot per connector, acknowledged up to what its table holds.
    assert len(slots) == 2, slots
    store = StateStore(connectors_env["AIRFLOW__CONNECTORS__STATE_STORE_URL"])
    try:
        for name in ("lake", "mirror"):
            [row] = [
                o
                for o in store.offsets(ConnectorRef(pipeline, name, "cdc"))
                if o["key"].endswith("@wal")
            ]
            assert row["offset"] in {lsn_int(v) for v in slots.values()}, (row, slots)
    finally:
        store.close()
    try:
        with pg_logical.connect() as conn:
            for slot in slots:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    except Exception:  # a slot still held: the session's teardown drops the cluster
        pass
