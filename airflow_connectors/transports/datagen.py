"""``datagen``: generated rows, with the config shape of Feldera's ``datagen`` transport.

A config is a list of plans that run one after another. Each plan generates ``limit``
rows (forever when unset), at most ``rate`` rows per second, with a strategy per column:
``increment``, ``uniform`` or ``zipf``, over a ``range`` or a list of ``values``, with an
optional share of NULLs.

A row is a pure function of (seed, plan, column, row index): values are generated in
aligned chunks of :data:`GEN_CHUNK_ROWS` rows, each chunk from its own random generator,
then sliced. Re-reading a work item after a failure, or splitting a plan into different
items, therefore yields the same rows, which is what makes a generated batch replayable.

Differences from Feldera: no ``seed`` means seed 0 (Feldera picks a random one, but a
replayed batch must regenerate the same rows); the string generators (``word``,
``email``...) and nested types are not supported; ``workers`` and ``transaction_size``
are accepted and ignored (Spark tasks parallelise reading, batches are transactions).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.types import SqlType
from airflow_connectors.transports.base import Cursor, Limits, Transport, WorkItem

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from airflow_connectors.spec.models import ColumnSpec, TableSpec

#: Rows per generation chunk. Part of the determinism contract: changing it changes the
#: random values a seed produces.
GEN_CHUNK_ROWS = 10_000
#: Rows per work item when a plan sets no ``worker_chunk_size``.
DEFAULT_ITEM_ROWS = 100_000
#: Rows per discovery of a plan that nothing else bounds (no limit, rate or max_records).
UNBOUNDED_DISCOVERY_ROWS = 1_000_000
#: Largest zipf domain: its cumulative weights are held in memory (8 bytes per value).
MAX_ZIPF_VALUES = 50_000_000
#: Longest generated string; keeps a chunk's characters well inside Arrow's 2 GiB limit.
MAX_STRING_LENGTH = 100_000

_KEY = re.compile(r"^plan-(\d{4,})$")


# --- configuration -------------------------------------------------------------------


class FieldSettings(StrictConfig):
    """How one column is generated (Feldera's ``RngFieldSettings``).

    ``range`` is half-open ``[a, b)``: numbers for numeric columns, lengths for VARCHAR
    (``uniform``/``zipf``; ``increment`` starts its numbers at ``a``), days or ISO dates
    for DATE, milliseconds or ISO timestamps for TIMESTAMP, milliseconds since midnight or
    ISO times for TIME; ignored for BOOLEAN. ``values`` overrides ``range``; ``[]`` gives
    NULLs. ``scale`` is the step of ``increment`` and ``uniform``; ``e`` is the zipf
    exponent.
    """

    strategy: Literal["increment", "uniform", "zipf"] = Field(
        default="increment",
        description="How values are drawn: 'increment' counts up from the start of "
        "`range` by `scale` per row (wrapping at its end), 'uniform' picks uniformly "
        "at random, 'zipf' favours small values (exponent `e`).",
    )
    range: tuple[Any, Any] | None = Field(
        default=None,
        description="Half-open [a, b): numbers for numeric columns, string lengths for "
        "VARCHAR, days or ISO dates for DATE, milliseconds or ISO timestamps for "
        "TIMESTAMP, milliseconds since midnight or ISO times for TIME; ignored for "
        "BOOLEAN. Unset: 'increment' counts up from 0 (from midnight for TIME); "
        "'uniform' and 'zipf' use the type's full width for integers, [0, 1) for floats "
        "and decimals (zipf on them needs a range), lengths 0-24 for strings, "
        "1970-01-01 to 2100-01-01 for dates and timestamps, the whole day for TIME.",
    )
    values: list[Any] | None = Field(
        default=None,
        description="Values to draw from instead of `range` (in turn for 'increment', "
        "at random for 'uniform' and 'zipf'); [] makes every value NULL.",
    )
    null_percentage: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="Percentage (1-100) of rows where the column is NULL, at random; "
        "unset: none. Only for nullable columns.",
    )
    scale: int = Field(
        default=1,
        ge=1,
        description="Step between values: 'increment' adds it per row (seconds for "
        "TIME), 'uniform' draws multiples of it from the start of `range`.",
    )
    e: float = Field(
        default=1.0,
        ge=0,
        description="Zipf exponent: the k-th value has weight 1/k^e; 0 is uniform, "
        "larger values concentrate on the first values.",
    )

    @field_validator("range")
    @classmethod
    def _non_empty(cls, value: tuple[Any, Any] | None) -> tuple[Any, Any] | None:
        # Numbers are checked here; ISO strings once the transport knows the column type.
        if value is not None and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value
        ):
            a, b = value
            if a >= b:
                raise ValueError(f"range [{a!r}, {b!r}) is empty: a must be below b")
        return value


class GenerationPlan(StrictConfig):
    """A stretch of rows: ``limit`` rows (unbounded when unset), at most ``rate`` rows
    per second, split into work items of ``worker_chunk_size`` rows."""

    rate: int | None = Field(
        default=None,
        gt=0,
        description="Most rows per second, counted from the connector's first discovery "
        "(each run generates what the elapsed time allows, at least one second's worth); "
        "unset: as fast as the runs go.",
    )
    limit: int | None = Field(
        default=None,
        ge=0,
        description="Rows this plan generates before the next plan starts; unset: "
        "unlimited (the connector never reaches end of input and later plans never run).",
    )
    worker_chunk_size: int | None = Field(
        default=None,
        gt=0,
        description=f"Rows per work item, i.e. per Spark task; unset: {DEFAULT_ITEM_ROWS:,}.",
    )
    fields: dict[str, FieldSettings] = Field(
        default_factory=dict,
        description="Per-column generation settings by column name (strategy, range, "
        "values, null_percentage, scale, e); a column not named counts up from 0 "
        "('increment').",
    )


class DatagenConfig(StrictConfig):
    """Feldera's ``DatagenInputConfig``: plans run in order; ``seed`` fixes the values."""

    plan: list[GenerationPlan] = Field(
        default_factory=lambda: [GenerationPlan()],
        description="Generation plans, run one after another: each generates `limit` "
        "rows (unlimited when unset) at most `rate` rows per second, with per-column "
        "settings in `fields`. Default: one unlimited plan of incrementing values.",
    )
    seed: int | None = Field(
        default=None,
        ge=0,
        description="Seed of the random values: the same seed and plans always generate "
        "the same rows. Unset: 0 (Feldera picks a random seed; here a replayed batch must "
        "regenerate the same rows).",
    )
    workers: int = Field(
        default=1,
        ge=1,
        description="Accepted for Feldera compatibility and ignored: Spark tasks "
        "parallelise generation (see `worker_chunk_size`).",
    )
    transaction_size: int | None = Field(
        default=None,
        gt=0,
        description="Accepted for Feldera compatibility and ignored: each batch is "
        "committed as one transaction.",
    )


# --- per-column recipes, checked against the column type -----------------------------

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_DAY_MS = 86_400_000
_FLOAT32_MAX = 3.4028234663852886e38
_FLOATS = ("REAL", "DOUBLE", "DECIMAL")
_INT_BITS = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64}
# Inclusive bounds a range may use, in the column's physical unit. Dates and timestamps
# stay within years 1..9999 so every value converts to Python.
_LIMITS: dict[str, tuple[int | float, int | float]] = {
    **{k: (-(2 ** (b - 1)), 2 ** (b - 1)) for k, b in _INT_BITS.items()},
    "REAL": (-_FLOAT32_MAX, _FLOAT32_MAX),
    "DOUBLE": (-math.inf, math.inf),
    "VARCHAR": (0, MAX_STRING_LENGTH + 1),
    "DATE": (-719_162, 2_932_897),
    "TIMESTAMP": (-62_135_596_800_000, 253_402_300_800_000),
    "TIME": (0, _DAY_MS),
}
# Feldera's defaults for uniform and zipf: 1970-01-01 .. 2100-01-01, strings of 0..24.
_DEFAULT_RANGES: dict[str, tuple[int | float, int | float]] = {
    **{k: (-(2 ** (b - 1)), 2 ** (b - 1)) for k, b in _INT_BITS.items()},
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
class _Column:
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


def _compile_column(where: str, column: ColumnSpec, fs: FieldSettings) -> _Column:
    """Resolve ``fs`` for ``column``; raise ``ValueError`` naming the field when the
    settings do not fit the column type."""
    label = f"{where}: field {column.name!r} ({column.type})"
    if fs.null_percentage and not column.nullable:
        raise ValueError(f"{label} is NOT NULL but sets null_percentage {fs.null_percentage}")
    base = _Column(
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
        if fs.strategy == "zipf" and kind in _FLOATS:
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
            bound = float(value) if kind in _FLOATS else value
        elif isinstance(value, float) and kind in _FLOATS:
            bound = value
        else:
            bound = None
    except ValueError as e:
        raise ValueError(f"{label}: range bound {value!r}: {e}") from e
    except ArithmeticError as e:  # decimal.InvalidOperation
        raise ValueError(f"{label}: range bound {value!r} is not a decimal number") from e
    if bound is not None and math.isfinite(bound):
        return bound
    form = _BOUND_FORMS.get(kind, "a finite number" if kind in _FLOATS else "an integer")
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


# --- generation: one aligned chunk of one column -------------------------------------


def _generate(col: _Column, first_row: int, rng: np.random.Generator) -> pa.Array:
    """Values of rows ``first_row .. first_row + GEN_CHUNK_ROWS`` of ``col``. Values are
    drawn before the NULL mask, both from ``rng``, so the result depends on nothing else."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if col.values is not None:
        arr = _pick_values(col, first_row, rng)
    elif col.type.kind in _FLOATS:
        arr = _floats(col, first_row, rng)
    elif col.type.kind == "VARCHAR":
        numbers = _integers(col, first_row, rng)
        arr = (
            pa.array(numbers).cast(pa.string())
            if col.strategy == "increment"
            else _random_strings(numbers, rng)
        )
    else:
        arr = _integers_to_arrow(col.type, _integers(col, first_row, rng))
    if col.null_fraction:
        nulls = rng.random(GEN_CHUNK_ROWS) < col.null_fraction
        arr = pc.if_else(pa.array(nulls), pa.scalar(None, arr.type), arr)
    return arr


def _integers(col: _Column, first_row: int, rng: np.random.Generator) -> np.ndarray:
    """Integer-valued columns (and string lengths) in their physical unit, as int64."""
    import numpy as np

    lo = int(col.lo)
    if col.strategy == "increment":
        # TIME counts seconds (its range is in milliseconds, as in Feldera).
        step = col.scale * (1000 if col.type.kind == "TIME" else 1)
        if col.hi is None:
            return _wrapping_progression(first_row, step, lo)
        return _modular_progression(first_row, step, lo, int(col.hi) - lo)
    assert col.hi is not None
    span = int(col.hi) - lo
    if col.strategy == "uniform":
        # k * scale < span, so the uint64 arithmetic below is exact modulo 2**64 and the
        # result, which lies in [lo, hi), is recovered by viewing it as int64.
        k = rng.integers(0, -(-span // col.scale), size=GEN_CHUNK_ROWS, dtype=np.uint64)
        return (k * np.uint64(col.scale) + np.uint64(lo % 2**64)).view(np.int64)
    return lo + _zipf_indexes(span, col.e, rng)


def _wrapping_progression(first_row: int, step: int, lo: int) -> np.ndarray:
    """``lo + row * step`` modulo 2**64 (then cast to the column type, which wraps too)."""
    import numpy as np

    rows = np.arange(first_row, first_row + GEN_CHUNK_ROWS, dtype=np.uint64)
    return (rows * np.uint64(step % 2**64) + np.uint64(lo % 2**64)).view(np.int64)


def _modular_progression(first_row: int, step: int, lo: int, span: int) -> np.ndarray:
    """``lo + (row * step) mod span``, exact for any span up to 2**64."""
    import numpy as np

    base, s = (first_row * step) % span, step % span
    if span + s * GEN_CHUNK_ROWS < 2**63:  # base + j * s cannot overflow int64
        j = np.arange(GEN_CHUNK_ROWS, dtype=np.int64)
        return (base + j * s) % span + lo
    # Huge steps over huge spans (rare): exact Python integers, still one chunk at a time.
    exact = (lo + (base + j * s) % span for j in range(GEN_CHUNK_ROWS))
    return np.fromiter(exact, dtype=np.int64, count=GEN_CHUNK_ROWS)


def _integers_to_arrow(sql: SqlType, values: np.ndarray) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    kind = sql.kind
    if kind in _INT_BITS:
        return pa.array(values.astype(f"int{_INT_BITS[kind]}"))  # wraps like the SQL type
    if kind == "BOOLEAN":
        return pa.array(values.astype(np.bool_))
    if kind == "DATE":
        return pa.array(values.astype(np.int32)).cast(pa.date32())
    # TIMESTAMP and TIME are generated in milliseconds and stored in microseconds.
    return pa.array(values * 1000).cast(sql.arrow())


def _floats(col: _Column, first_row: int, rng: np.random.Generator) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    lo = float(col.lo)
    if col.strategy == "increment":
        x = np.arange(first_row, first_row + GEN_CHUNK_ROWS, dtype=np.float64) * col.scale
        x = lo + (np.fmod(x, col.hi - lo) if col.hi is not None else x)
    elif col.strategy == "uniform":
        assert col.hi is not None
        x = lo + rng.random(GEN_CHUNK_ROWS) * (col.hi - lo)
    else:
        assert col.hi is not None
        x = lo + _zipf_indexes(math.ceil(col.hi - lo), col.e, rng)
    sql = col.type
    if sql.kind == "DECIMAL":
        digits = sql.scale or 0
        x = np.round(x, digits)
        if col.hi is not None:  # rounding may step one unit outside [lo, hi)
            unit = 10.0**-digits
            x = np.where(x >= col.hi, x - unit, x)
            x = np.where(x < lo, x + unit, x)
        return pa.array(x).cast(sql.arrow())
    x = x.astype(np.float32 if sql.kind == "REAL" else np.float64)
    if col.hi is not None:  # float rounding may land on hi (or, for REAL, below lo)
        x = np.clip(x, *_representable_inside(x.dtype.type, lo, col.hi))
    return pa.array(x)


def _representable_inside(dtype: Any, lo: float, hi: float) -> tuple[Any, Any]:
    """The smallest value >= lo and the largest value < hi representable in ``dtype``."""
    import numpy as np

    low, high = dtype(lo), dtype(hi)
    if low < lo:
        low = np.nextafter(low, dtype(np.inf))
    if high >= hi:
        high = np.nextafter(high, dtype(-np.inf))
    return low, high


def _random_strings(lengths: np.ndarray, rng: np.random.Generator) -> pa.Array:
    """Strings of random lowercase letters, built straight into Arrow buffers."""
    import numpy as np
    import pyarrow as pa

    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    chars = rng.integers(ord("a"), ord("z") + 1, size=int(offsets[-1]), dtype=np.uint8)
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(chars)]
    return pa.Array.from_buffers(pa.string(), len(lengths), buffers)


def _pick_values(col: _Column, first_row: int, rng: np.random.Generator) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    assert col.values is not None
    n = len(col.values)
    if n == 0:  # Feldera: an empty list produces NULLs
        return pa.nulls(GEN_CHUNK_ROWS, col.values.type)
    if col.strategy == "increment":
        index = np.arange(first_row, first_row + GEN_CHUNK_ROWS, dtype=np.int64) % n
    elif col.strategy == "uniform":
        index = rng.integers(0, n, size=GEN_CHUNK_ROWS, dtype=np.int64)
    else:
        index = _zipf_indexes(n, col.e, rng)
    return col.values.take(pa.array(index))


def _zipf_indexes(n: int, e: float, rng: np.random.Generator) -> np.ndarray:
    """Bounded zipf: k in 0..n-1 with P(k) proportional to 1/(k+1)**e, by inverse CDF."""
    import numpy as np

    cdf = _zipf_cdf(n, e)
    return np.searchsorted(cdf, rng.random(GEN_CHUNK_ROWS), side="right").astype(np.int64)


@functools.lru_cache(maxsize=8)
def _zipf_cdf(n: int, e: float) -> np.ndarray:
    import numpy as np

    cdf = np.cumsum(np.arange(1, n + 1, dtype=np.float64) ** -e)
    cdf /= cdf[-1]  # the last entry is exactly 1.0, so every u in [0, 1) maps below n
    cdf.setflags(write=False)  # shared by the cache
    return cdf


# --- the transport --------------------------------------------------------------------


def plan_key(plan: int) -> str:
    """The work-item key of plan ``plan``; keys sort in plan order."""
    return f"plan-{plan:04d}"


class DatagenTransport(Transport):
    """Generates rows with Feldera's ``datagen`` plans. Integrated: ``read`` yields
    record batches in the table's schema, so no format is needed.

    Work items are row ranges of one plan (key ``plan-NNNN``, ``start``/``end`` row
    indexes within the plan). Plans run in order: discovery never starts a plan while an
    earlier one has rows in flight or not yet generated, and an unlimited plan blocks
    every later plan.
    """

    name = "datagen"
    Config = DatagenConfig
    config: DatagenConfig
    needs_format = False

    def __init__(self, config: StrictConfig, table: TableSpec) -> None:
        if not isinstance(config, DatagenConfig):
            raise TypeError(f"datagen needs a DatagenConfig, got {type(config).__name__}")
        super().__init__(config, table)
        self._columns = self.compile(config, table)

    @classmethod
    def compile(cls, config: DatagenConfig, table: TableSpec) -> list[list[_Column]]:
        """Check ``config`` against ``table``: every field must be a column and fit its
        type. Returns each plan's per-column recipes, in table column order."""
        plans = []
        for p, plan in enumerate(config.plan):
            where = f"datagen plan {p}"
            for field in plan.fields:
                if field not in table.column_names:
                    raise ValueError(
                        f"{where}: field {field!r} is not a column of table {table.name!r}; "
                        f"its columns: {', '.join(table.column_names)}"
                    )
            default = FieldSettings()
            plans.append(
                [_compile_column(where, c, plan.fields.get(c.name, default)) for c in table.columns]
            )
        return plans

    @property
    def bounded(self) -> bool:
        return all(plan.limit is not None for plan in self.config.plan)

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        budget = limits.max_records  # rows left to hand out in this discovery
        items_left = limits.max_items
        # Rate schedule: plan p may start once the rated plans before it had time to run.
        start_at = limits.now if cursor.first_discovered_at is None else cursor.first_discovered_at
        for p, plan in enumerate(self.config.plan):
            key = plan_key(p)
            done = self._committed(cursor, p)
            finished = plan.limit is not None and done >= plan.limit
            if not finished:
                if key in cursor.in_flight:
                    return
                end = self._discoverable_end(plan, done, limits.now - start_at, budget)
                step = plan.worker_chunk_size or DEFAULT_ITEM_ROWS
                for start in range(done, end, step):
                    if items_left <= 0:
                        return
                    stop = min(start + step, end)
                    yield WorkItem(
                        key=key,
                        start=start,
                        end=stop,
                        records_done=start,
                        records=stop - start,
                        final=True,
                    )
                    items_left -= 1
                if budget is not None:
                    budget -= max(0, end - done)
                # The next plan may join this discovery only if this one ends in it.
                if plan.limit is None or end < plan.limit:
                    return
            if plan.rate and plan.limit is not None:
                start_at += plan.limit / plan.rate

    @staticmethod
    def _discoverable_end(
        plan: GenerationPlan, done: int, elapsed: float, budget: int | None
    ) -> int:
        """Row index (exclusive) up to which ``plan`` may be generated now."""
        end: float = math.inf if plan.limit is None else plan.limit
        if plan.rate is not None:
            # At least one second's worth, so the first discovery generates something.
            end = min(end, max(plan.rate, math.floor(plan.rate * elapsed)))
        if budget is not None:
            end = min(end, done + budget)
        if math.isinf(end):
            end = done + UNBOUNDED_DISCOVERY_ROWS
        return int(max(end, done))

    def exhausted(self, cursor: Cursor) -> bool:
        if not self.bounded:
            return False
        return all(
            self._committed(cursor, p) >= (plan.limit or 0)
            for p, plan in enumerate(self.config.plan)
        )

    @staticmethod
    def _committed(cursor: Cursor, plan: int) -> int:
        done = cursor.get(plan_key(plan))
        return 0 if done is None else done.offset

    def read(self, item: WorkItem) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow as pa

        p = self._plan_of(item)
        assert item.end is not None  # checked by _plan_of
        columns = self._columns[p]
        schema = self.table.arrow_schema()
        seed = self.config.seed or 0
        for chunk in range(item.start // GEN_CHUNK_ROWS, -(-item.end // GEN_CHUNK_ROWS)):
            first = chunk * GEN_CHUNK_ROWS
            arrays = [
                _generate(col, first, np.random.default_rng([seed, p, c, chunk]))
                for c, col in enumerate(columns)
            ]
            batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
            lo = max(item.start, first) - first
            hi = min(item.end, first + GEN_CHUNK_ROWS) - first
            yield batch.slice(lo, hi - lo)

    def _plan_of(self, item: WorkItem) -> int:
        match = _KEY.match(item.key)
        p = int(match.group(1)) if match else -1
        if not 0 <= p < len(self.config.plan):
            raise ValueError(f"datagen: work item key {item.key!r} names no plan of this config")
        limit = self.config.plan[p].limit
        if (
            item.end is None
            or not 0 <= item.start <= item.end
            or (limit is not None and item.end > limit)
        ):
            raise ValueError(f"datagen: rows [{item.start}, {item.end}) are outside plan {p}")
        return p

    def describe(self) -> str:
        plans = self.config.plan
        parts = [f"{len(plans)} plan{'' if len(plans) == 1 else 's'}"]
        if self.bounded:
            parts.append(f"limit {sum(plan.limit or 0 for plan in plans)}")
        else:
            parts.append("unlimited")
        rates = [str(plan.rate) for plan in plans if plan.rate]
        if rates:
            parts.append(f"rate {'/'.join(rates)} rows/s")
        parts.append(f"seed {self.config.seed or 0}")
        return f"datagen: {', '.join(parts)}"
