"""Importing the package (what a DAG file does) must not import pyspark: DAG parsing
stays fast and works where only the Spark Connect client is installed. The spec layer
sits below the plugins: importing it imports no transport, format or sink."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "modules",
    [
        "airflow_connectors",
        "airflow_connectors.spec",
        "airflow_connectors.spec, airflow_connectors.state, airflow_connectors.transports, "
        "airflow_connectors.formats, airflow_connectors.sinks, airflow_connectors.engine.discovery",
        "airflow_connectors.cli",
    ],
)
def test_import_does_not_load_pyspark(modules: str) -> None:
    code = (
        f"import sys, {modules}\n"
        "loaded = sorted(m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.'))\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing {modules} loaded {out.stdout.strip()}"


def test_spec_parsing_does_not_load_pyspark(tmp_path: object) -> None:
    code = (
        "import sys\n"
        "from airflow_connectors.catalog import parse_pipeline\n"
        "parse_pipeline({'pipeline': 'p', 'tables': {'t': {'columns': {'a': 'INT'}, 'connectors': "
        "[{'transport': {'name': 'datagen', 'config': {'plan': [{'limit': 5}]}}}]}}})\n"
        "print('pyspark' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


PLUGIN_PACKAGES = (
    "airflow_connectors.transports",
    "airflow_connectors.formats",
    "airflow_connectors.sinks",
)


def test_importing_the_spec_imports_no_plugin() -> None:
    code = (
        "import sys, airflow_connectors.spec\n"
        f"plugins = {PLUGIN_PACKAGES!r}\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(plugins) or m == 'airflow_connectors.catalog')\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", (
        f"importing airflow_connectors.spec loaded {out.stdout.strip()}"
    )


def test_spec_modules_import_no_plugin_even_inside_functions() -> None:
    spec_dir = Path(__file__).resolve().parents[1] / "airflow_connectors" / "spec"
    found = []
    for path in sorted(spec_dir.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                upward = name.startswith(PLUGIN_PACKAGES) or name == "airflow_connectors.catalog"
                if upward:
                    found.append(f"spec/{path.name}:{node.lineno} imports {name}")
    assert not found, "the spec layer imports plugins: " + "; ".join(found)
