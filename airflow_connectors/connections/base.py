"""Airflow connections without Airflow: what a connection id names, read the way Airflow
reads it, for every connection kind (AWS, PostgreSQL, HTTP, GCP, Azure ...).

A connection id is looked up as Airflow looks up connections from the environment: the
variable ``AIRFLOW_CONN_<ID>`` (Airflow's JSON form, or its URI form) first, then the
resolver a higher layer installed with :func:`set_connection_resolver` (the Airflow
integration installs one that asks Airflow: its metadata database and secrets backends).
Nothing here imports Airflow, a transport, a sink or a client library.

    conn = lookup("my_s3", who="s3_input", field="aws_conn_id", kind="Amazon Web Services")
    conn.login, conn.password, conn.extra["region_name"]

Every problem (no such connection, a variable that is neither JSON nor a URI, an extra
that is not a JSON object) is one :class:`ConnectionProblem` whose message names the
connection id, the variable, what was expected and what to do, and never a secret.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from airflow_connectors.spec.redact import is_secret_name

#: ``fn(conn_id)`` -> the connection in Airflow's JSON form (``conn_type``, ``host``,
#: ``login``, ``password``, ``schema``, ``port``, ``extra``), or None when it does not
#: know the connection.
ConnectionResolver = Callable[[str], Mapping[str, Any] | None]

_resolver: ConnectionResolver | None = None

#: Airflow's URI schemes that name another connection type (as Airflow normalises them).
_URI_TYPES = {"postgresql": "postgres"}


class ConnectionProblem(OSError, LookupError):
    """A connection id that cannot be used: no such connection, an ``AIRFLOW_CONN_<ID>``
    that is neither JSON nor a URI, or an extra that is not a JSON object. One line that
    names the connection, the variable, what was expected and what to do; no secret.

    An ``OSError`` like the other failures to reach a service, and a ``LookupError``
    (what callers that catch a missing connection have caught): permanent either way,
    retrying cannot help."""


def set_connection_resolver(fn: ConnectionResolver | None) -> None:
    """Install how a connection id is resolved when no ``AIRFLOW_CONN_<ID>`` variable
    names it (None: environment variables only). The Airflow integration installs one
    that asks Airflow."""
    global _resolver
    _resolver = fn


def connection_resolver() -> ConnectionResolver | None:
    """The resolver installed with :func:`set_connection_resolver` (None: none)."""
    return _resolver


def env_var(conn_id: str) -> str:
    """The environment variable Airflow reads a connection from: ``AIRFLOW_CONN_<ID>``."""
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def secret_key(name: str) -> bool:
    """Whether an extra's key (or a request header) of this name holds a credential
    (``password``, ``aws_session_token``, ``Authorization``, ``X-API-Key``, ``Cookie``)."""
    lowered = name.lower().replace("-", "_")
    return (
        lowered in ("cookie", "proxy_authorization")
        or is_secret_name(lowered)
        or "token" in lowered
    )


@dataclass(frozen=True)
class AirflowConnection:
    """One Airflow connection, as Airflow's ``Connection`` holds it. ``repr`` shows none
    of the secrets (the password, the extra)."""

    conn_id: str
    conn_type: str | None = None
    host: str | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    schema: str | None = None
    port: int | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), repr=False)

    def secrets(self) -> set[str]:
        """The password and every value of the extra (nested ones and ``headers``
        included) under a key named like a credential: what no message may hold."""
        found = {self.password} if self.password else set()
        found |= _extra_secrets(self.extra)
        return {s for s in found if len(s) >= 3}

    def to_json(self) -> dict[str, Any]:
        """Airflow's JSON form (what ``AIRFLOW_CONN_<ID>`` may hold), empty fields left out."""
        data: dict[str, Any] = {
            "conn_type": self.conn_type,
            "host": self.host,
            "login": self.login,
            "password": self.password,
            "schema": self.schema,
            "port": self.port,
            "extra": dict(self.extra) or None,
        }
        return {k: v for k, v in data.items() if v is not None}


def _extra_secrets(extra: Any) -> set[str]:
    if not isinstance(extra, Mapping):
        return set()
    found: set[str] = set()
    for k, v in extra.items():
        if isinstance(v, Mapping):
            found |= _extra_secrets(v)
        elif isinstance(v, str) and v and secret_key(str(k)):
            found.add(v)
    return found


def lookup(
    conn_id: str,
    *,
    who: str = "",
    field: str = "conn_id",
    kind: str = "",
    instead: str = "",
) -> AirflowConnection:
    """Connection ``conn_id``: ``AIRFLOW_CONN_<ID>`` (JSON or URI form) first, then the
    installed resolver. ``who`` (the transport or sink), ``field`` (the config field that
    named it), ``kind`` (the connection type as the Airflow UI names it) and ``instead``
    (another way to configure it, e.g. "give uri") only shape the message of the
    :class:`ConnectionProblem` raised when nobody knows the connection or it cannot be
    parsed."""
    var = env_var(conn_id)
    raw = os.environ.get(var, "").strip()
    if raw:
        return parse(conn_id, raw, who=who)
    found = _resolver(conn_id) if _resolver is not None else None
    if found is not None:
        return parse(conn_id, found, who=who)
    where = "Airflow does not know it either" if _resolver else "Airflow was not asked"
    what = f"{_article(kind)} connection" if kind else "a connection"
    todo = f"create {what} {conn_id!r} in Airflow, set {var} (JSON or URI form)"
    todo += f", or {instead}" if instead else ""
    raise ConnectionProblem(
        f"{_prefix(who)}{field} {conn_id!r} names no connection ({var} is not set, and "
        f"{where}); {todo}"
    )


def parse(conn_id: str, value: str | Mapping[str, Any], *, who: str = "") -> AirflowConnection:
    """A connection given as Airflow's JSON text, its URI form
    (``type://login:password@host:port/schema?extra_key=value`` or ``?__extra__=<json>``)
    or an already parsed JSON form (what a resolver returns). Raises
    :class:`ConnectionProblem` naming the variable when it is none of these."""
    var = env_var(conn_id)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                data = json.loads(text)
            except ValueError as e:
                raise ConnectionProblem(
                    f"{_prefix(who)}{var} (connection {conn_id!r}) is not valid JSON "
                    f"({_where_json(e)}); expected Airflow's JSON form "
                    '{"conn_type": ..., "host": ..., "login": ..., "password": ..., '
                    '"extra": {...}} or its URI form type://login:password@host:port/schema; '
                    f"fix {var} or the connection in Airflow"
                ) from None
        else:
            data = _from_uri(conn_id, text, who)
    else:
        data = value
    return AirflowConnection(
        conn_id=conn_id,
        conn_type=_text(data.get("conn_type")),
        host=_text(data.get("host")),
        login=_text(data.get("login")),
        password=_text(data.get("password")),
        schema=_text(data.get("schema")),
        port=_port(conn_id, data.get("port"), who),
        extra=MappingProxyType(_extra(conn_id, data.get("extra"), who)),
    )


def _from_uri(conn_id: str, uri: str, who: str) -> dict[str, Any]:
    """Airflow's URI form of a connection as its JSON form (a host given with its own
    protocol, ``http://https%3A%2F%2Fexample.com``, kept whole as Airflow keeps it)."""
    var = env_var(conn_id)
    if "://" not in uri:
        raise ConnectionProblem(
            f"{_prefix(who)}{var} (connection {conn_id!r}) is neither JSON nor a URI; "
            "expected Airflow's URI form type://login:password@host:port/schema?extra=... "
            f'or its JSON form {{"conn_type": ..., ...}}; fix {var}'
        )
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        raise ConnectionProblem(
            f"{_prefix(who)}{var} (connection {conn_id!r}) is not a valid URI (its host or "
            f"port cannot be read); expected type://login:password@host:port/schema; fix {var}"
        ) from None
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    extra: Any = query.pop("__extra__") if "__extra__" in query else query
    host = unquote(parts.hostname) if parts.hostname else None
    scheme = parts.scheme.lower().replace("-", "_")
    return {
        "conn_type": _URI_TYPES.get(scheme, scheme),
        "host": host,
        "port": port,
        "schema": unquote(parts.path.lstrip("/")) or None,
        "login": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else None,
        "extra": extra,
    }


def _extra(conn_id: str, extra: Any, who: str) -> dict[str, Any]:
    """A connection's extra (a JSON object, or its text) as a dict."""
    if extra is None or extra == "":
        return {}
    if isinstance(extra, str):
        try:
            extra = json.loads(extra)
        except ValueError as e:
            extra = e
    if not isinstance(extra, Mapping):
        found = "text that is not JSON" if isinstance(extra, ValueError) else "not an object"
        raise ConnectionProblem(
            f"{_prefix(who)}the extra of connection {conn_id!r} is {found}; expected a JSON "
            'object such as {"region_name": "eu-west-1"}; fix the extra in Airflow or in '
            f"{env_var(conn_id)}"
        )
    return dict(extra)


def _port(conn_id: str, port: Any, who: str) -> int | None:
    if port is None or port == "":
        return None
    try:
        return int(port)
    except (TypeError, ValueError):
        raise ConnectionProblem(
            f"{_prefix(who)}the port of connection {conn_id!r} is not a number; expected a "
            f"port such as 5432; fix the connection in Airflow or {env_var(conn_id)}"
        ) from None


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _where_json(e: ValueError) -> str:
    """Where JSON text broke (line and column), never the text itself."""
    line, col = getattr(e, "lineno", None), getattr(e, "colno", None)
    return f"line {line} column {col}" if line else "cannot be decoded"


def _prefix(who: str) -> str:
    return f"{who}: " if who else ""


def _article(kind: str) -> str:
    """``kind`` with its indefinite article: "an HTTP", "a Postgres"."""
    return f"an {kind}" if kind.startswith(("A", "E", "I", "O", "U", "HTTP")) else f"a {kind}"
