"""Formats decode with pyarrow into the table schema; bad records are isolated with their
record number and raw text while good records still decode."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_connectors.formats import FORMATS
from airflow_connectors.formats.base import Decoded
from airflow_connectors.spec import ColumnSpec, SqlType, TableSpec

TABLE = TableSpec(
    name="t",
    columns=(
        ColumnSpec(name="id", type=SqlType("BIGINT"), nullable=False),
        ColumnSpec(name="name", type=SqlType("VARCHAR")),
        ColumnSpec(name="amount", type=SqlType("DECIMAL", 10, 2)),
        ColumnSpec(name="day", type=SqlType("DATE")),
        ColumnSpec(name="at", type=SqlType("TIME")),
        ColumnSpec(name="ts", type=SqlType("TIMESTAMP")),
        ColumnSpec(name="ok", type=SqlType("BOOLEAN")),
        ColumnSpec(name="small", type=SqlType("TINYINT")),
    ),
)


def decode(
    fmt: str, data: bytes, config: dict | None = None, *, final: bool = True, first: int = 1
) -> list[Decoded]:
    cls = FORMATS.get(fmt)
    f = cls(cls.Config.model_validate(config or {}), TABLE)
    chunks = [data[i : i + 7] for i in range(0, len(data), 7)]  # chunk boundaries inside records
    return list(f.decode(iter(chunks), final=final, first_record=first, at_start=True))


def rows(out: list[Decoded]) -> list[dict]:
    return [r for d in out for r in d.table.to_pylist()]


def errs(out: list[Decoded]) -> list[tuple[int, str, str]]:
    return [(e.record, e.error, e.raw) for d in out for e in d.errors]


GOOD = b'{"id": 1, "name": "a", "amount": 1.5, "day": "2026-01-02", "at": "10:11:12", "ts": "2026-01-02 10:11:12", "ok": true, "small": 3}\n'


def test_json_raw_all_types() -> None:
    out = decode("json", GOOD + b'{"id": 2}\n', {"update_format": "raw"})
    assert out[0].table.schema.field("ts").type == pa.timestamp("us")
    assert rows(out) == [
        {
            "id": 1,
            "name": "a",
            "amount": Decimal("1.50"),
            "day": dt.date(2026, 1, 2),
            "at": dt.time(10, 11, 12),
            "ts": dt.datetime(2026, 1, 2, 10, 11, 12),
            "ok": True,
            "small": 3,
        },
        {
            "id": 2,
            "name": None,
            "amount": None,
            "day": None,
            "at": None,
            "ts": None,
            "ok": None,
            "small": None,
        },
    ]
    assert out[-1].consumed == len(GOOD) + len(b'{"id": 2}\n')


def test_json_insert_delete_default_and_errors() -> None:
    data = b'{"insert": {"id": 1}}\n{"delete": {"id": 1}}\n{"id": 3}\n{"insert": {"id": 4}}\n'
    out = decode("json", data)
    assert [r["id"] for r in rows(out)] == [1, 4]
    found = errs(out)
    assert [e[0] for e in found] == [2, 3]
    assert "table t, which has no primary key" in found[0][1]  # a delete: never appended
    assert 'update_format": "raw"' in found[1][1]


def test_json_bad_records_isolated_with_numbers() -> None:
    lines = [b'{"id": %d, "small": 1}' % i for i in range(1, 101)]
    lines[9] = b'{"id": "ten"}'
    lines[49] = b'{"id": 50, "small": 300}'  # does not fit TINYINT
    lines[79] = b'{"name": "no id"}'  # NOT NULL
    lines[89] = b'{"id": 90, '  # broken JSON
    out = decode("json", b"\n".join(lines) + b"\n", {"update_format": "raw"}, first=1001)
    assert len(rows(out)) == 96
    found = errs(out)
    assert [e[0] for e in found] == [1010, 1050, 1080, 1090]
    assert found[0][2] == '{"id": "ten"}'
    assert found[1][1] == (
        "column 'small' (TINYINT): expected an integer from -128 to 127, got the number 300"
    )
    assert "NOT NULL" in found[2][1] and "'id'" in found[2][1]
    assert sum(d.records for d in out) == 100


def test_json_multiline_records_and_arrays() -> None:
    pretty = b'{\n  "id": 1,\n  "name": "x"\n}\n{\n  "id": 2\n}\n'
    assert [r["id"] for r in rows(decode("json", pretty, {"update_format": "raw"}))] == [1, 2]
    arr = b'[{"id": 1}, {"id": 2}]\n[{"id": 3}]'
    assert [
        r["id"] for r in rows(decode("json", arr, {"update_format": "raw", "array": True}))
    ] == [1, 2, 3]
    bad = decode("json", b'{"id": 1}', {"update_format": "raw", "array": True})
    assert "expected a JSON array" in errs(bad)[0][1]


def test_json_partial_last_line_held_back_unless_final() -> None:
    data = b'{"id": 1}\n{"id": 2}\n{"id": 3'
    out = decode("json", data, {"update_format": "raw"}, final=False)
    assert [r["id"] for r in rows(out)] == [1, 2]
    assert out[-1].consumed == len(b'{"id": 1}\n{"id": 2}\n')


def test_csv_types_headers_nulls_and_errors() -> None:
    data = b"id,name,amount,day,at,ts,ok,small\n1,a,1.5,2026-01-02,10:11:12,2026-01-02 10:11:12,true,3\n2,,,,,,,\nx,b,,,,,,\n4,c\n5,d,,,,,,\n"
    out = decode("csv", data, {"headers": True})
    assert [r["id"] for r in rows(out)] == [1, 2, 5]
    assert rows(out)[0]["ts"] == dt.datetime(2026, 1, 2, 10, 11, 12)
    assert rows(out)[1]["name"] == ""  # empty is NULL for non-strings only, as in Feldera
    assert rows(out)[1]["amount"] is None
    found = errs(out)
    assert [e[0] for e in found] == [3, 4]
    assert found[0][1] == "column 'id' (BIGINT): expected an integer from -2^63 to 2^63-1, got 'x'"
    assert found[1][1] == "expected 8 columns, found 2"


def test_csv_delimiter_and_quote() -> None:
    out = decode("csv", b"1;'a;b';;;;;;\n", {"delimiter": ";", "quote": "'"})
    assert rows(out)[0]["name"] == "a;b"


def test_parquet_by_name_and_cast_errors() -> None:
    buf = io.BytesIO()
    pq.write_table(pa.table({"small": [1, 2, 500], "id": [1, 2, 3], "extra": ["x", "y", "z"]}), buf)
    out = decode("parquet", buf.getvalue())
    assert [(r["id"], r["small"]) for r in rows(out)] == [(1, 1), (2, 2)]
    ((record, message, raw),) = errs(out)
    assert record == 3 and "small" in message and '"id": 3' in raw


@pytest.mark.parametrize("fmt,config", [("json", {"delimiter": ";"}), ("csv", {"delimiter": ";;"})])
def test_format_config_rejects_bad_options(fmt: str, config: dict) -> None:
    cls = FORMATS.get(fmt)
    with pytest.raises(ValueError):
        cls.Config.model_validate(config)


def test_json_invalid_utf8_is_a_parse_error_with_raw_bytes_escaped() -> None:
    data = b'{"id": 1, "name": "ok"}\n{"id": 2, "name": "bad \xff\xfe"}\n{"id": 3}\n'
    for config in ({"update_format": "raw"}, {"update_format": "raw", "lines": "single"}):
        out = decode("json", data, config)
        assert [r["id"] for r in rows(out)] == [1, 3]
        [(number, error, raw)] = errs(out)
        assert number == 2 and "invalid UTF-8" in error
        assert raw == '{"id": 2, "name": "bad \\xff\\xfe"}'  # the bytes, escaped
    array = decode("json", b'[{"id": 1, "name": "\xff"}]', {"update_format": "raw", "array": True})
    assert rows(array) == [] and "invalid UTF-8" in errs(array)[0][1]


@pytest.mark.parametrize(
    "data",
    [b' null \r\n{"id": 1}\n', b'{"id": 1}\r\n\tnull\r\n', b'{"id": 1}\nnull'],
    ids=["first-line-blanks-crlf", "tab-crlf", "last-line-no-newline"],
)
def test_json_bare_null_line_anywhere_is_its_records_dead_letter(data: bytes) -> None:
    out = decode("json", data, {"update_format": "raw", "lines": "single"})
    assert [r["id"] for r in rows(out)] == [1]
    [(number, error, _)] = errs(out)
    assert "expected a JSON object per record, got null" in error
    assert number == (1 if data.lstrip().startswith(b"null") else 2)


@pytest.mark.parametrize("bare", [b"null", b"5", b'"x"', b"[]", b"true"])
def test_json_record_that_is_not_an_object_is_a_parse_error(bare: bytes) -> None:
    # A bare null at the start of a block crashed pyarrow's reader (the whole worker).
    for data in (bare + b'\n{"id": 1}\n', b'{"id": 1}\n' + bare + b"\n"):
        out = decode("json", data, {"update_format": "raw"})
        assert [r["id"] for r in rows(out)] == [1]
        [(number, error, raw)] = errs(out)
        assert "expected a JSON object per record" in error and raw == bare.decode()
        assert number == (1 if data.startswith(bare) else 2)


def test_csv_block_checks_agree_whatever_their_window() -> None:
    """The quote and hex checks read a block in cache-sized windows: a quote pair or a
    ``0x`` across a window's edge is judged as in one pass over the block."""
    import random

    from airflow_connectors.formats.csv_format import _hex_prefix, _Syntax

    syntax = _Syntax(",", '"', 3)
    rng = random.Random(7)
    alphabet = b'ab0xX,"\n'
    for _ in range(300):
        block = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        quotes, hexed = syntax.quotes_in_place(block, 1 << 20), _hex_prefix(block, 1 << 20)
        for window in (1, 2, 3, 5, 8):
            assert syntax.quotes_in_place(block, window) == quotes, (block, window)
            assert _hex_prefix(block, window) == hexed, (block, window)
    assert syntax.quotes_in_place(b'1,"a",2\n3,"b""c",4\n', 4)
    assert not syntax.quotes_in_place(b'1,"a"x,2\n', 4)  # text after a closing quote
    assert not syntax.quotes_in_place(b'1,a"b,2\n', 4)  # a stray quote inside a field


@pytest.mark.parametrize("lines", ["single", "multiple"])
def test_json_bare_null_into_nullable_columns_is_a_dead_letter_and_an_empty_object_a_row(
    lines: str,
) -> None:
    """Into columns that are all nullable pyarrow reads a bare ``null`` as a row of
    nulls, as it reads ``{}``: the null is the record's dead letter, the empty object a
    row of NULLs."""
    table = TableSpec(
        name="t",
        columns=(
            ColumnSpec(name="id", type=SqlType("BIGINT")),
            ColumnSpec(name="name", type=SqlType("VARCHAR")),
        ),
    )
    cls = FORMATS.get("json")
    data = b'{"id": 1, "name": "null"}\n{}\nnull\n{"id": 2}\n'
    for block in (len(data), 8):  # the whole text in one block, or record by record
        f = cls(cls.Config.model_validate({"update_format": "raw", "lines": lines}), table)
        f.block_bytes = block
        out = list(f.decode(iter([data]), final=True, first_record=1, at_start=True))
        assert rows(out) == [
            {"id": 1, "name": "null"},
            {"id": None, "name": None},
            {"id": 2, "name": None},
        ]
        [(number, error, raw)] = errs(out)
        assert number == 3 and raw == "null"
        assert "expected a JSON object per record, got null" in error


def test_line_ends_are_counted_as_bytes_count_does() -> None:
    """count_newlines counts large spans vectorised over windows: the same answer as
    ``bytes.count`` for any span, across window edges too."""
    import random

    from airflow_connectors.formats.base import count_newlines

    rng = random.Random(3)
    for n in (0, 1, 10, 20_000, 70_000, 600_000):
        data = bytes(rng.choice(b"ab\n") for _ in range(n))
        for start, end in ((0, None), (5, n - 3), (100, 50_000), (0, 10**9), (1000, 300_001)):
            if end is not None and end < start:
                continue
            want = data.count(b"\n", start, len(data) if end is None else end)
            assert count_newlines(data, start, end) == want, (n, start, end)
