"""Plugin config introspection for the REST API, without Airflow: the plugin registries,
Kafka Connect's ConfigKeyInfo of each field (from the model's JSON schema), config
validation (ConfigInfos) and the masking of a connector's secrets by its plugins'
models. Validation takes the check of named Airflow connections as an argument (the
API passes :func:`airflow_connectors.airflow.connections.check_connections`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel

from airflow_connectors.airflow.api.connect.errors import ApiError
from airflow_connectors.spec.config import field_order
from airflow_connectors.spec.redact import mask_config, secret_fields

PluginType = Literal["source", "converter", "sink"]

_JSON_TYPES = {
    "string": "STRING",
    "integer": "LONG",
    "number": "DOUBLE",
    "boolean": "BOOLEAN",
    "array": "LIST",
    "object": "MAP",
}


def registries() -> list[tuple[PluginType, Any]]:
    """The plugin registries by Kafka Connect plugin type."""
    from airflow_connectors.formats import FORMATS
    from airflow_connectors.sinks import SINKS
    from airflow_connectors.transports import TRANSPORTS

    return [("source", TRANSPORTS), ("converter", FORMATS), ("sink", SINKS)]


def plugin_model(name: str, kind: str | None = None) -> type[BaseModel]:
    """The config model of plugin ``name``; of the given type (``source``, ``converter``,
    ``sink``) when given, else of the first type that has one of that name."""
    for k, registry in registries():
        if name in registry and kind in (None, k):
            model: type[BaseModel] = registry.get(name).Config
            return model
    known = ", ".join(f"{n} ({k})" for k, r in registries() for n in r.names())
    raise ApiError(404, f"Plugin {name!r} not found; the plugins are: {known}")


def definitions(config: type[BaseModel]) -> list[dict[str, Any]]:
    """Kafka Connect's ConfigKeyInfo of each field, from the model's JSON schema: its
    type, whether it is required, its default and its ``Field(description=...)``."""
    schema = config.model_json_schema()
    required = set(schema.get("required", []))
    out = []
    properties = schema.get("properties", {})
    fields = config.model_fields
    order = [fields[n].alias or n for n in field_order(config)]
    for name in sorted(properties, key=lambda n: order.index(n) if n in order else len(order)):
        prop = properties[name]
        kinds = [prop.get("type")] + [a.get("type") for a in prop.get("anyOf", [])]
        kind = next((k for k in kinds if k and k != "null"), "object")
        if "default" in prop or name in required:
            default = prop.get("default")
        else:  # a default_factory: the schema leaves it out
            field = config.model_fields[name]
            default = _jsonable(field.get_default(call_default_factory=True))
        out.append(
            {
                "name": name,
                "type": _JSON_TYPES.get(kind, "STRING"),
                "required": name in required,
                "default_value": default,
                "documentation": prop.get("description", ""),
            }
        )
    return out


def _jsonable(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value, fallback=str)


#: ``check(config) -> {field: problem}`` of the connections a config names.
ConnectionCheck = Callable[[Mapping[str, Any]], Mapping[str, str]]


def validate(
    plugin: str,
    config: type[BaseModel],
    values: dict[str, Any],
    check_connections: ConnectionCheck | None = None,
) -> dict[str, Any]:
    """Kafka Connect's ConfigInfos: one entry per field, errors where the value fails.
    With ``check_connections``, the connections the config names are tested (exist,
    and their service answers) once the config itself is valid; a failure is an error
    of the field that names the connection."""
    import re

    from airflow_connectors.spec.errors import SpecError, validated

    errors: dict[str, list[str]] = {}
    problems: list[SpecError] = []
    # The messages the CLI's validate gives: the field's JSON path in the config, a
    # did-you-mean for unknown fields, the value that failed (a URL's password masked).
    validated([], config, values, problems)
    for spec_error in problems:
        path = spec_error.path
        field = re.split(r"[.\[]", path, maxsplit=1)[0] if path else ""
        errors.setdefault(field, []).append(str(spec_error))
    if check_connections is not None and not errors:
        for field, problem in check_connections(values).items():
            errors.setdefault(field, []).append(problem)
    defs = definitions(config)
    known = {d["name"] for d in defs}
    shown = mask_config(values, secret_fields(config))  # never echo a secret
    configs = [
        {
            "definition": {**d, "group": plugin, "order": i},
            "value": {
                "name": d["name"],
                "value": shown.get(d["name"], d["default_value"]),
                "errors": errors.get(d["name"], []),
                "recommended_values": [],
                "visible": True,
            },
        }
        for i, d in enumerate(defs)
    ]
    if config.model_config.get("extra") == "allow":  # kafka_input's librdkafka settings
        for field in sorted(set(values) - known - set(errors)):
            configs.append(
                {
                    "definition": {
                        "name": field,
                        "type": "STRING",
                        "required": False,
                        "group": plugin,
                        "documentation": "passed to the client library as given",
                    },
                    "value": {
                        "name": field,
                        "value": shown.get(field),
                        "errors": [],
                        "recommended_values": [],
                        "visible": True,
                    },
                }
            )
    for field in sorted(set(errors) - known):  # unknown keys (extra="forbid")
        configs.append(
            {
                "definition": {"name": field, "type": "STRING", "required": False, "group": plugin},
                "value": {
                    "name": field,
                    "value": shown.get(field),
                    "errors": errors[field],
                    "recommended_values": [],
                    "visible": True,
                },
            }
        )
    return {
        "name": plugin,
        "error_count": sum(len(v) for v in errors.values()),
        "groups": [plugin],
        "configs": configs,
    }


def masked_connector(connector: dict[str, Any]) -> dict[str, Any]:
    """A connector config with URL passwords and secret fields masked, including those
    its transport or format model marks secret."""
    out = dict(mask_config(connector))
    for part, registry in (("transport", "source"), ("format", "converter")):
        doc = connector.get(part)
        if isinstance(doc, dict) and isinstance(doc.get("config"), dict):
            plugins = dict(registries())[registry]
            model = plugins.get(doc["name"]).Config if doc.get("name") in plugins else None
            out[part] = {**out[part], "config": mask_config(doc["config"], secret_fields(model))}
    return out
