"""One rule for values in every format: the same value gives the same outcome whether it
comes as JSON, CSV or Parquet; a value that does not fit its column exactly is a parse
error naming the column and what it takes (see formats/_conform.py)."""

from __future__ import annotations

import datetime as dt
import io
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_connectors.formats import FORMATS
from airflow_connectors.formats.base import Decoded, RecordError
from airflow_connectors.spec import ColumnSpec, SqlType, TableSpec

UTC5 = dt.timezone(dt.timedelta(hours=5))


@dataclass(frozen=True)
class Case:
    type: SqlType
    json: str  # the value as a JSON literal
    csv: str  # the value as a CSV field
    parquet: pa.Array  # the value as a one-row Parquet column
    expect: Any = None  # the stored value; None: a parse error

    def __str__(self) -> str:
        return f"{self.type}<-{self.json}"


def _ts(*args: int, tz: dt.tzinfo | None = None) -> dt.datetime:
    return dt.datetime(*args, tzinfo=tz)  # type: ignore[misc]


T = SqlType
BAD = [
    # Overflow, NaN and infinities: never stored (CSV used to store 1e400 as inf).
    Case(T("DOUBLE"), "1e400", "1e400", pa.array([float("inf")])),
    Case(T("DOUBLE"), "NaN", "NaN", pa.array([float("nan")])),
    Case(T("DOUBLE"), "-Infinity", "-inf", pa.array([float("-inf")])),
    Case(T("REAL"), "1e39", "1e39", pa.array([1e39])),
    # Integers take integers.
    Case(T("BIGINT"), "1.5", "1.5", pa.array([1.5])),
    Case(T("BIGINT"), "1.0", "1.0", pa.array([1.0])),
    Case(T("BIGINT"), "true", "true", pa.array([True])),
    Case(T("TINYINT"), "300", "300", pa.array([300])),
    Case(T("INT"), "2147483648", "2147483648", pa.array([2**31])),
    Case(T("SMALLINT"), "1.00", "1.00", pa.array([Decimal("1.00")], pa.decimal128(5, 2))),
    # Booleans take booleans: Parquet's 5 used to become true.
    Case(T("BOOLEAN"), "5", "5", pa.array([5])),
    Case(T("BOOLEAN"), "1", "1", pa.array([1], pa.int8())),
    # Numbers are never timestamps, dates or times (Parquet int64 used to be microseconds).
    Case(T("TIMESTAMP"), "1767349872", "1767349872", pa.array([1767349872])),
    Case(T("DATE"), "20000", "20000", pa.array([20000], pa.int32())),
    Case(T("TIME"), "5", "5", pa.array([5])),
    # A timestamp with a time of day is not a date (Parquet used to drop the time).
    Case(
        T("DATE"),
        '"2026-01-02 10:11:12"',
        "2026-01-02 10:11:12",
        pa.array([_ts(2026, 1, 2, 10, 11, 12)], pa.timestamp("us")),
    ),
    # Nothing finer than a microsecond.
    Case(
        T("TIMESTAMP"),
        '"2026-01-02 10:11:12.1234567"',
        "2026-01-02 10:11:12.1234567",
        pa.array([1767348672123456700], pa.timestamp("ns")),
    ),
    Case(
        T("TIME"),
        '"10:11:12.1234567"',
        "10:11:12.1234567",
        pa.array([36672123456700], pa.time64("ns")),
    ),
    Case(T("TIME"), '"25:00:00"', "25:00:00", pa.array(["25:00:00"])),
    Case(T("TIME"), '"10:11:12+05:00"', "10:11:12+05:00", pa.array(["10:11:12+05:00"])),
    # DECIMAL: no rounding, no precision overflow (pyarrow's readers stored 1234.50 in a
    # DECIMAL(5, 2)).
    Case(
        T("DECIMAL", 5, 2), "1234.5", "1234.5", pa.array([Decimal("1234.50")], pa.decimal128(10, 2))
    ),
    Case(T("DECIMAL", 5, 2), "1.234", "1.234", pa.array([Decimal("1.234")], pa.decimal128(10, 3))),
    Case(T("DECIMAL", 5, 2), "0.125", "0.125", pa.array([0.125])),
    Case(T("DECIMAL", 5, 2), "123456", "123456", pa.array([123456])),
    Case(T("DECIMAL", 5, 2), "NaN", "NaN", pa.array([float("nan")])),
]
GOOD = [
    # Deliberate conversions, the same in every format.
    Case(
        T("TIMESTAMP"),
        '"2026-01-02T10:11:12+05:00"',
        "2026-01-02T10:11:12+05:00",
        pa.array([_ts(2026, 1, 2, 10, 11, 12, tz=UTC5)], pa.timestamp("us", "+05:00")),
        _ts(2026, 1, 2, 5, 11, 12),
    ),
    Case(
        T("TIMESTAMP"),
        '"2026-01-02T10:11:12.5Z"',
        "2026-01-02T10:11:12.5Z",
        pa.array(
            [_ts(2026, 1, 2, 10, 11, 12, tz=dt.UTC).replace(microsecond=500000)],
            pa.timestamp("ms", "UTC"),
        ),
        _ts(2026, 1, 2, 10, 11, 12).replace(microsecond=500000),
    ),
    Case(
        T("TIMESTAMP"),
        '"2026-01-02"',
        "2026-01-02",
        pa.array([dt.date(2026, 1, 2)]),
        _ts(2026, 1, 2),
    ),
    Case(
        T("DATE"),
        '"2026-01-02"',
        "2026-01-02",
        pa.array([_ts(2026, 1, 2)], pa.timestamp("s")),
        dt.date(2026, 1, 2),
    ),
    Case(
        T("TIME"),
        '"10:11:12.5"',
        "10:11:12.5",
        pa.array([36672500], pa.time32("ms")),
        dt.time(10, 11, 12, 500000),
    ),
    Case(T("DOUBLE"), "5", "5", pa.array([5]), 5.0),
    Case(T("REAL"), "16777217", "16777217", pa.array([16777217]), 16777216.0),
    Case(T("DECIMAL", 5, 2), "1.5", "1.5", pa.array([1.5]), Decimal("1.50")),
    Case(T("DECIMAL", 5, 2), "0.1", "0.1", pa.array([0.1]), Decimal("0.10")),
    Case(
        T("DECIMAL", 5, 2),
        "-999.99",
        "-999.99",
        pa.array([Decimal("-999.99")], pa.decimal128(20, 4)),
        Decimal("-999.99"),
    ),
    Case(T("BIGINT"), "7", "7", pa.array([Decimal("7")], pa.decimal128(10, 0)), 7),
    Case(T("BOOLEAN"), "false", "FALSE", pa.array([False]), False),
    Case(T("VARCHAR"), '"5"', "5", pa.array([b"5"], pa.binary()), "5"),
]


def table_of(t: SqlType) -> TableSpec:
    return TableSpec(
        name="t",
        columns=(
            ColumnSpec(name="id", type=SqlType("BIGINT"), nullable=False),
            ColumnSpec(name="v", type=t),
        ),
    )


def decode_as(fmt: str, case: Case) -> list[Decoded]:
    if fmt == "json":
        data, config = b'{"id": 1, "v": %s}\n' % case.json.encode(), {"update_format": "raw"}
    elif fmt == "csv":
        data, config = b"1,%s\n" % case.csv.encode(), {}
    else:
        buf = io.BytesIO()
        pq.write_table(pa.table({"id": [1], "v": case.parquet}), buf)
        data, config = buf.getvalue(), {}
    cls = FORMATS.get(fmt)
    f = cls(cls.Config.model_validate(config), table_of(case.type))
    return list(f.decode(iter([data]), final=True, first_record=1, at_start=True))


def outcome(out: list[Decoded]) -> tuple[list[Any], list[RecordError]]:
    return [r["v"] for d in out for r in d.table.to_pylist()], [e for d in out for e in d.errors]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_a_value_that_does_not_fit_is_a_parse_error_in_every_format(case: Case) -> None:
    for fmt in ("json", "csv", "parquet"):
        stored, errors = outcome(decode_as(fmt, case))
        assert stored == [], f"{fmt} stored {stored}"
        [error] = errors
        assert error.record == 1
        assert error.error.startswith(f"column 'v' ({case.type}): expected "), (fmt, error.error)
        assert error.line == (None if fmt == "parquet" else 1)


@pytest.mark.parametrize("case", GOOD, ids=str)
def test_documented_conversions_are_the_same_in_every_format(case: Case) -> None:
    for fmt in ("json", "csv", "parquet"):
        stored, errors = outcome(decode_as(fmt, case))
        assert errors == [], f"{fmt}: {errors}"
        assert stored == [case.expect], fmt


def test_error_says_what_the_column_takes_and_what_it_got() -> None:
    def message(fmt: str, case: Case) -> str:
        return outcome(decode_as(fmt, case))[1][0].error

    tiny = Case(T("TINYINT"), "300", "300", pa.array([300]))
    expected = "column 'v' (TINYINT): expected an integer from -128 to 127, got "
    assert message("json", tiny) == expected + "the number 300"
    assert message("csv", tiny) == expected + "'300'"
    assert message("parquet", tiny) == expected + "the integer 300"
    boolean = Case(T("BOOLEAN"), "5", "5", pa.array([5]))
    assert (
        message("parquet", boolean)
        == "column 'v' (BOOLEAN): expected true or false, got the integer 5"
    )
    date = BAD[15]
    assert message("parquet", date) == (
        "column 'v' (DATE): expected a date (YYYY-MM-DD), got the timestamp "
        "2026-01-02T10:11:12 (it has a time of day)"
    )
    inf = BAD[0]
    assert (
        message("csv", inf) == "column 'v' (DOUBLE): expected a finite number, got the number inf"
    )


def test_bad_values_in_a_block_are_isolated_and_good_rows_land() -> None:
    # The fast path (one pyarrow call per block) must not let a bad value through either.
    rows = [
        b'{"id": %d, "v": %s}' % (i, b"NaN" if i % 3 == 0 else b"%d.5" % i) for i in range(1, 10)
    ]
    cls = FORMATS.get("json")
    f = cls(cls.Config.model_validate({"update_format": "raw"}), table_of(T("DOUBLE")))
    out = list(f.decode(iter([b"\n".join(rows)]), final=True, first_record=1, at_start=True))
    assert [r["id"] for d in out for r in d.table.to_pylist()] == [1, 2, 4, 5, 7, 8]
    assert [(e.record, e.line) for d in out for e in d.errors] == [(3, 3), (6, 6), (9, 9)]


TIMESTAMP_TEXTS = [
    "2026-01-02T10:11:12",
    "2026-01-02 10:11:12.5",
    "2026-01-02",
    "2026-01-02T10",
    "2026-01-02T10:11",
    "2026-01-02T10:11:12.123456",
    "2026-01-02T10:11:12.1234567",
    "2026-01-02T10:11:12Z",
    "2026-01-02 10:11Z",
    "2026-01-02T10:11:12+01:00",
    "2026-01-02T10:11:12-0530",
    "2026-01-02T10:11:12+01",
    "2026-01-02T10:11:12.5+01:00",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    "0001-01-01T00:00:00",
    "2026-02-30T00:00:00",
    "20260102",
    " 2026-01-02",
    "2026-01-02T25:00:00",
    "2026-01-02T10:11:12 +01:00",
]


@pytest.mark.parametrize("text", TIMESTAMP_TEXTS)
def test_json_reads_a_timestamp_text_as_the_text_rule_does(text: str) -> None:
    # Issue 27: pyarrow's JSON reader parses a naive TIMESTAMP column itself (no string
    # column built and cast again); it must take and refuse what CSV's text rule does,
    # a zone offset converted to UTC.
    case = Case(T("TIMESTAMP"), f'"{text}"', text, pa.array([text]))
    json_rows, json_errors = outcome(decode_as("json", case))
    csv_rows, csv_errors = outcome(decode_as("csv", case))
    assert json_rows == csv_rows
    assert [e.record for e in json_errors] == [e.record for e in csv_errors]
