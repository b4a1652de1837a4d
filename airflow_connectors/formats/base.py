"""The format contract: bytes of one work item -> Arrow tables in the table's schema.

A format decodes in bulk with pyarrow. When a block fails, it bisects the block's
records to find the bad ones, so good records still land and each bad record is reported
with its number and raw text (the slow path runs only where errors are).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, TypeVar

from airflow_connectors.transports.base import StrictConfig

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.spec.models import TableSpec

T = TypeVar("T")
MAX_RAW_TEXT = 8192
DEFAULT_BLOCK_BYTES = 32 << 20


@dataclass(frozen=True)
class RecordError:
    """A record that could not be turned into a row of the table."""

    record: int  # 1-based within the object (counting records committed earlier)
    error: str
    raw: str

    def to_json(self) -> dict[str, object]:
        return {"record": self.record, "error": self.error, "raw": self.raw}


@dataclass
class Decoded:
    """One decoded block: good rows, bad records, and how far the input was consumed."""

    table: pa.Table
    errors: list[RecordError] = field(default_factory=list)
    records: int = 0  # records seen in the block, good and bad
    consumed: int = 0  # bytes of the input consumed so far (cumulative)


class Format(ABC):
    """Turns a transport's bytes into Arrow tables with the table's columns."""

    name: ClassVar[str]
    Config: ClassVar[type[StrictConfig]]

    def __init__(self, config: StrictConfig, table: TableSpec) -> None:
        self.config = config
        self.table = table

    @property
    def line_oriented(self) -> bool:
        """True when records are lines: reading may start at a byte offset and a
        followed file's appended lines can be read later."""
        return False

    @abstractmethod
    def decode(
        self, chunks: Iterator[bytes], *, final: bool, first_record: int, at_start: bool
    ) -> Iterator[Decoded]:
        """Decode ``chunks``. ``final``: the bytes end where the object ends (a trailing
        line without newline is a record); otherwise a partial last line is left
        unconsumed. ``first_record``: number of the first record (1-based).
        ``at_start``: the bytes start at the beginning of the object (headers)."""


# --- helpers shared by formats ---------------------------------------------------------


def target_schema(table: TableSpec) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([pa.field(c.name, c.type.arrow(), nullable=c.nullable) for c in table.columns])


def clip(raw: bytes | str) -> str:
    """The raw text of a record for a dead letter; bytes that are not UTF-8 are escaped
    (``\\xff``), so the dead letter shows exactly what the source held."""
    text = raw.decode("utf-8", errors="backslashreplace") if isinstance(raw, bytes) else raw
    return text if len(text) <= MAX_RAW_TEXT else text[:MAX_RAW_TEXT] + "..."


def line_blocks(
    chunks: Iterator[bytes], *, final: bool, block_bytes: int = DEFAULT_BLOCK_BYTES
) -> Iterator[tuple[bytes, int]]:
    """Regroup chunks into blocks that end at a newline; yields (block, consumed bytes so
    far). When not ``final``, a trailing partial line is held back (not consumed)."""
    pending = bytearray()
    consumed = 0
    for chunk in chunks:
        pending += chunk
        if len(pending) >= block_bytes:
            cut = pending.rfind(b"\n") + 1
            if cut > 0:
                block = bytes(pending[:cut])
                del pending[:cut]
                consumed += len(block)
                yield block, consumed
    if pending:
        if final:
            consumed += len(pending)
            yield bytes(pending), consumed
        else:
            cut = pending.rfind(b"\n") + 1
            if cut > 0:
                consumed += cut
                yield bytes(pending[:cut]), consumed


def split_records(block: bytes) -> list[bytes]:
    """Non-blank lines of a block: one record each."""
    return [line for line in block.split(b"\n") if line.strip()]


def isolate(
    records: Sequence[T],
    decode: Callable[[Sequence[T]], pa.Table],
    first_record: int,
    raw_text: Callable[[T], str] = clip,  # type: ignore[assignment]
) -> tuple[list[pa.Table], list[RecordError]]:
    """Decode ``records``; where that fails, bisect to find each bad record.

    Costs O(bad * log n) decode calls, so clean input pays one call.
    """
    tables: list[pa.Table] = []
    errors: list[RecordError] = []

    def walk(lo: int, hi: int) -> None:
        try:
            tables.append(decode(records[lo:hi]))
        except Exception as e:  # pyarrow raises ArrowInvalid, ValueError, TypeError...
            if hi - lo == 1:
                errors.append(RecordError(first_record + lo, _message(e), raw_text(records[lo])))
            else:
                mid = (lo + hi) // 2
                walk(lo, mid)
                walk(mid, hi)

    if records:
        walk(0, len(records))
    return tables, errors


def _message(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text.removeprefix("JSON parse error: ")


class RowError(ValueError):
    """A value that does not fit its column (raised by :func:`conform`)."""


def conform(data: pa.Table, table: TableSpec, schema: pa.Schema) -> pa.Table:
    """Cast ``data`` to the table schema (columns in table order; missing columns NULL)
    and enforce NOT NULL. Raises :class:`RowError` naming the column when a value does
    not fit; callers isolate the record with :func:`isolate`."""
    import pyarrow as pa

    arrays = []
    n = data.num_rows
    names = set(data.column_names)
    for col, fld in zip(table.columns, schema, strict=True):
        if col.name in names:
            arr = data.column(col.name)
            if arr.type != fld.type:
                try:
                    arr = _cast(arr, fld.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                    raise RowError(f"column {col.name!r} ({col.type}): {_message(e)}") from e
        else:
            arr = pa.nulls(n, fld.type)
        if not col.nullable and arr.null_count:
            raise RowError(f"column {col.name!r} is NOT NULL but the record has no value for it")
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=schema)


def _cast(arr: pa.ChunkedArray, to: pa.DataType) -> pa.ChunkedArray:
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_time(to) and pa.types.is_string(arr.type):
        # Arrow cannot cast string -> time; go through a timestamp on 1970-01-01.
        ts = pc.cast(pc.binary_join_element_wise("1970-01-01T", arr, ""), pa.timestamp("us"))
        return pc.cast(pc.cast(ts, pa.int64()), to)
    return pc.cast(arr, to, safe=True)
