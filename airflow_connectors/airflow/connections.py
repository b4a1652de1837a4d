"""Airflow connections named in transport and sink configs (``aws_conn_id`` of
``s3_input`` and ``delta_table_input``, ``postgres_conn_id`` of ``postgres_input`` and the
``postgres`` sink, ``http_conn_id`` of ``url_input``).

Transports resolve a connection id without Airflow: from ``AIRFLOW_CONN_<ID>``, then
from a resolver a higher layer installs (:func:`airflow_connectors.transports._s3.
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
PostgreSQL: ``SELECT 1``; HTTP: a request to the base URL). Each problem is one line
naming the field and the connection, never a secret.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk.log import mask_secret

from airflow_connectors.spec.redact import mask_text, mask_url, secret_values
from airflow_connectors.transports import _s3

#: Transport and sink config fields that name an Airflow connection, with the kind of
#: connection to create (as the Airflow UI names it).
CONN_ID_FIELDS = {
    "aws_conn_id": "Amazon Web Services",
    "postgres_conn_id": "Postgres",
    "http_conn_id": "HTTP",
}


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
    for secret in _extra_secrets(data.get("extra")):
        mask_secret(secret)
    return data


def _extra_secrets(extra: Any) -> set[str]:
    """Values of a connection's extra (and of its ``headers``) named like credentials."""
    from airflow_connectors.transports._http import secret_header

    if not isinstance(extra, Mapping):
        return set()
    found = {str(v) for k, v in extra.items() if isinstance(v, str) and secret_header(str(k))}
    found |= _extra_secrets(extra.get("headers"))
    return {v for v in found if len(v) >= 3}


def _a(kind: str) -> str:
    """``kind`` with its indefinite article: "an HTTP", "a Postgres"."""
    return f"an {kind}" if kind.startswith(("A", "E", "I", "O", "U", "HTTP")) else f"a {kind}"


def install_resolver() -> None:
    """Make transports resolve connection ids through Airflow in this process."""
    _s3.set_connection_resolver(airflow_connection)


def conn_ids(config: Mapping[str, Any] | None) -> list[str]:
    """The connection ids a transport or sink config names."""
    return [conn_id for _, conn_id in _named(config)]


def _named(config: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(field, connection id)`` of every connection field set in ``config``."""
    config = config or {}
    return [
        (f, str(config[f])) for f in CONN_ID_FIELDS if isinstance(config.get(f), str) and config[f]
    ]


def export_connections(config: Mapping[str, Any] | None, connector: str) -> list[str]:
    """Put every connection a transport or sink ``config`` names into this process's
    environment as ``AIRFLOW_CONN_<ID>`` (children such as spark-submit inherit it);
    returns the variable names. A connection that is already in the environment is left
    as it is. Raises ``LookupError`` in one line, naming ``connector``, for a connection
    nobody knows."""
    names = []
    for field, conn_id in _named(config):
        var = _s3.conn_env_var(conn_id)
        names.append(var)
        if os.environ.get(var):
            continue
        data = airflow_connection(conn_id)
        if data is None:
            raise LookupError(
                f"connector {connector}: {field} {conn_id!r} is not an Airflow connection; "
                f"create {_a(CONN_ID_FIELDS[field])} connection {conn_id!r} (Admin > Connections, "
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
            f"check it (Admin > Connections, or {_s3.conn_env_var(conn_id)})"
        )
    if data is None:
        return (
            f"{field} {conn_id!r} is not an Airflow connection; create "
            f"{_a(CONN_ID_FIELDS[field])} connection {conn_id!r} (Admin > Connections, or "
            f"`airflow connections add`), or set {_s3.conn_env_var(conn_id)}"
        )
    secrets = _connection_secrets(data)
    try:
        problem = _CHECKS[field](data, config, timeout)
    except Exception as e:  # whatever the client library raises: one line, scrubbed
        problem = f"the check failed: {type(e).__name__}: {_first_line(e)}"
    if problem is None:
        return None
    return mask_text(f"{field} {conn_id!r}: {problem}", secrets)


def _connection_secrets(data: Mapping[str, Any]) -> set[str]:
    found = _extra_secrets(data.get("extra")) | secret_values(data.get("extra") or {})
    if data.get("password"):
        found.add(str(data["password"]))
    return found


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


def _check_s3(data: Mapping[str, Any], config: Mapping[str, Any], timeout: float) -> str | None:
    """The bucket the config names (else the bucket list) on the connection's endpoint."""
    import boto3
    from botocore.config import Config

    creds = _s3.parse_connection("check", dict(data))
    endpoint = config.get("endpoint_url") or creds.endpoint_url
    region = config.get("region") or creds.region
    client = boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=creds.access_key,
        aws_secret_access_key=creds.secret_key,
        aws_session_token=creds.session_token,
        config=Config(
            connect_timeout=timeout,
            read_timeout=timeout,
            retries={"total_max_attempts": 1, "mode": "standard"},
        ),
    )
    bucket = _bucket_of(config)
    where = endpoint or "AWS"
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
        return str(_s3.translate(e, what, creds.secrets())).removeprefix("s3_input: ")
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
    data: Mapping[str, Any], config: Mapping[str, Any], timeout: float
) -> str | None:
    """``SELECT 1`` over a connection made with the connection's credentials."""
    import psycopg

    from airflow_connectors.transports import _postgres

    uri = _postgres.from_airflow_json(data)
    wait = min(int(config.get("connect_timeout") or timeout), int(timeout)) or 1
    try:
        with psycopg.connect(uri, connect_timeout=wait) as conn:
            conn.execute("SELECT 1").fetchone()
    except psycopg.Error as e:
        return (
            f"cannot run SELECT 1 on {_postgres.redacted(uri)}: "
            f"{mask_text(_first_line(e), _postgres.uri_secrets(uri))}"
        )
    return None


def _check_http(data: Mapping[str, Any], config: Mapping[str, Any], timeout: float) -> str | None:
    """A GET of the base URL (of the config's URL when the connection has no host) with
    the connection's headers and auth: an answer that is not a refusal or a server error."""
    import httpx

    from airflow_connectors.transports._http import http_connection_of

    conn = http_connection_of(data)
    path = config.get("path")
    url = conn.base_url or (path if isinstance(path, str) and "://" in path else None)
    if url is None:
        return "has no host, and path is not a URL; set the connection's host (the base URL)"
    shown = mask_url(url)
    try:
        with httpx.Client(
            timeout=timeout, follow_redirects=False, headers=dict(conn.headers), auth=conn.auth
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


_CHECKS = {
    "aws_conn_id": _check_s3,
    "postgres_conn_id": _check_postgres,
    "http_conn_id": _check_http,
}
