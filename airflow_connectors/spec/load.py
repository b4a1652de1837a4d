"""Load a pipeline spec file (YAML, JSON or Feldera SQL) into a :class:`PipelineSpec`:
read it (:mod:`.files`), then validate it (:mod:`.validate`)."""

from __future__ import annotations

from pathlib import Path

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
