"""A value that does not fit its column is quoted with its row, never another value of
the column (issue 22, item 13): :func:`conform` on several rows at once, as the engine
converts an integrated transport's record batches, used to quote the column's first
value ("expected an integer from -2147483648 to 2147483647, got the integer 1"). Real
pyarrow casts; formats isolate records one by one, so their messages stay unchanged."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from airflow_connectors.formats import FORMATS
from airflow_connectors.formats._conform import RowError, conform
from airflow_connectors.spec import ColumnSpec, SqlType, TableSpec

INT_RANGE = "expected an integer from -2147483648 to 2147483647"
DECIMAL_10_2 = "expected a number with at most 8 digits before the decimal point and 2 after it"


def _table(t: SqlType, *, nullable: bool = True) -> TableSpec:
    return TableSpec(name="t", columns=(ColumnSpec(name="v", type=t, nullable=nullable),))


def _error(t: SqlType, values: pa.Array, *, nullable: bool = True) -> RowError:
    spec = _table(t, nullable=nullable)
    with pytest.raises(RowError) as raised:
        conform(pa.table({"v": values}), spec, spec.arrow_schema())
    return raised.value


@pytest.mark.parametrize(
    ("t", "values", "message", "row"),
    [
        (
            SqlType("INT"),
            pa.array([1, 3_000_000_000]),
            f"column 'v' (INT): {INT_RANGE}, got the integer 3000000000 in row 2 of 2",
            1,
        ),
        (
            SqlType("INT"),
            pa.array([None, 7, -1, -3_000_000_000, 4_000_000_000, 2]),
            f"column 'v' (INT): {INT_RANGE}, got the integer -3000000000 in row 4 of 6",
            3,
        ),
        (  # PostgreSQL numeric arrives as text
            SqlType("DECIMAL", 10, 2),
            pa.array(["1.50", None, "123456789.5"]),
            f"column 'v' (DECIMAL(10, 2)): {DECIMAL_10_2}, got '123456789.5' in row 3 of 3",
            2,
        ),
        (
            SqlType("DECIMAL", 10, 2),
            pa.array([Decimal("1.50"), Decimal("123456789.5")], pa.decimal128(12, 2)),
            f"column 'v' (DECIMAL(10, 2)): {DECIMAL_10_2}, got the decimal 123456789.50 "
            "in row 2 of 2",
            1,
        ),
        (
            SqlType("DECIMAL", 5, 2),
            pa.array([0.5, 0.125]),
            "column 'v' (DECIMAL(5, 2)): expected a number with at most 3 digits before the "
            "decimal point and 2 after it, got the number 0.125 in row 2 of 2 (it would be "
            "rounded)",
            1,
        ),
        (
            SqlType("DATE"),
            pa.array([dt.datetime(2026, 1, 2), dt.datetime(2026, 1, 3, 4)], pa.timestamp("us")),
            "column 'v' (DATE): expected a date (YYYY-MM-DD), got the timestamp "
            "2026-01-03T04:00:00 in row 2 of 2 (it has a time of day)",
            1,
        ),
        (
            SqlType("DOUBLE"),
            pa.array([1.0, 2.0, float("nan")]),
            "column 'v' (DOUBLE): expected a finite number, got the number nan in row 3 of 3",
            2,
        ),
        (
            SqlType("BOOLEAN"),
            pa.array([None, 5, 6]),
            "column 'v' (BOOLEAN): expected true or false, got the integer 5 in row 2 of 3",
            1,
        ),
    ],
)
def test_the_error_quotes_the_value_that_failed_and_its_row(
    t: SqlType, values: pa.Array, message: str, row: int
) -> None:
    error = _error(t, values)
    assert str(error) == message
    assert error.row == row


def test_a_missing_value_of_a_not_null_column_names_its_row() -> None:
    error = _error(SqlType("INT"), pa.array([1, 2, None]), nullable=False)
    assert str(error) == "column 'v' is NOT NULL but row 3 of 3 has no value for it"
    assert error.row == 2
    alone = _error(SqlType("INT"), pa.array([None], pa.int64()), nullable=False)
    assert str(alone) == "column 'v' is NOT NULL but the record has no value for it"


def test_a_bad_value_among_many_rows_is_found_at_arrow_speed() -> None:
    n = 1_000_000
    values = pa.chunked_array([pa.array(range(n // 2)), pa.array(range(n // 2, n))])
    values = pa.chunked_array([*values.chunks[:1], pa.array([*range(n // 2, n - 1), 2**40])])
    error = _error(SqlType("INT"), values)  # type: ignore[arg-type]
    assert str(error) == f"column 'v' (INT): {INT_RANGE}, got the integer {2**40} in row {n} of {n}"


def test_formats_still_name_the_record_not_a_row() -> None:
    """The JSON format isolates the bad record: its message stays the record's own."""
    cls = FORMATS.get("json")
    for t, data, got in [
        (SqlType("INT"), b'{"v": 1}\n{"v": 3000000000}\n', "the number 3000000000"),
        (SqlType("DECIMAL", 10, 2), b'{"v": 1.50}\n{"v": 123456789.5}\n', "the decimal"),
    ]:
        fmt = cls(cls.Config.model_validate({"update_format": "raw"}), _table(t))
        out = list(fmt.decode(iter([data]), final=True, first_record=1, at_start=True))
        [error] = [e for d in out for e in d.errors]
        assert error.record == 2 and got in error.error and " in row " not in error.error
        assert [r["v"] for d in out for r in d.table.to_pylist()] in ([1], [Decimal("1.50")])
