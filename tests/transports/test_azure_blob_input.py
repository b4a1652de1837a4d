"""``azure_blob_input`` against Azurite on 127.0.0.1 (the ``azurite`` fixture): the
conformance kit (with its crash check), listing after the watermark and the re-list that
finds late blobs, a replaced blob noticed and never mixed, refused and missing access as
one line without secrets, Airflow ``wasb`` connections, and a pipeline run into a table."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_connectors.connections.base import ConnectionProblem
from airflow_connectors.spec.redact import mask_config, secret_fields, secret_values
from airflow_connectors.testing.azurite import ACCOUNT, KEY, Azurite
from airflow_connectors.testing.conformance import (
    Connector,
    Source,
    TransportConformance,
    assert_same_records,
)
from airflow_connectors.transports import Cursor, KeyOffset, Limits, WorkItem
from airflow_connectors.transports.azure_blob_input import (
    AzureBlobInputConfig,
    AzureBlobInputTransport,
)

pytestmark = pytest.mark.sources

COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"}
JSON = {"name": "json", "config": {"update_format": "raw"}}


def json_lines(ids: range) -> bytes:
    return "".join(
        json.dumps({"id": i, "name": f"n{i}", "amount": i / 4}) + "\n" for i in ids
    ).encode()


def rows(ids: range) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}", "amount": i / 4} for i in ids]


def source_of(azure: Azurite, container: str, records: range, **config: Any) -> Source:
    cfg = azure.config(container, **{"relist_margin_s": 0, **config})
    return Source(
        transport="azure_blob_input",
        config=cfg,
        columns=COLUMNS,
        format=JSON,
        records=rows(records),
        key_column="id",
        unbounded_config={**cfg, "follow": True},
        invalid_configs={
            "relist_every": {**cfg, "relist_every": 0},
            "container": {**cfg, "container": "Not_A_Container"},
            "compression": {**cfg, "compression": "lz4"},
            # prefix and blob both; two ways to authenticate.
            "": {**cfg, "blob": "x.json"},
        },
    )


def transport(azure: Azurite, container: str, **config: Any) -> AzureBlobInputTransport:
    cfg = AzureBlobInputConfig.model_validate(
        azure.config(container, **{"relist_margin_s": 0, **config})
    )
    return AzureBlobInputTransport(cfg, None)  # type: ignore[arg-type]


def listed(t: AzureBlobInputTransport, cursor: Cursor, **limits: Any) -> list[WorkItem]:
    t.context.new_report()
    return list(t.discover(cursor, Limits(now=time.time(), **limits)))


def log_lines(azure: Azurite) -> list[str]:
    return azure.log.read_text().splitlines() if azure.log else []


class TestAzureBlobInput(TransportConformance):
    """Three JSON-lines blobs under a prefix (one in a 'folder'), plus an empty blob and
    one outside the prefix that must not be read."""

    @pytest.fixture
    def source(self, azurite: Azurite, azure_container: str) -> Source:
        azurite.put(azure_container, "drop/2026/a.json", json_lines(range(0, 200)))
        azurite.put(azure_container, "drop/2026/11/b.json", json_lines(range(200, 400)))
        azurite.put(azure_container, "drop/c.json", json_lines(range(400, 600)))
        azurite.put(azure_container, "drop/empty.json", b"")
        azurite.put(azure_container, "elsewhere/d.json", json_lines(range(900, 910)))
        return source_of(azurite, azure_container, range(600), prefix="drop/")


class TestAzureBlobInputByteRanges(TransportConformance):
    """One blob read in byte ranges of 2 KiB (one range per discovery)."""

    @pytest.fixture
    def source(self, azurite: Azurite, azure_container: str) -> Source:
        azurite.put(azure_container, "big/all.json", json_lines(range(300)))
        return source_of(
            azurite, azure_container, range(300), prefix="big/", max_object_bytes_per_batch=2048
        )


# --- listing ------------------------------------------------------------------------------


@pytest.fixture
def ten_blobs(azurite: Azurite, azure_container: str) -> list[str]:
    names = [f"p/k{i:02d}.json" for i in range(10)]
    for i, name in enumerate(names):
        azurite.put(azure_container, name, json_lines(range(i * 10, i * 10 + 10)))
    return names


def test_lists_after_the_watermark_in_name_order_with_etag_and_mtime(
    azurite: Azurite, azure_container: str, ten_blobs: list[str]
) -> None:
    t = transport(azurite, azure_container, prefix="p/")
    items = listed(t, Cursor(watermark="p/k04.json", since_relist=0))
    assert [i.key for i in items] == ten_blobs[5:]
    assert t.relisted_at is None, "a listing after the watermark is not a complete re-list"
    props = azurite.service().get_blob_client(azure_container, "p/k05.json").get_blob_properties()
    assert items[0].meta["etag"] == props.etag
    assert (items[0].start, items[0].end, items[0].size, items[0].final) == (
        0,
        props.size,
        props.size,
        True,
    )
    # A complete listing reports the service's clock at its start (whole seconds).
    items = listed(t, Cursor())
    assert [i.key for i in items] == ten_blobs
    assert t.relisted_at is not None
    assert props.last_modified.timestamp() - 1 <= t.relisted_at <= time.time() + 1


def test_relist_finds_late_blobs_below_the_watermark_and_keeps_state_bounded(
    azurite: Azurite, azure_container: str, tmp_path: Path
) -> None:
    for n in range(1, 13):
        azurite.put(azure_container, f"w/{n:03d}.json", json_lines(range(n * 10, n * 10 + 10)))
    time.sleep(1.1)  # the listing's Date (whole seconds) is later than every mtime
    source = source_of(azurite, azure_container, range(10, 130), prefix="w/", relist_every=3)
    c = Connector(source, tmp_path / "c")
    try:
        c.drain()
        assert_same_records(c.table(), c.expected(), "id", "table")
        mark = c.store.cursor(c.ref)
        assert mark.watermark == "w/012.json" and mark.late_after is not None
        assert len(c.store.offsets(c.ref)) <= 1, "completed blobs below the watermark kept rows"
        # A late blob below the watermark: only a re-list finds it.
        azurite.put(azure_container, "w/000-late.json", json_lines(range(0, 10)))
        azurite.put(azure_container, "w/013.json", json_lines(range(130, 140)))
        rounds = 0
        while c.table().num_rows < 140 and rounds < 5:
            c.run(c.discover().batch_ids)
            rounds += 1
        expected = pa.Table.from_pylist(rows(range(140)), schema=c.expected().schema)
        assert_same_records(c.table(), expected, "id", "table with the late blob")
        assert rounds <= 3, f"the late blob took {rounds} discoveries with relist_every 3"
        assert c.finalize()
    finally:
        c.close()


def test_one_blob_and_a_missing_one(azurite: Azurite, azure_container: str) -> None:
    azurite.put(azure_container, "one/x.json", json_lines(range(3)))
    azurite.put(azure_container, "one/x.json.bak", json_lines(range(3)))
    t = transport(azurite, azure_container, blob="one/x.json")
    assert [i.key for i in listed(t, Cursor())] == ["one/x.json"]
    assert t.relisted_at is not None
    missing = transport(azurite, azure_container, blob="one/nope.json")
    assert listed(missing, Cursor()) == []
    assert missing.notices and "one/nope.json holds no blob" in missing.notices[0][0]


# --- changes --------------------------------------------------------------------------------


def test_a_replaced_blob_is_a_notice_and_its_planned_version_is_never_mixed(
    azurite: Azurite, azure_container: str
) -> None:
    azurite.put(azure_container, "r/a.json", json_lines(range(3)))
    t = transport(azurite, azure_container, prefix="r/")
    [item] = listed(t, Cursor())
    done = KeyOffset(item.size or 0, 3, True, {"etag": item.meta["etag"]})
    assert listed(t, Cursor(offsets={"r/a.json": done})) == []
    azurite.put(azure_container, "r/a.json", json_lines(range(10)))
    assert listed(t, Cursor(offsets={"r/a.json": done})) == []
    [(notice, key)] = t.notices
    assert key == "r/a.json" and f"az://{azure_container}/r/a.json" in notice
    assert "replaced" in notice
    # Reading the planned version after it was replaced: an unreadable blob, one line.
    with pytest.raises(FileNotFoundError, match="replaced or deleted since it") as gone:
        b"".join(t.read(item))
    assert "\n" not in str(gone.value)


def test_gone_at_read_names_the_blob(azurite: Azurite, azure_container: str) -> None:
    azurite.put(azure_container, "g/a.json", json_lines(range(3)))
    t = transport(azurite, azure_container, prefix="g/")
    [item] = listed(t, Cursor())
    azurite.service().get_blob_client(azure_container, "g/a.json").delete_blob()
    # Azurite answers 412 to the read's If-Match on a deleted blob, Azure 404.
    deleted = f"az://{azure_container}/g/a.json.*(gone|deleted since it was planned)"
    with pytest.raises(FileNotFoundError, match=deleted):
        b"".join(t.read(item))


def test_a_missing_container_says_so(azurite: Azurite) -> None:
    t = transport(azurite, "no-such-container", prefix="")
    with pytest.raises(FileNotFoundError, match=r"ContainerNotFound.*create container"):
        listed(t, Cursor())


# --- credentials and errors ---------------------------------------------------------------


def test_a_wrong_key_fails_the_listing_in_one_line_without_the_key(
    azurite: Azurite, azure_container: str
) -> None:
    wrong = "d3Jvbmcta2V5LW5ldmVyLXNob3duLTAwNDI="
    t = transport(azurite, azure_container, prefix="", account_key=wrong)
    with pytest.raises(PermissionError) as refused:
        listed(t, Cursor())
    message = str(refused.value)
    assert f"list az://{azure_container}/: 403 AuthorizationFailure" in message, message
    assert wrong not in message and KEY not in message and "\n" not in message


def test_a_refused_read_fails_the_batch_naming_the_blob_without_retry(
    azurite: Azurite, azure_container: str, tmp_path: Path
) -> None:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    from airflow_connectors.engine.batch import BatchFailed, run_batch
    from airflow_connectors.testing.conformance import _InProcessTasks

    azurite.put(azure_container, "in/a.json", json_lines(range(5)))
    # A token that may list the container but not read its blobs.
    sas = generate_container_sas(
        ACCOUNT,
        azure_container,
        account_key=KEY,
        permission=ContainerSasPermissions(list=True),
        expiry=datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1),
    )
    config = {"container": azure_container, "prefix": "in/", "account_url": azurite.account_url}
    source = Source(
        "azure_blob_input", {**config, "sas_token": sas}, COLUMNS, rows(range(5)), "id", JSON
    )
    c = Connector(source, tmp_path / "c")
    try:
        found = c.discover()
        assert found.batch_ids
        with pytest.raises(BatchFailed) as failed:
            run_batch(c.store, found.batch_ids[0], _InProcessTasks)
        message = str(failed.value)
        assert f"az://{azure_container}/in/a.json: 403 AuthorizationPermissionMismatch" in message
        sig = dict(p.split("=", 1) for p in sas.split("&"))["sig"]
        assert sas not in message and sig not in message and "\n" not in message.strip()
        assert c.table().num_rows == 0
    finally:
        c.close()
    gets = [ln for ln in log_lines(azurite) if f'"GET /{ACCOUNT}/{azure_container}/in/a.json' in ln]
    assert len(gets) == 1, f"a refused read is not retried: {gets}"


def test_transient_faults_are_retried_and_a_reset_resumes_mid_body(
    azurite: Azurite, azure_container: str
) -> None:
    from airflow_connectors.testing.faultproxy import Fault, FaultProxy
    from airflow_connectors.transports.retry import RetryPolicy

    body = json_lines(range(4000))
    azurite.put(azure_container, "x/big.json", body)
    upstream = azurite.account_url.rsplit("/", 1)[0]
    with FaultProxy(upstream) as proxy:
        url = f"{proxy.endpoint_url}/{ACCOUNT}"
        t = transport(azurite, azure_container, prefix="x/", account_url=url)
        t.retry = RetryPolicy(timeout_s=30, max_delay_s=0.05, base_delay_s=0.01)
        proxy.add(Fault.error(503, "ServerBusy"), method="GET", path="comp=list")
        [item] = listed(t, Cursor())
        proxy.add(Fault.error(500, "InternalError"), method="GET", path="x/big.json")
        proxy.add(Fault.reset_after(20_000), method="GET", path="x/big.json", times=2)
        assert b"".join(t.read(item)) == body  # no byte lost or repeated
        assert proxy.injected == {"503 ServerBusy": 1, "500 InternalError": 1, "reset": 2}
        # Refused: raised at once, never retried.
        proxy.add(Fault.error(403, "AuthorizationFailure"), method="GET", path="x/big.json")
        before = len([p for m, p in proxy.requests if "x/big.json" in p])
        with pytest.raises(PermissionError, match=f"az://{azure_container}/x/big.json: 403"):
            b"".join(t.read(item))
        assert len([p for m, p in proxy.requests if "x/big.json" in p]) == before + 1


def test_secrets_are_masked(azurite: Azurite) -> None:
    config = azurite.config("container", prefix="", account_key=KEY)
    assert KEY in secret_values(config, secret_fields(AzureBlobInputConfig))
    assert KEY not in json.dumps(mask_config(config, secret_fields(AzureBlobInputConfig)))
    with_string = {"container": "abc", "prefix": "", "connection_string": azurite.connection_string}
    masked = mask_config(with_string, secret_fields(AzureBlobInputConfig))
    assert KEY not in json.dumps(masked)
    t = transport(azurite, "container", prefix="in/", follow=True)
    assert t.describe() == "azure_blob_input: az://container/in/ (follow)"
    [dataset] = t.lineage_datasets()  # OpenLineage's naming, no secret
    host = azurite.account_url.split("/")[2]
    assert (dataset.namespace, dataset.name) == (f"wasbs://container@{host}", "in")


@pytest.mark.parametrize("form", ["login", "connection_string", "uri"])
def test_wasb_conn_id_from_the_environment(
    azurite: Azurite, azure_container: str, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    from urllib.parse import quote

    azurite.put(azure_container, "c/a.json", json_lines(range(4)))
    if form == "login":
        value = json.dumps(
            {"conn_type": "wasb", "login": ACCOUNT, "password": KEY, "host": azurite.account_url}
        )
    elif form == "connection_string":
        value = json.dumps(
            {"conn_type": "wasb", "extra": {"connection_string": azurite.connection_string}}
        )
    else:
        extra = quote(json.dumps({"connection_string": azurite.connection_string}), safe="")
        value = f"wasb://?__extra__={extra}"
    monkeypatch.setenv("AIRFLOW_CONN_MY_AZURE", value)
    cfg = AzureBlobInputConfig(container=azure_container, prefix="c/", wasb_conn_id="my_azure")
    t = AzureBlobInputTransport(cfg, None)  # type: ignore[arg-type]
    [item] = listed(t, Cursor())
    assert b"".join(t.read(item)) == json_lines(range(4))
    assert AzureBlobInputTransport.connection_fields == {"wasb_conn_id": "Azure Blob Storage"}


def test_a_missing_connection_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_NOWHERE", raising=False)
    cfg = AzureBlobInputConfig(container="abc", prefix="", wasb_conn_id="nowhere")
    with pytest.raises(ConnectionProblem) as missing:
        listed(AzureBlobInputTransport(cfg, None), Cursor())  # type: ignore[arg-type]
    message = str(missing.value)
    assert message.startswith("azure_blob_input: wasb_conn_id 'nowhere'"), message
    assert "AIRFLOW_CONN_NOWHERE" in message and "Azure Blob Storage connection" in message


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"container": "abc"}, "exactly one of prefix"),
        ({"container": "abc", "prefix": "", "blob": "k"}, "exactly one of prefix"),
        ({"container": "az://abc/x", "prefix": ""}, "not a URL"),
        ({"container": "ab", "prefix": ""}, "not a valid container name"),
        ({"container": "a--b", "prefix": ""}, "not a valid container name"),
        ({"container": "abc", "prefix": "", "account_key": "k"}, "account_key needs"),
        (
            {"container": "abc", "prefix": "", "wasb_conn_id": "c", "sas_token": "sv=1"},
            "one way of authenticating",
        ),
    ],
)
def test_config_rules(config: dict[str, Any], says: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=says):
        AzureBlobInputConfig.model_validate(config)


# --- a pipeline run -------------------------------------------------------------------------


def test_pipeline_run_into_a_table(
    azurite: Azurite, azure_container: str, tmp_path: Path, spark: Any
) -> None:
    from helpers import read_table, run

    from airflow_connectors.catalog import load_pipeline

    for n in range(3):
        name = f"orders/2026-11-{n + 1:02d}.json"
        azurite.put(azure_container, name, json_lines(range(n * 100, n * 100 + 100)))
    spec_file = tmp_path / "pipeline.yaml"
    spec_file.write_text(
        f"""
pipeline: azdemo
tables:
  orders:
    columns: {{id: BIGINT NOT NULL, name: VARCHAR, amount: DOUBLE}}
    connectors:
      - name: landing
        transport:
          name: azure_blob_input
          config:
            container: {azure_container}
            prefix: orders/
            account_url: {azurite.account_url}
            account_key: {KEY}
            relist_margin_s: 0
        format: {{name: json, config: {{update_format: raw}}}}
"""
    )
    spec = load_pipeline(spec_file)
    store_url = f"sqlite:///{tmp_path / 'state.db'}"
    warehouse = str(tmp_path / "warehouse")
    report = run(spec, store_url, warehouse, spark)
    assert report.connectors["orders.landing"].status == "finished", report
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])
    expected = pa.Table.from_pylist(rows(range(300)), schema=schema)
    assert_same_records(read_table(warehouse, "azdemo", "orders"), expected, "id", "orders")
    # Again, with one more blob: only the new one is read, nothing twice.
    azurite.put(azure_container, "orders/2026-11-04.json", json_lines(range(300, 350)))
    run(spec, store_url, warehouse, spark)
    expected = pa.Table.from_pylist(rows(range(350)), schema=schema)
    assert_same_records(read_table(warehouse, "azdemo", "orders"), expected, "id", "orders")
