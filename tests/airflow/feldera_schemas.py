"""Feldera's response schemas for the Feldera-shaped routes, derived from Feldera's own
OpenAPI document (``openapi.json`` at the root of feldera/feldera, commit
5c7931d09fc37e0976143e50a81169dbd98ec0cc, 2026-08-21, ``info.version`` 0.337.0): the
schemas below ``ControllerStatus``, ``InputEndpointStatus``, ``ErrorResponse`` and
``PipelineSelectedInfo``, as ``feldera_schemas.json`` beside this file. Only that subset
is committed; ``PipelineSelectedInfo`` keeps its required properties and its
``ClientMetadata`` (its optional ones, the program's whole compiled description, are left
out: the answers here send none of them).

``python tests/airflow/feldera_schemas.py <openapi.json>`` writes it again from a copy of
Feldera's document; :func:`validate` checks an answer against one of them with an
OpenAPI 3.0 validator (``nullable``, ``allOf`` and the rest as OpenAPI means them)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SUBSET = HERE / "feldera_schemas.json"
SOURCE = (
    "feldera/feldera openapi.json at commit 5c7931d09fc37e0976143e50a81169dbd98ec0cc "
    "(2026-08-21, info.version 0.337.0)"
)
ROOTS = ("ControllerStatus", "InputEndpointStatus", "ErrorResponse", "PipelineSelectedInfo")


def _pruned(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """``PipelineSelectedInfo`` with only its required properties."""
    if name != "PipelineSelectedInfo":
        return schema
    parts = []
    for part in schema["allOf"]:
        if "properties" in part:
            keep = set(part.get("required", []))
            part = {
                **part,
                "properties": {k: v for k, v in part["properties"].items() if k in keep},
            }
        parts.append(part)
    return {**schema, "allOf": parts}


def derive(document: dict[str, Any]) -> dict[str, Any]:
    """The schemas of ``ROOTS`` and every schema they refer to."""
    schemas = {n: _pruned(n, v) for n, v in document["components"]["schemas"].items()}
    wanted: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                name = ref.rsplit("/", 1)[-1]
                if name not in wanted:
                    wanted.add(name)
                    walk(schemas[name])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for root in ROOTS:
        wanted.add(root)
        walk(schemas[root])
    return {
        "source": SOURCE,
        "components": {"schemas": {n: schemas[n] for n in sorted(wanted)}},
    }


def validate(instance: Any, schema_name: str) -> None:
    """Raises ``jsonschema.ValidationError`` when ``instance`` is not a valid
    ``schema_name`` of Feldera's document."""
    from openapi_schema_validator import OAS30Validator

    subset = json.loads(SUBSET.read_text())
    schema = {"$ref": f"#/components/schemas/{schema_name}", **subset}
    OAS30Validator(schema).validate(instance)


if __name__ == "__main__":
    document = json.loads(Path(sys.argv[1]).read_text())
    SUBSET.write_text(json.dumps(derive(document), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SUBSET}")
