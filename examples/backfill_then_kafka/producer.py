"""Fill ``public.orders`` and topic ``orders`` as an application would: one writer that
inserts each order (order_id increasing) and, once the insert committed, produces it to
Kafka keyed by order_id. Run it before and while the backfill runs.

    python producer.py --initial 1000 --orders 5000 \\
        --uri postgresql://postgres@127.0.0.1:5432/test --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any

ORDERS_DDL = (
    "CREATE TABLE IF NOT EXISTS public.{table} "
    "(order_id BIGINT PRIMARY KEY, customer TEXT NOT NULL, amount DOUBLE PRECISION NOT NULL)"
)


def order(i: int) -> dict[str, Any]:
    return {"order_id": i, "customer": f"c{i % 97}", "amount": round(i * 1.25 % 500, 2)}


def setup(uri: str, bootstrap: str, table: str, topic: str, initial: int, partitions: int) -> None:
    """The table with orders 1..initial (never produced: history) and the topic."""
    import psycopg
    from confluent_kafka.admin import AdminClient, NewTopic

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(ORDERS_DDL.format(table=table))
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO public.{table} VALUES (%(order_id)s, %(customer)s, %(amount)s)",
                [order(i) for i in range(1, initial + 1)],
            )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)


class Producer(threading.Thread):
    """Inserts orders ``first, first + 1, ...`` and produces each after its commit,
    until :meth:`stop` (or ``count`` orders); ``last`` is the last order produced."""

    def __init__(
        self, uri: str, bootstrap: str, table: str, topic: str, first: int, count: int | None = None
    ) -> None:
        super().__init__(name="orders-producer", daemon=True)
        self.uri, self.table, self.topic = uri, table, topic
        self.bootstrap, self.next, self.count = bootstrap, first, count
        self.last = first - 1
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def stop(self) -> int:
        self._halt.set()
        self.join(60)
        if self.error is not None:
            raise self.error
        return self.last

    def run(self) -> None:
        import psycopg
        from confluent_kafka import Producer as KafkaProducer

        kafka = KafkaProducer(
            {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )
        try:
            with psycopg.connect(self.uri, autocommit=True) as conn:
                while not self._halt.is_set() and (self.count is None or self.count > 0):
                    o = order(self.next)
                    conn.execute(
                        f"INSERT INTO public.{self.table} VALUES "
                        "(%(order_id)s, %(customer)s, %(amount)s)",
                        o,
                    )  # committed (autocommit) before it is produced
                    kafka.produce(self.topic, json.dumps(o).encode(), str(self.next).encode())
                    kafka.poll(0)
                    self.last = self.next
                    self.next += 1
                    if self.count is not None:
                        self.count -= 1
                    time.sleep(0.002)
            if kafka.flush(30) != 0:
                raise RuntimeError("orders-producer: messages not delivered within 30 s")
        except BaseException as e:  # reported by stop()
            self.error = e


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--uri", default="postgresql://postgres@127.0.0.1:5432/test")
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--table", default="orders")
    ap.add_argument("--topic", default="orders")
    ap.add_argument("--initial", type=int, default=1000, help="history: orders in the table only")
    ap.add_argument("--orders", type=int, default=5000, help="then orders in table and topic")
    args = ap.parse_args()
    setup(args.uri, args.bootstrap, args.table, args.topic, args.initial, 3)
    p = Producer(args.uri, args.bootstrap, args.table, args.topic, args.initial + 1, args.orders)
    p.start()
    p.join()
    print(f"orders 1..{p.stop()} in public.{args.table}; {args.orders} of them in {args.topic}")


if __name__ == "__main__":
    main()
