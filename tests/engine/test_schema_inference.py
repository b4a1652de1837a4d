"""Schema inference (engine/schema.py): the first discovery of a table without columns
samples its files, infers the columns, stores them as schema version 1 and plans with
them; later discoveries reuse the stored version. Real files, real state stores, real
Spark for the end-to-end ingest."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import pipeline, read_table, run

from airflow_connectors.engine.discovery import context, discover
from airflow_connectors.engine.schema import (
    Inferred,
    SampleBounds,
    SchemaInferenceError,
    effective_table,
    prepare,
    schema_view,
)
from airflow_connectors.spec.models import RESCUED_DATA
from airflow_connectors.state.store import SchemaColumn, StateStore


def spec_of(
    path: Path,
    fmt: str,
    config: dict[str, Any] | None = None,
    **table: Any,
) -> Any:
    return pipeline(
        {
            "t": {
                **table,
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(path), "min_file_age": 0},
                        },
                        "format": {"name": fmt, "config": config or {}},
                    }
                ],
            }
        }
    )


def ctx_of(spec: Any, warehouse: str = "wh") -> Any:
    table = spec.tables[0]
    return context(spec, table, table.connectors[0], warehouse)


def columns(store: StateStore, table: str = "t") -> list[tuple[str, str, bool]]:
    latest = store.latest_schema("p", table)
    assert latest is not None
    return [(c.name, c.type, c.nullable) for c in latest.columns]


def lines(*records: dict[str, Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_json_inferred_stored_as_version_1_and_planned_with(store_url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text(
        lines(
            {"id": 1, "price": 2, "name": "x", "day": "2024-01-02", "at": "2024-01-02T03:04:05"},
            {"id": 2, "price": 2.5, "name": None, "day": "2024-02-03", "ok": True, "none": None},
        )
    )
    (src / "b.json").write_text(lines({"id": 3, "at": "2024-01-02 10:00:00Z", "late": "z"}))
    store = StateStore(store_url)
    found = discover(store, ctx_of(spec_of(src, "json", {"update_format": "raw"})))
    assert columns(store) == [
        ("id", "BIGINT", True),
        ("price", "DOUBLE", True),  # an integer and a fraction
        ("name", "VARCHAR", True),
        ("day", "DATE", True),
        ("at", "TIMESTAMP", True),  # with and without a zone, T or a space
        ("ok", "BOOLEAN", True),
        ("none", "VARCHAR", True),  # only nulls
        ("late", "VARCHAR", True),
    ]
    [v1] = store.schema_versions("p", "t")
    assert v1.version == 1
    assert v1.origin == (
        f"inferred by connector files from 2 object(s): {src / 'a.json'}, {src / 'b.json'}"
    )
    [batch_id] = found.batch_ids
    plan = store.load_batch(batch_id).plan
    assert plan.schema_version == 1
    assert plan.table.column_names == ["id", "price", "name", "day", "at", "ok", "none", "late"]
    assert str(plan.table.columns[1]) == "price DOUBLE"
    store.close()


def test_second_discovery_reuses_version_1(store_url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text(lines({"id": 1}))
    store = StateStore(store_url)
    spec = spec_of(src, "json", {"update_format": "raw"})
    discover(store, ctx_of(spec))
    # A file with another field and another type: a later discovery does not infer again.
    (src / "b.json").write_text(lines({"id": "text", "new": 1.5}))
    second = discover(store, ctx_of(spec))
    assert second.batch_ids  # the pending batch, and b.json's
    assert [v.version for v in store.schema_versions("p", "t")] == [1]
    assert columns(store) == [("id", "BIGINT", True)]
    assert effective_table(store, "p", spec.tables[0]).column_names == ["id"]
    store.close()


def test_insert_delete_arrays_and_pretty_printed_json(sqlite_url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text('{"insert": {"id": 1,\n  "v": "a"}}\n{"delete": {"id": 1}}\n')
    arr = tmp_path / "arr"
    arr.mkdir()
    (arr / "a.json").write_text('[{"k": 1.5}, {"k": null, "j": false}]')
    store = StateStore(sqlite_url)
    discover(store, ctx_of(spec_of(src, "json")))  # insert_delete is the default
    assert columns(store) == [("id", "BIGINT", True), ("v", "VARCHAR", True)]
    spec = pipeline(
        {
            "u": {
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(arr), "min_file_age": 0},
                        },
                        "format": {
                            "name": "json",
                            "config": {"update_format": "raw", "array": True},
                        },
                    }
                ]
            }
        }
    )
    discover(store, ctx_of(spec))
    assert columns(store, "u") == [("k", "DOUBLE", True), ("j", "BOOLEAN", True)]
    store.close()


def test_csv_with_header(sqlite_url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.csv").write_text(
        "id;amount;flag;day;at;label;empty\n"
        "1;2.5;true;2024-01-02;2024-01-02 03:04:05;x;\n"
        "2;3;False;2024-01-03;2024-01-03 00:00:00;NULL;NULL\n"
    )
    (src / "b.csv").write_text("id;amount;flag;day;at;label;empty\n3;4;TRUE;x;;y;\n")
    store = StateStore(sqlite_url)
    spec = spec_of(src, "csv", {"headers": True, "delimiter": ";"})
    discover(store, ctx_of(spec))
    assert columns(store) == [
        ("id", "BIGINT", True),
        ("amount", "DOUBLE", True),
        ("flag", "BOOLEAN", True),
        ("day", "VARCHAR", True),  # a date in a.csv, text in b.csv: CSV fields are text
        ("at", "TIMESTAMP", True),
        ("label", "VARCHAR", True),
        ("empty", "VARCHAR", True),
    ]
    store.close()


def test_csv_files_with_other_headers_are_an_error(sqlite_url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.csv").write_text("id,name\n1,x\n")
    (src / "b.csv").write_text("name,id\nx,1\n")
    store = StateStore(sqlite_url)
    ctx = ctx_of(spec_of(src, "csv", {"headers": True}))
    with pytest.raises(SchemaInferenceError, match=r"the header of .*b\.csv \(name, id\) differs"):
        discover(store, ctx)
    assert store.latest_schema("p", "t") is None
    st = store.status(ctx.ref)
    assert st is not None and "differs from the first sampled file" in (st.fatal_error or "")
    store.close()


def test_parquet_file_schemas(sqlite_url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    first = pa.table(
        {
            "i32": pa.array([1], pa.int32()),
            "i64": pa.array([2], pa.int64()),
            "f32": pa.array([1.5], pa.float32()),
            "dec": pa.array([decimal.Decimal("1.25")], pa.decimal128(10, 2)),
            "s": pa.array(["x"], pa.string()),
            "d": pa.array([dt.date(2024, 1, 2)], pa.date32()),
            "ts": pa.array([dt.datetime(2024, 1, 2)], pa.timestamp("us", tz="UTC")),
        }
    )
    pq.write_table(first, src / "a.parquet")
    pq.write_table(pa.table({"i64": pa.array([3], pa.int64()), "b": [True]}), src / "b.parquet")
    store = StateStore(sqlite_url)
    discover(store, ctx_of(spec_of(src, "parquet")))
    assert columns(store) == [
        ("i32", "INT", True),
        ("i64", "BIGINT", True),
        ("f32", "REAL", True),
        ("dec", "DECIMAL(10, 2)", True),
        ("s", "VARCHAR", True),
        ("d", "DATE", True),
        ("ts", "TIMESTAMP", True),
        ("b", "BOOLEAN", True),  # only in the second file: the union, in order
    ]
    store.close()


def test_avro_writer_schema(sqlite_url: str, tmp_path: Path) -> None:
    import fastavro

    src = tmp_path / "src"
    src.mkdir()
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"]},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 3},
            },
        ],
    }
    buf = io.BytesIO()
    fastavro.writer(
        buf, schema, [{"id": 1, "name": "x", "day": 19000, "amount": decimal.Decimal("1.5")}]
    )
    (src / "a.avro").write_bytes(buf.getvalue())
    store = StateStore(sqlite_url)
    discover(store, ctx_of(spec_of(src, "avro")))
    assert columns(store) == [
        ("id", "BIGINT", True),
        ("name", "VARCHAR", True),
        ("day", "DATE", True),
        ("amount", "DECIMAL(9, 3)", True),
    ]
    store.close()


def test_schemaless_avro_infers_from_the_configured_schema(sqlite_url: str, tmp_path: Path) -> None:
    """Schemaless records carry no schema: the format's own config (``schema``) types
    the columns, as the format reads the records."""
    import fastavro

    src = tmp_path / "src"
    src.mkdir()
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        ],
    }
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), {"id": 1, "at": 0})
    (src / "a.bin").write_bytes(buf.getvalue())
    store = StateStore(sqlite_url)
    config = {"schema": json.dumps(schema), "skip_schema_id": True}
    discover(store, ctx_of(spec_of(src, "avro", config)))
    assert columns(store) == [("id", "BIGINT", True), ("at", "TIMESTAMP", True)]
    store.close()


def test_hints_override_and_add(sqlite_url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text(lines({"id": 1, "amount": "1.50", "tags": ["a"]}))
    store = StateStore(sqlite_url)
    hints = {"ID": "INT NOT NULL", "amount": "DECIMAL(10,2)", "tags": "VARCHAR", "extra": "DATE"}
    spec = spec_of(src, "json", {"update_format": "raw"}, schema_hints=hints)
    discover(store, ctx_of(spec))
    assert columns(store) == [
        ("id", "INT", False),  # matched ignoring case; the data's spelling is kept
        ("amount", "DECIMAL(10, 2)", True),
        ("tags", "VARCHAR", True),  # nested, but hinted: not inferred
        ("extra", "DATE", True),  # hinted, not in the sample: added at the end
    ]
    store.close()


def test_nested_and_conflicting_fields_name_the_field(sqlite_url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text(lines({"id": 1, "meta": {"k": 1}}))
    store = StateStore(sqlite_url)
    with pytest.raises(
        SchemaInferenceError,
        match=r"table 't' connector 'files': field 'meta' holds a JSON object in .*a\.json, "
        r"which no column type holds; set its type in schema_hints",
    ):
        discover(store, ctx_of(spec_of(src, "json", {"update_format": "raw"})))
    (src / "a.json").write_text(lines({"id": 1}, {"id": "one"}))
    with pytest.raises(SchemaInferenceError, match=r"field 'id' is BIGINT in .* but VARCHAR"):
        discover(store, ctx_of(spec_of(src, "json", {"update_format": "raw"})))
    assert store.latest_schema("p", "t") is None
    store.close()


def test_sampling_is_bounded(sqlite_url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text(lines({"a": 1}))
    (src / "b.json").write_text(lines({"b": 1}))
    # Beyond the bound of 2 files: not read (it would fail inference if it were).
    (src / "c.json").write_text(lines({"a": {"nested": True}}))
    store = StateStore(sqlite_url)
    ctx = ctx_of(spec_of(src, "json", {"update_format": "raw"}))
    assert prepare(store, ctx, SampleBounds(files=2, bytes=1 << 20))
    assert columns(store) == [("a", "BIGINT", True), ("b", "BIGINT", True)]
    [v1] = store.schema_versions("p", "t")
    assert "from 2 object(s)" in v1.origin and "c.json" not in v1.origin
    assert ctx.schema_version == 1 and ctx.table.column_names == ["a", "b"]

    # The byte bound: a.json fills it, b.json is not read.
    other = pipeline(
        {
            "u": {
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(src), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ]
            }
        }
    )
    size = (src / "a.json").stat().st_size
    assert prepare(store, ctx_of(other), SampleBounds(files=50, bytes=size))
    assert columns(store, "u") == [("a", "BIGINT", True)]
    store.close()


def test_nothing_to_sample_plans_nothing(
    sqlite_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    store = StateStore(sqlite_url)
    spec = spec_of(src, "json", {"update_format": "raw"})
    with caplog.at_level(logging.INFO, logger="airflow_connectors.engine.schema"):
        found = discover(store, ctx_of(spec))
    assert found.batch_ids == [] and found.new_items == 0
    assert store.latest_schema("p", "t") is None
    said = [r.getMessage() for r in caplog.records if r.name == "airflow_connectors.engine.schema"]
    assert said == [
        "p.t.files: table t has no columns yet and the connector lists no data to infer "
        "them from; nothing planned"
    ]
    (src / "a.json").write_text(lines({"id": 1}))
    assert len(discover(store, ctx_of(spec)).batch_ids) == 1
    assert columns(store) == [("id", "BIGINT", True)]
    store.close()


def test_rescue_mode_adds_the_rescued_data_column(sqlite_url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text(lines({"id": 1}))
    store = StateStore(sqlite_url)
    spec = spec_of(src, "json", {"update_format": "raw"}, schema_evolution="rescue")
    [b] = discover(store, ctx_of(spec)).batch_ids
    assert store.load_batch(b).plan.table.column_names == ["id", RESCUED_DATA]
    assert columns(store) == [("id", "BIGINT", True)]  # stored without it
    store.add_schema_version(
        "p", "t", [SchemaColumn("id", "BIGINT"), SchemaColumn("x", "INT")], based_on=1, origin="b"
    )
    eff = effective_table(store, "p", spec.tables[0])
    assert eff.column_names == ["id", "x", RESCUED_DATA] and eff.evolution == "rescue"
    store.close()


def test_ingest_of_a_table_without_columns(sqlite_url: str, tmp_path: Path, spark: Any) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text(
        lines({"id": 1, "name": "a", "at": "2024-01-02T03:04:05"}, {"id": 2, "name": None})
    )
    (src / "b.json").write_text(lines({"id": 3, "name": "c", "at": "2024-05-06T00:00:00"}))
    warehouse = str(tmp_path / "wh")
    spec = spec_of(src, "json", {"update_format": "raw"})
    report = run(spec, sqlite_url, warehouse, spark)
    assert report.connectors["t.files"].records == 3
    data = read_table(warehouse, "p", "t").sort_by("id")
    assert data.schema.names == ["id", "name", "at"]
    assert data.schema.field("at").type == pa.timestamp("us")
    assert data.to_pylist() == [
        {"id": 1, "name": "a", "at": dt.datetime(2024, 1, 2, 3, 4, 5)},
        {"id": 2, "name": None, "at": None},
        {"id": 3, "name": "c", "at": dt.datetime(2024, 5, 6)},
    ]


@pytest.mark.slow
def test_cli_shows_columns_and_versions(sqlite_url: str, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    import yaml

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text(lines({"id": 1, "name": "x"}))
    doc = {
        "pipeline": "p",
        "tables": {
            "t": {
                "schema_hints": {"id": "BIGINT NOT NULL"},
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
        },
    }
    spec_file = tmp_path / "p.yaml"
    spec_file.write_text(yaml.safe_dump(doc))
    store = StateStore(sqlite_url)
    discover(store, ctx_of(pipeline(doc["tables"])))
    v1 = store.latest_schema("p", "t")
    assert v1 is not None
    store.add_schema_version(
        "p",
        "t",
        [
            SchemaColumn("id", "BIGINT", False),
            SchemaColumn("name", "INT"),
            SchemaColumn("n", "DATE"),
        ],
        based_on=1,
        origin="batch 3 added n",
    )
    store.close()
    exe = str(Path(sys.executable).parent / "airflow-connectors")
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "home")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [exe, "schema", *args, "--state-store-url", sqlite_url],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    out = cli("p", "t")
    assert out.returncode == 0, out.stderr
    stamp = dt.datetime.fromtimestamp(v1.created_at, dt.UTC).isoformat(timespec="seconds")
    lines_out = out.stdout.splitlines()
    assert lines_out[:5] == [
        "table p.t: schema version 2",
        "  id BIGINT NOT NULL",
        "  name INT",
        "  n DATE",
        "versions:",
    ]
    assert lines_out[5] == (
        f"  1  {stamp.replace('+00:00', 'Z')}  2 column(s)  "
        f"(inferred by connector files from 1 object(s): {src / 'a.json'})"
    )
    assert lines_out[6].startswith("  2  ") and lines_out[6].endswith(
        "  +n ~name VARCHAR->INT  (batch 3 added n)"
    )
    assert len(lines_out) == 7

    with_spec = cli("p", "t", "--spec", str(spec_file))
    assert with_spec.returncode == 0, with_spec.stderr
    assert with_spec.stdout.splitlines()[0] == (
        "table p.t: schema version 2 (inferred; schema_evolution add_new_columns)"
    )
    assert "schema_hints: id BIGINT NOT NULL" in with_spec.stdout.splitlines()

    as_json = json.loads(cli("p", "t", "--json").stdout)
    assert as_json["version"] == 2 and as_json["inferred"] is None
    assert [v["version"] for v in as_json["versions"]] == [1, 2]
    assert as_json["versions"][1]["changed"] == [{"name": "name", "from": "VARCHAR", "to": "INT"}]

    missing = cli("p", "nope")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("table p.nope has no stored schema version in the state store")


def test_spec_rules_of_tables_without_columns() -> None:
    from airflow_connectors.spec import SpecValidationError

    def connector(fmt: dict[str, Any] | None, transport: str = "file_input") -> dict[str, Any]:
        doc: dict[str, Any] = {"name": "c", "transport": {"name": transport, "config": {}}}
        if transport == "file_input":
            doc["transport"]["config"] = {"path": "/tmp/in"}
        if fmt is not None:
            doc["format"] = fmt
        return doc

    def errors(table: dict[str, Any]) -> list[str]:
        with pytest.raises(SpecValidationError) as e:
            pipeline({"t": table})
        return [str(err) for err in e.value.errors]

    ok = pipeline(
        {
            "t": {
                "schema_hints": {"id": "BIGINT NOT NULL"},
                "schema_evolution": "fail_on_new_columns",
                "connectors": [connector({"name": "csv", "config": {"headers": True}})],
            }
        }
    ).tables[0]
    assert ok.infers_schema and ok.columns == ()
    assert ok.schema_hints == {"id": "BIGINT NOT NULL"} and ok.evolution == "fail_on_new_columns"
    assert errors({"connectors": [connector({"name": "csv"})]}) == [
        "tables.t.connectors[0].format.config.headers: the table has no columns, and CSV "
        "without a header has no column names to infer them from; set headers: true or "
        "declare the table's columns"
    ]
    assert errors({"connectors": [connector({"name": "raw"})]}) == [
        "tables.t.connectors[0].format: the table has no columns, and format 'raw' cannot "
        "infer them (inference reads formats avro, csv, json, parquet); declare the table's "
        "columns"
    ]
    assert errors({"connectors": [connector(None, "datagen")]}) == [
        "tables.t.connectors[0].format: the table has no columns, and a connector without a "
        "format cannot infer them (inference reads formats avro, csv, json, parquet); declare "
        "the table's columns"
    ]
    json_connector = connector({"name": "json"})
    bad_hint = errors({"schema_hints": {"id": "BLOB"}, "connectors": [json_connector]})
    assert len(bad_hint) == 1
    assert bad_hint[0].startswith(
        "tables.t.schema_hints.id: schema hint for column 'id': unsupported column type 'BLOB'"
    )
    assert errors(
        {"columns": {"id": "INT"}, "schema_hints": {"id": "BIGINT"}, "connectors": [json_connector]}
    ) == [
        "tables.t.schema_hints: schema_hints pin the types of inferred columns, and this "
        "table declares its columns; set the types in 'columns' or omit 'columns' to infer them"
    ]
    assert errors({"schema_evolution": "merge", "connectors": [json_connector]}) == [
        "tables.t.schema_evolution: schema_evolution must be one of add_new_columns, rescue, "
        "fail_on_new_columns, none, got the string 'merge'"
    ]
    # Declared columns stay required to be a mapping when given, and SQL tables declare them.
    assert errors({"columns": {}, "connectors": [json_connector]})[0].startswith(
        "tables.t.columns: expected a mapping of column name -> SQL type"
    )


@pytest.mark.spark  # the CLI's run starts local Spark
def test_cli_run_of_a_table_without_columns(tmp_path: Path) -> None:
    """``airflow-connectors run`` infers, ingests and prints the table with the inferred
    columns; ``schema`` then shows version 1."""
    import os
    import subprocess
    import sys

    import yaml

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text(lines({"id": 2, "name": "b"}, {"id": 1, "name": "a"}))
    spec_file = tmp_path / "p.yaml"
    spec_file.write_text(
        yaml.safe_dump(
            {
                "pipeline": "p",
                "tables": {
                    "t": {
                        "connectors": [
                            {
                                "name": "files",
                                "transport": {
                                    "name": "file_input",
                                    "config": {"path": str(src), "min_file_age": 0},
                                },
                                "format": {"name": "json", "config": {"update_format": "raw"}},
                            }
                        ]
                    }
                },
            }
        )
    )
    exe = str(Path(sys.executable).parent / "airflow-connectors")
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "home"), "PYSPARK_PYTHON": sys.executable}
    env.pop("AIRFLOW__CONNECTORS__STATE_STORE_URL", None)
    env.pop("AIRFLOW__CONNECTORS__WAREHOUSE", None)
    env["AIRFLOW__CONNECTORS__SPARK_MASTER"] = "local[1]"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [exe, *args], env=env, capture_output=True, text=True, timeout=300, check=False
        )

    out = cli("run", str(spec_file), "--show", "2")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "t.files: finished, +2 records" in out.stdout
    assert "table t: 2 rows at" in out.stdout
    shown = [line.strip() for line in out.stdout.splitlines() if line.startswith("  {")]
    assert sorted(shown) == ["{'id': 1, 'name': 'a'}", "{'id': 2, 'name': 'b'}"]
    schema = cli("schema", "p", "t")
    assert schema.returncode == 0, schema.stderr
    assert schema.stdout.splitlines()[:4] == [
        "table p.t: schema version 1",
        "  id BIGINT",
        "  name VARCHAR",
        "versions:",
    ]


def test_origin_masks_passwords_of_sampled_urls() -> None:
    """The origin is shown by the CLI, REST and the Connectors page: a url_input's key
    is its URL, whose password and secret query parameters must not reach them."""
    inferred = Inferred(
        columns=(),
        sampled=["https://reader:s3cr3t@example.test/a.json?token=abc&page=2", "/data/b.json"],
    )
    origin = inferred.origin("live")
    assert "s3cr3t" not in origin and "abc" not in origin
    assert "https://reader:***@example.test/a.json?token=***&page=2" in origin
    assert origin.endswith("/data/b.json")


@pytest.mark.slow  # about 0.5 s or more: outside the fast lane
def test_inferred_keyed_table_checks_its_key_columns(sqlite_url: str, tmp_path: Path) -> None:
    """An inferred table's key is checked once its columns are known: named columns the
    data has (NOT NULL from then on), never a floating-point one."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text(lines({"id": 1, "price": 1.5}))
    delta = {"sink": {"name": "delta"}}
    store = StateStore(sqlite_url)
    ctx = ctx_of(spec_of(src, "json", {"update_format": "raw"}, primary_key=["id"], **delta))
    discover(store, ctx)
    table = effective_table(store, "p", ctx.table)
    assert table.primary_key == ("id",)
    assert [(c.name, c.nullable) for c in table.columns] == [("id", False), ("price", True)]
    view = schema_view(store, "p", "t", ctx.table)
    assert (view["primary_key"], view["sequence_by"]) == (["id"], None)
    store.close()
    for key, message in (
        ("sku", r"names 'sku' in primary_key or sequence_by, but its columns are id, price"),
        ("price", r"key column\(s\) price \(DOUBLE\) were inferred as floating point"),
    ):
        store = StateStore(f"sqlite:///{tmp_path / key}.db")
        spec = spec_of(src, "json", {"update_format": "raw"}, primary_key=[key], **delta)
        with pytest.raises(SchemaInferenceError, match=message):
            discover(store, ctx_of(spec))
        store.close()
