"""Importing the package (what a DAG file does) must not import pyspark: DAG parsing
stays fast and works where only the Spark Connect client is installed."""

from __future__ import annotations

import subprocess
import sys

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
        "from airflow_connectors.spec import parse_pipeline\n"
        "parse_pipeline({'pipeline': 'p', 'tables': {'t': {'columns': {'a': 'INT'}, 'connectors': "
        "[{'transport': {'name': 'datagen', 'config': {'plan': [{'limit': 5}]}}}]}}})\n"
        "print('pyspark' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
