"""The spec layer validates against the plugins it is given, and one function checks a
connector's plugin configs, at load time and after an Airflow task templates them."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_connectors.catalog import PLUGINS, parse_pipeline, resolve_connector
from airflow_connectors.spec import Plugins, SpecValidationError, validate_pipeline
from airflow_connectors.spec import parse_pipeline as parse_with
from airflow_connectors.spec.models import ConnectorSpec


class Lookup:
    """Plugins of one kind from a dict, as a caller may pass them."""

    def __init__(self, plugins: dict[str, Any]) -> None:
        self.plugins = plugins

    def names(self) -> list[str]:
        return sorted(self.plugins)

    def __contains__(self, name: str) -> bool:
        return name in self.plugins

    def get(self, name: str) -> Any:
        return self.plugins[name]


def doc(transport: dict[str, Any], **connector: Any) -> dict[str, Any]:
    return {
        "pipeline": "p",
        "tables": {
            "t": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [{"name": "c", "transport": transport, **connector}],
            }
        },
    }


GENERATED = {"name": "generated", "config": {"plan": [{"limit": 3}]}}
DATAGEN = {"name": "datagen", "config": {"plan": [{"limit": 3}]}}


def test_validation_looks_plugins_up_in_what_it_is_given() -> None:
    only_generated = Plugins(
        transports=Lookup({"generated": PLUGINS.transports.get("datagen")}),
        formats=Lookup({}),
        sinks=PLUGINS.sinks,
    )
    spec = parse_with(doc(GENERATED), plugins=only_generated)
    assert spec.table("t").connector("c").transport.name == "generated"

    problems = validate_pipeline(doc({"name": "datagen"}), plugins=only_generated)
    assert [(e.path, e.message) for e in problems] == [
        (
            "tables.t.connectors[0].transport.name",
            "transport 'datagen' is not available yet; available transports: generated",
        )
    ]


def test_resolve_connector_reports_paths_from_the_connector() -> None:
    table = parse_pipeline(doc(DATAGEN)).table("t")
    rendered = ConnectorSpec.model_validate(
        {"name": "c", "transport": {"name": "datagen", "config": {"plan": [{"limitt": 3}]}}}
    )
    with pytest.raises(SpecValidationError) as e:
        resolve_connector(rendered, table)
    assert [str(err) for err in e.value.errors] == [
        "transport.config.plan[0].limitt: unknown field 'limitt' (did you mean 'limit'?); "
        "allowed fields: rate, limit, worker_chunk_size, fields"
    ]


def test_resolve_connector_gives_the_configs_as_loading_does() -> None:
    table = parse_pipeline(doc(DATAGEN)).table("t")
    written = ConnectorSpec.model_validate({"name": "c", "transport": DATAGEN})
    assert resolve_connector(written, table) == table.connector("c")
