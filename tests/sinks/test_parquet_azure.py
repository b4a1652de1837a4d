"""The Parquet sink (the default) with its warehouse on Azure Blob Storage
(``az://<container>/wh`` on Azurite, through the ``AZURE_STORAGE_*`` environment): the
sink conformance kit, crashes at every fail point included. Publish copies parts one by
one (no renames on an object store), so a reader may see part of a batch while it runs
(``atomic_publish = False``)."""

from __future__ import annotations

import pytest
from helpers import assert_parquet_landed

from airflow_connectors.testing.sink_kit import AzureWarehouse, SinkCase, SinkConformance

pytestmark = pytest.mark.sources


class TestParquetSinkOnAzure(AzureWarehouse, SinkConformance):
    sink_name = "parquet"
    sink_fail_points = ("mid_publish",)
    atomic_publish = False

    def check_landed(self, case: SinkCase) -> None:
        assert_parquet_landed(case)
