"""The Parquet sink (the default) with its warehouse on Azure Blob Storage
(``az://<container>/wh`` on Azurite, through the ``AZURE_STORAGE_*`` environment): the
sink conformance kit, crashes at every fail point included. Publish copies parts one by
one (no renames on an object store), so a reader may see part of a batch while it runs
(``atomic_publish = False``)."""

from __future__ import annotations

import uuid

import pytest

from airflow_connectors.sinks import _fs
from airflow_connectors.testing.azurite import Azurite
from airflow_connectors.testing.sink_kit import SinkCase, SinkConformance

pytestmark = pytest.mark.sources


class TestParquetSinkOnAzure(SinkConformance):
    sink_name = "parquet"
    sink_fail_points = ("mid_publish",)
    atomic_publish = False

    @pytest.fixture(scope="class")
    @classmethod
    def warehouse_url(cls, azurite: Azurite) -> str:
        return f"az://{azurite.create_container(f'kit-{uuid.uuid4().hex[:10]}')}/wh"

    @pytest.fixture(scope="class")
    @classmethod
    def storage_env(cls, azurite: Azurite) -> dict[str, str]:
        return azurite.env()

    def check_landed(self, case: SinkCase) -> None:
        from pyarrow import fs as pafs

        fs, staging = _fs.filesystem(_fs.join(case.warehouse, "kit", "_staging"))
        found = fs.get_file_info(pafs.FileSelector(staging, recursive=True, allow_not_found=True))
        left = [i.path for i in found if i.type == pafs.FileType.File]
        assert left == [], f"{case.name}: staged objects left: {left[:5]}"
        names = [p.rsplit("/", 1)[1] for p in _fs.files(*_fs.filesystem(case.sink().location()))]
        assert names and all(n.startswith("part-") for n in names), case.name
