#!/usr/bin/env python
"""Kafka benchmark: ``kafka_input`` end to end into Parquet and Delta, the transport's
reads alone, confluent-kafka's own consumer (the floor) and Spark's own Kafka source.

Starts a Kafka broker of its own (:class:`airflow_connectors.testing.kafka.KafkaBroker`
in a temporary directory; or uses ``--bootstrap``), creates a topic of 4 partitions
(``ac_kafka_bench_<random>``, deleted at the end) and produces ``--messages`` JSON
messages of about 200 bytes (one record each, round robin over the partitions), then
times, interleaved over ``--rounds`` (the same bounds, the high watermarks after the
produce, for every path):

* ``floor``: confluent-kafka's ``Consumer`` in this process, all 4 partitions assigned
  from offset 0, ``consume`` of up to 10,000 messages (never more than are left, or
  consume waits out its timeout; ``fetch.queue.backoff.ms`` 10) until every partition
  reached its high watermark, counting messages and bytes (no decoding): what the
  client library delivers;
* ``raw read``: the ``kafka_input`` transport's ``read`` of every planned range in this
  process (discovery untimed), bytes only;
* ``engine -> parquet`` and ``engine -> delta``: ``EmbeddedRunner(spec).run()`` of a
  ``kafka_input`` connector (JSON format, ``follow: false``, ``tasks_max``,
  ``max_batch_size``) into the table's Parquet or Delta sink on one ``local[2]``
  SparkSession started before the clock (discovery, every batch's Spark job and commit
  inside); a fresh state store and warehouse per round;
* ``spark kafka source``: Spark's own Kafka source (``spark-sql-kafka-0-10``, the
  ``spark-kafka`` package set of :mod:`airflow_connectors.testing.spark_packages`, its
  jars resolved into a cache outside the repository on first use) in the same session:
  ``spark.read.format("kafka")`` bounded by the same offsets (``startingOffsets`` /
  ``endingOffsets``), the value parsed with ``from_json`` and the same schema, written
  to Parquet.

Prints messages/s and MB/s (message values) per path, median of the rounds, and the
issue's target ratios: end to end (Parquet) / Spark's Kafka source (target >= 1.0) and
end to end / floor (target >= 0.5). Row counts are checked outside the timed sections;
exit status 0 unless a count is wrong.

Usage: ``.venv/bin/python bench/kafka.py [--messages 1000000] [--rounds 2]
[--tasks-max 4] [--batch 1000000] [--bootstrap HOST:PORT]``

``--batch`` defaults to the engine's default ``max_batch_size`` (1,000,000: one batch of
ten 100,000-offset items, read by both cores). 250,000 made four batches the embedded
runner runs in turn, each a Spark job of three items on two cores and a commit: 4.12 s
end to end against 2.77 s at 1M messages.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# Run as a script, this folder comes first on sys.path: keep it from shadowing anything.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

PARTITIONS = 4
COLUMNS = {
    "id": "BIGINT NOT NULL",
    "user_name": "VARCHAR",
    "email": "VARCHAR",
    "amount": "DOUBLE",
    "qty": "INT",
    "flag": "BOOLEAN",
    "country": "VARCHAR",
    "note": "VARCHAR",
}
SPARK_SCHEMA = (
    "id BIGINT, user_name STRING, email STRING, amount DOUBLE, qty INT, flag BOOLEAN, "
    "country STRING, note STRING"
)
COUNTRIES = ("DE", "FR", "US", "JP", "BR", "IN", "NG", "AU")
NOTE = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor"


def message(i: int) -> bytes:
    """One record as JSON, about 200 bytes."""
    return json.dumps(
        {
            "id": i,
            "user_name": f"user{i % 10_000}",
            "email": f"user{i % 10_000}@example.com",
            "amount": i / 8,
            "qty": i % 97,
            "flag": i % 3 == 0,
            "country": COUNTRIES[i % len(COUNTRIES)],
            "note": NOTE[: 40 + i % 37],
        },
        separators=(",", ":"),
    ).encode()


def fill(servers: str, topic: str, n: int) -> tuple[float, dict[int, int], int]:
    """Create ``topic`` and produce ``n`` messages; (seconds, high watermark per
    partition, value bytes)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    t0 = time.perf_counter()
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(30)
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "none",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    size = 0
    for i in range(1, n + 1):
        value = message(i)
        size += len(value)
        while True:
            try:
                producer.produce(topic, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 50_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit("the producer could not deliver every message")
    seconds = time.perf_counter() - t0
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "ac-bench-watermarks"})
    highs = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        for p in range(PARTITIONS)
    }
    consumer.close()
    if sum(highs.values()) != n:
        raise SystemExit(f"the topic holds {sum(highs.values())} messages, expected {n}")
    return seconds, highs, size


def drop(servers: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": servers})  # alive until the futures end
    for f in admin.delete_topics([topic]).values():
        f.result(30)


def floor(servers: str, topic: str, highs: dict[int, int]) -> tuple[float, int, int]:
    """confluent-kafka's consumer reading every partition to its high watermark;
    (seconds, messages, value bytes)."""
    from confluent_kafka import Consumer, TopicPartition

    t0 = time.perf_counter()
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"ac-bench-floor-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # librdkafka postpones a partition's next fetch by this (default 1000 ms)
            # once its local queue is over queued.min.messages: with 4 partitions in one
            # consumer, a consume call stalled about 1 s per run (400,000 messages:
            # 1.2 s instead of 0.3 s).
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    left = {p: h for p, h in highs.items() if h > 0}
    total = sum(highs.values())
    count = size = 0
    while left:
        # consume returns when it holds what it asked for, else waits out its timeout:
        # never ask for more than is left (the topic has no holes).
        for m in consumer.consume(max(1, min(10_000, total - count)), timeout=1.0):
            if m.error():
                continue
            count += 1
            size += len(m.value())
            p = m.partition()
            if p in left and m.offset() + 1 >= left[p]:
                del left[p]
    consumer.close()
    return time.perf_counter() - t0, count, size


def pipeline_doc(servers: str, topic: str, sink: str, tasks_max: int, batch: int) -> dict[str, Any]:
    return {
        "pipeline": "kafkabench",
        "tables": {
            "events": {
                "columns": COLUMNS,
                "sink": {"name": sink},
                "connectors": [
                    {
                        "name": "kafka",
                        "tasks_max": tasks_max,
                        "max_batch_size": batch,
                        "transport": {
                            "name": "kafka_input",
                            "config": {
                                "topic": topic,
                                "bootstrap.servers": servers,
                                "follow": False,
                            },
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        },
    }


def settings(work: Path) -> Any:
    from airflow_connectors.settings import Settings

    return Settings(
        state_store_url=f"sqlite:///{work}/state.db",
        warehouse=str(work / "wh"),
        spark_master="local[2]",
    )


def run_engine(spark: Any, doc: dict[str, Any], work: Path) -> tuple[float, int, str]:
    from airflow_connectors.catalog import parse_pipeline
    from airflow_connectors.engine.runner import EmbeddedRunner
    from airflow_connectors.state.store import StateStore

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spec = parse_pipeline(doc)
    conf = settings(work)
    store = StateStore(conf.state_store_url)
    runner = EmbeddedRunner(spec, conf, store=store, spark=lambda: spark)
    t0 = time.perf_counter()
    report = runner.run()
    seconds = time.perf_counter() - t0
    (rep,) = report.connectors.values()
    table = spec.table("events")
    out = runner.context(table, table.connectors[0]).sink().location()
    store.close()
    return seconds, rep.records, out


def raw_read(doc: dict[str, Any]) -> tuple[float, int, int]:
    """Every planned range read by the transport alone; (seconds, messages, bytes)."""
    from airflow_connectors.catalog import parse_pipeline, transport_of
    from airflow_connectors.transports import Cursor, Limits

    spec = parse_pipeline(doc)
    table = spec.table("events")
    transport = transport_of(table.connectors[0], table)
    items = list(transport.discover(Cursor(), Limits()))
    t0 = time.perf_counter()
    lines = size = 0
    for item in items:
        for chunk in transport.read(item):
            lines += chunk.count(b"\n")
            size += len(chunk) - chunk.count(b"\n")
    return time.perf_counter() - t0, lines, size


def spark_source(spark: Any, servers: str, topic: str, highs: dict[int, int], out: Path) -> float:
    """Spark's own Kafka source, bounded by offsets 0..highs, parsed and written to
    Parquet at ``out``; the seconds it took."""
    from pyspark.sql.functions import col, from_json

    shutil.rmtree(out, ignore_errors=True)
    starting = json.dumps({topic: {str(p): 0 for p in highs}})
    ending = json.dumps({topic: {str(p): h for p, h in highs.items()}})
    t0 = time.perf_counter()
    (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .load()
        .select(from_json(col("value").cast("string"), SPARK_SCHEMA).alias("r"))
        .select("r.*")
        .write.parquet(str(out))
    )
    return time.perf_counter() - t0


def session(tmp: Path) -> Any:
    """One local[2] session for the engine and Spark's Kafka source: the product's own
    session (:func:`spark_session`) with the ``spark-kafka`` jars on its classpath."""
    from airflow_connectors.engine.spark import LOOPBACK, spark_session
    from airflow_connectors.testing.spark_packages import spark_conf

    jars = spark_conf("spark-kafka")  # resolved before the session, outside any clock
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", LOOPBACK)
        .config("spark.driver.bindAddress", LOOPBACK)
    )
    for k, v in jars.items():
        builder = builder.config(k, v)
    builder.getOrCreate()  # the jars are set when the JVM starts; spark_session reuses it
    return spark_session(settings(tmp))


def median_line(name: str, times: list[float], n: int, size: int) -> float:
    med = statistics.median(times)
    print(
        f"  {name:20s} median {med:7.2f} s  {n / med:>12,.0f} msgs/s  {size / med / 1e6:8.1f} MB/s"
    )
    return n / med


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", help="an existing broker (default: start one)")
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tasks-max", type=int, default=4)
    p.add_argument("--batch", type=int, default=1_000_000, help="max_batch_size")
    args = p.parse_args(argv)
    n = args.messages
    tmp = Path(tempfile.mkdtemp(prefix="ac_kafka_bench_"))
    broker = None
    if args.bootstrap:
        servers = args.bootstrap
    else:
        from airflow_connectors.testing.kafka import KafkaBroker

        broker = KafkaBroker(tmp / "broker").start()
        servers = broker.bootstrap_servers
        print(f"started a Kafka broker on {servers} in {broker.start_seconds:.1f} s")
    topic = f"ac_kafka_bench_{uuid.uuid4().hex[:8]}"
    ok = True
    try:
        print(f"producing {n} messages to {topic} ({PARTITIONS} partitions) ...", flush=True)
        produce_s, highs, size = fill(servers, topic, n)
        print(
            f"produced in {produce_s:.1f} s ({n / produce_s:,.0f} msgs/s), "
            f"{size / n:.0f} bytes a message, high watermarks {highs}",
            flush=True,
        )
        spark = session(tmp)
        paths = ("floor", "raw read", "engine -> parquet", "engine -> delta", "spark kafka source")
        results: dict[str, list[float]] = {k: [] for k in paths}
        docs = {
            sink: pipeline_doc(servers, topic, sink, args.tasks_max, args.batch)
            for sink in ("parquet", "delta")
        }
        # warm-up (JIT, Python workers, the Kafka jars): untimed
        run_engine(spark, docs["parquet"], tmp / "warm")
        spark_source(spark, servers, topic, highs, tmp / "warm-spark")

        def check(what: str, got: int, r: int) -> None:
            nonlocal ok
            if got != n:
                print(f"{what} round {r}: {got} rows/messages; expected {n}")
                ok = False

        for r in range(args.rounds):
            secs, count, got_size = floor(servers, topic, highs)
            check("floor", count, r)
            if got_size != size:
                print(f"floor round {r}: {got_size} bytes; expected {size}")
                ok = False
            results["floor"].append(secs)

            secs, lines, got_size = raw_read(docs["parquet"])
            check("raw read", lines, r)
            results["raw read"].append(secs)

            secs, records, out = run_engine(spark, docs["parquet"], tmp / "e")
            check("engine -> parquet (records)", records, r)
            check("engine -> parquet (rows)", spark.read.parquet(out).count(), r)
            results["engine -> parquet"].append(secs)

            secs, records, out = run_engine(spark, docs["delta"], tmp / "d")
            from deltalake import DeltaTable

            check("engine -> delta (records)", records, r)
            check("engine -> delta (rows)", DeltaTable(out).to_pyarrow_dataset().count_rows(), r)
            results["engine -> delta"].append(secs)

            secs = spark_source(spark, servers, topic, highs, tmp / "s")
            check("spark kafka source", spark.read.parquet(str(tmp / "s")).count(), r)
            results["spark kafka source"].append(secs)
            print(
                f"round {r}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in results.items()),
                flush=True,
            )
        print(
            f"\n{n} messages ({size / 1e6:.1f} MB of values) on {PARTITIONS} partitions, "
            f"tasks_max={args.tasks_max}, max_batch_size={args.batch}, "
            f"{args.rounds} round(s), local[2]"
        )
        rate = {k: median_line(k, v, n, size) for k, v in results.items()}
        e2e = rate["engine -> parquet"]
        print(
            f"  end to end (parquet) / spark kafka source: "
            f"{e2e / rate['spark kafka source']:.2f} (target >= 1.0)"
        )
        print(
            f"  end to end (parquet) / floor:              {e2e / rate['floor']:.2f} (target >= 0.5)"
        )
        from airflow_connectors.engine.spark import stop_session

        stop_session(spark)
    finally:
        try:
            drop(servers, topic)
        finally:
            if broker is not None:
                broker.stop()
            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
