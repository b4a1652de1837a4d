"""Azure Blob Storage settings (:mod:`airflow_connectors.connections.azure`): an Airflow
``wasb`` connection read as Airflow's Azure provider reads it, connection strings, the
``AZURE_STORAGE_*`` environment, and one :class:`AzureSettings` rendered for
azure-storage-blob, delta-rs and pyarrow, each used against Azurite (which checks the
account key and SAS signatures, so a setting that does not reach the library fails)."""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest

from airflow_connectors.connections.azure import AzureConfigFields, AzureSettings
from airflow_connectors.connections.base import ConnectionProblem, parse
from airflow_connectors.testing.azurite import ACCOUNT, KEY, Azurite

pytestmark = pytest.mark.sources

OTHER_KEY = "b3RoZXIta2V5LW5ldmVyLXNob3duLTAwNDI="


@pytest.fixture(autouse=True)
def _no_azure_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CONNECTION_STRING", "ACCOUNT_NAME", "ACCOUNT_KEY", "SAS_TOKEN", "ENDPOINT"):
        monkeypatch.delenv(f"AZURE_STORAGE_{name}", raising=False)


def wasb(**fields: object) -> AzureSettings:
    return AzureSettings.from_connection(parse("lake", {"conn_type": "wasb", **fields}))


def test_a_wasb_connection_as_the_azure_provider_reads_it() -> None:
    # login = account, password = key; no host: the account's public endpoint.
    s = wasb(login="acct1", password=KEY)
    assert (s.account_name, s.account_key, s.blob_endpoint) == (
        "acct1",
        KEY,
        "https://acct1.blob.core.windows.net",
    )
    # host as the account URL, with or without its scheme.
    assert wasb(login="a", password=KEY, host="a.blob.core.chinacloudapi.cn").blob_endpoint == (
        "https://a.blob.core.chinacloudapi.cn"
    )
    # The extra's shared_access_key wins over the password; a SAS token over both.
    assert wasb(login="a", password="p", extra={"shared_access_key": KEY}).account_key == KEY
    sas = wasb(login="a", password="p", extra={"sas_token": "?sv=2025&sig=abc%3D"})
    assert (sas.account_key, sas.sas_token) == (None, "sv=2025&sig=abc%3D")
    # A SAS URL gives the endpoint and the token; the account is the URL's.
    url = wasb(extra={"sas_token": "https://acct2.blob.core.windows.net/?sv=1&sig=x1y2"})
    assert (url.account_name, url.blob_endpoint, url.sas_token) == (
        "acct2",
        "https://acct2.blob.core.windows.net",
        "sv=1&sig=x1y2",
    )
    # Older connections prefix the extra's keys.
    assert wasb(login="a", extra={"extra__wasb__account_key": KEY}).account_key == KEY
    # A connection string first, whatever else the connection holds.
    text = f"DefaultEndpointsProtocol=https;AccountName=acct3;AccountKey={KEY};EndpointSuffix=x.y"
    s = wasb(login="a", password="p", extra={"connection_string": text})
    assert (s.account_name, s.account_key, s.blob_endpoint) == (
        "acct3",
        KEY,
        "https://acct3.blob.x.y",
    )


def test_what_cannot_be_used_is_one_problem_without_secrets() -> None:
    with pytest.raises(ConnectionProblem, match=r"tenant_id.*azure-identity") as ad:
        wasb(login="app-id", password=KEY, extra={"tenant_id": "t1"})
    assert KEY not in str(ad.value)
    with pytest.raises(ConnectionProblem, match="no credential"):
        wasb(login="acct")
    with pytest.raises(ConnectionProblem, match="no AccountName and no BlobEndpoint") as bad:
        AzureSettings.from_connection_string(f"AccountKey={KEY}", where="connection 'x'")
    assert KEY not in str(bad.value) and "connection 'x'" in str(bad.value)


def test_secrets_and_repr() -> None:
    s = AzureSettings("a", account_key=KEY, sas_token="sv=1&sig=s1g2n3")
    assert s.secrets() == {KEY, "sv=1&sig=s1g2n3", "s1g2n3"}
    assert KEY not in repr(s) and "s1g2n3" not in repr(s)
    # A connection string holds the key: a secret of the connection (what Airflow's
    # masker is given when the connection is exported to an ingest job).
    text = f"AccountName=a;AccountKey={KEY}"
    conn = parse("lake", {"conn_type": "wasb", "extra": {"connection_string": text}})
    assert text in conn.secrets()


def test_the_environment_fills_what_a_config_leaves_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "envacct")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", KEY)
    assert AzureSettings.from_environment() == AzureSettings("envacct", KEY)
    # Another account's key is never borrowed; a config's own credential is kept.
    other = AzureConfigFields(account_name="acct9").azure_settings()
    assert (other.account_name, other.account_key) == ("acct9", None)
    own = AzureConfigFields(account_name="envacct", account_key=OTHER_KEY).azure_settings()
    assert own.account_key == OTHER_KEY
    # A connection string in the environment is read like any other.
    monkeypatch.setenv(
        "AZURE_STORAGE_CONNECTION_STRING",
        f"AccountName=cs;AccountKey={KEY};BlobEndpoint=http://127.0.0.1:1/cs",
    )
    assert AzureSettings.from_environment() == AzureSettings(
        "cs", KEY, account_url="http://127.0.0.1:1/cs"
    )


def test_config_fields_take_one_way_of_authenticating() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="not wasb_conn_id and account_key"):
        AzureConfigFields(wasb_conn_id="c", account_name="a", account_key=KEY)
    with pytest.raises(ValidationError, match="account_key needs account_name"):
        AzureConfigFields(account_key=KEY)
    # The account named by an account URL (path-style, as emulators serve it).
    s = AzureConfigFields(account_url="http://127.0.0.1:1/devacct", account_key=KEY)
    assert s.azure_settings().account_name == "devacct"


# --- each library, against Azurite --------------------------------------------------------


@pytest.fixture
def lake(azurite: Azurite, azure_container: str) -> Iterator[tuple[AzureSettings, str]]:
    yield AzureSettings(ACCOUNT, KEY, account_url=azurite.account_url), azure_container


def test_azure_storage_blob_with_the_settings(lake: tuple[AzureSettings, str]) -> None:
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    settings, container = lake
    settings.blob_service_client().get_blob_client(container, "a.txt").upload_blob(b"hi")
    sas = generate_container_sas(
        ACCOUNT,
        container,
        account_key=KEY,
        permission=ContainerSasPermissions(read=True, list=True),
        expiry=datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1),
    )
    with_sas = AzureSettings(account_url=settings.account_url, sas_token=sas)
    blob = with_sas.blob_service_client().get_blob_client(container, "a.txt")
    assert blob.download_blob().readall() == b"hi"
    wrong = AzureSettings(ACCOUNT, OTHER_KEY, account_url=settings.account_url)
    with pytest.raises(HttpResponseError) as refused:
        wrong.blob_service_client().get_container_client(container).get_container_properties()
    assert refused.value.status_code == 403


def test_delta_rs_with_the_settings(lake: tuple[AzureSettings, str]) -> None:
    import deltalake

    settings, container = lake
    data = pa.table({"x": [1, 2, 3]})
    for n, uri in enumerate([f"az://{container}/d0", f"abfss://{container}/d1"]):
        deltalake.write_deltalake(uri, data, storage_options=settings.storage_options())
        back = deltalake.DeltaTable(uri, storage_options=settings.storage_options())
        assert back.to_pyarrow_table().equals(data), n
    wrong = AzureSettings(ACCOUNT, OTHER_KEY, account_url=settings.account_url)
    with pytest.raises(Exception, match=r"403|uthoriz"):
        deltalake.DeltaTable(f"az://{container}/d0", storage_options=wrong.storage_options())


def test_pyarrow_with_the_settings(lake: tuple[AzureSettings, str]) -> None:
    settings, container = lake
    fs = settings.pyarrow_filesystem()
    path = f"{container}/p/{uuid.uuid4().hex}.txt"
    with fs.open_output_stream(path) as out:
        out.write(b"written by pyarrow")
    assert fs.open_input_stream(path).read() == b"written by pyarrow"
    wrong = AzureSettings(ACCOUNT, OTHER_KEY, account_url=settings.account_url)
    with pytest.raises(OSError, match=r"403|uthoriz"):
        wrong.pyarrow_filesystem().open_input_stream(path).read()
    assert json.dumps(settings.storage_options()).count(KEY) == 1  # the one option
