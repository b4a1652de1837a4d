"""The Delta sink with its warehouse on Azure Blob Storage (``az://<container>/wh`` on
Azurite, reached through the ``AZURE_STORAGE_*`` environment and the connection layer's
:class:`~airflow_connectors.connections.azure.AzureSettings`): the sink conformance kit,
crashes at every fail point included, and a table readable by delta-rs afterwards."""

from __future__ import annotations

import pytest

from airflow_connectors.connections.azure import AzureSettings
from airflow_connectors.sinks.delta import BATCH_KEY, DeltaSink
from airflow_connectors.testing.azurite import Azurite
from airflow_connectors.testing.sink_kit import AzureWarehouse, SinkCase, SinkConformance

pytestmark = pytest.mark.sources


class TestDeltaSinkOnAzure(AzureWarehouse, SinkConformance):
    """Each batch one Delta commit recorded as the connector's app transaction, with the
    table's log and Parquet files on Azurite."""

    sink_name = "delta"
    sink_fail_points = ("delta_committed",)
    whole_at = ("delta_committed",)

    def check_landed(self, case: SinkCase) -> None:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        sink = case.sink()
        assert isinstance(sink, DeltaSink)
        options = AzureSettings.from_environment().storage_options()
        ids = case.committed()
        for kind in ("rows", "errors"):
            uri = sink.location(kind)
            assert uri.startswith("az://"), uri
            try:
                dt = DeltaTable(uri, storage_options=options)
            except TableNotFoundError:
                continue  # no batch had dead letters
            # Every commit is one batch's, marked <app id>#<batch>#<attempt>; none twice.
            marks = [str(c.get(BATCH_KEY, "")).split("#") for c in dt.history()]
            batches = [int(m[1]) for m in marks if len(m) == 3 and m[0] == sink.app_id]
            assert len(batches) == len(marks), f"{case.name} {kind}: unmarked commits"
            assert len(set(batches)) == len(batches), f"{case.name} {kind}: {batches}"
            assert set(batches) <= set(ids), f"{case.name} {kind}: {batches} not in {ids}"
            assert dt.transaction_version(sink.app_id) == max(batches), case.name
            assert all(u.startswith("az://") for u in dt.file_uris()), case.name

    def test_the_account_key_never_on_a_command_line(
        self, killed: dict[str, SinkCase], azurite: Azurite
    ) -> None:
        """The key reached the killed jobs (Spark Connect clients: the storage kits run
        there, see OtherStorage) and their tasks on the server through their
        environment, never a command line."""
        lines = [line for case in killed.values() for line in case.command_lines]
        assert [line for line in lines if "python" in line.split(" ", 1)[0]], lines
        key = azurite.env()["AZURE_STORAGE_ACCOUNT_KEY"]
        assert not [line for line in lines if key in line]
