"""``postgres_cdc_input``: the changes of one PostgreSQL table, read from a logical
replication slot, with Feldera's ``uri``, ``publication`` and ``source_table``.

**Decoding: pgoutput through SQL.** Each read peeks the connector's slot with
``pg_logical_slot_peek_binary_changes(slot, upto, NULL, 'proto_version', '1',
'publication_names', publication)`` and parses pgoutput's binary messages (Relation,
Begin, Commit, Insert, Update, Delete, Truncate; values in PostgreSQL's text form). Why:
pgoutput ships with every server (wal2json is an extra package on the database host),
decodes exactly what the *publication* publishes (its tables, operations and row filters,
as a PostgreSQL subscriber would see them), marks unchanged TOASTed values (so an update
that left a large value alone becomes a partial update, never a NULL), and the SQL
functions need no replication connection (psycopg speaks no replication protocol) and
never consume: a peek can be repeated, so a re-run batch reads the same changes again.
test_decoding's text output is not meant to be parsed.

**Offsets are LSNs.** The source is a sequence source (:mod:`.sequence`) of one
partition, the slot, keyed ``<schema>.<table>@wal``; its sequences are WAL positions as
integers and a transaction belongs to the position of its commit record (pgoutput's
``final_lsn``, the same position the slot compares with its ``confirmed_flush_lsn`` to
skip what was confirmed). Discovery plans the range from the committed position up to
the server's WAL *insert* position: every record that starts below it is already
written or being written, so the set of commits in the range is fixed. A read first
waits until the WAL is flushed up to the range's end (with ``synchronous_commit = off``
the WAL writer does so within a few ``wal_writer_delay``), because a peek decodes
flushed WAL only. A range is read in one peek, from the slot's confirmed position up
to the range's end, keeping the transactions whose commit lies in the range, in commit
order: the row order of the batch. Ranges are one per
discovery (a peek always decodes from the slot's confirmed position, so several ranges
of one slot would decode the same WAL again and again). ``records`` of a range and the
connector's lag therefore count WAL bytes, not changes.

**Exactly once.** The slot advances (``pg_replication_slot_advance``) only in
:meth:`~.sequence.SequenceSource.acknowledge`, which every discovery calls with the
committed position: after the batch committed. A crash before the commit leaves the
slot where it was and the range planned; the re-run peeks the same transactions. A
slot that is busy (a read peeking it) is acknowledged by the next discovery instead.

**Initial snapshot and hand-over.** When a connector starts (no offsets), discovery
(re)creates the slot (``pg_create_logical_replication_slot``; its consistent point is
where the changes start) and plans, before the first range, a snapshot item: the
table's rows read in one REPEATABLE READ transaction, each an UPSERT. The snapshot is
taken after the slot was created, so it already shows some of the changes the ranges
will replay; replaying them on top is exact because every change the slot yields is
idempotent on the state after it (an insert or a whole-row update is an upsert of the
row it leaves, a delete removes the key, a truncate empties the table, a partial update
sets values that are the row's at that point) and the snapshot's rows come first in the
order the sinks apply (they are planned first: lower batch or ``__order``). So the
snapshot may be read at any time after the slot exists, and a re-run of it reads a
later state and still converges. The one hazard is a transaction whose commit record
lies before the consistent point but that was not yet visible when the slot was made
(its commit is in WAL microseconds before it is visible): discovery keeps the snapshot
of in-progress transactions taken right after the slot was created, and the snapshot
read waits until none of them is in progress in its own snapshot.

**Rows.** The table's columns (matched by name, exactly, else ignoring case) plus
``__op`` (:mod:`airflow_connectors.changes`): INSERT and UPDATE are UPSERTs of the new
row; an UPDATE with unchanged TOASTed values is a partial UPDATE whose ``__set`` names
the columns it carries; an UPDATE that changes the key is a DELETE of the old key, then
the new row; DELETE carries the replica identity (the key columns with REPLICA IDENTITY
DEFAULT, every column with FULL); TRUNCATE is a TRUNCATE row. Values are PostgreSQL's
text: integers, floats and booleans are parsed here, the rest is given as text to the
engine's conform rules (``formats/_conform.py``): a value that does not fit its column
is that record's error.
"""

from __future__ import annotations

import hashlib
import logging
import re
import struct
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field, field_validator

from airflow_connectors.changes import DELETE, OP, SET, TRUNCATE, UPDATE, UPSERT
from airflow_connectors.connections import postgres as _pg
from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.datasets import LineageDataset, postgres_dataset
from airflow_connectors.spec.redact import mask_text
from airflow_connectors.transports.base import Cursor, Limits, WorkItem
from airflow_connectors.transports.sequence import Partition, SequenceSource

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.spec.models import TableSpec

log = logging.getLogger(__name__)

#: Rows per record batch a read yields.
BATCH_ROWS = 10_000
#: Rows fetched from the server per round trip (server-side cursors).
FETCH_ROWS = 5_000
#: Seconds a read waits for a slot that another session (an acknowledgement) holds.
SLOT_BUSY_WAIT = 60.0
#: Seconds a read waits for the server to flush its WAL up to the range's end.
FLUSH_WAIT = 60.0
#: Seconds the snapshot waits for transactions that were in progress when the slot was
#: created (see the module doc) before it fails.
SNAPSHOT_WAIT = 600.0
_NAME = re.compile(r"^[^\s\"]+$")
_SLOT = re.compile(r"^[a-z0-9_]{1,63}$")
#: The PostgreSQL errors that say the slot is in use by another session.
_IN_USE = "55006"


class PostgresCdcInputConfig(_pg.PostgresConnectionConfig):
    """Feldera's ``postgres_cdc_input`` (``uri``, ``publication``, ``source_table``), plus
    an Airflow connection, the slot's name, the initial snapshot and ``follow``."""

    publication: str = Field(
        min_length=1,
        description="The publication whose changes are read (CREATE PUBLICATION ... FOR "
        "TABLE source_table); it must exist and publish source_table.",
    )
    source_table: str = Field(
        min_length=1,
        description="The table whose changes are read: table or schema.table (schema "
        "public when not given).",
    )
    slot_name: str | None = Field(
        default=None,
        description="The logical replication slot the connector creates and owns (one per "
        "connector; lower-case letters, digits and _, at most 63). Unset: "
        "ac_<table>_<connector>_<hash of table, connector, source_table and "
        "publication>. Two connectors must never share a slot: set it when two pipelines "
        "with the same table and connector names read one database.",
    )
    snapshot: bool = Field(
        default=True,
        description="true: when the slot is created, the table's existing rows are read "
        "first (as upserts), then its changes. false: only the changes after the slot "
        "was created.",
    )
    follow: bool = Field(
        default=True,
        description="true: never end; every discovery plans the changes committed since. "
        "false: read up to the WAL position the first discovery saw, then end the input.",
    )

    @field_validator("publication")
    @classmethod
    def _publication(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r} is not a publication name (no spaces or quotes)")
        return v

    @field_validator("source_table")
    @classmethod
    def _table(cls, v: str) -> str:
        parts = v.split(".")
        if len(parts) > 2 or not all(p and _NAME.match(p) for p in parts):
            raise ValueError(f"{v!r} is not a table name; expected table or schema.table")
        return v

    @field_validator("slot_name")
    @classmethod
    def _slot(cls, v: str | None) -> str | None:
        if v is not None and not _SLOT.match(v):
            raise ValueError(
                f"{v!r} is not a replication slot name; expected lower-case letters, digits "
                "and _, at most 63"
            )
        return v


class PostgresCdcError(OSError):
    """The source cannot be read as configured: one line naming the connector, the
    setting and the remedy, without credentials."""


# --- pgoutput -------------------------------------------------------------------------


@dataclass
class _Relation:
    oid: int
    schema: str
    name: str
    identity: str
    columns: list[str]
    key_flags: list[bool]


@dataclass
class _Changes:
    """Rows decoded so far: text values per table column, op, set."""

    width: int
    values: list[list[str | None]] = field(default_factory=list)
    ops: list[int] = field(default_factory=list)
    sets: list[list[str] | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.values = [[] for _ in range(self.width)]

    def add(self, row: Sequence[str | None], op: int, sets: list[str] | None = None) -> None:
        for i, v in enumerate(row):
            self.values[i].append(v)
        self.ops.append(op)
        self.sets.append(sets)

    def __len__(self) -> int:
        return len(self.ops)


_UNCHANGED = object()


def _tuple(data: bytes, at: int) -> tuple[list[Any], int]:
    """pgoutput TupleData at ``at``: values (text, None, or :data:`_UNCHANGED`)."""
    (n,) = struct.unpack_from("!h", data, at)
    at += 2
    out: list[Any] = []
    for _ in range(n):
        kind = data[at : at + 1]
        at += 1
        if kind == b"n":
            out.append(None)
        elif kind == b"u":
            out.append(_UNCHANGED)
        elif kind in (b"t", b"b"):
            (size,) = struct.unpack_from("!i", data, at)
            at += 4
            out.append(data[at : at + size].decode())
            at += size
        else:
            raise ValueError(f"unknown pgoutput tuple value kind {kind!r}")
    return out, at


def _cstring(data: bytes, at: int) -> tuple[str, int]:
    end = data.index(b"\0", at)
    return data[at:end].decode(), end + 1


def lsn_int(text: str) -> int:
    """``'16/B374D848'`` as an integer."""
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def lsn_text(value: int) -> str:
    """An integer WAL position as PostgreSQL's ``pg_lsn`` text."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


class PostgresCdcInputTransport(SequenceSource):
    """Reads one table's changes from a logical replication slot (module docstring).
    Integrated: ``read`` yields record batches of the table's columns plus ``__op`` and
    ``__set``."""

    name = "postgres_cdc_input"
    Config = PostgresCdcInputConfig
    config: PostgresCdcInputConfig
    connection_fields: ClassVar[Mapping[str, str]] = {"postgres_conn_id": _pg.KIND}
    needs_format = False
    source_kind = "replication slot"

    def __init__(self, config: StrictConfig, table: TableSpec) -> None:
        if not isinstance(config, PostgresCdcInputConfig):
            raise TypeError(f"postgres_cdc_input needs a PostgresCdcInputConfig, got {config!r}")
        super().__init__(config, table)
        schema, _, name = config.source_table.rpartition(".")
        self.schema = schema or "public"
        self.source = name
        self.key = f"{self.schema}.{self.source}@wal"
        self.snapshot_key = f"{self.schema}.{self.source}@snapshot"
        self._uri: str | None = None

    @property
    def bounded(self) -> bool:
        """Bounded only with ``follow: false``."""
        return not self.config.follow

    @property
    def who(self) -> str:
        """``postgres_cdc_input connector <table>.<connector>`` for messages."""
        return f"postgres_cdc_input connector {self.context.who}"

    @property
    def slot(self) -> str:
        """The connector's replication slot."""
        if self.config.slot_name:
            return self.config.slot_name
        who = f"{self.context.table}_{self.context.connector or 'cdc'}"
        digest = hashlib.sha1(
            f"{who}|{self.schema}.{self.source}|{self.config.publication}".encode()
        ).hexdigest()[:8]
        base = re.sub(r"[^a-z0-9_]", "_", f"ac_{who}".lower())[:50]
        return f"{base}_{digest}"

    # --- connections ----------------------------------------------------------------

    def uri(self) -> str:
        """The libpq URI (``postgres_conn_id`` resolved once). Holds the password."""
        if self._uri is None:
            try:
                self._uri = self.config.libpq_uri("postgres_cdc_input")
            except LookupError as e:
                raise PostgresCdcError(str(e)) from None
        return self._uri

    def _where(self) -> str:
        return f"{self.who} ({_pg.redacted(self.uri())}, table {self.schema}.{self.source})"

    def _fail(self, what: str, e: BaseException | None = None) -> PostgresCdcError:
        text = f"{self._where()}: {what}"
        if e is not None:
            line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            text += f" ({mask_text(line, _pg.uri_secrets(self.uri())).rstrip('.')})"
        return PostgresCdcError(text)

    def _connect(self, *, autocommit: bool = True) -> Any:
        """A psycopg connection whose session speaks UTC and ISO dates, so the text of
        dates and times is what conform parses."""
        import psycopg

        try:
            conn = psycopg.connect(self.uri(), autocommit=autocommit)
        except Exception as e:
            raise self._fail(
                "cannot connect; check uri or postgres_conn_id (host, port, database, user, "
                "password) and that the server is reachable",
                e,
            ) from None
        try:
            conn.execute(
                "SET TIME ZONE 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = 'iso_8601'; "
                "SET extra_float_digits = 3; SET bytea_output = 'hex'"
            )
            if not autocommit:
                conn.commit()
        except Exception as e:
            conn.close()
            raise self._fail("cannot set up the session", e) from None
        return conn

    # --- checks ---------------------------------------------------------------------

    def _check(self, conn: Any) -> dict[str, str]:
        """wal_level, the table, the publication and the key; the source's columns
        (name -> type) for the table's columns."""
        if self.table.infers_schema:
            raise self._fail(
                f"table {self.table.name} declares no columns; postgres_cdc_input needs "
                "them (declare the table's columns and primary_key)"
            )
        if not self.table.keyed:
            raise self._fail(
                f"table {self.table.name} has no primary_key; a change stream needs one "
                "(declare primary_key, usually the source table's)"
            )
        level = conn.execute("SHOW wal_level").fetchone()[0]
        if level != "logical":
            raise self._fail(
                f"the server's wal_level is {level}, logical decoding needs 'logical'; set "
                "wal_level = logical in postgresql.conf (with max_replication_slots and "
                "max_wal_senders above 0) and restart the server"
            )
        rows = conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), c.relreplident "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
            "AND NOT a.attisdropped WHERE n.nspname = %s AND c.relname = %s "
            "ORDER BY a.attnum",
            (self.schema, self.source),
        ).fetchall()
        if not rows:
            raise self._fail(
                "source_table does not exist (or the user cannot see it); fix source_table "
                "(table or schema.table) or grant the user USAGE on the schema"
            )
        types = {r[0]: r[1] for r in rows}
        identity = rows[0][2]
        pub = conn.execute(
            "SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication "
            "WHERE pubname = %s",
            (self.config.publication,),
        ).fetchone()
        if pub is None:
            raise self._fail(
                f"publication {self.config.publication} does not exist; create it "
                f"(CREATE PUBLICATION {self.config.publication} FOR TABLE "
                f"{self.schema}.{self.source}) or fix publication"
            )
        inside = conn.execute(
            "SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s "
            "AND tablename = %s",
            (self.config.publication, self.schema, self.source),
        ).fetchone()
        if inside is None:
            raise self._fail(
                f"publication {self.config.publication} does not publish "
                f"{self.schema}.{self.source}; add it (ALTER PUBLICATION "
                f"{self.config.publication} ADD TABLE {self.schema}.{self.source}) or fix "
                "source_table"
            )
        missing = [c for c in self.table.column_names if _match(types, c) is None]
        if missing:
            raise self._fail(
                f"source_table has no column {', '.join(map(repr, missing))} of table "
                f"{self.table.name}; its columns: {', '.join(types)}"
            )
        if identity != "f":
            ident = self._identity_columns(conn)
            lacking = [k for k in self.table.primary_key if _match(dict.fromkeys(ident), k) is None]
            if lacking:
                raise self._fail(
                    f"deletes would not carry the key column(s) {', '.join(lacking)}: the "
                    f"source's replica identity is {', '.join(ident) or 'nothing'}; run "
                    f"ALTER TABLE {self.schema}.{self.source} REPLICA IDENTITY FULL, or "
                    "give it a primary key on the table's primary_key columns"
                )
        return types

    def _identity_columns(self, conn: Any) -> list[str]:
        rows = conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) "
            "WHERE n.nspname = %s AND c.relname = %s AND "
            "(CASE WHEN c.relreplident = 'i' THEN i.indisreplident ELSE i.indisprimary END)",
            (self.schema, self.source),
        ).fetchall()
        return [r[0] for r in rows]

    def _slot_row(self, conn: Any) -> tuple[int, str | None] | None:
        """(confirmed position, wal_status) of the slot, or None when it does not exist."""
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text, plugin, database, wal_status "
            "FROM pg_replication_slots WHERE slot_name = %s",
            (self.slot,),
        ).fetchone()
        if row is None:
            return None
        if row[1] != "pgoutput" or row[2] != conn.info.dbname:
            raise self._fail(
                f"replication slot {self.slot} exists but is not this connector's (plugin "
                f"{row[1]}, database {row[2]}); set slot_name to a slot of its own"
            )
        if row[3] == "lost":
            raise self._fail(
                f"replication slot {self.slot} is lost (the server removed the WAL it needed, "
                "max_slot_wal_keep_size); changes were missed: reset the connector's offsets "
                "to start again from a new snapshot"
            )
        return lsn_int(row[0]), row[3]

    def _gone(self) -> PostgresCdcError:
        return self._fail(
            f"replication slot {self.slot} does not exist any more (dropped), so changes may "
            "have been missed; reset the connector's offsets to start again from a new "
            "snapshot"
        )

    def _create_slot(self, conn: Any) -> WorkItem | None:
        """Drop the connector's slot if it exists (nothing of it is committed), create it
        and return the snapshot item (None with ``snapshot: false``)."""
        from psycopg import errors

        if self._slot_row(conn) is not None:
            # Left by a first discovery whose plan was never stored; a slot in use is
            # someone else's (two connectors with the same table and connector names).
            active = conn.execute(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                (self.slot,),
            ).fetchone()
            if active is not None and active[0] is not None:
                raise self._fail(
                    f"replication slot {self.slot} is in use by server process {active[0]}, "
                    "but this connector has no offsets yet: another connector or client "
                    "uses it; give this connector a slot_name of its own"
                )
            log.warning(
                "%s: dropping replication slot %s, made by a discovery whose plan was not "
                "stored, to start again",
                self.who,
                self.slot,
            )
            conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
        try:
            row = conn.execute(
                "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')",
                (self.slot,),
            ).fetchone()
        except errors.InsufficientPrivilege as e:
            raise self._fail(
                "the user may not create replication slots; grant it REPLICATION (ALTER ROLE "
                "... REPLICATION) or connect as a user that has it",
                e,
            ) from None
        except errors.ConfigurationLimitExceeded as e:
            raise self._fail(
                "no free replication slot; raise max_replication_slots (restart) or drop "
                "unused slots (pg_replication_slots)",
                e,
            ) from None
        except Exception as e:
            raise self._fail(f"cannot create replication slot {self.slot}", e) from None
        lsn = lsn_int(row[0])
        running = [
            int(r[0]) for r in conn.execute("SELECT pg_snapshot_xip(pg_current_snapshot())::text")
        ]
        log.info("%s: created replication slot %s at %s", self.who, self.slot, lsn_text(lsn))
        if not self.config.snapshot:
            return None
        return WorkItem(
            key=self.snapshot_key,
            start=0,
            end=0,
            records=0,
            final=True,
            meta={"slot": self.slot, "lsn": lsn, "running": running},
        )

    # --- the sequence source --------------------------------------------------------

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        """Check the source; on a fresh start create the slot and plan the snapshot;
        then the range of changes up to the WAL flush position (see the module doc)."""
        started = any(
            cursor.get(k) is not None or k in cursor.in_flight
            for k in (self.key, self.snapshot_key)
        )
        first: list[WorkItem] = []
        with self._connect() as conn:
            self._check(conn)
            if not started:
                snap = self._create_slot(conn)
                first = [snap] if snap is not None else []
            elif self._slot_row(conn) is None:
                raise self._gone()
        return iter([*first, *super().discover(cursor, limits)])

    def partitions(self) -> list[Partition]:
        """The slot: from its confirmed position to the server's WAL insert position."""
        with self._connect() as conn:
            row = self._slot_row(conn)
            if row is None:
                raise self._gone()
            end = lsn_int(conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0])
        return [Partition(self.key, row[0], max(row[0], end) - 1)]

    def _item_records(self, limits: Limits) -> int:
        # One range per discovery: every peek decodes from the slot's confirmed position.
        return 1 << 62

    def pins_start(self) -> bool:
        """True: a slot with nothing committed yet gets an empty range at its start,
        whose commit fixes where it starts (else the next discovery, seeing no offsets,
        would make the slot again and skip the changes in between)."""
        return True

    def where(self, partition: str) -> str:
        """``replication slot <name>``."""
        return f"replication slot {self.slot}"

    def missing(self, partition: Partition, first: int, last: int) -> None:
        """The slot was advanced past the committed position by someone else: the
        changes in between are gone."""
        raise self._fail(
            f"replication slot {self.slot} was advanced to {lsn_text(partition.first)}, past "
            f"the committed position {lsn_text(first)}, by something else than this "
            "connector; changes were missed: reset the connector's offsets to start again "
            "from a new snapshot"
        )

    def acknowledge(self, positions: Mapping[str, int]) -> None:
        """Advance the slot to the committed position (never back; a slot held by a read
        is acknowledged by the next discovery)."""
        from psycopg import errors

        position = positions.get(self.key)
        if position is None:
            return
        with self._connect() as conn:
            row = self._slot_row(conn)
            if row is None or position <= row[0]:
                return
            try:
                conn.execute(
                    "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                    (self.slot, lsn_text(position)),
                )
            except errors.ObjectInUse:
                log.info("%s: slot %s is busy; the next discovery advances it", self.who, self.slot)

    # --- reading --------------------------------------------------------------------

    def read(self, item: WorkItem) -> Iterator[bytes | pa.RecordBatch]:
        """The snapshot item's rows, or a range's changes."""
        if item.key == self.snapshot_key:
            yield from self._read_snapshot(item)
            return
        yield from super().read(item)

    def read_range(self, partition: str, first: int, last: int) -> Iterator[pa.RecordBatch]:
        """The changes of the transactions whose commit lies in ``first..last``, in
        commit order, as record batches (the table's columns, ``__op``, ``__set``)."""
        from psycopg import errors

        if partition != self.key:
            raise ValueError(f"{self.who}: work item {partition!r} is no range of {self.key}")
        deadline = time.monotonic() + SLOT_BUSY_WAIT
        while True:
            try:
                yield from self._peek(first, last)
                return
            except errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise self._fail(
                        f"replication slot {self.slot} stayed in use by another session; "
                        "make sure no other connector or client uses this slot"
                    ) from None
                time.sleep(0.5)

    def _peek(self, first: int, last: int) -> Iterator[pa.RecordBatch]:
        from psycopg import errors

        with self._connect(autocommit=False) as conn:
            row = self._slot_row(conn)
            if row is None:
                raise self._gone()
            if row[0] > first:
                raise self._fail(
                    f"replication slot {self.slot} is at {lsn_text(row[0])}, past the range "
                    f"{lsn_text(first)}..{lsn_text(last)} this batch reads; changes were "
                    "missed: reset the connector's offsets to start again from a new snapshot"
                )
            self._wait_for_flush(conn, last + 1)
            conn.commit()
            decoder = _Decoder(self, first, last)
            try:
                with conn.transaction(), conn.cursor(name="ac_cdc_peek") as cur:
                    cur.itersize = FETCH_ROWS
                    cur.execute(
                        "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, "
                        "NULL, 'proto_version', '1', 'publication_names', %s)",
                        (self.slot, lsn_text(last + 1), self.config.publication),
                    )
                    for (data,) in cur:
                        decoder.message(bytes(data))
                        if len(decoder.out) >= BATCH_ROWS:
                            yield decoder.flush()
                        if decoder.past:
                            break
            except errors.ObjectInUse:
                raise
            except errors.UndefinedObject as e:
                raise self._fail(
                    f"publication {self.config.publication} does not exist any more; create "
                    "it again (with the same tables) or fix publication",
                    e,
                ) from None
            except PostgresCdcError:
                raise
            except Exception as e:
                raise self._fail(
                    f"cannot read changes {lsn_text(first)}..{lsn_text(last)}", e
                ) from None
            if len(decoder.out):
                yield decoder.flush()

    def _wait_for_flush(self, conn: Any, upto: int) -> None:
        """Until the server flushed its WAL up to ``upto`` (a peek decodes flushed WAL)."""
        deadline = time.monotonic() + FLUSH_WAIT
        while True:
            flushed = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0]
            if lsn_int(flushed) >= upto:
                return
            conn.rollback()
            if time.monotonic() > deadline:
                raise self._fail(
                    f"the server's WAL is flushed up to {flushed} only, below the range's "
                    f"end {lsn_text(upto)}, after {FLUSH_WAIT:.0f} s; check the server's "
                    "WAL writer and disk"
                )
            time.sleep(0.05)

    def _read_snapshot(self, item: WorkItem) -> Iterator[pa.RecordBatch]:
        """The table's rows in one REPEATABLE READ transaction, as upserts, once no
        transaction running when the slot was made is in progress in its snapshot."""
        import psycopg

        running = {int(x) for x in item.meta.get("running", ())}
        cols = self.table.column_names
        deadline = time.monotonic() + SNAPSHOT_WAIT
        with self._connect(autocommit=False) as conn:
            types = self._check(conn)
            conn.commit()
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            while True:
                xip = {
                    int(r[0])
                    for r in conn.execute("SELECT pg_snapshot_xip(pg_current_snapshot())::text")
                }
                if not xip & running:
                    break
                conn.rollback()
                if time.monotonic() > deadline:
                    raise self._fail(
                        "the snapshot waited too long for transactions that were running "
                        "when the replication slot was created; end them and retry"
                    )
                time.sleep(0.2)
            select = ", ".join(f"{_ident(_match(types, c) or c)}::text" for c in cols)
            out = _Changes(len(cols))
            try:
                with conn.cursor(name="ac_cdc_snapshot") as cur:
                    cur.itersize = FETCH_ROWS
                    cur.execute(f"SELECT {select} FROM {_ident(self.schema)}.{_ident(self.source)}")
                    for row in cur:
                        out.add(row, UPSERT)
                        if len(out) >= BATCH_ROWS:
                            yield self.batch(out)
                            out = _Changes(len(cols))
            except Exception as e:
                raise self._fail("cannot read the table's snapshot", e) from None
            conn.rollback()
        if len(out):
            yield self.batch(out)

    def batch(self, rows: _Changes) -> pa.RecordBatch:
        """``rows`` as a record batch: integers, floats and booleans parsed from their
        PostgreSQL text (left as text when they do not parse, so conform names the value
        as that record's error), the rest as text."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from airflow_connectors.changes import op_type, set_type

        arrays: list[pa.Array] = []
        for col, values in zip(self.table.columns, rows.values, strict=True):
            arr = pa.array(values, pa.string())
            kind = col.type.kind
            try:
                if col.type.is_integer:
                    arr = pc.cast(arr, pa.int64())
                elif kind in ("REAL", "DOUBLE"):
                    arr = pc.cast(arr, pa.float64())
                elif kind == "BOOLEAN":
                    arr = _booleans(arr)
            except (pa.ArrowInvalid, ValueError):
                pass  # conform reports the value that does not fit
            arrays.append(arr)
        arrays.append(pa.array(rows.ops, op_type()))
        arrays.append(pa.array(rows.sets, set_type()))
        return pa.RecordBatch.from_arrays(arrays, names=[*self.table.column_names, OP, SET])

    def describe(self) -> str:
        """Where, which table, publication and slot, on one line."""
        where = (
            f"Airflow connection {self.config.postgres_conn_id}"
            if self.config.postgres_conn_id
            else _pg.redacted(self.config.uri or "")
        )
        return (
            f"postgres_cdc_input: {where}, table {self.schema}.{self.source}, publication "
            f"{self.config.publication}, slot {self.slot}, "
            f"{'follow' if self.config.follow else 'until the WAL position seen first'}"
        )

    def lineage_datasets(self) -> list[LineageDataset]:
        """The source table (``postgres_conn_id`` resolved; no secret)."""
        uri = self.config.libpq_uri("postgres_cdc_input")
        return [postgres_dataset(uri, f"{self.schema}.{self.source}")]


class _Decoder:
    """pgoutput messages -> rows of the transport's table, for transactions whose
    commit lies in ``first..last``."""

    def __init__(self, transport: PostgresCdcInputTransport, first: int, last: int) -> None:
        self.t = transport
        self.first = first
        self.last = last
        self.relations: dict[int, _Relation] = {}
        self.positions: dict[int, list[int | None]] = {}
        self.inside = False
        self.past = False
        self.out = _Changes(len(transport.table.columns))
        self.keys = list(transport.table.primary_key)

    def flush(self) -> pa.RecordBatch:
        batch = self.t.batch(self.out)
        self.out = _Changes(len(self.t.table.columns))
        return batch

    def message(self, data: bytes) -> None:
        kind = data[:1]
        if kind == b"B":
            (final_lsn,) = struct.unpack_from("!q", data, 1)
            self.inside = self.first <= final_lsn <= self.last
            self.past = final_lsn > self.last
        elif kind == b"C":
            self.inside = False
        elif kind == b"R":
            self._relation(data)
        elif not self.inside:
            return
        elif kind in (b"I", b"U", b"D"):
            (oid,) = struct.unpack_from("!I", data, 1)
            if oid in self.positions:
                self._change(kind, oid, data)
        elif kind == b"T":
            (n,) = struct.unpack_from("!i", data, 1)
            oids = struct.unpack_from(f"!{n}I", data, 6)
            if any(o in self.positions for o in oids):
                self.out.add([None] * self.out.width, TRUNCATE)

    def _relation(self, data: bytes) -> None:
        (oid,) = struct.unpack_from("!I", data, 1)
        schema, at = _cstring(data, 5)
        name, at = _cstring(data, at)
        identity = chr(data[at])
        (n,) = struct.unpack_from("!h", data, at + 1)
        at += 3
        columns, flags = [], []
        for _ in range(n):
            flag = data[at]
            col, at = _cstring(data, at + 1)
            at += 8  # type oid, typmod
            columns.append(col)
            flags.append(bool(flag & 1))
        rel = _Relation(oid, schema, name, identity, columns, flags)
        self.relations[oid] = rel
        if schema == self.t.schema and name == self.t.source:
            names = dict.fromkeys(columns)
            where = {c: i for i, c in enumerate(columns)}
            self.positions[oid] = [
                where.get(m) if (m := _match(names, c)) is not None else None
                for c in self.t.table.column_names
            ]
        else:
            self.positions.pop(oid, None)

    def _row(self, oid: int, values: list[Any]) -> list[Any]:
        return [values[i] if i is not None else None for i in self.positions[oid]]

    def _change(self, kind: bytes, oid: int, data: bytes) -> None:
        at = 5
        if kind == b"I":
            new, _ = _tuple(data, at + 1)
            self.out.add(self._row(oid, new), UPSERT)
            return
        if kind == b"D":
            gone, _ = _tuple(data, at + 1)  # 'K' or 'O'
            self.out.add(self._key_only(self._row(oid, gone)), DELETE)
            return
        old: list[Any] | None = None
        if data[at : at + 1] in (b"K", b"O"):
            old, at = _tuple(data, at + 1)
        new, _ = _tuple(data, at + 1)  # 'N'
        row = self._row(oid, new)
        names = self.t.table.column_names
        key_at = [names.index(k) for k in self.keys]
        if any(row[i] is _UNCHANGED for i in key_at):
            raise self.t._fail(
                "an update left a key column's TOASTed value unchanged and the change does "
                "not carry it; set REPLICA IDENTITY FULL on the source table"
            )
        if old is not None:
            before = self._row(oid, old)
            if any(before[i] != row[i] for i in key_at):
                self.out.add(self._key_only(before), DELETE)
        if any(v is _UNCHANGED for v in row):
            keys = set(self.keys)
            sets = [
                n for n, v in zip(names, row, strict=True) if v is not _UNCHANGED and n not in keys
            ]
            self.out.add([None if v is _UNCHANGED else v for v in row], UPDATE, sets)
        else:
            self.out.add(row, UPSERT)

    def _key_only(self, row: list[Any]) -> list[Any]:
        """A delete's row: what the old tuple carries (the replica identity), unchanged
        values as NULL."""
        return [None if v is _UNCHANGED else v for v in row]


def _booleans(arr: pa.Array) -> pa.Array:
    """PostgreSQL's boolean text (``t``/``f`` from pgoutput, ``true``/``false`` from a
    cast) as booleans; raises ValueError for other text."""
    import pyarrow as pa
    import pyarrow.compute as pc

    true = pc.is_in(arr, value_set=pa.array(["t", "true"]))
    false = pc.is_in(arr, value_set=pa.array(["f", "false"]))
    if not pc.all(pc.or_(pc.or_(true, false), pc.is_null(arr))).as_py():
        raise ValueError("not a boolean")
    return pc.if_else(pc.is_null(arr), pa.scalar(None, pa.bool_()), true)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _match(names: Mapping[str, Any], name: str) -> str | None:
    """``name`` among ``names``: exactly, else ignoring case when that is unambiguous."""
    if name in names:
        return name
    folded = [n for n in names if n.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None


__all__ = ["PostgresCdcError", "PostgresCdcInputConfig", "PostgresCdcInputTransport"]
