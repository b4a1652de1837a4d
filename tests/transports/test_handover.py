"""The hand-over search (``transports/handover.py``) over a partition with holes, and
the sinks' ``column_max`` on a Parquet table; the whole scenario runs against real
PostgreSQL, Kafka and Airflow in ``tests/airflow/test_backfill_then_kafka.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_connectors.catalog import parse_pipeline, sink_of
from airflow_connectors.transports.handover import first_after

#: offset -> the message's column value; offsets 3, 4 and 8 are holes (markers, aborted).
MESSAGES = {0: 10, 1: 11, 2: 12, 5: 13, 6: 14, 7: 15, 9: 16}
END = 10


def probe(offset: int) -> tuple[int, Any] | None:
    at = next((o for o in sorted(MESSAGES) if o >= offset), None)
    return None if at is None else (at, MESSAGES[at])


@pytest.mark.parametrize("value", [9, 10, 12, 13, 15, 16, 99])
def test_first_after_is_the_first_message_greater_than_the_value(value: int) -> None:
    start = first_after(probe, 0, END, value)
    read = [v for o, v in sorted(MESSAGES.items()) if o >= start]
    assert read == [v for v in MESSAGES.values() if v > value]
    assert start == END or (start in MESSAGES or probe(start) is not None)


def test_column_max_of_a_parquet_table(tmp_path: Path) -> None:
    spec = parse_pipeline(
        {
            "pipeline": "shop",
            "tables": {
                "orders": {"columns": {"order_id": "BIGINT NOT NULL", "customer": "VARCHAR"}}
            },
        }
    )
    sink = sink_of(spec.tables[0], pipeline="shop", warehouse=str(tmp_path))
    assert sink.column_max("order_id") is None  # nothing landed yet
    folder = tmp_path / "shop" / "orders"
    folder.mkdir(parents=True)
    for n, ids in enumerate([[1, 7, 3], [5, 2]]):
        data = pa.table({"order_id": pa.array(ids, pa.int64()), "customer": ["c"] * len(ids)})
        pq.write_table(data, folder / f"part-{n}.parquet")
    assert sink.column_max("order_id") == 7
    with pytest.raises(ValueError, match=r"no column 'nope'.*handover\.column"):
        sink.column_max("nope")


@pytest.mark.postgres
def test_column_max_of_a_postgres_table() -> None:
    import uuid

    import psycopg

    server = "postgresql://postgres@127.0.0.1:5432/test"
    schema = f"ac_handover_{uuid.uuid4().hex[:10]}"
    spec = parse_pipeline(
        {
            "pipeline": "shop",
            "tables": {
                "orders": {
                    "columns": {"order_id": "BIGINT NOT NULL"},
                    "sink": {"name": "postgres", "config": {"uri": server, "schema": schema}},
                }
            },
        }
    )
    sink = sink_of(spec.tables[0], pipeline="shop", warehouse="/nonexistent")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        try:
            assert sink.column_max("order_id") is None  # no table yet
            conn.execute(f"CREATE TABLE {schema}.orders (order_id BIGINT NOT NULL)")
            assert sink.column_max("order_id") is None  # no rows
            conn.execute(f"INSERT INTO {schema}.orders VALUES (4), (11), (7)")
            assert sink.column_max("order_id") == 11
            with pytest.raises(ValueError, match=r"no column 'nope'.*handover\.column"):
                sink.column_max("nope")
        finally:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
