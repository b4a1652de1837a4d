"""Google Cloud connections (``connections/gcp.py``): Airflow's Google provider connection
and the Google environment resolved to one ``GcpSettings``, rendered for
google-cloud-storage, pyarrow and delta-rs, and checked against the GCS emulator."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyarrow import fs as pafs

from airflow_connectors.connections.base import ConnectionProblem, parse
from airflow_connectors.connections.gcp import GcpConfigFields, GcpSettings, gcp_settings
from airflow_connectors.testing.gcs import GcsServer

KEY = {
    "type": "service_account",
    "client_email": "reader@p.iam.gserviceaccount.com",
    "private_key_id": "abc123",
    "private_key": "-----BEGIN PRIVATE KEY-----\nnot-a-real-key-0042\n-----END PRIVATE KEY-----\n",
}


def test_the_provider_extra_with_and_without_its_old_prefix() -> None:
    prefixed = parse(
        "g",
        {
            "conn_type": "google_cloud_platform",
            "extra": {
                "extra__google_cloud_platform__keyfile_dict": json.dumps(KEY),
                "extra__google_cloud_platform__project": "p1",
            },
        },
    )
    plain = parse(
        "g", {"conn_type": "google_cloud_platform", "extra": {"keyfile_dict": KEY, "project": "p1"}}
    )
    for conn in (prefixed, plain):
        settings = GcpSettings.from_connection(conn)
        assert settings.project == "p1" and dict(settings.keyfile_dict or {}) == KEY
        assert KEY["private_key"] in settings.secrets()
        assert KEY["private_key"] not in repr(settings) and "reader@" in settings.describe()
    anonymous = parse(
        "g", {"conn_type": "google_cloud_platform", "extra": {"is_anonymous": "true"}}
    )
    assert GcpSettings.from_connection(anonymous).anonymous


def test_connection_problems_are_one_line_without_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_BROKEN_KEY",
        json.dumps({"conn_type": "google_cloud_platform", "extra": {"keyfile_dict": "{not json"}}),
    )
    with pytest.raises(ConnectionProblem) as broken:
        gcp_settings("broken_key", who="gcs_input")
    assert "keyfile_dict of connection 'broken_key' is not JSON" in str(broken.value)
    monkeypatch.setenv(
        "AIRFLOW_CONN_NOT_GCP", json.dumps({"conn_type": "aws", "password": "s3cr3t"})
    )
    with pytest.raises(ConnectionProblem) as wrong:
        gcp_settings("not_gcp", who="gcs_input")
    assert "has conn_type 'aws'; expected a Google Cloud connection" in str(wrong.value)
    monkeypatch.delenv("AIRFLOW_CONN_NOWHERE_GCP", raising=False)
    with pytest.raises(ConnectionProblem) as missing:
        gcp_settings("nowhere_gcp", who="gcs_input")
    message = str(missing.value)
    assert "gcp_conn_id 'nowhere_gcp' names no connection" in message
    assert "Google Cloud connection" in message and "\n" not in message


def test_the_environment_and_config_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    env = GcpSettings.from_environment({"STORAGE_EMULATOR_HOST": "127.0.0.1:4443"})
    assert (env.endpoint, env.anonymous) == ("http://127.0.0.1:4443", True)
    keyed = GcpSettings.from_environment(
        {"STORAGE_EMULATOR_HOST": "http://h:1", "GOOGLE_APPLICATION_CREDENTIALS": "/k.json"}
    )
    assert (keyed.anonymous, keyed.key_path) == (False, "/k.json")
    assert GcpSettings.from_environment(keyed.environment()) == keyed
    for name in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    fields = GcpConfigFields(key_path="/other.json", endpoint_url="http://e:2")
    assert fields.gcp_settings() == GcpSettings(key_path="/other.json", endpoint="http://e:2")
    with pytest.raises(ValueError, match="one way of authenticating"):
        GcpConfigFields(key_path="/k.json", anonymous=True)


def test_one_settings_for_three_libraries(gcs_server: GcsServer, gcs_bucket: str) -> None:
    """The same settings reach the emulator through google-cloud-storage, pyarrow and
    delta-rs, and each sees what the others wrote."""
    settings = gcp_settings_of(gcs_server)
    settings.storage_client().bucket(gcs_bucket).blob("a/one.txt").upload_from_string(b"one")
    fs = settings.pyarrow_filesystem()
    assert isinstance(fs, pafs.GcsFileSystem)
    with fs.open_input_stream(f"{gcs_bucket}/a/one.txt") as f:
        assert f.read() == b"one"
    uri = f"gs://{gcs_bucket}/t"
    opts = settings.storage_options()
    write_deltalake(uri, pa.table({"x": [1, 2]}), storage_options=opts)
    write_deltalake(uri, pa.table({"x": [3]}), storage_options=opts, mode="append")
    assert sorted(DeltaTable(uri, storage_options=opts).to_pyarrow_table()["x"].to_pylist()) == [
        1,
        2,
        3,
    ]
    names = [b.name for b in settings.storage_client().list_blobs(gcs_bucket, prefix="t/")]
    assert "t/_delta_log/00000000000000000001.json" in names


def gcp_settings_of(gcs: GcsServer) -> GcpSettings:
    conn: dict[str, Any] = gcs.connection()
    return GcpSettings.from_connection(parse("emulator", conn))
