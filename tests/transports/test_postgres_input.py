"""postgres_input against the PostgreSQL server on 127.0.0.1:5432 (database ``test``):
the conformance kit in both modes, a 1M-row parallel snapshot killed mid-batch and
re-run on local Spark, incremental runs, type mapping, and bad configs.

Each module run works in a schema of its own (``ac_pgin_<random>``), dropped at the end.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_connectors.catalog import validate_pipeline
from airflow_connectors.engine.batch import pack
from airflow_connectors.testing import jobs
from airflow_connectors.testing.conformance import (
    Connector,
    Source,
    TransportConformance,
    assert_same_records,
)
from airflow_connectors.transports import Cursor, Limits
from airflow_connectors.transports.postgres_input import PostgresInputError

# In the main lane (no sources marker): it needs only the suite's PostgreSQL, and the
# side lane (cluster, then sources) is the longer one.
pytestmark = [pytest.mark.postgres]

PASSWORD = "s3cr3t-pa55word"
BASE = "postgresql://postgres@127.0.0.1:5432/test"
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DECIMAL(12, 2)"}


def _execute(*statements: str) -> None:
    import psycopg

    with psycopg.connect(BASE, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)


@pytest.fixture(scope="module")
def schema() -> Iterator[str]:
    name = f"ac_pgin_{uuid.uuid4().hex[:10]}"
    _execute(f"CREATE SCHEMA {name}")
    yield name
    _execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def _rows(n: int, first: int = 1) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}", "amount": Decimal(i) / 4} for i in range(first, first + n)]


def _create(schema: str, table: str, n: int) -> str:
    """``schema.table`` with ids 1..n (and a name, an amount); returns the qualified name."""
    qualified = f"{schema}.{table}"
    _execute(
        f"CREATE TABLE {qualified} (id bigint PRIMARY KEY, name text, amount numeric(12, 2),"
        " created_at timestamptz)",
        f"INSERT INTO {qualified} SELECT g, 'n' || g, g / 4.0,"
        f" timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second'"
        f" FROM generate_series(1, {n}) g",
        f"ANALYZE {qualified}",
    )
    return qualified


class TestPostgresSnapshot(TransportConformance):
    """A snapshot of 1,000 rows in 4 ranges of ``id`` (the kit's tasks_max is 4)."""

    @pytest.fixture
    def source(self, schema: str) -> Source:
        table = _create(schema, f"snap_{uuid.uuid4().hex[:8]}", 1000)
        config = {
            "uri": BASE,
            "query": f"SELECT id, name, amount FROM {table}",
            "partition_column": "id",
        }
        return Source(
            transport="postgres_input",
            config=config,
            columns=COLUMNS,
            records=_rows(1000),
            key_column="id",
            invalid_configs={
                "": {"query": "SELECT 1"},  # neither uri nor postgres_conn_id
                "uri": {**config, "uri": "mysql://h/db"},
                "partitions": {**config, "partitions": 0},
                "lag": {**config, "mode": "incremental", "cursor_column": "id", "lag": -1},
            },
        )


class TestPostgresIncremental(TransportConformance):
    """Incremental on ``id``: the first window reads every row, in 4 ranges."""

    @pytest.fixture
    def source(self, schema: str) -> Source:
        table = _create(schema, f"inc_{uuid.uuid4().hex[:8]}", 600)
        config = {
            "uri": BASE,
            "query": f"SELECT id, name, amount FROM {table}",
            "mode": "incremental",
            "cursor_column": "id",
            "partition_column": "id",
        }
        return Source(
            transport="postgres_input",
            config=config,
            columns=COLUMNS,
            records=_rows(600),
            key_column="id",
            invalid_configs={"": {"uri": BASE, "query": "SELECT 1", "mode": "incremental"}},
        )

    def test_crash_between_sink_write_and_commit_reruns_to_the_same_table(
        self, connector: Connector, tmp_path: Path
    ) -> None:
        pytest.skip("the kill is run on the 1M-row snapshot and the incremental test below")


def _connector(
    tmp_path: Path, config: dict[str, Any], *, tasks_max: int = 1, name: str = "c"
) -> Connector:
    source = Source(
        transport="postgres_input",
        config=config,
        columns=COLUMNS,
        records=[],
        key_column="id",
        connector={"tasks_max": tasks_max},
    )
    return Connector(source, tmp_path / name)


def _ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def test_incremental_runs_read_inserted_rows_only(schema: str, tmp_path: Path) -> None:
    table = _create(schema, "events", 100)
    c = _connector(
        tmp_path,
        {
            "uri": BASE,
            "query": f"SELECT id, name, amount FROM {table}",
            "mode": "incremental",
            "cursor_column": "id",
            "initial_value": 11,
        },
    )
    try:
        c.drain()
        assert _ids(c.table()) == list(range(11, 101)), "initial_value is inclusive"
        assert c.finalize(), "no end of input once nothing new is found"
        offsets = c.store.cursor(c.ref).offsets
        assert list(offsets) == ["incremental/0000"]
        assert offsets["incremental/0000"].meta["cursor"]["upto"] == "100"
        # New rows (and an old one changed: its cursor did not move, it is not read).
        _execute(
            f"INSERT INTO {table} SELECT g, 'n' || g, g / 4.0, now()"
            " FROM generate_series(101, 150) g",
            f"UPDATE {table} SET name = 'changed' WHERE id = 5",
        )
        found = c.discover()
        assert len(found.batch_ids) == 1 and not found.end_of_input
        c.run(found.batch_ids)
        assert _ids(c.table()) == list(range(11, 151))
        assert c.status().total_records == 140
        assert not c.discover().batch_ids and c.finalize()
        # State stays one row per range, not one per window.
        assert list(c.store.cursor(c.ref).offsets) == ["incremental/0000"]
    finally:
        c.close()


def test_lag_holds_back_the_newest_values(schema: str, tmp_path: Path) -> None:
    table = _create(schema, "lagged", 100)
    config = {
        "uri": BASE,
        "query": f"SELECT id, name, amount FROM {table}",
        "mode": "incremental",
        "cursor_column": "id",
        "lag": 10,
    }
    c = _connector(tmp_path, config)
    try:
        c.drain()
        assert _ids(c.table()) == list(range(1, 91)), "ids above max - lag were read"
        # A late row below the max (its transaction committed late) is still read.
        _execute(f"DELETE FROM {table} WHERE id = 95")
        _execute(f"INSERT INTO {table} VALUES (95, 'late', 1, now())")
        _execute(
            f"INSERT INTO {table} SELECT g, 'n' || g, 0, now() FROM generate_series(101, 120) g"
        )
        c.drain()
        assert _ids(c.table()) == list(range(1, 111))
    finally:
        c.close()

    # TIMESTAMP cursors: at most the database's clock minus lag (rows from the future and
    # the last hour wait).
    ts_table = f"{schema}.clocked"
    _execute(
        f"CREATE TABLE {ts_table} (id bigint, name text, amount numeric(12, 2), at timestamptz)",
        f"INSERT INTO {ts_table} VALUES (1, 'old', 0, now() - interval '2 hours'),"
        " (2, 'recent', 0, now() - interval '10 minutes'), (3, 'future', 0, now() + interval '1 day')",
    )
    c = _connector(
        tmp_path,
        {
            "uri": BASE,
            "query": f"SELECT * FROM {ts_table}",
            "mode": "incremental",
            "cursor_column": "at",
            "lag": 3600,
        },
        name="clocked",
    )
    try:
        c.drain()
        assert _ids(c.table()) == [1]
    finally:
        c.close()


def test_timestamp_partitions_and_type_mapping(schema: str, tmp_path: Path) -> None:
    table = f"{schema}.typed"
    _execute(
        f"CREATE TABLE {table} (k int, u uuid, doc jsonb, price numeric(8, 3), at timestamptz,"
        " day date, ok boolean, ratio float8)",
        f"INSERT INTO {table} SELECT g, md5(g::text)::uuid, jsonb_build_object('g', g),"
        " g * 1.125, timestamptz '2026-03-01 00:00:00+02' + g * interval '1 hour',"
        " date '2026-03-01' + g, g % 2 = 0, g / 8.0 FROM generate_series(1, 200) g",
        f"INSERT INTO {table} (k) VALUES (1000)",  # a NULL partition value: range 0 reads it
    )
    columns = {
        "k": "INT NOT NULL",
        "u": "VARCHAR",
        "doc": "VARCHAR",
        "price": "DECIMAL(10, 3)",
        "at": "TIMESTAMP",
        "day": "DATE",
        "ok": "BOOLEAN",
        "ratio": "DOUBLE",
    }
    source = Source(
        transport="postgres_input",
        config={"uri": BASE, "query": f"TABLE {table}", "partition_column": "AT"},
        columns=columns,
        records=[],
        key_column="k",
        connector={"tasks_max": 3},
    )
    c = Connector(source, tmp_path / "typed")
    try:
        items = c.list_work(Cursor())
        assert [i.key for i in items] == ["snapshot/0000", "snapshot/0001", "snapshot/0002"]
        c.drain()
        got = c.table().sort_by("k")
        assert got.num_rows == 201 and _ids_of(got, "k") == [*range(1, 201), 1000]
        first = got.slice(0, 1).to_pylist()[0]
        assert first["u"] == str(uuid.UUID(__import__("hashlib").md5(b"1").hexdigest()))
        assert json.loads(first["doc"]) == {"g": 1}
        assert first["price"] == Decimal("1.125")
        # 2026-03-01 01:00 at +02:00 is 2026-02-28 23:00 UTC (TIMESTAMP holds UTC).
        assert str(first["at"]) == "2026-02-28 23:00:00"
        assert str(first["day"]) == "2026-03-02" and first["ok"] is False
        assert first["ratio"] == 0.125
    finally:
        c.close()


def _ids_of(table: pa.Table, column: str) -> list[int]:
    return sorted(table.column(column).to_pylist())


def test_one_million_rows_in_parallel_ranges_with_a_kill_mid_batch(
    schema: str, tmp_path: Path
) -> None:
    """tasks_max 4: four range batches. The ingest job (local Spark) is SIGKILLed after
    writing the first batch, before its commit; the re-run, two ingest jobs side by side
    (as Airflow's mapped ingest tasks run), lands every row once."""
    n = 1_000_000
    table = _create(schema, "big", n)
    c = _connector(
        tmp_path,
        {"uri": BASE, "query": f"SELECT id, name, amount FROM {table}", "partition_column": "id"},
        tasks_max=4,
    )
    try:
        found = c.discover()
        assert len(found.batch_ids) == 4
        marks = tmp_path / "failpoints"
        marks.mkdir()
        proc = jobs.start_job(found.batch_ids, c.store_url, marks, hang_at="after_sink_write")
        jobs.wait_for(marks / "after_sink_write", proc)
        jobs.kill(proc)
        assert c.table().num_rows == 0 and not c.store.cursor(c.ref).offsets
        again = c.discover()
        assert again.batch_ids == found.batch_ids, "the re-run plans nothing new"
        side_by_side = [
            jobs.start_job(again.batch_ids[:2], c.store_url, marks),
            jobs.start_job(again.batch_ids[2:], c.store_url, marks),
        ]
        for proc in side_by_side:
            out, _ = proc.communicate(timeout=600)
            assert proc.returncode == 0, out.decode()[-3000:]
        got = c.table()
        assert got.num_rows == n
        ids = got.column("id")
        assert pc.count_distinct(ids).as_py() == n
        assert pc.min(ids).as_py() == 1 and pc.max(ids).as_py() == n
        assert pc.sum(got.column("amount")).as_py() == Decimal(n * (n + 1) // 2) / 4
        assert c.status().total_records == n
        assert not c.discover().batch_ids and c.finalize(), "a snapshot is read once"
    finally:
        c.close()


def test_incremental_kill_mid_batch_then_new_rows(schema: str, tmp_path: Path) -> None:
    """A window killed after the sink write is re-run with the same bounds, though rows
    were inserted meanwhile; those land in the next window, once."""
    table = _create(schema, "inc_kill", 5000)
    c = _connector(
        tmp_path,
        {
            "uri": BASE,
            "query": f"SELECT id, name, amount FROM {table}",
            "mode": "incremental",
            "cursor_column": "id",
            "partition_column": "id",
        },
        tasks_max=2,
    )
    try:
        found = c.discover()
        marks = tmp_path / "failpoints"
        marks.mkdir()
        proc = jobs.start_job(found.batch_ids, c.store_url, marks, hang_at="after_sink_write")
        jobs.wait_for(marks / "after_sink_write", proc)
        jobs.kill(proc)
        _execute(
            f"INSERT INTO {table} SELECT g, 'n' || g, g / 4.0, now()"
            " FROM generate_series(5001, 6000) g"
        )
        again = c.discover()
        assert again.batch_ids == found.batch_ids
        c.run(again.batch_ids)
        assert _ids(c.table()) == list(range(1, 5001)), "the re-run read its planned range only"
        c.drain()
        expected = pa.Table.from_pylist(_rows(6000), schema=c.ctx.table.arrow_schema())
        assert_same_records(c.table(), expected, "id", "table after the next run")
    finally:
        c.close()


# --- bad configuration ---------------------------------------------------------------


def _errors(config: dict[str, Any]) -> list[str]:
    doc = Source("postgres_input", config, COLUMNS, [], "id").pipeline_doc()
    return [f"{e.path}: {e.message}" for e in validate_pipeline(doc)]


def test_bad_configs_are_rejected_at_validation() -> None:
    base = {"uri": BASE, "query": "SELECT 1"}
    (missing,) = _errors({**base, "mode": "incremental"})
    assert "needs cursor_column" in missing
    (stray,) = _errors({**base, "cursor_column": "id"})
    assert "applies only to mode 'incremental' (this connector reads a snapshot)" in stray
    (scheme,) = _errors({**base, "uri": f"mysql://u:{PASSWORD}@h/db"})
    assert "(got a value starting with 'mysql')" in scheme and PASSWORD not in scheme
    (both,) = _errors({**base, "postgres_conn_id": "pg"})
    assert "exactly one of uri and postgres_conn_id" in both
    assert _errors({**base, "query": " ; "})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _discover_error(tmp_path: Path, config: dict[str, Any]) -> str:
    c = _connector(tmp_path, config, name=uuid.uuid4().hex[:6])
    try:
        with pytest.raises(PostgresInputError) as raised:
            c.list_work(Cursor())
    finally:
        c.close()
    message = str(raised.value)
    assert "\n" not in message and PASSWORD not in message, message
    return message


def test_unreachable_server_bad_query_and_missing_columns_fail_in_one_line(
    schema: str, tmp_path: Path
) -> None:
    port = _free_port()
    down = _discover_error(
        tmp_path,
        {"uri": f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/test", "query": "SELECT 1"},
    )
    assert down.startswith(f"postgres_input (postgresql://127.0.0.1:{port}/test): cannot connect")
    assert "postgres:" not in down and "Connection refused" in down
    role = _discover_error(
        tmp_path,
        {"uri": f"postgresql://nobody:{PASSWORD}@127.0.0.1:5432/test", "query": "SELECT 1"},
    )
    assert 'role "nobody" does not exist' in role
    query = _discover_error(tmp_path, {"uri": BASE, "query": f"SELECT * FROM {schema}.nope"})
    assert "the query cannot be prepared" in query and "does not exist" in query
    table = _create(schema, "few", 3)
    columns = _discover_error(tmp_path, {"uri": BASE, "query": f"SELECT id FROM {table}"})
    assert "has no column 'name', 'amount'" in columns
    cursor = _discover_error(
        tmp_path,
        {"uri": BASE, "query": f"TABLE {table}", "mode": "incremental", "cursor_column": "name"},
    )
    assert "cursor_column 'name' has type text" in cursor


def test_postgres_conn_id_from_the_environment(
    schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _create(schema, "viaconn", 10)
    config = {"postgres_conn_id": "pg_src", "query": f"SELECT id, name, amount FROM {table}"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_PG_SRC",
        json.dumps(
            {
                "conn_type": "postgres",
                "host": "127.0.0.1",
                "port": 5432,
                "login": "postgres",
                "schema": "test",
            }
        ),
    )
    c = _connector(tmp_path, config, name="json")
    try:
        c.drain()
        assert _ids(c.table()) == list(range(1, 11))
    finally:
        c.close()
    monkeypatch.setenv("AIRFLOW_CONN_PG_SRC", "postgres://postgres@127.0.0.1:5432/test")
    c = _connector(tmp_path, config, name="uri")
    try:
        assert len(c.list_work(Cursor())) == 1
    finally:
        c.close()
    monkeypatch.delenv("AIRFLOW_CONN_PG_SRC")
    missing = _discover_error(tmp_path, config)
    assert "postgres_conn_id 'pg_src' names no connection" in missing


def test_limits_tasks_max_sets_the_ranges(schema: str, tmp_path: Path) -> None:
    table = _create(schema, "ranges", 10)
    c = _connector(
        tmp_path,
        {"uri": BASE, "query": f"TABLE {table}", "partition_column": "id", "partitions": 20},
    )
    try:
        items = list(c.transport().discover(Cursor(), Limits(tasks_max=2)))
        # 20 ranges asked of 10 values: equal cut points merge.
        assert 2 < len(items) <= 10
        assert sum(c.read([i]).num_rows for i in items) == 10
        # The ranges of one batch go to separate Spark tasks (spread over 2 cores), not
        # all into one task as items of unknown size would.
        tasks = pack(items[:2], 128 << 20, 4 << 20, parallelism=2)
        assert tasks == [[0], [1]]
    finally:
        c.close()
