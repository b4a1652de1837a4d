"""PostgreSQL connections shared by ``postgres_input`` and the ``postgres`` sink: a
``uri`` or an Airflow ``postgres_conn_id`` turned into a libpq URI, and what of it may be
shown. Pure: no Airflow (the Airflow integration installs the connection resolver, see
:func:`airflow_connectors.transports._s3.set_connection_resolver`), no driver import.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from pydantic import Field, field_validator, model_validator

from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.transports import _s3

#: libpq parameters an Airflow connection's extra may carry into the URI.
LIBPQ_EXTRAS = (
    "sslmode",
    "sslcert",
    "sslkey",
    "sslrootcert",
    "sslcrl",
    "connect_timeout",
    "application_name",
    "options",
    "target_session_attrs",
    "keepalives",
    "keepalives_idle",
)


def check_uri(value: str | None) -> str | None:
    """A config validator: ``value`` must be a ``postgresql://`` (or ``postgres://``) URI.
    The message never quotes more than the scheme."""
    if value is not None and not value.startswith(("postgresql://", "postgres://")):
        raise ValueError(
            "expected a URI postgresql://user:password@host:port/database (got a value "
            f"starting with {value.split(':', 1)[0][:20]!r})"
        )
    return value


def connection_uri(conn_id: str, who: str) -> str:
    """The libpq URI of Airflow connection ``conn_id``: ``AIRFLOW_CONN_<ID>`` (Airflow's
    URI or JSON form) first, then the resolver the Airflow integration installed (as
    ``s3_input`` resolves ``aws_conn_id``). Raises ``LookupError`` in one line that starts
    with ``who`` (the transport or sink) and never holds the connection's secrets."""
    var = _s3.conn_env_var(conn_id)
    raw = os.environ.get(var, "").strip()
    data: Mapping[str, Any] | None
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except ValueError:
            raise LookupError(
                f"{who}: {var} is not valid JSON; expected Airflow's JSON form "
                '{"conn_type": "postgres", "host": ..., "login": ..., "password": ..., '
                '"schema": "<database>"} or a URI postgresql://user:password@host/database'
            ) from None
    elif raw:
        return from_airflow_uri(raw)
    else:
        data = _s3.lookup_connection(conn_id)
    if data is None:
        raise LookupError(
            f"{who}: postgres_conn_id {conn_id!r} names no connection ({var} is not set, "
            "and Airflow does not know it either); create a Postgres connection "
            f"{conn_id!r} in Airflow, set {var}, or give uri"
        )
    return from_airflow_json(data)


def from_airflow_uri(raw: str) -> str:
    """Airflow's URI form (``postgres://``, extras as query parameters) as libpq's."""
    parts = urlsplit(raw)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    extra: dict[str, Any] = json.loads(query.pop("__extra__")) if "__extra__" in query else query
    kept = {k: str(v) for k, v in extra.items() if k in LIBPQ_EXTRAS}
    rest = parts.netloc + parts.path
    return f"postgresql://{rest}" + (f"?{urlencode(kept)}" if kept else "")


def from_airflow_json(data: Mapping[str, Any]) -> str:
    """Airflow's JSON form of a Postgres connection as a libpq URI."""
    extra = data.get("extra") or {}
    if isinstance(extra, str):
        extra = json.loads(extra) if extra.strip() else {}
    login, password = data.get("login"), data.get("password")
    userinfo = ""
    if login:
        userinfo = quote(str(login), safe="")
        if password:
            userinfo += ":" + quote(str(password), safe="")
        userinfo += "@"
    host = str(data.get("host") or "localhost")
    port = f":{data['port']}" if data.get("port") else ""
    database = quote(str(data.get("schema") or ""), safe="")
    kept = {k: str(v) for k, v in extra.items() if k in LIBPQ_EXTRAS}
    query = f"?{urlencode(kept)}" if kept else ""
    return f"postgresql://{userinfo}{host}{port}/{database}{query}"


def redacted(uri: str) -> str:
    """``uri`` without its userinfo and query: ``postgresql://host:port/database``."""
    parts = urlsplit(uri)
    host = parts.netloc.rsplit("@", 1)[-1]
    return f"postgresql://{host}{parts.path}"


def uri_secrets(uri: str) -> list[str]:
    """What must never be shown of ``uri``: itself and its password (raw and decoded)."""
    found = [uri]
    parts = urlsplit(uri)
    if parts.password:
        found += [parts.password, unquote(parts.password)]
    found += [v for k, v in parse_qsl(parts.query) if "pass" in k.lower()]
    return [s for s in found if s]


class PostgresConnectionConfig(StrictConfig):
    """The connection fields ``postgres_input`` and the ``postgres`` sink share."""

    uri: str | None = Field(
        default=None,
        json_schema_extra={"secret": True},
        description="libpq connection URI postgresql://user:password@host:port/database"
        "[?sslmode=...]. A secret: masked in logs, errors and the REST API. Exactly one of "
        "uri and postgres_conn_id.",
    )
    postgres_conn_id: str | None = Field(
        default=None,
        min_length=1,
        description="Airflow connection id (conn_type postgres; its schema field is the "
        "database) to connect with instead of uri: the AIRFLOW_CONN_<ID> environment "
        "variable (URI or JSON) first, else Airflow (in Airflow tasks).",
    )
    connect_timeout: int = Field(
        default=10,
        gt=0,
        description="Seconds to wait for a connection (libpq connect_timeout) unless the "
        "URI sets one.",
    )

    @field_validator("uri")
    @classmethod
    def _postgres_uri(cls, value: str | None) -> str | None:
        return check_uri(value)

    @model_validator(mode="after")
    def _one_connection(self) -> PostgresConnectionConfig:
        if (self.uri is None) == (self.postgres_conn_id is None):
            raise ValueError("set exactly one of uri and postgres_conn_id")
        return self

    def libpq_uri(self, who: str) -> str:
        """The URI to connect with (``postgres_conn_id`` resolved), with
        ``connect_timeout`` unless it has one. Holds the password: never show it. Raises
        ``LookupError`` in one line for an unknown connection."""
        uri = (
            self.uri
            if self.postgres_conn_id is None
            else connection_uri(self.postgres_conn_id, who)
        )
        assert uri is not None  # _one_connection
        if "connect_timeout=" not in uri:
            uri += ("&" if "?" in uri else "?") + f"connect_timeout={self.connect_timeout}"
        return uri
