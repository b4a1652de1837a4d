"""``airflow connections test`` of an Azure Blob Storage (``wasb``) connection, as the
REST API's config validation runs it (``check_connections``): the container the config
names is listed with the connection's credentials, on Azurite. Connections come from
``AIRFLOW_CONN_<ID>`` variables (what Airflow's SDK reads outside a server)."""

from __future__ import annotations

import json

import pytest

from airflow_connectors.airflow.connections import check_connections
from airflow_connectors.testing.azurite import ACCOUNT, KEY, Azurite

pytestmark = pytest.mark.sources

WRONG_KEY = "d3Jvbmcta2V5LW5ldmVyLXNob3duLTAwNDI="


def test_wasb_connection_lists_the_container(
    azurite: Azurite, azure_container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__TEST_CONNECTION", "Enabled")

    def put(conn_id: str, **data: object) -> None:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(data))

    put("chk_az", conn_type="wasb", login=ACCOUNT, password=KEY, host=azurite.account_url)
    put("chk_az_cs", conn_type="wasb", extra={"connection_string": azurite.connection_string})
    put("chk_az_bad", conn_type="wasb", login=ACCOUNT, password=WRONG_KEY, host=azurite.account_url)
    put("chk_az_down", conn_type="wasb", login=ACCOUNT, password=KEY, host="http://127.0.0.1:9/x")
    config = {"container": azure_container, "prefix": ""}
    assert check_connections({**config, "wasb_conn_id": "chk_az"}) == {}
    assert check_connections({**config, "wasb_conn_id": "chk_az_cs"}) == {}
    assert check_connections({"wasb_conn_id": "chk_az"}) == {}  # the account's containers

    [missing] = check_connections({"container": "no-such-one", "wasb_conn_id": "chk_az"}).values()
    assert missing.startswith("wasb_conn_id 'chk_az': container 'no-such-one' does not exist")
    [refused] = check_connections({**config, "wasb_conn_id": "chk_az_bad"}).values()
    assert "refused the connection's credentials (HTTP 403)" in refused
    [down] = check_connections({**config, "wasb_conn_id": "chk_az_down"}, timeout=3).values()
    assert "cannot reach http://127.0.0.1:9/x" in down
    for text in (missing, refused, down):
        assert KEY not in text and WRONG_KEY not in text and "\n" not in text
