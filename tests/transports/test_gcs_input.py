"""``gcs_input`` against fake-gcs-server on 127.0.0.1 (the ``gcs_server`` fixture): the
conformance kit (the crash check included), the watermark and the re-list that finds
late keys, a replaced object, retries mid-object, errors in one line without secrets,
and a pipeline run into a table with a ``gcp_conn_id`` holding a service-account key."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers import read_table

from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.testing.conformance import (
    Connector,
    Source,
    TransportConformance,
    assert_same_records,
)
from airflow_connectors.testing.faultproxy import Fault, FaultProxy
from airflow_connectors.testing.gcs import GcsServer
from airflow_connectors.transports import Cursor, KeyOffset, Limits, WorkItem
from airflow_connectors.transports.gcs_input import GcsInputConfig, GcsInputTransport
from airflow_connectors.transports.retry import RetryPolicy

# The side lane runs it, beside the Azure Blob source (the suite's lanes balance so).
pytestmark = pytest.mark.sources


COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"}
JSON = {"name": "json", "config": {"update_format": "raw"}}


def json_lines(ids: range) -> bytes:
    return "".join(
        json.dumps({"id": i, "name": f"n{i}", "amount": i / 4}) + "\n" for i in ids
    ).encode()


def rows(ids: range) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}", "amount": i / 4} for i in ids]


def config_of(gcs: GcsServer | str, bucket: str, **config: Any) -> dict[str, Any]:
    endpoint = gcs if isinstance(gcs, str) else gcs.endpoint
    return {"bucket_name": bucket, "endpoint_url": endpoint, "anonymous": True, **config}


def source_of(gcs: GcsServer, bucket: str, records: range, **config: Any) -> Source:
    cfg = config_of(gcs, bucket, **{"relist_margin_s": 0, **config})
    return Source(
        transport="gcs_input",
        config=cfg,
        columns=COLUMNS,
        format=JSON,
        records=rows(records),
        key_column="id",
        unbounded_config={**cfg, "follow": True},
        invalid_configs={
            "relist_every": {**cfg, "relist_every": 0},
            "bucket_name": {**cfg, "bucket_name": "Not_A_Bucket"},
            "compression": {**cfg, "compression": "lz4"},
            "": {**cfg, "key": "x.json"},  # prefix and key both
        },
    )


def transport(gcs: GcsServer | str, bucket: str, **config: Any) -> GcsInputTransport:
    cfg = GcsInputConfig.model_validate(config_of(gcs, bucket, relist_margin_s=0, **config))
    spec = parse_pipeline({"pipeline": "p", "tables": {"t": {"columns": COLUMNS}}})
    return GcsInputTransport(cfg, spec.tables[0])


def listed(t: GcsInputTransport, cursor: Cursor) -> list[WorkItem]:
    return list(t.discover(cursor, Limits(now=time.time())))


class TestGcsInput(TransportConformance):
    """Three JSON-lines objects under a prefix (one in a 'folder'), plus an empty object
    and one outside the prefix that must not be read."""

    @pytest.fixture
    def source(self, gcs_server: GcsServer, gcs_bucket: str) -> Source:
        gcs_server.put(gcs_bucket, "drop/2026/a.json", json_lines(range(0, 200)))
        gcs_server.put(gcs_bucket, "drop/2026/11/b.json", json_lines(range(200, 400)))
        gcs_server.put(gcs_bucket, "drop/c.json", json_lines(range(400, 600)))
        gcs_server.put(gcs_bucket, "drop/empty.json", b"")
        gcs_server.put(gcs_bucket, "elsewhere/d.json", json_lines(range(900, 910)))
        return source_of(gcs_server, gcs_bucket, range(600), prefix="drop/")


class TestGcsInputByteRanges(TransportConformance):
    """One object read in byte ranges of 2 KiB (one range per discovery)."""

    @pytest.fixture
    def source(self, gcs_server: GcsServer, gcs_bucket: str) -> Source:
        gcs_server.put(gcs_bucket, "big/all.json", json_lines(range(300)))
        return source_of(
            gcs_server, gcs_bucket, range(300), prefix="big/", max_object_bytes_per_batch=2048
        )


# --- listing -------------------------------------------------------------------------


def test_lists_after_the_watermark_and_the_relist_finds_late_keys(
    gcs_server: GcsServer, gcs_bucket: str, tmp_path: Path
) -> None:
    for n in range(1, 21):
        gcs_server.put(gcs_bucket, f"w/{n:03d}.json", json_lines(range(n * 10, n * 10 + 10)))
    t = transport(gcs_server, gcs_bucket, prefix="w/")
    # startOffset is inclusive: the watermark's own key is not listed again.
    after = listed(t, Cursor(watermark="w/005.json", since_relist=0))
    assert [i.key for i in after] == [f"w/{n:03d}.json" for n in range(6, 21)]
    assert t.report.relisted_at is None, "a listing after the watermark is not a re-list"
    assert after[0].meta["etag"] == str(
        gcs_server.client().bucket(gcs_bucket).get_blob("w/006.json").generation
    )

    source = source_of(gcs_server, gcs_bucket, range(10, 210), prefix="w/", relist_every=3)
    c = Connector(source, tmp_path / "c")
    try:
        c.drain()
        assert_same_records(c.table(), c.expected(), "id", "table")
        mark = c.store.cursor(c.ref)
        assert mark.watermark == "w/020.json" and mark.late_after is not None
        assert len(c.store.offsets(c.ref)) <= 1, "completed keys below the watermark kept rows"
        # A late key below the watermark: listings after it miss it, the re-list reads it.
        gcs_server.put(gcs_bucket, "w/000-late.json", json_lines(range(0, 10)))
        gcs_server.put(gcs_bucket, "w/021.json", json_lines(range(210, 220)))
        rounds = 0
        while c.table().num_rows < 220 and rounds < 5:
            c.run(c.discover().batch_ids)
            rounds += 1
        expected = pa.Table.from_pylist(rows(range(220)), schema=c.expected().schema)
        assert_same_records(c.table(), expected, "id", "table with the late key")
        assert rounds <= 3, f"the late key took {rounds} discoveries with relist_every 3"
        assert c.finalize()
    finally:
        c.close()


def test_a_replaced_object_is_a_notice_and_its_planned_generation_is_not_read(
    gcs_server: GcsServer, gcs_bucket: str
) -> None:
    gcs_server.put(gcs_bucket, "r/a.json", json_lines(range(3)))
    t = transport(gcs_server, gcs_bucket, prefix="r/")
    [item] = listed(t, Cursor())
    done = KeyOffset(item.size or 0, 3, True, {"etag": item.meta["etag"]})
    assert listed(t, Cursor(offsets={"r/a.json": done})) == []
    assert not t.report.notices
    gcs_server.put(gcs_bucket, "r/a.json", json_lines(range(10)))
    assert listed(t, Cursor(offsets={"r/a.json": done})) == []
    [(notice, key)] = t.report.notices
    assert key == "r/a.json" and f"gs://{gcs_bucket}/r/a.json was replaced" in notice, notice
    # The generation planned is gone: reading it fails as an unreadable object, and no
    # byte of the new version is read under the old plan.
    with pytest.raises(FileNotFoundError, match=r"generation \d+ of the object is gone"):
        b"".join(t.read(item))


def test_single_key_and_a_missing_one(gcs_server: GcsServer, gcs_bucket: str) -> None:
    gcs_server.put(gcs_bucket, "one/x.json", json_lines(range(3)))
    gcs_server.put(gcs_bucket, "one/x.json.bak", json_lines(range(3)))
    t = transport(gcs_server, gcs_bucket, key="one/x.json")
    [item] = listed(t, Cursor())
    assert item.key == "one/x.json" and b"".join(t.read(item)) == json_lines(range(3))
    missing = transport(gcs_server, gcs_bucket, key="one/nope.json")
    assert listed(missing, Cursor()) == []
    assert "one/nope.json holds no object" in missing.report.notices[0][0]


# --- reading under faults ----------------------------------------------------------------


def test_a_reset_mid_object_is_retried_from_the_byte_reached(
    gcs_server: GcsServer, gcs_bucket: str
) -> None:
    body = json_lines(range(5000))
    gcs_server.put(gcs_bucket, "f/big.json", body)
    with FaultProxy(gcs_server.endpoint) as proxy:
        proxy.add(Fault.reset_after(10_000), method="GET", path="f%2Fbig.json")
        proxy.add(Fault.error(503, "ServiceUnavailable"), method="GET", path="f%2Fbig.json")
        t = transport(proxy.endpoint_url, gcs_bucket, prefix="f/")
        t.retry = RetryPolicy(timeout_s=30, max_delay_s=0.2)
        [item] = listed(t, Cursor())
        assert b"".join(t.read(item)) == body
        assert proxy.injected["reset"] == 1 and proxy.injected["503 ServiceUnavailable"] == 1


# --- errors ------------------------------------------------------------------------------


def _one_line(e: BaseException, *forbidden: str) -> str:
    message = str(e)
    assert "\n" not in message and "Traceback" not in message, message
    for secret in forbidden:
        assert secret not in message, f"a secret in {message!r}"
    return message


def test_a_missing_bucket_and_an_unreachable_endpoint(gcs_server: GcsServer) -> None:
    t = transport(gcs_server, "no-such-bucket", prefix="x/")
    with pytest.raises(FileNotFoundError) as missing:
        listed(t, Cursor())
    message = _one_line(missing.value)
    assert message.startswith(
        "gcs_input: list gs://no-such-bucket/x/: bucket no-such-bucket does not exist"
    )

    down = transport("http://127.0.0.1:9", "b-1", prefix="x/")
    down.retry = RetryPolicy.none()
    with pytest.raises(OSError) as unreachable:
        listed(down, Cursor())
    message = _one_line(unreachable.value)
    assert "cannot reach Cloud Storage" in message and "Connection refused" in message, message


def test_refused_access_names_the_location_without_secrets(
    gcs_server: GcsServer, gcs_bucket: str, key_server: KeyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    gcs_server.put(gcs_bucket, "d/a.json", json_lines(range(3)))
    # The server refuses (403): PermissionError, once, naming the bucket.
    with FaultProxy(gcs_server.endpoint) as proxy:
        proxy.add(Fault.error(403, "AccessDenied"), times=None)
        t = transport(proxy.endpoint_url, gcs_bucket, prefix="d/")
        with pytest.raises(PermissionError) as refused:
            listed(t, Cursor())
    message = _one_line(refused.value)
    assert f"list gs://{gcs_bucket}/d/ was refused (403" in message, message
    # The token endpoint refuses the key: PermissionError without the key in it.
    key_server.refuse = True
    monkeypatch.setenv("AIRFLOW_CONN_GCS_KEY", json.dumps(key_server.connection(gcs_server)))
    t = transport(gcs_server, gcs_bucket, prefix="d/", anonymous=False, gcp_conn_id="gcs_key")
    with pytest.raises(PermissionError) as denied:
        listed(t, Cursor())
    message = _one_line(denied.value, key_server.private_key, "BEGIN PRIVATE KEY")
    assert "credentials were refused" in message, message


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"bucket_name": "ok-bucket"}, "exactly one of prefix"),
        ({"bucket_name": "gs://ok-bucket/x", "prefix": ""}, "not a URL"),
        ({"bucket_name": "ab", "prefix": ""}, "not a valid bucket name"),
        ({"bucket_name": "ok-b", "prefix": "", "gcp_conn_id": "c", "anonymous": True}, "one way"),
    ],
)
def test_config_rules(config: dict[str, Any], says: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=says):
        GcsInputConfig.model_validate(config)


# --- a service-account key and a pipeline run ------------------------------------------


class KeyServer:
    """A service-account key (a fresh RSA key) whose token endpoint is a server on
    127.0.0.1: google-auth signs a JWT with the key and trades it for an access token
    there, as it does with Google's, so ``keyfile_dict`` is used end to end."""

    def __init__(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private_key = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        self.refuse = False
        self.tokens = 0
        owner = self

        class Token(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.tokens += 1
                status, body = (
                    (400, {"error": "invalid_grant", "error_description": "Invalid JWT"})
                    if owner.refuse
                    else (
                        200,
                        {"access_token": "t0k3n", "expires_in": 3600, "token_type": "Bearer"},
                    )
                )
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Token)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def keyfile(self) -> dict[str, Any]:
        return {
            "type": "service_account",
            "project_id": "test-project",
            "private_key_id": "0123456789abcdef",
            "private_key": self.private_key,
            "client_email": "reader@test-project.iam.gserviceaccount.com",
            "client_id": "1",
            "token_uri": f"http://127.0.0.1:{self.server.server_address[1]}/token",
        }

    def connection(self, gcs: GcsServer) -> dict[str, Any]:
        extra = {"keyfile_dict": json.dumps(self.keyfile()), "endpoint_url": gcs.endpoint}
        return {"conn_type": "google_cloud_platform", "extra": extra}


@pytest.fixture
def key_server() -> Iterator[KeyServer]:
    server = KeyServer()
    yield server
    server.server.shutdown()
    server.server.server_close()


def test_cli_run_with_a_service_account_connection(
    gcs_server: GcsServer, gcs_bucket: str, key_server: KeyServer, tmp_path: Path
) -> None:
    """``airflow-connectors run`` reads the bucket into a Parquet table, discovery and
    the Spark workers both resolving ``gcp_conn_id`` from ``AIRFLOW_CONN_<ID>`` (a key
    traded for a token); a second run reads only the new object. No secret is printed."""
    from test_cli import cli

    for n in range(3):
        gcs_server.put(gcs_bucket, f"orders/{n}.json", json_lines(range(n * 100, n * 100 + 100)))
    config = {"bucket_name": gcs_bucket, "prefix": "orders/", "gcp_conn_id": "landing_gcs"}
    connector = {"name": "landing", "transport": {"name": "gcs_input", "config": config}}
    doc = {
        "pipeline": "gcsdemo",
        "tables": {"orders": {"columns": COLUMNS, "connectors": [{**connector, "format": JSON}]}},
    }
    spec = tmp_path / "gcs.json"
    spec.write_text(json.dumps(doc))
    warehouse = tmp_path / "wh"
    args = ["run", str(spec), "--warehouse", str(warehouse)]
    args += ["--state-store-url", f"sqlite:///{tmp_path / 'state.db'}"]
    os.environ["AIRFLOW_CONN_LANDING_GCS"] = json.dumps(key_server.connection(gcs_server))
    try:
        first = cli(*args, home=tmp_path / "home")
        gcs_server.put(gcs_bucket, "orders/3.json", json_lines(range(300, 350)))
        second = cli(*args, home=tmp_path / "home")
    finally:
        os.environ.pop("AIRFLOW_CONN_LANDING_GCS", None)
    for out in (first, second):
        assert out.returncode == 0, out.stdout + out.stderr
        assert key_server.private_key not in out.stdout + out.stderr
    assert key_server.tokens >= 2, "the key was never traded for a token"
    table = read_table(str(warehouse), "gcsdemo", "orders")
    expected = pa.Table.from_pylist(rows(range(350)), schema=table.schema)
    assert_same_records(table, expected, "id", "orders")


def test_describe_and_lineage_location(gcs_server: GcsServer) -> None:
    t = transport(gcs_server, "bucket", prefix="in/", follow=True)
    assert t.describe() == "gcs_input: gs://bucket/in/ (follow)"
    assert t.location() == "gs://bucket/in/"
    [dataset] = t.lineage_datasets()
    assert (dataset.namespace, dataset.name) == ("gs://bucket", "in")
