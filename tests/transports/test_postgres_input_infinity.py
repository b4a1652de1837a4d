"""postgres_input and PostgreSQL's ``infinity``/``-infinity`` DATE and TIMESTAMP values,
against the PostgreSQL server on 127.0.0.1:5432 (database ``test``), read by the real
ADBC driver and the engine's worker code (issue 22, item 13).

The driver reads them as values near year -290278 (timestamps) and -5877611 (dates),
which used to land in the table as such, both signs alike. Now ``infinity: error`` (the
default) fails the batch naming the column, the value and the row; ``null`` stores NULL;
``clamp`` the column type's greatest or least value.

Each module run works in a schema of its own (``ac_pginf_<random>``), dropped at the end.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_connectors.engine.batch import BatchFailed
from airflow_connectors.testing.conformance import Connector, Source
from airflow_connectors.transports import Cursor

pytestmark = [pytest.mark.postgres, pytest.mark.sources]

BASE = "postgresql://postgres@127.0.0.1:5432/test"
#: ``ts`` and ``tz`` from timestamp and timestamptz, ``d`` from a date, ``d_ts`` a date
#: into a TIMESTAMP column, ``ts_d`` a timestamp (at midnight) into a DATE column.
COLUMNS = {
    "k": "BIGINT NOT NULL",
    "ts": "TIMESTAMP",
    "tz": "TIMESTAMP",
    "d": "DATE",
    "d_ts": "TIMESTAMP",
    "ts_d": "DATE",
}
#: What the ADBC driver reads infinity and -infinity as (microseconds since 1970, days).
TIMESTAMP_INFINITY = {"infinity": -9222425352054775809, "-infinity": -9222425352054775808}
DATE_INFINITY = {"infinity": -2147472692, "-infinity": -2147472691}
TS_MIN, TS_MAX = dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
D_MIN, D_MAX = dt.date(1, 1, 1), dt.date(9999, 12, 31)


def _execute(*statements: str) -> None:
    import psycopg

    with psycopg.connect(BASE, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)


@pytest.fixture(scope="module")
def source_table() -> Iterator[str]:
    """Rows 1 (ordinary), 2 (infinity everywhere), 3 (-infinity everywhere), 4 (NULLs)."""
    schema = f"ac_pginf_{uuid.uuid4().hex[:10]}"
    table = f"{schema}.events"
    _execute(
        f"CREATE SCHEMA {schema}",
        f"CREATE TABLE {table} (k bigint PRIMARY KEY, ts timestamp, tz timestamptz, d date,"
        " d_ts date, ts_d timestamp)",
        f"INSERT INTO {table} VALUES"
        " (1, '2026-01-02 03:04:05', '2026-01-02 03:04:05+00', '2026-01-02', '2026-01-02',"
        "  '2026-01-02'),"
        " (2, 'infinity', 'infinity', 'infinity', 'infinity', 'infinity'),"
        " (3, '-infinity', '-infinity', '-infinity', '-infinity', '-infinity'),"
        " (4, NULL, NULL, NULL, NULL, NULL)",
    )
    yield table
    _execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _connector(
    tmp_path: Path, table: str, name: str, *, errors: str = "none", **config: Any
) -> Connector:
    source = Source(
        transport="postgres_input",
        config={"uri": BASE, "query": f"TABLE {table}", **config},
        columns=COLUMNS,
        records=[],
        key_column="k",
        connector={"tasks_max": 1, "errors": {"tolerance": errors}},
    )
    return Connector(source, tmp_path / name)


def _rows(table: pa.Table) -> dict[int, dict[str, Any]]:
    return {r["k"]: r for r in table.sort_by("k").to_pylist()}


def test_the_driver_reads_infinity_as_these_values(source_table: str) -> None:
    """The sentinels the transport looks for are what the real driver yields."""
    import adbc_driver_postgresql.dbapi as adbc

    from airflow_connectors.transports import postgres_input

    assert postgres_input.TIMESTAMP_INFINITY == TIMESTAMP_INFINITY
    assert postgres_input.DATE_INFINITY == DATE_INFINITY

    with adbc.connect(BASE) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT ts, tz, d FROM {source_table} WHERE k IN (2, 3) ORDER BY k")
        got = cur.fetch_arrow_table()
    for name in ("ts", "tz"):
        assert got.column(name).cast(pa.int64()).to_pylist() == [
            TIMESTAMP_INFINITY["infinity"],
            TIMESTAMP_INFINITY["-infinity"],
        ]
    assert got.column("d").cast(pa.int32()).to_pylist() == [
        DATE_INFINITY["infinity"],
        DATE_INFINITY["-infinity"],
    ]


def test_infinity_is_an_error_of_its_row_by_default(source_table: str, tmp_path: Path) -> None:
    c = _connector(tmp_path, source_table, "none", partition_column="k")
    try:
        with pytest.raises(BatchFailed) as failed:
            c.drain()
        message = str(failed.value)
        assert "\n" not in message
        # Ranges are read in k order: row k = 2 is the range's second record.
        assert message.startswith(
            f"connector {c.ref}: record 2 of snapshot/0000: column 'ts' holds infinity, which "
            "TIMESTAMP cannot hold; set the transport's infinity: null (store NULL) or clamp "
            "(store the type's greatest or least value), or map it in the query "
            '(NULLIF(ts, \'infinity\')); raw text: \'{"k": 2, "ts": "infinity"'
        ), message
        assert message.endswith(
            "The batch was not committed. Fix the source, or set errors.tolerance: all to "
            "send bad records to t__errors"
        ), message
        # Nothing landed: never a year -290278.
        assert c.table().num_rows == 0
        assert c.status().total_records == 0
    finally:
        c.close()


def test_infinity_is_its_rows_dead_letter_under_tolerance_all(
    source_table: str, tmp_path: Path
) -> None:
    from airflow_connectors.sinks._fs import parquet_dataset

    c = _connector(tmp_path, source_table, "all", errors="all", partition_column="k")
    try:
        c.drain()
        assert sorted(c.table().column("k").to_pylist()) == [1, 4]
        dataset = parquet_dataset(c.ctx.sink().location("errors"))
        assert dataset is not None
        dead = dataset.to_table().sort_by("record_number").to_pylist()
        assert [(d["source_key"], d["record_number"]) for d in dead] == [
            ("snapshot/0000", 2),
            ("snapshot/0000", 3),
        ]
        assert dead[0]["error"].startswith("column 'ts' holds infinity, which TIMESTAMP")
        assert dead[1]["error"].startswith("column 'ts' holds -infinity, which TIMESTAMP")
        assert '"d": "-infinity"' in dead[1]["raw_text"]
        st = c.status()
        assert st.total_records == 2 and st.num_parse_errors == 2
        # The range is read to its end: nothing is read again.
        assert not c.discover().batch_ids
    finally:
        c.close()


def test_minus_infinity_alone_names_its_sign(source_table: str, tmp_path: Path) -> None:
    c = _connector(
        tmp_path,
        source_table,
        "neg",
        query=f"SELECT * FROM {source_table} WHERE k <> 2",
        partition_column="k",
    )
    try:
        with pytest.raises(BatchFailed) as failed:
            c.drain()
        message = str(failed.value)
        assert (
            "record 2 of snapshot/0000: column 'ts' holds -infinity, which TIMESTAMP "
            "cannot hold;" in message
        ), message
        assert "NULLIF(ts, '-infinity')" in message and '{"k": 3' in message
    finally:
        c.close()


def test_infinity_null_stores_null(source_table: str, tmp_path: Path) -> None:
    c = _connector(tmp_path, source_table, "null", infinity="null")
    try:
        c.drain()
        rows = _rows(c.table())
        assert rows[1] == {
            "k": 1,
            "ts": dt.datetime(2026, 1, 2, 3, 4, 5),
            "tz": dt.datetime(2026, 1, 2, 3, 4, 5),
            "d": dt.date(2026, 1, 2),
            "d_ts": dt.datetime(2026, 1, 2),
            "ts_d": dt.date(2026, 1, 2),
        }
        for k in (2, 3, 4):
            assert rows[k] == {"k": k, **dict.fromkeys(list(COLUMNS)[1:])}
    finally:
        c.close()


def test_infinity_clamp_stores_the_types_greatest_and_least_values(
    source_table: str, tmp_path: Path
) -> None:
    c = _connector(tmp_path, source_table, "clamp", infinity="clamp")
    try:
        c.drain()
        rows = _rows(c.table())
        assert rows[2] == {
            "k": 2,
            "ts": TS_MAX,
            "tz": TS_MAX,
            "d": D_MAX,
            "d_ts": TS_MAX,
            "ts_d": D_MAX,
        }
        assert rows[3] == {
            "k": 3,
            "ts": TS_MIN,
            "tz": TS_MIN,
            "d": D_MIN,
            "d_ts": TS_MIN,
            "ts_d": D_MIN,
        }
        assert rows[1]["ts"] == dt.datetime(2026, 1, 2, 3, 4, 5)
        assert rows[4] == {"k": 4, **dict.fromkeys(list(COLUMNS)[1:])}
    finally:
        c.close()


def test_infinity_setting_is_validated(source_table: str, tmp_path: Path) -> None:
    from airflow_connectors.transports.postgres_input import PostgresInputConfig

    assert PostgresInputConfig.model_fields["infinity"].default == "error"
    with pytest.raises(ValueError, match="infinity"):
        PostgresInputConfig.model_validate({"uri": BASE, "query": "SELECT 1", "infinity": "max"})
    c = _connector(tmp_path, source_table, "plan", infinity="clamp")
    try:
        assert [i.key for i in c.list_work(Cursor())] == ["snapshot/0000"]
    finally:
        c.close()
