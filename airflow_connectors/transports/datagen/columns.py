"""A column's generation recipe: a plan's settings for one column, checked against the
column's SQL type (ranges in the type's physical unit, values that fit it, NULLs only in
nullable columns) and resolved once, when the transport is built."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from airflow_connectors.spec.types import SqlType
from airflow_connectors.transports.datagen.config import FieldSettings

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.spec.models import ColumnSpec

#: Largest zipf domain: its cumulative weights are held in memory (8 bytes per value).
MAX_ZIPF_VALUES = 50_000_000
#: Longest generated string; keeps a chunk's characters well inside Arrow's 2 GiB limit.
MAX_STRING_LENGTH = 100_000

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_DAY_MS = 86_400_000
_FLOAT32_MAX = 3.4028234663852886e38
#: Types generated as floats (DECIMAL is rounded to its scale afterwards).
FLOAT_KINDS = ("REAL", "DOUBLE", "DECIMAL")
#: Integer types and their widths: generated values wrap like the SQL type.
INT_BITS = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64}
# Inclusive bounds a range may use, in the column's physical unit. Dates and timestamps
# stay within years 1..9999 so every value converts to Python.
_LIMITS: dict[str, tuple[int | float, int | float]] = {
    **{k: (-(2 ** (b - 1)), 2 ** (b - 1)) for k, b in INT_BITS.items()},
    "REAL": (-_FLOAT32_MAX, _FLOAT32_MAX),
    "DOUBLE": (-math.inf, math.inf),
    "VARCHAR": (0, MAX_STRING_LENGTH + 1),
    "DATE": (-719_162, 2_932_897),
    "TIMESTAMP": (-62_135_596_800_000, 253_402_300_800_000),
    "TIME": (0, _DAY_MS),
}
# Feldera's defaults for uniform and zipf: 1970-01-01 .. 2100-01-01, strings of 0..24.
_DEFAULT_RANGES: dict[str, tuple[int | float, int | float]] = {
    **{k: (-(2 ** (b - 1)), 2 ** (b - 1)) for k, b in INT_BITS.items()},
    "REAL": (0.0, 1.0),
    "DOUBLE": (0.0, 1.0),
    "DECIMAL": (0.0, 1.0),
    "VARCHAR": (0, 25),
    "DATE": (0, 54_787),
    "TIMESTAMP": (0, 4_102_444_800_000),
    "TIME": (0, _DAY_MS),
}
_UNITS = {"VARCHAR": " characters", "DATE": " days", "TIMESTAMP": " ms", "TIME": " ms"}
_BOUND_FORMS = {
    "VARCHAR": "an integer",
    "DATE": "an ISO date or days since 1970-01-01",
    "TIMESTAMP": "an ISO timestamp or milliseconds since 1970-01-01",
    "TIME": "an ISO time or milliseconds since midnight",
}


@dataclass(frozen=True)
class ColumnRecipe:
    """A column's resolved recipe. ``lo``/``hi`` are in the column's physical unit
    (the number; a string length; days; milliseconds). For ``increment`` values wrap
    within ``[lo, hi)``; ``hi=None`` means they only wrap at the type's width."""

    name: str
    type: SqlType
    strategy: str
    lo: int | float = 0
    hi: int | float | None = None
    scale: int = 1
    e: float = 1.0
    values: pa.Array | None = None
    null_fraction: float = 0.0


def compile_column(where: str, column: ColumnSpec, fs: FieldSettings) -> ColumnRecipe:
    """Resolve ``fs`` for ``column``; raise ``ValueError`` naming the field when the
    settings do not fit the column type."""
    label = f"{where}: field {column.name!r} ({column.type})"
    if fs.null_percentage and not column.nullable:
        raise ValueError(f"{label} is NOT NULL but sets null_percentage {fs.null_percentage}")
    base = ColumnRecipe(
        name=column.name,
        type=column.type,
        strategy=fs.strategy,
        scale=fs.scale,
        e=fs.e,
        null_fraction=(fs.null_percentage or 0) / 100,
    )
    if fs.values is not None:
        values = _values_array(label, column, fs.values)
        if not column.nullable and (len(values) == 0 or values.null_count):
            raise ValueError(f"{label} is NOT NULL but its values produce NULLs")
        return dataclasses.replace(base, values=values)
    lo, hi = _bounds(label, column.type, fs)
    if fs.strategy == "zipf":
        assert hi is not None
        n = math.ceil(hi - lo)
        if n > MAX_ZIPF_VALUES:
            raise ValueError(
                f"{label}: zipf over {n} values is too many (at most {MAX_ZIPF_VALUES}); "
                f"set a smaller range or values"
            )
    return dataclasses.replace(base, lo=lo, hi=hi)


def _bounds(label: str, sql: SqlType, fs: FieldSettings) -> tuple[int | float, int | float | None]:
    """``(lo, hi)`` of ``fs`` for a column of type ``sql``, in its physical unit."""
    kind = sql.kind
    if kind == "BOOLEAN":
        return 0, 2  # Feldera ignores a boolean's range
    if fs.range is None:
        if fs.strategy == "zipf" and kind in FLOAT_KINDS:
            raise ValueError(f"{label}: zipf on {kind} needs a range or values")
        if fs.strategy != "increment" or kind == "TIME":  # TIME wraps at 24h
            return _DEFAULT_RANGES[kind]
        if kind == "DECIMAL":  # wrap before the value overflows the precision
            return 0, 10 ** _int_digits(sql)
        return 0, None  # integers, floats, dates, timestamps, strings count up from 0
    lo, hi = (_bound(label, sql, v) for v in fs.range)
    if lo >= hi:
        raise ValueError(f"{label}: range {list(fs.range)} is empty: a must be below b")
    if kind == "VARCHAR" and fs.strategy == "increment":
        return lo, None  # the numbers start at a and do not wrap
    if kind == "DECIMAL":
        _check_decimal_range(label, sql, lo, hi)
    else:
        low, high = _LIMITS[kind]
        if lo < low or hi > high or math.isinf(hi) or math.isinf(lo):
            unit = _UNITS.get(kind, "")
            raise ValueError(
                f"{label}: range {list(fs.range)} is outside the type's [{low}, {high}){unit}"
            )
    return lo, hi


def _bound(label: str, sql: SqlType, value: Any) -> int | float:
    """One range bound in the column's physical unit."""
    kind = sql.kind
    try:
        if isinstance(value, str) and kind in ("DATE", "TIMESTAMP", "TIME", "DECIMAL"):
            bound = _parse_bound(kind, value)
        elif isinstance(value, int) and not isinstance(value, bool):
            bound = float(value) if kind in FLOAT_KINDS else value
        elif isinstance(value, float) and kind in FLOAT_KINDS:
            bound = value
        else:
            bound = None
    except ValueError as e:
        raise ValueError(f"{label}: range bound {value!r}: {e}") from e
    except ArithmeticError as e:  # decimal.InvalidOperation
        raise ValueError(f"{label}: range bound {value!r} is not a decimal number") from e
    if bound is not None and math.isfinite(bound):
        return bound
    form = _BOUND_FORMS.get(kind, "a finite number" if kind in FLOAT_KINDS else "an integer")
    raise ValueError(f"{label}: range bound {value!r} must be {form}")


def _parse_bound(kind: str, text: str) -> int | float:
    if kind == "DECIMAL":
        return float(Decimal(text))
    if kind == "DATE":
        return (dt.date.fromisoformat(text) - _EPOCH_DATE).days
    if kind == "TIMESTAMP":
        delta = _naive_utc(dt.datetime.fromisoformat(text)) - _EPOCH
        return delta.days * _DAY_MS + delta.seconds * 1000 + delta.microseconds // 1000
    t = dt.time.fromisoformat(text)
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1000 + t.microsecond // 1000


def _int_digits(sql: SqlType) -> int:
    assert sql.precision is not None and sql.scale is not None
    return sql.precision - sql.scale


def _check_decimal_range(label: str, sql: SqlType, lo: float, hi: float) -> None:
    limit = 10 ** _int_digits(sql)
    if lo <= -limit or hi > limit:
        raise ValueError(f"{label}: range [{lo}, {hi}) is outside the type's (-{limit}, {limit})")
    # Values are rounded to the column scale: the range must hold one such value.
    unit = Decimal(10) ** -(sql.scale or 0)
    first = (Decimal(lo) / unit).to_integral_value(rounding="ROUND_CEILING")
    if first * unit >= Decimal(hi):
        raise ValueError(f"{label}: range [{lo}, {hi}) holds no value with {sql.scale} decimals")


def _values_array(label: str, column: ColumnSpec, values: list[Any]) -> pa.Array:
    """``values`` as an Arrow array of the column type (dates, timestamps and times may
    be ISO strings or integers, as in ranges)."""
    import pyarrow as pa

    try:
        return pa.array(
            [_python_value(column.type.kind, v) for v in values], type=column.type.arrow()
        )
    except (ValueError, TypeError, OverflowError, pa.ArrowException) as e:
        raise ValueError(f"{label}: values do not fit the column type: {e}") from e


def _python_value(kind: str, v: Any) -> Any:
    if v is None or isinstance(v, bool):
        return v
    if kind == "DECIMAL":
        return Decimal(str(v))
    if kind == "DATE" and isinstance(v, int):
        return _EPOCH_DATE + dt.timedelta(days=v)
    if kind == "DATE" and isinstance(v, str):
        return dt.date.fromisoformat(v)
    if kind == "TIMESTAMP" and isinstance(v, int):
        return _EPOCH + dt.timedelta(milliseconds=v)
    if kind == "TIMESTAMP" and isinstance(v, str):
        return _naive_utc(dt.datetime.fromisoformat(v))
    if kind == "TIME" and isinstance(v, int):
        if not 0 <= v < _DAY_MS:
            raise ValueError(f"time {v} ms is not within 24 hours")
        return (_EPOCH + dt.timedelta(milliseconds=v)).time()
    if kind == "TIME" and isinstance(v, str):
        return dt.time.fromisoformat(v)
    return v


def _naive_utc(value: dt.datetime) -> dt.datetime:
    # Feldera's TIMESTAMP has no time zone; an offset in the config is converted to UTC.
    return value if value.tzinfo is None else value.astimezone(dt.UTC).replace(tzinfo=None)
