"""A run that finds nothing new takes the short way and gets the long way's answers:
discovery asks a format whether it is line-oriented without building it (no pyarrow),
and a poll that finds the connector as it was writes nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.engine import discovery
from airflow_connectors.state.store import ConnectorRef, StateStore

FORMATS: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    ("json", {}, {"a": "INT"}),
    ("json", {"array": True}, {"a": "INT"}),
    ("json", {"update_format": "raw", "lines": "single"}, {"a": "INT"}),
    ("csv", {}, {"a": "INT"}),
    ("parquet", {}, {"a": "INT"}),
    ("avro", {"schema": '{"type": "record", "name": "r", "fields": []}'}, {"a": "INT"}),
    ("raw", {}, {"a": "VARCHAR"}),
    ("raw", {"mode": "lines"}, {"a": "VARCHAR"}),
]


def _context(fmt: str, config: dict[str, Any], columns: dict[str, str]) -> Any:
    spec = parse_pipeline(
        {
            "pipeline": "p",
            "tables": {
                "t": {
                    "columns": columns,
                    "connectors": [
                        {
                            "name": "c",
                            "transport": {"name": "file_input", "config": {"path": "/x"}},
                            "format": {"name": fmt, "config": config},
                        }
                    ],
                }
            },
        }
    )
    table = spec.tables[0]
    return discovery.context(spec, table, table.connectors[0], "/wh")


@pytest.mark.parametrize(("fmt", "config", "columns"), FORMATS)
def test_appendable_is_the_built_formats_line_oriented(
    fmt: str, config: dict[str, Any], columns: dict[str, str]
) -> None:
    try:
        ctx = _context(fmt, config, columns)
    except Exception as e:  # a format this environment cannot configure so
        pytest.skip(f"{fmt} {config}: {e}")
    built = ctx.format()
    assert discovery._appendable(ctx) is bool(built.line_oriented)


@pytest.mark.slow
def test_appendable_asks_no_pyarrow_of_the_json_format() -> None:
    code = textwrap.dedent(
        """
        import sys
        from airflow_connectors.catalog import parse_pipeline
        from airflow_connectors.engine import discovery
        spec = parse_pipeline({"pipeline": "p", "tables": {"t": {
            "columns": {"a": "BIGINT NOT NULL", "b": "VARCHAR"},
            "connectors": [{"name": "c", "transport": {"name": "file_input",
                "config": {"path": "/x"}}, "format": {"name": "json"}}]}}})
        table = spec.tables[0]
        assert discovery._appendable(discovery.context(spec, table, table.connectors[0], "/w"))
        print(sorted(m for m in ("pyarrow", "numpy", "sqlglot") if m in sys.modules))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_end_of_input_unchanged_writes_nothing(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    ref = ConnectorRef("p", "t", "c")

    def updated_at() -> float:
        with store.engine.connect() as conn:
            return float(
                conn.exec_driver_sql(
                    "SELECT updated_at FROM ac_connectors WHERE connector = 'c'"
                ).scalar_one()
            )

    store.set_end_of_input(ref, True)
    first = store.status(ref)
    assert first is not None and first.end_of_input and first.finished_at is not None
    written = updated_at()
    store.set_end_of_input(ref, True)  # as it was: nothing written
    again = store.status(ref)
    assert again is not None and again.end_of_input and again.finished_at == first.finished_at
    assert updated_at() == written
    store.set_end_of_input(ref, False)
    now = store.status(ref)
    assert now is not None and not now.end_of_input
    assert updated_at() > written
    store.close()
