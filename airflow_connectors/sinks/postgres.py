"""``postgres``: a PostgreSQL table (``table``, default the pipeline's table name), dead
letters in ``<table>__errors`` beside it. Written Arrow-natively with the ADBC PostgreSQL
driver (binary ``COPY``), no row-by-row Python.

Executors write each part of a batch attempt into the attempt's staging tables
(``_ac_stage_<key>_<batch>_<attempt>_r`` for rows, ``..._e`` for dead letters, in the
target's schema, created by ``prepare``), one database transaction per part that first
deletes what an earlier run of that part (a retried Spark task) staged. Nobody reads
staging tables, so a crashed attempt is invisible; ``prepare``/``discard`` drop them.

``publish`` (on the driver, after the state store committed the batch) is ONE PostgreSQL
transaction: it inserts the batch into the sink-side table ``_ac_sink_batches`` (key:
pipeline, target table, connector, batch id, attempt) with ``ON CONFLICT DO NOTHING``;
only if that inserted a row it moves the attempt's staged rows into the target
(``INSERT ... SELECT``) and its dead letters into the errors table, records the counts
and drops the staging tables. The record and the rows commit together, so the table is
exactly-once whatever the state store is (SQLite on another machine): a publish repeated
after a crash, or run twice at once (the second waits on the first's key, then finds it),
adds nothing. The attempt is part of the key, so a state store started afresh, whose
batch ids an older life of the connector used, still publishes its own batches.

Under ``schema_evolution: add_new_columns`` the columns a batch added are added to the
target (``ALTER TABLE ... ADD COLUMN``, NULL in earlier rows) inside that same publish
transaction, never before: ``prepare`` stages the batch with them but leaves the target
as it is.

Values PostgreSQL cannot store although the table's columns hold them: a NUL character
(``\\u0000``, valid in JSON and Arrow strings) in text. :meth:`PostgresSink.unstorable`
finds them (whole-column pyarrow compute) before the engine writes a block: each such
record is a bad record (a dead letter, or the batch fails naming it). A part writer given
one anyway refuses the write before its ``COPY``, naming the column and the row, instead
of PostgreSQL's "invalid byte sequence" for the whole part. In a dead letter's text (``raw_text``, ``error``) a
NUL is stored as the six characters ``\\u0000``.

A table with a ``primary_key`` takes changes (:mod:`airflow_connectors.changes`), not
appends. Its staging tables hold the table's columns and the change columns ``__op``
(smallint), ``__set`` (text[]) and ``__order`` (bigint). The target gets a PRIMARY KEY on
the key columns when the sink creates it; an existing target must have a primary key or
a unique index on exactly those columns (``prepare`` refuses it otherwise). Beside it the
sink keeps the key-state table ``<table>__keys`` (:func:`~airflow_connectors.sinks.
changes.state_schema`: per key the mark ``(__seq, __batch, __order)`` of the last change
applied and whether it deleted the key; the truncate floor as the row whose key columns
are null). ``publish`` of a keyed batch is still ONE transaction, holding the table's
publish lock (a transaction advisory lock on the target's name, so publishers of one
table take turns, whatever batch they publish) from before it records the batch to its
commit: it reads the staged changes (Arrow, through ADBC), collapses them to one per key
and resolves them against the key state of those keys (read with a join on a temporary
table of the keys) with :mod:`airflow_connectors.sinks.changes` (pyarrow: the same code
as the Delta and Iceberg sinks), then, in SQL from temporary tables: a truncate deletes
the rows whose last change is older than it, ``DELETE`` of the deleted keys, ``INSERT
... ON CONFLICT (<key>) DO UPDATE`` of the upserts (whole rows: every column of the
batch's table), the key-state rows upserted and tombstones older than the table's
``tombstone_retention`` dropped. A change older than what the table holds for its key
(by ``sequence_by``, then batch, then order) never wins, whichever order batches publish
in; a re-run of a crashed publish finds nothing committed and applies the batch once. A
batch staged before a later one added columns leaves those columns as they are on the
rows it updates (NULL on rows it inserts).

``scd_type: 2`` keeps history: every version of a key is a row with ``__start_at`` (the
sequence value, ``sequence_by``'s or the batch id, of the change that made it) and
``__end_at`` (the next change's; NULL on the key's current version); the target's
primary key is (key, ``__start_at``). Each change is a point of its key's history
wherever its sequence falls: changes of one key with one sequence value make one point
(the last by batch and order; between two batches with equal sequence values, the one
published later), a delete ends the current version, a partial update starts a version
from the one current when it is published. An older batch published late fills its
versions in between: the keys it changes are rebuilt from their versions and the batch's
changes, and written as a difference. ``<table>__keys`` then remembers the deletes the
history cannot show (of a key with no current version), for ``tombstone_retention``, so
an older upsert published later ends there. A truncate ends every version current at
its sequence value (the batch id without ``sequence_by``), and is remembered as a floor
row (key columns null) that ends there an older upsert published later.

Fail points ``postgres_changes_applied``: inside a keyed batch's publish transaction,
after its changes are written and before the commit (a kill there rolls everything
back); ``postgres_committed``: after the PostgreSQL commit, before the state store
records the batch published.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pydantic import Field, field_validator, model_validator

from airflow_connectors import failpoints
from airflow_connectors.changes import ORDER
from airflow_connectors.connections import postgres as _pg
from airflow_connectors.sinks.base import KINDS, Kind, PartWriter, Sink, SinkConfig, SinkUnwritable
from airflow_connectors.spec.datasets import LineageDataset, postgres_dataset

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

#: The sink-side table recording every published batch (in the target's schema).
BATCHES_TABLE = "_ac_sink_batches"
#: Prefix of the staging tables (in the target's schema).
STAGE_PREFIX = "_ac_stage_"
#: The staging tables' column holding the part a row was written by.
PART_COLUMN = "_ac_part"
#: Serialises the sink's DDL (``CREATE TABLE IF NOT EXISTS`` races in PostgreSQL).
DDL_LOCK = "airflow_connectors.postgres_sink"
#: The first half of a keyed table's publish lock (the second: the target's name).
KEYS_LOCK = "airflow_connectors.postgres_sink.keys"
#: The key-state table's name after the target's.
KEYS_SUFFIX = "__keys"
#: An ``scd_type: 2`` table's version columns: the sequence value of the change that
#: made the version, and of the change that ended it (NULL: the current version).
START_AT = "__start_at"
END_AT = "__end_at"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")

#: What PostgreSQL text cannot hold (and ``\u0000`` escapes in JSON).
NUL = "\x00"

REMEDY = (
    "check the sink's uri or postgres_conn_id (host, port, database, user, password) and "
    "that the server is reachable"
)


_T = TypeVar("_T")


class PostgresSinkConfig(SinkConfig, _pg.PostgresConnectionConfig):
    """Which PostgreSQL database and table the rows go to."""

    table: str | None = Field(
        default=None,
        description="Target table, 'name' or 'schema.name' (used as written, "
        "case-sensitive). Unset: the pipeline's table name.",
    )
    schema_name: str | None = Field(
        default=None,
        alias="schema",
        description="PostgreSQL schema of the target table when 'table' names none. "
        "Unset: the connection's current schema (the first of its search_path, usually "
        "'public'). The staging tables and _ac_sink_batches live in the same schema.",
    )
    errors_table: str | None = Field(
        default=None,
        description="Table for dead letters (records that could not be ingested), in the "
        "target's schema; created on the first dead letter. Unset: '<table>__errors'.",
    )
    create_table: bool = Field(
        default=True,
        description="Create the target table (from the table's columns, with PostgreSQL "
        "types) when it does not exist, and add columns the table spec gained since. "
        "false: the table must exist and have every column.",
    )

    @field_validator("table", "schema_name", "errors_table")
    @classmethod
    def _identifier(cls, value: str | None) -> str | None:
        if value is None:
            return value
        for part in value.split("."):
            if not _NAME.match(part):
                raise ValueError(
                    f"{value!r} is not a PostgreSQL name: expected letters, digits and _ "
                    "(at most 63, not starting with a digit), optionally 'schema.name'"
                )
        return value

    @model_validator(mode="after")
    def _one_schema(self) -> PostgresSinkConfig:
        if self.table and "." in self.table and self.schema_name:
            raise ValueError("name the schema once: in 'table' (schema.name) or in 'schema'")
        if self.table and self.table.count(".") > 1:
            raise ValueError(f"table {self.table!r}: expected 'name' or 'schema.name'")
        if self.errors_table and "." in self.errors_table:
            raise ValueError("errors_table is a name in the target's schema, without a schema")
        return self


# --- connections -----------------------------------------------------------------------


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = lines[0] if lines else type(e).__name__
    text = re.sub(r"^[A-Z_]+: (\[libpq\] )?", "", text)  # ADBC's status code
    return re.sub(r"^Failed to (prepare|execute) query( '.*?')?: (ERROR: +)?", "", text)


def quoted(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def pg_type(arrow: pa.DataType) -> str:
    """The PostgreSQL type a column of ``arrow`` type is stored as: what the ADBC driver's
    binary COPY writes (TINYINT is SMALLINT, VARCHAR is text, TIMESTAMP has no zone)."""
    import pyarrow as pa

    if pa.types.is_decimal(arrow):
        return f"numeric({arrow.precision},{arrow.scale})"
    if pa.types.is_timestamp(arrow):
        return "timestamptz" if arrow.tz else "timestamp"
    simple = {
        pa.bool_(): "boolean",
        pa.int8(): "smallint",
        pa.int16(): "smallint",
        pa.int32(): "integer",
        pa.int64(): "bigint",
        pa.float32(): "real",
        pa.float64(): "double precision",
        pa.string(): "text",
        pa.large_string(): "text",
        pa.binary(): "bytea",
        pa.date32(): "date",
        pa.time64("us"): "time",
    }
    if arrow not in simple:
        raise ValueError(f"no PostgreSQL type for Arrow type {arrow}")
    return simple[arrow]


def _columns_sql(schema: pa.Schema, *, not_null: bool) -> str:
    return ", ".join(
        f"{quoted(f.name)} {_stored_type(f.type)}"
        f"{'' if f.nullable or not not_null else ' NOT NULL'}"
        for f in schema
    )


def _stored_type(arrow: pa.DataType) -> str:
    """:func:`pg_type`, and ``text[]`` for a list of strings (a staged change's
    ``__set``, never a table's column)."""
    import pyarrow as pa

    if pa.types.is_list(arrow) and _is_text(arrow.value_type):
        return "text[]"
    return pg_type(arrow)


# --- part writer (executors) ------------------------------------------------------------


class _PostgresPart(PartWriter):
    """One part of an attempt, COPYed into the attempt's staging table in one transaction
    (committed by :meth:`close`, rolled back by :meth:`abort`) that first deletes the
    part's rows an earlier run of the same Spark task staged."""

    def __init__(
        self, sink: PostgresSink, stage: str, part: int, schema: pa.Schema, kind: Kind = "rows"
    ) -> None:
        self.sink = sink
        self.stage = stage
        self.part = part
        self.schema = schema
        self.kind: Kind = kind
        self.rows = 0
        self._conn: Any = None
        self._db_schema = ""

    def _guard(self, action: Any) -> Any:
        try:
            return action()
        except SinkUnwritable:
            raise
        except Exception as e:
            raise self.sink.unwritable(f"cannot stage part {self.part} in {self.stage}", e) from e

    def write(self, table: pa.Table) -> None:
        """COPY ``table``'s rows into the staging table (binary, Arrow-native). Rows
        PostgreSQL cannot store (:meth:`PostgresSink.unstorable`) are refused before
        anything is written: :class:`SinkUnwritable` names the first."""
        import pyarrow as pa

        if table.num_rows == 0:
            return
        if self.kind == "errors":
            table = _without_nul(table)
        else:
            self._refuse_unstorable(table)
        if self._conn is None:
            self._conn = self.sink.connect()
            self._guard(self._begin)
        if self.kind == "rows" and self.sink.table.keyed:
            from airflow_connectors.sinks.changes import with_change_columns

            table = with_change_columns(table)  # a block of upserts only may lack them
        staged = table.select(self.schema.names).cast(self.schema)
        staged = staged.append_column(
            pa.field(PART_COLUMN, pa.int32(), nullable=False),
            pa.array([self.part] * table.num_rows, pa.int32()),
        )
        with self._conn.cursor() as cur:
            self._guard(
                lambda: cur.adbc_ingest(
                    self.stage, staged, mode="append", db_schema_name=self._db_schema
                )
            )
        self.rows += table.num_rows

    def _refuse_unstorable(self, table: pa.Table) -> None:
        bad = self.sink.unstorable(table)
        if not bad:
            return
        row, why = bad[0]
        more = f" ({len(bad) - 1} more such row(s) in it)" if len(bad) > 1 else ""
        raise SinkUnwritable(
            f"table {self.sink.table.name}: row {row + 1} of {table.num_rows} handed to "
            f"part {self.part}{more}: {why}; remove the NUL characters from the source (or "
            "replace them in a view of it), or write the table to a sink that stores them "
            "(parquet, delta, iceberg)"
        )

    def _begin(self) -> None:
        with self._conn.cursor() as cur:
            self._db_schema = self.sink.resolve_schema(cur)
            cur.execute(
                f"DELETE FROM {quoted(self._db_schema)}.{quoted(self.stage)} "
                f"WHERE {PART_COLUMN} = $1",
                (self.part,),
            )

    def close(self) -> int:
        """Commit the part; returns rows written."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                self._guard(conn.commit)
            finally:
                with contextlib.suppress(Exception):
                    conn.close()
        return self.rows

    def abort(self) -> None:
        """Roll the part's transaction back."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                conn.rollback()
            with contextlib.suppress(Exception):
                conn.close()
        self.rows = 0


# --- the sink (driver) ------------------------------------------------------------------


class PostgresSink(Sink):
    """A PostgreSQL table; each batch moved from its staging table into it in the
    transaction that records the batch in ``_ac_sink_batches``, so exactly once."""

    name = "postgres"
    #: A keyed table's batch is applied as changes (:mod:`.changes`).
    applies_changes = True
    Config = PostgresSinkConfig
    config: PostgresSinkConfig
    connection_fields: ClassVar[Mapping[str, str]] = {"postgres_conn_id": _pg.KIND}

    # -- names and connections -----------------------------------------------------------

    def uri(self) -> str:
        """The libpq URI (with ``connect_timeout``). Holds the password: never show it."""
        try:
            return self.config.libpq_uri("postgres sink")
        except (LookupError, ValueError) as e:
            raise SinkUnwritable(f"table {self.table.name}: {e}") from e

    def where(self) -> str:
        """The server and database, without user, password or parameters."""
        if self.config.uri is not None:
            return _pg.redacted(self.config.uri)
        return f"Airflow connection {self.config.postgres_conn_id}"

    def target(self, kind: Kind = "rows") -> tuple[str | None, str]:
        """``(schema or None for the connection's current one, table)`` of ``kind``."""
        name = self.config.table or self.table.name
        schema = self.config.schema_name
        if "." in name:
            schema, name = name.split(".", 1)
        if kind == "errors":
            name = self.config.errors_table or f"{name}__errors"
        return schema, name

    def location(self, kind: Kind = "rows") -> str:
        """``schema.table in postgresql://host:port/database`` (no credentials)."""
        schema, name = self.target(kind)
        return f"{f'{schema}.' if schema else ''}{name} in {self.where()}"

    def lineage_dataset(self, kind: Kind = "rows") -> LineageDataset:
        """``database.schema.table`` on ``postgres://host:port`` (the connection
        resolved; no credentials)."""
        schema, name = self.target(kind)
        return postgres_dataset(self.uri(), f"{schema or 'public'}.{name}")

    def unwritable(self, what: str, e: BaseException) -> SinkUnwritable:
        """One line naming the table and the server, without credentials."""
        from airflow_connectors.spec.redact import mask_text

        secrets = _pg.uri_secrets(self.config.uri) if self.config.uri else []
        if self.config.postgres_conn_id:
            with contextlib.suppress(Exception):
                secrets += _pg.uri_secrets(self.uri())
        text = mask_text(_first_line(e), secrets)
        return SinkUnwritable(f"table {self.table.name}: {what} at {self.where()}: {text}")

    def connect(self) -> Any:
        """A new ADBC connection (transactions: autocommit off)."""
        import adbc_driver_postgresql.dbapi as pg

        uri = self.uri()
        try:
            return pg.connect(uri)
        except Exception as e:
            raise SinkUnwritable(
                f"{self.unwritable('cannot connect to PostgreSQL', e)}; {REMEDY}"
            ) from e

    @contextlib.contextmanager
    def transaction(self, what: str) -> Iterator[Any]:
        """A cursor in one transaction, committed when the block ends; any error is one
        line (``cannot <what>``) and rolls back."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                yield cur
            conn.commit()
        except SinkUnwritable:
            with contextlib.suppress(Exception):
                conn.rollback()
            raise
        except Exception as e:
            with contextlib.suppress(Exception):
                conn.rollback()
            raise self.unwritable(f"cannot {what}", e) from e
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    def resolve_schema(self, cur: Any) -> str:
        """The target's schema: configured, else the connection's current schema."""
        schema = self.target()[0]
        if schema:
            return schema
        cur.execute("SELECT current_schema()")
        row = cur.fetchone()
        if row is None or row[0] is None:
            raise SinkUnwritable(
                f"table {self.table.name}: the connection to {self.where()} has no current "
                "schema (empty search_path); set the sink's schema"
            )
        return str(row[0])

    def stage(self, batch_id: int, attempt: str | None, kind: Kind) -> str:
        """The staging table of an attempt (``attempt`` None: the batch's name prefix)."""
        key = f"{self.pipeline}\0{self.target()[1]}\0{self.connector or ''}"
        digest = hashlib.md5(key.encode(), usedforsecurity=False).hexdigest()[:10]
        prefix = f"{STAGE_PREFIX}{digest}_{batch_id}_"
        if attempt is None:
            return prefix
        return f"{prefix}{re.sub(r'[^a-z0-9]', '_', attempt.lower())[:24]}_{kind[0]}"

    # -- DDL -----------------------------------------------------------------------------

    def _exists(self, cur: Any, schema: str, name: str) -> bool:
        cur.execute("SELECT to_regclass($1) IS NOT NULL", (f"{quoted(schema)}.{quoted(name)}",))
        return bool(cur.fetchone()[0])

    @property
    def evolving(self) -> bool:
        """Whether batches may add columns (``schema_evolution: add_new_columns``): the
        target gains them in the transaction that publishes the batch bringing them."""
        return self.table.evolution == "add_new_columns"

    def _columns(self, cur: Any, schema: str, name: str) -> list[str]:
        cur.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
            (schema, name),
        )
        return [str(r[0]) for r in cur.fetchall()]

    def _ensure_table(self, cur: Any, schema: str, kind: Kind, *, alter: bool = True) -> None:
        """The target (or errors) table exists with every column, else SinkUnwritable.
        ``alter=False``: columns it lacks are left for publish to add (an evolving
        table's new columns, added with the batch that brings them)."""
        name = self.target(kind)[1]
        want = self.target_schema(kind)
        full = f"{quoted(schema)}.{quoted(name)}"
        if not self._exists(cur, schema, name):
            if not self.config.create_table:
                raise SinkUnwritable(
                    f"table {self.table.name}: {schema}.{name} does not exist at "
                    f"{self.where()}; create it, or set the sink's create_table: true"
                )
            key = ""
            if kind == "rows" and self.table.keyed:
                key = f", PRIMARY KEY ({', '.join(quoted(k) for k in self._target_key())})"
            cur.execute(f"CREATE TABLE {full} ({_columns_sql(want, not_null=True)}{key})")
            return
        if kind == "rows" and self.table.keyed:
            self._check_key(cur, schema, name)
        cur.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = $1 AND table_name = $2",
            (schema, name),
        )
        have = {str(r[0]) for r in cur.fetchall()}
        missing = [f for f in want if f.name not in have]
        if not alter:
            return
        if missing and not self.config.create_table and not self.evolving:
            raise SinkUnwritable(
                f"table {self.table.name}: {schema}.{name} at {self.where()} lacks column(s) "
                f"{', '.join(f.name for f in missing)}; add them, or set create_table: true "
                "to let the sink add them"
            )
        for f in missing:  # columns the table spec gained since: NULL in earlier rows
            cur.execute(f"ALTER TABLE {full} ADD COLUMN {quoted(f.name)} {pg_type(f.type)}")

    def _ensure_batches(self, cur: Any, schema: str) -> None:
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {quoted(schema)}.{BATCHES_TABLE} ("
            "pipeline text NOT NULL, target text NOT NULL, connector text NOT NULL, "
            "batch_id bigint NOT NULL, attempt text NOT NULL, rows bigint, error_rows bigint, "
            "committed_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (pipeline, target, connector, batch_id, attempt))"
        )

    def _lock_ddl(self, cur: Any) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext($1))", (DDL_LOCK,))
        cur.fetchall()

    # -- keyed tables --------------------------------------------------------------------

    def target_schema(self, kind: Kind = "rows") -> pa.Schema:
        """The target table's columns: :meth:`schema`, and for an ``scd_type: 2``
        table the version columns ``__start_at`` (NOT NULL) and ``__end_at``, of the
        sequence's type (``sequence_by``'s, else the batch id's: BIGINT)."""
        import pyarrow as pa

        schema = self.schema(kind)
        if kind == "rows" and self.history:
            from airflow_connectors.sinks.changes import SEQ, state_schema

            seq = state_schema(self.table).field(SEQ).type
            schema = pa.schema(
                [*schema, pa.field(START_AT, seq, nullable=False), pa.field(END_AT, seq)]
            )
        return schema

    @property
    def history(self) -> bool:
        """Whether the target keeps every version of a key (``scd_type: 2``)."""
        return self.table.keyed and self.table.scd_type == 2

    def _target_key(self) -> list[str]:
        """The target's primary key: the table's, and ``__start_at`` when it keeps
        history."""
        return [*self.table.primary_key, *([START_AT] if self.history else [])]

    def _state_key(self) -> list[str]:
        from airflow_connectors.sinks.changes import SEQ

        return [SEQ] if self.history else []

    def keys_table(self) -> str:
        """The key-state table's name (in the target's schema): ``<table>__keys``."""
        return f"{self.target()[1]}{KEYS_SUFFIX}"

    def _check_key(self, cur: Any, schema: str, name: str) -> None:
        """An existing target of a keyed table has a primary key or a unique index
        (not partial, no expression) on exactly the key columns: what ``ON CONFLICT``
        needs. Else SinkUnwritable naming the remedy."""
        cur.execute(
            "SELECT ARRAY(SELECT a.attname::text FROM pg_attribute a "
            "WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)) "
            "FROM pg_index i WHERE i.indrelid = to_regclass($1) AND i.indisunique "
            "AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL",
            (f"{quoted(schema)}.{quoted(name)}",),
        )
        key = self._target_key()
        want = sorted(key)
        if any(sorted(r[0] or ()) == want for r in cur.fetchall()):
            return
        keys = ", ".join(quoted(k) for k in key)
        what = "primary_key" + (" and __start_at (scd_type: 2)" if self.history else "")
        raise SinkUnwritable(
            f"table {self.table.name}: {schema}.{name} at {self.where()} has no primary key "
            f"or unique constraint on the table's {what} ({', '.join(key)}), which "
            f"upserts need; add it (ALTER TABLE {quoted(schema)}.{quoted(name)} ADD "
            f"PRIMARY KEY ({keys})) or point the sink's table elsewhere"
        )

    def _ensure_keys(self, cur: Any, schema: str) -> None:
        """The key-state table ``<table>__keys`` (under the DDL lock): its key columns
        nullable (the floor row has none), unique together; an index for dropping
        expired tombstones."""
        from airflow_connectors.sinks.changes import CHANGED_MS, DELETED, state_schema

        name = self.keys_table()
        if self._exists(cur, schema, name):
            # No CREATE ... IF NOT EXISTS on it: CREATE INDEX would wait for a publish
            # writing it (and a publish waiting for the DDL lock would wait for us).
            return
        full = f"{quoted(schema)}.{quoted(name)}"
        # scd_type 2 remembers deletes, several per key (see _History).
        keys = ", ".join(quoted(k) for k in (*self.table.primary_key, *self._state_key()))
        digest = hashlib.md5(name.encode(), usedforsecurity=False).hexdigest()[:10]
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {full} "
            f"({_columns_sql(state_schema(self.table), not_null=True)})"
        )
        cur.execute(f'CREATE UNIQUE INDEX IF NOT EXISTS "_ac_keys_{digest}" ON {full} ({keys})')
        cur.execute(
            f'CREATE INDEX IF NOT EXISTS "_ac_tomb_{digest}" ON {full} ({quoted(CHANGED_MS)}) '
            f"WHERE {quoted(DELETED)}"
        )

    def _lock_keys(self, cur: Any, schema: str) -> None:
        """The keyed table's publish lock (a transaction advisory lock: released by the
        commit, the rollback or the death of the connection); creates the key-state
        table if ``prepare`` did not. Taken before the DDL lock, never after it."""
        cur.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))",
            (KEYS_LOCK, f"{schema}.{self.target()[1]}"),
        )
        cur.fetchall()
        if not self._exists(cur, schema, self.keys_table()):
            self._lock_ddl(cur)
            self._ensure_keys(cur, schema)

    def _temp(self, cur: Any, name: str, data: pa.Table) -> str:
        """``data`` in a new temporary table ``name`` (dropped at the commit)."""
        cur.execute(
            f"CREATE TEMPORARY TABLE {quoted(name)} "
            f"({_columns_sql(data.schema, not_null=False)}) ON COMMIT DROP"
        )
        if data.num_rows:
            cur.adbc_ingest(name, data, mode="append", temporary=True)
            if data.num_rows > 1000:
                cur.execute(f"ANALYZE {quoted(name)}")
        return quoted(name)

    def _read_staged(
        self, cur: Any, schema: str, stage: str, staged_columns: list[str]
    ) -> pa.Table:
        """A keyed batch's staged changes (:meth:`stage_schema`); the columns a batch
        staged before the table gained them are null."""
        import pyarrow as pa

        from airflow_connectors.sinks.changes import with_change_columns

        want = self.stage_schema("rows")
        read = ", ".join(quoted(n) for n in want.names if n in staged_columns)
        cur.execute(f"SELECT {read} FROM {quoted(schema)}.{quoted(stage)}")
        staged = _as_declared(cur.fetch_arrow_table(), want)
        for f in want:
            if f.name not in staged.column_names:
                staged = staged.append_column(f.name, pa.nulls(staged.num_rows, f.type))
        return with_change_columns(staged.select(want.names).cast(want))

    def _apply_changes(
        self, cur: Any, schema: str, stage: str, staged_columns: list[str], batch_id: int
    ) -> int:
        """Inside publish's transaction, holding the table's publish lock: a keyed
        batch's staged changes applied to the target and its key state. Returns the
        number of changes the batch staged."""
        import pyarrow.compute as pc

        from airflow_connectors.sinks import changes as ch

        keys = list(self.table.primary_key)
        names = self.table.column_names
        target = f"{quoted(schema)}.{quoted(self.target()[1])}"
        state = f"{quoted(schema)}.{quoted(self.keys_table())}"
        sschema = ch.state_schema(self.table)

        def on(left: str, right: str) -> str:
            return " AND ".join(f"{left}.{quoted(k)} = {right}.{quoted(k)}" for k in keys)

        def cols(among: list[str], alias: str = "") -> str:
            return ", ".join(f"{alias}{quoted(n)}" for n in among)

        staged = self._read_staged(cur, schema, stage, staged_columns)
        collapsed = ch.collapse(staged, self.table, batch_id)

        # The key state of the batch's keys, and the floor.
        has_key = pc.is_valid(collapsed.column(keys[0]))
        batch_keys = self._temp(cur, "_ac_batch_keys", collapsed.filter(has_key).select(keys))
        cur.execute(
            f"SELECT {cols(sschema.names, 's.')} FROM {state} s JOIN {batch_keys} k "
            f"ON {on('s', 'k')} UNION ALL SELECT {cols(sschema.names)} FROM {state} "
            f"WHERE {quoted(keys[0])} IS NULL"
        )
        known = _as_declared(cur.fetch_arrow_table(), sschema).cast(sschema)

        def current(wanted: pa.Table) -> pa.Table:
            """The target's rows of ``wanted`` keys (for partial updates)."""
            found = self._temp(cur, "_ac_update_keys", wanted.select(keys))
            cur.execute(
                f"SELECT {cols(names, 't.')} FROM {target} t JOIN {found} k ON {on('t', 'k')}"
            )
            return _as_declared(cur.fetch_arrow_table(), self.schema("rows"))

        resolved = ch.resolve(collapsed, known, current, self.table)

        # The target: the truncate, then deletes and upserts (one change per key).
        if resolved.truncate is not None:
            # Rows whose last change is older than the truncate (or never recorded: rows
            # the table held before the sink) go; rows of later batches stay.
            cur.execute(
                f"DELETE FROM {target} t WHERE NOT EXISTS (SELECT FROM {state} s WHERE "
                f"{on('s', 't')} AND (s.{quoted(ch.BATCH)}, s.{quoted(ORDER)}) >= ($1, $2))",
                resolved.truncate,
            )
        if resolved.deletes.num_rows:
            gone = self._temp(cur, "_ac_deletes", resolved.deletes.select(keys))
            cur.execute(f"DELETE FROM {target} t USING {gone} d WHERE {on('t', 'd')}")
        if resolved.upserts.num_rows:
            rows = self._temp(cur, "_ac_upserts", resolved.upserts.select(names))
            others = [n for n in names if n not in keys]
            action = (
                "UPDATE SET " + ", ".join(f"{quoted(n)} = EXCLUDED.{quoted(n)}" for n in others)
                if others
                else "NOTHING"
            )
            cur.execute(
                f"INSERT INTO {target} ({cols(names)}) SELECT {cols(names)} FROM {rows} "
                f"ON CONFLICT ({cols(keys)}) DO {action}"
            )

        # The key state: the batch's marks (a new floor replaces the old one), then
        # tombstones past the table's retention go (never the floor).
        marks = self._temp(cur, "_ac_marks", resolved.state.select(sschema.names))
        if resolved.truncate is not None:
            cur.execute(f"DELETE FROM {state} WHERE {quoted(keys[0])} IS NULL")
        marks_cols = [n for n in sschema.names if n not in keys]
        cur.execute(
            f"INSERT INTO {state} ({cols(sschema.names)}) SELECT {cols(sschema.names)} "
            f"FROM {marks} WHERE {quoted(keys[0])} IS NOT NULL ON CONFLICT ({cols(keys)}) "
            "DO UPDATE SET " + ", ".join(f"{quoted(n)} = EXCLUDED.{quoted(n)}" for n in marks_cols)
        )
        cur.execute(
            f"INSERT INTO {state} ({cols(sschema.names)}) SELECT {cols(sschema.names)} "
            f"FROM {marks} WHERE {quoted(keys[0])} IS NULL"
        )
        cur.execute(
            f"DELETE FROM {state} WHERE {quoted(ch.DELETED)} AND {quoted(ch.CHANGED_MS)} < $1 "
            f"AND {quoted(keys[0])} IS NOT NULL",
            (ch.tombstone_cutoff_ms(self.table),),
        )
        if resolved.stale or resolved.missing:
            log.info(
                "table %s: batch %d: %d change(s) older than the table's, %d partial "
                "update(s) of keys it does not hold: not applied",
                self.table.name,
                batch_id,
                resolved.stale,
                resolved.missing,
            )
        return int(staged.num_rows)

    def _apply_history(
        self, cur: Any, schema: str, stage: str, staged_columns: list[str], batch_id: int
    ) -> int:
        """:meth:`_apply_changes` of an ``scd_type: 2`` table: every change is a point
        of its key's history, wherever its sequence falls (an older batch published late
        fills its place in). A key's versions are rebuilt from its changes in order
        (:func:`_versions`): the versions the target holds (an upsert at each
        ``__start_at``; a delete at an ``__end_at`` no version starts at; the deletes
        and truncates ``<table>__keys`` remembers) and the batch's; then written as a
        difference: old versions whose end moved are updated, new ones inserted,
        replaced ones deleted. A truncate first ends every version current at its
        sequence value, in one UPDATE. Returns the number of changes the batch staged."""
        import pyarrow.compute as pc

        from airflow_connectors.changes import OP, SET, TRUNCATE
        from airflow_connectors.sinks import changes as ch

        keys = list(self.table.primary_key)
        names = self.table.column_names
        target = f"{quoted(schema)}.{quoted(self.target()[1])}"
        state = f"{quoted(schema)}.{quoted(self.keys_table())}"
        sschema = ch.state_schema(self.table)
        tschema = self.target_schema("rows")

        staged = self._history_changes(
            self._read_staged(cur, schema, stage, staged_columns), batch_id
        )
        staged_changes = staged.num_rows
        is_truncate = pc.equal(staged.column(OP), TRUNCATE)
        truncates = staged.filter(is_truncate).select([ch.SEQ, ORDER]).to_pylist()
        staged = staged.filter(pc.invert(is_truncate))
        now = _now_ms()
        for t in truncates:
            # Every version current at the truncate's sequence value ends there (the
            # batch's own keys again below, with their changes around it). A version it
            # shortens that a delete ended later: that delete is remembered, the history
            # no longer shows it.
            cur.execute(
                f"INSERT INTO {state} ({_cols(sschema.names)}) SELECT "
                f"{_cols(keys, 't.')}, t.{quoted(END_AT)}, $2, $3, true, $4 FROM {target} t "
                f"WHERE t.{quoted(START_AT)} < $1 AND t.{quoted(END_AT)} > $1 AND NOT EXISTS "
                f"(SELECT FROM {target} n WHERE {_on(keys, 'n', 't')} "
                f"AND n.{quoted(START_AT)} = t.{quoted(END_AT)}) ON CONFLICT DO NOTHING",
                (t[ch.SEQ], batch_id, t[ORDER], now),
            )
            cur.execute(
                f"UPDATE {target} SET {quoted(END_AT)} = $1 WHERE {quoted(START_AT)} < $1 "
                f"AND ({quoted(END_AT)} IS NULL OR {quoted(END_AT)} > $1)",
                (t[ch.SEQ],),
            )
        cur.execute(f"SELECT {quoted(ch.SEQ)} FROM {state} WHERE {quoted(keys[0])} IS NULL")
        floors = [r[0] for r in cur.fetchall()]
        batch_keys = self._temp(
            cur, "_ac_batch_keys", staged.select(keys).group_by(keys).aggregate([])
        )
        cur.execute(
            f"SELECT {_cols([*names, START_AT, END_AT], 't.')} FROM {target} t "
            f"JOIN {batch_keys} k ON {_on(keys, 't', 'k')}"
        )
        held = _as_declared(cur.fetch_arrow_table(), tschema).to_pylist()
        cur.execute(
            f"SELECT {_cols(sschema.names, 's.')} FROM {state} s JOIN {batch_keys} k "
            f"ON {_on(keys, 's', 'k')}"
        )
        known = _as_declared(cur.fetch_arrow_table(), sschema).to_pylist()
        plan = _History(keys, names, held, known)
        for row in staged.to_pylist():
            k = plan.key(row)
            plan.add(k, _Event(row[ch.SEQ], batch_id, row[ORDER], row[OP], row[SET], row))
        for k in list(plan.events):  # truncates: a delete of each key at their points
            for seq in floors:
                plan.add(k, _Event(seq, -1, -2, DELETE_OP, None, {}, old=True, floor=True))
            for t in truncates:
                plan.add(k, _Event(t[ch.SEQ], batch_id, t[ORDER], DELETE_OP, None, {}, floor=True))
        plan.build(now)
        plan.state += [
            {
                **dict.fromkeys(keys),
                ch.SEQ: t[ch.SEQ],
                ch.BATCH: batch_id,
                ORDER: t[ORDER],
                ch.DELETED: True,
                ch.CHANGED_MS: now,
            }
            for t in truncates
        ]

        vkey = [*keys, START_AT]
        if plan.gone:
            removed = self._temp(cur, "_ac_versions_gone", _table(plan.gone, tschema, vkey))
            cur.execute(f"DELETE FROM {target} t USING {removed} g WHERE {_on(vkey, 't', 'g')}")
        if plan.ended:
            moved = self._temp(
                cur, "_ac_versions_ends", _table(plan.ended, tschema, [*vkey, END_AT])
            )
            cur.execute(
                f"UPDATE {target} t SET {quoted(END_AT)} = m.{quoted(END_AT)} FROM {moved} m "
                f"WHERE {_on(vkey, 't', 'm')}"
            )
        if plan.new:
            every = [*names, START_AT, END_AT]
            rows = self._temp(cur, "_ac_versions_new", _table(plan.new, tschema, every))
            cur.execute(
                f"INSERT INTO {target} ({_cols(every)}) SELECT {_cols(every)} FROM {rows} "
                f"ON CONFLICT ({_cols(vkey)}) DO UPDATE SET {_excluded(every, vkey)}"
            )
        # The deletes to remember replace the keys' earlier ones.
        cur.execute(f"DELETE FROM {state} s USING {batch_keys} k WHERE {_on(keys, 's', 'k')}")
        marked = self._temp(cur, "_ac_marks", _table(plan.state, sschema, sschema.names))
        cur.execute(
            f"INSERT INTO {state} ({_cols(sschema.names)}) SELECT {_cols(sschema.names)} "
            f"FROM {marked}"
        )
        cur.execute(
            f"DELETE FROM {state} WHERE {quoted(ch.DELETED)} AND {quoted(ch.CHANGED_MS)} < $1 "
            f"AND {quoted(keys[0])} IS NOT NULL",
            (ch.tombstone_cutoff_ms(self.table),),
        )
        return int(staged_changes)

    def _history_changes(self, staged: pa.Table, batch_id: int) -> pa.Table:
        """A batch's staged changes into an ``scd_type: 2`` table with their sequence
        (``__seq``); a change without a sequence value is refused."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from airflow_connectors.sinks import changes as ch

        n = staged.num_rows
        seq_type = ch.state_schema(self.table).field(ch.SEQ).type
        seq = (
            staged.column(self.table.sequence_by).cast(seq_type)
            if self.table.sequence_by
            else pa.chunked_array([pa.array([batch_id] * n, pa.int64())])
        )
        if seq.null_count:
            row = pc.indices_nonzero(pc.is_null(seq).combine_chunks())[0].as_py()
            raise SinkUnwritable(
                f"table {self.table.name}: change {row + 1} of batch {batch_id} has no "
                f"{self.table.sequence_by} (the table's sequence_by), which places a change "
                "in the history of a table with scd_type: 2; give every change a sequence "
                "value"
            )
        return staged.append_column(ch.SEQ, seq)

    # -- the staged-write protocol -------------------------------------------------------

    def prepare(self, batch_id: int, attempt: str) -> None:
        """On the driver before Spark starts: checks the server can be reached, creates
        (or checks) the target table and ``_ac_sink_batches``, and the attempt's staging
        tables afresh (dropping what an earlier run of it left)."""
        for f in self.schema("rows"):
            try:
                pg_type(f.type)
            except ValueError as e:
                raise SinkUnwritable(f"table {self.table.name}: column {f.name}: {e}") from e
        with self.transaction(f"prepare batch {batch_id}") as cur:
            schema = self.resolve_schema(cur)
            self._lock_ddl(cur)
            if not self._schema_exists(cur, schema):
                raise SinkUnwritable(
                    f"table {self.table.name}: schema {schema} does not exist at "
                    f"{self.where()}; create it (CREATE SCHEMA {schema}) or set the sink's schema"
                )
            self._ensure_batches(cur, schema)
            self._ensure_table(cur, schema, "rows", alter=not self.evolving)
            if self.table.keyed:
                self._ensure_keys(cur, schema)
            for kind in KINDS:
                stage = f"{quoted(schema)}.{quoted(self.stage(batch_id, attempt, kind))}"
                cur.execute(f"DROP TABLE IF EXISTS {stage}")
                columns = _columns_sql(self.stage_schema(kind), not_null=False)
                cur.execute(f"CREATE TABLE {stage} ({columns}, {PART_COLUMN} integer NOT NULL)")
            self._check_insert(cur, schema, self.stage(batch_id, attempt, "rows"))

    def _check_insert(self, cur: Any, schema: str, stage: str) -> None:
        """Prepares (never runs) publish's ``INSERT ... SELECT``: an existing table whose
        column types cannot take the rows fails here, before Spark, not after the commit."""
        target = f"{quoted(schema)}.{quoted(self.target()[1])}"
        names = self.schema("rows").names
        if self.evolving:  # the columns publish adds are not checked (they are new)
            have = set(self._columns(cur, schema, self.target()[1]))
            names = [n for n in names if n in have]
        cols = ", ".join(quoted(n) for n in names)
        try:
            cur.execute(
                f"PREPARE _ac_insert_check AS INSERT INTO {target} ({cols}) "
                f"SELECT {cols} FROM {quoted(schema)}.{quoted(stage)}"
            )
            cur.execute("DEALLOCATE _ac_insert_check")
        except Exception as e:
            raise SinkUnwritable(
                f"table {self.table.name}: {schema}.{self.target()[1]} at {self.where()} "
                f"cannot take the table's rows ({_first_line(e)}); alter its column types "
                "to match the table's columns, or point the sink's table elsewhere"
            ) from e

    def _schema_exists(self, cur: Any, schema: str) -> bool:
        cur.execute("SELECT count(*) FROM pg_namespace WHERE nspname = $1", (schema,))
        return bool(cur.fetchone()[0])

    def writer(self, batch_id: int, attempt: str, part: int, kind: Kind) -> PartWriter:
        """A part COPYed into the attempt's staging table of ``kind``."""
        return _PostgresPart(
            self, self.stage(batch_id, attempt, kind), part, self.stage_schema(kind), kind
        )

    def stage_schema(self, kind: Kind = "rows") -> pa.Schema:
        """The columns of a staging table: :meth:`schema`, and for a keyed table's rows
        the change columns after the table's (:func:`~airflow_connectors.changes.
        change_fields`), every table column nullable (a delete carries only the key, a
        truncate not even that)."""
        import pyarrow as pa

        from airflow_connectors.changes import change_fields

        schema = self.schema(kind)
        if kind == "rows" and self.table.keyed:
            schema = pa.schema([*(f.with_nullable(True) for f in schema), *change_fields()])
        return schema

    def unstorable(self, table: pa.Table) -> list[tuple[int, str]]:
        """Rows holding a NUL character in a text column (PostgreSQL text cannot hold
        one), each with the first such column: one ``match_substring`` per text column,
        a Python step per bad row only."""
        import pyarrow.compute as pc

        found: dict[int, str] = {}
        for name, column in zip(table.column_names, table.columns, strict=True):
            if not _is_text(column.type) or column.null_count == len(column):
                continue
            nul = pc.fill_null(pc.match_substring(column, NUL), False)
            if not pc.any(nul).as_py():
                continue
            for row in pc.indices_nonzero(nul).to_pylist():
                found.setdefault(
                    row,
                    f"column {name!r} holds a NUL character (\\u0000), which PostgreSQL "
                    "text cannot store",
                )
        return sorted(found.items())

    def publish(self, batch_id: int, attempt: str) -> None:
        """One transaction: record the batch in ``_ac_sink_batches``; if it was not
        recorded yet, move the attempt's staged rows (and dead letters) into the target
        tables and drop the staging tables. Then drops other attempts' staging tables."""
        with self.transaction(f"publish batch {batch_id}") as cur:
            schema = self.resolve_schema(cur)
            if self.table.keyed:  # publishers of the table take turns
                self._lock_keys(cur, schema)
            self._ensure_batches_quietly(cur, schema)
            cur.execute(
                f"INSERT INTO {quoted(schema)}.{BATCHES_TABLE} "
                "(pipeline, target, connector, batch_id, attempt) VALUES ($1, $2, $3, $4, $5) "
                "ON CONFLICT DO NOTHING RETURNING 1",
                self._key(batch_id, attempt),
            )
            if cur.fetchone() is not None:
                self._move(cur, schema, batch_id, attempt)
            else:  # published before (a re-run after a crash): staging left only by chance
                for kind in KINDS:
                    stage = self.stage(batch_id, attempt, kind)
                    cur.execute(f"DROP TABLE IF EXISTS {quoted(schema)}.{quoted(stage)}")
        failpoints.reach("postgres_committed")
        self._drop_stages(batch_id, keep=attempt)

    def _key(self, batch_id: int, attempt: str) -> tuple[str, str, str, int, str]:
        return (self.pipeline, self.target()[1], self.connector or "", batch_id, attempt)

    def _ensure_batches_quietly(self, cur: Any, schema: str) -> None:
        if not self._exists(cur, schema, BATCHES_TABLE):
            self._lock_ddl(cur)
            self._ensure_batches(cur, schema)

    def _move(self, cur: Any, schema: str, batch_id: int, attempt: str) -> None:
        """Inside publish's transaction: staged rows into the targets, counts recorded.
        The DDL lock (to create the errors table) is taken before any target is written,
        so a ``prepare`` adding a column (holding that lock) cannot deadlock with it."""
        stages = {k: self.stage(batch_id, attempt, k) for k in KINDS}
        for kind, stage in stages.items():
            if not self._exists(cur, schema, stage):
                raise SinkUnwritable(
                    f"table {self.table.name}: the staged {kind} of batch {batch_id} (attempt "
                    f"{attempt}) are missing from {schema} at {self.where()}; something "
                    "dropped the staging table, so the batch cannot be published; reset the "
                    "connector's offsets to ingest its input again"
                )
        cur.execute(f"SELECT EXISTS (SELECT FROM {quoted(schema)}.{quoted(stages['errors'])})")
        dead_letters = bool(cur.fetchone()[0])
        staged_columns = [c for c in self._columns(cur, schema, stages["rows"]) if c != PART_COLUMN]
        if self.evolving or dead_letters:
            self._lock_ddl(cur)
        if self.evolving:
            # Columns the batch added: ALTER TABLE ... ADD COLUMN in this transaction, so
            # they appear with the batch's rows or not at all.
            self._ensure_table(cur, schema, "rows")
        if dead_letters:  # the errors table waits for the first dead letter
            self._ensure_table(cur, schema, "errors")
        counts: dict[Kind, int] = {"rows": 0, "errors": 0}
        for kind, stage in stages.items():
            staged = f"{quoted(schema)}.{quoted(stage)}"
            if kind == "rows" or dead_letters:
                target = f"{quoted(schema)}.{quoted(self.target(kind)[1])}"
                # The staged columns: a batch staged before a later batch added columns
                # (published after it) has fewer than the table; they stay NULL.
                if kind == "rows" and self.table.keyed:
                    apply = self._apply_history if self.history else self._apply_changes
                    counts[kind] = apply(cur, schema, stage, staged_columns, batch_id)
                else:
                    names = staged_columns if kind == "rows" else self.schema(kind).names
                    cols = ", ".join(quoted(n) for n in names)
                    cur.execute(f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {staged}")
                    counts[kind] = max(int(cur.rowcount), 0)
            cur.execute(f"DROP TABLE {staged}")
        cur.execute(
            f"UPDATE {quoted(schema)}.{BATCHES_TABLE} SET rows = $6, error_rows = $7 "
            "WHERE pipeline = $1 AND target = $2 AND connector = $3 AND batch_id = $4 "
            "AND attempt = $5",
            (*self._key(batch_id, attempt), counts["rows"], counts["errors"]),
        )
        if self.table.keyed:
            failpoints.reach("postgres_changes_applied")

    def _drop_stages(self, batch_id: int, keep: str | None) -> None:
        """Drops the batch's staging tables but ``keep``'s; best effort (a table an
        attempt still writes is left to that attempt's own discard)."""
        keeps = {self.stage(batch_id, keep, k) for k in KINDS} if keep else set()
        try:
            with self.transaction(f"drop the staging tables of batch {batch_id}") as cur:
                schema = self.resolve_schema(cur)
                cur.execute("SET LOCAL lock_timeout = '2s'")
                cur.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = $1 "
                    "AND starts_with(tablename::text, $2)",
                    (schema, self.stage(batch_id, None, "rows")),
                )
                for (name,) in cur.fetchall():
                    if name not in keeps:
                        cur.execute(f"DROP TABLE IF EXISTS {quoted(schema)}.{quoted(name)}")
        except SinkUnwritable as e:  # leftovers only: the next publish of the batch retries
            log.warning("%s", e)

    def discard(self, batch_id: int, attempt: str | None = None) -> None:
        """Drops the attempt's staging tables (every attempt's when ``attempt`` is None);
        never the target's rows: published batches are in the target already."""
        if attempt is None:
            self._drop_stages(batch_id, keep=None)
            return
        with self.transaction(f"discard batch {batch_id}") as cur:
            schema = self.resolve_schema(cur)
            for kind in KINDS:
                stage = self.stage(batch_id, attempt, kind)
                cur.execute(f"DROP TABLE IF EXISTS {quoted(schema)}.{quoted(stage)}")

    # -- reading -------------------------------------------------------------------------

    def read(self, kind: Kind = "rows") -> pa.Table | None:
        """The target table (or its dead letters) as Arrow, the table's columns in their
        Arrow types; None when the table does not exist. Raises OSError in one line."""
        data = self._select(kind, "*", lambda cur: cur.fetch_arrow_table())
        return None if data is None else _as_declared(data, self.schema(kind))

    def count_rows(self, kind: Kind = "rows") -> int | None:
        """``SELECT count(*)`` of the target table (None: it does not exist)."""
        return self._select(kind, "count(*)", lambda cur: int(cur.fetchone()[0]))

    def _select(self, kind: Kind, what: str, fetch: Callable[[Any], _T]) -> _T | None:
        """``SELECT <what>`` of the target table (or its dead letters), as ``fetch`` takes
        it from the cursor; None when the table does not exist. OSError in one line."""
        try:
            with self.transaction(f"read {self.location(kind)}") as cur:
                schema = self.resolve_schema(cur)
                name = self.target(kind)[1]
                if not self._exists(cur, schema, name):
                    return None
                cur.execute(f"SELECT {what} FROM {quoted(schema)}.{quoted(name)}")
                return fetch(cur)
        except SinkUnwritable as e:
            raise OSError(str(e)) from e

    def column_max(self, column: str) -> object | None:
        """``SELECT max(column)`` of the target table (None: no table, or no value)."""
        try:
            with self.transaction(f"read {self.location()}") as cur:
                schema = self.resolve_schema(cur)
                name = self.target()[1]
                if not self._exists(cur, schema, name):
                    return None
                row = None
                if column in self._columns(cur, schema, name):
                    cur.execute(
                        f"SELECT max({quoted(column)}) FROM {quoted(schema)}.{quoted(name)}"
                    )
                    row = cur.fetchone()
        except SinkUnwritable as e:
            raise OSError(str(e)) from e
        if row is None:
            raise ValueError(
                f"table {self.location()} has no column {column!r}; name one of its "
                "columns in handover.column"
            )
        greatest: object | None = row[0]
        return greatest


# --- scd_type 2: a key's versions from its changes ------------------------------------

UPSERT_OP, DELETE_OP, UPDATE_OP = 0, 1, 2


@dataclass
class _Event:
    """One change of a key: its mark, operation and values (``old``: a change the
    target's versions already hold)."""

    seq: Any
    batch: int
    order: int
    op: int
    sets: list[str] | None
    row: dict[str, Any]
    old: bool = False
    #: A truncate's delete of the key (remembered as the table's floor, not the key's).
    floor: bool = False


@dataclass
class _Version:
    start: Any
    end: Any
    row: dict[str, Any]
    old: bool


def _versions(events: list[_Event], names: list[str]) -> list[_Version]:
    """A key's versions from its changes (old and new), in sequence order: an upsert
    starts a version and ends the one before; a delete ends it; a partial update starts
    a version from the one before with its columns set (nothing when none is current).
    Changes with one sequence value make one point of the history: the last of them by
    (batch, order), partial updates folded onto the change before them at that point."""
    out: list[_Version] = []
    for e in sorted(events, key=lambda e: (e.seq, e.batch, e.order)):
        cur = out[-1] if out and out[-1].end is None else None
        # A version started at this point is still current: a later version would
        # have a greater start, and a delete at this point removed it.
        same = out[-1] if out and out[-1].start == e.seq else None
        if e.op == UPSERT_OP:
            row = {c: e.row.get(c) for c in names}
            if same is not None:
                out[-1] = _Version(e.seq, None, row, e.old and same.old)
            else:
                if cur is not None:
                    cur.end = e.seq
                out.append(_Version(e.seq, None, row, e.old))
        elif e.op == DELETE_OP:
            if same is not None:  # deleted at the point it was written: no version
                out.pop()  # (the version before ends at this point already)
            elif cur is not None:
                cur.end = e.seq
        elif cur is not None:  # a partial update of the current version
            row = {**cur.row, **{c: e.row.get(c) for c in e.sets or []}}
            if same is not None:
                out[-1] = _Version(e.seq, None, row, False)
            else:
                cur.end = e.seq
                out.append(_Version(e.seq, None, row, False))
    return out


class _History:
    """The versions an ``scd_type: 2`` batch writes, for the keys it changes: from the
    target's versions of those keys (``held`` rows: columns, ``__start_at``,
    ``__end_at``), their remembered deletes (``known``: key-state rows) and the batch's
    changes (:meth:`add`). :meth:`build` fills ``gone`` (versions to delete: key and
    start), ``ended`` (old versions whose end moved), ``new`` (versions to insert or
    replace) and ``state`` (the deletes to remember: those no version ends at, which
    the history cannot show; a later, older upsert of the key ends there)."""

    def __init__(
        self,
        keys: list[str],
        names: list[str],
        held: list[dict[str, Any]],
        known: list[dict[str, Any]],
    ) -> None:
        from airflow_connectors.sinks.changes import SEQ

        self.keys, self.names = keys, names
        self.events: dict[tuple[Any, ...], list[_Event]] = {}
        self.before: dict[tuple[Any, ...], dict[Any, Any]] = {}
        #: The remembered deletes: key -> {sequence: key-state row}.
        self.deletes: dict[tuple[Any, ...], dict[Any, dict[str, Any]]] = {}
        for row in known:
            self.deletes.setdefault(self.key(row), {})[row[SEQ]] = row
        for row in held:
            self.before.setdefault(self.key(row), {})[row[START_AT]] = row[END_AT]
            self.add(self.key(row), _Event(row[START_AT], -1, -1, UPSERT_OP, None, row, True))
        for k, versions in self.before.items():  # an end no version starts at: a delete
            for end in set(versions.values()) - set(versions) - {None}:
                self.add(k, _Event(end, -1, -2, DELETE_OP, None, {}, old=True))
        for k, points in self.deletes.items():
            ends = set(self.before.get(k, {}).values())
            for seq in points:
                if seq not in ends:
                    self.add(k, _Event(seq, -1, -2, DELETE_OP, None, {}, old=True))
        self.gone: list[dict[str, Any]] = []
        self.ended: list[dict[str, Any]] = []
        self.new: list[dict[str, Any]] = []
        self.state: list[dict[str, Any]] = []

    def key(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(row[k] for k in self.keys)

    def add(self, key: tuple[Any, ...], event: _Event) -> None:
        self.events.setdefault(key, []).append(event)

    def build(self, now_ms: int) -> None:
        for k, events in self.events.items():
            key_cols = dict(zip(self.keys, k, strict=True))
            built = _versions(events, self.names)
            before = self.before.get(k, {})
            starts = {v.start for v in built}
            self.gone += [{**key_cols, START_AT: s} for s in before if s not in starts]
            for v in built:
                if not (v.old and v.start in before):
                    self.new.append({**v.row, START_AT: v.start, END_AT: v.end})
                elif before[v.start] != v.end:
                    self.ended.append({**key_cols, START_AT: v.start, END_AT: v.end})
            self.state += self._remembered(k, key_cols, events, built, now_ms)

    def _remembered(
        self,
        k: tuple[Any, ...],
        key_cols: dict[str, Any],
        events: list[_Event],
        built: list[_Version],
        now_ms: int,
    ) -> list[dict[str, Any]]:
        """The key's deletes the history does not show (no version starts or ends at
        their sequence), as key-state rows; a remembered one keeps its time."""
        from airflow_connectors.sinks.changes import BATCH, CHANGED_MS, DELETED, SEQ

        shown = {v.start for v in built} | {v.end for v in built}
        out: dict[Any, dict[str, Any]] = {}
        for e in sorted(events, key=lambda e: (e.seq, e.batch, e.order)):
            if e.op != DELETE_OP or e.floor or e.seq in shown:
                continue
            held = self.deletes.get(k, {}).get(e.seq)
            out[e.seq] = held or {
                **key_cols,
                SEQ: e.seq,
                BATCH: e.batch,
                ORDER: e.order,
                DELETED: True,
                CHANGED_MS: now_ms,
            }
        return list(out.values())


def _on(keys: list[str], left: str, right: str) -> str:
    return " AND ".join(f"{left}.{quoted(k)} = {right}.{quoted(k)}" for k in keys)


def _cols(names: list[str], alias: str = "") -> str:
    return ", ".join(f"{alias}{quoted(n)}" for n in names)


def _excluded(names: list[str], keys: list[str]) -> str:
    return ", ".join(f"{quoted(n)} = EXCLUDED.{quoted(n)}" for n in names if n not in keys)


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


def _table(rows: list[dict[str, Any]], schema: pa.Schema, names: list[str]) -> pa.Table:
    """``rows`` as a table of ``schema``'s ``names`` columns (all nullable)."""
    import pyarrow as pa

    fields = [schema.field(n).with_nullable(True) for n in names]
    return pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows], pa.schema(fields))


def _is_text(t: pa.DataType) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _without_nul(table: pa.Table) -> pa.Table:
    """``table`` (dead letters) with each NUL of its text as the six characters
    ``\\u0000``: a dead letter is stored, never refused, and says what the record held."""
    import pyarrow.compute as pc

    columns = []
    for column in table.columns:
        text = _is_text(column.type) and column.null_count < len(column)
        if text and pc.any(pc.fill_null(pc.match_substring(column, NUL), False)).as_py():
            column = pc.replace_substring(column, NUL, "\\u0000")
        columns.append(column)
    return table.from_arrays(columns, schema=table.schema)


def _as_declared(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` with declared columns cast to their Arrow types (NUMERIC arrives as text,
    TINYINT as int16); other columns as the driver returns them."""
    import pyarrow as pa

    declared = {f.name: f.type for f in schema}
    columns, fields = [], []
    for field, column in zip(data.schema, data.columns, strict=True):
        if isinstance(field.type, pa.ExtensionType) or hasattr(column.type, "storage_type"):
            column = pa.chunked_array(
                [c.storage for c in column.chunks], type=column.type.storage_type
            )
        want = declared.get(field.name)
        if want is not None and column.type != want:
            with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
                column = column.cast(want)
        columns.append(column)
        fields.append(pa.field(field.name, column.type))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))
