"""Airflow connections named in transport and sink configs: the fields each plugin
declares in ``connection_fields`` (``aws_conn_id`` of ``s3_input`` and
``delta_table_input``, ``postgres_conn_id`` of ``postgres_input`` and the ``postgres``
sink, ``http_conn_id`` of ``url_input``, ...).

Transports resolve a connection id without Airflow, in the connection layer
(:mod:`airflow_connectors.connections`): from ``AIRFLOW_CONN_<ID>``, then from a resolver
a higher layer installs (:func:`airflow_connectors.connections.base.
set_connection_resolver`). In Airflow's tasks, :func:`install_resolver` makes that
resolver ask Airflow (``BaseHook.get_connection``: the metadata database, secrets
backends, environment), so the discover and finalize tasks list with the connection's
credentials. The ingest task's Spark job cannot ask Airflow: :func:`export_connections`
puts each connection its batch plan names into the task's environment as
``AIRFLOW_CONN_<ID>`` (JSON), which spark-submit and its executors inherit. Never on a
command line, in a ``--conf``, a template field or XCom; the secrets are registered with
Airflow's masker first (the password, and every value of the extra named like a
credential, request headers such as ``X-API-Key`` included).

:func:`check_connections` is ``airflow connections test`` for the connections a config
names, as the REST API's config validation runs it: the connection exists, and the
service answers with its credentials (S3: the bucket on the configured endpoint;
PostgreSQL: ``SELECT 1``; HTTP: a request to the base URL; Azure Blob Storage: a listing
of the container; Kafka: the topic's metadata from the brokers). Each problem is one line
naming the field and the connection, never a secret.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk.log import mask_secret

from airflow_connectors.connections import aws, azure, http, kafka, postgres
from airflow_connectors.connections.base import (
    AirflowConnection,
    ConnectionProblem,
    env_var,
    parse,
    set_connection_resolver,
)
from airflow_connectors.spec.redact import mask_text, mask_url, secret_values

log = logging.getLogger(__name__)


@functools.cache
def connection_fields() -> dict[str, str]:
    """Config fields that name an Airflow connection, with the kind of connection to
    create (as the Airflow UI names it): what every registered transport and sink
    declares in its ``connection_fields``."""
    from airflow_connectors.sinks import SINKS
    from airflow_connectors.transports import TRANSPORTS

    found: dict[str, str] = {}
    for registry in (TRANSPORTS, SINKS):
        for name in registry.names():
            try:
                plugin = registry.get(name)
            except Exception as e:  # a third-party plugin that does not import
                log.warning("%s %s: cannot read its connection fields: %s", registry.kind, name, e)
                continue
            found.update(getattr(plugin, "connection_fields", None) or {})
    return found


def airflow_connection(conn_id: str) -> dict[str, Any] | None:
    """Connection ``conn_id`` as Airflow's JSON form, or None when Airflow does not know it."""
    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    if conn.password:
        mask_secret(conn.password)
    data: dict[str, Any] = conn.to_dict(prune_empty=True, validate=False)
    data.pop("conn_id", None)
    # extra_dejson masks the extra's values Airflow deems sensitive; request headers
    # such as X-API-Key or Cookie it does not know.
    for secret in _secrets(conn_id, data):
        mask_secret(secret)
    return data


def _secrets(conn_id: str, data: Mapping[str, Any]) -> set[str]:
    """The password and the extra's values named like credentials (its ``headers``
    included); an extra that cannot be read holds none that can be told."""
    try:
        return parse(conn_id, data).secrets()
    except ConnectionProblem:
        return {str(data["password"])} if data.get("password") else set()


def _a(kind: str) -> str:
    """``kind`` with its indefinite article: "an HTTP", "a Postgres"."""
    return f"an {kind}" if kind.startswith(("A", "E", "I", "O", "U", "HTTP")) else f"a {kind}"


def install_resolver() -> None:
    """Make transports resolve connection ids through Airflow in this process."""
    set_connection_resolver(airflow_connection)


def conn_ids(config: Mapping[str, Any] | None) -> list[str]:
    """The connection ids a transport or sink config names."""
    return [conn_id for _, conn_id in _named(config)]


def _named(config: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(field, connection id)`` of every connection field set in ``config``."""
    config = config or {}
    return [
        (f, str(config[f]))
        for f in connection_fields()
        if isinstance(config.get(f), str) and config[f]
    ]


def export_connections(config: Mapping[str, Any] | None, connector: str) -> list[str]:
    """Put every connection a transport or sink ``config`` names into this process's
    environment as ``AIRFLOW_CONN_<ID>`` (children such as spark-submit inherit it);
    returns the variable names. A connection that is already in the environment is left
    as it is. Raises ``LookupError`` in one line, naming ``connector``, for a connection
    nobody knows."""
    names = []
    for field, conn_id in _named(config):
        var = env_var(conn_id)
        names.append(var)
        if os.environ.get(var):
            continue
        data = airflow_connection(conn_id)
        if data is None:
            kind = connection_fields()[field]
            raise LookupError(
                f"connector {connector}: {field} {conn_id!r} is not an Airflow connection; "
                f"create {_a(kind)} connection {conn_id!r} (Admin > Connections, "
                f"or `airflow connections add`), or set {var}"
            )
        os.environ[var] = json.dumps(data)
    return names


# --- `airflow connections test` for the REST API's config validation --------------------

#: Seconds a connection check waits for the service (to connect, and for its answer).
CHECK_TIMEOUT = 10.0


def check_connections(
    config: Mapping[str, Any] | None, timeout: float = CHECK_TIMEOUT
) -> dict[str, str]:
    """``field -> problem`` for each connection ``config`` names that fails what
    ``airflow connections test`` checks: it exists, and the service answers with its
    credentials. A problem is one line naming the field and connection, no secret."""
    problems: dict[str, str] = {}
    for field, conn_id in _named(config):
        problem = check_connection(field, conn_id, config or {}, timeout)
        if problem is not None:
            problems[field] = problem
    return problems


def check_connection(
    field: str, conn_id: str, config: Mapping[str, Any], timeout: float = CHECK_TIMEOUT
) -> str | None:
    """What is wrong with connection ``conn_id`` named by ``field`` of ``config`` (None:
    it exists and its service answers)."""
    try:
        data = airflow_connection(conn_id)
    except Exception as e:  # a secrets backend that fails, a malformed AIRFLOW_CONN_<ID>
        return (
            f"{field} {conn_id!r}: Airflow cannot read the connection ({type(e).__name__}); "
            f"check it (Admin > Connections, or {env_var(conn_id)})"
        )
    if data is None:
        return (
            f"{field} {conn_id!r} is not an Airflow connection; create "
            f"{_a(connection_fields()[field])} connection {conn_id!r} (Admin > Connections, or "
            f"`airflow connections add`), or set {env_var(conn_id)}"
        )
    try:
        conn = parse(conn_id, data)
    except ConnectionProblem as e:
        return f"{field} {conn_id!r}: {e}"
    secrets = conn.secrets() | secret_values(dict(conn.extra))
    check = _CHECKS.get(connection_fields()[field])
    try:
        problem = check(conn, config, timeout) if check is not None else None
    except Exception as e:  # whatever the client library raises: one line, scrubbed
        problem = f"the check failed: {type(e).__name__}: {_first_line(e)}"
    if problem is None:
        return None
    return mask_text(f"{field} {conn_id!r}: {problem}", secrets)


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


def _check_s3(conn: AirflowConnection, config: Mapping[str, Any], timeout: float) -> str | None:
    """The bucket the config names (else the bucket list) on the connection's endpoint."""
    import boto3

    from airflow_connectors.transports import _s3

    settings = aws.AwsSettings.from_connection(conn)
    settings = dataclasses.replace(
        settings,
        endpoint_url=config.get("endpoint_url") or settings.endpoint_url,
        region=config.get("region") or settings.region,
    )
    client = boto3.session.Session().client(
        "s3",
        **settings.client_kwargs(
            connect_timeout=timeout,
            read_timeout=timeout,
            retries={"total_max_attempts": 1, "mode": "standard"},
        ),
    )
    bucket = _bucket_of(config)
    where = settings.where()
    what = f"HEAD s3://{bucket} on {where}" if bucket else f"list buckets on {where}"
    try:
        if bucket:
            client.head_bucket(Bucket=bucket)
        else:
            client.list_buckets()
    except Exception as e:
        code, status = _s3.error_code(e)
        if bucket and (code in ("404", "NoSuchBucket", "NotFound") or status == 404):
            return f"bucket {bucket!r} does not exist on {where}; check the bucket and endpoint"
        return str(_s3.translate(e, what, settings.secrets())).removeprefix("s3_input: ")
    return None


def _bucket_of(config: Mapping[str, Any]) -> str | None:
    """The bucket of ``bucket_name`` (``s3_input``) or of an ``s3://`` ``uri``."""
    if isinstance(config.get("bucket_name"), str) and config["bucket_name"]:
        return str(config["bucket_name"])
    uri = config.get("uri")
    if isinstance(uri, str) and uri.startswith(("s3://", "s3a://")):
        return uri.split("://", 1)[1].split("/", 1)[0] or None
    return None


def _check_postgres(
    conn: AirflowConnection, config: Mapping[str, Any], timeout: float
) -> str | None:
    """``SELECT 1`` over a connection made with the connection's credentials."""
    import psycopg

    uri = postgres.libpq_uri(conn)
    wait = min(int(config.get("connect_timeout") or timeout), int(timeout)) or 1
    try:
        with psycopg.connect(uri, connect_timeout=wait) as session:
            session.execute("SELECT 1").fetchone()
    except psycopg.Error as e:
        return (
            f"cannot run SELECT 1 on {postgres.redacted(uri)}: "
            f"{mask_text(_first_line(e), postgres.uri_secrets(uri))}"
        )
    return None


def _check_http(conn: AirflowConnection, config: Mapping[str, Any], timeout: float) -> str | None:
    """A GET of the base URL (of the config's URL when the connection has no host) with
    the connection's headers and auth: an answer that is not a refusal or a server error."""
    import httpx

    client_conn = http.HttpConnection.from_connection(conn)
    path = config.get("path")
    url = client_conn.base_url or (path if isinstance(path, str) and "://" in path else None)
    if url is None:
        return "has no host, and path is not a URL; set the connection's host (the base URL)"
    shown = mask_url(url)
    try:
        with httpx.Client(
            timeout=timeout,
            follow_redirects=False,
            headers=dict(client_conn.headers),
            auth=client_conn.auth,
        ) as client:
            resp = client.get(url, headers={"Accept-Encoding": "identity"})
            resp.close()
    except httpx.TimeoutException:
        return f"GET {shown} got no answer within {timeout:g} s; check the host and port"
    except httpx.HTTPError as e:
        return (
            f"cannot reach {shown} ({type(e).__name__}: {_first_line(e)}); check the host and port"
        )
    if resp.status_code in (401, 403, 407):
        return (
            f"GET {shown} answered HTTP {resp.status_code}: the server refused the "
            "connection's credentials; check its login, password and headers"
        )
    if resp.status_code >= 500:
        return f"GET {shown} answered HTTP {resp.status_code}; the server has trouble"
    return None


def _check_wasb(conn: AirflowConnection, config: Mapping[str, Any], timeout: float) -> str | None:
    """The first page of the container the config names (else of the account's
    containers), with the connection's credentials: listing is what a source needs."""
    settings = azure.AzureSettings.from_connection(conn)
    url = config.get("account_url")
    if isinstance(url, str) and url:
        settings = dataclasses.replace(settings, account_url=url)
    service = settings.blob_service_client(
        retry_total=0, connection_timeout=timeout, read_timeout=timeout
    )
    container = config.get("container")
    where = settings.where()
    try:
        if isinstance(container, str) and container:
            client = service.get_container_client(container)
            next(iter(client.list_blobs(results_per_page=1).by_page()), None)
        else:
            next(iter(service.list_containers(results_per_page=1).by_page()), None)
    except Exception as e:
        status = getattr(e, "status_code", None)
        if status == 404:
            return f"container {container!r} does not exist on {where}; check the container"
        if status in (401, 403):
            return (
                f"{where} refused the connection's credentials (HTTP {status}); check its "
                "account key, SAS token or connection string, and that it may list"
            )
        return f"cannot reach {where} ({type(e).__name__}: {_first_line(e)})"
    return None


def _check_kafka(conn: AirflowConnection, config: Mapping[str, Any], timeout: float) -> str | None:
    """The topic the config names (else the cluster's metadata) with the connection's
    librdkafka settings, the config's own winning (as ``kafka_input`` merges them)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    settings: dict[str, str | int | float | bool] = dict(kafka.settings_of(conn))
    settings.update({str(k): kafka.as_text(v) for k, v in config.items() if "." in str(k)})
    servers = settings.get("bootstrap.servers")
    if not servers:
        return (
            "the connection's extra names no bootstrap.servers; add it (a JSON object of "
            'librdkafka settings, such as {"bootstrap.servers": "broker:9092"})'
        )
    settings.pop("group.id", None)
    settings["socket.connection.setup.timeout.ms"] = str(int(timeout * 1000))
    topic = config.get("topic") if isinstance(config.get("topic"), str) else None
    try:
        admin = AdminClient(settings)
        meta = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as e:
        err = e.args[0] if e.args else e
        text = err.str() if hasattr(err, "str") else str(err)
        return f"cannot reach the brokers {servers} ({text}); check bootstrap.servers and the credentials"
    if topic is not None:
        found = meta.topics.get(topic)
        if found is None or found.error is not None:
            return f"topic {topic!r} does not exist on {servers}; create it or fix topic"
    return None


#: What ``airflow connections test`` runs per kind of connection (a kind without one:
#: the connection exists, nothing more).
_CHECKS: dict[str, Callable[[AirflowConnection, Mapping[str, Any], float], str | None]] = {
    aws.KIND: _check_s3,
    postgres.KIND: _check_postgres,
    http.KIND: _check_http,
    azure.KIND: _check_wasb,
    kafka.KIND: _check_kafka,
}
