"""HTTP connections of ``url_input``: an Airflow HTTP connection (``http_conn_id``) as
the base URL, request headers and basic auth, read as Airflow's HttpHook reads it, and
which headers carry credentials. Pure: no Airflow (the Airflow integration installs the
connection resolver, see :func:`airflow_connectors.transports._s3.set_connection_resolver`),
no HTTP client import.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from airflow_connectors.spec.redact import is_secret_name
from airflow_connectors.transports import _s3

#: Keys of an HTTP connection's extra that configure the client, not headers (as
#: Airflow's HttpHook reads them).
_CLIENT_EXTRAS = frozenset(
    {
        "headers",
        "proxies",
        "stream",
        "verify",
        "cert",
        "max_redirects",
        "trust_env",
        "allow_redirects",
        "timeout",
        "auth_type",
        "auth_kwargs",
        "check_response",
    }
)


@dataclass(frozen=True)
class HttpConnection:
    """What an Airflow HTTP connection gives ``url_input``: the base URL, the headers
    and basic auth. ``repr`` shows none of the secrets."""

    base_url: str | None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    auth: tuple[str, str] | None = field(default=None, repr=False)

    def secrets(self) -> set[str]:
        """Header values named like secrets and the password: what no message may hold."""
        found = {v for k, v in self.headers.items() if secret_header(k)}
        if self.auth and self.auth[1]:
            found.add(self.auth[1])
        return {v for v in found if len(v) >= 3}


def secret_header(name: str) -> bool:
    """Whether a request header of this name carries a credential (``Authorization``,
    ``X-API-Key``, ``Cookie``, ``X-Auth-Token``...)."""
    lowered = name.lower().replace("-", "_")
    return (
        lowered in ("cookie", "proxy_authorization")
        or is_secret_name(lowered)
        or "token" in lowered
    )


def http_connection(conn_id: str) -> HttpConnection:
    """Airflow connection ``conn_id`` as ``url_input`` uses it: ``AIRFLOW_CONN_<ID>``
    (JSON or URI form) first, then the resolver the Airflow integration installed.
    Raises :class:`~airflow_connectors.transports._s3.ConnectionNotFound` in one line."""
    var = _s3.conn_env_var(conn_id)
    raw = os.environ.get(var, "").strip()
    data: Mapping[str, Any] | None
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except ValueError:
            raise ValueError(
                f"url_input: {var} is not valid JSON; expected Airflow's JSON form "
                '{"conn_type": "http", "host": ..., "schema": "https", "extra": {...}}'
            ) from None
    elif raw:
        data = _uri_form(raw)
    else:
        data = _s3.lookup_connection(conn_id)
    if data is None:
        raise _s3.ConnectionNotFound(
            f"url_input: http_conn_id {conn_id!r} names no connection ({var} is not set, "
            f"and Airflow does not know it either); create an HTTP connection {conn_id!r} in "
            f"Airflow or set {var}"
        )
    return http_connection_of(data)


def http_connection_of(data: Mapping[str, Any]) -> HttpConnection:
    """Airflow's JSON form of an HTTP connection as base URL, headers and auth, read as
    Airflow's HttpHook reads them."""
    extra = data.get("extra") or {}
    if isinstance(extra, str):
        extra = json.loads(extra) if extra.strip() else {}
    host = str(data.get("host") or "")
    if "://" in host:
        base: str | None = host
    elif host:
        base = f"{data.get('schema') or 'http'}://{host}"
    else:
        base = None
    if base is not None and data.get("port"):
        base += f":{data['port']}"
    headers = {
        str(k): str(v)
        for k, v in extra.items()
        if k not in _CLIENT_EXTRAS and isinstance(v, (str, int, float)) and not isinstance(v, bool)
    }
    if isinstance(extra.get("headers"), Mapping):
        headers.update({str(k): str(v) for k, v in extra["headers"].items()})
    login = data.get("login")
    auth = (str(login), str(data.get("password") or "")) if login else None
    return HttpConnection(base, headers, auth)


def _uri_form(uri: str) -> dict[str, Any]:
    """Airflow's URI form of a connection (``http://user:pw@host:port/schema?extra``)."""
    parts = urlsplit(uri)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    extra: dict[str, Any] = json.loads(query["__extra__"]) if "__extra__" in query else query
    return {
        "conn_type": parts.scheme,
        "host": parts.hostname,
        "port": parts.port,
        "schema": unquote(parts.path.lstrip("/")) or None,
        "login": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else None,
        "extra": extra,
    }
