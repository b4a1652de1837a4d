"""Pipelines built in Python (``airflow_connectors.Pipeline``): the same pipeline as the
same YAML, the same errors with the same paths, and the docs' example as written."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from docs_examples import doc_block

import airflow_connectors
from airflow_connectors.catalog import PLUGINS, load_pipeline
from airflow_connectors.spec import PipelineSpec, SpecValidationError
from airflow_connectors.spec.builder import Pipeline, TableBuilder

#: The docs' example (docs/concepts/python-api.md).
MARKER = "<!-- pipeline-builder-example -->"


def from_yaml(tmp_path: Path, text: str) -> PipelineSpec:
    """The pipeline of a spec file holding ``text``, its source left out (a built
    pipeline has no file)."""
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return load_pipeline(path).model_copy(update={"source": None})


def yaml_errors(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(SpecValidationError) as e:
        from_yaml(tmp_path, text)
    return [str(err) for err in e.value.errors]


def built_errors(pipeline: Pipeline | TableBuilder, tmp_path: Path) -> list[str]:
    with pytest.raises(SpecValidationError) as e:
        pipeline.build(PLUGINS, base_dir=tmp_path)
    return [str(err) for err in e.value.errors]


def test_readme_example_builds_the_pipeline_of_the_readme_yaml(tmp_path: Path) -> None:
    namespace: dict[str, Any] = {}
    exec(doc_block(MARKER, "python"), namespace)
    built = namespace["shop"].build(PLUGINS, base_dir=tmp_path)
    assert built == from_yaml(tmp_path, doc_block(MARKER, "yaml"))
    assert [f"{t.name}.{c.name}" for t, c in built.connectors()] == [
        "orders.backfill",
        "orders.live",
        "refunds.files",
    ]
    # Relative paths are taken from base_dir, as from a spec file's folder.
    backfill = built.tables[0].connectors[0]
    assert backfill.transport.config["path"] == str(tmp_path / "landing/orders")
    assert built.tables[0].connectors[1].start_after == ("orders.backfill",)


def test_package_exports_the_builder() -> None:
    assert airflow_connectors.Pipeline is Pipeline
    with pytest.raises(AttributeError):
        _ = airflow_connectors.NoSuchThing  # type: ignore[attr-defined]


def test_every_connector_field_equals_its_yaml(tmp_path: Path) -> None:
    built = (
        Pipeline("p")
        .table(
            "t",
            columns={"id": "BIGINT NOT NULL", "at": "TIMESTAMP"},
            sink={"name": "parquet", "config": {"target_file_size": 1048576}},
        )
        .connector(
            "c",
            paused=True,
            labels=("l1",),
            tasks_max=4,
            max_batch_size=100,
            errors={"tolerance": "all"},
            transport={"name": "file_input", "config": {"path": Path("in")}},
            format={"name": "json", "config": {"update_format": "raw"}},
            trigger={"schedule": "@daily", "start_date": "2026-01-01"},
        )
        .connector(name="d", transport={"name": "datagen"}, start_after="l1")
        .build(PLUGINS, base_dir=tmp_path)
    )
    assert built == from_yaml(
        tmp_path,
        """
        pipeline: p
        tables:
          t:
            columns: {id: BIGINT NOT NULL, at: TIMESTAMP}
            sink: {name: parquet, config: {target_file_size: 1048576}}
            connectors:
              - name: c
                paused: true
                labels: [l1]
                tasks_max: 4
                max_batch_size: 100
                errors: {tolerance: all}
                transport: {name: file_input, config: {path: in}}
                format: {name: json, config: {update_format: raw}}
                trigger: {schedule: "@daily", start_date: 2026-01-01}
              - name: d
                transport: {name: datagen}
                start_after: l1
        """,
    )


def test_sql_table_equals_its_yaml(tmp_path: Path) -> None:
    ddl = (
        'CREATE TABLE numbers (num INT) WITH (\'connectors\' = \'[{"name": "gen", '
        '"transport": {"name": "datagen", "config": {"plan": [{"limit": 3}]}}}]\')'
    )
    built = Pipeline("p").table("numbers", sql=ddl).build(PLUGINS)
    assert built == from_yaml(
        tmp_path, yaml.safe_dump({"pipeline": "p", "tables": {"numbers": {"sql": ddl}}})
    )
    assert built.tables[0].connectors[0].name == "gen"


@pytest.mark.parametrize(
    ("yaml_text", "build", "expected"),
    [
        pytest.param(
            """
            pipeline: p
            tables:
              orders:
                columns: {id: BIGINT NOT NULL}
                connectors:
                  - {name: live, tasks_mx: 3, transport: {name: datagn}}
            """,
            lambda: (
                Pipeline("p")
                .table("orders", columns={"id": "BIGINT NOT NULL"})
                .connector("live", tasks_mx=3, transport={"name": "datagn"})
            ),
            [
                "tables.orders.connectors[0].tasks_mx: unknown field 'tasks_mx' (did you mean 'tasks_max'?)",
                "tables.orders.connectors[0].transport.name: transport 'datagn' is not available yet (did you mean 'datagen'?)",
            ],
            id="unknown-field-and-transport",
        ),
        pytest.param(
            """
            pipeline: p
            tables:
              orders:
                columns: {id: BIGNUM, ID: INT}
                connectors:
                  - {name: a, transport: {name: datagen}}
                  - {name: a, transport: {name: datagen}, start_after: [nobody]}
            """,
            lambda: (
                Pipeline("p")
                .table("orders", columns={"id": "BIGNUM", "ID": "INT"})
                .connector("a", transport={"name": "datagen"})
                .connector("a", transport={"name": "datagen"}, start_after=["nobody"])
            ),
            [
                "tables.orders.columns.id: ",
                "tables.orders.columns.ID: column 'ID' is defined twice",
            ],
            id="columns-names-start-after",
        ),
        pytest.param(
            """
            pipeline: "bad name"
            tables:
              orders:
                columns: {id: INT}
                sink: {name: parket}
                connectors:
                  - {name: c, transport: {name: file_input, config: {}}, format: {name: jsn}}
            """,
            lambda: (
                Pipeline("bad name")
                .table("orders", columns={"id": "INT"}, sink={"name": "parket"})
                .connector(
                    "c", transport={"name": "file_input", "config": {}}, format={"name": "jsn"}
                )
            ),
            [
                "pipeline: expected a pipeline name of",
                "tables.orders.sink.name: unknown sink 'parket'",
            ],
            id="pipeline-sink-config-format",
        ),
        pytest.param(
            """
            pipeline: p
            tables:
              orders:
                columns: {id: INT}
                sql: CREATE TABLE orders (id INT)
            """,
            lambda: Pipeline("p").table(
                "orders", columns={"id": "INT"}, sql="CREATE TABLE orders (id INT)"
            ),
            ["tables.orders.sql: give either 'sql' or 'columns'/'connectors', not both"],
            id="sql-and-columns",
        ),
    ],
)
def test_bad_input_gets_the_yaml_messages_and_paths(
    tmp_path: Path, yaml_text: str, build: Any, expected: list[str]
) -> None:
    built = built_errors(build(), tmp_path)
    assert built == yaml_errors(tmp_path, yaml_text)
    for start in expected:
        assert any(e.startswith(start) for e in built), (start, built)


def test_a_table_added_twice_is_an_error_at_its_path(tmp_path: Path) -> None:
    shop = Pipeline("shop")
    shop.table("orders", columns={"id": "INT"}).connector("a", transport={"name": "datagen"})
    shop.table("orders", columns={"id": "INT"}).connector("b", transport={"name": "datagen"})
    assert built_errors(shop, tmp_path) == ["tables.orders: table 'orders' is defined twice"]


def test_chaining_goes_on_with_the_next_table_and_copies_what_it_is_given() -> None:
    columns = {"id": "INT"}
    config: dict[str, Any] = {"plan": [{"limit": 5}]}
    orders = Pipeline("shop").table("orders", columns=columns)
    refunds = orders.connector("a", transport={"name": "datagen", "config": config}).table(
        "refunds", columns=columns
    )
    assert isinstance(refunds, TableBuilder) and refunds.pipeline is orders.pipeline
    refunds.connector("b", transport={"name": "datagen"})
    columns["extra"] = "INT"
    config["plan"][0]["limit"] = 50
    doc = refunds.document()
    assert doc == {
        "pipeline": "shop",
        "tables": {
            "orders": {
                "columns": {"id": "INT"},
                "connectors": [
                    {
                        "name": "a",
                        "transport": {"name": "datagen", "config": {"plan": [{"limit": 5}]}},
                    }
                ],
            },
            "refunds": {
                "columns": {"id": "INT"},
                "connectors": [{"name": "b", "transport": {"name": "datagen"}}],
            },
        },
    }
    doc["tables"]["orders"]["columns"]["x"] = "INT"  # a copy: the builder is unchanged
    assert "x" not in refunds.document()["tables"]["orders"]["columns"]
    assert refunds.build(PLUGINS).tables[0].connectors[0].transport.config["plan"][0]["limit"] == 5


def test_a_table_without_columns_infers_its_schema_as_in_yaml(tmp_path: Path) -> None:
    """``columns`` omitted: inferred on first discovery; hints and evolution as in YAML."""
    built = (
        Pipeline("p")
        .table("events", schema_hints={"id": "BIGINT"}, schema_evolution="rescue")
        .connector(
            "f", transport={"name": "file_input", "config": {"path": "in"}}, format={"name": "json"}
        )
        .build(PLUGINS, base_dir=tmp_path)
    )
    assert built == from_yaml(
        tmp_path,
        """
        pipeline: p
        tables:
          events:
            schema_hints: {id: BIGINT}
            schema_evolution: rescue
            connectors:
              - {name: f, transport: {name: file_input, config: {path: in}}, format: {name: json}}
        """,
    )
    assert built.tables[0].infers_schema and built.tables[0].columns == ()
    bad = (
        Pipeline("p")
        .table("events", schema_hints={"id": "BIGNUM"}, schema_evolution="rescu")
        .connector(
            "f", transport={"name": "file_input", "config": {"path": "in"}}, format={"name": "json"}
        )
    )
    errors = built_errors(bad, tmp_path)
    assert errors == yaml_errors(
        tmp_path,
        """
        pipeline: p
        tables:
          events:
            schema_hints: {id: BIGNUM}
            schema_evolution: rescu
            connectors:
              - {name: f, transport: {name: file_input, config: {path: in}}, format: {name: json}}
        """,
    )
    assert [e.split(":")[0] for e in errors] == [
        "tables.events.schema_hints.id",
        "tables.events.schema_evolution",
    ]


def test_importing_the_builder_from_the_package_imports_neither_airflow_nor_spark() -> None:
    """A DAG file's ``from airflow_connectors import Pipeline`` stays cheap."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from airflow_connectors import Pipeline\n"
        "Pipeline('p').table('t', columns={'id': 'INT'}).connector('c', transport={'name': 'datagen'})\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'airflow'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
