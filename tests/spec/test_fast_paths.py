"""The shortcuts a DAG parse takes through the spec layer give the answers of the long
way: libyaml's parser (with PyYAML's Python composer) reads the same documents, lines
and duplicate keys as the pure-Python one, and the indexed ``label_carriers`` names
the carriers a scan of every connector names."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.spec import files as spec_files
from airflow_connectors.spec import types
from airflow_connectors.spec.graph import label_carriers
from airflow_connectors.spec.redact import mask_config, mask_url

DOCUMENT = """\
pipeline: p
tables:
  t:
    columns: {a: INT}
    connectors:
      - &base {name: f, transport: {name: file_input, config: {path: /x}}, format: {name: json}}
      - <<: *base
        name: g
        trigger: {on: new_data}
        flag: yes
        other: no
        real: true
      - name: h
        path: /y
        path: /z
  t:
    columns: {b: INT}
"""


def _loaders() -> list[Any]:
    fast, pure = spec_files._yaml_loaders()
    return [pure] if fast is None else [fast, pure]


@pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML without libyaml")
def test_libyaml_loader_reads_what_the_pure_one_reads() -> None:
    fast, pure = spec_files._yaml_loaders()
    assert fast is not None
    assert (
        spec_files._load_yaml_with(fast, DOCUMENT)[0]
        == spec_files._load_yaml_with(pure, DOCUMENT)[0]
    )


@pytest.mark.parametrize("loader", _loaders())
def test_yaml_12_booleans_and_merge_keys(loader: Any) -> None:
    assert spec_files._load_yaml_with(loader, DOCUMENT)[0]["tables"]["t"] == {
        "columns": {"b": "INT"}  # the last `t` wins (and is reported, below)
    }
    doc, _ = spec_files._load_yaml_with(loader, DOCUMENT.rsplit("  t:\n", 1)[0])
    g = doc["tables"]["t"]["connectors"][1]
    assert g["name"] == "g" and g["transport"] == {"name": "file_input", "config": {"path": "/x"}}
    assert (g["trigger"], g["flag"], g["other"], g["real"]) == (
        {"on": "new_data"},
        "yes",
        "no",
        True,
    )


@pytest.mark.parametrize("loader", _loaders())
def test_duplicate_keys_are_reported_with_lines_by_either_loader(loader: Any) -> None:
    _, duplicates = spec_files._load_yaml_with(loader, DOCUMENT)
    assert [(e.path, e.message.split(";")[0]) for e in duplicates] == [
        ("tables.t.connectors[2].path", "duplicate key 'path' at line 15 (first at line 14)"),
        ("tables.t", "duplicate key 't' at line 16 (first at line 3)"),
    ]


def test_invalid_yaml_keeps_the_pure_parsers_message_with_the_line() -> None:
    with pytest.raises(yaml.YAMLError) as exc:
        spec_files._load_yaml("a: [1, 2\nb: c: d\n")
    # The pure-Python parser's message quotes the offending line with a caret.
    assert "line 2, column 2:\n    b: c: d\n     ^" in str(exc.value)


def test_a_document_nested_too_deeply_raises_recursion_error_not_a_crash() -> None:
    depth = 100_000
    with pytest.raises(RecursionError):
        spec_files._load_yaml('{"pipeline": "p", "tables": ' + "[" * depth + "]" * depth + "}")


def _connector(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "transport": {"name": "file_input", "config": {"path": f"/data/{name}"}},
        "format": {"name": "json"},
        **extra,
    }


def test_label_carriers_matches_a_scan_of_every_connector() -> None:
    spec = parse_pipeline(
        {
            "pipeline": "p",
            "tables": {
                "t": {
                    "columns": {"a": "INT"},
                    "connectors": [
                        _connector("a", labels=["x", "y"]),
                        _connector("b", labels="y", start_after="x"),
                        _connector("c"),
                    ],
                },
                "u": {
                    "columns": {"a": "INT"},
                    "connectors": [
                        _connector("d", labels=["z", "x"]),
                        _connector("e", start_after=["x", "z"]),
                    ],
                },
            },
        }
    )

    def scan(labels: list[str]) -> list[str]:
        return [f"{t.name}.{c.name}" for t, c in spec.connectors() if set(labels) & set(c.labels)]

    for labels in ([], ["x"], ["y"], ["z"], ["x", "z"], ["z", "x"], ["y", "x"], ["nope"]):
        assert label_carriers(spec, labels) == scan(labels), labels
        assert label_carriers(spec, tuple(labels)) == scan(labels), labels
    assert label_carriers(spec, ["x", "y"]) == ["t.a", "t.b", "u.d"]  # declaration order
    # A second pipeline is indexed on its own, not answered from the first's index.
    other = parse_pipeline(
        {
            "pipeline": "q",
            "tables": {"v": {"columns": {"a": "INT"}, "connectors": [_connector("w", labels="x")]}},
        }
    )
    assert label_carriers(other, ["x"]) == ["v.w"]
    assert label_carriers(spec, ["x"]) == ["t.a", "u.d"]


@pytest.mark.parametrize(
    "value",
    [
        "/data/plain/path",
        "s3://bucket/key=value/x",
        "https://reader:hunter22@host/x",
        "https://host/x?token=abc&b=1",
        "name@example.com",
    ],
)
def test_mask_url_shortcut_masks_as_before(value: str) -> None:
    masked = mask_url(value)
    assert "hunter22" not in masked and "token=abc" not in masked
    if "@" not in value and "=" not in value:
        assert masked == value
    assert mask_config({"password": "p4ss", "nested": {"url": value}})["password"] == "***"


@pytest.mark.parametrize("name", sorted(types._SIMPLE_TYPES))
def test_plain_column_types_read_without_sqlglot_as_sqlglot_reads_them(name: str) -> None:
    for text in (
        name,
        name.lower(),
        name.capitalize(),
        f"{name} NOT NULL",
        f"  {name.lower()}   not   null ",
        f"{name}\tNULL",
    ):
        assert types.parse_type(text) == types.parse_type_with_sqlglot(text), text


@pytest.mark.parametrize(
    "text",
    ["DECIMAL(10, 2)", "VARCHAR(20) NOT NULL", "NOT NULL", "INT NULL NULL", "\u0131nt", "FLOAT"],
)
def test_other_column_types_go_to_sqlglot(text: str) -> None:
    try:
        expected: object = types.parse_type_with_sqlglot(text)
    except ValueError as e:
        expected = str(e)
    try:
        got: object = types.parse_type(text)
    except ValueError as e:
        got = str(e)
    assert got == expected
