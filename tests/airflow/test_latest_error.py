"""The page's "latest error" of a connector that is not failing carries its time, so a
stale one (an empty folder at the first run) is not read as the current state (issue
22); a failing connector shows its failure's line."""

from __future__ import annotations

from airflow_connectors.airflow.api.connect.ui_data import _latest_error
from airflow_connectors.state.records import ConnectorRef, ConnectorState


def test_the_latest_error_says_when_it_happened() -> None:
    st = ConnectorState(ref=ConnectorRef("p", "t", "c"))
    assert _latest_error(st) == ""
    st.transport_errors.append(
        {"timestamp": "2026-11-27T10:00:00Z", "index": 1, "tag": None, "message": "empty"}
    )
    st.parse_errors.append(
        {"timestamp": "2026-11-27T11:00:00Z", "index": 2, "tag": "a.json", "message": "bad"}
    )
    assert _latest_error(st) == "bad (at 2026-11-27T11:00:00Z)"
