"""The ``postgres`` sink and the NUL character (issue 22, item 13), against the
PostgreSQL server on 127.0.0.1:5432: JSON files -> the engine's worker code (in this
process, no JVM) -> a PostgreSQL table.

A JSON string may hold ``\\u0000``; PostgreSQL text cannot. Such a row used to fail the
whole part at ``COPY`` ("invalid byte sequence for encoding UTF8: 0x00") naming neither
column nor row, and a dead letter whose raw text held a NUL failed the batch too. Now the
sink finds these rows before writing (:meth:`PostgresSink.unstorable`, whole-column
pyarrow compute): the batch fails in one line naming the column and the row, and a dead
letter's NUL is stored as the text ``\\u0000``. Each test works in a schema of its own.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_postgresql.dbapi as pg
import pyarrow as pa
import pytest

from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.engine import discovery
from airflow_connectors.engine.batch import BatchFailed, run_batch
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.sinks.postgres import PostgresSink
from airflow_connectors.state.store import StateStore
from airflow_connectors.testing.conformance import _InProcessTasks

pytestmark = [pytest.mark.postgres, pytest.mark.sources]

SERVER = "postgresql://postgres@127.0.0.1:5432/test"
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "note": "VARCHAR"}


def sql(query: str) -> list[tuple[Any, ...]]:
    with pg.connect(SERVER) as conn, conn.cursor() as cur:
        cur.execute(query)
        rows = cur.fetchall() if cur.description else []
        conn.commit()
    return rows


@pytest.fixture
def schema() -> Iterator[str]:
    name = f"ac_pgnul_{uuid.uuid4().hex[:10]}"
    sql(f"CREATE SCHEMA {name}")
    yield name
    sql(f"DROP SCHEMA IF EXISTS {name} CASCADE")


class Run:
    """One connector (JSON files -> the ``postgres`` sink) with its own state store."""

    def __init__(self, tmp_path: Path, schema: str, data: bytes, tolerance: str) -> None:
        src = tmp_path / "src"
        src.mkdir()
        (src / "part-0.json").write_bytes(data)
        self.spec = parse_pipeline(
            {
                "pipeline": "p",
                "tables": {
                    "t": {
                        "columns": COLUMNS,
                        "sink": {"name": "postgres", "config": {"uri": SERVER, "schema": schema}},
                        "connectors": [
                            {
                                "name": "files",
                                "errors": {"tolerance": tolerance},
                                "transport": {
                                    "name": "file_input",
                                    "config": {"path": str(src), "min_file_age": 0},
                                },
                                "format": {"name": "json", "config": {"update_format": "raw"}},
                            }
                        ],
                    }
                },
            }
        )
        table = self.spec.tables[0]
        self.ctx: BatchContext = discovery.context(
            self.spec, table, table.connectors[0], str(tmp_path / "wh")
        )
        self.store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
        self.schema = schema

    def drain(self) -> None:
        try:
            for batch_id in discovery.discover(self.store, self.ctx).batch_ids:
                run_batch(self.store, batch_id, _InProcessTasks)
        finally:
            self.store.close()

    def rows(self, table: str = "t") -> list[tuple[Any, ...]]:
        exists = sql(f"SELECT to_regclass('{self.schema}.{table}') IS NOT NULL")[0][0]
        return sql(f"SELECT * FROM {self.schema}.{table} ORDER BY 1, 2") if exists else []


LINES = (
    b'{"id": 1, "name": "ok", "note": null}\n'
    b'{"id": 2, "name": "a\\u0000b", "note": "x"}\n'
    b'{"id": 3, "name": "fine", "note": "y"}\n'
)


def test_a_nul_in_text_fails_the_batch_naming_the_column_and_the_record(
    tmp_path: Path, schema: str
) -> None:
    run = Run(tmp_path, schema, LINES, "none")
    with pytest.raises(BatchFailed) as failed:
        run.drain()
    message = str(failed.value)
    assert "\n" not in message
    key = str(tmp_path / "src" / "part-0.json")
    assert message.startswith(
        f"connector p.t.files: record 2 of {key}: column 'name' holds a NUL character "
        "(\\u0000), which PostgreSQL text cannot store; raw text: "
    ), message
    assert "set errors.tolerance: all to send bad records to t__errors" in message
    assert "invalid byte sequence" not in message
    assert run.rows() == []


def test_a_nul_in_text_is_that_records_dead_letter_under_tolerance_all(
    tmp_path: Path, schema: str
) -> None:
    run = Run(tmp_path, schema, LINES, "all")
    run.drain()
    assert run.rows() == [(1, "ok", None), (3, "fine", "y")]
    [dead] = run.rows("t__errors")
    connector, key, record, line, raw, error, batch = dead
    assert (connector, record, line, batch) == ("files", 2, None, 1)
    assert key.endswith("part-0.json")
    assert error == (
        "column 'name' holds a NUL character (\\u0000), which PostgreSQL text cannot store"
    )
    assert json.loads(raw) == {"id": 2, "name": "a\x00b", "note": "x"}


def test_a_dead_letter_holding_a_nul_is_stored_with_it_escaped(tmp_path: Path, schema: str) -> None:
    # A raw NUL byte inside a JSON string is invalid JSON: a dead letter whose raw text
    # holds the NUL. It used to fail the batch at the errors table's COPY.
    data = LINES.replace(b"\\u0000", b"\x00")
    run = Run(tmp_path, schema, data, "all")
    run.drain()
    assert run.rows() == [(1, "ok", None), (3, "fine", "y")]
    [dead] = run.rows("t__errors")
    connector, key, record, line, raw, error, batch = dead
    assert (connector, record, line, batch) == ("files", 2, 2, 1)
    assert key.endswith("part-0.json")
    assert raw == '{"id": 2, "name": "a\\u0000b", "note": "x"}'
    assert error.startswith("invalid JSON")


def test_unstorable_finds_exactly_the_rows_holding_a_nul() -> None:
    spec = parse_pipeline(
        {
            "pipeline": "p",
            "tables": {
                "t": {
                    "columns": COLUMNS,
                    "sink": {"name": "postgres", "config": {"uri": SERVER}},
                }
            },
        }
    )
    sink = PostgresSink(
        PostgresSink.Config.model_validate({"uri": SERVER}),
        pipeline="p",
        table=spec.tables[0],
        warehouse="/nonexistent",
    )
    n = 100_000
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "name": pa.chunked_array(
                [
                    pa.array(["a\x00", None, "b"] + [f"n{i}" for i in range(3, 50_000)]),
                    pa.array([f"n{i}" for i in range(50_000, n - 1)] + ["\x00end"]),
                ]
            ),
            "note": pa.array([None] * 2 + ["x\x00y"] + [None] * (n - 3), pa.string()),
        }
    )
    assert sink.unstorable(table) == [
        (0, "column 'name' holds a NUL character (\\u0000), which PostgreSQL text cannot store"),
        (2, "column 'note' holds a NUL character (\\u0000), which PostgreSQL text cannot store"),
        (
            n - 1,
            "column 'name' holds a NUL character (\\u0000), which PostgreSQL text cannot store",
        ),
    ]
    assert sink.unstorable(table.slice(3, n - 4)) == []
