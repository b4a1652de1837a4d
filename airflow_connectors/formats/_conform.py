"""One rule for turning decoded values into column values, shared by every format.

A value lands only if it fits its column exactly. Anything else is a parse error that
names the column, what the column takes and what the record held: a dead letter under
``errors.tolerance: all``, a failed batch naming the record under ``none``. Nothing is
wrapped, truncated, rounded to a decimal or reinterpreted (no epoch numbers as
timestamps, no 5 as true). JSON and Parquet values are typed, so kinds must match; a CSV
field is text and is parsed as its column's type. What each column takes:

- BOOLEAN: booleans. CSV: ``true``/``false`` (also ``True``, ``TRUE``, ``False``,
  ``FALSE``); ``1``/``0`` are errors, as in JSON and Parquet.
- TINYINT .. BIGINT: integers within the type's range. ``1.0``, ``1.5``, ``1e3``, ``"5"``
  and ``true`` are errors; Parquet integer columns and DECIMAL(p, 0) qualify, floats and
  decimals with a scale do not.
- REAL, DOUBLE: numbers, rounded to the nearest REAL/DOUBLE (what a floating-point column
  is). NaN, Infinity and numbers beyond the type's range are errors in every format
  (JSON has no NaN; a CSV ``NaN``, ``inf`` or ``1e400`` and a Parquet NaN alike), so a
  column never silently holds a value no source number had.
- DECIMAL(p, s): numbers with at most ``p - s`` digits before the point and ``s`` after
  it; never rounded. JSON may also give the number as a string (as Feldera accepts, to
  carry more digits than a double). A Parquet float must convert back to the same float
  (0.1 -> 0.10 fits DECIMAL(5, 2); 0.125 does not).
- VARCHAR: text (JSON strings, any CSV field, Parquet strings or binary holding UTF-8).
- DATE: ``YYYY-MM-DD`` text, dates, or timestamps at midnight exactly.
- TIME: ``HH:MM[:SS[.ffffff]]`` text or times, at most microsecond precision.
- TIMESTAMP: ISO 8601 text (``T`` or a space between date and time; a date alone is
  midnight; at most 6 fractional digits), timestamps and dates. TIMESTAMP has no time
  zone and holds UTC: a value with an offset (``Z``, ``+05:00``, a Parquet timestamp
  with a time zone) is converted to UTC, the same in every format.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    import pyarrow as pa

    from airflow_connectors.spec.models import ColumnSpec, TableSpec
    from airflow_connectors.spec.types import SqlType


class RowError(ValueError):
    """A value that does not fit its column (raised by :func:`conform`). ``row``: the
    0-based index, among the rows being conformed, of the row holding it, when known
    (the message says ``in row N of M`` when there was more than one row)."""

    def __init__(self, message: str, row: int | None = None) -> None:
        super().__init__(message)
        self.row = row


_INT_RANGE = {
    "TINYINT": "-128 to 127",
    "SMALLINT": "-32768 to 32767",
    "INT": "-2147483648 to 2147483647",
    "BIGINT": "-2^63 to 2^63-1",
}
# A time of day and then a zone: "...T10:11:12+05:00", "... 10:11Z".
_ZONE = r"\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d(?::?\d\d)?)$"
_TIME_TEXT = r"^\d\d:\d\d(?::\d\d(?:\.\d+)?)?$"


def expected(t: SqlType) -> str:
    """What a column of type ``t`` takes, in words for error messages."""
    if t.kind in _INT_RANGE:
        return f"an integer from {_INT_RANGE[t.kind]}"
    if t.kind == "DECIMAL":
        assert t.precision is not None and t.scale is not None
        whole = t.precision - t.scale
        if t.scale == 0:
            return f"a whole number of at most {whole} digits"
        return (
            f"a number with at most {whole} digits before the decimal point and {t.scale} after it"
        )
    return {
        "BOOLEAN": "true or false",
        "REAL": "a finite number within REAL's range (about ±3.4e38)",
        "DOUBLE": "a finite number",
        "VARCHAR": "text",
        "DATE": "a date (YYYY-MM-DD)",
        "TIME": "a time of day (HH:MM:SS[.ffffff])",
        "TIMESTAMP": "a timestamp (YYYY-MM-DD HH:MM:SS[.ffffff]; an offset or Z is converted to UTC)",
    }[t.kind]


def mismatch(col: ColumnSpec, got: str) -> str:
    """The message for a value that does not fit ``col``: names the column, what it
    takes and what the record held."""
    return f"column {col.name!r} ({col.type}): expected {expected(col.type)}, got {got}"


def _row_text(row: int, rows: int) -> str:
    """`` in row N of M`` for a value among several rows; nothing for a lone row (a
    format isolates each bad record, whose number the caller gives)."""
    return f" in row {row + 1} of {rows}" if rows > 1 else ""


def _misfit(col: ColumnSpec, arr: pa.ChunkedArray | pa.Array, bad: Any, note: str = "") -> RowError:
    """The error for the first value of ``arr`` where the boolean mask ``bad`` is true:
    the value itself and its row, not just any value of the column."""
    import pyarrow.compute as pc

    hits = pc.indices_nonzero(bad)
    if not len(hits):  # not expected: ``bad`` was checked to hold a true
        return RowError(mismatch(col, _first(arr) + note))
    row = hits[0].as_py()
    got = show(arr[row].as_py(), arr.type) + _row_text(row, len(arr)) + note
    return RowError(mismatch(col, got), row)


def _failing_row(arr: pa.ChunkedArray, fits: Callable[[pa.ChunkedArray], bool]) -> int | None:
    """The index of the first value of ``arr`` that ``fits`` refuses (``arr`` as a whole
    was refused): bisection, O(n) work in O(log n) calls, paid only by a failed cast.
    None when no single half is refused (not expected of element-wise casts)."""
    lo, hi = 0, len(arr)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if not fits(arr.slice(lo, mid - lo)):
            hi = mid
        elif not fits(arr.slice(mid, hi - mid)):
            lo = mid
        else:
            return None
    return lo if hi - lo == 1 else None


def show(value: object, arrow_type: pa.DataType | None = None) -> str:
    """A value as an error message shows it, with its kind when that is not obvious."""
    import datetime as dt
    from decimal import Decimal

    if isinstance(value, str):
        return repr(value if len(value) <= 100 else value[:100] + "...")
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, Decimal):
        return f"the decimal {value}"
    if isinstance(value, dt.datetime):
        return f"the timestamp {value.isoformat()}"
    if isinstance(value, dt.date):
        return f"the date {value.isoformat()}"
    if isinstance(value, dt.time):
        return f"the time {value.isoformat()}"
    if isinstance(value, bytes):
        return f"the bytes {value[:100]!r}"
    return f"a value of type {arrow_type}" if arrow_type is not None else repr(value)


def conform(data: pa.Table, table: TableSpec, schema: pa.Schema) -> pa.Table:
    """Cast ``data`` to the table schema (columns in table order; missing columns NULL)
    and enforce NOT NULL, by the rule in this module's docstring. Raises
    :class:`RowError` naming the column when a value does not fit; callers isolate the
    record with :func:`~airflow_connectors.formats.base.isolate`."""
    import pyarrow as pa

    from airflow_connectors.changes import OP

    n = data.num_rows
    names = set(data.column_names)
    if table.keyed or OP in names:
        return _conform_changes(data, table, schema)
    arrays = []
    for col, fld in zip(table.columns, schema, strict=True):
        if col.name in names:
            arr = coerce(data.column(col.name), col, fld.type)
        else:
            arr = pa.nulls(n, fld.type)
        if not col.nullable and arr.null_count:
            raise _no_value(col, arr)
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=schema)


def _conform_changes(data: pa.Table, table: TableSpec, schema: pa.Schema) -> pa.Table:
    """:func:`conform` of change records (:mod:`airflow_connectors.changes`). Into a
    keyed table: the table's columns followed by ``__op`` and ``__set`` (rows without
    an ``__op`` are upserts); a NOT NULL column needs a value only where the change
    carries it (an upsert; a key column in every change but a truncate; a column a
    partial update sets). Into a table without a key only upserts are rows (appended,
    without the change columns): a delete, update or truncate is the record's error."""
    import pyarrow as pa

    from airflow_connectors.changes import OP, SET

    if not table.keyed:
        _refuse_changes(data, table)
        return conform(
            data.drop_columns([c for c in data.column_names if c in (OP, SET)]), table, schema
        )
    n = data.num_rows
    names = set(data.column_names)
    arrays = []
    for col, fld in zip(table.columns, schema, strict=True):
        if col.name in names:
            arrays.append(coerce(data.column(col.name), col, fld.type))
        else:
            arrays.append(pa.chunked_array([pa.nulls(n, fld.type)]))
    return with_changes(pa.Table.from_arrays(arrays, schema=schema), data, table)


def _operations(data: pa.Table) -> pa.ChunkedArray:
    """``data``'s ``__op`` (null: an upsert), or upserts when it has none."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from airflow_connectors.changes import OP, UPSERT, op_type

    if OP in data.column_names:
        return pc.fill_null(data.column(OP).cast(op_type()), UPSERT)
    return pa.chunked_array([pa.array([UPSERT] * data.num_rows, op_type())])


def _op_name(op: int | None) -> str:
    from airflow_connectors.changes import OP_NAMES

    name = OP_NAMES.get(op or 0, "change")
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def _refuse_changes(data: pa.Table, table: TableSpec) -> None:
    """Raise :class:`RowError` at the first change of ``data`` that is no upsert: a
    table without a key only appends rows."""
    import pyarrow.compute as pc

    from airflow_connectors.changes import UPSERT

    ops = _operations(data)
    others = pc.not_equal(ops, UPSERT)
    if pc.any(others).as_py():
        row = pc.indices_nonzero(others.combine_chunks())[0].as_py()
        raise RowError(
            f"{_op_name(ops[row].as_py())} record cannot be applied to table {table.name}, "
            "which has no primary key; declare the table's primary_key (its rows are then "
            "upserted and deleted by key), or read the data with update_format: raw",
            row,
        )


def with_changes(out: pa.Table, data: pa.Table, table: TableSpec) -> pa.Table:
    """``out`` (``data``'s rows in a keyed table's columns, NOT NULL not checked yet)
    with ``data``'s ``__op`` and ``__set``, once each NOT NULL column holds a value
    wherever the change carries it (see :func:`_conform_changes`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from airflow_connectors.changes import SET, TRUNCATE, UPDATE, UPSERT, op_type, set_type

    n = data.num_rows
    ops = _operations(data)
    sets = (
        data.column(SET)
        if SET in data.column_names
        else pa.chunked_array([pa.nulls(n, set_type())])
    )
    keys = set(table.primary_key)
    for col in table.columns:
        arr = out.column(col.name)
        if col.nullable or not arr.null_count:
            continue
        if col.name in keys:
            needed = pc.not_equal(ops, TRUNCATE)
        else:
            needed = pc.equal(ops, UPSERT)
            sets_it = pc.fill_null(pc.list_value_length(sets), 0)  # cheap pre-check
            if pc.any(pc.and_(pc.equal(ops, UPDATE), pc.greater(sets_it, 0))).as_py():
                named = [col.name in (s or ()) for s in sets.to_pylist()]
                needed = pc.or_(needed, pc.and_(pc.equal(ops, UPDATE), pa.array(named)))
        missing = pc.and_(pc.is_null(arr), needed)
        if pc.any(missing).as_py():
            row = pc.indices_nonzero(missing.combine_chunks())[0].as_py()
            raise RowError(
                f"column {col.name!r} is NOT NULL but {_op_name(ops[row].as_py())} record "
                f"in row {row + 1} of {n} has no value for it",
                row,
            )
    from airflow_connectors.changes import OP

    # Staged changes hold nulls where a change carries no value (a delete's other
    # columns, a truncate's key): every column is nullable until the sink applies them.
    out = out.cast(pa.schema([f.with_nullable(True) for f in out.schema]))
    out = out.append_column(pa.field(OP, op_type(), nullable=False), ops)
    return out.append_column(pa.field(SET, set_type()), sets.cast(set_type()))


def _no_value(col: ColumnSpec, arr: pa.ChunkedArray) -> RowError:
    """A NOT NULL column without a value: the first such row when there are several."""
    import pyarrow.compute as pc

    if len(arr) <= 1:
        return RowError(f"column {col.name!r} is NOT NULL but the record has no value for it")
    row = pc.indices_nonzero(pc.is_null(arr))[0].as_py()
    return RowError(
        f"column {col.name!r} is NOT NULL but row {row + 1} of {len(arr)} has no value for it",
        row,
    )


def coerce(arr: pa.ChunkedArray, col: ColumnSpec, to: pa.DataType) -> pa.ChunkedArray:
    """``arr`` as values of ``col`` (Arrow type ``to``); raises :class:`RowError`."""
    import pyarrow as pa

    source = arr
    try:
        if arr.type != to:
            arr = _cast(arr, col, to)
        _check(arr, col)
    except RowError:
        raise
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        # A cast refuses the whole column: find the value it refuses, and its row.
        row = _failing_row(source, lambda part: _fits(part, col, to)) if len(source) > 1 else 0
        if row is None:
            raise RowError(mismatch(col, _first(source, str(e)))) from e
        got = show(source[row].as_py(), source.type) + _row_text(row, len(source))
        raise RowError(mismatch(col, got), row) from e
    return arr


def _fits(arr: pa.ChunkedArray, col: ColumnSpec, to: pa.DataType) -> bool:
    """Whether every value of ``arr`` fits ``col`` (what :func:`coerce` does, without
    looking for the value that does not)."""
    import pyarrow as pa

    try:
        _check(_cast(arr, col, to) if arr.type != to else arr, col)
    except (RowError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


def _first(arr: pa.ChunkedArray | pa.Array, fallback: str = "") -> str:
    """The first non-null value of ``arr`` shown for a message (callers isolate bad
    records one by one, so at that point it is the bad value)."""
    values = arr.drop_null()
    if len(values):
        return show(values[0].as_py(), arr.type)
    return fallback or "a value that does not fit"


def _cast(arr: pa.ChunkedArray, col: ColumnSpec, to: pa.DataType) -> pa.ChunkedArray:
    import pyarrow as pa

    if pa.types.is_null(arr.type) or arr.null_count == len(arr):
        return pa.chunked_array([pa.nulls(len(arr), to)])
    arr = _plain_values(arr)
    if arr.type == to:
        return arr
    cast = _cast_by_source(arr, col, to)
    if cast is None:  # no value of this type fits: the first one is the culprit
        import pyarrow.compute as pc

        raise _misfit(col, arr, pc.is_valid(arr))
    return cast


def _plain_values(arr: pa.ChunkedArray) -> pa.ChunkedArray:
    """``arr`` with dictionary-encoded values decoded and timestamps with a time zone as
    their UTC wall-clock time, so the casts below see one type per kind of value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(arr.type):
        arr = pc.cast(arr, arr.type.value_type)
    if pa.types.is_timestamp(arr.type) and arr.type.tz is not None:
        # A point in time: TIMESTAMP has no zone and holds UTC.
        arr = pc.cast(arr, pa.timestamp(arr.type.unit))
    return arr


def _cast_by_source(
    arr: pa.ChunkedArray, col: ColumnSpec, to: pa.DataType
) -> pa.ChunkedArray | None:
    """``arr`` cast to ``to`` by the rule for its source type, or None when values of
    that type never fit ``col``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    src = arr.type
    kind = col.type.kind
    if pa.types.is_string(src) or pa.types.is_large_string(src) or pa.types.is_string_view(src):
        return _cast_text(arr, kind, to)
    if pa.types.is_binary(src) or pa.types.is_large_binary(src) or pa.types.is_binary_view(src):
        return pc.cast(arr, to) if kind == "VARCHAR" else None  # validates UTF-8
    if pa.types.is_integer(src):
        return _cast_integer(arr, col, to)
    if pa.types.is_floating(src):
        return _cast_float(arr, col, to)
    if pa.types.is_decimal(src):
        fits = kind in ("DECIMAL", "REAL", "DOUBLE") or (col.type.is_integer and src.scale == 0)
        return pc.cast(arr, to) if fits else None
    if pa.types.is_date(src):
        return pc.cast(arr, to) if kind in ("DATE", "TIMESTAMP") else None
    if pa.types.is_timestamp(src):
        return _cast_timestamp(arr, col, to)
    if pa.types.is_time(src) and kind == "TIME":
        return pc.cast(arr, to)
    return None


def _cast_text(arr: pa.ChunkedArray, kind: str, to: pa.DataType) -> pa.ChunkedArray | None:
    import pyarrow.compute as pc

    if kind in ("DATE", "TIME", "TIMESTAMP"):
        return parse_temporal(arr, kind, to)
    if kind in ("VARCHAR", "DECIMAL"):
        return pc.cast(arr, to)
    return None


def _cast_integer(arr: pa.ChunkedArray, col: ColumnSpec, to: pa.DataType) -> pa.ChunkedArray | None:
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = col.type.kind
    if col.type.is_integer:
        return pc.cast(arr, to)
    if kind in ("REAL", "DOUBLE"):
        return pc.cast(arr, options=pc.CastOptions(to, allow_float_truncate=True))
    if kind == "DECIMAL":
        # Arrow refuses int64 -> DECIMAL(5, 2) outright; go through a decimal wide
        # enough for any integer, then the checked narrowing names what overflows.
        return pc.cast(pc.cast(arr, pa.decimal256(76, to.scale)), to)
    return None


def _cast_float(arr: pa.ChunkedArray, col: ColumnSpec, to: pa.DataType) -> pa.ChunkedArray | None:
    import pyarrow.compute as pc

    kind = col.type.kind
    if kind in ("REAL", "DOUBLE"):
        return pc.cast(arr, to, safe=False)  # overflow to inf is caught by _check
    if kind != "DECIMAL":
        return None
    dec = pc.cast(arr, to)
    back = pc.cast(dec, arr.type)
    differs = pc.fill_null(pc.not_equal(back, arr), False)
    if pc.any(differs).as_py():
        raise _misfit(col, arr, differs, " (it would be rounded)")
    return dec


def _cast_timestamp(
    arr: pa.ChunkedArray, col: ColumnSpec, to: pa.DataType
) -> pa.ChunkedArray | None:
    import pyarrow.compute as pc

    kind = col.type.kind
    if kind == "TIMESTAMP":
        return pc.cast(arr, to)
    if kind != "DATE":
        return None
    day = pc.cast(arr, to)
    timed = pc.fill_null(pc.not_equal(pc.cast(day, arr.type), arr), False)
    if pc.any(timed).as_py():
        raise _misfit(col, arr, timed, " (it has a time of day)")
    return day


def parse_temporal(arr: pa.ChunkedArray, kind: str, to: pa.DataType) -> pa.ChunkedArray:
    """Text -> DATE, TIME or TIMESTAMP; one parser for JSON, CSV and Parquet strings."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if kind == "DATE":
        return pc.cast(arr, to)
    if kind == "TIME":
        shaped = pc.fill_null(pc.match_substring_regex(arr, _TIME_TEXT), True)
        if not pc.all(shaped).as_py():
            raise pa.ArrowInvalid("not a time of day")
        # Arrow cannot cast string -> time; go through a timestamp on 1970-01-01.
        ts = pc.cast(pc.binary_join_element_wise("1970-01-01T", arr, ""), pa.timestamp("us"))
        return pc.cast(pc.cast(ts, pa.int64()), to)
    if getattr(to, "tz", None) is None:
        # Arrow refuses a zone offset into a naive timestamp ("expected no zone
        # offset"): when the cast succeeds no value had one, and the column was read
        # without a regex over every value (a fifth of a JSON block's checks).
        try:
            return pc.cast(arr, to)
        except pa.ArrowInvalid:
            pass
    zoned = pc.fill_null(pc.match_substring_regex(arr, _ZONE), False)
    if not pc.any(zoned).as_py():
        return pc.cast(arr, to)
    utc = pc.cast(pc.cast(pc.if_else(zoned, arr, None), pa.timestamp("us", "UTC")), to)
    local = pc.cast(pc.if_else(zoned, None, arr), to)
    return pc.if_else(zoned, utc, local)


def _check(arr: pa.ChunkedArray, col: ColumnSpec) -> None:
    """Values readers store without complaint but that do not fit: NaN and infinities
    (a CSV ``1e400`` parses as inf), decimals beyond their precision (pyarrow's JSON and
    CSV readers store 1234.5 in a DECIMAL(5, 2))."""
    import pyarrow as pa
    import pyarrow.compute as pc

    bad: Any = None
    if col.type.kind in ("REAL", "DOUBLE"):
        bad = pc.invert(pc.fill_null(pc.is_finite(arr), True))
    elif col.type.kind == "DECIMAL":
        scale = arr.type.scale
        wide = pc.cast(arr, pa.decimal256(76, scale), safe=False)
        limit = pa.scalar(10 ** (arr.type.precision - scale), pa.decimal256(76, 0))
        bad = pc.fill_null(pc.greater_equal(pc.abs(wide), pc.cast(limit, wide.type)), False)
    if bad is not None and pc.any(bad).as_py():
        raise _misfit(col, arr, bad)
    if col.type.kind in ("DATE", "TIMESTAMP"):
        _check_years(arr, col)


def _check_years(arr: pa.ChunkedArray, col: ColumnSpec) -> None:
    """Dates and timestamps outside the years 1 to 9999: Arrow holds them (year 0 after
    converting 0001-01-01T00:00:00+01:00 to UTC), but Python's readers of the table
    fail on them ("date value out of range") and the Iceberg sink cannot commit them,
    so such a value is its record's error (a dead letter under errors.tolerance: all),
    never a row that breaks the table."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_timestamp(arr.type) and arr.type.unit != "ns":
        lo = pa.scalar(dt.datetime(1, 1, 1), arr.type)
        hi = pa.scalar(dt.datetime(9999, 12, 31, 23, 59, 59, 999999), arr.type)
    elif pa.types.is_date(arr.type):
        lo, hi = pa.scalar(dt.date(1, 1, 1), arr.type), pa.scalar(dt.date(9999, 12, 31), arr.type)
    else:
        return  # nanoseconds hold 1677 to 2262 only: always in range
    bad = pc.fill_null(pc.or_(pc.less(arr, lo), pc.greater(arr, hi)), False)
    if pc.any(bad).as_py():
        # Shown as text: Python cannot hold the value.
        raise _misfit(
            col,
            pc.cast(arr, pa.string()),
            bad,
            " (outside the years 1 to 9999 that the table and every sink can hold)",
        )


# --- schema evolution -------------------------------------------------------------------


class NewFields(ValueError):
    """Fields the table lacks, under ``schema_evolution: fail_on_new_columns``: the
    batch fails naming the object and the fields (no record is at fault, so it is never
    a dead letter)."""

    def __init__(self, fields: list[str]) -> None:
        self.fields = fields
        names = ", ".join(repr(f) for f in fields)
        super().__init__(f"new field(s) {names} that the table lacks")


class Evolution:
    """What a format does with fields the table lacks and values that do not fit their
    column, by the table's ``schema_evolution`` mode:

    - ``none``: unknown fields are ignored; a value that does not fit is a parse error.
    - ``fail_on_new_columns``: an unknown field raises :class:`NewFields`.
    - ``rescue``: unknown fields and values that do not fit go, as one JSON object per
      row, into the ``_rescued_data`` column (the value's column is NULL); the row lands.
    - ``add_new_columns``: unknown fields are recorded in :attr:`seen` (name -> the Arrow
      type pyarrow read them as); the engine widens the table and reads the batch again.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        #: New fields met so far (``add_new_columns``), in the order first met, each
        #: with the Arrow types its values were read as.
        self.seen: dict[str, list[pa.DataType]] = {}

    @property
    def detects(self) -> bool:
        """Whether fields the table lacks must be read (to fail, rescue or add them)."""
        return self.mode != "none"

    @property
    def rescues(self) -> bool:
        """Whether values that do not fit go to ``_rescued_data`` instead of failing."""
        return self.mode == "rescue"

    def take(self) -> dict[str, list[pa.DataType]]:
        """The new fields met since the last call, each with the types it held."""
        seen, self.seen = self.seen, {}
        return seen

    def note(self, data: pa.Table, extras: list[str]) -> None:
        """Records the types of new fields (``add_new_columns``); a field of JSON nulls
        only (no type) waits for a value."""

        for name in extras:
            col = data.column(name)
            if _untyped(col):
                continue
            types = self.seen.setdefault(name, [])
            t = _plain_values(col).type
            if t not in types:
                types.append(t)


def _untyped(col: pa.ChunkedArray) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_null(col.type))


def merge_types(types: list[pa.DataType]) -> pa.DataType | None:
    """The one type a new column takes for values of ``types``: integers and floats
    mixed are floats (DOUBLE), integers of several widths the widest; None when the
    kinds conflict (text and numbers, say)."""
    import pyarrow as pa

    if all(pa.types.is_integer(t) for t in types):
        return max(types, key=lambda t: t.bit_width)
    if all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in types):
        return pa.float64()
    if all(t == types[0] for t in types):
        return types[0]
    return None


def _rescue_value(value: object) -> object:
    """A value as ``_rescued_data`` holds it (JSON; dates and decimals as text)."""
    import datetime as dt
    from decimal import Decimal

    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    if isinstance(value, dict):
        return {k: _rescue_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rescue_value(v) for v in value]
    return value


def rescued_text(fields: dict[str, object]) -> str | None:
    """``fields`` as the JSON text of a ``_rescued_data`` value (None when empty)."""
    import json

    if not fields:
        return None
    return json.dumps({k: _rescue_value(v) for k, v in fields.items()}, sort_keys=True)


def conform_evolving(
    data: pa.Table,
    table: TableSpec,
    schema: pa.Schema,
    evolution: Evolution,
    rescued: list[dict[str, object]] | None = None,
) -> pa.Table:
    """:func:`conform` under the table's ``schema_evolution`` (see :class:`Evolution`).
    ``rescued``: per row, what the format already rescued (values its reader could not
    read into their column), merged into ``_rescued_data``."""
    from airflow_connectors.spec.models import RESCUED_DATA

    if not evolution.detects:
        return conform(data, table, schema)
    known = {c.name for c in table.columns if c.name != RESCUED_DATA}
    extras = [n for n in data.column_names if n not in known and not n.startswith("__")]
    if evolution.mode == "fail_on_new_columns":
        # A field whose values are all null and of no type (JSON nulls) is no field yet.
        present = [n for n in extras if not _untyped(data.column(n))]
        if present:
            raise NewFields(present)
        return conform(data, table, schema)
    if evolution.mode == "add_new_columns":
        evolution.note(data, extras)
        return conform(data, table, schema)
    if RESCUED_DATA not in schema.names:  # the engine adds it (engine/evolution.py)
        raise ValueError(
            f"table {table.name}: schema_evolution rescue needs a {RESCUED_DATA} column"
        )
    return _conform_rescuing(data, table, schema, extras, rescued)


def _conform_rescuing(
    data: pa.Table,
    table: TableSpec,
    schema: pa.Schema,
    extras: list[str],
    rescued: list[dict[str, object]] | None,
) -> pa.Table:
    import pyarrow as pa

    from airflow_connectors.changes import OP, SET
    from airflow_connectors.spec.models import RESCUED_DATA

    if not table.keyed and OP in data.column_names:
        _refuse_changes(data, table)
        data = data.drop_columns([c for c in data.column_names if c in (OP, SET)])
    changes = table.keyed
    n = data.num_rows
    rows: list[dict[str, object]] = (
        [dict(r) for r in rescued] if rescued else [{} for _ in range(n)]
    )
    for name in extras:
        for i, v in enumerate(data.column(name).to_pylist()):
            if v is not None:
                rows[i][name] = v
    arrays: list[pa.ChunkedArray | None] = []
    names = set(data.column_names)
    for col, fld in zip(table.columns, schema, strict=True):
        if col.name == RESCUED_DATA:
            arrays.append(None)  # filled below, once every column had its say
            continue
        if col.name in names:
            arr = _coerce_rescuing(data.column(col.name), col, fld.type, rows)
        else:
            arr = pa.chunked_array([pa.nulls(n, fld.type)])
        if not col.nullable and arr.null_count and not changes:
            raise RowError(f"column {col.name!r} is NOT NULL but the record has no value for it")
        arrays.append(arr)
    text = pa.chunked_array([pa.array([rescued_text(r) for r in rows], pa.string())])
    out = [text if a is None else a for a in arrays]
    result = pa.Table.from_arrays(out, schema=schema)
    # A keyed table's changes keep their operations (NOT NULL as the change carries it).
    return with_changes(result, data, table) if changes else result


def _coerce_rescuing(
    arr: pa.ChunkedArray, col: ColumnSpec, to: pa.DataType, rows: list[dict[str, object]]
) -> pa.ChunkedArray:
    """``arr`` as values of ``col``; values that do not fit are NULL and go to ``rows``
    (checked one by one only where the whole column does not fit)."""
    import pyarrow as pa

    try:
        return coerce(arr, col, to)
    except RowError:
        if not col.nullable:  # a NOT NULL column's misfit stays a parse error
            raise
    flat = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    keep: list[bool] = []
    for i in range(len(flat)):
        one = flat.slice(i, 1)
        try:
            coerce(pa.chunked_array([one]), col, to)
            keep.append(True)
        except RowError:
            keep.append(False)
            rows[i][col.name] = one[0].as_py()
    mask = pa.array(keep)
    import pyarrow.compute as pc

    kept = pc.if_else(mask, flat, pa.scalar(None, flat.type))
    return coerce(pa.chunked_array([kept]), col, to)
