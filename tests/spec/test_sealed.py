"""Secrets at rest are sealed with Airflow's Fernet key (or the embedded key file), and
opened again when a spec or plan is validated; a process with another key says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from airflow_connectors.catalog import sealed_connector, sealed_table
from airflow_connectors.spec.models import ConnectorSpec, TableSpec
from airflow_connectors.spec.sealed import PREFIX, SealedValueError, seal, unseal

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    k = Fernet.generate_key().decode()
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AIRFLOW__CONNECTORS__SECRETS_KEY", raising=False)
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", k)
    return k


def s3_connector() -> dict:
    return {
        "name": "c",
        "transport": {
            "name": "s3_input",
            "config": {
                "bucket_name": "b",
                "aws_access_key_id": "AKIAEXAMPLE0001",
                "aws_secret_access_key": SECRET,
                "endpoint_url": "http://127.0.0.1:9000",
            },
        },
        "format": {"name": "json"},
    }


def test_every_secret_field_is_sealed_and_opened_by_validation(key: str) -> None:
    doc = sealed_connector(s3_connector())
    config = doc["transport"]["config"]
    assert config["aws_secret_access_key"].startswith(PREFIX)
    assert config["aws_access_key_id"].startswith(PREFIX)  # named like a secret
    assert config["bucket_name"] == "b" and config["endpoint_url"] == "http://127.0.0.1:9000"
    assert SECRET not in repr(doc)
    # Validation (a plan read back, an operator's argument) opens it, in memory only.
    spec = ConnectorSpec.model_validate(doc)
    assert spec.transport.config["aws_secret_access_key"] == SECRET
    # Deterministic: parsing the DAG file again serializes the same DAG (one version in
    # Airflow, its triggers kept); another secret seals differently.
    assert sealed_connector(s3_connector()) == doc
    other = s3_connector()
    other["transport"]["config"]["aws_secret_access_key"] = SECRET + "x"
    resealed = sealed_connector(other)["transport"]["config"]["aws_secret_access_key"]
    assert resealed != config["aws_secret_access_key"]


def test_urls_with_passwords_and_sink_secrets_are_sealed_templates_are_not(key: str) -> None:
    config = {
        "path": "https://reader:pw-123456@example.test/data.json",
        "plain": "https://example.test/data.json",
        "token": "{{ conn.api.password }}",
    }
    sealed = seal(config)
    assert sealed["path"].startswith(PREFIX) and sealed["plain"] == config["plain"]
    assert sealed["token"] == config["token"]  # a template, rendered at run time
    assert unseal(sealed) == config
    table = TableSpec.model_validate(
        {
            "name": "t",
            "sink": {"name": "postgres", "config": {"uri": "postgresql://u:pw-98765@h/db"}},
        }
    )
    doc = sealed_table(table.model_dump(mode="json"))
    assert "pw-98765" not in repr(doc)
    assert TableSpec.model_validate(doc).sink.config["uri"] == "postgresql://u:pw-98765@h/db"


def test_rotation_and_a_wrong_key(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sealed = seal({"password": SECRET})
    new = Fernet.generate_key().decode()
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", f"{new},{key}")  # rotated: old last
    assert unseal(sealed) == {"password": SECRET}
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", new)
    with pytest.raises(SealedValueError, match="another key"):
        unseal(sealed)
    # For display (the REST config, the page) a value that cannot be opened is masked.
    assert unseal(sealed, unopened="***") == {"password": "***"}


def test_without_airflow_a_key_file_is_made_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home = tmp_path / "embedded"
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    monkeypatch.delenv("AIRFLOW__CORE__FERNET_KEY", raising=False)
    monkeypatch.delenv("AIRFLOW__CONNECTORS__SECRETS_KEY", raising=False)
    monkeypatch.delenv("AIRFLOW_CONFIG", raising=False)
    sealed = seal({"password": SECRET})
    keyfile = home / "connectors" / "secrets.key"
    assert keyfile.is_file() and oct(keyfile.stat().st_mode & 0o777) == "0o600"
    assert unseal(sealed) == {"password": SECRET}
    keyfile.unlink()
    with pytest.raises(SealedValueError, match="no key"):
        unseal(sealed)


def test_a_secret_field_of_the_wrong_type_is_not_quoted_in_the_error() -> None:
    """A validation error (shown by the CLI, the REST validate, an invalid connector's
    DAG docs and the dag-processor log) never quotes a secret field's value."""
    from airflow_connectors.spec.errors import SpecError, validated
    from airflow_connectors.transports.s3_input import S3InputConfig

    errors: list[SpecError] = []
    config = {
        "bucket_name": "landing-bucket",
        "prefix": "",
        "aws_access_key_id": "AKIAEXAMPLE0001",
        "aws_secret_access_key": 98765432101,
    }
    validated(["config"], S3InputConfig, config, errors)
    assert [e.path for e in errors] == ["config.aws_secret_access_key"]
    assert "98765432101" not in str(errors[0])
