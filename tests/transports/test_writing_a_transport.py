"""The docs' "Writing a transport" example, installed as a third party installs one
(a module plus an entry point in the group ``airflow_connectors.transports``), passes the
conformance kit: in this process, and in the ingest job's own process with local Spark
workers, which find it only through the entry point."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from docs_examples import doc_block

from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.spec import SpecValidationError
from airflow_connectors.testing.conformance import Source, TransportConformance
from airflow_connectors.transports import TRANSPORTS

MARKER = "<!-- transport-example -->"  # docs/extending/writing-a-transport.md


def readme_example() -> str:
    """The first Python block after the docs' marker."""
    return doc_block(MARKER, "python")


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The example as an installed distribution in a folder on the import path (this
    process's and, through ``PYTHONPATH``, the ingest job's and its Spark workers')."""
    site = tmp_path / "site"
    (site / "my_transports").mkdir(parents=True)
    (site / "my_transports" / "__init__.py").write_text("")
    (site / "my_transports" / "sqlite_rows.py").write_text(readme_example())
    dist = site / "my_transports-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-transports\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[airflow_connectors.transports]\n"
        "sqlite_rows = my_transports.sqlite_rows:SqliteRowsTransport\n"
    )
    monkeypatch.syspath_prepend(str(site))
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    # The registry scans entry points once per process: scan again, and forget the
    # example afterwards.
    monkeypatch.setattr(TRANSPORTS, "_scanned", False)
    monkeypatch.setattr(TRANSPORTS, "_targets", dict(TRANSPORTS._targets))
    monkeypatch.setattr(TRANSPORTS, "_loaded", dict(TRANSPORTS._loaded))
    return "sqlite_rows"


def events_db(path: Path, rows: int) -> list[dict[str, Any]]:
    records = [{"id": i, "name": f"event {i}"} for i in range(rows)]
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE events (id INTEGER NOT NULL, name TEXT)")
        db.executemany("INSERT INTO events VALUES (:id, :name)", records)
    return records


class TestReadmeTransport(TransportConformance):
    @pytest.fixture
    def source(self, installed: str, tmp_path: Path) -> Source:
        path = tmp_path / "app.db"
        return Source(
            transport=installed,
            config={"path": str(path), "table": "events", "rows_per_item": 10},
            columns={"id": "BIGINT NOT NULL", "name": "VARCHAR"},
            records=events_db(path, 25),
            key_column="id",
            invalid_configs={"rows_per_item": {"path": "x", "table": "t", "rows_per_item": 0}},
        )


def test_a_spec_names_the_installed_transport(installed: str, tmp_path: Path) -> None:
    """Validated like a built-in one: a bad field is reported with its JSON path."""
    doc = {
        "pipeline": "p",
        "tables": {
            "t": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {"name": "c", "transport": {"name": installed, "config": {"path": "x"}}}
                ],
            }
        },
    }
    with pytest.raises(SpecValidationError) as info:
        parse_pipeline(doc)
    assert "tables.t.connectors[0].transport.config.table" in str(info.value)
    doc["tables"]["t"]["connectors"][0]["transport"]["config"]["table"] = "events"  # type: ignore[index]
    spec = parse_pipeline(doc)
    assert spec.tables[0].connectors[0].transport.name == "sqlite_rows"
