"""The format contract: bytes of one work item -> Arrow tables in the table's schema.

A format decodes in bulk with pyarrow. When a block fails, it splits the block into its
records (as the format defines them: a CSV record may span lines inside quotes, a JSON
record may be pretty-printed) and bisects them to find the bad ones, so good records
still land and each bad record is reported with its record number, the line it starts
on and its raw text (the slow path runs only where errors are). Values become column
values by one rule for every format: see :mod:`._conform`. What becomes of fields the
table lacks follows the table's ``schema_evolution`` (:class:`._conform.Evolution`).

Record numbers count records, 1-based within the object, including those committed by
earlier batches (``first_record``); blank lines and a CSV header are not records. Line
numbers count physical lines, 1-based within the object, and say where a record starts
(so a dead letter can be found in an editor); a line number is unknown (``None``) when
the read did not start at the beginning of the object (the appended part of a followed
file, a resumed download) and the caller did not pass ``first_line``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from airflow_connectors.formats._conform import (
    Evolution,
    NewFields,
    RowError,
    conform,
    conform_evolving,
)
from airflow_connectors.spec.config import StrictConfig

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.formats.inference import InferredFields
    from airflow_connectors.spec.models import TableSpec

__all__ = [
    "Decoded",
    "Evolution",
    "Format",
    "NewFields",
    "NotText",
    "RecordError",
    "RowError",
    "buffered",
    "clip",
    "conform",
    "conform_evolving",
    "isolate",
    "text_start",
]

T = TypeVar("T")
MAX_RAW_TEXT = 8192
DEFAULT_BLOCK_BYTES = 32 << 20
BOM = b"\xef\xbb\xbf"
#: How much of an object's start is looked at to tell text from binary data.
HEAD_BYTES = 8192


@dataclass(frozen=True)
class RecordError:
    """A record that could not be turned into a row of the table."""

    record: int  # 1-based within the object (counting records committed earlier)
    error: str
    raw: str
    #: 1-based line of the object where the record starts (line-oriented formats);
    #: None for Parquet, or when the read did not start at the object's first line.
    line: int | None = None


@dataclass
class Decoded:
    """One decoded block: good rows, bad records, and how far the input was consumed."""

    table: pa.Table
    errors: list[RecordError] = field(default_factory=list)
    records: int = 0  # records seen in the block, good and bad
    consumed: int = 0  # bytes of the input consumed so far (cumulative)
    #: ``\n`` bytes in what this block consumed, when the format counted them anyway
    #: (its line numbers): the reader then need not count every byte again.
    newlines: int | None = None


class Format(ABC):
    """Turns a transport's bytes into Arrow tables with the table's columns."""

    name: ClassVar[str]
    Config: ClassVar[type[StrictConfig]]
    #: The format's data names and types its columns: a table whose connectors all read
    #: such formats may leave ``columns`` out; they are inferred on first discovery
    #: through :meth:`infer_fields`.
    infers_schema: ClassVar[bool] = False
    #: Inference reads whole objects (the schema is in a footer): an object beyond the
    #: sample's byte bound is not read. Otherwise its first bytes are enough.
    infers_from_whole_objects: ClassVar[bool] = False
    #: The format's values are text (CSV): a field seen with values of different kinds
    #: is inferred as VARCHAR instead of being a conflict.
    infers_text_values: ClassVar[bool] = False

    def __init__(self, config: StrictConfig, table: TableSpec) -> None:
        self.config = config
        self.table = table
        #: What the table's ``schema_evolution`` does with fields it lacks (see
        #: :class:`Evolution`); ``evolution.take()`` gives the new fields met.
        self.evolution = Evolution(table.evolution)

    @classmethod
    def check_table(cls, config: StrictConfig, table: TableSpec) -> None:
        """Raise ``ValueError`` (one line naming the table and what to do) when ``table``
        cannot take this format's values under ``config``. Run when a spec is loaded,
        without importing pyarrow; by default every table can."""
        return None

    @classmethod
    def inference_problem(cls, config: Mapping[str, Any]) -> tuple[str, str] | None:
        """Why a table without columns cannot infer them from this format although it
        :attr:`infers_schema`, under ``config`` as the spec writes it (not validated
        yet): ``(config field, reason and remedy)``, e.g. CSV without a header; None
        when it can. Run when a spec is loaded, without importing pyarrow."""
        return None

    @classmethod
    def infer_fields(
        cls, config: StrictConfig, data: bytes, key: str, fields: InferredFields
    ) -> None:
        """Add to ``fields`` the fields that object ``key`` holds, in order of first
        appearance, with their SQL types (:meth:`InferredFields.add`, ``add_arrow``,
        ``add_string``). ``data`` is the object, or its first bytes when the sample's
        byte bound cut it (leave out a record cut at the end). Raise
        :class:`~airflow_connectors.formats.inference.SchemaInferenceError` (one line:
        ``fields.where``, the object, what to do) when the object cannot be read for
        its schema. Called only when :attr:`infers_schema`."""
        raise NotImplementedError(f"format {cls.name!r} does not infer columns")

    @property
    def line_oriented(self) -> bool:
        """True when records are lines: reading may start at a byte offset and a
        followed file's appended lines can be read later."""
        return False

    @abstractmethod
    def decode(
        self,
        chunks: Iterator[bytes],
        *,
        final: bool,
        first_record: int,
        at_start: bool,
        first_line: int | None = None,
    ) -> Iterator[Decoded]:
        """Decode ``chunks``. ``final``: the bytes end where the object ends (a trailing
        record without newline is a record); otherwise a partial last record is left
        unconsumed. ``first_record``: number of the first record (1-based).
        ``at_start``: the bytes start at the beginning of the object (headers).
        ``first_line``: the line the bytes start on, when known; default 1 when
        ``at_start``, else line numbers are unknown (None)."""


# --- helpers shared by formats ---------------------------------------------------------


def read_block_size(n: int) -> int:
    """pyarrow's reader block for a block of ``n`` bytes: a quarter of it (at least 1
    MiB), read on pyarrow's threads, so a Spark task alone on its cores uses them all
    (a batch's last wave: 5 tasks on 2 cores left one idle for a fifth of the batch);
    where every core runs a task, the parts cost next to nothing more."""
    return max(n // 4, 1 << 20)


def count_newlines(data: bytes, start: int = 0, end: int | None = None) -> int:
    """``data[start:end].count(b"\\n")``, vectorised for large spans (numpy counts about
    5x faster than ``bytes.count``, which a block's line numbers paid per byte)."""
    end = len(data) if end is None else min(end, len(data))
    if end - start < 1 << 14:
        return data.count(b"\n", start, end)
    import numpy as np

    # Over windows that stay in the CPU's cache: a comparison of the whole span at once
    # allocated (and faulted in) a temporary as large as the span.
    window = 1 << 18
    span = np.frombuffer(data, np.uint8, end - start, start)
    return sum(
        int(np.count_nonzero(span[at : at + window] == 10)) for at in range(0, len(span), window)
    )


def clip(raw: bytes | str) -> str:
    """The raw text of a record for a dead letter; bytes that are not UTF-8 are escaped
    (``\\xff``), so the dead letter shows exactly what the source held."""
    text = raw.decode("utf-8", errors="backslashreplace") if isinstance(raw, bytes) else raw
    return text if len(text) <= MAX_RAW_TEXT else text[:MAX_RAW_TEXT] + "..."


def buffered(
    chunks: Iterator[bytes],
    step: Callable[[bytes, bool], tuple[Decoded | None, int]],
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
) -> Iterator[Decoded]:
    """Run ``step`` over the bytes of ``chunks`` in blocks of about ``block_bytes``.

    ``step(buf, at_end)`` decodes a prefix of ``buf`` (``buf`` starts where a record
    starts) and returns it with the number of bytes it used; 0 means it needs more bytes
    (the last record may go on). ``at_end``: no bytes follow ``buf`` in this read.
    Bytes a step leaves are offered again with the following ones; bytes still left at
    the end are not consumed. Sets each block's cumulative ``consumed``."""
    # The chunks not decoded yet, joined once when a block is due (one copy: a growing
    # bytearray copied every byte two or three times, a seventh of a JSON block's CPU).
    pending: list[bytes] = []
    size = 0
    consumed = 0
    want = block_bytes

    def drain(at_end: bool) -> Iterator[Decoded]:
        nonlocal consumed, want, size
        while size and (at_end or size >= want):
            buf = pending[0] if len(pending) == 1 else b"".join(pending)
            out, used = step(buf, at_end)
            if not used or out is None:
                pending[:] = [buf]
                want = size + block_bytes  # one record longer than a block
                return
            consumed += used
            rest = buf[used:]
            pending[:] = [rest] if rest else []
            size = len(rest)
            want = block_bytes
            out.consumed = consumed
            yield out

    for chunk in chunks:
        if chunk:
            pending.append(bytes(chunk))
            size += len(chunk)
        yield from drain(False)
    yield from drain(True)


class NotText(ValueError):
    """The object is not UTF-8 text (compressed, binary or UTF-16): an error about the
    whole object, not about records (a text format would otherwise cut it at its
    newline bytes into records that never existed)."""


_MAGIC = (
    (b"\x1f\x8b", "gzip-compressed data (decompress it first)"),
    (b"PK\x03\x04", "a ZIP archive (extract it first)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data (decompress it first)"),
    (b"\xfd7zXZ\x00", "xz-compressed data (decompress it first)"),
    (b"\xff\xfe", "UTF-16 or UTF-32 text (a byte order mark); save it as UTF-8"),
    (b"\xfe\xff", "UTF-16 text (a byte order mark); save it as UTF-8"),
)


def check_text(head: bytes, fmt: str, *, complete: bool) -> None:
    """Raise :class:`NotText` when ``head``, the first bytes of an object, is not UTF-8
    text: a compression or UTF-16 signature, NUL bytes beside bytes that are not UTF-8
    (binary data), or NUL bytes in more than a quarter of it (UTF-16 without a byte
    order mark). A stray NUL or invalid byte in otherwise valid text stays a matter of
    its record. ``complete``: ``head`` is the whole object."""
    import codecs

    what = next((name for magic, name in _MAGIC if head.startswith(magic)), None)
    hint = ""
    nuls = head.count(b"\0")
    if what is None and nuls > 1:
        try:
            codecs.getincrementaldecoder("utf-8")().decode(head, final=complete)
            utf8 = True
        except UnicodeDecodeError:
            utf8 = False
        if not utf8 or (nuls >= 8 and nuls * 4 > len(head)):
            what = f"binary data (NUL bytes in its first {len(head)} bytes)"
            if head.startswith(b"PAR1"):
                hint = " (it starts like a Parquet file: format parquet?)"
    if what is not None:
        raise NotText(f"not UTF-8 text but {what}; the {fmt} format reads UTF-8 text{hint}")


def text_start(
    step: Callable[[bytes, bool], tuple[Decoded | None, int]],
    fmt: str,
    empty: Callable[[], pa.Table],
) -> Callable[[bytes, bool], tuple[Decoded | None, int]]:
    """Wrap a text format's :func:`buffered` step for a read that starts at the object's
    start: bytes that are not text are refused (:class:`NotText`) before any record is
    made of them, and a UTF-8 byte order mark is skipped (counted as consumed, so
    offsets stay byte offsets of the object) instead of sticking to the first record."""
    first = True

    def wrapped(buf: bytes, at_end: bool) -> tuple[Decoded | None, int]:
        nonlocal first
        if not first:
            return step(buf, at_end)
        if not at_end and len(buf) < len(BOM) and BOM.startswith(buf):
            return None, 0
        check_text(buf[:HEAD_BYTES], fmt, complete=at_end and len(buf) <= HEAD_BYTES)
        skip = len(BOM) if buf.startswith(BOM) else 0
        if skip and len(buf) == skip and at_end:
            first = False
            return Decoded(empty(), [], 0), skip
        out, used = step(buf[skip:], at_end)
        if not used or out is None:
            return out, 0
        first = False
        return out, used + skip

    return wrapped


def isolate(
    records: Sequence[T],
    decode: Callable[[Sequence[T]], pa.Table],
    first_record: int,
    raw_text: Callable[[T], str] = clip,  # type: ignore[assignment]
    lines: Sequence[int | None] | None = None,
) -> tuple[list[pa.Table], list[RecordError]]:
    """Decode ``records``; where that fails, bisect to find each bad record.
    ``lines[i]``: the line record ``i`` starts on.

    Costs O(bad * log n) decode calls, so clean input pays one call.
    """
    tables: list[pa.Table] = []
    errors: list[RecordError] = []

    def walk(lo: int, hi: int) -> None:
        try:
            tables.append(decode(records[lo:hi]))
        except NewFields:
            raise  # about the object, not a record: fails the batch
        except Exception as e:  # pyarrow raises ArrowInvalid, ValueError, TypeError...
            if hi - lo == 1:
                line = lines[lo] if lines is not None else None
                errors.append(
                    RecordError(first_record + lo, _message(e), raw_text(records[lo]), line)
                )
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
