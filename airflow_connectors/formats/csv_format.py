"""``csv``: delimited text, columns by position (as in Feldera), decoded with pyarrow.

Records. A record ends at a line end (``\\n``, ``\\r\\n`` or ``\\r``) outside quotes. A
field that starts with the quote character may span lines; it ends at the next lone
quote (``""`` inside it is one quote), as in RFC 4180 and pyarrow. A quote anywhere
else in a field is an ordinary character. Empty lines are not records. Record numbers
count records (a multi-line record is one record, the header is none); a dead letter's
``line`` is the physical line of the object where its record starts.

A stray quote must not swallow the rows after it:

- A quote that is never closed before the end of the object makes one dead letter,
  ``unterminated quote``, from the start of its record to the end of the line where the
  quote opened; reading resumes on the next line, so the following rows land and are
  counted.
- A quoted value that spans lines is taken for a stray quote too when it does not look
  like a genuine multi-line value, which closes right before a delimiter or a line end
  and leaves the record with the table's number of columns: the record is cut at the
  end of its first line, one dead letter (``unbalanced quote``), and reading resumes on
  the next line. (A stray quote that another quote happens to close exactly like a
  genuine value is read as one, as by every CSV reader.)
- A quoted value that spans lines may run at most ``MAX_QUOTED_BYTES`` (1 MiB) past
  its line; an open quote longer than that is taken as unterminated. (A quoted value
  on one line is as long as its line: a line of any length is one record.) While a followed file may still grow, a quote
  left open at its end waits for more data (up to that limit) instead of becoming a
  dead letter.

Values follow the rule of :mod:`._conform`: fields are text parsed as their column's
type. An empty field, ``NULL`` or ``null`` (quoted or not) is NULL in a non-VARCHAR
column and text in a VARCHAR column, as in Feldera. Invalid UTF-8 is a parse error whose
dead letter shows the bytes escaped (``\\xff``).
"""

from __future__ import annotations

import bisect
import functools
import io
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from airflow_connectors.formats._changes import (
    OperationConfig,
    apply_operation_column,
    check_operation_column,
)
from airflow_connectors.formats._conform import mismatch, show
from airflow_connectors.formats.base import (
    DEFAULT_BLOCK_BYTES,
    Decoded,
    Format,
    RowError,
    buffered,
    clip,
    conform,
    count_newlines,
    isolate,
    text_start,
)
from airflow_connectors.formats.inference import InferredFields, SchemaInferenceError
from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.models import RESCUED_DATA

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.spec.models import ColumnSpec, TableSpec

MAX_QUOTED_BYTES = 1 << 20
_NULLS = ["", "NULL", "null"]
_TEXT_PARSED = ("DATE", "TIME", "TIMESTAMP")  # read as text, parsed by _conform


class CsvConfig(OperationConfig):
    """Feldera's CSV parser: fields by position, in the table's column order."""

    delimiter: str = Field(
        default=",",
        min_length=1,
        max_length=1,
        description="The one character between fields, e.g. ',' (the default), ';', '|' or a tab.",
    )
    headers: bool = Field(
        default=False,
        description="true: the first line of each file (object) is a header and is "
        "skipped. Fields are matched to columns by position either way, not by the "
        "header's names.",
    )
    quote: str = Field(
        default='"',
        min_length=1,
        max_length=1,
        description="The one character that encloses a field holding delimiters or line "
        "breaks; doubled inside such a field it stands for itself. Default: '\"'.",
    )
    operation_position: Literal["first", "last"] = Field(
        default="first",
        description="With operation_column: where the operation field is, before the "
        "table's columns ('first', as AWS DMS writes its Op field) or after them ('last').",
    )


@dataclass(frozen=True)
class _Record:
    start: int  # byte span of the record's text in its block, without the line end
    end: int
    line: int  # 1-based line of the block where the record starts
    error: str | None = None  # set when the record is malformed (a stray quote)


def count_lines(data: bytes, end: int | None = None) -> int:
    """Line ends in ``data[:end]`` (``\\n``, ``\\r\\n`` or a lone ``\\r``, as pyarrow
    splits lines)."""
    end = len(data) if end is None else end
    lines = count_newlines(data, 0, end)
    if data.find(b"\r", 0, end) < 0:  # (a find of one byte is a memchr: cheaper than a count)
        return lines
    return lines + data.count(b"\r", 0, end) - data.count(b"\r\n", 0, end)


class _Syntax:
    """Where records and quoted fields are, by pyarrow's CSV rules."""

    def __init__(self, delimiter: str, quote: str, columns: int) -> None:
        self.quote = quote.encode()
        self.delimiter = delimiter.encode()
        self.columns = columns
        parts = {"<q>": re.escape(self.quote), "<d>": re.escape(self.delimiter)}
        # A quoted field: a quote opens one only at the start of a field. Group "nl": a
        # line end inside it; group "close": its closing quote (none: open to the end).
        self.quoted = _compile(
            r"<q>(?:(?<=\A<q>)|(?<=[<d>\r\n]<q>))(?:[^<q>\r\n]|<q><q>)*+"
            r"(?:(?P<nl>[\r\n])(?:[^<q>]|<q><q>)*+)?(?:(?P<close><q>)|\Z)",
            parts,
        )
        fld = r"(?:<q>(?:[^<q>]|<q><q>)*+<q>[^<d>\r\n]*+|[^<q><d>\r\n][^<d>\r\n]*+)?"
        self.field = _compile(fld, parts)
        self.record = _compile(f"{fld}(?:<d>{fld})*+", parts)

    def quotes_in_place(self, block: bytes, window: int = 1 << 18) -> bool:
        """Whether every quote of ``block`` (which starts at a record start) is where a
        well-formed quoted field puts it: a quote that opens one (odd-numbered) follows a
        delimiter, a line end, another quote or the block's start, and one that closes
        it (even-numbered) is followed by a delimiter, a line end, another quote (a
        doubled quote) or the block's end. Otherwise a quote is stray, or a quoted field
        has text after its closing quote, which pyarrow keeps without the quotes: then
        the records must be split. Vectorised, over windows of ``window`` bytes that
        stay in the CPU's cache (the count of quotes so far says whether a window's
        first quote opens or closes a field)."""
        import numpy as np

        data = np.frombuffer(block, np.uint8)
        n, odd, fine = len(data), 0, self._fine
        for start in range(0, n, window):
            quotes = np.flatnonzero(data[start : start + window] == self.quote[0])
            if not len(quotes):
                continue
            quotes += start
            opening, closing = quotes[odd::2], quotes[1 - odd :: 2]
            odd = (odd + len(quotes)) % 2
            if not fine[data[opening[opening > 0] - 1]].all():
                return False
            if not fine[data[closing[closing < n - 1] + 1]].all():
                return False
        return True

    @functools.cached_property
    def _fine(self) -> Any:
        """Which bytes may stand beside a quote (a lookup table by byte value)."""
        import numpy as np

        fine = np.zeros(256, dtype=bool)
        fine[list(self.delimiter + self.quote + b"\r\n")] = True
        return fine

    def cut(self, buf: bytes, *, end_of_object: bool) -> tuple[int, bool]:
        """How much of ``buf`` to decode now (up to the last record boundary), and
        whether that part may hold a stray quote, which pyarrow would read across lines
        without complaint: then it must be split by :meth:`split`."""
        if self.quote not in buf:
            return (len(buf) if end_of_object else buf.rfind(b"\n") + 1), False
        spans: list[tuple[int, int]] = []
        stray = False
        for m in self.quoted.finditer(buf):
            spans.append((m.start(), m.end()))
            if m["close"] and not self._closes_field(buf, m.end()):
                stray = True
        if spans and not m["close"]:  # only the last one can be open (it ends at \Z)
            opened = spans[-1][0]
            eol, after = _line_end(buf, opened)
            # Open over more than MAX_QUOTED_BYTES *across lines*: a quoted value on a
            # line whose end has not come yet is a long line, however long.
            if end_of_object or (eol < len(buf) and len(buf) - opened > MAX_QUOTED_BYTES):
                return after, True
            # It may close in bytes still to come: stop before its record.
            return self._boundary_before(buf, opened, spans), stray
        if end_of_object:
            return len(buf), stray
        return self._boundary_before(buf, len(buf), spans), stray

    def _closes_field(self, data: bytes, pos: int) -> bool:
        """Whether a closing quote just before ``pos`` ends its field, as a genuine
        quoted value's does."""
        return data[pos : pos + 1] in (self.delimiter, b"\r", b"\n", b"")

    @staticmethod
    def _boundary_before(buf: bytes, pos: int, spans: list[tuple[int, int]]) -> int:
        """Just after the last newline before ``pos`` that is outside quoted fields."""
        starts = [s for s, _ in spans]
        while True:
            nl = buf.rfind(b"\n", 0, pos)
            if nl < 0:
                return 0
            i = bisect.bisect_right(starts, nl) - 1
            if i >= 0 and spans[i][1] > nl:  # inside a quoted value
                pos = spans[i][0]
                continue
            return nl + 1

    def split(self, block: bytes) -> list[_Record]:
        """The records of ``block`` (which starts at a record start)."""
        records: list[_Record] = []
        pos, line, n = 0, 1, len(block)
        while pos < n:
            end = self.record.match(block, pos).end()  # type: ignore[union-attr]
            if block[end : end + 1] == self.quote:  # a quote that never closes
                eol, after = _line_end(block, end)
                records.append(_Record(pos, eol, line, _UNTERMINATED))
                line += count_lines(block[pos:after])
                pos = after
                continue
            after = end + (2 if block[end : end + 2] == b"\r\n" else 1 if end < n else 0)
            inner = count_lines(block[pos:end])  # line ends inside quoted values
            if pos == end:  # an empty line
                pass
            elif inner and (why := self._stray(block[pos:end])):
                eol, after = _line_end(block, pos)
                records.append(_Record(pos, eol, line, _UNBALANCED.format(lines=inner, why=why)))
                line += 1
                pos = after
                continue
            elif self.quote in block[pos:end] and self._text_after(block[pos:end]):
                records.append(_Record(pos, end, line, _TEXT_AFTER_QUOTE))
            else:
                records.append(_Record(pos, end, line))
            line += inner + (1 if after > end else 0)
            pos = after
        return records

    def _text_after(self, record: bytes) -> bool:
        """Whether a quoted field of a one-line record has text after its closing quote."""
        return any(
            m["close"] and not self._closes_field(record, m.end())
            for m in self.quoted.finditer(record)
        )

    def _stray(self, record: bytes) -> str | None:
        """Why a record whose quoted value spans lines looks like a stray quote (a genuine
        multi-line value closes right before a delimiter or line end and leaves the
        table's number of columns), or None."""
        for m in self.quoted.finditer(record):
            if m["nl"] and not self._closes_field(record, m.end()):
                return "has text after its closing quote"
        found = self.quoted.sub(b"", record).count(self.delimiter) + 1
        if found != self.columns:
            return f"leaves {found} columns where {self.columns} are expected"
        return None

    def field_texts(self, record: bytes) -> list[str]:
        """The fields of a well-formed record, unquoted (for error messages)."""
        out: list[str] = []
        pos = 0
        while True:
            end = self.field.match(record, pos).end()  # type: ignore[union-attr]
            text = record[pos:end]
            if text.startswith(self.quote):
                closing = text.rfind(self.quote)
                text = text[1:closing].replace(self.quote * 2, self.quote) + text[closing + 1 :]
            out.append(text.decode("utf-8", errors="backslashreplace"))
            if record[end : end + 1] != self.delimiter:
                return out
            pos = end + 1

    def header_end(self, block: bytes) -> int:
        """Just after the first record (the header) and its line end."""
        end = self.record.match(block).end()  # type: ignore[union-attr]
        if block[end : end + 1] == self.quote:
            end = _line_end(block, end)[0]
        return _line_end(block, end)[1]


_UNTERMINATED = (
    "unterminated quote: the quoted value opened on this line is never closed; the "
    "record ends at the end of this line and reading resumes on the next line"
)
_TEXT_AFTER_QUOTE = (
    "text after a closing quote: a quoted field must end at its closing quote (write a "
    "quote inside a quoted field as two quotes)"
)
_UNBALANCED = (
    "unbalanced quote: a quoted value runs over {lines} more line(s) and {why}, so the "
    "quote is taken as stray; the record ends at the end of its first line and reading "
    "resumes on the next line"
)


def _hex_prefix(data: bytes, window: int = 1 << 18) -> bool:
    """Whether ``data`` holds ``0x`` or ``0X``: vectorised over windows that stay in
    the CPU's cache (a substring or regex search stops at every ``0`` of the numbers,
    7x slower; one pass over the whole block allocates block-sized temporaries)."""
    import numpy as np

    a = np.frombuffer(data, np.uint8)
    for start in range(0, len(a) - 1, window):
        w = a[start : start + window + 1]  # one byte of overlap: a pair across windows
        if (((w[1:] | 0x20) == ord("x")) & (w[:-1] == ord("0"))).any():
            return True
    return False


def _decimal_integers(text: pa.ChunkedArray, column: int, to: pa.DataType) -> pa.ChunkedArray:
    """Integer fields read as text: decimal digits (blanks around them allowed, as
    pyarrow allows), cast to ``to``; anything else fails as pyarrow's reader would."""
    import pyarrow.compute as pc

    trimmed = pc.utf8_trim_whitespace(text)
    digits = pc.match_substring_regex(trimmed, r"^-?[0-9]+$")
    bad = pc.filter(text, pc.invert(pc.fill_null(digits, True)))
    if len(bad):
        raise ValueError(f"In CSV column #{column}: invalid value '{bad[0].as_py()}'")
    try:
        return pc.cast(trimmed, to)
    except Exception as e:  # out of the type's range
        value = re.search(r"'(.*?)'", str(e))
        raise ValueError(
            f"In CSV column #{column}: invalid value '{value.group(1) if value else e}'"
        ) from e


def pa_schema(schema: pa.Schema, names: list[str]) -> pa.Schema:
    """``schema`` with only the fields ``names``, in that order."""
    import pyarrow as pa

    return pa.schema([schema.field(n) for n in names])


def _compile(template: str, parts: dict[str, bytes]) -> re.Pattern[bytes]:
    pattern = template.encode()
    for name, value in parts.items():
        pattern = pattern.replace(name.encode(), value)
    return re.compile(pattern)


def _line_end(data: bytes, pos: int) -> tuple[int, int]:
    """(index of the first line end at or after ``pos``, index just after it); the end of
    ``data`` when there is none."""
    ends = [i for i in (data.find(b"\n", pos), data.find(b"\r", pos)) if i >= 0]
    if not ends:
        return len(data), len(data)
    eol = min(ends)
    return eol, eol + (2 if data[eol : eol + 2] == b"\r\n" else 1)


class CsvFormat(Format):
    """The ``csv`` format: delimited text, fields by position; the record rules are in
    the module docstring."""

    name = "csv"
    Config = CsvConfig
    config: CsvConfig
    infers_schema = True
    infers_text_values = True

    def __init__(self, config: StrictConfig, table: object) -> None:
        super().__init__(config, table)  # type: ignore[arg-type]
        self.schema = self.table.arrow_schema()
        # Fields are columns by position: the made column _rescued_data (rescue) is none.
        self.columns = [
            c for c in self.table.columns if not (self.evolution.rescues and c.name == RESCUED_DATA)
        ]
        self.read_schema = pa_schema(self.schema, [c.name for c in self.columns])
        #: The record's fields in order: the columns, and the operation field (None)
        #: first or last when an operation_column is read.
        self.fields: list[ColumnSpec | None] = list(self.columns)
        if self.config.operation_column is not None:
            first = self.config.operation_position == "first"
            self.fields = [None, *self.fields] if first else [*self.fields, None]
        self.syntax = _Syntax(self.config.delimiter, self.config.quote, len(self.fields))
        self.block_bytes = DEFAULT_BLOCK_BYTES

    @classmethod
    def check_table(cls, config: StrictConfig, table: TableSpec) -> None:
        """An ``operation_column`` needs a table with a primary key."""
        assert isinstance(config, CsvConfig)
        check_operation_column(config, table)

    def _field_name(self, fld: ColumnSpec | None) -> str:
        return fld.name if fld is not None else str(self.config.operation_column)

    @classmethod
    def inference_problem(cls, config: Mapping[str, Any]) -> tuple[str, str] | None:
        """Only a header names the columns."""
        if config.get("headers"):
            return None
        return (
            "headers",
            "CSV without a header has no column names to infer them from; set headers: true",
        )

    @classmethod
    def infer_fields(
        cls, config: StrictConfig, data: bytes, key: str, fields: InferredFields
    ) -> None:
        """``headers: true`` only: the header names the columns (every sampled file must
        have the same header); types as pyarrow's CSV reader infers them (integers,
        floats, booleans, dates, times, timestamps, else VARCHAR); nulls as the format
        reads them (empty, ``NULL``, ``null``)."""
        assert isinstance(config, CsvConfig)
        import pyarrow as pa
        import pyarrow.csv as pc

        if not config.headers:
            raise SchemaInferenceError(
                f"{fields.where}: CSV without a header has no column names to infer; set "
                "headers: true in the format config or declare the table's columns"
            )
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        last = data.rfind(b"\n")
        if last >= 0 and not data.endswith(b"\n"):
            data = data[: last + 1]  # a record cut by the byte bound is left out
        try:
            read = pc.read_csv(
                io.BytesIO(data),
                # One block: the types fit every sampled row, not only the first block's.
                read_options=pc.ReadOptions(block_size=max(1 << 20, len(data) + 1)),
                parse_options=pc.ParseOptions(
                    delimiter=config.delimiter,
                    quote_char=config.quote,
                    newlines_in_values=True,
                ),
                convert_options=pc.ConvertOptions(
                    null_values=["", "NULL", "null"],
                    true_values=["true", "True", "TRUE"],
                    false_values=["false", "False", "FALSE"],
                    strings_can_be_null=True,
                ),
            )
        except pa.ArrowInvalid as e:
            raise SchemaInferenceError(
                f"{fields.where}: cannot infer columns from {key} as CSV "
                f"({str(e).splitlines()[0]}); fix the file or declare the table's columns"
            ) from None
        header = [fl.name for fl in read.schema]
        if fields.order and [n.lower() for n in header] != list(fields.order):
            raise SchemaInferenceError(
                f"{fields.where}: the header of {key} ({', '.join(header)}) differs from the first "
                f"sampled file's ({', '.join(fields.order.values())}); CSV fields are matched to "
                "columns by position: give the files one header or declare the table's columns"
            )
        fields.add_arrow(read.schema, key)

    @property
    def line_oriented(self) -> bool:
        """Always: a record starts after a line end outside quotes."""
        return True

    def decode(
        self,
        chunks: Iterator[bytes],
        *,
        final: bool,
        first_record: int,
        at_start: bool,
        first_line: int | None = None,
    ) -> Iterator[Decoded]:
        """Decodes block by block with pyarrow; where a quoted value spans lines or a
        block fails, finds the records itself so one bad record is one dead letter."""
        record = first_record
        line = first_line if first_line is not None else (1 if at_start else None)
        header = self.config.headers and at_start

        def step(buf: bytes, at_end: bool) -> tuple[Decoded | None, int]:
            nonlocal record, line, header
            end_of_object = at_end and final
            # Fast path: cut at the last newline and let pyarrow read the block. It is
            # wrong only where a quoted value spans lines (a stray quote, or a value
            # going on past the cut), and then it fails, or a VARCHAR value holds a line
            # end, or the object's last line holds a quote: then find the records.
            cut = len(buf) if end_of_object else buf.rfind(b"\n") + 1
            skip = self.syntax.header_end(buf) if header else 0
            out = None
            ends: int | None = None  # line ends in buf[:cut]
            if cut and skip <= cut and not self._quote_in_last_line(buf[:cut]):
                ends = count_lines(buf, cut)
                out = self._fast(buf[skip:cut], ends - count_lines(buf, skip))
            if out is None:
                cut, stray = self.syntax.cut(buf, end_of_object=end_of_object)
                if not cut or skip > cut:
                    return None, 0
                first = None if line is None else line + count_lines(buf, skip)
                out = self._careful(buf[skip:cut], record, first, stray)
                ends = None
            if line is not None:
                line += count_lines(buf, cut) if ends is None else ends
            if ends is not None and buf.find(b"\r", 0, cut) < 0:
                out.newlines = ends  # no carriage return: the line ends are the \n bytes
            record += out.records
            header = False
            return out, cut

        steps = text_start(step, self.name, self.schema.empty_table) if at_start else step
        yield from buffered(chunks, steps, block_bytes=self.block_bytes)

    def _quote_in_last_line(self, block: bytes) -> bool:
        """A quote on a last line without line end: pyarrow would read an unterminated
        quote there as a value."""
        return not block.endswith(b"\n") and self.syntax.quote in block[block.rfind(b"\n") + 1 :]

    def _fast(self, body: bytes, line_ends: int) -> Decoded | None:
        """``body`` read at once by pyarrow (``line_ends``: its line ends); None when
        its records must be found first."""
        import pyarrow.compute as pc

        if self.syntax.quote in body and not self.syntax.quotes_in_place(body):
            return None
        try:
            table = self._read(body)
        except Exception:
            return None
        # Each line one row: no value spans lines (a blank line or such a value makes
        # fewer rows than lines), so no VARCHAR value need be looked at.
        lines = line_ends + (not body.endswith((b"\n", b"\r")))
        if self.syntax.quote in body and table.num_rows != lines:
            for col in self.columns:
                if col.type.kind != "VARCHAR":
                    continue
                lines = pc.match_substring_regex(table.column(col.name), "[\r\n]")
                if pc.any(lines).as_py():
                    return None  # a quoted value spans lines: is it a stray quote?
        return Decoded(table, [], table.num_rows)

    def _careful(self, body: bytes, record: int, line: int | None, stray: bool) -> Decoded:
        import pyarrow as pa

        if not stray:
            try:
                table = self._read(body)
                return Decoded(table, [], table.num_rows)
            except Exception:
                pass
        records = self.syntax.split(body)

        def decode(rs: Sequence[_Record]) -> pa.Table:
            for r in rs:
                if r.error:
                    raise RowError(r.error)
            try:
                return self._read(b"\n".join(body[r.start : r.end] for r in rs))
            except RowError:
                raise
            except Exception as e:
                one = body[rs[0].start : rs[0].end] if len(rs) == 1 else None
                raise ValueError(self._explain(str(e), one)) from e

        tables, errors = isolate(
            records,
            decode,
            record,
            lambda r: clip(body[r.start : r.end]),
            [None if line is None else line + r.line - 1 for r in records],
        )
        table = pa.concat_tables(tables) if tables else self.schema.empty_table()
        return Decoded(table, errors, len(records))

    def _explain(self, message: str, record: bytes | None = None) -> str:
        # pyarrow: "In CSV column #0: Row #1: CSV conversion error to int32: invalid value 'x'"
        m = re.match(r"CSV parse error: (?:Row #\d+: )?Expected (\d+) columns, got (\d+)", message)
        if m:
            return f"expected {m.group(1)} columns, found {m.group(2)}"
        m = re.match(r"In CSV column #(\d+): (?:Row #\d+: )?(.*)", message, re.S)
        if not m or int(m.group(1)) >= len(self.fields):
            return message
        col = self.fields[int(m.group(1))]
        detail = m.group(2)
        if col is None:
            return f"operation field {self.config.operation_column!r}: {detail}"
        if "invalid UTF8" in detail:
            return mismatch(col, "invalid UTF-8 (the raw text shows the bytes escaped)")
        value = re.search(
            r"(?:invalid value |Error converting |The string )'(.*?)'(?: to | is | cannot |$)",
            detail,
        )
        if value:
            return mismatch(col, show(value.group(1)))
        fields = self.syntax.field_texts(record) if record is not None else []
        if len(fields) == len(self.fields):
            return mismatch(col, show(fields[int(m.group(1))]))
        return f"column {col.name!r} ({col.type}): {detail}"

    def _read(self, data: bytes) -> pa.Table:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pcsv

        if not data.strip(b"\r\n"):
            return self.schema.empty_table()
        # pyarrow reads "0x10" into an integer column as 16: where a block may hold hex,
        # integer columns are read as text and must be decimal digits.
        hex_ok = not _hex_prefix(data)
        as_text = [
            c.name
            for c in self.columns
            if c.type.kind in _TEXT_PARSED or (c.type.is_integer and not hex_ok)
        ]
        raw = pcsv.read_csv(
            pa.BufferReader(data),
            read_options=pcsv.ReadOptions(
                column_names=[self._field_name(c) for c in self.fields],
                # One block, one thread: with newlines_in_values pyarrow's parts on
                # threads cost more than they gained (measured).
                use_threads=False,
                block_size=max(len(data), 1 << 20),
            ),
            parse_options=pcsv.ParseOptions(
                delimiter=self.config.delimiter,
                quote_char=self.config.quote,
                newlines_in_values=True,
            ),
            convert_options=pcsv.ConvertOptions(
                column_types={
                    **{
                        c.name: pa.string() if c.name in as_text else f.type
                        for c, f in zip(self.columns, self.read_schema, strict=True)
                    },
                    **{self._field_name(None): pa.string() for c in self.fields if c is None},
                },
                null_values=_NULLS,
                true_values=["true", "True", "TRUE"],
                false_values=["false", "False", "FALSE"],
                strings_can_be_null=False,
            ),
        )
        for c, f in zip(self.columns, self.read_schema, strict=True):
            if c.name in as_text:  # NULL spellings, as pyarrow does for typed columns
                i = self.fields.index(c)  # the field's place in the record
                arr = raw.column(i)
                nulls = pc.is_in(arr, value_set=pa.array(_NULLS))
                arr = pc.if_else(nulls, pa.scalar(None, pa.string()), arr)
                if c.type.is_integer:
                    arr = _decimal_integers(arr, i, f.type)
                raw = raw.set_column(i, c.name, arr)
        return conform(apply_operation_column(raw, self.config), self.table, self.schema)
