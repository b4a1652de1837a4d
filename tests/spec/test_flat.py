"""A connector's spec as Kafka Connect's flat ``Map<String,String>`` and back (issue
28): every value a string, nothing lost either way, values typed by the plugins'
models when read back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_connectors.catalog import PLUGINS, parse_pipeline
from airflow_connectors.spec.flat import (
    flat_key,
    flatten_connector,
    typed_value,
    unflatten_connector,
)
from airflow_connectors.spec.models import ConnectorSpec, TableSpec
from airflow_connectors.spec.validate import resolve_connector

TABLE: TableSpec = parse_pipeline(
    {"pipeline": "shop", "tables": {"orders": {"columns": {"id": "BIGINT"}}}}
).tables[0]

CONNECTORS: list[dict[str, Any]] = [
    {
        "name": "files",
        "labels": ["a", "b"],
        "start_after": ["x.loaded"],
        "tasks_max": 3,
        "transport": {"name": "file_input", "config": {"path": "/data", "min_file_age": 2.5}},
        "format": {"name": "csv", "config": {"delimiter": ";", "headers": True}},
        "trigger": {"schedule": "@hourly"},
        "errors": {"tolerance": "all", "retry.timeout": 5000},
        "freshness": "2h",
    },
    {
        "name": "kafka",
        "transport": {
            "name": "kafka_input",
            "config": {"topic": "orders", "bootstrap.servers": "b:9092", "group.id": "g"},
        },
        "format": {"name": "json", "config": {"update_format": "raw"}},
    },
    {
        "name": "gen",
        "paused": True,
        "transport": {
            "name": "datagen",
            "config": {"plan": [{"limit": 5, "fields": {"id": {"range": [1, 9]}}}], "seed": 7},
        },
    },
]


def _resolved(doc: dict[str, Any]) -> dict[str, Any]:
    spec = ConnectorSpec.model_validate(doc)
    return resolve_connector(spec, TABLE, plugins=PLUGINS).model_dump(mode="json")


def _models(flat: dict[str, str]) -> dict[str, Any]:
    t, f = flat.get("connector.class"), flat.get("format.name")
    return {
        "transport_model": PLUGINS.transports.get(t).Config if t else None,
        "format_model": PLUGINS.formats.get(f).Config if f else None,
    }


@pytest.mark.parametrize("doc", CONNECTORS, ids=[c["name"] for c in CONNECTORS])
def test_a_connector_flattens_to_strings_and_reads_back_the_same(doc: dict[str, Any]) -> None:
    connector = _resolved(doc)
    flat = flatten_connector(connector, f"shop.orders.{doc['name']}")
    assert flat["name"] == f"shop.orders.{doc['name']}"
    assert flat["connector.class"] == doc["transport"]["name"]
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in flat.items())
    back = unflatten_connector(flat, **_models(flat))
    back["name"] = doc["name"]
    # A field set to null has no key and reads back as its default, which is null: no
    # plugin field that takes null defaults to anything else.
    assert _resolved(back) == connector
    assert flatten_connector(_resolved(back), flat["name"]) == flat


def test_the_keys_and_values_kafka_connect_tools_read() -> None:
    flat = flatten_connector(_resolved(CONNECTORS[0]), "shop.orders.files")
    assert flat["tasks.max"] == "3"
    assert flat["labels"] == '["a", "b"]' and flat["start_after"] == '["x.loaded"]'
    assert flat["transport.config.path"] == "/data"
    assert flat["transport.config.min_file_age"] == "2.5"
    assert flat["format.name"] == "csv" and flat["format.config.delimiter"] == ";"
    assert flat["format.config.headers"] == "true"
    assert flat["errors.tolerance"] == "all" and flat["errors.retry.timeout"] == "5000"
    assert flat["trigger.schedule"] == "@hourly" and flat["freshness"] == "PT2H"
    assert "trigger.poll_interval" not in flat  # unset (null): no key
    kafka = flatten_connector(_resolved(CONNECTORS[1]), "shop.orders.kafka")
    assert kafka["transport.config.bootstrap.servers"] == "b:9092"  # librdkafka's own keys
    plan = flatten_connector(_resolved(CONNECTORS[2]), "g")["transport.config.plan"]
    assert json.loads(plan)[0]["limit"] == 5  # a list of objects: JSON text


def test_values_are_typed_by_the_fields_they_set() -> None:
    file_input = PLUGINS.transports.get("file_input").Config
    assert typed_value("true", file_input, "follow") is True
    assert typed_value("2.5", file_input, "min_file_age") == 2.5
    assert typed_value("7", file_input, "min_file_age") == 7
    assert typed_value("123", file_input, "path") == "123"  # a text field keeps its text
    assert typed_value("maybe", file_input, "follow") == "maybe"  # validation says why
    assert typed_value(True, file_input, "follow") is True  # JSON values as given
    assert typed_value("a, b", ConnectorSpec, "labels") == ["a", "b"]  # Kafka's LIST form
    assert typed_value('["a,b"]', ConnectorSpec, "labels") == ["a,b"]
    assert typed_value("5", ConnectorSpec, "tasks_max") == 5


def test_a_problem_belongs_to_its_flat_key() -> None:
    keys = {"transport.config.headers", "labels"}
    assert flat_key("transport.name", keys) == "connector.class"
    assert flat_key("transport.config.path", keys) == "transport.config.path"
    assert flat_key("transport.config.headers.x", keys) == "transport.config.headers"
    assert flat_key("labels[0]", keys) == "labels"
    assert flat_key("tasks_max", keys) == "tasks.max"
    assert flat_key("errors.retry_timeout", keys) == "errors.retry.timeout"
    assert flat_key("format", keys) == "format.name"
    assert flat_key("format.name", keys) == "format.name"
