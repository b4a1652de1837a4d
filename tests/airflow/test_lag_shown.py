"""A sequence source's lag, as a discovery stored it with the connector's status, in
what the REST APIs and the Connectors page answer (Feldera's input endpoint metrics and
the page's row, ``metrics.lag``); ``None`` for a connector whose transport cannot tell.
How discovery measures and stores it: tests/transports/test_sequence_source.py."""

from __future__ import annotations

from pathlib import Path

from airflow_connectors.airflow.api.connect.ui_data import Connectors, Row, row_json
from airflow_connectors.engine.control import ConnectorControl
from airflow_connectors.state.records import ConnectorRef
from airflow_connectors.state.store import StateStore

KAFKA = ConnectorRef("p", "orders", "stream")
FILES = ConnectorRef("p", "orders", "backfill")


def page_metrics(store: StateStore, ref: ConnectorRef, transport: str) -> dict[str, object]:
    connector = {"name": ref.connector, "transport": {"name": transport, "config": {}}}
    row = Row(ref=ref, table={"name": ref.table}, connector=connector, record=store.status(ref))
    doc = row_json(row, Connectors(every={}, readable=[row], pipeline_paused={}), None, None)
    metrics: dict[str, object] = doc["metrics"]
    return metrics


def test_the_stored_lag_is_in_the_rest_status_and_the_page_row(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        store.ensure_connector(FILES)
        store.set_lag(KAFKA, 1234)
        statuses = ConnectorControl(store).statuses([KAFKA, FILES])
        assert statuses[KAFKA]["metrics"]["lag"] == 1234
        assert statuses[FILES]["metrics"]["lag"] is None
        # The documented Feldera metrics are all still there beside it.
        assert {"total_records", "buffered_records", "end_of_input"} <= set(
            statuses[KAFKA]["metrics"]
        )
        assert page_metrics(store, KAFKA, "kafka_input")["lag"] == 1234
        assert page_metrics(store, FILES, "file_input")["lag"] is None
        store.set_lag(KAFKA, 0)  # caught up
        assert ConnectorControl(store).statuses([KAFKA])[KAFKA]["metrics"]["lag"] == 0
        assert page_metrics(store, KAFKA, "kafka_input")["lag"] == 0
    finally:
        store.close()
