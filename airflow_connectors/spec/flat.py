"""A connector's spec as Kafka Connect writes a connector config: one flat
``Map<String,String>`` (issue 28), and back.

The keys:

| key | the spec's |
|---|---|
| ``name`` | the connector's name, ``<pipeline>.<table>.<connector>`` |
| ``connector.class`` | ``transport.name`` (the transport plugin) |
| ``tasks.max`` | ``tasks_max`` |
| ``transport.config.<field>`` | each field of ``transport.config`` |
| ``format.name``, ``format.config.<field>`` | the format and each field of its config |
| ``errors.tolerance``, ``errors.retry.timeout``, ``trigger.schedule``, ... | each field of a nested settings object (``errors``, ``trigger``) |
| ``paused``, ``labels``, ``max_batch_size``, ... | the connector's other fields, by their names |

Every value is a string: text as it is, numbers and booleans as JSON writes them
(``5``, ``true``), lists and objects as JSON text (``["a", "b"]``). A field left unset
(null) has no key. Reading a map back, a value becomes a number, boolean, list or object
where the field takes one (by its plugin's model) and the text is that JSON; values that
are already JSON numbers, booleans, lists or objects are taken as they are, and a list
field also takes Kafka Connect's comma-separated form (``a,b``).

Pure: no Airflow, no Spark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

#: Keys that name the spec's fields differently.
CLASS_KEY = "connector.class"
TASKS_KEY = "tasks.max"
TRANSPORT_PREFIX = "transport.config."
FORMAT_NAME_KEY = "format.name"
FORMAT_PREFIX = "format.config."


def flat_value(value: Any) -> str | None:
    """``value`` as a Kafka Connect config value (None stays None: no key)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)


def nested_models() -> dict[str, type[BaseModel]]:
    """The connector's fields that are settings objects of their own (``errors``,
    ``trigger``), flattened one level (``errors.tolerance``)."""
    from airflow_connectors.spec.models import ErrorsSpec, TriggerSpec

    return {"errors": ErrorsSpec, "trigger": TriggerSpec}


def dumped_names(model: type[BaseModel]) -> dict[str, str]:
    """A model's field names as its dump writes them, by field name: the serialization
    alias where it has one (``retry.timeout``)."""
    return {n: f.serialization_alias or n for n, f in model.model_fields.items()}


def flatten_connector(connector: Mapping[str, Any], name: str) -> dict[str, str]:
    """The connector (as its spec dumps it, secrets already masked) as a flat config
    named ``name``."""
    out: dict[str, str] = {"name": name}
    nested = nested_models()
    for key, value in connector.items():
        if value is None or key == "name":
            continue
        if key == "transport" and isinstance(value, Mapping):
            out[CLASS_KEY] = str(value.get("name"))
            _put_config(out, TRANSPORT_PREFIX, value.get("config"))
        elif key == "format" and isinstance(value, Mapping):
            out[FORMAT_NAME_KEY] = str(value.get("name"))
            _put_config(out, FORMAT_PREFIX, value.get("config"))
        elif key == "tasks_max":
            out[TASKS_KEY] = json.dumps(value)
        elif key in nested and isinstance(value, Mapping):
            names = dumped_names(nested[key])
            for sub, v in value.items():
                text = flat_value(v)
                if text is not None:
                    out[f"{key}.{names.get(sub, sub)}"] = text
        else:
            text = flat_value(value)
            if text is not None:
                out[key] = text
    return out


def _put_config(out: dict[str, str], prefix: str, config: Any) -> None:
    if not isinstance(config, Mapping):
        return
    for field, value in config.items():
        text = flat_value(value)
        if text is not None:
            out[f"{prefix}{field}"] = text


def unflatten_connector(
    flat: Mapping[str, Any],
    *,
    transport_model: type[BaseModel] | None = None,
    format_model: type[BaseModel] | None = None,
) -> dict[str, Any]:
    """The spec document of a flat config (its ``name`` as given: the caller checks and
    shortens it). ``transport_model``/``format_model``: the plugins' config models, for
    the fields' types (None: values stay as given). A nested ``transport`` or
    ``format`` object (the spec's own shape) is taken too."""
    from airflow_connectors.spec.models import ConnectorSpec

    doc: dict[str, Any] = {}
    nested = nested_models()
    for key, value in flat.items():
        if key == CLASS_KEY:
            doc.setdefault("transport", {})["name"] = value
        elif key.startswith(TRANSPORT_PREFIX):
            field = key[len(TRANSPORT_PREFIX) :]
            config = doc.setdefault("transport", {}).setdefault("config", {})
            config[field] = typed_value(value, transport_model, field)
        elif key == FORMAT_NAME_KEY:
            doc.setdefault("format", {})["name"] = value
        elif key.startswith(FORMAT_PREFIX):
            field = key[len(FORMAT_PREFIX) :]
            config = doc.setdefault("format", {}).setdefault("config", {})
            config[field] = typed_value(value, format_model, field)
        elif key == TASKS_KEY:
            doc["tasks_max"] = typed_value(value, ConnectorSpec, "tasks_max")
        elif "." in key and key.split(".", 1)[0] in nested:
            head, sub = key.split(".", 1)
            model = nested[head]
            by_alias = {alias: n for n, alias in dumped_names(model).items()}
            doc.setdefault(head, {})[sub] = typed_value(value, model, by_alias.get(sub, sub))
        elif key in ("transport", "format") and isinstance(value, Mapping):
            doc.setdefault(key, {}).update(value)
        else:
            doc[key] = typed_value(value, ConnectorSpec, key)
    return doc


def typed_value(value: Any, model: type[BaseModel] | None, field: str) -> Any:
    """A flat config's ``value`` for ``model``'s ``field``: the JSON it holds where the
    field takes a number, boolean, list or object of that kind (a list also from
    ``a,b``), else the text as it is."""
    if not isinstance(value, str) or model is None:
        return value
    kinds = json_kinds(model, field)
    if not kinds - {"string", "null"}:
        return value
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = _NOT_JSON
    if parsed is not _NOT_JSON and _kind(parsed) in kinds:
        return parsed
    if "array" in kinds and "string" not in kinds and not value.lstrip().startswith("["):
        return [part.strip() for part in value.split(",")] if value.strip() else []
    return value


_NOT_JSON = object()


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def json_kinds(model: type[BaseModel], field: str) -> set[str]:
    """The JSON types ``model``'s ``field`` (by name or alias) takes; every type when the
    model does not know the field (pydantic's validation says what is wrong)."""
    schema = _schema(model)
    props = schema.get("properties", {})
    prop = props.get(field)
    if prop is None:
        info = model.model_fields.get(field)
        alias = info.alias if info is not None else None
        prop = props.get(alias) if alias else None
    if prop is None:
        return {"string", "integer", "number", "boolean", "array", "object", "null"}
    kinds = _prop_kinds(prop, schema.get("$defs", {}))
    if "number" in kinds:  # a number field reads 5 as well as 5.5
        kinds.add("integer")
    return kinds


_SCHEMAS: dict[type[BaseModel], dict[str, Any]] = {}


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = _SCHEMAS.get(model)
    if schema is None:
        try:
            schema = model.model_json_schema()
        except Exception:  # a field pydantic cannot describe: every value as given
            schema = {}
        _SCHEMAS[model] = schema
    return schema


def _prop_kinds(prop: Mapping[str, Any], defs: Mapping[str, Any], depth: int = 0) -> set[str]:
    if depth > 8:
        return {"object"}
    kinds: set[str] = set()
    kind = prop.get("type")
    if isinstance(kind, str):
        kinds.add(kind)
    elif isinstance(kind, list):
        kinds.update(k for k in kind if isinstance(k, str))
    if "enum" in prop or "const" in prop:
        values = prop.get("enum", [prop.get("const")])
        kinds.update(_kind(v) for v in values)
    ref = prop.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1], {})
        kinds.update(_prop_kinds(target, defs, depth + 1) or {"object"})
    for key in ("anyOf", "oneOf", "allOf"):
        for option in prop.get(key, []):
            kinds.update(_prop_kinds(option, defs, depth + 1))
    return kinds


#: A validation path's list indexes (``labels[0]``).
_INDEX = re.compile(r"\[\d+\]")


def flat_key(path: str, keys: set[str]) -> str:
    """The flat config key a validation problem at the spec's ``path`` belongs to
    (``transport.name`` -> ``connector.class``, ``labels[0]`` -> ``labels``,
    ``transport.config.headers.x`` -> ``transport.config.headers``), given the map's
    ``keys`` and the known ones."""
    nested = nested_models()
    path = _INDEX.sub("", path)
    if path in keys and path not in ("transport", "format"):
        return path  # a key as given (an unknown one, or a spec name such as tasks_max)
    head = path.split(".", 1)[0]
    if path in ("", "transport", "transport.name", "transport.config"):
        return CLASS_KEY if path else ""
    if path in ("format", "format.config"):
        return FORMAT_NAME_KEY
    if path == "tasks_max":
        return TASKS_KEY
    if head in nested and "." in path:
        names = dumped_names(nested[head])
        sub = path.split(".", 1)[1]
        field = sub.split(".", 1)[0]
        return f"{head}.{names.get(field, sub)}"
    for prefix in (TRANSPORT_PREFIX, FORMAT_PREFIX):
        if path.startswith(prefix):
            field = path[len(prefix) :]
            while field and f"{prefix}{field}" not in keys and "." in field:
                field = field.rsplit(".", 1)[0]
            return f"{prefix}{field}"
    if path == FORMAT_NAME_KEY:
        return path
    return head
