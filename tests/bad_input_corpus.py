"""A corpus of bad input, built in code so every count is known: each kind is a few
files for one connector, and its builder records exactly which records must land
(with their values), which must become dead letters (with their record number, line
and raw bytes) and which objects are unreadable as a whole (transport errors).

All kinds write into one table schema; ids are unique across the corpus (each kind has
its own range), so a row that lands where it should not is seen."""

from __future__ import annotations

import gzip
import io
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

COLUMNS = {
    "id": "BIGINT NOT NULL",
    "name": "VARCHAR",
    "qty": "INT",
    "score": "DOUBLE",
    "amount": "DECIMAL(10, 2)",
    "at": "TIMESTAMP",
    "day": "DATE",
}
ARROW = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("qty", pa.int32()),
        ("score", pa.float64()),
        ("amount", pa.decimal128(10, 2)),
        ("at", pa.timestamp("us")),
        ("day", pa.date32()),
    ]
)
BOM = b"\xef\xbb\xbf"
HUGE = 20 << 20  # a 20 MiB line
JSON_RAW = {"name": "json", "config": {"update_format": "raw"}}
CSV = {"name": "csv"}
CSV_HEADERS = {"name": "csv", "config": {"headers": True}}
PARQUET = {"name": "parquet"}
AVRO = {"name": "avro"}
#: The corpus table as an Avro schema (nullable fields as unions with null).
AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Row",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"]},
        {"name": "qty", "type": ["null", "int"]},
        {"name": "score", "type": ["null", "double"]},
        {
            "name": "amount",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
            ],
        },
        {"name": "at", "type": ["null", {"type": "long", "logicalType": "local-timestamp-micros"}]},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
    ],
}

Row = dict[str, Any]


def row(i: int, name: str | None = None) -> Row:
    """A good row: every column set, values that survive only an exact conversion (a
    quote, a comma and a non-ASCII letter in the text, cents, microseconds)."""
    return {
        "id": i,
        "name": f'n{i} "ü", x' if name is None else name,
        "qty": (i * 7) % 1000 - 500,
        "score": i / 8,
        "amount": Decimal(f"{i % 10**7}.{i % 100:02d}"),
        "at": datetime(2024, 1, 1) + timedelta(seconds=61 * i, microseconds=i % 10**6),
        "day": date(2024, 1, 1) + timedelta(days=i % 400),
    }


def json_line(r: Row, **override: str) -> bytes:
    """``r`` as a JSON object; ``override`` replaces a column's JSON text verbatim."""

    def text(value: Any, show: Callable[[Any], str]) -> str:
        return "null" if value is None else show(value)

    fields = {
        "id": text(r["id"], str),
        "name": text(r["name"], lambda v: json.dumps(v, ensure_ascii=False)),
        "qty": text(r["qty"], str),
        "score": text(r["score"], repr),
        "amount": text(r["amount"], str),  # a JSON number with its cents
        "at": text(r["at"], lambda v: json.dumps(v.isoformat())),
        "day": text(r["day"], lambda v: json.dumps(v.isoformat())),
        **override,
    }
    return ("{" + ", ".join(f'"{k}": {v}' for k, v in fields.items() if v) + "}").encode()


def csv_line(r: Row, **override: str) -> bytes:
    """``r`` as a CSV record (columns by position; None as an empty field); ``override``
    replaces a field's text."""

    def text(value: Any, show: Callable[[Any], str]) -> str:
        return "" if value is None else show(value)

    fields = {
        "id": text(r["id"], str),
        "name": text(r["name"], lambda v: '"' + v.replace('"', '""') + '"'),
        "qty": text(r["qty"], str),
        "score": text(r["score"], repr),
        "amount": text(r["amount"], str),
        "at": text(r["at"], lambda v: v.isoformat(sep=" ")),
        "day": text(r["day"], lambda v: v.isoformat()),
        **override,
    }
    return ",".join(fields.values()).encode()


def avro_bytes(records: list[Row], schema: dict[str, Any] | None = None, **kw: Any) -> bytes:
    """An Avro object container file of ``records`` (the corpus schema by default)."""
    import fastavro

    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema or AVRO_SCHEMA), records, **kw)
    return out.getvalue()


def parquet_bytes(table: pa.Table, row_group_size: int | None = None) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=row_group_size)
    return out.getvalue()


def line_ends(data: bytes) -> int:
    return data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")


@dataclass(frozen=True)
class Bad:
    """A record that must become a dead letter."""

    file: str
    record: int
    line: int | None
    raw: bytes | None  # what the dead letter's raw text shows (None: not checked)


@dataclass
class TextFile:
    """A text object written record by record; tracks record numbers and lines."""

    kind: Kind
    name: str
    encode: Callable[..., bytes]
    eol: bytes = b"\n"
    data: bytearray = field(default_factory=bytearray)
    record: int = 0
    line: int = 1

    def good(self, r: Row | None = None, text: bytes | None = None) -> Row:
        r = r if r is not None else row(self.kind.next_id())
        self._add(text if text is not None else self.encode(r))
        self.kind.good.append(r)
        return r

    def bad(self, text: bytes, *, raw: bytes | None = None, eol: bool = True) -> None:
        """A bad record; ``raw``: its dead letter's raw text when not ``text`` itself."""
        self.kind.bad.append(Bad(self.name, self.record + 1, self.line, raw or text))
        self._add(text, eol=eol)

    def _add(self, text: bytes, *, eol: bool = True) -> None:
        self.record += 1
        self.kind.inputs += 1
        self.data += text + (self.eol if eol else b"")
        self.line += line_ends(text) + (1 if eol else 0)

    def other(self, text: bytes) -> None:
        """Bytes that are no record (a header, a blank line)."""
        self.data += text + self.eol
        self.line += line_ends(text) + 1


@dataclass
class Kind:
    name: str
    format: dict[str, Any]
    base: int
    files: dict[str, bytes] = field(default_factory=dict)
    good: list[Row] = field(default_factory=list)
    bad: list[Bad] = field(default_factory=list)
    bad_objects: list[str] = field(default_factory=list)
    #: Records and unreadable objects written, counted as they are written.
    inputs: int = 0
    _next: int = 0
    _texts: list[TextFile] = field(default_factory=list)

    def next_id(self) -> int:
        self._next += 1
        return self.base + self._next

    def text(self, name: str, encode: Callable[..., bytes], eol: bytes = b"\n") -> TextFile:
        f = TextFile(self, name, encode, eol)
        self._texts.append(f)
        return f

    def goods(self, f: TextFile, n: int) -> None:
        for _ in range(n):
            f.good()

    def parquet(self, name: str, rows: list[Row]) -> None:
        """A Parquet object of the table's schema holding ``rows`` (all good)."""
        self.files[name] = parquet_bytes(pa.Table.from_pylist(rows, schema=ARROW))
        self.good += rows
        self.inputs += len(rows)

    def avro(self, name: str, rows: list[Row], **kw: Any) -> None:
        """An Avro container of the table's schema holding ``rows`` (all good)."""
        self.files[name] = avro_bytes(rows, **kw)
        self.good += rows
        self.inputs += len(rows)

    def unreadable(self, name: str, data: bytes) -> None:
        """An object that cannot be decoded at all: one transport error, however many
        records it was meant to hold."""
        self.files[name] = data
        self.bad_objects.append(name)
        self.inputs += 1

    def finish(self) -> Kind:
        for f in self._texts:
            self.files[f.name] = bytes(f.data)
        return self

    @property
    def first_failure(self) -> tuple[str, Bad | None]:
        """What ``errors.tolerance: none`` names: the first bad object in key order, and
        the first bad record of it (None: the object as a whole)."""
        first = min([b.file for b in self.bad] + self.bad_objects)
        if first in self.bad_objects:
            return first, None
        return first, min((b for b in self.bad if b.file == first), key=lambda b: b.record)

    def connector(self, root: Path, tolerance: str) -> dict[str, Any]:
        return {
            "name": self.name,
            "transport": {
                "name": "file_input",
                "config": {"path": str(root / self.name), "min_file_age": 0},
            },
            "format": self.format,
            "errors": {"tolerance": tolerance},
        }

    def write(self, root: Path) -> None:
        folder = root / self.name
        folder.mkdir(parents=True)
        for name, data in self.files.items():
            (folder / name).write_bytes(data)


# --- the kinds ------------------------------------------------------------------------


def json_truncated(k: Kind) -> None:
    f = k.text("a.json", json_line)
    k.goods(f, 3)
    cut = json_line(row(k.next_id()))[:-12]  # ends inside a string: never balances
    f.bad(cut)  # ends where the next line starts with "{"
    k.goods(f, 3)
    f.bad(json_line(row(k.next_id()))[:-3], eol=False)  # the object ends mid-record


def json_non_object(k: Kind) -> None:
    f = k.text("a.json", json_line)
    k.goods(f, 2)
    for text in (b"[1, 2]", b"42", b'"text"', b"null", b"true", b"[]"):
        f.bad(text)
        f.good()


def json_wrong_types(k: Kind) -> None:
    f = k.text("a.json", json_line)
    k.goods(f, 2)
    for column, value in (
        ("id", '"7"'),  # a string into BIGINT
        ("qty", '"5"'),
        ("qty", "1.5"),
        ("qty", "1.0"),
        ("qty", "true"),
        ("name", "5"),  # a number into VARCHAR
        ("name", '{"a": 1}'),
        ("score", '"1.5"'),
        ("at", "1700000000"),  # epoch seconds into TIMESTAMP
        ("day", "20240101"),
    ):
        f.bad(json_line(row(k.next_id()), **{column: value}))
        f.good()


def json_insert_delete(k: Kind) -> None:
    """Feldera's default update_format: each record is {"insert": {...}}."""

    def insert(r: Row) -> bytes:
        return b'{"insert": ' + json_line(r) + b"}"

    f = k.text("a.json", insert)
    k.goods(f, 2)
    f.bad(json_line(row(k.next_id())))  # a bare row
    f.good()
    f.bad(b'{"insert": 5}')
    f.bad(b'{"delete": ' + json_line(row(k.next_id())) + b"}")  # needs a keyed sink
    f.bad(b'{"insert": ' + json_line(row(k.next_id()), qty='"x"') + b"}")
    f.good()


def json_single_lines(k: Kind) -> None:
    """lines: single: one JSON object per line, exactly."""
    f = k.text("a.json", json_line)
    k.goods(f, 2)
    f.bad(json_line(row(k.next_id())) + json_line(row(k.next_id())))  # two on one line
    f.other(b"")
    f.good()
    r = json_line(row(k.next_id()))
    f.bad(r[:8])  # a record spread over two lines is two bad lines
    f.bad(r[8:])
    f.good()


def json_overflow(k: Kind) -> None:
    f = k.text("a.json", json_line)
    k.goods(f, 2)
    for column, value in (
        ("qty", str(2**31)),
        ("qty", str(-(2**31) - 1)),
        ("id", str(2**63)),
        ("score", "1e400"),
        ("score", "-1e400"),
    ):
        f.bad(json_line(row(k.next_id()), **{column: value}))
        f.good()
    # The extremes that fit land exactly.
    f.good(row(k.next_id()) | {"qty": 2**31 - 1})
    f.good(row(k.next_id()) | {"qty": -(2**31)})


def json_not_null(k: Kind) -> None:
    f = k.text("a.json", json_line)
    k.goods(f, 2)
    f.bad(json_line(row(k.next_id()), id="null"))
    f.good()
    f.bad(json_line(row(k.next_id()), id=""))  # no id at all
    f.good(row(k.next_id()) | {"name": None, "qty": None}, None)  # nullable columns may be null


def csv_not_null(k: Kind) -> None:
    f = k.text("a.csv", csv_line)
    k.goods(f, 2)
    for value in ("", "NULL", "null", '""'):
        f.bad(csv_line(row(k.next_id()), id=value))
        f.good()
    # In VARCHAR an empty field, NULL or null is text, not NULL.
    for text in ("", "NULL", "null"):
        r = row(k.next_id(), name=text)
        f.good(r, csv_line(r, name=text))
    # An empty field elsewhere is NULL.
    r = row(k.next_id()) | {"qty": None, "score": None, "amount": None, "at": None, "day": None}
    f.good(r, csv_line(r, qty="", score="", amount="", at="NULL", day="null"))


def json_invalid_utf8(k: Kind) -> None:
    f = k.text("a.json", json_line)
    k.goods(f, 2)
    for raw in (b'"caf\xe9"', b'"x\x80y"', b'"\xc3\x28"'):  # Latin-1, a lone byte, a broken pair
        f.bad(json_line(row(k.next_id()), name="@").replace(b"@", raw))
        f.good()
    # A raw NUL (JSON text must escape it) is the record's matter, not the object's.
    f.bad(json_line(row(k.next_id()), name="@").replace(b"@", b'"a\x00b"'))
    f.good()


def csv_invalid_utf8(k: Kind) -> None:
    f = k.text("a.csv", csv_line)
    k.goods(f, 2)
    for raw in (b"caf\xe9", b'"\xc3\x28"', b"\xff"):
        f.bad(csv_line(row(k.next_id()), name="@").replace(b"@", raw))
        f.good()


def json_huge_line(k: Kind) -> None:
    f = k.text("a.json", json_line)
    k.goods(f, 2)
    f.good(row(k.next_id(), name="h" * HUGE))  # one good 20 MiB record
    f.good()
    # One bad 20 MiB record: its last column does not fit.
    f.bad(json_line(row(k.next_id(), name="b" * HUGE), day='"2024-02-30"'))
    f.good()


def csv_huge_line(k: Kind) -> None:
    f = k.text("a.csv", csv_line)
    f.good()
    # 13 MiB and a bad record before it, so the quoted 20 MiB value straddles the 32 MiB
    # block and the block is split into records: its line must not be cut where the
    # block ends.
    r = row(k.next_id(), name="a" * (13 << 20))
    f.good(r, csv_line(r, name=r["name"]))
    f.bad(b"1,2")
    f.good(row(k.next_id(), name="h" * HUGE))
    f.bad(csv_line(row(k.next_id(), name="b" * HUGE)) + b",extra")  # one column too many
    f.good()


def json_bom(k: Kind) -> None:
    """A UTF-8 BOM at the start is skipped; the first record is still a good record,
    also when a bad record in the same block sends the block down the slow path."""
    f = k.text("a.json", json_line)
    f.data += BOM
    k.goods(f, 2)
    f.bad(json_line(row(k.next_id()), qty='"x"'))
    k.goods(f, 2)


def csv_bom(k: Kind) -> None:
    f = k.text("a.csv", csv_line)
    f.data += BOM
    f.bad(csv_line(row(k.next_id()), id="x"))  # the first record: raw text without BOM
    k.goods(f, 3)
    g = k.text("b.csv", csv_line)
    g.data += BOM
    r = row(k.next_id(), name="first, quoted")
    g.good(r, csv_line(r, id=f'"{r["id"]}"'))  # a quote right after the BOM
    g.bad(csv_line(row(k.next_id()), qty="x"))
    g.good()


def csv_bom_header(k: Kind) -> None:
    f = k.text("a.csv", csv_line)
    f.data += BOM
    f.other(b"id,name,qty,score,amount,at,day")
    k.goods(f, 2)
    f.bad(csv_line(row(k.next_id()), qty="x"))
    f.good()


def json_crlf(k: Kind) -> None:
    f = k.text("a.json", json_line, eol=b"\r\n")
    k.goods(f, 2)
    f.other(b"")  # a blank CRLF line is no record
    r = row(k.next_id())
    f.good(r, json_line(r).replace(b', "name"', b',\r\n  "name"'))  # pretty-printed, CRLF
    f.bad(json_line(row(k.next_id()), qty="1.5"))
    k.goods(f, 2)


def csv_crlf(k: Kind) -> None:
    f = k.text("a.csv", csv_line, eol=b"\r\n")
    f.other(b"id,name,qty,score,amount,at,day")
    k.goods(f, 2)
    r = row(k.next_id(), name="two\r\nlines")  # a quoted value keeps its CRLF
    f.good(r)
    f.bad(csv_line(row(k.next_id()), qty="x"))
    f.other(b"")
    k.goods(f, 2)


def csv_short_long(k: Kind) -> None:
    f = k.text("a.csv", csv_line)
    k.goods(f, 2)
    full = csv_line(row(k.next_id()))
    f.bad(full.rsplit(b",", 1)[0])  # one column short
    f.good()
    f.bad(csv_line(row(k.next_id())) + b",surplus")  # one column long
    f.good()
    f.bad(b"1")  # one column
    f.bad(b",,,,,,,,,")  # ten empty columns
    f.good()


def csv_unbalanced_quotes(k: Kind) -> None:
    f = k.text("a.csv", csv_line)
    k.goods(f, 2)
    r = row(k.next_id())
    f.bad(csv_line(r, name='"never closed'))  # the rest of the line is one dead letter
    k.goods(f, 2)
    f.bad(csv_line(row(k.next_id()), name='"closed" then text'))  # pyarrow: closed then text
    f.good(row(k.next_id(), name='a,"b'))  # "a,""b": a doubled quote after a comma
    f.good(row(k.next_id(), name='"quoted", and "\n" over lines'))
    f.bad(csv_line(row(k.next_id()), name='"open at the end'), eol=False)


def json_bad_dates(k: Kind) -> None:
    f = k.text("a.json", json_line)
    k.goods(f, 2)
    for column, value in (
        ("day", "2024-13-01"),
        ("day", "2024-02-30"),
        ("day", "yesterday"),
        ("day", "2024-01-01T10:00:00"),  # a time of day into DATE
        ("at", "2024-01-01T25:00:00"),
        ("at", "2024-01-01T10:00:00.1234567"),  # beyond microseconds
        ("at", "01/02/2024 10:00"),
    ):
        f.bad(json_line(row(k.next_id()), **{column: json.dumps(value)}))
        f.good()
    r = row(k.next_id()) | {"at": datetime(2024, 3, 1, 8, 30)}  # an offset: converted to UTC
    f.good(r, json_line(r, at='"2024-03-01T10:30:00+02:00"'))


def csv_bad_dates(k: Kind) -> None:
    f = k.text("a.csv", csv_line)
    k.goods(f, 2)
    for column, value in (
        ("day", "2023-02-29"),
        ("day", "2024/01/01"),
        ("day", "2024-01-01 00:00:01"),
        ("at", "2024-01-01 24:00:01"),
        ("at", "1700000000"),
    ):
        f.bad(csv_line(row(k.next_id()), **{column: value}))
        f.good()


def json_decimal_overflow(k: Kind) -> None:
    f = k.text("a.json", json_line)
    k.goods(f, 2)
    for value in ("123456789.12", "1.234", '"99999999999"', "1e20", '"0.001"'):
        f.bad(json_line(row(k.next_id()), amount=value))
        f.good()
    f.good(row(k.next_id()) | {"amount": Decimal("99999999.99")})  # the largest that fits
    r = row(k.next_id()) | {"amount": Decimal("12345678.91")}
    f.good(r, json_line(r, amount='"12345678.91"'))  # as a string, more digits than a double


def csv_decimal_overflow(k: Kind) -> None:
    f = k.text("a.csv", csv_line)
    k.goods(f, 2)
    for value in ("100000000.00", "0.125", "-123456789", "12,5"):
        text = f'"{value}"' if "," in value else value
        f.bad(csv_line(row(k.next_id()), amount=text))
        f.good()
    f.good(row(k.next_id()) | {"amount": Decimal("-99999999.99")})


def csv_wrong_types(k: Kind) -> None:
    f = k.text("a.csv", csv_line)
    k.goods(f, 2)
    for column, value in (
        ("qty", "1.5"),
        ("qty", "abc"),
        ("qty", "2147483648"),
        ("id", "1e3"),
        ("score", "NaN"),
        ("score", "inf"),
        ("score", "1e400"),
        ("qty", "0x10"),  # pyarrow alone reads hex into integer columns
        ("id", "0X1F"),
    ):
        f.bad(csv_line(row(k.next_id()), **{column: value}))
        f.good()
    f.good(row(k.next_id(), name="0x10"))  # hex in text is text
    r = row(k.next_id()) | {"qty": 5}
    f.good(r, csv_line(r, qty=" 5 "))  # blanks around a number, as pyarrow allows


def parquet_corrupt(k: Kind) -> None:
    k.parquet("a.parquet", [row(k.next_id()) for _ in range(5)])
    rng = random.Random(7)
    k.unreadable("b.parquet", bytes(rng.getrandbits(8) for _ in range(4096)))
    whole = parquet_bytes(pa.Table.from_pylist([row(k.next_id()) for _ in range(5)], ARROW))
    k.unreadable("c.parquet", whole[: len(whole) // 2])  # cut in half
    k.unreadable("d.parquet", b"")
    k.parquet("e.parquet", [row(k.next_id()) for _ in range(3)])


def parquet_other_schema(k: Kind) -> None:
    """A Parquet object of another schema: its rows are records that do not fit (dead
    letters naming the column); an object of the right schema lands beside it."""
    k.parquet("a.parquet", [row(k.next_id()) for _ in range(4)])
    other = pa.table({"x": [1, 2, 3], "y": ["a", "b", "c"]})  # no id column at all
    k.files["b.parquet"] = parquet_bytes(other)
    k.bad += [Bad("b.parquet", i, None, None) for i in (1, 2, 3)]
    k.inputs += 3
    # The table's columns with other types: an int64 qty fits INT only within its range,
    # a float id never fits BIGINT.
    ids = [k.next_id() for _ in range(4)]
    typed = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "qty": pa.array([1, 2**40, 3, -(2**35)], pa.int64()),
            "extra": ["ignored"] * 4,
        }
    )
    k.files["c.parquet"] = parquet_bytes(typed)
    k.good += [{**dict.fromkeys(COLUMNS), "id": ids[0], "qty": 1}]
    k.good += [{**dict.fromkeys(COLUMNS), "id": ids[2], "qty": 3}]
    k.bad += [Bad("c.parquet", 2, None, None), Bad("c.parquet", 4, None, None)]
    k.inputs += 4
    floats = pa.table({"id": pa.array([1.0, 2.5], pa.float64())})
    k.files["d.parquet"] = parquet_bytes(floats)
    k.bad += [Bad("d.parquet", 1, None, None), Bad("d.parquet", 2, None, None)]
    k.inputs += 2


def parquet_values(k: Kind) -> None:
    """Parquet columns of wider types: a row lands only where every value fits (NULL in
    NOT NULL, DECIMAL and INT overflow, NaN, a time of day into DATE are dead letters);
    a timestamp with a time zone is converted to UTC."""
    good = [row(k.next_id()) for _ in range(3)]
    ids = [r["id"] for r in good] + [k.next_id() for _ in range(5)]
    table = pa.table(
        {
            "id": pa.array([*ids[:3], None, *ids[4:]], pa.int64()),
            "name": [r["name"] for r in good] + ["x"] * 5,
            "qty": pa.array([*(r["qty"] for r in good), 1, 2**31, 1, 1, 1], pa.int64()),
            "score": [*(r["score"] for r in good), 0.5, 0.5, float("nan"), 0.5, 0.5],
            "amount": pa.array(
                [*(r["amount"] for r in good), None, None, None, Decimal("1234567890.12"), None],
                pa.decimal128(12, 2),
            ),
            "at": pa.array(
                [*(r["at"] for r in good), None, None, None, None, None], pa.timestamp("us")
            ).cast(pa.timestamp("us", "UTC")),
            "day": pa.array(
                [*(datetime.combine(r["day"], datetime.min.time()) for r in good)]
                + [None] * 4
                + [datetime(2024, 1, 1, 10, 0)],
                pa.timestamp("s"),
            ),
        }
    )
    k.files["a.parquet"] = parquet_bytes(table)
    k.good += good
    k.bad += [Bad("a.parquet", i, None, None) for i in (4, 5, 6, 7, 8)]
    k.inputs += 8
    # 14:00 at +02:00 is 12:00 UTC.
    local = datetime(2024, 5, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    zoned = pa.table(
        {
            "id": pa.array([k.next_id()], pa.int64()),
            "at": pa.array([local], pa.timestamp("us", "+02:00")),
        }
    )
    k.files["b.parquet"] = parquet_bytes(zoned)
    at = datetime(2024, 5, 1, 12, 0)
    k.good.append({**dict.fromkeys(COLUMNS), "id": zoned["id"][0].as_py(), "at": at})
    k.inputs += 1


def json_gzip(k: Kind) -> None:
    """A gzip-compressed object under a .json name: the object as a whole is refused."""
    plain = k.text("a.json", json_line)
    k.goods(plain, 3)
    body = b"".join(json_line(row(k.next_id())) + b"\n" for _ in range(50))
    k.unreadable("b.json", gzip.compress(body, mtime=0))


def csv_binary(k: Kind) -> None:
    """Random bytes and a Parquet object under .csv names: refused as a whole."""
    plain = k.text("a.csv", csv_line)
    k.goods(plain, 3)
    rng = random.Random(11)
    k.unreadable("b.csv", bytes(rng.getrandbits(8) for _ in range(64 << 10)))
    rows = [row(k.next_id()) for _ in range(5)]
    k.unreadable("c.csv", parquet_bytes(pa.Table.from_pylist(rows, ARROW)))


def avro_corrupt(k: Kind) -> None:
    """Objects that are no readable Avro container: each is refused as a whole, naming
    what it is or the block that cannot be read; good containers land beside them."""
    k.avro("a.avro", [row(k.next_id()) for _ in range(5)])
    rng = random.Random(5)
    k.unreadable("b.avro", bytes(rng.getrandbits(8) for _ in range(4096)))
    whole = avro_bytes([row(k.next_id()) for _ in range(200)], sync_interval=2000)
    k.unreadable("c.avro", whole[: len(whole) * 2 // 3])  # cut short mid-block
    k.unreadable("d.avro", json_line(row(k.next_id())) + b"\n")  # JSON under .avro
    corrupt = bytearray(avro_bytes([row(k.next_id()) for _ in range(200)], sync_interval=2000))
    corrupt[len(corrupt) // 2 : len(corrupt) // 2 + 16] = b"\xff" * 16  # bytes of a block
    k.unreadable("e.avro", bytes(corrupt))
    k.avro("f.avro", [row(k.next_id()) for _ in range(3)], codec="deflate")


def avro_wrong_types(k: Kind) -> None:
    """Containers whose schema differs from the table: records whose values do not fit
    are dead letters (by record number; no lines in Avro); an older schema without some
    optional fields lands with NULLs; a field the table lacks is ignored."""
    k.avro("a.avro", [row(k.next_id()) for _ in range(3)])
    other = {
        "type": "record",
        "name": "Row",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "qty", "type": ["null", "long", "string"]},  # wider, and text
            {"name": "day", "type": ["null", "string"]},
            {"name": "extra", "type": "string"},  # no such column
        ],
    }
    records: list[Row] = []
    for qty, day, good in (
        (1, "2024-01-02", True),
        (2**31, None, False),  # beyond INT
        ("7", None, False),  # text into INT
        (None, "2024-02-30", False),  # no such date
        (-(2**31), "2024-12-31", True),
        (None, None, True),
    ):
        i = k.next_id()
        records.append({"id": i, "qty": qty, "day": day, "extra": "x"})
        k.inputs += 1
        if good:
            k.good.append(
                {
                    **dict.fromkeys(COLUMNS),
                    "id": i,
                    "qty": qty,
                    "day": date.fromisoformat(day) if day else None,
                }
            )
        else:
            k.bad.append(Bad("b.avro", len(records), None, None))
    k.files["b.avro"] = avro_bytes(records, other)
    null_id = {**AVRO_SCHEMA, "fields": [{"name": "id", "type": ["null", "long"]}]}
    i = k.next_id()
    k.files["c.avro"] = avro_bytes([{"id": None}, {"id": i}], null_id)  # NULL into NOT NULL
    k.bad.append(Bad("c.avro", 1, None, None))
    k.good.append({**dict.fromkeys(COLUMNS), "id": i})
    k.inputs += 2


def clean_json(k: Kind) -> None:
    f = k.text("a.json", json_line)
    k.goods(f, 50)


def clean_csv(k: Kind) -> None:
    f = k.text("a.csv", csv_line)
    k.goods(f, 50)


KINDS: dict[str, tuple[dict[str, Any], Callable[[Kind], None]]] = {
    "json_truncated": (JSON_RAW, json_truncated),
    "json_non_object": (JSON_RAW, json_non_object),
    "json_wrong_types": (JSON_RAW, json_wrong_types),
    "json_overflow": (JSON_RAW, json_overflow),
    "json_single_lines": (
        {"name": "json", "config": {"update_format": "raw", "lines": "single"}},
        json_single_lines,
    ),
    "json_insert_delete": ({"name": "json"}, json_insert_delete),
    "json_not_null": (JSON_RAW, json_not_null),
    "csv_not_null": (CSV, csv_not_null),
    "json_invalid_utf8": (JSON_RAW, json_invalid_utf8),
    "csv_invalid_utf8": (CSV, csv_invalid_utf8),
    "json_huge_line": (JSON_RAW, json_huge_line),
    "csv_huge_line": (CSV, csv_huge_line),
    "json_bom": (JSON_RAW, json_bom),
    "csv_bom": (CSV, csv_bom),
    "csv_bom_header": (CSV_HEADERS, csv_bom_header),
    "json_crlf": (JSON_RAW, json_crlf),
    "csv_crlf": (CSV_HEADERS, csv_crlf),
    "csv_short_long": (CSV, csv_short_long),
    "csv_unbalanced_quotes": (CSV, csv_unbalanced_quotes),
    "json_bad_dates": (JSON_RAW, json_bad_dates),
    "csv_bad_dates": (CSV, csv_bad_dates),
    "json_decimal_overflow": (JSON_RAW, json_decimal_overflow),
    "csv_decimal_overflow": (CSV, csv_decimal_overflow),
    "csv_wrong_types": (CSV, csv_wrong_types),
    "parquet_corrupt": (PARQUET, parquet_corrupt),
    "parquet_other_schema": (PARQUET, parquet_other_schema),
    "parquet_values": (PARQUET, parquet_values),
    "json_gzip": (JSON_RAW, json_gzip),
    "csv_binary": (CSV, csv_binary),
    "avro_corrupt": (AVRO, avro_corrupt),
    "avro_wrong_types": (AVRO, avro_wrong_types),
}
#: Connectors with nothing bad in them, run beside the bad ones.
CLEAN: dict[str, tuple[dict[str, Any], Callable[[Kind], None]]] = {
    "clean_json": (JSON_RAW, clean_json),
    "clean_csv": (CSV, clean_csv),
}


def build(names: dict[str, tuple[dict[str, Any], Callable[[Kind], None]]]) -> list[Kind]:
    kinds = []
    for i, (name, (fmt, builder)) in enumerate(names.items()):
        k = Kind(name, fmt, (i + 1) * 1_000_000)  # a disjoint id range per kind
        builder(k)
        kinds.append(k.finish())
    return kinds


def corpus() -> list[Kind]:
    """Every bad kind, then the clean connectors."""
    return build({**KINDS, **CLEAN})


__all__ = ["COLUMNS", "Bad", "Kind", "corpus"]
