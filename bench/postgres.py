#!/usr/bin/env python
"""PostgreSQL snapshot benchmark: ``postgres_input`` end to end against the usual ways
of reading a table from Python and Spark, on the same 1M-row table.

Creates a table in a schema of its own (``ac_pgin_bench_<random>``, dropped at the end)
on ``--uri`` (default: the local server, database ``test``) with ``--rows`` rows of
``id BIGINT, user_name TEXT, amount FLOAT8, qty INT, ts TIMESTAMP, flag BOOLEAN, note
TEXT``, then times, per round (interleaved, after an untimed warm-up of each):

* ``engine tasks_max=N``: ``EmbeddedRunner(spec).run()`` of a ``postgres_input``
  snapshot (``partition_column: id``) into the Parquet table, on one ``local[2]``
  SparkSession; a fresh state store and warehouse each round. The embedded runner runs
  the N range batches one after another (under Airflow they are N parallel tasks);
  ``tasks_max=1 partitions=2`` is one batch of two ranges, two Spark tasks side by side;
* ``spark jdbc``: ``spark.read.jdbc`` (``partitionColumn=id``, 2 partitions) written
  to Parquet, when the PostgreSQL JDBC jar is already on this machine (``~/.m2``,
  ``~/.ivy2``, ``/usr/share/java``; never downloaded);
* ``adbc fetch``: the ADBC driver's ``fetch_record_batch()`` of the whole table into
  Arrow, no Spark, no Parquet (what one range read costs the engine);
* ``psycopg copy``: psycopg 3 ``COPY (SELECT ...) TO STDOUT (FORMAT BINARY)`` with the
  rows decoded to Python tuples (``copy.rows()``); ``psycopg copy bytes`` only moves
  the bytes (the transfer floor);
* ``pandas.read_sql``: into a DataFrame through SQLAlchemy + psycopg.

Prints rows/s per path (median of the rounds). Row counts are checked outside the
timed sections. Exit status 0 unless a count is wrong.

Usage: ``.venv/bin/python bench/postgres.py [--rows 1000000] [--rounds 2]``
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_URI = "postgresql://postgres@127.0.0.1:5432/test"
COLUMNS = {
    "id": "BIGINT NOT NULL",
    "user_name": "VARCHAR",
    "amount": "DOUBLE",
    "qty": "INT",
    "ts": "TIMESTAMP",
    "flag": "BOOLEAN",
    "note": "VARCHAR",
}


def jdbc_jar() -> str | None:
    """A PostgreSQL JDBC jar already on this machine, if any."""
    home = Path.home()
    patterns = [
        f"{home}/.m2/repository/org/postgresql/postgresql/*/postgresql-*.jar",
        f"{home}/.ivy2/jars/org.postgresql_postgresql-*.jar",
        f"{home}/.ivy2/cache/org.postgresql/postgresql/jars/postgresql-*.jar",
        "/usr/share/java/postgresql*.jar",
    ]
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[-1]
    return None


def create_table(uri: str, schema: str, rows: int) -> str:
    import psycopg

    table = f"{schema}.events"
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(
            f"CREATE TABLE {table} (id bigint PRIMARY KEY, user_name text, amount float8,"
            " qty int, ts timestamp, flag boolean, note text)"
        )
        conn.execute(
            f"INSERT INTO {table} SELECT g, 'user_' || (g % 5000), (g % 100000) / 7.0,"
            " g % 97, timestamp '2026-01-01' + g * interval '1 second', g % 3 = 0,"
            " CASE WHEN g % 20 = 0 THEN NULL ELSE repeat('note ', 1 + g % 12) END"
            f" FROM generate_series(1, {rows}) g"
        )
        conn.execute(f"VACUUM ANALYZE {table}")
    return table


def engine_path(
    spark: Any, uri: str, table: str, work: Path, tasks_max: int, partitions: int | None = None
) -> int:
    from airflow_connectors.catalog import parse_pipeline
    from airflow_connectors.engine.runner import EmbeddedRunner
    from airflow_connectors.settings import Settings
    from airflow_connectors.sinks._fs import parquet_dataset
    from airflow_connectors.state.store import StateStore

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    settings = Settings(
        state_store_url=f"sqlite:///{work}/state.db",
        warehouse=str(work / "wh"),
        spark_master="local[2]",
    )
    doc = {
        "pipeline": "bench",
        "tables": {
            "events": {
                "columns": COLUMNS,
                "connectors": [
                    {
                        "name": "pg",
                        "tasks_max": tasks_max,
                        "transport": {
                            "name": "postgres_input",
                            "config": {
                                "uri": uri,
                                "query": f"SELECT * FROM {table}",
                                "partition_column": "id",
                                **({"partitions": partitions} if partitions else {}),
                            },
                        },
                    }
                ],
            }
        },
    }
    spec = parse_pipeline(doc)
    store = StateStore(settings.state_store_url)
    runner = EmbeddedRunner(spec, settings, store=store, spark=lambda: spark)
    runner.run()
    store.close()
    t = spec.table("events")
    dataset = parquet_dataset(runner.context(t, t.connectors[0]).sink().location())
    assert dataset is not None
    return int(dataset.count_rows())


def jdbc_path(spark: Any, uri: str, table: str, work: Path, rows: int) -> int:
    from urllib.parse import urlsplit

    shutil.rmtree(work, ignore_errors=True)
    parts = urlsplit(uri)
    url = f"jdbc:postgresql://{parts.hostname}:{parts.port or 5432}{parts.path}"
    df = spark.read.jdbc(
        url,
        table,
        column="id",
        lowerBound=1,
        upperBound=rows,
        numPartitions=2,
        properties={"user": parts.username or "postgres", "driver": "org.postgresql.Driver"},
    )
    df.write.parquet(str(work))
    return int(spark.read.parquet(str(work)).count())


def adbc_path(uri: str, table: str) -> int:
    import adbc_driver_postgresql.dbapi as adbc

    with adbc.connect(uri, autocommit=True) as conn, conn.cursor() as cur:
        cur.adbc_statement.set_options(**{"adbc.postgresql.batch_size_hint_bytes": str(16 << 20)})
        cur.execute(f"SELECT * FROM {table}")
        return sum(b.num_rows for b in cur.fetch_record_batch())


def copy_rows(uri: str, table: str) -> int:
    import psycopg

    n = 0
    with psycopg.connect(uri) as conn, conn.cursor() as cur:
        sql = f"COPY (SELECT * FROM {table}) TO STDOUT (FORMAT BINARY)"
        with cur.copy(sql) as copy:
            copy.set_types(["int8", "text", "float8", "int4", "timestamp", "bool", "text"])
            for _row in copy.rows():
                n += 1
    return n


def copy_bytes(uri: str, table: str) -> int:
    """The bytes of the binary COPY, not decoded (its row count is not checked)."""
    import psycopg

    with psycopg.connect(uri) as conn, conn.cursor() as cur:
        sql = f"COPY (SELECT * FROM {table}) TO STDOUT (FORMAT BINARY)"
        with cur.copy(sql) as copy:
            return sum(len(chunk) for chunk in copy)


def pandas_path(uri: str, table: str) -> int:
    import pandas as pd
    import sqlalchemy as sa

    engine = sa.create_engine(uri.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            frame = pd.read_sql(f"SELECT * FROM {table}", conn)
    finally:
        engine.dispose()
    return len(frame)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", default=DEFAULT_URI)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    uri, rows = args.uri, args.rows

    jar = jdbc_jar()
    if jar:
        # Before the JVM starts: the jar on the driver's and executors' classpath.
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {jar} pyspark-shell"
    schema = f"ac_pgin_bench_{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="ac_pgin_bench_"))
    import psycopg

    try:
        t0 = time.perf_counter()
        table = create_table(uri, schema, rows)
        print(f"table {table}: {rows:,} rows in {time.perf_counter() - t0:.1f} s")
        from airflow_connectors.engine.spark import spark_session
        from airflow_connectors.settings import Settings

        spark = spark_session(
            Settings(state_store_url="sqlite://", warehouse=str(work), spark_master="local[2]"),
            "bench postgres",
        )
        paths: dict[str, Callable[[], int]] = {
            "engine tasks_max=1": lambda: engine_path(spark, uri, table, work / "e1", 1),
            "engine tasks_max=4": lambda: engine_path(spark, uri, table, work / "e4", 4),
            "engine tasks_max=1 partitions=2": lambda: engine_path(
                spark, uri, table, work / "e12", 1, 2
            ),
            "adbc fetch": lambda: adbc_path(uri, table),
            "psycopg copy (rows decoded)": lambda: copy_rows(uri, table),
            "psycopg copy (bytes only)": lambda: copy_bytes(uri, table),
            "pandas.read_sql": lambda: pandas_path(uri, table),
        }
        if jar:
            paths["spark jdbc (2 partitions)"] = lambda: jdbc_path(
                spark, uri, table, work / "jdbc", rows
            )
        else:
            print("spark jdbc: skipped (no PostgreSQL JDBC jar on this machine)")
        times: dict[str, list[float]] = {name: [] for name in paths}
        for name, run in paths.items():  # warm-up, and the row counts
            got = run()
            if "bytes only" not in name and got != rows:
                print(f"{name}: read {got} rows, expected {rows}", file=sys.stderr)
                return 1
        for r in range(args.rounds):
            order = list(paths.items())
            if r % 2:
                order.reverse()
            for name, run in order:
                t = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t)
        print(f"\n{'path':32} {'median s':>9} {'rows/s':>12}   rounds")
        for name, seconds in times.items():
            med = statistics.median(seconds)
            rounds = " ".join(f"{s:.2f}" for s in seconds)
            print(f"{name:32} {med:9.2f} {rows / med:12,.0f}   {rounds}")
        spark.stop()
    finally:
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
