"""Spec validation: Feldera's orchestration examples and every error class, each checked
by path and message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_connectors.catalog import load_pipeline, parse_pipeline, validate_pipeline
from airflow_connectors.spec import SpecValidationError
from airflow_connectors.transports import TRANSPORTS

# Verbatim from Feldera's "Input connector orchestration" page.
NUMBERS_SQL = """CREATE TABLE numbers (
num INT
) WITH (
'connectors' = '[
{
"name": "c1",
"paused": true,
"transport": {
"name": "datagen",
"config": {"plan": [{ "rate": 1, "fields": { "num": { "range": [0, 10], "strategy": "uniform" } } }]}
}
},
{
"name": "c2",
"paused": false,
"transport": {
"name": "datagen",
"config": {"plan": [{ "rate": 1, "fields": { "num": { "range": [10, 20], "strategy": "uniform" } } }]}
}
}
]'
);"""

PRICE_SQL = """create table PRICE (
part bigint not null,
vendor bigint not null,
price integer
) WITH ('connectors' = '[{
"labels": "price.backfill",
"transport": {
"name": "url_input", "config": {"path": "https://feldera-basics-tutorial.s3.amazonaws.com/price.json" }
},
"format": { "name": "json" }
},
{
"start_after": ["price.backfill"],
"format": {"name": "json"},
"transport": {
"name": "kafka_input",
"config": {
"topics": ["price"],
"bootstrap.servers": "redpanda:9092",
"auto.offset.reset": "earliest"
}
}
}]');"""

#: The installed transports, as validation lists them.
AVAILABLE = ", ".join(TRANSPORTS.names())


def errors(doc: Any) -> list[tuple[str, str]]:
    return [(e.path, e.message) for e in validate_pipeline(doc)]


def one_error(doc: Any) -> tuple[str, str]:
    found = errors(doc)
    assert len(found) == 1, found
    return found[0]


def table(*connectors: dict[str, Any], columns: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "pipeline": "p",
        "tables": {"t": {"columns": columns or {"a": "INT"}, "connectors": list(connectors)}},
    }


def files(name: str = "f", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "transport": {"name": "file_input", "config": {"path": "/data/x.json"}},
        "format": {"name": "json"},
        **extra,
    }


def test_feldera_numbers_example_validates(tmp_path: Path) -> None:
    (tmp_path / "example.sql").write_text(NUMBERS_SQL)
    spec = load_pipeline(tmp_path / "example.sql")
    assert spec.name == "example"
    t = spec.table("numbers")
    assert [(c.name, c.paused) for c in t.connectors] == [("c1", True), ("c2", False)]
    assert str(t.columns[0]) == "num INT"
    assert t.connectors[0].transport.config["plan"][0]["fields"]["num"]["range"] == [0, 10]


def test_feldera_price_example_validates_with_its_kafka_connector() -> None:
    assert errors({"pipeline": "tutorial", "sql": PRICE_SQL}) == []
    spec = parse_pipeline({"pipeline": "tutorial", "sql": PRICE_SQL})
    kafka = spec.table("price").connectors[1]
    assert kafka.transport.name == "kafka_input"
    assert kafka.start_after == ("price.backfill",)
    config = TRANSPORTS.get("kafka_input").Config.model_validate(kafka.transport.config)
    assert config.topic == "price"  # the legacy topics: [one]
    assert config.options["bootstrap.servers"] == "redpanda:9092"


def test_price_table_parses_labels_string_and_unnamed_connectors() -> None:
    sql = (
        PRICE_SQL.replace('"kafka_input"', '"url_input"')
        .replace('"topics": ["price"],', "")
        .replace(
            '"bootstrap.servers": "redpanda:9092",\n"auto.offset.reset": "earliest"',
            '"path": "http://127.0.0.1/p"',
        )
    )
    spec = parse_pipeline({"pipeline": "tutorial", "sql": sql})
    price = spec.table("price")  # unquoted identifiers are lower-cased, as in Feldera
    assert [c.name for c in price.connectors] == ["unnamed-0", "unnamed-1"]
    assert price.connectors[0].labels == ("price.backfill",)
    assert price.connectors[1].start_after == ("price.backfill",)
    assert [str(c) for c in price.columns] == [
        "part BIGINT NOT NULL",
        "vendor BIGINT NOT NULL",
        "price INT",
    ]


def test_sql_file_pipeline_name_override(tmp_path: Path) -> None:
    (tmp_path / "x.sql").write_text(NUMBERS_SQL)
    assert load_pipeline(tmp_path / "x.sql", pipeline="other").name == "other"


def test_table_given_as_sql_inside_yaml(tmp_path: Path) -> None:
    spec_file = tmp_path / "p.yaml"
    spec_file.write_text(
        "pipeline: p\ntables:\n  numbers:\n    sql: |\n"
        + "\n".join("      " + line for line in NUMBERS_SQL.splitlines())
        + "\n"
    )
    assert [c.name for c in load_pipeline(spec_file).table("numbers").connectors] == ["c1", "c2"]


def test_json_spec_and_relative_paths_resolve_against_spec_folder(tmp_path: Path) -> None:
    doc = table(files(), columns={"a": "INT"})
    doc["tables"]["t"]["connectors"][0]["transport"]["config"]["path"] = "data/*.json"
    (tmp_path / "p.json").write_text(json.dumps(doc))
    spec = load_pipeline(tmp_path / "p.json")
    assert spec.table("t").connectors[0].transport.config["path"] == str(tmp_path / "data/*.json")


def test_unknown_key_with_did_you_mean() -> None:
    path, message = one_error(table(files(lables=["x"])))
    assert path == "tables.t.connectors[0].lables"
    assert message.startswith(
        "unknown field 'lables' (did you mean 'labels'?); allowed fields: name, paused, labels"
    )


def test_unknown_key_in_transport_config() -> None:
    doc = table(files())
    doc["tables"]["t"]["connectors"][0]["transport"]["config"]["folow"] = True
    path, message = one_error(doc)
    assert path == "tables.t.connectors[0].transport.config.folow"
    assert (
        message
        == "unknown field 'folow' (did you mean 'follow'?); allowed fields: path, follow, buffer_size_bytes, min_file_age, relist_every, relist_margin_s, compression"
    )


def test_unknown_top_level_key() -> None:
    doc = table(files())
    doc["tabels"] = {}
    assert (
        "tabels",
        "unknown field 'tabels' (did you mean 'tables'?); allowed fields: pipeline, tables, sql",
    ) in errors(doc)


def test_wrong_types() -> None:
    found = errors(table(files(paused="maybe", tasks_max="many")))
    assert (
        "tables.t.connectors[0].paused",
        "input should be a valid boolean, unable to interpret input (got 'maybe')",
    ) in found
    assert (
        "tables.t.connectors[0].tasks_max",
        "input should be a valid integer, unable to parse string as an integer (got 'many')",
    ) in found


def test_bad_column_type() -> None:
    path, message = one_error(table(files(), columns={"a": "BLOB"}))
    assert path == "tables.t.columns.a"
    assert message.startswith("unsupported column type 'BLOB'; supported types: BOOLEAN, TINYINT")


@pytest.mark.parametrize("name", ["bad name", "x" * 101, "a.b", ""])
def test_connector_name_pattern(name: str) -> None:
    path, message = one_error(table(files(name)))
    assert path == "tables.t.connectors[0].name"
    assert (
        message
        == f"connector name {name!r} must be 1 to 100 characters of letters, digits, '_' and '-'"
    )


def test_duplicate_connector_names() -> None:
    path, message = one_error(table(files("a"), files("a")))
    assert path == "tables.t.connectors[1].name"
    assert (
        message
        == "two connectors of table 't' are named 'a' (also connectors[0]); names must be unique within a table"
    )


def test_explicit_name_colliding_with_generated_one() -> None:
    unnamed = files()
    del unnamed["name"]
    path, message = one_error(table(unnamed, files("unnamed-0")))
    assert path == "tables.t.connectors[1].name"
    assert "named 'unnamed-0'" in message


def test_empty_start_after() -> None:
    path, message = one_error(table(files("a", labels="l"), files("b", start_after=[])))
    assert path == "tables.t.connectors[1].start_after"
    assert (
        message
        == "empty 'start_after' for connector t.b; name at least one label, or remove the field"
    )


def test_start_after_label_nobody_carries() -> None:
    path, message = one_error(
        table(files("a", labels=["backfill"]), files("b", start_after="bakfill"))
    )
    assert path == "tables.t.connectors[1].start_after"
    assert (
        message
        == "connector t.b waits for label 'bakfill', which no connector carries; labels in this pipeline: backfill"
    )


def test_start_after_cycle_names_connectors_and_labels() -> None:
    # Feldera's test_start_after_cyclic
    path, message = one_error(
        table(
            files("e1", labels=["label1"], start_after="label2"),
            files("e2", labels=["label2"], start_after="label1"),
        )
    )
    assert path == "tables.t.connectors[0].start_after"
    assert message == (
        "cyclic 'start_after' dependency: t.e1 waits for label 'label2' carried by t.e2, which waits for label "
        "'label1' carried by t.e1; remove one of these labels or start_after entries"
    )


def test_start_after_self_loop_and_cross_table_cycle() -> None:
    path, message = one_error(table(files("a", labels=["x"], start_after="x")))
    assert path == "tables.t.connectors[0].start_after"
    assert message.startswith(
        "cyclic 'start_after' dependency: t.a waits for label 'x' carried by t.a"
    )
    doc = {
        "pipeline": "p",
        "tables": {
            "t": {"columns": {"a": "INT"}, "connectors": [files("a", labels="A", start_after="C")]},
            "u": {
                "columns": {"a": "INT"},
                "connectors": [
                    files("b", labels="B", start_after="A"),
                    files("c", labels="C", start_after="B"),
                ],
            },
        },
    }
    path, message = one_error(doc)
    assert path == "tables.t.connectors[0].start_after"
    assert message.startswith(
        "cyclic 'start_after' dependency: t.a waits for label 'C' carried by u.c, which waits for label 'B' carried by u.b, which waits for label 'A' carried by t.a"
    )


def test_unknown_transport_lists_available() -> None:
    path, message = one_error(
        table({"name": "k", "transport": {"name": "pubsub_input"}, "format": {"name": "json"}})
    )
    assert path == "tables.t.connectors[0].transport.name"
    assert message.startswith("transport 'pubsub_input' is not available yet (Google Pub/Sub")
    assert message.endswith(f"; available transports: {AVAILABLE}")


def test_unknown_transport_suggests_the_closest_name() -> None:
    path, message = one_error(
        table({"name": "k", "transport": {"name": "file_inptu"}, "format": {"name": "json"}})
    )
    assert path == "tables.t.connectors[0].transport.name"
    assert message == (
        "transport 'file_inptu' is not available yet (did you mean 'file_input'?); "
        f"available transports: {AVAILABLE}"
    )


def test_unknown_format_lists_available() -> None:
    path, message = one_error(table(files(format={"name": "orc"})))
    assert path == "tables.t.connectors[0].format.name"
    assert (
        message == "format 'orc' is not available; available formats: avro, csv, json, parquet, raw"
    )


def test_transport_that_needs_a_format() -> None:
    c = files()
    del c["format"]
    path, message = one_error(table(c))
    assert path == "tables.t.connectors[0].format"
    assert (
        message
        == 'transport \'file_input\' needs a format; add "format": {"name": ...} with one of: avro, csv, json, parquet, raw'
    )


def test_datagen_takes_no_format_and_checks_fields() -> None:
    path, message = one_error(
        table({"name": "g", "transport": {"name": "datagen"}, "format": {"name": "json"}})
    )
    assert (path, message) == (
        "tables.t.connectors[0].format",
        "transport 'datagen' produces records itself and takes no format; remove 'format'",
    )
    path, message = one_error(
        table(
            {
                "name": "g",
                "transport": {"name": "datagen", "config": {"plan": [{"fields": {"nope": {}}}]}},
            }
        )
    )
    assert path == "tables.t.connectors[0].transport.config"
    assert "nope" in message and "a" in message


def test_every_problem_reported_at_once() -> None:
    doc = table(
        files("bad name"),
        files("x", start_after="missing"),
        {"name": "y", "transport": {"name": "nope"}},
    )
    doc["tables"]["t"]["columns"] = {"a": "INT", "b": "BLOB"}
    paths = [p for p, _ in errors(doc)]
    assert sorted(paths) == [
        "tables.t.columns.b",
        "tables.t.connectors[0].name",
        "tables.t.connectors[1].start_after",
        "tables.t.connectors[2].transport.name",
    ]


def test_sql_errors() -> None:
    assert errors({"pipeline": "p", "sql": "CREATE TABLE t (a INT) WITH ('connectors' = '[{]')"})[
        0
    ][1].startswith("'connectors' is not legal JSON")
    path, message = errors({"pipeline": "p", "sql": "CREATE VIEW v AS SELECT 1"})[0]
    assert path == "sql[0]" and message.startswith("expected CREATE TABLE")


def test_spec_validation_error_lists_every_line(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "pipeline: p\ntables:\n  t:\n    columns: {a: INT}\n    connectors:\n      - {name: a, transport: {name: nope}}\n      - {name: a b, transport: {name: file_input, config: {path: /x}}}\n"
    )
    with pytest.raises(SpecValidationError) as exc:
        load_pipeline(tmp_path / "p.yaml")
    assert len(exc.value.errors) == 3
    assert str(exc.value).count("\n") == 3


@pytest.mark.parametrize(
    ("trigger", "path", "message"),
    [
        (
            {"schedule": "@often"},
            "tables.t.connectors[0].trigger.schedule",
            "unknown cron preset '@often'; use one of @hourly, @daily, @weekly, @monthly, @quarterly, @yearly",
        ),
        (
            {"schedule": "every hour"},
            "tables.t.connectors[0].trigger.schedule",
            "'every hour' is not a cron expression; expected 5 fields",
        ),
        (
            {"poll_interval": 5},
            "tables.t.connectors[0].trigger",
            "poll_interval applies to event triggers only; add on: new_data",
        ),
        (
            {"on": "new_file"},
            "tables.t.connectors[0].trigger.on",
            "input should be 'new_data'",
        ),
    ],
)
def test_trigger_errors(trigger: dict[str, Any], path: str, message: str) -> None:
    found_path, found = one_error(table(files(trigger=trigger)))
    assert found_path == path
    assert found.startswith(message), found


def test_trigger_on_key_survives_yaml(tmp_path: Path) -> None:
    # YAML 1.1 reads a bare `on` as true; specs use YAML 1.2 booleans.
    (tmp_path / "p.yaml").write_text(
        "pipeline: p\n"
        "tables:\n"
        "  t:\n"
        "    columns: {id: BIGINT}\n"
        "    connectors:\n"
        "      - name: f\n"
        "        paused: yes\n"
        "        trigger: {on: new_data, poll_interval: 5, schedule: '*/10 * * * *'}\n"
        "        transport: {name: file_input, config: {path: data}}\n"
        "        format: {name: json}\n"
    )
    connector = load_pipeline(tmp_path / "p.yaml").table("t").connectors[0]
    assert connector.paused is True  # `yes` still reads as true for boolean fields
    trigger = load_pipeline(tmp_path / "p.yaml").table("t").connectors[0].trigger
    assert trigger is not None and trigger.on == "new_data" and trigger.poll_seconds == 5
    assert trigger.schedule == "*/10 * * * *"


# --- regressions: long start_after chains, names, duplicates, reserved names ----------


def chain(n: int, *, ring: bool = False) -> dict[str, Any]:
    """``n`` connectors, each labelled and starting after the previous one's label
    (the first after the last one's when ``ring``)."""
    connectors = [
        files(
            f"c{i}",
            labels=[f"l{i}"],
            **(
                {"start_after": [f"l{i - 1}"]}
                if i
                else {"start_after": [f"l{n - 1}"]}
                if ring
                else {}
            ),
        )
        for i in range(n)
    ]
    return table(*connectors)


def test_start_after_chain_of_1000_connectors_validates() -> None:
    spec = parse_pipeline(chain(1000))
    connectors = spec.table("t").connectors
    assert len(connectors) == 1000
    assert connectors[999].start_after == ("l998",)


def test_start_after_ring_of_1000_connectors_is_one_cycle_error() -> None:
    path, message = one_error(chain(1000, ring=True))
    assert path == "tables.t.connectors[0].start_after"
    assert message.startswith(
        "cyclic 'start_after' dependency: t.c0 waits for label 'l999' carried by t.c999, "
        "which waits for label 'l998' carried by t.c998"
    )
    assert message.count("which waits for label") == 999


def test_two_cycles_in_one_component_are_both_reported() -> None:
    # a <-> b and a <-> c share a: two cycles, two errors (as before the walk was iterative)
    found = errors(
        table(
            files("a", labels=["A"], start_after=["B", "C"]),
            files("b", labels=["B"], start_after="A"),
            files("c", labels=["C"], start_after="A"),
            files("d", start_after="A"),  # waits on the cycle, is not on it
        )
    )
    assert [p for p, _ in found] == [
        "tables.t.connectors[0].start_after",
        "tables.t.connectors[2].start_after",
    ]
    assert "t.c waits for label 'A' carried by t.a, which waits for label 'C'" in found[1][1]


@pytest.mark.parametrize(
    ("where", "path"),
    [
        ("pipeline", "pipeline"),
        ("table", 'tables["t\\n"]'),
        ("column", 'tables.t.columns["a\\n"]'),
        ("connector", "tables.t.connectors[0].name"),
        ("label", "tables.t.connectors[0].labels[0]"),
    ],
)
def test_names_ending_in_a_newline_are_rejected(where: str, path: str) -> None:
    doc = table(files("c", labels=["l"]))
    if where == "pipeline":
        doc["pipeline"] = "p\n"
    elif where == "table":
        doc["tables"] = {"t\n": doc["tables"]["t"]}
    elif where == "column":
        doc["tables"]["t"]["columns"] = {"a\n": "INT"}
    elif where == "connector":
        doc["tables"]["t"]["connectors"][0]["name"] = "c\n"
    else:
        doc["tables"]["t"]["connectors"][0]["labels"] = ["l\n"]
    found_path, message = one_error(doc)
    assert found_path == path
    assert "\\n" in message and "\n" not in message  # shown escaped: one line per error


def test_name_messages_say_what_is_allowed() -> None:
    assert one_error({**table(files()), "pipeline": "p q"}) == (
        "pipeline",
        "expected a pipeline name of 1 to 100 characters of letters, digits, '_' and '-', got 'p q'",
    )
    path, message = one_error(table(files(labels=["a b"])))
    assert path == "tables.t.connectors[0].labels[0]"
    assert message.startswith("label 'a b' must be 1 to 94 characters without spaces")


def test_duplicate_yaml_keys_are_rejected_with_path_and_lines(tmp_path: Path) -> None:
    spec = tmp_path / "p.yaml"
    spec.write_text(
        "pipeline: p\n"
        "tables:\n"
        "  t:\n"
        "    columns: {a: INT}\n"
        "    connectors: []\n"
        "  t:\n"
        "    columns: {b: INT}\n"
        "    connectors:\n"
        "      - name: f\n"
        "        transport: {name: file_input, config: {path: /x, path: /y}}\n"
        "        format: {name: json}\n"
    )
    with pytest.raises(SpecValidationError) as exc:
        load_pipeline(spec)
    assert [(e.path, e.message) for e in exc.value.errors] == [
        (
            "tables.t",
            "duplicate key 't' at line 6 (first at line 3); YAML keeps only the last one and "
            "drops the first: merge them or rename one",
        ),
        (
            "tables.t.connectors[0].transport.config.path",
            "duplicate key 'path' at line 10 (first at line 10); YAML keeps only the last one "
            "and drops the first: merge them or rename one",
        ),
    ]


def test_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    spec = tmp_path / "p.yaml"
    spec.write_text(
        "pipeline: p\n"
        "tables:\n"
        "  t:\n"
        "    columns: {a: INT}\n"
        "    connectors:\n"
        "      - &base {name: f, transport: {name: file_input, config: {path: /x}}, format: {name: json}}\n"
        "      - <<: *base\n"
        "        name: g\n"
    )
    assert [c.name for c in load_pipeline(spec).table("t").connectors] == ["f", "g"]


def test_duplicate_json_keys_are_rejected(tmp_path: Path) -> None:
    spec = tmp_path / "p.json"
    spec.write_text(
        '{"pipeline": "p", "tables": {"t": {"columns": {"a": "INT"}, "connectors": []},'
        ' "t": {"columns": {"b": "INT"}, "connectors": []}}}'
    )
    with pytest.raises(SpecValidationError) as exc:
        load_pipeline(spec)
    assert [str(e) for e in exc.value.errors] == [
        "duplicate key 't' in a JSON object; JSON keeps only the last one and drops the first: "
        "merge them or rename one"
    ]


@pytest.mark.parametrize(
    ("columns", "path", "message"),
    [
        (
            "a INT, a INT",
            "tables.t.columns.a",
            "column 'a' is defined twice in CREATE TABLE t; column names must be unique: "
            "rename or remove one",
        ),
        (
            "a INT, A BIGINT",  # unquoted names are lower-cased
            "tables.t.columns.a",
            "column 'a' is defined twice in CREATE TABLE t; column names must be unique: "
            "rename or remove one",
        ),
        (
            'a INT, "A" BIGINT',
            "tables.t.columns.A",
            "column 'A' is defined twice (also 'a'); column names must be unique, ignoring "
            "case, because Spark and DuckDB read them case-insensitively",
        ),
    ],
)
def test_duplicate_sql_columns_are_rejected(columns: str, path: str, message: str) -> None:
    assert one_error({"pipeline": "p", "sql": f"CREATE TABLE t ({columns})"}) == (path, message)


def test_yaml_columns_differing_only_in_case_are_rejected() -> None:
    assert one_error(table(files(), columns={"id": "INT", "ID": "BIGINT"})) == (
        "tables.t.columns.ID",
        "column 'ID' is defined twice (also 'id'); column names must be unique, ignoring case, "
        "because Spark and DuckDB read them case-insensitively",
    )


def test_duplicate_keys_in_sql_connectors_json_are_rejected() -> None:
    sql = (
        'CREATE TABLE t (a INT) WITH (\'connectors\' = \'[{"name": "x", "name": "y", '
        '"transport": {"name": "datagen"}}]\')'
    )
    assert (
        "tables.t.connectors",
        "duplicate key 'name' in a JSON object of 'connectors'; "
        "JSON keeps only the last one and drops the first: merge them or rename one",
    ) in errors({"pipeline": "p", "sql": sql})


def test_connector_field_errors_do_not_hide_transport_and_format_errors() -> None:
    bad = files(tasks_max=0)
    bad["transport"]["config"]["pth"] = "/y"
    bad["format"] = {"name": "json", "config": {"lines": "triple"}}
    found = errors(table(bad))
    assert [p for p, _ in found] == [
        "tables.t.connectors[0].tasks_max",
        "tables.t.connectors[0].transport.config.pth",
        "tables.t.connectors[0].format.config.lines",
    ]
    assert found[0][1] == "input should be greater than or equal to 1 (got 0)"
    assert found[1][1].startswith("unknown field 'pth' (did you mean 'path'?)")
    assert found[2][1].startswith("input should be 'multiple' or 'single'")


def test_connector_with_bad_fields_still_carries_its_labels() -> None:
    # c's own field is wrong; d waiting for c's label gets no second, misleading error.
    path, _ = one_error(table(files("c", labels="L", paused="maybe"), files("d", start_after="L")))
    assert path == "tables.t.connectors[0].paused"


@pytest.mark.parametrize("name", ["t__errors", "orders__ERRORS"])
def test_table_names_ending_in_errors_are_reserved(name: str) -> None:
    doc = table(files())
    doc["tables"] = {name: doc["tables"]["t"]}
    path, message = one_error(doc)
    assert path == f"tables.{name}"
    stem = name[: -len("__errors")]
    assert message == (
        f"table name {name!r} ends in '__errors', which is reserved: the dead letters of table "
        f"{stem!r} go to the folder '{stem}__errors'; rename the table"
    )
    sql_error = one_error({"pipeline": "p", "sql": "CREATE TABLE t__errors (a INT)"})
    assert sql_error[0] == "tables.t__errors" and "reserved" in sql_error[1]


def test_spec_file_that_is_not_utf8_names_the_byte_offset(tmp_path: Path) -> None:
    spec = tmp_path / "p.yaml"
    spec.write_bytes(b"pipeline: p\n# caf\xe9\n")
    with pytest.raises(SpecValidationError) as exc:
        load_pipeline(spec)
    assert [str(e) for e in exc.value.errors] == [
        "the spec file must be UTF-8 text, but byte 0xe9 at byte offset 17 is not valid "
        "UTF-8; save the file as UTF-8"
    ]
    assert exc.value.source == str(spec)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_spec_nested_too_deeply_is_one_error(tmp_path: Path, suffix: str) -> None:
    spec = tmp_path / f"deep{suffix}"
    depth = 100_000
    spec.write_text('{"pipeline": "p", "tables": ' + "[" * depth + "]" * depth + "}")
    with pytest.raises(SpecValidationError) as exc:
        load_pipeline(spec)
    assert [str(e) for e in exc.value.errors] == [
        "the spec nests lists or mappings too deeply to be read"
    ]


def test_sql_quoted_table_name_keeps_its_case_unquoted_is_lower_cased() -> None:
    quoted = parse_pipeline(
        {"pipeline": "q", "sql": 'CREATE TABLE "Numbers" (id BIGINT NOT NULL, "Id2" INT);'}
    )
    assert [t.name for t in quoted.tables] == ["Numbers"]
    assert [c.name for c in quoted.tables[0].columns] == ["id", "Id2"]
    plain = parse_pipeline({"pipeline": "q", "sql": "CREATE TABLE Numbers (id BIGINT);"})
    assert [t.name for t in plain.tables] == ["numbers"]
