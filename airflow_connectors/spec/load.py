"""Load a pipeline spec file (YAML, JSON or Feldera SQL) into a :class:`PipelineSpec`:
read it (:mod:`.files`), then validate it (:mod:`.validate`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from airflow_connectors.spec.errors import SpecError, SpecValidationError, path_str
from airflow_connectors.spec.files import read_spec_file
from airflow_connectors.spec.models import PipelineSpec
from airflow_connectors.spec.plugins import Plugins
from airflow_connectors.spec.validate import parse_document, parse_pipeline, validate_pipeline

# Also importable from here, where they lived before the split.
__all__ = [
    "SpecError",
    "SpecValidationError",
    "load_pipeline",
    "load_pipeline_keeping_valid",
    "parse_pipeline",
    "path_str",
    "validate_pipeline",
]


def load_pipeline(
    path: str | Path, *, plugins: Plugins, pipeline: str | None = None
) -> PipelineSpec:
    """Read a ``.yaml``/``.yml``/``.json`` spec or a ``.sql`` file of CREATE TABLE
    statements (pipeline name = file stem unless ``pipeline`` is given) and validate it."""
    spec_file = read_spec_file(path, pipeline=pipeline)
    return parse_document(
        spec_file.doc,
        name=spec_file.pipeline,
        base_dir=spec_file.base_dir,
        source=spec_file.source,
        plugins=plugins,
        earlier=spec_file.problems,
    )


#: The JSON path of one connector of a table: ``tables.<table>.connectors[<i>]...``.
_CONNECTOR_PATH = re.compile(r"^tables\.(?P<table>[A-Za-z0-9_\-]+)\.connectors\[(?P<i>\d+)\]")


def load_pipeline_keeping_valid(
    path: str | Path, *, plugins: Plugins, pipeline: str | None = None
) -> tuple[PipelineSpec, dict[tuple[str, str], list[str]]]:
    """:func:`load_pipeline`, except that connectors with problems of their own are left
    out instead of failing the whole spec: returns the pipeline of the valid connectors
    and ``(table, connector) -> problem lines`` of the ones left out. Problems outside
    a connector (the file, the pipeline, a table's columns or sink), or of a connector
    without a usable name, still fail the whole spec (:class:`SpecValidationError`).
    Leaving a connector out can break another (a ``start_after`` of a label only it
    carried): that one is left out too, with its own problem."""
    import copy

    spec_file = read_spec_file(path, pipeline=pipeline)
    doc = spec_file.doc
    invalid: dict[tuple[str, str], list[str]] = {}
    for _ in range(20):  # each round leaves out at least one connector
        try:
            spec = parse_document(
                doc,
                name=spec_file.pipeline,
                base_dir=spec_file.base_dir,
                source=spec_file.source,
                plugins=plugins,
                earlier=spec_file.problems,
            )
            return spec, invalid
        except SpecValidationError as e:
            found = _connector_problems(doc, e.errors)
            if found is None:
                raise
            doc = copy.deepcopy(doc)
            for (table, index), (name, lines) in sorted(found.items(), reverse=True):
                invalid[(table, name)] = lines
                del doc["tables"][table]["connectors"][index]
    raise SpecValidationError([SpecError("", "too many invalid connectors")], spec_file.source)


def _connector_problems(
    doc: Any, errors: list[SpecError]
) -> dict[tuple[str, int], tuple[str, list[str]]] | None:
    """``(table, index) -> (connector name, problem lines)`` when every problem belongs
    to a named connector of ``doc``; None otherwise."""
    found: dict[tuple[str, int], tuple[str, list[str]]] = {}
    tables = doc.get("tables") if isinstance(doc, dict) else None
    if not isinstance(tables, dict):
        return None
    for err in errors:
        m = _CONNECTOR_PATH.match(err.path)
        if m is None:
            return None
        table, index = m.group("table"), int(m.group("i"))
        connectors = (tables.get(table) or {}).get("connectors")
        if not isinstance(connectors, list) or index >= len(connectors):
            return None
        name = connectors[index].get("name") if isinstance(connectors[index], dict) else None
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_\-]+", name):
            return None
        found.setdefault((table, index), (name, []))[1].append(str(err))
    return found or None
