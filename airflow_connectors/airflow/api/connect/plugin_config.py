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

#: Kafka's ConfigDef types by JSON type: an object is JSON text (Kafka has no map type).
_JSON_TYPES = {
    "string": "STRING",
    "integer": "LONG",
    "number": "DOUBLE",
    "boolean": "BOOLEAN",
    "array": "LIST",
    "object": "STRING",
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


def definitions(
    config: type[BaseModel], *, group: str = "", prefix: str = "", order: int = 0
) -> list[dict[str, Any]]:
    """Kafka Connect's ConfigKeyInfo of each field, from the model's JSON schema: name
    (after ``prefix``), type (Kafka's ConfigDef type: ``PASSWORD`` for a secret),
    whether it is required, its default as a config string (null when none), importance
    (``HIGH`` when required, else ``MEDIUM``), its ``Field(description=...)``, ``group``,
    ``order_in_group`` (counting from ``order``), width ``NONE``, display name (the schema's
    title) and no dependents."""
    from airflow_connectors.spec.flat import flat_value

    schema = config.model_json_schema()
    required = set(schema.get("required", []))
    secrets = set(secret_fields(config))
    out: list[dict[str, Any]] = []
    properties = schema.get("properties", {})
    fields = config.model_fields
    names = [fields[n].alias or n for n in field_order(config)]
    by_alias = {fields[n].alias or n: n for n in fields}
    for name in sorted(properties, key=lambda n: names.index(n) if n in names else len(names)):
        prop = properties[name]
        kinds = [prop.get("type")] + [a.get("type") for a in prop.get("anyOf", [])]
        kind = next((k for k in kinds if k and k != "null"), "object")
        if "default" in prop or name in required:
            default = prop.get("default")
        else:  # a default_factory: the schema leaves it out
            field = fields[by_alias.get(name, name)]
            default = _jsonable(field.get_default(call_default_factory=True))
        secret = name in secrets or by_alias.get(name, name) in secrets
        out.append(
            {
                "name": f"{prefix}{name}",
                "type": "PASSWORD" if secret else _JSON_TYPES.get(kind, "STRING"),
                "required": name in required,
                "default_value": flat_value(default),
                "importance": "HIGH" if name in required else "MEDIUM",
                "documentation": prop.get("description", ""),
                "group": group,
                "order_in_group": order + len(out),
                "width": "NONE",
                "display_name": prop.get("title", name),
                "dependents": [],
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
    """Kafka Connect's ConfigInfos of one plugin's config: one entry per field, errors
    where the value fails. With ``check_connections``, the connections the config names
    are tested (exist, and their service answers) once the config itself is valid; a
    failure is an error of the field that names the connection. Values may be given as
    Kafka Connect's strings (``"true"``, ``"5"``, ``'["a"]'``) or as JSON values."""
    import re

    from airflow_connectors.spec.errors import SpecError, validated
    from airflow_connectors.spec.flat import typed_value

    values = {k: typed_value(v, config, k) for k, v in values.items()}
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
    defs = definitions(config, group=plugin)
    shown = mask_config(values, secret_fields(config))  # never echo a secret
    extra = config.model_config.get("extra") == "allow"  # kafka_input's librdkafka settings
    return config_infos(plugin, [plugin], defs, shown, errors, extra_allowed=extra)


def config_infos(
    name: str,
    groups: list[str],
    defs: list[dict[str, Any]],
    shown: Mapping[str, Any],
    errors: Mapping[str, list[str]],
    *,
    extra_allowed: bool = False,
) -> dict[str, Any]:
    """Kafka Connect's ConfigInfos: each definition with its value (``shown``, masked,
    as a config string) and errors, then the keys given that no definition names (passed
    on as given when ``extra_allowed``, else with their errors)."""
    from airflow_connectors.spec.flat import flat_value

    known = {d["name"] for d in defs}
    configs = [
        {
            "definition": d,
            "value": _value_info(
                d["name"],
                flat_value(shown[d["name"]]) if d["name"] in shown else d["default_value"],
                errors.get(d["name"], []),
            ),
        }
        for d in defs
    ]
    extras = sorted(set(shown) - known - set(errors)) if extra_allowed else []
    unknown = sorted(set(errors) - known)
    for n, field in enumerate([*extras, *unknown]):
        configs.append(
            {
                "definition": {
                    "name": field,
                    "type": "STRING",
                    "required": False,
                    "default_value": None,
                    "importance": "LOW",
                    "documentation": (
                        "passed to the client library as given" if field in extras else ""
                    ),
                    "group": groups[0],
                    "order_in_group": len(defs) + n,
                    "width": "NONE",
                    "display_name": field,
                    "dependents": [],
                },
                "value": _value_info(field, flat_value(shown.get(field)), errors.get(field, [])),
            }
        )
    return {
        "name": name,
        "error_count": sum(len(v) for v in errors.values()),
        "groups": groups,
        "configs": configs,
    }


def _value_info(name: str, value: str | None, errors: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "recommended_values": [],
        "errors": errors,
        "visible": True,
    }


def connector_definitions(
    transport: type[BaseModel] | None,
    transport_name: str,
    fmt: type[BaseModel] | None,
    format_name: str,
) -> list[dict[str, Any]]:
    """The ConfigKeyInfo of every key of a connector's flat config
    (:mod:`airflow_connectors.spec.flat`): the connector's own fields (group
    ``connector``), ``errors.*`` and ``trigger.*``, then the transport's and the
    format's fields (groups named after the plugins)."""
    from airflow_connectors.spec.flat import dumped_names, nested_models
    from airflow_connectors.spec.models import ConnectorSpec

    out: list[dict[str, Any]] = []
    nested = nested_models()
    for d in definitions(ConnectorSpec, group="connector"):
        name = d["name"]
        if name == "transport":
            out.append(
                {
                    **d,
                    "name": "connector.class",
                    "type": "STRING",
                    "default_value": None,
                    "documentation": "The transport plugin that reads the data (its name)",
                    "display_name": "Connector class",
                }
            )
        elif name == "format":
            out.append(
                {
                    **d,
                    "name": "format.name",
                    "type": "STRING",
                    "documentation": "The format plugin that decodes the transport's bytes "
                    "(its name), for transports that need one",
                    "display_name": "Format",
                }
            )
        elif name == "name":
            out.append(
                {
                    **d,
                    "documentation": "The connector's name: <pipeline>.<table>.<connector>",
                }
            )
        elif name == "tasks_max":
            out.append({**d, "name": "tasks.max"})
        elif name in nested:
            names = dumped_names(nested[name])
            for sub in definitions(nested[name], group=name):
                field = names.get(sub["name"], sub["name"])
                out.append({**sub, "name": f"{name}.{field}"})
        else:
            out.append(d)
    if transport is not None:
        out += definitions(transport, group=transport_name, prefix="transport.config.")
    if fmt is not None:
        out += definitions(fmt, group=format_name, prefix="format.config.")
    for n, d in enumerate(out):
        d["order_in_group"] = n
    return out


def validate_connector(
    flat: Mapping[str, Any],
    *,
    table: Any = None,
    check_connections: ConnectionCheck | None = None,
) -> dict[str, Any]:
    """Kafka Connect's ConfigInfos of a whole connector's flat config (its
    ``connector.class``, ``transport.config.*``, ``format.*``, ...): the checks a spec
    load runs on a connector, the transport against ``table``'s columns when the table
    is given (a :class:`~airflow_connectors.spec.models.TableSpec`). Errors belong to
    the flat keys; secrets are masked in the values shown."""
    from airflow_connectors.catalog import PLUGINS as plugins
    from airflow_connectors.spec.errors import SpecError, SpecValidationError, validated
    from airflow_connectors.spec.flat import flat_key, flatten_connector, unflatten_connector
    from airflow_connectors.spec.models import ConnectorSpec, TableSpec
    from airflow_connectors.spec.validate import resolve_connector, without_bad_fields

    tname = str(flat.get("connector.class") or "")
    fname = str(flat.get("format.name") or "")
    tmodel = plugins.transports.get(tname).Config if tname in plugins.transports else None
    fmodel = plugins.formats.get(fname).Config if fname in plugins.formats else None
    doc = unflatten_connector(flat, transport_model=tmodel, format_model=fmodel)
    name = str(doc.get("name") or "connector")
    doc["name"] = name.rsplit(".", 1)[-1]
    problems: list[SpecError] = []
    spec = validated([], ConnectorSpec, doc, problems)
    if spec is None:  # the plugins are checked too, with the bad fields at their defaults
        spec = without_bad_fields(doc, "connector")
    if spec is not None:
        checked = table if isinstance(table, TableSpec) else TableSpec(name="table")
        try:
            resolve_connector(spec, checked, plugins=plugins, check_columns=table is not None)
        except SpecValidationError as e:
            problems.extend(e.errors)
    keys = set(flat)
    defs = connector_definitions(tmodel, tname, fmodel, fname)
    known = keys | {d["name"] for d in defs}
    errors: dict[str, list[str]] = {}
    defined = {d["name"] for d in defs}
    for spec_error in problems:
        key = flat_key(spec_error.path, known)
        if (
            key not in defined
            and not key.startswith(("transport.config.", "format.config."))
            and spec_error.message.startswith("unknown field")
        ):
            spec_error = SpecError(
                spec_error.path,
                f"unknown key {key!r}: not a field of the connector, nor of its transport "
                "(transport.config.<field>) or format (format.config.<field>); this "
                "answer's definitions list the keys",
            )
        # Named by the flat key the caller gave (tasks.max, not tasks_max).
        errors.setdefault(key, []).append(
            f"{key}: {spec_error.message}" if key else spec_error.message
        )
    if check_connections is not None and not errors and tmodel is not None:
        config = doc.get("transport", {}).get("config", {})
        for field, problem in check_connections(config).items():
            errors.setdefault(f"transport.config.{field}", []).append(problem)
    masked = masked_connector(doc)
    shown = flatten_connector(masked, name)
    unknown = {k: "" if flat[k] is None else str(flat[k]) for k in keys - set(shown)}
    shown.update(mask_config(unknown))  # as given (a secret-named key masked)
    groups = [
        "connector",
        "errors",
        "trigger",
        *([tname] if tmodel else []),
        *([fname] if fmodel else []),
    ]
    return config_infos(
        tname or name,
        groups,
        defs,
        shown,
        errors,
        extra_allowed=bool(tmodel is not None and tmodel.model_config.get("extra") == "allow"),
    )


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
