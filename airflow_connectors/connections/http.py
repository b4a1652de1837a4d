"""HTTP connections (``http_conn_id`` of ``url_input``): an Airflow HTTP connection as the
base URL, request headers and basic auth, read as Airflow's HttpHook reads it, and which
headers carry credentials. No HTTP client import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_connectors.connections.base import AirflowConnection, lookup, parse, secret_key

#: What the Airflow UI calls the connection type ``http_conn_id`` names.
KIND = "HTTP"

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

    @classmethod
    def from_connection(cls, conn: AirflowConnection) -> HttpConnection:
        """An HTTP connection's base URL (``host`` with its scheme, else ``schema`` or
        http, and ``port``), headers (the extra's keys that are not client settings, and
        its ``headers``) and basic auth (``login``/``password``)."""
        extra = conn.extra
        host = conn.host or ""
        if "://" in host:
            base: str | None = host
        elif host:
            base = f"{conn.schema or 'http'}://{host}"
        else:
            base = None
        if base is not None and conn.port:
            base += f":{conn.port}"
        headers = {
            str(k): str(v)
            for k, v in extra.items()
            if k not in _CLIENT_EXTRAS
            and isinstance(v, (str, int, float))
            and not isinstance(v, bool)
        }
        if isinstance(extra.get("headers"), Mapping):
            headers.update({str(k): str(v) for k, v in extra["headers"].items()})
        auth = (conn.login, conn.password or "") if conn.login else None
        return cls(base, headers, auth)


def secret_header(name: str) -> bool:
    """Whether a request header of this name carries a credential (``Authorization``,
    ``X-API-Key``, ``Cookie``, ``X-Auth-Token``...)."""
    return secret_key(name)


def http_connection(conn_id: str, who: str = "url_input") -> HttpConnection:
    """Airflow connection ``conn_id`` as ``url_input`` uses it (see
    :func:`~airflow_connectors.connections.base.lookup`). Raises
    :class:`~airflow_connectors.connections.base.ConnectionProblem` in one line."""
    return HttpConnection.from_connection(lookup(conn_id, who=who, field="http_conn_id", kind=KIND))


def http_connection_of(data: Mapping[str, Any] | AirflowConnection) -> HttpConnection:
    """Airflow's JSON form of an HTTP connection (or the connection) as base URL, headers
    and auth."""
    conn = data if isinstance(data, AirflowConnection) else parse("http", data)
    return HttpConnection.from_connection(conn)
