"""Airflow's Kafka connection (``apache-airflow-providers-apache-kafka``'s connection type
``kafka``) as ``kafka_input`` uses it: the connection's extra is a JSON object of
librdkafka settings (``bootstrap.servers``, ``security.protocol``, ``sasl.*``...), exactly
what the provider's ``KafkaBaseHook`` passes to confluent-kafka. Nothing here imports
Airflow or confluent-kafka."""

from __future__ import annotations

from airflow_connectors.connections.base import AirflowConnection, ConnectionProblem, lookup

#: The connection type as the Airflow UI names it.
KIND = "Apache Kafka"


def kafka_settings(conn_id: str, who: str = "kafka_input") -> dict[str, str]:
    """The librdkafka settings of Airflow connection ``conn_id``: its extra, every value
    as text (librdkafka takes strings). Raises
    :class:`~airflow_connectors.connections.base.ConnectionProblem` in one line when the
    connection is unknown, or names no ``bootstrap.servers``."""
    conn = lookup(
        conn_id,
        who=who,
        field="kafka_config_id",
        kind=KIND,
        instead="give bootstrap.servers (and the other librdkafka settings) in the config",
    )
    settings = settings_of(conn)
    if not settings.get("bootstrap.servers"):
        raise ConnectionProblem(
            f"{who}: kafka_config_id {conn_id!r}: the connection's extra names no "
            "bootstrap.servers; add it to the extra (a JSON object of librdkafka settings, "
            'such as {"bootstrap.servers": "broker:9092"}) as the Apache Kafka provider '
            "expects"
        )
    return settings


def settings_of(conn: AirflowConnection) -> dict[str, str]:
    """A Kafka connection's librdkafka settings: its extra, every value as text, and
    ``bootstrap.servers`` from its host and port when the extra has none."""
    settings = {str(k): as_text(v) for k, v in conn.extra.items()}
    if not settings.get("bootstrap.servers") and conn.host:
        port = f":{conn.port}" if conn.port else ""
        settings["bootstrap.servers"] = f"{conn.host}{port}"
    return settings


def as_text(value: object) -> str:
    """A librdkafka setting's value as the text librdkafka takes (booleans lower case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


__all__ = ["KIND", "as_text", "kafka_settings", "settings_of"]
