"""Every built-in transport runs the conformance kit (airflow_connectors.testing.conformance):
each class below gives a source of known records, the kit's tests do the rest."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_connectors.testing.conformance import Source, TransportConformance


class TestDatagen(TransportConformance):
    @pytest.fixture
    def source(self) -> Source:
        # Two plans (run in order), items of 250 rows: 0..599 cycling a/b/c, then 600..999.
        config = {
            "seed": 7,
            "plan": [
                {
                    "limit": 600,
                    "worker_chunk_size": 250,
                    "fields": {"tag": {"values": ["a", "b", "c"]}},
                },
                {
                    "limit": 400,
                    "worker_chunk_size": 250,
                    "fields": {"id": {"range": [600, 1_000_000]}, "tag": {"values": ["z"]}},
                },
            ],
        }
        records = [{"id": i, "tag": "abc"[i % 3]} for i in range(600)]
        records += [{"id": i, "tag": "z"} for i in range(600, 1000)]
        return Source(
            transport="datagen",
            config=config,
            columns={"id": "BIGINT NOT NULL", "tag": "VARCHAR"},
            records=records,
            key_column="id",
            # No limit: generated forever, 100 rows a second.
            unbounded_config={"plan": [{"rate": 100, "worker_chunk_size": 50}]},
            invalid_configs={
                "plan[0].limit": {"plan": [{"limit": -1}]},
                "plan[0].fields.tag.strategy": {
                    "plan": [{"limit": 5, "fields": {"tag": {"strategy": "gaussian"}}}]
                },
                # Checked against the table: the field is not a column.
                "": {"plan": [{"limit": 5, "fields": {"nope": {}}}]},
            },
        )


def json_lines(ids: range) -> str:
    return "".join(json.dumps({"id": i, "name": f"n{i}", "amount": i / 4}) + "\n" for i in ids)


def csv_lines(ids: range) -> str:
    return "".join(f'{i},"n,{i}",{i / 4}\n' for i in ids)


def rows(ids: range, name: str = "n{}") -> list[dict[str, Any]]:
    return [{"id": i, "name": name.format(i), "amount": i / 4} for i in ids]


COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"}


class TestFileInput(TransportConformance):
    @pytest.fixture
    def source(self, tmp_path: Path) -> Source:
        folder = tmp_path / "drop"
        (folder / "2026" / "11").mkdir(parents=True)
        (folder / "2026" / "a.json").write_text(json_lines(range(0, 200)))
        (folder / "2026" / "11" / "b.json").write_text(json_lines(range(200, 400)))
        (folder / "c.json").write_text(json_lines(range(400, 600)))
        config = {"path": str(folder), "min_file_age": 0}
        return Source(
            transport="file_input",
            config=config,
            columns=COLUMNS,
            format={"name": "json", "config": {"update_format": "raw"}},
            records=rows(range(600)),
            key_column="id",
            unbounded_config={**config, "follow": True},
            invalid_configs={
                "min_file_age": {**config, "min_file_age": -1},
                "buffer_size_bytes": {**config, "buffer_size_bytes": 0},
                "path": {"min_file_age": 0},
            },
        )


class TestUrlInput(TransportConformance):
    @pytest.fixture
    def source(self, http_server: Any) -> Source:
        # http_server (tests/conftest.py) serves on 127.0.0.1 and honours Range requests.
        path = f"/conformance/{uuid.uuid4().hex}.csv"
        http_server.files[path] = csv_lines(range(500)).encode()
        config = {"path": http_server.url(path), "timeout": 30}
        return Source(
            transport="url_input",
            config=config,
            columns=COLUMNS,
            format={"name": "csv", "config": {}},
            records=rows(range(500), "n,{}"),
            key_column="id",
            invalid_configs={
                "timeout": {**config, "timeout": 0},
                "path": {"path": "ftp://127.0.0.1/x.csv"},
            },
        )


def test_the_kit_is_not_loaded_by_the_package_nor_by_standalone() -> None:
    # Airflow's processes import testing.standalone (its SQLite connect args): it must
    # load neither pytest nor pyspark, and the package must not load the kit.
    code = (
        "import sys, airflow_connectors, airflow_connectors.testing.standalone\n"
        "print(sorted(m for m in ('pytest', 'pyspark', 'airflow_connectors.testing.conformance') "
        "if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
