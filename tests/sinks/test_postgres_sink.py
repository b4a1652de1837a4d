"""The ``postgres`` sink against the PostgreSQL server on 127.0.0.1:5432: JSON files and
datagen -> the real engine on local Spark -> a PostgreSQL table, with the state store in
SQLite (elsewhere than the table). The sink conformance kit (crashes at every fail
point, concurrent publishers, a polling reader, an added column) checks every batch is
recorded once in ``_ac_sink_batches`` and no staging table is left. Connection failures
are one line without the password. Each test works in a schema of its own, dropped at
the end."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import adbc_driver_postgresql.dbapi as pg
import pyarrow as pa
import pytest
from helpers import checksum, pipeline, run, status

from airflow_connectors.catalog import sink_of
from airflow_connectors.engine.batch import publish_committed
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.sinks.base import SinkUnwritable
from airflow_connectors.sinks.postgres import PostgresSink, PostgresSinkConfig
from airflow_connectors.spec.redact import mask_config, secret_fields
from airflow_connectors.state.store import StateStore
from airflow_connectors.testing.changes_kit import ChangesConformance
from airflow_connectors.testing.sink_kit import SinkCase, SinkConformance

pytestmark = [pytest.mark.postgres, pytest.mark.sources]

SERVER = "postgresql://postgres@127.0.0.1:5432/test"
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE", "small": "SMALLINT"}


def sql(query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one statement on the test database (own connection, committed)."""
    with pg.connect(SERVER) as conn, conn.cursor() as cur:
        cur.execute(query, params or None)
        rows = cur.fetchall() if cur.description else []
        conn.commit()
    return rows


@pytest.fixture(scope="module")
def new_schema() -> Iterator[Callable[[], str]]:
    """A factory of fresh schemas ``ac_pgsink_<random>``, all dropped at the end."""
    made: list[str] = []

    def make() -> str:
        name = f"ac_pgsink_{uuid.uuid4().hex[:10]}"
        sql(f"CREATE SCHEMA {name}")
        made.append(name)
        return name

    yield make
    for name in made:
        sql(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def write_source(folder: Path, files: int, rows: int, *, base: int = 0) -> pa.Table:
    """``files`` JSON-lines files of ``rows`` rows each; ids from ``base`` upwards."""
    folder.mkdir(parents=True, exist_ok=True)
    ids, names, amounts = [], [], []
    for f in range(files):
        lines = []
        for i in range(base + f * rows, base + (f + 1) * rows):
            ids.append(i)
            names.append(f"name-{i}-{'x' * (i % 11)}")
            amounts.append(i / 4)
            lines.append(
                json.dumps({"id": i, "name": names[-1], "amount": amounts[-1], "small": i % 300})
            )
        (folder / f"part-{base + f:06d}.json").write_text("\n".join(lines) + "\n")
    return pa.table({"id": pa.array(ids, pa.int64()), "name": names, "amount": amounts})


def sink_config(schema: str, **more: Any) -> dict[str, Any]:
    # A password in the URI (trust auth ignores it): it must never show up anywhere.
    return {"uri": "postgresql://postgres:pw-s3cr3t@127.0.0.1:5432/test", "schema": schema, **more}


def table_spec(source: Path, schema: str, **conn: Any) -> dict[str, Any]:
    return {
        "columns": COLUMNS,
        "sink": {"name": "postgres", "config": sink_config(schema)},
        "connectors": [
            {
                "name": "files",
                "transport": {
                    "name": "file_input",
                    "config": {"path": str(source), "min_file_age": 0},
                },
                "format": {"name": "json", "config": {"update_format": "raw"}},
                **conn,
            }
        ],
    }


def sink_for(spec: Any, warehouse: str = "/nonexistent") -> PostgresSink:
    sink = sink_of(spec.tables[0], pipeline=spec.name, warehouse=warehouse)
    assert isinstance(sink, PostgresSink)
    sink.connector = spec.tables[0].connectors[0].name if spec.tables[0].connectors else "c"
    return sink


def assert_same(data: pa.Table | None, source: pa.Table) -> None:
    assert data is not None
    data = data.select(["id", "name", "amount"])
    assert data.num_rows == source.num_rows
    assert len(set(data.column("id").to_pylist())) == source.num_rows  # no duplicates
    assert checksum(data, "id") == checksum(source, "id")


def tables(schema: str) -> list[str]:
    rows = sql("SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1", schema)
    return [r[0] for r in rows]


def recorded(schema: str) -> list[tuple[Any, ...]]:
    """``_ac_sink_batches`` as (connector, batch id, rows, error rows), oldest first."""
    return sql(
        f"SELECT connector, batch_id, rows, error_rows FROM {schema}._ac_sink_batches "
        "ORDER BY batch_id, committed_at"
    )


# --- through the engine -----------------------------------------------------------------


def test_engine_runs_land_rows_and_dead_letters_once(
    spark: Any, new_schema: Callable[[], str], tmp_path: Path
) -> None:
    """Two runs (two batches) from JSON files with a bad line (tolerance: all), the state
    store in SQLite: the table holds every good row once with PostgreSQL types, the bad
    line is in ``events__errors``, each batch is recorded with its counts, no staging
    table is left, and publishing batch 1 again adds nothing."""
    schema = new_schema()
    src = tmp_path / "src"
    first = write_source(src, 3, 400)
    (src / "part-000003-bad.json").write_text(
        '{"id": 100000, "name": "ok", "amount": 1}\nnot json\n'
    )
    spec = pipeline({"events": table_spec(src, schema, errors={"tolerance": "all"})})
    store_url = f"sqlite:///{tmp_path / 'state.db'}"
    wh = str(tmp_path / "wh")
    report = run(spec, store_url, wh, spark)
    assert report.connectors["events.files"].records == 1201
    second = write_source(src, 2, 300, base=50_000)
    run(spec, store_url, wh, spark)

    sink = sink_for(spec)
    extra = pa.table({"id": pa.array([100000], pa.int64()), "name": ["ok"], "amount": [1.0]})
    assert_same(sink.read(), pa.concat_tables([first, second, extra]))
    types = dict(
        sql(
            "SELECT column_name, data_type || CASE WHEN is_nullable = 'NO' THEN ' not null' "
            "ELSE '' END FROM information_schema.columns WHERE table_schema = $1 "
            "AND table_name = 'events'",
            schema,
        )
    )
    assert types == {
        "id": "bigint not null",
        "name": "text",
        "amount": "double precision",
        "small": "smallint",
    }
    errors = sink.read("errors")
    assert errors is not None and errors.column("raw_text").to_pylist() == ["not json"]
    assert recorded(schema) == [("files", 1, 1201, 1), ("files", 2, 600, 0)]
    assert tables(schema) == ["_ac_sink_batches", "events", "events__errors"]
    assert sink.location() == f"{schema}.events in postgresql://127.0.0.1:5432/test"

    store = StateStore(store_url)
    try:
        batch = store.load_batch(1)
        assert batch.published and batch.attempt is not None
        publish_committed(store, BatchContext.from_plan(batch.plan), 1, batch.attempt)
    finally:
        store.close()
    assert sql(f"SELECT count(*) FROM {schema}.events") == [(1801,)]
    assert len(recorded(schema)) == 2


def test_every_column_type_round_trips(
    spark: Any, new_schema: Callable[[], str], tmp_path: Path
) -> None:
    """datagen rows of every supported column type into a table the sink creates: read
    back in the table's Arrow types, equal to what the Parquet sink stores."""
    schema = new_schema()
    cols = {
        "id": "BIGINT NOT NULL",
        "b": "BOOLEAN",
        "t": "TINYINT",
        "s": "SMALLINT",
        "i": "INT",
        "r": "REAL",
        "d": "DOUBLE",
        "n": "DECIMAL(12, 3)",
        "v": "VARCHAR",
        "dt": "DATE",
        "tm": "TIME",
        "ts": "TIMESTAMP",
    }
    gen = {"name": "datagen", "config": {"seed": 7, "plan": [{"limit": 3000}]}}

    def spec(sink: dict[str, Any]) -> Any:
        return pipeline(
            {
                "events": {
                    "columns": cols,
                    "sink": sink,
                    "connectors": [{"name": "gen", "transport": gen}],
                }
            }
        )

    pg_spec = spec({"name": "postgres", "config": sink_config(schema)})
    store = f"sqlite:///{tmp_path / 'state.db'}"
    run(pg_spec, store, str(tmp_path / "wh"), spark)
    parquet = spec({"name": "parquet", "config": {}})
    run(parquet, f"sqlite:///{tmp_path / 'state2.db'}", str(tmp_path / "wh2"), spark)

    got = sink_for(pg_spec).read()
    want = sink_for_any(parquet, str(tmp_path / "wh2")).read()
    assert got is not None and want is not None
    declared = pg_spec.tables[0].arrow_schema()
    assert [(f.name, f.type) for f in got.schema] == [(f.name, f.type) for f in declared]
    assert got.sort_by("id").to_pylist() == want.sort_by("id").to_pylist()


def sink_for_any(spec: Any, warehouse: str) -> Any:
    return sink_of(spec.tables[0], pipeline=spec.name, warehouse=warehouse)


# --- publish: a retried part ---------------------------------------


def staged_batch(schema: str, source: pa.Table, parts: int = 2) -> tuple[PostgresSink, str]:
    """A batch attempt prepared and written (``parts`` parts) but not published."""
    spec = pipeline({"events": table_spec(Path("/nonexistent"), schema)})
    sink = sink_for(spec)
    attempt = f"1-{uuid.uuid4().hex[:8]}"
    sink.prepare(1, attempt)
    rows = source.append_column("small", pa.array([1] * source.num_rows, pa.int16()))
    size = -(-rows.num_rows // parts)
    for part in range(parts):
        w = sink.writer(1, attempt, part, "rows")
        chunk = rows.slice(part * size, size)
        w.write(chunk.slice(0, chunk.num_rows // 2))  # a part is written in several calls
        w.write(chunk.slice(chunk.num_rows // 2))
        assert w.close() == chunk.num_rows
    return sink, attempt


def test_retried_part_replaces_its_staged_rows(
    new_schema: Callable[[], str], tmp_path: Path
) -> None:
    """A Spark task run again (its first run's part committed to staging, or cut off
    mid-part) writes the part again: the part's rows are staged once. An aborted part
    (an item skipped) stages nothing."""
    schema = new_schema()
    source = write_source(tmp_path / "src", 1, 1000)
    sink, attempt = staged_batch(schema, source)
    again = source.append_column("small", pa.array([1] * 1000, pa.int16())).slice(0, 500)
    w = sink.writer(1, attempt, 0, "rows")
    w.write(again)
    assert w.close() == 500
    cut = sink.writer(1, attempt, 1, "rows")
    cut.write(again.slice(0, 10))
    cut.abort()
    sink.publish(1, attempt)
    assert_same(sink.read(), source)


def test_discard_drops_staging_never_the_table(
    new_schema: Callable[[], str], tmp_path: Path
) -> None:
    """``discard`` of an attempt (and of every attempt of a batch) drops only staging."""
    schema = new_schema()
    source = write_source(tmp_path / "src", 1, 100)
    sink, _ = staged_batch(schema, source)
    sink.prepare(1, "2-other")
    assert len([t for t in tables(schema) if t.startswith("_ac_stage_")]) == 4
    sink.discard(1, "2-other")
    assert len([t for t in tables(schema) if t.startswith("_ac_stage_")]) == 2
    sink.discard(1)
    assert tables(schema) == ["_ac_sink_batches", "events"]
    assert sink.read() is not None and sink.read().num_rows == 0  # type: ignore[union-attr]


# --- connections, names and secrets -----------------------------------------------------


def test_connection_failures_are_one_line_without_the_password(tmp_path: Path) -> None:
    """An unreachable server and an unknown user: prepare, publish and read fail in one
    line naming the table and the server, never the password; the REST view of the
    config masks the URI."""
    spec = pipeline({"events": table_spec(tmp_path, "public")})
    for uri in (
        "postgresql://postgres:pw-s3cr3t@127.0.0.1:1/test",
        "postgresql://ac_nobody:pw-s3cr3t@127.0.0.1:5432/test",
    ):
        sink = PostgresSink(
            PostgresSinkConfig.model_validate({"uri": uri, "connect_timeout": 5}),
            pipeline="p",
            table=spec.tables[0],
            warehouse="/nonexistent",
        )
        for action in (sink.prepare, sink.publish):
            with pytest.raises(SinkUnwritable) as info:
                action(1, "1-a")
            text = str(info.value)
            assert "pw-s3cr3t" not in text and "\n" not in text, text
            assert text.startswith("table events: cannot connect to PostgreSQL at "), text
            assert "postgresql://127.0.0.1:" in text and "uri or postgres_conn_id" in text
        with pytest.raises(OSError) as read_info:
            sink.read()
        assert "pw-s3cr3t" not in str(read_info.value)
    masked = mask_config(sink_config("x"), secret_fields(PostgresSinkConfig))
    assert masked["uri"] == "***"


def test_engine_run_against_an_unreachable_server_fails_in_one_line(
    spark: Any, tmp_path: Path
) -> None:
    """Through the engine: the run reports the connector failed, in one line naming the
    table and the server, without the password; nothing is committed."""
    src = tmp_path / "src"
    write_source(src, 1, 10)
    spec_doc = table_spec(src, "public")
    spec_doc["sink"]["config"]["uri"] = "postgresql://postgres:pw-s3cr3t@127.0.0.1:1/test"
    store_url = f"sqlite:///{tmp_path / 'state.db'}"
    spec = pipeline({"events": spec_doc})
    report = run(spec, store_url, str(tmp_path / "wh"), spark, raise_on_failure=False)
    error = report.connectors["events.files"].error or ""
    assert "cannot connect to PostgreSQL at postgresql://127.0.0.1:1/test" in error, error
    assert "pw-s3cr3t" not in error and "\n" not in error
    st = status(store_url, "p", "events", "files")
    assert st.total_records == 0
    assert all("pw-s3cr3t" not in json.dumps(e) for e in st.transport_errors)


def test_config_errors() -> None:
    """One of uri and postgres_conn_id; a postgresql:// URI; plain names."""
    cases = [
        ({}, "exactly one of uri and postgres_conn_id"),
        ({"uri": SERVER, "postgres_conn_id": "pg"}, "exactly one of uri and postgres_conn_id"),
        ({"uri": "mysql://u:p@h/db"}, "expected a URI postgresql://"),
        ({"uri": SERVER, "table": "a.b", "schema": "c"}, "name the schema once"),
        ({"uri": SERVER, "table": "drop table x;"}, "is not a PostgreSQL name"),
    ]
    for config, message in cases:
        with pytest.raises(ValueError, match=message):
            PostgresSinkConfig.model_validate(config)


def test_postgres_conn_id_and_qualified_table(
    new_schema: Callable[[], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``postgres_conn_id`` from ``AIRFLOW_CONN_<ID>`` in Airflow's JSON form and URI
    form, a schema-qualified ``table``, ``create_table: false`` on a missing table."""
    schema = new_schema()
    source = write_source(tmp_path / "src", 1, 100)
    rows = source.append_column("small", pa.array([1] * 100, pa.int16()))
    spec = pipeline({"events": table_spec(tmp_path, schema)})
    forms = {
        "AC_PG_JSON": json.dumps(
            {
                "conn_type": "postgres",
                "host": "127.0.0.1",
                "port": 5432,
                "login": "postgres",
                "password": "pw-s3cr3t",
                "schema": "test",
                "extra": {"sslmode": "disable"},
            }
        ),
        "AC_PG_URI": "postgres://postgres:pw-s3cr3t@127.0.0.1:5432/test?sslmode=disable",
    }
    for n, (conn_id, value) in enumerate(forms.items()):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id}", value)
        config = {"postgres_conn_id": conn_id.lower(), "table": f"{schema}.landed"}
        sink = PostgresSink(
            PostgresSinkConfig.model_validate(config),
            pipeline="p",
            table=spec.tables[0],
            warehouse="/nonexistent",
        )
        sink.connector = "c"
        sink.prepare(n + 1, f"{n + 1}-a")
        w = sink.writer(n + 1, f"{n + 1}-a", 0, "rows")
        w.write(rows)
        w.close()
        sink.publish(n + 1, f"{n + 1}-a")
        assert sink.location() == f"{schema}.landed in Airflow connection {conn_id.lower()}"
    assert sql(f"SELECT count(*), count(DISTINCT id) FROM {schema}.landed") == [(200, 100)]

    missing = PostgresSink(
        PostgresSinkConfig.model_validate({"postgres_conn_id": "ac_pg_nowhere"}),
        pipeline="p",
        table=spec.tables[0],
        warehouse="/nonexistent",
    )
    with pytest.raises(SinkUnwritable, match="AIRFLOW_CONN_AC_PG_NOWHERE"):
        missing.prepare(1, "1-a")
    strict = PostgresSink(
        PostgresSinkConfig.model_validate(sink_config(schema, table="absent", create_table=False)),
        pipeline="p",
        table=spec.tables[0],
        warehouse="/nonexistent",
    )
    with pytest.raises(SinkUnwritable, match=rf"{schema}\.absent does not exist"):
        strict.prepare(1, "1-a")


def test_existing_table_with_other_types_and_columns(
    new_schema: Callable[[], str], tmp_path: Path
) -> None:
    """A table the user made: compatible types (varchar(40), integer for BIGINT), more
    columns with defaults, rows land; a column that cannot take the rows fails prepare
    (before Spark), in one line naming it."""
    schema = new_schema()
    sql(
        f"CREATE TABLE {schema}.events (id integer PRIMARY KEY, name varchar(40), "
        "amount numeric, small integer, loaded_at timestamptz DEFAULT now())"
    )
    source = write_source(tmp_path / "src", 1, 300)
    sink, attempt = staged_batch(schema, source)
    sink.publish(1, attempt)
    assert sql(f"SELECT count(*), count(loaded_at) FROM {schema}.events") == [(300, 300)]
    assert_same(sink.read(), source)

    sql(f"ALTER TABLE {schema}.events ALTER COLUMN amount TYPE date USING NULL")
    with pytest.raises(SinkUnwritable) as info:
        sink.prepare(2, "2-a")
    text = str(info.value)
    assert f"{schema}.events at postgresql://127.0.0.1:5432/test cannot take" in text, text
    assert "amount" in text and "\n" not in text, text


# --- the sink conformance kit ----------------------------------------------------------


class TestPostgresSink(SinkConformance):
    """Crashes at every fail point (``postgres_committed``: after the transaction that
    moved the batch in, before the state store records it published), concurrent
    publishers, a polling reader, an added column; each case in a schema of its own:
    every batch recorded once in ``_ac_sink_batches``, no staging table left."""

    sink_name = "postgres"
    sink_fail_points = ("postgres_committed",)
    whole_at = ("postgres_committed",)
    execution = "spark_connect"  # TestParquetSink runs the kit's spark-submit path

    @pytest.fixture(scope="class")
    @classmethod
    def sink_config(cls, new_schema: Callable[[], str]) -> Callable[[str], dict[str, Any]]:
        return lambda case: sink_config(new_schema())

    def check_landed(self, case: SinkCase) -> None:
        sink = case.sink()
        assert isinstance(sink, PostgresSink)
        schema = sink.target()[0]
        assert schema is not None
        batches = sorted(r[1] for r in recorded(schema))
        assert batches == case.committed(), f"{case.name}: recorded {batches}"
        assert [t for t in tables(schema) if t.startswith("_ac_stage_")] == [], case.name


class TestPostgresSinkChanges(ChangesConformance):
    """A keyed table's batch killed at every fail point (``postgres_changes_applied``:
    inside the publish transaction) and published by racing retries: the exact table."""

    sink_name = "postgres"
    changes_fail_points = ("postgres_changes_applied", "postgres_committed")
    execution = "spark_connect"

    @pytest.fixture(scope="class")
    @classmethod
    def sink_config(cls, new_schema: Callable[[], str]) -> Callable[[str], dict[str, Any]]:
        return lambda case: sink_config(new_schema())
