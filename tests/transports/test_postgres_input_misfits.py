"""A postgres_input value that does not fit its table column is reported with that
value and its row (issue 22, item 13), against the PostgreSQL server on 127.0.0.1:5432.

The engine converts the transport's record batches to the table's columns many rows at a
time; the error used to quote the column's first value instead of the one that failed:
"column 'id' (INT): expected an integer from -2147483648 to 2147483647, got the integer
1", "DECIMAL(10, 2): ... got '1.50'".
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_connectors.engine.batch import BatchFailed
from airflow_connectors.testing.conformance import Connector, Source

pytestmark = [pytest.mark.postgres, pytest.mark.sources]

BASE = "postgresql://postgres@127.0.0.1:5432/test"


def _execute(*statements: str) -> None:
    import psycopg

    with psycopg.connect(BASE, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)


@pytest.fixture(scope="module")
def schema() -> Iterator[str]:
    name = f"ac_pgmis_{uuid.uuid4().hex[:10]}"
    _execute(f"CREATE SCHEMA {name}")
    yield name
    _execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def _failure(tmp_path: Path, query: str, columns: dict[str, str]) -> str:
    source = Source(
        transport="postgres_input",
        config={"uri": BASE, "query": query, "partition_column": "k"},
        columns=columns,
        records=[],
        key_column="k",
        connector={"tasks_max": 1},
    )
    c = Connector(source, tmp_path)
    try:
        with pytest.raises(BatchFailed) as failed:
            c.drain()
        assert c.table().num_rows == 0
    finally:
        c.close()
    return str(failed.value)


def test_an_integer_out_of_range_is_quoted_with_its_row(schema: str, tmp_path: Path) -> None:
    _execute(
        f"CREATE TABLE {schema}.ints (k int, id bigint)",
        f"INSERT INTO {schema}.ints VALUES (1, 1), (2, 3000000000), (3, 5)",
    )
    message = _failure(tmp_path, f"TABLE {schema}.ints", {"k": "INT NOT NULL", "id": "INT"})
    assert (
        "cannot convert the records of snapshot/0000: column 'id' (INT): expected an integer "
        "from -2147483648 to 2147483647, got the integer 3000000000 in row 2 of 3"
    ) in message, message
    assert "got the integer 1 " not in message


def test_a_decimal_too_wide_is_quoted_with_its_row(schema: str, tmp_path: Path) -> None:
    _execute(
        f"CREATE TABLE {schema}.amounts (k int, amount numeric)",
        f"INSERT INTO {schema}.amounts VALUES (1, 1.50), (2, 2.25), (3, 123456789.5)",
    )
    message = _failure(
        tmp_path, f"TABLE {schema}.amounts", {"k": "INT NOT NULL", "amount": "DECIMAL(10, 2)"}
    )
    assert (
        "column 'amount' (DECIMAL(10, 2)): expected a number with at most 8 digits before "
        "the decimal point and 2 after it, got '123456789.5' in row 3 of 3"
    ) in message, message
    assert "'1.50'" not in message
