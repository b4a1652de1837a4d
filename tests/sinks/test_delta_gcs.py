"""The Delta sink with its warehouse on ``gs://`` (fake-gcs-server, the ``gcs_server``
fixture): the sink conformance kit (a kill at every fail point after the first write,
concurrent publishers, a polling reader; the storage-independent cases run in
test_delta.py), and a missing bucket refused before Spark in one line.
The warehouse is reached as on Google Cloud, through the Google environment
(``STORAGE_EMULATOR_HOST`` here) that the connection layer reads for pyarrow's part
writers and for delta-rs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyarrow import fs as pafs

# Imported under a name pytest does not collect: its tests run in test_delta.py.
from test_delta import TestDeltaSink as _DeltaChecks

from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.connections.gcp import GcpSettings
from airflow_connectors.engine.discovery import context
from airflow_connectors.sinks import _fs
from airflow_connectors.sinks.base import SinkUnwritable
from airflow_connectors.sinks.delta import storage_options
from airflow_connectors.testing.gcs import GcsServer
from airflow_connectors.testing.sink_kit import OtherStorage, SinkCase

# The side lane runs it, beside the Azure Blob source (the suite's lanes balance so).
pytestmark = pytest.mark.sources


class TestDeltaSinkOnGcs(OtherStorage, _DeltaChecks):
    """Each batch is one Delta commit on Cloud Storage, recorded as the connector's app
    transaction; a crash anywhere leaves the exact table after the next run, and no
    file outside the log is left."""

    @pytest.fixture(scope="class")
    @classmethod
    def warehouse_url(cls, gcs_server: GcsServer) -> str:
        return f"gs://{gcs_server.create_bucket(f'kit-{uuid.uuid4().hex[:10]}')}/wh"

    @pytest.fixture(scope="class")
    @classmethod
    def storage_env(cls, gcs_server: GcsServer) -> dict[str, str]:
        return GcpSettings(endpoint=gcs_server.endpoint).environment()

    def check_landed(self, case: SinkCase) -> None:
        super().check_landed(case)  # the Delta sink's own checks (test_delta.py)
        sink = case.sink()
        assert sink.location().startswith("gs://"), sink.location()
        for kind in ("rows", "errors"):
            uri = sink.location(kind)
            fs, root = _fs.filesystem(uri)
            names = [
                i.path[len(root) + 1 :]
                for i in fs.get_file_info(
                    pafs.FileSelector(root, recursive=True, allow_not_found=True)
                )
                if i.type == pafs.FileType.File and "_delta_log/" not in i.path
            ]
            if not names:
                continue
            listed = set(
                DeltaTable(uri, storage_options=storage_options(uri))
                .get_add_actions()
                .column("path")
                .to_pylist()
            )
            assert sorted(set(names) - listed) == [], f"{case.name} {kind}: files outside the log"


@pytest.fixture
def gcs_env(gcs_server: GcsServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[GcsServer]:
    """This process reaches the emulator through the Google environment."""
    for name, value in GcpSettings(endpoint=gcs_server.endpoint).environment().items():
        monkeypatch.setenv(name, value)
    yield gcs_server


def test_gs_missing_bucket_is_refused_before_spark_in_one_line(
    gcs_env: Any, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    spec = parse_pipeline(
        {
            "pipeline": "p",
            "tables": {
                "events": {
                    "columns": {"id": "BIGINT NOT NULL"},
                    "sink": {"name": "delta"},
                    "connectors": [
                        {
                            "name": "files",
                            "transport": {"name": "file_input", "config": {"path": str(src)}},
                            "format": {"name": "json"},
                        }
                    ],
                }
            },
        }
    )
    table = spec.tables[0]
    sink = context(spec, table, table.connectors[0], "gs://no-such-bucket-g7/wh").sink()
    with pytest.raises(SinkUnwritable) as e:
        sink.prepare(1, "1-abc")
    message = str(e.value)
    assert "bucket no-such-bucket-g7 does not exist" in message and "\n" not in message


def test_gs_urls_are_object_store_locations() -> None:
    assert _fs.is_object_store("gs://lake/wh") and _fs.bucket_of("gs://lake/wh/p") == "lake"
    assert _fs.join("gs://lake/wh/", "p", "t") == "gs://lake/wh/p/t"
