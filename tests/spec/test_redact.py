"""What a user may see of a credential: one masking rule for configs, keys and text."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr

from airflow_connectors.spec.redact import (
    MASK,
    mask_config,
    mask_text,
    mask_url,
    secret_fields,
    secret_values,
)


def test_url_userinfo_and_secret_query_parameters_are_masked() -> None:
    assert mask_url("http://reader:PW123@host:80/x.json") == f"http://reader:{MASK}@host:80/x.json"
    assert (
        mask_url("postgresql+psycopg://postgres:pw@127.0.0.1:5432/test")
        == f"postgresql+psycopg://postgres:{MASK}@127.0.0.1:5432/test"
    )
    assert (
        mask_url("https://h/x?X-Amz-Signature=abc&page=2")
        == f"https://h/x?X-Amz-Signature={MASK}&page=2"
    )
    assert mask_url("http://host/x?token=abc") == f"http://host/x?token={MASK}"
    assert mask_url("http://host/data.json") == "http://host/data.json"


def test_fields_named_like_secrets_are_masked_and_object_keys_are_not() -> None:
    config = {
        "path": "http://reader:PW123@host/x",
        "aws_secret_access_key": "XYZ",
        "aws_access_key_id": "AKIA",
        "key": "orders/2026.json",
        "partition_column": "id",
        "headers": {"Authorization": "Bearer t0k"},
        "nested": [{"password": "p4ss"}],
        "limit": 5,
    }
    masked = mask_config(config)
    assert masked == {
        "path": f"http://reader:{MASK}@host/x",
        "aws_secret_access_key": MASK,
        "aws_access_key_id": MASK,
        "key": "orders/2026.json",
        "partition_column": "id",
        "headers": {"Authorization": MASK},
        "nested": [{"password": MASK}],
        "limit": 5,
    }
    assert config["aws_secret_access_key"] == "XYZ"  # a copy, the original is intact


def test_fields_a_model_marks_secret() -> None:
    class Config(BaseModel):
        dsn: str = Field(json_schema_extra={"secret": True})
        pin: SecretStr
        name: str

    assert secret_fields(Config) == {"dsn", "pin"}
    assert mask_config({"dsn": "x", "pin": "1234", "name": "n"}, secret_fields(Config)) == {
        "dsn": MASK,
        "pin": MASK,
        "name": "n",
    }


def test_free_text_is_scrubbed_of_every_secret_of_a_config() -> None:
    config = {"path": "http://reader:PW123@host/x", "api_key": "k-991"}
    secrets = secret_values(config)
    assert secrets == {"PW123", "k-991"}
    text = "GET http://reader:PW123@host/x failed; header k-991 refused; retry with PW123"
    scrubbed = mask_text(text, secrets)
    assert "PW123" not in scrubbed and "k-991" not in scrubbed
    assert scrubbed.startswith(f"GET http://reader:{MASK}@host/x failed")
