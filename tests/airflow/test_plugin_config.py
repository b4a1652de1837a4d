"""Kafka Connect's ``PUT /connector-plugins/{plugin}/config/validate`` answer for
``kafka_input``, whose librdkafka settings are dotted keys beside its own fields: each
setting given is listed with its value (a secret masked), and a missing
``bootstrap.servers`` is the one error."""

from __future__ import annotations

from airflow_connectors.airflow.api.connect.plugin_config import validate
from airflow_connectors.transports.kafka_input import KafkaInputConfig


def values(answer: dict) -> dict:
    return {c["value"]["name"]: c["value"] for c in answer["configs"]}


def test_librdkafka_settings_are_listed_with_secrets_masked() -> None:
    answer = validate(
        "kafka_input",
        KafkaInputConfig,
        {"topic": "orders", "bootstrap.servers": "b:9092", "sasl.password": "hunter2"},
    )
    assert answer["error_count"] == 0
    shown = values(answer)
    assert shown["topic"]["value"] == "orders"
    assert shown["bootstrap.servers"]["value"] == "b:9092"
    assert shown["sasl.password"]["value"] == "***"
    assert "hunter2" not in str(answer)


def test_missing_bootstrap_servers_is_the_one_error() -> None:
    answer = validate("kafka_input", KafkaInputConfig, {"topic": "orders"})
    assert answer["error_count"] == 1
    [errors] = [v["errors"] for v in values(answer).values() if v["errors"]]
    assert errors == [
        "bootstrap.servers is required (the brokers, host:port,...), or name an Airflow "
        "Kafka connection in kafka_config_id"
    ]
