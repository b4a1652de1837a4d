"""The state store's database: the engine for a URL (SQLite pragmas, errors a user
can act on) and the base every part of the store builds on."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from airflow_connectors.state import schema as s


class StateStoreUnavailable(RuntimeError):
    """The state-store URL cannot be used: malformed, a database or driver that is not
    available, or no connection. The message is one line naming the URL (its password
    masked), what went wrong and what to do."""


#: What a user can do about a state-store URL, appended to the errors above.
_URL_REMEDY = (
    "set a working URL with --state-store-url or [connectors] state_store_url "
    "(AIRFLOW__CONNECTORS__STATE_STORE_URL)"
)
_URL_EXAMPLES = "postgresql+psycopg://USER:PASSWORD@HOST:5432/DATABASE or sqlite:////PATH/state.db"


#: Seconds a SQLite state store waits for another process's lock by default.
SQLITE_TIMEOUT = 60.0


def create_engine(url: str) -> sa.Engine:
    """The SQLAlchemy engine of a state store at ``url`` (PostgreSQL or SQLite), not yet
    connected. Raises :class:`StateStoreUnavailable` for an empty or malformed URL, an
    unknown database or a driver that is not installed."""
    from airflow_connectors.spec.redact import mask_url

    shown = mask_url(url)
    if not url.strip():
        raise StateStoreUnavailable(
            f"the state store URL is empty; expected a SQLAlchemy URL such as {_URL_EXAMPLES}; "
            f"{_URL_REMEDY}"
        )
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise StateStoreUnavailable(
            f"state store URL {shown!r} is not a SQLAlchemy URL ({reason}); expected "
            f"DIALECT[+DRIVER]://USER:PASSWORD@HOST:PORT/DATABASE such as {_URL_EXAMPLES}; "
            f"{_URL_REMEDY}"
        ) from None
    sqlite = parsed.get_backend_name() == "sqlite"
    kwargs: dict[str, Any] = {"future": True}
    if sqlite:
        # How long to wait for another process's lock (seconds; ``?timeout=`` in the URL
        # sets it): parallel tasks open and commit to one SQLite file.
        timeout = float(parsed.query.get("timeout", SQLITE_TIMEOUT))  # type: ignore[arg-type]
        parsed = parsed.difference_update_query(["timeout"])
        kwargs["connect_args"] = {"timeout": timeout}
    else:
        kwargs["pool_pre_ping"] = True
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except sa.exc.NoSuchModuleError:
        raise StateStoreUnavailable(
            f"state store URL {shown!r} names the database {parsed.drivername!r}, which "
            f"SQLAlchemy does not know; the state store runs on PostgreSQL or SQLite "
            f"({_URL_EXAMPLES}); {_URL_REMEDY}"
        ) from None
    except ImportError as e:
        raise StateStoreUnavailable(
            f"state store URL {shown!r} needs a database driver that is not installed "
            f"({e}); install it, or use PostgreSQL with psycopg or SQLite "
            f"({_URL_EXAMPLES}); {_URL_REMEDY}"
        ) from None
    except (sa.exc.ArgumentError, TypeError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise StateStoreUnavailable(
            f"state store URL {shown!r} cannot be used ({reason}); {_URL_REMEDY}"
        ) from None
    if sqlite:
        sa.event.listen(engine, "connect", functools.partial(_sqlite_pragmas, timeout=timeout))
        sa.event.listen(engine, "begin", _sqlite_begin)
    return engine


@contextmanager
def _reported_as_unavailable(engine: sa.Engine, url: str) -> Iterator[None]:
    """Turn a failure to connect (or to prepare the tables) into one line that says
    which store, what the database said and what to do; the engine is disposed."""
    from airflow_connectors.spec.redact import mask_text, mask_url

    try:
        yield
    except sa.exc.DBAPIError as e:
        engine.dispose()
        said = (
            str(e.orig).strip().splitlines()[0]
            if e.orig is not None and str(e.orig).strip()
            else ""
        )
        # As redact.secret_values: shorter "secrets" would mask ordinary words.
        password = str(engine.url.password or "")
        said = mask_text(said or type(e).__name__, [password] if len(password) >= 3 else [])
        if engine.url.get_backend_name() == "sqlite" and "locked" in said:
            raise StateStoreUnavailable(
                f"the state store {mask_url(url)!r} is locked: another process held it "
                f"longer than this one waits ({said}); retry once that process is done, "
                "or use PostgreSQL for many parallel tasks; or "
                f"{_URL_REMEDY}"
            ) from e
        if engine.url.get_backend_name() == "sqlite":
            folder = os.path.dirname(os.path.abspath(engine.url.database or "")) or "."
            raise StateStoreUnavailable(
                f"cannot open the state store {mask_url(url)!r}: {said}; the folder {folder} "
                f"must exist and be writable; or {_URL_REMEDY}"
            ) from e
        if isinstance(e, sa.exc.OperationalError | sa.exc.InterfaceError):
            raise StateStoreUnavailable(
                f"cannot connect to the state store {mask_url(url)!r}: {said}; check that the "
                "database server is running and reachable from here and that the user, "
                f"password and database are right; or {_URL_REMEDY}"
            ) from e
        raise StateStoreUnavailable(
            f"cannot prepare the tables of the state store {mask_url(url)!r}: {said}; check "
            f"that the user may create tables there; or {_URL_REMEDY}"
        ) from e


class Database:
    """The store's engine and transactions; SQLite (embedded) or PostgreSQL by URL."""

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        """Raises :class:`StateStoreUnavailable` when ``url`` is malformed, names a
        database this machine cannot use, or (with ``migrate``) cannot be connected to."""
        self.url = url
        self.engine = create_engine(url)
        if migrate:
            with _reported_as_unavailable(self.engine, url):
                s.migrate(self.engine)

    def close(self) -> None:
        """Close the store's pooled database connections."""
        self.engine.dispose()

    @contextmanager
    def tx(self) -> Iterator[sa.Connection]:
        """A connection in one transaction: committed when the block ends, rolled back
        when it raises."""
        with self.engine.begin() as conn:
            yield conn

    @property
    def safe_url(self) -> str:
        """The database URL with its password hidden, for logs and errors."""
        return self.engine.url.render_as_string(hide_password=True)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any, *, timeout: float) -> None:
    # pysqlite's own transaction handling lets DDL autocommit and begins lazily; take it
    # over so every transaction (migrations included) is one atomic unit.
    import sqlite3

    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
    # WAL is set once, by the first opener of a fresh file; switching needs the file
    # to itself, which SQLite refuses at once (no busy wait) while another process
    # opens it too: wait for that here, as for any lock.
    deadline = time.monotonic() + timeout
    while str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
        try:
            cur.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    cur.close()


def _sqlite_begin(conn: sa.Connection) -> None:
    # IMMEDIATE: take the write lock up front, so two processes committing (or migrating)
    # at once queue on busy_timeout instead of failing on a stale snapshot.
    conn.exec_driver_sql("BEGIN IMMEDIATE")
