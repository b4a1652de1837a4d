"""Generation: the values of one aligned chunk of rows of one column, a pure function of
the column's recipe, the chunk and its random generator (seeded by seed, plan, column and
chunk), so a replayed work item regenerates the same rows."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from airflow_connectors.spec.types import SqlType
from airflow_connectors.transports.datagen.columns import FLOAT_KINDS, INT_BITS, ColumnRecipe

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

#: Rows per generation chunk. Part of the determinism contract: changing it changes the
#: random values a seed produces.
GEN_CHUNK_ROWS = 10_000


def generate_chunk(col: ColumnRecipe, first_row: int, rng: np.random.Generator) -> pa.Array:
    """Values of rows ``first_row .. first_row + GEN_CHUNK_ROWS`` of ``col``. Values are
    drawn before the NULL mask, both from ``rng``, so the result depends on nothing else."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if col.values is not None:
        arr = _pick_values(col, first_row, rng)
    elif col.type.kind in FLOAT_KINDS:
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


def _integers(col: ColumnRecipe, first_row: int, rng: np.random.Generator) -> np.ndarray:
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
    if kind in INT_BITS:
        return pa.array(values.astype(f"int{INT_BITS[kind]}"))  # wraps like the SQL type
    if kind == "BOOLEAN":
        return pa.array(values.astype(np.bool_))
    if kind == "DATE":
        return pa.array(values.astype(np.int32)).cast(pa.date32())
    # TIMESTAMP and TIME are generated in milliseconds and stored in microseconds.
    return pa.array(values * 1000).cast(sql.arrow())


def _floats(col: ColumnRecipe, first_row: int, rng: np.random.Generator) -> pa.Array:
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


def _pick_values(col: ColumnRecipe, first_row: int, rng: np.random.Generator) -> pa.Array:
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
