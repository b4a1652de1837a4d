"""Keyed tables in the spec: ``primary_key``, ``sequence_by``, ``scd_type`` and
``tombstone_retention`` in YAML, in Feldera SQL (``PRIMARY KEY``) and in the Python
builder; each mistake one line at its own path; the fields survive a batch plan."""

from __future__ import annotations

import datetime
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from docs_examples import doc_block

from airflow_connectors.catalog import PLUGINS, load_pipeline, parse_pipeline, validate_pipeline
from airflow_connectors.spec import SpecValidationError
from airflow_connectors.spec.builder import Pipeline
from airflow_connectors.spec.models import TableSpec
from airflow_connectors.state.plan import BatchPlan
from airflow_connectors.transports.base import WorkItem

MARKER = "<!-- keys-example -->"

FILES: dict[str, Any] = {
    "name": "f",
    "transport": {"name": "file_input", "config": {"path": "/data/x.json"}},
    "format": {"name": "json"},
}
COLUMNS = {"id": "BIGINT", "tenant": "VARCHAR", "v": "VARCHAR", "lsn": "BIGINT", "d": "DOUBLE"}


def keyed(**fields: Any) -> dict[str, Any]:
    """A pipeline of one table ``t`` (sink delta unless ``sink`` is given) with ``fields``."""
    table: dict[str, Any] = {"columns": COLUMNS, "connectors": [FILES], "sink": {"name": "delta"}}
    table.update(fields)
    return {"pipeline": "p", "tables": {"t": {k: v for k, v in table.items() if v is not None}}}


def errors(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e.path, e.message) for e in validate_pipeline(doc)]


def one_error(doc: dict[str, Any]) -> tuple[str, str]:
    found = errors(doc)
    assert len(found) == 1, found
    return found[0]


def sql_table(sql: str) -> TableSpec:
    """The one table of a spec whose top-level ``sql`` is ``sql`` (its sink given in
    YAML beside the statement, so that a keyed table validates)."""
    name = sql.split("(")[0].split()[-1].strip('"').lower()
    spec = parse_pipeline(
        {"pipeline": "p", "tables": {name: {"sql": sql, "sink": {"name": "delta"}}}}
    )
    return spec.table(name)


# --- YAML ------------------------------------------------------------------------------


def test_keyed_table_validates_with_every_field_and_its_key_columns_become_not_null() -> None:
    t = parse_pipeline(
        keyed(
            primary_key=["tenant", "id"],
            sequence_by="lsn",
            scd_type=1,
            tombstone_retention="12h",
        )
    ).table("t")
    assert t.keyed
    assert t.primary_key == ("tenant", "id")
    assert t.sequence_by == "lsn"
    assert t.scd_type == 1
    assert t.tombstone_retention == datetime.timedelta(hours=12)
    # SQL's PRIMARY KEY: the key columns hold a value in every row; the others stay nullable.
    assert [str(c) for c in t.columns] == [
        "id BIGINT NOT NULL",
        "tenant VARCHAR NOT NULL",
        "v VARCHAR",
        "lsn BIGINT",
        "d DOUBLE",
    ]


def test_one_column_key_may_be_a_string_and_defaults_apply() -> None:
    t = parse_pipeline(keyed(primary_key="id")).table("t")
    assert (t.primary_key, t.sequence_by, t.scd_type) == (("id",), None, 1)
    assert t.tombstone_retention == datetime.timedelta(days=7)


def test_table_without_key_is_unchanged() -> None:
    t = parse_pipeline(keyed(sink=None)).table("t")
    assert not t.keyed and t.primary_key == ()
    assert all(c.nullable for c in t.columns)


@pytest.mark.parametrize(
    ("fields", "path", "message"),
    [
        (
            {"primary_key": ["id", "x"]},
            "tables.t.primary_key[1]",
            "primary_key names column 'x', which table 't' does not declare; its columns: "
            "id, tenant, v, lsn, d",
        ),
        (
            {"primary_key": "Id"},
            "tables.t.primary_key",
            "primary_key names column 'Id', which table 't' does not declare (did you mean "
            "'id'?); its columns: id, tenant, v, lsn, d",
        ),
        (
            {"primary_key": ["id", "tenant", "ID"]},
            "tables.t.primary_key[2]",
            "column 'ID' appears twice in primary_key; name each key column once",
        ),
        (
            {"primary_key": ["id", "d"]},
            "tables.t.primary_key[1]",
            "key column 'd' is DOUBLE, and a floating-point column cannot be a key (values "
            "that print alike may differ in their last bits, NaN equals nothing); key on an "
            "integer, DECIMAL or VARCHAR column",
        ),
        (
            {"primary_key": {"id": 1}},
            "tables.t.primary_key",
            "expected the column that identifies a row, or a list of them, such as [id] or "
            "[tenant, id]; got a mapping",
        ),
        (
            {"primary_key": ["id", 7]},
            "tables.t.primary_key[1]",
            "expected a column name in primary_key, got the number 7",
        ),
        (
            {"sequence_by": "lsn"},
            "tables.t.sequence_by",
            "sequence_by orders the changes of one key, and table 't' has no primary_key; "
            "add primary_key: [<column>, ...] or remove sequence_by",
        ),
        (
            {"primary_key": ["id"], "sequence_by": "offset"},
            "tables.t.sequence_by",
            "sequence_by names column 'offset', which table 't' does not declare; its "
            "columns: id, tenant, v, lsn, d",
        ),
        (
            {"primary_key": ["id"], "sequence_by": "id"},
            "tables.t.sequence_by",
            "sequence_by column 'id' is part of the primary_key, so every change of a key "
            "has the same sequence; name a column that grows with each change (an offset, "
            "an LSN, an updated_at)",
        ),
        (
            {"scd_type": 2},
            "tables.t.scd_type",
            "scd_type 2 keeps the history of each key, and table 't' has no primary_key; "
            "add primary_key: [<column>, ...] or remove scd_type",
        ),
        (
            {"primary_key": ["id"], "scd_type": 3},
            "tables.t.scd_type",
            "scd_type must be 1 (the table holds each key's latest row) or 2 (it keeps "
            "every version of a row), got the number 3",
        ),
        (
            {"primary_key": ["id"], "tombstone_retention": "a week"},
            "tables.t.tombstone_retention",
            "tombstone_retention must be a positive duration such as '7d', '12h' or '30m' "
            "(how long a deleted key is remembered), got the string 'a week'",
        ),
        (
            {"primary_key": ["id"], "tombstone_retention": "0s"},
            "tables.t.tombstone_retention",
            "tombstone_retention must be a positive duration such as '7d', '12h' or '30m' "
            "(how long a deleted key is remembered), got the string '0s'",
        ),
        (
            {"tombstone_retention": "7d"},
            "tables.t.tombstone_retention",
            "tombstone_retention applies to deleted keys, and table 't' has no primary_key; "
            "add primary_key: [<column>, ...] or remove tombstone_retention",
        ),
        (
            {"primary_key": ["id"], "columns": {**COLUMNS, "__op": "INT"}},
            "tables.t.columns.__op",
            "column '__op' is reserved in a table with a primary_key (its changes carry "
            "__op, __set, __order beside the columns); rename the column",
        ),
    ],
)
def test_key_mistakes_are_one_line_at_their_path(
    fields: dict[str, Any], path: str, message: str
) -> None:
    assert one_error(keyed(**fields)) == (path, message)


def test_every_key_problem_is_reported_at_once() -> None:
    found = errors(
        keyed(primary_key=["x", "d"], sequence_by="nope", scd_type=0, tombstone_retention=-1)
    )
    assert [path for path, _ in found] == [
        "tables.t.primary_key[0]",
        "tables.t.primary_key[1]",
        "tables.t.sequence_by",
        "tables.t.scd_type",
        "tables.t.tombstone_retention",
    ]


def test_retention_forms_seconds_iso_and_timedelta() -> None:
    def retention(value: Any) -> datetime.timedelta:
        return (
            parse_pipeline(keyed(primary_key="id", tombstone_retention=value))
            .table("t")
            .tombstone_retention
        )

    assert retention(3600) == datetime.timedelta(hours=1)
    assert retention("P2D") == datetime.timedelta(days=2)  # how a stored spec holds it
    assert retention(datetime.timedelta(minutes=5)) == datetime.timedelta(minutes=5)


# --- the parquet sink appends ------------------------------------------------------------


@pytest.mark.parametrize("sink", [None, {"name": "parquet"}])
def test_keyed_table_into_parquet_is_refused_naming_the_sinks_that_apply_changes(
    sink: dict[str, Any] | None,
) -> None:
    assert one_error(keyed(primary_key=["id"], sink=sink)) == (
        "tables.t.primary_key",
        "table 't' has a primary key, and the parquet sink only appends rows (it cannot "
        "update or delete them); give the table a sink that applies changes: sink: {name: "
        "delta} (or iceberg, postgres), or remove the primary key to append every record",
    )


def test_keyed_table_of_a_sql_file_says_where_its_sink_goes(tmp_path: Path) -> None:
    (tmp_path / "shop.sql").write_text(
        "CREATE TABLE customers (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR) WITH "
        """('connectors' = '[{"transport": {"name": "file_input", "config": """
        """{"path": "/in/*.json"}}, "format": {"name": "json"}}]');"""
    )
    with pytest.raises(SpecValidationError) as err:
        load_pipeline(tmp_path / "shop.sql")
    lines = str(err.value).splitlines()
    assert lines[1:] == [
        "tables.customers.primary_key: table 'customers' has a primary key, and the parquet "
        "sink only appends rows (it cannot update or delete them); give the table in a YAML "
        "spec as tables: {customers: {sql: <its CREATE TABLE>, sink: {name: delta}}} (or "
        "iceberg, postgres), or remove the primary key to append every record"
    ]


# --- inferred columns ---------------------------------------------------------------------


def test_inferred_table_key_names_are_left_to_the_engine_but_hinted_types_are_checked() -> None:
    doc = keyed(primary_key=["id", "score"], sequence_by="lsn")
    del doc["tables"]["t"]["columns"]
    t = parse_pipeline(doc).table("t")  # names are checked when the schema is inferred
    assert t.infers_schema and t.primary_key == ("id", "score") and t.sequence_by == "lsn"
    doc["tables"]["t"]["schema_hints"] = {"score": "REAL"}
    assert one_error(doc) == (
        "tables.t.primary_key[1]",
        "key column 'score' is REAL, and a floating-point column cannot be a key (values "
        "that print alike may differ in their last bits, NaN equals nothing); key on an "
        "integer, DECIMAL or VARCHAR column",
    )


# --- Feldera SQL ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "key"),
    [
        ("CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR)", ("id",)),
        ("CREATE TABLE t (id BIGINT NOT NULL PRIMARY KEY, v VARCHAR)", ("id",)),
        (
            "create table T (Part bigint, vendor bigint, primary key (PART, vendor))",
            ("part", "vendor"),
        ),
        ('CREATE TABLE t ("Id" INT, v VARCHAR, CONSTRAINT pk PRIMARY KEY ("Id"))', ("Id",)),
        (
            "CREATE TABLE t (id INT, o INT, PRIMARY KEY (id), FOREIGN KEY (o) REFERENCES x(y))",
            ("id",),
        ),
        ("CREATE TABLE t (id INT, v VARCHAR, UNIQUE (v))", ()),
    ],
)
def test_sql_primary_key_forms(sql: str, key: tuple[str, ...]) -> None:
    t = sql_table(sql)
    assert t.primary_key == key
    assert [c.name for c in t.columns if not c.nullable] == list(key)


def test_sql_table_keeps_feldera_s_lower_casing_and_the_key_fields_beside_it() -> None:
    spec = parse_pipeline(
        {
            "pipeline": "p",
            "tables": {
                "price": {
                    "sql": "CREATE TABLE PRICE (PART BIGINT NOT NULL, VENDOR BIGINT NOT NULL, "
                    "PRICE INT, TS TIMESTAMP, PRIMARY KEY (PART, VENDOR))",
                    "sink": {"name": "postgres", "config": {"postgres_conn_id": "pg"}},
                    "sequence_by": "ts",
                    "tombstone_retention": "1d",
                }
            },
        }
    )
    t = spec.table("price")
    assert (t.primary_key, t.sequence_by) == (("part", "vendor"), "ts")
    assert t.tombstone_retention == datetime.timedelta(days=1)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "CREATE TABLE t (id INT PRIMARY KEY, v INT, PRIMARY KEY (id))",
            "CREATE TABLE t declares 2 primary keys (column id PRIMARY KEY; PRIMARY KEY "
            "(id)); a table has one: list every key column in one PRIMARY KEY (a, b)",
        ),
        (
            "CREATE TABLE t (a INT, b INT, PRIMARY KEY (a), PRIMARY KEY (b))",
            "CREATE TABLE t declares 2 primary keys (PRIMARY KEY (a); PRIMARY KEY (b)); a "
            "table has one: list every key column in one PRIMARY KEY (a, b)",
        ),
        (
            "CREATE TABLE t (a INT PRIMARY KEY, b INT PRIMARY KEY)",
            "CREATE TABLE t declares 2 primary keys (column a PRIMARY KEY; column b PRIMARY "
            "KEY); a table has one: list every key column in one PRIMARY KEY (a, b)",
        ),
    ],
)
def test_sql_table_with_two_primary_keys_is_one_error(sql: str, message: str) -> None:
    doc = {"pipeline": "p", "tables": {"t": {"sql": sql, "sink": {"name": "delta"}}}}
    assert one_error(doc) == ("tables.t.primary_key", message)


def test_sql_key_checked_like_yaml_s() -> None:
    doc: dict[str, Any] = {
        "pipeline": "p",
        "tables": {
            "t": {
                "sql": "CREATE TABLE t (id INT, x DOUBLE, PRIMARY KEY (id, x, nope))",
                "sink": {"name": "delta"},
            }
        },
    }
    assert [path for path, _ in errors(doc)] == [
        "tables.t.primary_key[1]",
        "tables.t.primary_key[2]",
    ]
    doc["tables"]["t"]["sql"] = "CREATE TABLE t (id INT PRIMARY KEY)"
    doc["tables"]["t"]["primary_key"] = ["id"]
    assert one_error(doc) == (
        "tables.t.primary_key",
        "CREATE TABLE t declares a PRIMARY KEY already; give the key either in the SQL or "
        "as primary_key, not both",
    )


# --- Python builder ----------------------------------------------------------------------


def test_builder_key_fields_build_the_same_table_as_yaml(tmp_path: Path) -> None:
    built = (
        Pipeline("p")
        .table(
            "t",
            columns=COLUMNS,
            sink={"name": "delta"},
            primary_key=["tenant", "id"],
            sequence_by="lsn",
            tombstone_retention=datetime.timedelta(days=2),
        )
        .connector(**FILES)
        .build(PLUGINS)
    )
    spec_file = tmp_path / "p.yaml"
    spec_file.write_text(
        textwrap.dedent(
            """\
            pipeline: p
            tables:
              t:
                columns: {id: BIGINT, tenant: VARCHAR, v: VARCHAR, lsn: BIGINT, d: DOUBLE}
                primary_key: [tenant, id]
                sequence_by: lsn
                tombstone_retention: 2d
                sink: {name: delta}
                connectors:
                  - name: f
                    transport: {name: file_input, config: {path: /data/x.json}}
                    format: {name: json}
            """
        )
    )
    assert built == load_pipeline(spec_file).model_copy(update={"source": None})
    assert built.table("t").primary_key == ("tenant", "id")


def test_builder_key_mistake_has_the_yaml_path() -> None:
    builder = Pipeline("p").table("t", columns=COLUMNS, primary_key="x").connector(**FILES)
    with pytest.raises(SpecValidationError) as err:
        builder.build(PLUGINS)
    assert "tables.t.primary_key: primary_key names column 'x'" in str(err.value)


# --- plans ---------------------------------------------------------------------------------


def test_keyed_table_survives_a_batch_plan_round_trip() -> None:
    spec = parse_pipeline(
        keyed(primary_key=["tenant", "id"], sequence_by="lsn", tombstone_retention="36h")
    )
    table = spec.table("t")
    plan = BatchPlan(
        pipeline="p",
        table=table,
        connector=table.connectors[0],
        warehouse="/wh",
        items=(WorkItem(key="/data/x.json", size=10),),
        batch_id=3,
    )
    stored = json.loads(json.dumps(plan.stored()))  # as the state store keeps it
    back = BatchPlan.from_json(stored, batch_id=3, attempt="a")
    assert back.table == table.model_copy(update={"connectors": ()})
    assert (back.table.primary_key, back.table.sequence_by) == (("tenant", "id"), "lsn")
    assert back.table.tombstone_retention == datetime.timedelta(hours=36)
    assert [c.name for c in back.table.columns if not c.nullable] == ["id", "tenant"]


# --- docs ------------------------------------------------------------------------------------


def test_docs_keys_example_validates(tmp_path: Path) -> None:
    yaml_text = doc_block(MARKER, "yaml")  # docs/concepts/changes.md
    (tmp_path / "shop.yaml").write_text(yaml_text)
    t = load_pipeline(tmp_path / "shop.yaml").table("customers")
    assert t.keyed and t.sequence_by is not None
    sql_text = doc_block(MARKER, "sql")
    doc = {"pipeline": "p", "tables": {"customers": {"sql": sql_text, "sink": {"name": "delta"}}}}
    assert parse_pipeline(doc).table("customers").primary_key == t.primary_key
