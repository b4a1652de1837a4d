"""A schema version change (``schema_evolution: add_new_columns``) in every table-format
sink: Delta (the columns merged in the batch's one commit), Iceberg (``union_by_name``
in the append's transaction) and PostgreSQL (``ALTER TABLE ... ADD COLUMN`` in the
transaction that moves the batch in). JSON files whose fields appear, disappear and
change type across three batches, on real Spark; the exact rows and columns a reader of
the table sees. (The Parquet sink: ``tests/engine/test_schema_evolution.py``.)"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_postgresql.dbapi as pg
import pytest
from helpers import pipeline, run, status

from airflow_connectors.catalog import sink_of
from airflow_connectors.state.store import StateStore

SERVER = "postgresql://postgres@127.0.0.1:5432/test"

BATCHES: list[list[dict[str, Any]]] = [
    [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
    [{"id": 3, "name": "c", "x": 5}, {"id": 4, "name": "d", "x": 6, "y": "t"}],
    [{"id": 5, "name": "e"}, {"id": 6, "name": "f", "x": "seven"}],
]
EXPECTED = [
    {"id": 1, "name": "a", "x": None, "y": None},
    {"id": 2, "name": "b", "x": None, "y": None},
    {"id": 3, "name": "c", "x": 5, "y": None},
    {"id": 4, "name": "d", "x": 6, "y": "t"},
    {"id": 5, "name": "e", "x": None, "y": None},
]


def sql(query: str) -> list[tuple[Any, ...]]:
    with pg.connect(SERVER) as conn, conn.cursor() as cur:
        cur.execute(query)
        rows = cur.fetchall() if cur.description else []
        conn.commit()
    return rows


@pytest.fixture
def pg_schema() -> Iterator[str]:
    name = f"ac_evo_{uuid.uuid4().hex[:10]}"
    sql(f"CREATE SCHEMA {name}")
    yield name
    sql(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def sink_spec(kind: str, pg_schema: str) -> dict[str, Any]:
    if kind == "postgres":
        return {"name": "postgres", "config": {"uri": SERVER, "schema": pg_schema}}
    return {"name": kind, "config": {}}


@pytest.mark.parametrize("kind", ["delta", "iceberg", "postgres"])
def test_add_new_columns_changes_the_table_schema_with_the_batch(
    spark: Any, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    schema = request.getfixturevalue("pg_schema") if kind == "postgres" else ""
    url, wh, src = f"sqlite:///{tmp_path / 's.db'}", str(tmp_path / "wh"), tmp_path / "src"
    src.mkdir()
    spec = pipeline(
        {
            "t": {
                "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR"},
                "schema_evolution": "add_new_columns",
                "sink": sink_spec(kind, schema),
                "connectors": [
                    {
                        "name": "files",
                        "errors": {"tolerance": "all"},
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(src), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        }
    )
    sink = sink_of(spec.tables[0], pipeline="p", warehouse=wh)
    sink.state_store_url = url
    seen: list[list[str]] = []
    for n, records in enumerate(BATCHES):
        (src / f"b{n}.json").write_text("".join(json.dumps(r) + "\n" for r in records))
        run(spec, url, wh, spark)
        data = sink.read()
        assert data is not None
        seen.append(data.column_names)
    # The table took x and y with the batch that brought them, not before.
    assert seen == [["id", "name"], ["id", "name", "x", "y"], ["id", "name", "x", "y"]]
    data = sink.read()
    assert data is not None
    assert sorted(data.to_pylist(), key=lambda r: r["id"]) == EXPECTED
    st = status(url, "p", "t", "files")
    assert (st.total_records, st.num_parse_errors) == (5, 1)  # "seven" is no BIGINT
    store = StateStore(url)
    try:
        assert [v.column_names for v in store.schema_versions("p", "t")] == [
            ["id", "name"],
            ["id", "name", "x", "y"],
        ]
    finally:
        store.close()
    if kind == "postgres":
        assert sql(
            "SELECT column_name, data_type FROM information_schema.columns WHERE "
            f"table_schema = '{schema}' AND table_name = 't' ORDER BY ordinal_position"
        ) == [("id", "bigint"), ("name", "text"), ("x", "bigint"), ("y", "text")]
        assert sql(f"SELECT count(*) FROM {schema}._ac_sink_batches")[0][0] == 3
        leftover = sql(
            f"SELECT count(*) FROM pg_tables WHERE schemaname = '{schema}' "
            "AND tablename LIKE '_ac_stage_%'"
        )
        assert leftover[0][0] == 0
    if kind == "delta":
        from deltalake import DeltaTable

        dt = DeltaTable(sink.location())
        # One commit per batch (the table's creation with the first), none for a schema
        # change alone; no file outside the log is left of a merged batch.
        assert len(dt.history()) == 3
        listed = {str(p) for p in dt.get_add_actions().column("path").to_pylist()}
        on_disk = {
            str(p.relative_to(sink.location())) for p in Path(sink.location()).rglob("*.parquet")
        }
        assert on_disk == listed


@pytest.mark.parametrize("kind", ["delta", "postgres"])
def test_publish_after_a_kill_past_the_commit_adds_the_columns_once(
    spark: Any, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """The job is killed after the state store committed a batch that added columns and
    before its publish: the batch's rerun (a no-op) rolls the publish forward with the
    columns it added, once."""
    from airflow_connectors.engine.batch import run_batch
    from airflow_connectors.engine.discovery import context, discover
    from airflow_connectors.testing.jobs import kill, start_job, wait_for

    schema = request.getfixturevalue("pg_schema") if kind == "postgres" else ""
    url, wh, src = f"sqlite:///{tmp_path / 's.db'}", str(tmp_path / "wh"), tmp_path / "src"
    src.mkdir()
    spec = pipeline(
        {
            "t": {
                "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR"},
                "schema_evolution": "add_new_columns",
                "sink": sink_spec(kind, schema),
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(src), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        }
    )
    (src / "b0.json").write_text("".join(json.dumps(r) + "\n" for r in BATCHES[0]))
    run(spec, url, wh, spark)
    (src / "b1.json").write_text("".join(json.dumps(r) + "\n" for r in BATCHES[1]))
    t = spec.tables[0]
    ctx = context(spec, t, t.connectors[0], wh)
    store = StateStore(url)
    try:
        (batch_id,) = discover(store, ctx).batch_ids
    finally:
        store.close()
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = start_job([batch_id], url, marks, "after_commit", spark_master="local[1]")
    try:
        wait_for(marks / "after_commit", proc)
    finally:
        kill(proc)
    sink = sink_of(t, pipeline="p", warehouse=wh)
    sink.state_store_url = url
    before = sink.read()
    assert before is not None and before.column_names == ["id", "name"]  # not published
    store = StateStore(url)
    try:
        assert [v.column_names for v in store.schema_versions("p", "t")][-1] == [
            "id",
            "name",
            "x",
            "y",
        ]
        assert not run_batch(store, batch_id, lambda: spark).committed  # rolls forward
        assert store.unpublished_batches(ctx.ref) == []
        assert not run_batch(store, batch_id, lambda: spark).committed  # nothing more
    finally:
        store.close()
    data = sink.read()
    assert data is not None and data.column_names == ["id", "name", "x", "y"]
    assert sorted(data.to_pylist(), key=lambda r: r["id"]) == EXPECTED[:4]
