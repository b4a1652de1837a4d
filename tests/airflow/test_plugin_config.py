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


def test_a_whole_connectors_flat_config_validates_with_its_errors_on_flat_keys() -> None:
    from airflow_connectors.airflow.api.connect.plugin_config import validate_connector

    good = {
        "name": "shop.orders.kafka",
        "connector.class": "kafka_input",
        "tasks.max": "2",
        "transport.config.topic": "orders",
        "transport.config.bootstrap.servers": "b:9092",
        "transport.config.sasl.password": "hunter2",
        "format.name": "json",
        "format.config.update_format": "raw",
        "errors.tolerance": "all",
    }
    answer = validate_connector(good)
    assert answer["error_count"] == 0, answer
    assert answer["name"] == "kafka_input"
    shown = values(answer)
    assert shown["tasks.max"]["value"] == "2" and shown["errors.tolerance"]["value"] == "all"
    assert shown["transport.config.sasl.password"]["value"] == "***"
    assert "hunter2" not in str(answer)
    definitions = {c["definition"]["name"]: c["definition"] for c in answer["configs"]}
    assert definitions["connector.class"]["required"] is True
    assert definitions["transport.config.topic"]["group"] == "kafka_input"
    assert definitions["format.config.update_format"]["group"] == "json"
    assert [c["definition"]["order_in_group"] for c in answer["configs"]] == list(
        range(len(answer["configs"]))
    )

    bad = validate_connector({**good, "tasks.max": "0", "errors.tolerance": "some"})
    errors = {name: v["errors"] for name, v in values(bad).items() if v["errors"]}
    assert errors == {
        "tasks.max": ["tasks.max: input should be greater than or equal to 1 (got 0)"],
        "errors.tolerance": ["errors.tolerance: input should be 'none' or 'all' (got 'some')"],
    }
    # Once the connector's own fields are valid, its plugins are checked.
    unknown = validate_connector({**good, "format.name": "jsn"})
    [problem] = [v["errors"] for v in values(unknown).values() if v["errors"]]
    assert problem[0].startswith("format.name: format 'jsn' is not available (did you mean 'json'")


def test_a_key_no_field_has_is_named_and_a_secret_one_masked() -> None:
    from airflow_connectors.airflow.api.connect.plugin_config import validate_connector

    answer = validate_connector(
        {
            "connector.class": "file_input",
            "transport.config.path": "/data",
            "format.name": "json",
            "aws.secret.access.key": "hunter2",
        }
    )
    assert answer["error_count"] == 1
    [(value, errors)] = [(v["value"], v["errors"]) for v in values(answer).values() if v["errors"]]
    assert value == "***" and "hunter2" not in str(answer)
    assert errors[0].startswith("aws.secret.access.key: unknown key 'aws.secret.access.key'")
