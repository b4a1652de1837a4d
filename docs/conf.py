"""Sphinx configuration of the airflow-connectors documentation.

Sphinx with MyST Markdown, as Airflow and astronomer-cosmos use: the pages stay Markdown
(readable on a forge as they are), and Sphinx gives cross-page links checked at build
time, a search index and directives that render the plugins' settings from their config
models (``_ext/plugin_settings.py``). Build: ``make docs`` (warnings are errors)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

import airflow_connectors

project = "airflow-connectors"
author = "airflow-connectors contributors"
version = release = airflow_connectors.__version__
extensions = ["myst_parser", "plugin_settings", "sphinx.ext.autodoc"]
myst_enable_extensions = ["colon_fence", "deflist"]
# Anchors for headings down to ###, as a forge renders them: [text](page.md#a-heading).
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
nitpicky = True
# The extension contracts' docstrings (autodoc) name types Sphinx has no page for
# (pyarrow's, pydantic's): those references stay plain text, not warnings.
nitpick_ignore_regex = [(r"py:.*", r".*")]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
html_theme = "furo"
html_title = f"airflow-connectors {release}"
# The links are checked by the build itself (MyST reports a missing page or anchor);
# `make docs-linkcheck` also checks external ones where the network allows.
linkcheck_ignore = [r"https?://127\.0\.0\.1.*", r"https?://localhost.*"]
