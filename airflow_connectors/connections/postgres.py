"""PostgreSQL connections (``postgres_input`` and the ``postgres`` sink): a ``uri`` or an
Airflow ``postgres_conn_id`` turned into a libpq URI, and what of it may be shown. No
driver import.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from pydantic import Field, field_validator, model_validator

from airflow_connectors.connections.base import AirflowConnection, lookup
from airflow_connectors.spec.config import StrictConfig

#: What the Airflow UI calls the connection type ``postgres_conn_id`` names.
KIND = "Postgres"

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
    """The libpq URI of Airflow connection ``conn_id`` (see
    :func:`~airflow_connectors.connections.base.lookup`). Raises
    :class:`~airflow_connectors.connections.base.ConnectionProblem` in one line that
    starts with ``who`` (the transport or sink) and never holds the connection's secrets."""
    conn = lookup(conn_id, who=who, field="postgres_conn_id", kind=KIND, instead="give uri")
    return libpq_uri(conn)


def libpq_uri(conn: AirflowConnection) -> str:
    """A Postgres connection as a libpq URI: login, password, host (localhost when
    unset), port, ``schema`` as the database, and the extra's libpq parameters."""
    userinfo = ""
    if conn.login:
        userinfo = quote(conn.login, safe="")
        if conn.password:
            userinfo += ":" + quote(conn.password, safe="")
        userinfo += "@"
    host = conn.host or "localhost"
    if ":" in host and not host.startswith("["):  # an IPv6 address
        host = f"[{host}]"
    port = f":{conn.port}" if conn.port else ""
    database = quote(conn.schema or "", safe="")
    kept = {k: str(v) for k, v in conn.extra.items() if k in LIBPQ_EXTRAS}
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
        :class:`~airflow_connectors.connections.base.ConnectionProblem` (a
        ``LookupError``) in one line for an unknown or unreadable connection."""
        uri = (
            self.uri
            if self.postgres_conn_id is None
            else connection_uri(self.postgres_conn_id, who)
        )
        assert uri is not None  # _one_connection
        if "connect_timeout=" not in uri:
            uri += ("&" if "?" in uri else "?") + f"connect_timeout={self.connect_timeout}"
        return uri
