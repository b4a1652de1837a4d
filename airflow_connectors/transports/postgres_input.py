"""``postgres_input``: the rows of a PostgreSQL query, with Feldera's ``uri`` and
``query``, read Arrow-native through the ADBC PostgreSQL driver (binary COPY into Arrow
record batches; no row-by-row Python).

**Work items are ranges of one *window*.** A window is what one discovery plans:

- ``mode: snapshot``: window 0 is the query's whole result, read once; once every part
  of it is committed the input has ended (``exhausted``) and nothing is read again
  (until the connector's offsets are reset).
- ``mode: incremental``: window ``w`` holds the rows whose ``cursor_column`` lies in
  ``(committed upper bound, upper bound now]``; the first window starts at
  ``initial_value`` (inclusive) or at the smallest value. "Upper bound now" is, for
  DATE and TIMESTAMP cursors, the greatest value at or before the database's clock minus
  ``lag`` (the JDBC source connector's ``timestamp.delay.interval.ms``), for numeric
  ones the greatest value minus ``lag``: rows newer than that are held back for a later
  run, so a row whose transaction commits a little after a newer row was read is still
  read.
  Windows never overlap, so a committed row is never read again.

With ``partition_column`` (numeric, DATE or TIMESTAMP) a window is split into
``partitions`` ranges (default: the connector's ``tasks_max``), whose cut points come
from ONE aggregate query (min/max, computed in SQL); the first range also holds the rows
whose partition value is NULL and the outer ranges are open, so the ranges cover the
window whatever the bounds were.

**Offsets.** Key ``snapshot/NNNN`` or ``incremental/NNNN`` per range (part) index:
parts of later windows reuse the keys, so the state store holds at most ``partitions``
rows per connector, never one per window. An item's ``meta`` is the whole window (its
number, cursor bounds as PostgreSQL text, cut points, the columns read), and the engine
stores it with the committed offset: a re-run batch reads exactly the planned range, a
window whose parts were partly committed (a stopped connector released the others) is
completed with the same bounds, and the next window starts after the committed upper
bound. ``start``/``end`` count records of a range in ``partition_column`` (else
``cursor_column``) order: a part committed part way (an offsets edit) is resumed with
``OFFSET``, meaningful when that order is total (a unique column).

**Infinity.** PostgreSQL's DATE and TIMESTAMP columns may hold ``infinity`` and
``-infinity``, which no table column (nor Spark) can hold; the driver reads them as
values near year -290278 (timestamps) and -5877611 (dates). ``infinity`` says what they
become: an error of the row (default), NULL, or the column type's greatest/least value;
they are found with whole-column pyarrow compute, never row by row.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from airflow_connectors.connections import postgres as _pg
from airflow_connectors.formats.base import Decoded, RecordError
from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.datasets import LineageDataset, postgres_dataset
from airflow_connectors.spec.redact import mask_text
from airflow_connectors.transports.base import Cursor, KeyOffset, Limits, Transport, WorkItem

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.spec.models import TableSpec

#: PostgreSQL types a cursor or partition column may have (ranges need order and
#: arithmetic), by the ``typname`` ADBC reports.
RANGE_TYPES = frozenset(
    {"int2", "int4", "int8", "numeric", "float4", "float8", "date", "timestamp", "timestamptz"}
)
_INTEGER = frozenset({"int2", "int4", "int8"})
_TEMPORAL = frozenset({"date", "timestamp", "timestamptz"})
#: Source types read as they are into VARCHAR columns; others are cast to text in SQL
#: (uuid, json, interval, arrays...).
_TEXT_TYPES = frozenset({"text", "varchar", "bpchar", "name", "char"})
#: Bytes per Arrow record batch the driver produces (a hint).
BATCH_HINT_BYTES = 16 << 20
#: What a range is reckoned to weigh when the engine packs a batch's work items into
#: Spark tasks (its size is unknown before it is read): half of ``max_partition_bytes``'
#: default, so the ranges of one batch go to separate tasks, spread over the cores, as
#: large files do, instead of sharing one task as items of unknown size would.
NOMINAL_RANGE_BYTES = 64 << 20
_ALIAS = "_ac_q"

#: How the ADBC PostgreSQL driver reads ``infinity`` and ``-infinity``: the server's
#: sentinels (INT64_MAX/MIN microseconds, INT32_MAX/MIN days, counted from 2000-01-01)
#: moved to the Unix epoch with wrap-around. No real value reads as them: PostgreSQL's
#: values start in 4713 BC. ``timestamp`` and ``timestamptz`` alike (microseconds).
TIMESTAMP_INFINITY = {"infinity": -9222425352054775809, "-infinity": -9222425352054775808}
DATE_INFINITY = {"infinity": -2147472692, "-infinity": -2147472691}
_DAY_US = 86_400_000_000
#: ``infinity: clamp``: the least and greatest DATE (days since 1970-01-01) and
#: TIMESTAMP (microseconds) values, 0001-01-01 and 9999-12-31(T23:59:59.999999).
DATE_RANGE = (-719_162, 2_932_896)
TIMESTAMP_RANGE = (DATE_RANGE[0] * _DAY_US, (DATE_RANGE[1] + 1) * _DAY_US - 1)


class PostgresInputConfig(_pg.PostgresConnectionConfig):
    """Feldera's ``postgres_input`` (``uri``, ``query``), plus an Airflow connection,
    incremental reads on a cursor column and parallel ranges on a partition column."""

    query: str = Field(
        min_length=1,
        description="One SELECT statement whose result columns are matched to the "
        "table's columns by name (exactly, else ignoring case); every table column must "
        "be in the result. It is read as a subquery: SELECT ... FROM (query) WHERE <range>.",
    )
    mode: Literal["snapshot", "incremental"] = Field(
        default="snapshot",
        description="'snapshot': read the query's result once, then end the input. "
        "'incremental': each run reads the rows whose cursor_column is above the "
        "committed value (dlt's incremental cursor); the input ends whenever a run finds "
        "nothing new, and later runs read newer rows.",
    )
    cursor_column: str | None = Field(
        default=None,
        min_length=1,
        description="incremental: the column (of the query's result) whose value only "
        "grows for new rows: an integer, numeric, DATE or TIMESTAMP (with or without time "
        "zone). Rows where it is NULL are never read.",
    )
    initial_value: str | None = Field(
        default=None,
        description="incremental: read rows with cursor_column >= this value on the first "
        "run (text PostgreSQL casts to the column's type, or a number); unset: from the "
        "smallest value.",
    )
    lag: float = Field(
        default=0,
        ge=0,
        description="incremental: hold back the newest rows. DATE/TIMESTAMP cursors: each "
        "run reads values up to the database's clock (UTC) minus lag seconds (so rows "
        "dated in the future wait too); numeric cursors: up to the greatest value minus "
        "lag. A row committed late with a cursor value at or below what a run read is "
        "never read (rows are not re-read: there is no key to dedupe on), so set lag to "
        "the longest time (or id distance) a writer's transaction may lag behind others.",
    )
    partition_column: str | None = Field(
        default=None,
        min_length=1,
        description="Split each snapshot or incremental window into ranges of this "
        "column (integer, numeric, DATE or TIMESTAMP), read in parallel; the cut points "
        "come from one min/max query. Unset: one range.",
    )
    partitions: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Ranges per snapshot or window with partition_column; unset: the "
        "connector's tasks_max (one batch each).",
    )
    infinity: Literal["error", "null", "clamp"] = Field(
        default="error",
        description="What a DATE or TIMESTAMP value of PostgreSQL's infinity or "
        "-infinity (which no table column can hold) becomes. 'error': the row is a bad "
        "record; the batch fails naming the column, the value and the row (never "
        "stored as a wrong date). 'null': NULL. 'clamp': the column type's greatest "
        "value for infinity and least for -infinity: 9999-12-31T23:59:59.999999 and "
        "0001-01-01T00:00:00 for TIMESTAMP, 9999-12-31 and 0001-01-01 for DATE.",
    )

    @field_validator("initial_value", mode="before")
    @classmethod
    def _number_as_text(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        return value

    @field_validator("query")
    @classmethod
    def _one_statement(cls, value: str) -> str:
        stripped = value.strip().rstrip(";").strip()
        if not stripped:
            raise ValueError("the query is empty; expected one SELECT statement")
        return stripped

    @model_validator(mode="after")
    def _consistent(self) -> PostgresInputConfig:
        if self.mode == "incremental" and self.cursor_column is None:
            raise ValueError(
                "mode 'incremental' needs cursor_column: the column whose value grows for "
                "new rows (an id, a created_at timestamp)"
            )
        if self.mode == "snapshot":
            extra = [
                name
                for name, set_ in (
                    ("cursor_column", self.cursor_column is not None),
                    ("initial_value", self.initial_value is not None),
                    ("lag", self.lag != 0),
                )
                if set_
            ]
            if extra:
                names = " and ".join(", ".join(extra).rsplit(", ", 1))
                verb = "applies" if len(extra) == 1 else "apply"
                them = "it" if len(extra) == 1 else "them"
                raise ValueError(
                    f"{names} {verb} only to mode 'incremental' (this connector reads a "
                    f"snapshot); set mode: incremental, or remove {them}"
                )
        return self


class PostgresInputError(OSError):
    """The source cannot be read as configured (unreachable, refused, a bad query, a
    column missing): one line, without credentials."""


def _ident(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _one_line(e: BaseException, uri: str) -> str:
    """The first meaningful line of a driver error, without the ADBC status prefix and
    without anything secret of ``uri``."""
    text = str(e).strip()
    for prefix in ("IO: ", "INVALID_ARGUMENT: ", "NOT_FOUND: ", "UNKNOWN: ", "INTERNAL: "):
        text = text.removeprefix(prefix)
    text = text.replace("[libpq] ", "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[0] if lines else type(e).__name__
    return mask_text(line, _pg.uri_secrets(uri)).rstrip(".")


class PostgresInputTransport(Transport):
    """Reads a PostgreSQL query's rows: a snapshot once, or incremental windows on a
    cursor column, each split into ranges of ``partition_column`` (module docstring).
    Integrated: ``read`` yields record batches in the table's schema."""

    name = "postgres_input"
    Config = PostgresInputConfig
    config: PostgresInputConfig
    connection_fields: ClassVar[Mapping[str, str]] = {"postgres_conn_id": _pg.KIND}
    needs_format = False

    def __init__(self, config: StrictConfig, table: TableSpec) -> None:
        if not isinstance(config, PostgresInputConfig):
            raise TypeError(f"postgres_input needs a PostgresInputConfig, got {config!r}")
        super().__init__(config, table)
        self.prefix = f"{config.mode}/"
        self._uri: str | None = None

    # --- connections ----------------------------------------------------------------

    def uri(self) -> str:
        """The libpq URI to connect with (resolving ``postgres_conn_id`` once), with
        ``connect_timeout`` unless the URI has one."""
        if self._uri is None:
            try:
                self._uri = self.config.libpq_uri("postgres_input")
            except LookupError as e:
                raise PostgresInputError(str(e)) from None
        return self._uri

    def _error(self, what: str, e: BaseException) -> PostgresInputError:
        uri = self.uri()
        return PostgresInputError(
            f"postgres_input ({_pg.redacted(uri)}): {what}: {_one_line(e, uri)}"
        )

    def _connect(self) -> Any:
        """An autocommit ADBC connection whose session speaks UTC and ISO dates (the
        bounds the plans hold are PostgreSQL text of this session)."""
        import adbc_driver_postgresql.dbapi as adbc

        uri = self.uri()
        try:
            conn = adbc.connect(uri, autocommit=True)
        except Exception as e:
            raise self._error(
                "cannot connect (check the uri or postgres_conn_id: host, port, database, "
                "user, password; and that the server is reachable)",
                e,
            ) from None
        try:
            with conn.cursor() as cur:
                cur.execute("SET TIME ZONE 'UTC'")
                cur.execute("SET DateStyle = 'ISO'")
        except Exception as e:
            conn.close()
            raise self._error("cannot set up the session", e) from None
        return conn

    # --- discovery --------------------------------------------------------------------

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        """The parts of an incomplete window not in flight, or else the next window's
        parts (nothing while a window is planned and none of it is committed)."""
        mine = {k: v for k, v in cursor.offsets.items() if k.startswith(self.prefix)}
        flying = {k for k in cursor.in_flight if k.startswith(self.prefix)}
        latest = _latest(mine)
        if latest is not None and not _complete(latest, mine, self.prefix):
            yield from self._rest_of(latest, mine, flying)
            return
        if flying:  # a planned window none of whose parts is committed yet
            return
        if self.config.mode == "snapshot" and latest is not None:
            return  # read once
        yield from self._next_window(latest, mine, limits)

    def _key(self, part: int) -> str:
        return f"{self.prefix}{part:04d}"

    def _rest_of(
        self, window: Mapping[str, Any], mine: Mapping[str, KeyOffset], flying: set[str]
    ) -> Iterator[WorkItem]:
        for part in range(int(window["parts"])):
            key = self._key(part)
            if key in flying:
                continue
            row = mine.get(key)
            same = row is not None and row.meta.get("window") == window["window"]
            if row is not None and same and row.completed:
                continue
            yield self._item(window, part, row if same else None)

    def _item(self, window: Mapping[str, Any], part: int, resume: KeyOffset | None) -> WorkItem:
        start = resume.offset if resume is not None and not resume.completed else 0
        done = resume.records if resume is not None and not resume.completed else 0
        return WorkItem(
            key=self._key(part),
            start=start,
            records_done=done,
            size=NOMINAL_RANGE_BYTES,
            final=True,
            meta={**window, "part": part},
        )

    def _next_window(
        self, latest: Mapping[str, Any] | None, mine: Mapping[str, KeyOffset], limits: Limits
    ) -> Iterator[WorkItem]:
        types = self._describe()
        select = self._select(types)
        number = 0 if latest is None else int(latest["window"]) + 1
        window: dict[str, Any] = {"window": number, "select": select}
        split_col = self._column(types, self.config.partition_column, "partition_column")
        parts = (self.config.partitions or limits.tasks_max) if split_col else 1
        cursor_col = self._column(types, self.config.cursor_column, "cursor_column")
        bounds: dict[str, Any] | None = None
        if cursor_col is not None:
            after = None if latest is None else latest["cursor"]["upto"]
            bounds = {"column": cursor_col, "type": types[cursor_col], "after": after}
            if after is None and self.config.initial_value is not None:
                bounds["from"] = self.config.initial_value
        upto, cuts = self._bounds(bounds, split_col, types, parts)
        if bounds is not None:
            if upto is None:
                return  # nothing new (or all of it held back by lag)
            bounds["upto"] = upto
            window["cursor"] = bounds
        if split_col is not None:
            window["split"] = {"column": split_col, "type": types[split_col], "cuts": cuts}
        window["parts"] = len(cuts) + 1 if split_col is not None else 1
        for part in range(window["parts"]):
            row = mine.get(self._key(part))
            # A row without a window is an offsets edit: resume the part there.
            edited = row if row is not None and "window" not in row.meta else None
            yield self._item(window, part, edited)

    def _describe(self) -> dict[str, str]:
        """The query's result columns and their PostgreSQL types (without running it)."""
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                schema = cur.adbc_execute_schema(self.config.query)
        except Exception as e:
            raise self._error("the query cannot be prepared", e) from None
        finally:
            conn.close()
        return {f.name: (f.metadata or {}).get(b"POSTGRESQL:type", b"").decode() for f in schema}

    def _match(self, types: Mapping[str, str], name: str) -> str | None:
        if name in types:
            return name
        folded = [n for n in types if n.lower() == name.lower()]
        return folded[0] if len(folded) == 1 else None

    def _column(self, types: Mapping[str, str], name: str | None, field: str) -> str | None:
        if name is None:
            return None
        found = self._match(types, name)
        if found is None:
            raise PostgresInputError(
                f"postgres_input: {field} {name!r} is not a column of the query's result; "
                f"its columns: {', '.join(types)}"
            )
        if types[found] not in RANGE_TYPES:
            raise PostgresInputError(
                f"postgres_input: {field} {name!r} has type {types[found] or 'unknown'}; "
                "expected an integer, numeric, real, DATE or TIMESTAMP column"
            )
        return found

    def _select(self, types: Mapping[str, str]) -> list[str]:
        """The select list: each table column from its result column (VARCHAR columns
        from other PostgreSQL types as their text)."""
        out = []
        missing = []
        for col in self.table.columns:
            found = self._match(types, col.name)
            if found is None:
                missing.append(col.name)
                continue
            expr = f"{_alias_col(found)}"
            if col.type.kind == "VARCHAR" and types[found] not in _TEXT_TYPES:
                expr += "::text"
            out.append(f"{expr} AS {_ident(col.name)}")
        if missing:
            raise PostgresInputError(
                f"postgres_input: the query's result has no column {', '.join(map(repr, missing))} "
                f"of table {self.table.name!r}; its columns: {', '.join(types)}. Select them "
                "(NULL AS name for a column the source lacks)"
            )
        return out

    def _bounds(
        self,
        cursor: Mapping[str, Any] | None,
        split_col: str | None,
        types: Mapping[str, str],
        parts: int,
    ) -> tuple[str | None, list[str]]:
        """ONE aggregate query: the window's upper cursor bound (None: nothing new, or
        all of it held back by ``lag``) and the cut points of ``split_col`` into
        ``parts`` ranges (PostgreSQL text, equal ones merged)."""
        if cursor is None and (split_col is None or parts <= 1):
            return None, []
        exprs: list[str] = []
        params: list[str] = []
        conds: list[str] = []
        if cursor is not None:
            col, t = _alias_col(cursor["column"]), cursor["type"]
            conds, lower = _cursor_conditions(cursor, params)
            upto = _upto_expr(col, t, self.config.lag)
            # NULL when the window is empty: nothing new, or lag holds all of it back.
            inside = f"({upto}) {lower}" if lower else f"({upto}) IS NOT NULL"
            exprs.append(f"CASE WHEN count({col}) > 0 AND {inside} THEN ({upto})::text END")
        if split_col is not None:
            col, t = _alias_col(split_col), types[split_col]
            exprs += [_cut_expr(col, t, k, parts) for k in range(1, parts)]
        where = f" WHERE {' AND '.join(conds)}" if conds else ""
        sql = f"SELECT {', '.join(exprs)} FROM ({self.config.query}) AS {_ALIAS}{where}"
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, parameters=params or None)
                row = cur.fetchone()
        except Exception as e:
            raise self._error("the bounds query failed", e) from None
        finally:
            conn.close()
        assert row is not None  # an aggregate returns one row
        values = list(row)
        upto_text = values.pop(0) if cursor is not None else None
        cuts: list[str] = []
        for v in values:
            if v is not None and (not cuts or v != cuts[-1]):
                cuts.append(str(v))
        return upto_text, cuts

    def exhausted(self, cursor: Cursor) -> bool | None:
        """Snapshot: True once every part of it is committed. Incremental: None (the
        framework asks discovery: end of input whenever nothing new is found)."""
        if self.config.mode != "snapshot":
            return None
        mine = {k: v for k, v in cursor.offsets.items() if k.startswith(self.prefix)}
        latest = _latest(mine)
        flying = any(k.startswith(self.prefix) for k in cursor.in_flight)
        return latest is not None and not flying and _complete(latest, mine, self.prefix)

    # --- reading ---------------------------------------------------------------------

    def read(self, item: WorkItem) -> Iterator[pa.RecordBatch | Decoded]:
        """The rows of ``item``'s range (its planned bounds, from ``start`` on), as record
        batches in the table's schema (a :class:`Decoded` block where some rows are bad
        records)."""
        sql, params = self.range_sql(item)
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                cur.adbc_statement.set_options(
                    **{"adbc.postgresql.batch_size_hint_bytes": str(BATCH_HINT_BYTES)}
                )
                try:
                    cur.execute(sql, parameters=params or None)
                    reader = cur.fetch_record_batch()
                    done = 0  # rows of the item read before this record batch
                    for rb in reader:
                        yield from self._conformed(rb, item, done)
                        done += rb.num_rows
                except PostgresInputError:
                    raise
                except Exception as e:
                    raise self._error(f"cannot read {item.key}", e) from None
        finally:
            conn.close()

    def range_sql(self, item: WorkItem) -> tuple[str, list[str]]:
        """The statement reading ``item`` and its parameters (bounds as text)."""
        meta = item.meta
        params: list[str] = []
        conds: list[str] = []
        order: str | None = None
        cursor = meta.get("cursor")
        if cursor is not None:
            conds += _cursor_conditions(cursor, params)[0]
            conds.append(
                f"{_alias_col(cursor['column'])} <= {_param(params, cursor['upto'], cursor['type'])}"
            )
            order = _alias_col(cursor["column"])
        split = meta.get("split")
        if split is not None and split["cuts"]:
            col, t, cuts, part = (
                _alias_col(split["column"]),
                split["type"],
                split["cuts"],
                int(meta["part"]),
            )
            if part > 0:
                conds.append(f"{col} > {_param(params, cuts[part - 1], t)}")
            if part < len(cuts):
                upper = f"{col} <= {_param(params, cuts[part], t)}"
                conds.append(f"({upper} OR {col} IS NULL)" if part == 0 else upper)
        if split is not None:
            order = _alias_col(split["column"])
        sql = f"SELECT {', '.join(meta['select'])} FROM ({self.config.query}) AS {_ALIAS}"
        if conds:
            sql += f" WHERE {' AND '.join(conds)}"
        if order is not None:
            sql += f" ORDER BY {order}"
        if item.start:
            sql += f" OFFSET {int(item.start)}"
        return sql, params

    def _conformed(
        self, rb: pa.RecordBatch, item: WorkItem, done: int
    ) -> list[pa.RecordBatch | Decoded]:
        """``rb`` (rows ``done`` + 1... of ``item``) with extension columns (numeric, json)
        as their storage and infinities as ``infinity`` says, cast to the table's schema;
        left as read when a value does not fit, so that the engine's conversion reports
        it as a bad record of this item. Rows with an infinity under ``infinity: error``
        are bad records: one :class:`Decoded` block of ``rb``'s other rows and them."""
        import pyarrow as pa

        from airflow_connectors.formats._conform import RowError, conform

        arrays = [a.storage if isinstance(a, pa.ExtensionArray) else a for a in rb.columns]
        table = pa.Table.from_arrays(arrays, names=self.table.column_names)
        table, errors = self._infinities(table, item, done)
        with contextlib.suppress(RowError):
            table = conform(table, self.table, self.table.arrow_schema())
        if errors:
            return [Decoded(table, errors, rb.num_rows)]
        batches: list[pa.RecordBatch | Decoded] = list(table.to_batches())
        return batches

    def _infinities(
        self, table: pa.Table, item: WorkItem, done: int
    ) -> tuple[pa.Table, list[RecordError]]:
        """``table`` with the infinities of its DATE and TIMESTAMP columns as
        ``infinity`` says; under ``error`` without their rows, which are returned as bad
        records (numbered in the item's range). Whole-column compute: a column without
        infinities costs one ``is_in``; Python runs per bad row only."""
        import pyarrow as pa
        import pyarrow.compute as pc

        columns = list(table.columns)
        found: dict[str, tuple[Any, Any]] = {}  # column -> (infinity, -infinity) masks
        for i, col in enumerate(self.table.columns):
            arr = columns[i]
            sentinels = _sentinels(arr.type)
            if sentinels is None:
                continue
            ints = pc.cast(arr, pa.int64() if pa.types.is_timestamp(arr.type) else pa.int32())
            pos = pc.is_in(ints, value_set=pa.array([sentinels["infinity"]], ints.type))
            neg = pc.is_in(ints, value_set=pa.array([sentinels["-infinity"]], ints.type))
            either = pc.or_(pos, neg)
            if not pc.any(either).as_py():
                continue
            if self.config.infinity == "error":
                found[col.name] = (pos, neg)
            elif self.config.infinity == "null" or col.type.kind not in ("DATE", "TIMESTAMP"):
                columns[i] = pc.if_else(either, pa.scalar(None, arr.type), arr)
            else:
                columns[i] = _clamped(arr, pos, neg, col.type.kind)
        table = pa.Table.from_arrays(columns, names=table.column_names)
        if not found:
            return table, []
        return self._without_infinities(table, found, item, done)

    def _without_infinities(
        self,
        table: pa.Table,
        found: Mapping[str, tuple[Any, Any]],
        item: WorkItem,
        done: int,
    ) -> tuple[pa.Table, list[RecordError]]:
        """``table`` without the rows holding an infinity, and those rows as bad records
        naming the column and the value (and what to do)."""
        import json

        import pyarrow as pa
        import pyarrow.compute as pc

        masks = [pc.or_(pos, neg) for pos, neg in found.values()]
        bad = masks[0]
        for m in masks[1:]:
            bad = pc.or_(bad, m)
        errors: list[RecordError] = []
        parts, start = [], 0
        for row in pc.indices_nonzero(bad).to_pylist():
            shown: dict[str, Any] = {}
            first: tuple[str, str] | None = None
            for name in table.column_names:
                value: Any
                if name in found and found[name][0][row].as_py():
                    value = "infinity"
                elif name in found and found[name][1][row].as_py():
                    value = "-infinity"
                else:
                    shown[name] = table.column(name)[row].as_py()
                    continue
                shown[name] = value
                first = first or (name, value)
            assert first is not None
            errors.append(
                RecordError(
                    item.start + done + row + 1,
                    self._infinite(first[0], first[1]),
                    json.dumps(shown, default=str),
                )
            )
            parts.append(table.slice(start, row - start))
            start = row + 1
        parts.append(table.slice(start))
        return pa.concat_tables(parts), errors

    def _infinite(self, name: str, value: str) -> str:
        """Why a row holding ``value`` (infinity or -infinity) in column ``name`` is a bad
        record, and what to do."""
        col = next(c for c in self.table.columns if c.name == name)
        sql_name = name if name.isidentifier() and name.islower() else _ident(name)
        return (
            f"column {name!r} holds {value}, which {col.type} cannot hold; set the "
            "transport's infinity: null (store NULL) or clamp (store the type's greatest "
            f"or least value), or map it in the query (NULLIF({sql_name}, '{value}'))"
        )

    def describe(self) -> str:
        """Where, which mode, which columns, on one line."""
        where = (
            f"Airflow connection {self.config.postgres_conn_id}"
            if self.config.postgres_conn_id
            else _pg.redacted(self.config.uri or "")
        )
        parts = [where, self.config.mode]
        if self.config.cursor_column:
            parts.append(f"cursor {self.config.cursor_column}")
        if self.config.partition_column:
            parts.append(f"ranges of {self.config.partition_column}")
        return f"postgres_input: {', '.join(parts)}"

    def lineage_datasets(self) -> list[LineageDataset]:
        """The tables the query reads (``postgres_conn_id`` resolved; no secret)."""
        uri = self.config.libpq_uri("postgres_input")
        return [postgres_dataset(uri, table) for table in query_tables(self.config.query)]


def query_tables(query: str) -> list[str]:
    """The tables a SELECT reads (``schema.table`` when the query names the schema),
    parsed with OpenLineage's SQL parser; empty when it names none, cannot be parsed or
    the parser is not installed."""
    try:
        import openlineage_sql
    except ImportError:
        return []
    try:
        parsed = openlineage_sql.parse([query], dialect="postgres")
    except Exception:  # a query the parser does not understand: no input tables
        logging.getLogger(__name__).debug("cannot parse a postgres_input query", exc_info=True)
        return []
    if parsed is None:
        return []
    return [".".join(p for p in (t.database, t.schema, t.name) if p) for t in parsed.in_tables]


def _alias_col(name: str) -> str:
    return f"{_ALIAS}.{_ident(name)}"


def _sentinels(t: pa.DataType) -> dict[str, int] | None:
    """How infinity and -infinity read in an Arrow column of type ``t``; None: never."""
    import pyarrow as pa

    if pa.types.is_timestamp(t) and t.unit == "us":
        return TIMESTAMP_INFINITY
    if pa.types.is_date32(t):
        return DATE_INFINITY
    return None


def _clamped(arr: pa.ChunkedArray, pos: Any, neg: Any, kind: str) -> pa.ChunkedArray:
    """``arr`` (timestamps in microseconds, or dates) with infinity as the greatest and
    -infinity as the least value of a ``kind`` column (DATE or TIMESTAMP), in a type the
    table's cast turns into exactly that value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_date32(arr.type) and kind == "TIMESTAMP":
        # 9999-12-31T23:59:59.999999 is no date: read the dates as timestamps first.
        either = pc.or_(pos, neg)
        arr = pc.cast(pc.if_else(either, pa.scalar(None, arr.type), arr), pa.timestamp("us"))
    if pa.types.is_date32(arr.type):
        lo, hi = DATE_RANGE
        ints = pc.cast(arr, pa.int32())
    else:
        lo, hi = TIMESTAMP_RANGE if kind == "TIMESTAMP" else (d * _DAY_US for d in DATE_RANGE)
        ints = pc.cast(arr, pa.int64())
    bounded = pc.if_else(
        pos, pa.scalar(hi, ints.type), pc.if_else(neg, pa.scalar(lo, ints.type), ints)
    )
    return pc.cast(bounded, arr.type)


def _param(params: list[str], value: str, pg_type: str) -> str:
    """A placeholder for ``value`` (PostgreSQL text) cast to ``pg_type`` (one of
    :data:`RANGE_TYPES`, checked at discovery)."""
    if pg_type not in RANGE_TYPES:
        raise PostgresInputError(f"postgres_input: a range of type {pg_type!r} in a plan")
    params.append(str(value))
    return f"CAST(${len(params)}::text AS {pg_type})"


def _cursor_conditions(cursor: Mapping[str, Any], params: list[str]) -> tuple[list[str], str]:
    """The window's lower bound as conditions (exclusive after a committed window,
    inclusive from ``initial_value``; NULL cursors are never read), and the comparison
    with it (``"> $1"``) that an upper bound must pass; empty without a lower bound."""
    col, t = _alias_col(cursor["column"]), cursor["type"]
    if cursor.get("after") is not None:
        bound = _param(params, cursor["after"], t)
        return [f"{col} > {bound}"], f"> {bound}"
    if cursor.get("from") is not None:
        bound = _param(params, cursor["from"], t)
        return [f"{col} >= {bound}"], f">= {bound}"
    return [f"{col} IS NOT NULL"], ""


def _upto_expr(col: str, pg_type: str, lag: float) -> str:
    """SQL of the window's upper bound. DATE and TIMESTAMP cursors: the greatest value
    at or before the database's clock (UTC) minus ``lag`` (a value of a row, so a
    window never ends at a bare clock reading: the clock moving on alone plans
    nothing). Numbers: the greatest value minus ``lag``."""
    if pg_type in _TEMPORAL:
        now = "now()" if pg_type == "timestamptz" else "(now() AT TIME ZONE 'UTC')"
        clock = f"{now} - make_interval(secs => {float(lag)!r})"
        if pg_type == "date":
            clock = f"({clock})::date"
        return f"max({col}) FILTER (WHERE {col} <= CAST({clock} AS {pg_type}))"
    if lag == 0:
        return f"max({col})"
    if pg_type in _INTEGER:
        return f"max({col}) - {int(-(-lag // 1))}"
    return f"max({col}) - {float(lag)!r}"


def _cut_expr(col: str, pg_type: str, k: int, n: int) -> str:
    """SQL text of the ``k``-th of ``n`` evenly spaced cut points between min and max."""
    lo, hi = f"min({col})", f"max({col})"
    if pg_type in _INTEGER:
        value = f"({lo}::numeric + floor(({hi}::numeric - {lo}::numeric) * {k} / {n}))::int8"
    elif pg_type == "date":
        value = f"({lo} + (({hi} - {lo}) * {k} / {n}))"
    elif pg_type in ("timestamp", "timestamptz"):
        value = f"({lo} + ({hi} - {lo}) * ({k}::float8 / {n}))"
    else:  # numeric, float4, float8
        value = f"({lo} + ({hi} - {lo}) * {k} / {n})"
    return f"({value})::text"


def _latest(mine: Mapping[str, KeyOffset]) -> dict[str, Any] | None:
    """The meta (the window) of the newest window any committed part belongs to."""
    best: dict[str, Any] | None = None
    for row in mine.values():
        w = row.meta.get("window")
        if isinstance(w, int) and (best is None or w > best["window"]):
            best = {k: v for k, v in row.meta.items() if k not in ("part", "seen")}
    return best


def _complete(window: Mapping[str, Any], mine: Mapping[str, KeyOffset], prefix: str) -> bool:
    """Whether every part of ``window`` is committed to its end."""
    for part in range(int(window["parts"])):
        row = mine.get(f"{prefix}{part:04d}")
        if row is None or not row.completed or row.meta.get("window") != window["window"]:
            return False
    return True
