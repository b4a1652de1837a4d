"""Records of line formats: a CSV record may span lines inside quotes and a JSON record
may be pretty-printed; a bad record is one dead letter whatever its neighbours, with
the right record number and the line where it starts; a stray quote or a broken JSON
record does not swallow the rows after it."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_connectors.formats import FORMATS
from airflow_connectors.formats.base import Decoded, RecordError
from airflow_connectors.formats.csv_format import MAX_QUOTED_BYTES
from airflow_connectors.spec import ColumnSpec, SqlType, TableSpec

TABLE = TableSpec(
    name="t",
    columns=(
        ColumnSpec(name="id", type=SqlType("BIGINT"), nullable=False),
        ColumnSpec(name="name", type=SqlType("VARCHAR")),
        ColumnSpec(name="n", type=SqlType("INT")),
    ),
)


def decode(
    fmt: str,
    data: bytes,
    config: dict[str, Any] | None = None,
    *,
    final: bool = True,
    chunk: int = 7,
    block_bytes: int | None = None,
    **kw: Any,
) -> list[Decoded]:
    cls = FORMATS.get(fmt)
    f = cls(cls.Config.model_validate(config or {}), TABLE)
    if block_bytes is not None:
        f.block_bytes = block_bytes  # type: ignore[attr-defined]
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    kw = {"first_record": 1, "at_start": True, **kw}
    return list(f.decode(iter(chunks), final=final, **kw))


def ids(out: list[Decoded]) -> list[int]:
    return [r["id"] for d in out for r in d.table.to_pylist()]


def errors(out: list[Decoded]) -> list[RecordError]:
    return [e for d in out for e in d.errors]


def records(out: list[Decoded]) -> int:
    return sum(d.records for d in out)


# --- CSV ---------------------------------------------------------------------------------


def test_csv_unterminated_quote_is_one_dead_letter_and_later_rows_land() -> None:
    rows = [b"%d,r%d,%d" % (i, i, i) for i in range(1, 2001)]
    rows[1] = b'2,"never closed,2'
    out = decode("csv", b"\n".join(rows) + b"\n", chunk=4096)
    assert ids(out) == [1, *range(3, 2001)]
    assert records(out) == 2000
    [e] = errors(out)
    assert (e.record, e.line, e.raw) == (2, 2, '2,"never closed,2')
    assert e.error.startswith("unterminated quote")


def test_csv_stray_quote_closed_by_a_later_quote_does_not_swallow_the_rows_between() -> None:
    data = b'1,a,1\n2,"b,2\n3,c,3\n4,"d",4\n5,e,5\n'
    out = decode("csv", data)
    assert ids(out) == [1, 3, 4, 5]
    [e] = errors(out)
    assert (e.record, e.line, e.raw) == (2, 2, '2,"b,2')
    assert e.error.startswith("unbalanced quote")
    assert records(out) == 5


def test_csv_bad_row_next_to_a_multiline_record_blames_the_bad_row() -> None:
    data = b'1,"multi\nline, with comma",1\nx,b,2\n3,"two\r\nlines",3\n4,d\n5,e,5\n'
    out = decode("csv", data)
    assert ids(out) == [1, 3, 5]
    got = [r["name"] for d in out for r in d.table.to_pylist()]
    assert got[:2] == ["multi\nline, with comma", "two\r\nlines"]
    found = [(e.record, e.line, e.raw) for e in errors(out)]
    assert found == [(2, 3, "x,b,2"), (4, 6, "4,d")]
    assert errors(out)[0].error.startswith("column 'id' (BIGINT): expected an integer")
    assert errors(out)[1].error == "expected 3 columns, found 2"
    assert records(out) == 5


def test_csv_record_numbers_skip_blank_lines_and_the_header_line_numbers_do_not() -> None:
    data = b"id,name,n\r\n1,a,1\r\n\r\n\r\n2,b,x\r\n\n3,c,3"
    out = decode("csv", data, {"headers": True})
    assert ids(out) == [1, 3]
    [e] = errors(out)
    assert (e.record, e.line) == (2, 5)
    assert records(out) == 3


def test_csv_records_spanning_block_boundaries_stay_whole() -> None:
    rows = b"".join(b'%d,"line one\nline two of %d",%d\n' % (i, i, i) for i in range(1, 41))
    rows += b"41,x,bad\n42,last,42\n"
    out = decode("csv", rows, block_bytes=50, chunk=13)
    assert ids(out) == [*range(1, 41), 42]
    got = [(r["id"], r["name"]) for d in out for r in d.table.to_pylist()]
    assert got[:40] == [(i, f"line one\nline two of {i}") for i in range(1, 41)]
    [e] = errors(out)
    assert (e.record, e.line) == (41, 81)
    assert records(out) == 42
    assert out[-1].consumed == len(rows)


def test_csv_open_quote_at_the_end_of_a_growing_file_waits_for_more() -> None:
    data = b'1,a,1\n2,"still being\nwritten'
    out = decode("csv", data, final=False)
    assert ids(out) == [1] and errors(out) == []
    assert out[-1].consumed == len(b"1,a,1\n")
    # ... but not forever: a quote open for more than MAX_QUOTED_BYTES is stray.
    data = b'1,a,1\n2,"stray,2\n' + b"3,c,3\n" * (MAX_QUOTED_BYTES // 6 + 1)
    out = decode("csv", data, final=False, chunk=1 << 16)
    assert ids(out)[:2] == [1, 3] and len(ids(out)) == 1 + MAX_QUOTED_BYTES // 6 + 1
    assert [(e.record, e.line) for e in errors(out)] == [(2, 2)]


def test_csv_line_numbers_are_unknown_unless_the_read_starts_at_the_object_start() -> None:
    data = b"1,a,1\n2,b,x\n"
    [e] = errors(decode("csv", data, at_start=False, first_record=11))
    assert (e.record, e.line) == (12, None)
    [e] = errors(decode("csv", data, at_start=False, first_record=11, first_line=30))
    assert (e.record, e.line) == (12, 31)


def test_csv_invalid_utf8_is_a_parse_error_with_the_bytes_escaped() -> None:
    data = b"1,ok,1\n2,bad \xff\xfe,2\n3,fine,3\n"
    out = decode("csv", data)
    assert ids(out) == [1, 3]
    [e] = errors(out)
    # Under errors.tolerance: none the batch fails with this record number and message.
    assert (e.record, e.line) == (2, 2)
    assert e.error.startswith("column 'name' (VARCHAR): expected text, got invalid UTF-8")
    assert e.raw == "2,bad \\xff\\xfe,2"  # the bytes, escaped
    assert records(out) == 3


@pytest.mark.parametrize("delimiter,quote", [(";", "'"), ("\t", '"')])
def test_csv_other_delimiter_and_quote(delimiter: str, quote: str) -> None:
    d, q = delimiter.encode(), quote.encode()
    data = b"1%(d)s%(q)sa%(d)sb%(q)s%(d)s1\n2%(d)s%(q)sopen%(d)s2\n3%(d)sc%(d)s3\n" % {
        b"d": d,
        b"q": q,
    }
    out = decode("csv", data, {"delimiter": delimiter, "quote": quote})
    assert ids(out) == [1, 3]
    assert out[0].table.to_pylist()[0]["name"] == f"a{delimiter}b"
    assert [(e.record, e.line) for e in errors(out)] == [(2, 2)]


# --- JSON --------------------------------------------------------------------------------

PRETTY = b"""{
  "id": 1,
  "name": "a"
}

{
  "id": "two",
  "name": "{not a brace}"
}
{
  "id": 3,
  "n": 3
}
"""


def test_json_pretty_printed_bad_record_is_one_dead_letter() -> None:
    out = decode("json", PRETTY, {"update_format": "raw"})
    assert ids(out) == [1, 3]
    [e] = errors(out)
    assert (e.record, e.line) == (2, 6)
    assert e.raw == '{\n  "id": "two",\n  "name": "{not a brace}"\n}'
    assert (
        e.error
        == "column 'id' (BIGINT): expected an integer from -2^63 to 2^63-1, got the string \"two\""
    )
    assert records(out) == 3


def test_json_broken_record_does_not_swallow_the_next_ones() -> None:
    data = b'{"id": 1}\n{"id": 2, "name": "cut\n{"id": 3}\n\n{"id": 4,\n  "n": 4}\n'
    out = decode("json", data, {"update_format": "raw"})
    assert ids(out) == [1, 3, 4]
    [e] = errors(out)
    assert (e.record, e.line, e.raw) == (2, 2, '{"id": 2, "name": "cut')
    assert records(out) == 4
    # lines: single: every line is a record, so the pretty-printed one is two bad lines.
    out = decode("json", data, {"update_format": "raw", "lines": "single"})
    assert ids(out) == [1, 3]
    assert [(e.record, e.line) for e in errors(out)] == [(2, 2), (4, 5), (5, 6)]
    assert records(out) == 5


def test_json_record_numbers_skip_blank_lines_line_numbers_do_not() -> None:
    data = b'{"id": 1}\n\n\n{"id": 2, "n": "x"}\n   \n{"id": 3}\n'
    out = decode("json", data, {"update_format": "raw", "lines": "single"})
    assert ids(out) == [1, 3]
    [e] = errors(out)
    assert (e.record, e.line) == (2, 4)
    assert e.error.startswith("column 'n' (INT): expected an integer")


def test_json_pretty_records_spanning_block_boundaries_stay_whole() -> None:
    data = b"".join(b'{\n  "id": %d,\n  "n": %d\n}\n' % (i, i) for i in range(1, 31))
    data += b'{\n  "id": 31,\n  "n": "bad"\n}\n'
    out = decode("json", data, {"update_format": "raw"}, block_bytes=40, chunk=11)
    assert ids(out) == list(range(1, 31))
    [e] = errors(out)
    assert (e.record, e.line) == (31, 121)
    assert records(out) == 31
    assert out[-1].consumed == len(data)


def test_json_array_elements_carry_their_line() -> None:
    data = b'[\n  {"id": 1},\n  {"id": 2.5},\n  {"id": 3}\n]\n[{"id": "x"}]'
    out = decode("json", data, {"update_format": "raw", "array": True})
    assert ids(out) == [1, 3]
    assert [(e.record, e.line) for e in errors(out)] == [(2, 3), (4, 6)]
    assert errors(out)[0].raw == '{"id": 2.5}'


def test_csv_unterminated_quote_in_the_last_column_of_the_last_line_is_a_dead_letter() -> None:
    # pyarrow alone reads `2,"open` at the end of the data as the value "open".
    table = TableSpec(
        name="t",
        columns=(
            ColumnSpec(name="id", type=SqlType("BIGINT")),
            ColumnSpec(name="name", type=SqlType("VARCHAR")),
        ),
    )
    cls = FORMATS.get("csv")
    f = cls(cls.Config.model_validate({}), table)
    for data in (b'1,a\n2,"open', b'1,a\n2,"open\n3,c\n'):
        out = list(f.decode(iter([data]), final=True, first_record=1, at_start=True))
        assert [r["name"] for d in out for r in d.table.to_pylist()] == ["a", "c"][
            : records(out) - 1
        ]
        assert [(e.record, e.line, e.raw) for e in errors(out)] == [(2, 2, '2,"open')]


def test_json_line_numbers_are_unknown_unless_the_read_starts_at_the_object_start() -> None:
    data = b'{"id": 1}\n{"id": "x"}\n'
    [e] = errors(decode("json", data, {"update_format": "raw"}, at_start=False, first_record=5))
    assert (e.record, e.line) == (6, None)
    [e] = errors(
        decode("json", data, {"update_format": "raw"}, at_start=False, first_record=5, first_line=9)
    )
    assert (e.record, e.line) == (6, 10)
