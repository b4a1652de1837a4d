"""Real Debezium, not hand-written envelopes: the Debezium PostgreSQL connector in a real
Kafka Connect worker (standalone; the session's ``kafka_connect``) captures a table of
the private ``wal_level=logical`` cluster (``pg_logical``) into the session's Kafka
broker. The topic holds Debezium's envelopes for the snapshot (r), inserts (c), updates
(u), deletes (d, each followed by a tombstone) and a truncate (t), as Debezium writes
them. Then the Kafka Connect user's migration path (docs/transports/kafka_input.md, "From Kafka Connect and
Debezium"): ``kafka_input`` with ``update_format: debezium`` reads that topic into keyed
tables with the ``postgres`` and ``delta`` sinks, which end equal to the source table.

One worker, one connector and one workload for the module (module fixture), in two
phases so that the end-to-end test runs the pipeline between them and after them."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.helpers import pipeline, run

pytestmark = pytest.mark.sources

TABLE = "items"
COLUMNS = (
    "id bigint primary key, name text not null, qty integer, price double precision, active boolean"
)


@dataclass
class Capture:
    """The captured database, its connector and what the workload made Debezium write."""

    pg: Any
    database: str
    topic: str
    servers: str
    #: Per phase, the (op, id) Debezium writes for it, in order; a delete's tombstone
    #: is ("tombstone", id), a truncate ("t", None).
    expected: list[list[tuple[str, int | None]]] = field(default_factory=list)
    #: Per phase: the rows of the source table once it ran.
    source_rows: list[list[tuple[Any, ...]]] = field(default_factory=list)
    #: Per phase, the values of each c/r record's row, by id (what `after` must hold).
    inserted: list[dict[int, dict[str, Any]]] = field(default_factory=list)

    def rows(self) -> list[tuple[Any, ...]]:
        with self.pg.connect(self.database) as conn:
            return conn.execute(f"SELECT * FROM {TABLE} ORDER BY id").fetchall()

    def end_offset(self) -> int:
        """The topic's end offset (0 until Kafka Connect made the topic)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.servers, "group.id": "ac-t-dbz-wm"})
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=10)
            return int(high)
        except KafkaException:  # no such topic (yet)
            return 0
        finally:
            consumer.close()

    def wait_for(self, count: int, timeout: float = 90.0) -> None:
        """Until the topic holds ``count`` messages (Debezium wrote the whole phase)."""
        deadline = time.monotonic() + timeout
        while (seen := self.end_offset()) < count:
            if time.monotonic() > deadline:
                pytest.fail(
                    f"topic {self.topic}: {seen} messages after {timeout:.0f} s, expected {count}"
                )
            time.sleep(0.2)


class Workload:
    """Statements on the source table with the Debezium records each must give."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.ops: list[tuple[str, int | None]] = []
        self.inserted: dict[int, dict[str, Any]] = {}

    def insert(
        self, *rows: tuple[int, str, int | None, float | None, bool | None], op: str = "c"
    ) -> None:
        for row in rows:
            self.conn.execute(f"INSERT INTO {TABLE} VALUES (%s, %s, %s, %s, %s)", row)
            self.ops.append((op, row[0]))
            self.inserted[row[0]] = dict(
                zip(("id", "name", "qty", "price", "active"), row, strict=True)
            )

    def update(self, sql: str, ids: Sequence[int]) -> None:
        """One UPDATE statement of the rows ``ids``: a ``u`` record each (the workload
        updates one row per statement, so their order is known)."""
        done = self.conn.execute(f"UPDATE {TABLE} SET {sql} WHERE id = ANY(%s)", (list(ids),))
        assert done.rowcount == len(ids)
        self.ops += [("u", i) for i in ids]

    def delete(self, *ids: int) -> None:
        for i in ids:
            self.conn.execute(f"DELETE FROM {TABLE} WHERE id = %s", (i,))
            self.ops += [("d", i), ("tombstone", i)]

    def truncate(self) -> None:
        self.conn.execute(f"TRUNCATE {TABLE}")
        self.ops.append(("t", None))


@pytest.fixture(scope="module")
def capture(pg_logical: Any, kafka_broker: Any, kafka_connect: Any) -> Iterator[Capture]:
    """Debezium capturing ``items`` of a fresh database: phase 0 is the snapshot of the
    rows there before the connector, phase 1 inserts, updates, deletes and a re-insert,
    phase 2 is written by :func:`phase_two` (a truncate, then more changes)."""
    tag = uuid.uuid4().hex[:8]
    database = f"dbz_{tag}"
    pg_logical.create_database(database)
    with pg_logical.connect(database) as conn:
        conn.execute(f"CREATE TABLE {TABLE} ({COLUMNS})")
        snapshot = Workload(conn)
        snapshot.insert(
            (1, "apple", 3, 0.5, True),
            (2, "pear", 5, 0.75, False),
            (3, "plum", None, None, None),
            (4, "fig", 1, 2.25, True),
            op="r",
        )
    prefix, name, slot = f"dbz{tag}", f"dbz-{tag}", f"dbz_{tag}"
    kafka_connect.create_connector(
        name,
        _debezium(port=pg_logical.port, database=database, prefix=prefix, slot=slot),
    )
    cap = Capture(pg_logical, database, f"{prefix}.public.{TABLE}", kafka_broker.bootstrap_servers)
    try:
        kafka_connect.wait_snapshot(name)
        cap.expected.append(snapshot.ops)
        cap.inserted.append(snapshot.inserted)
        cap.wait_for(len(snapshot.ops))
        cap.source_rows.append(cap.rows())
        with pg_logical.connect(database) as conn:
            w = Workload(conn)
            w.insert((5, "kiwi", 7, 1.5, True), (6, "lime", 2, 0.3, False))
            w.update("name = 'pear2', qty = qty + 1", [2])
            w.update("qty = 9", [2])
            w.update("price = 4.5, active = NULL", [5])
            w.delete(1, 6)
            w.insert((1, "apple again", 4, 0.55, True))
            w.update("name = 'plum2', qty = 0", [3])
        cap.expected.append(w.ops)
        cap.inserted.append(w.inserted)
        cap.wait_for(sum(map(len, cap.expected)))
        cap.source_rows.append(cap.rows())
        yield cap
    finally:
        kafka_connect.delete_connector(name)
        _drop_slot(pg_logical, slot)


def phase_two(cap: Capture) -> None:
    """A truncate, then inserts (a key the truncate removed among them), an update and a
    delete; once per module, by whichever test comes first (the end-to-end test reads
    before and after it)."""
    if len(cap.expected) > 2:
        return
    with cap.pg.connect(cap.database) as conn:
        w = Workload(conn)
        w.truncate()
        w.insert(
            (10, "melon", 1, 3.0, True), (11, "grape", 30, 0.1, None), (2, "pear3", 2, 0.8, True)
        )
        w.update("qty = 31", [11])
        w.delete(10)
    cap.expected.append(w.ops)
    cap.inserted.append(w.inserted)
    cap.wait_for(sum(map(len, cap.expected)))
    cap.source_rows.append(cap.rows())


def _debezium(*, port: int, database: str, prefix: str, slot: str) -> dict[str, str]:
    from airflow_connectors.testing.kafka_connect import debezium_postgres

    return debezium_postgres(
        port=port,
        database=database,
        topic_prefix=prefix,
        tables=[f"public.{TABLE}"],
        slot_name=slot,
        # The connector's slot goes with it (a slot holds WAL back).
        **{"slot.drop.on.stop": True},
    )


def _drop_slot(pg: Any, slot: str) -> None:
    """Drops the connector's slot if it outlived the connector (a slot holds WAL)."""
    deadline = time.monotonic() + 30
    with pg.connect() as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
            if row is None:
                return
            if not row[0]:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                return
            time.sleep(0.2)


def read_topic(servers: str, topic: str, count: int) -> list[Any]:
    """The first ``count`` messages of partition 0 of ``topic``, in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"ac-t-dbz-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[Any] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            for message in consumer.consume(count - len(got), timeout=1):
                assert message.error() is None, message.error()
                got.append(message)
    finally:
        consumer.close()
    assert len(got) == count, f"read {len(got)} of {count} messages of {topic}"
    return got


#: The table as the pipeline declares it: Debezium's topic read into a keyed table.
KEYED_COLUMNS = {
    "id": "BIGINT NOT NULL",
    "name": "VARCHAR",
    "qty": "INT",
    "price": "DOUBLE",
    "active": "BOOLEAN",
}


def keyed_table(topic: str, servers: str, sink: dict[str, Any]) -> dict[str, Any]:
    """A table keyed on ``id`` filled by ``kafka_input`` from Debezium's topic
    (``update_format: debezium``), as the docs' migration section shows it."""
    return {
        "columns": KEYED_COLUMNS,
        "primary_key": ["id"],
        "sink": sink,
        "connectors": [
            {
                "name": "debezium",
                "transport": {
                    "name": "kafka_input",
                    "config": {"topic": topic, "bootstrap.servers": servers},
                },
                "format": {
                    "name": "json",
                    "config": {"update_format": "debezium", "json_flavor": "debezium_postgres"},
                },
            }
        ],
    }


def test_kafka_input_applies_debezium_changes(
    capture: Capture, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``kafka_input`` with ``update_format: debezium`` reads Debezium's topic into keyed
    tables with the postgres and delta sinks: after the snapshot, inserts, updates,
    deletes and a re-insert, and again after a truncate and more changes, each target
    equals the source table row for row (and by EXCEPT both ways in PostgreSQL)."""
    root = tmp_path_factory.mktemp("dbz-e2e")
    with capture.pg.connect(capture.database) as conn:
        conn.execute("CREATE SCHEMA target")
    postgres = {
        "name": "postgres",
        "config": {"uri": capture.pg.url(capture.database), "table": "target.items"},
    }
    spec = pipeline(
        {
            "items_pg": keyed_table(capture.topic, capture.servers, postgres),
            "items_delta": keyed_table(capture.topic, capture.servers, {"name": "delta"}),
        },
        name="dbz",
        base_dir=root,
    )
    store_url, warehouse = f"sqlite:///{root / 'state.db'}", str(root / "warehouse")

    def check(phase: int) -> None:
        report = run(spec, store_url, warehouse, spark)
        assert not report.failed, report
        want = capture.source_rows[-1]
        assert capture.rows() == want, "the source changed while the targets were read"
        with capture.pg.connect(capture.database) as conn:
            got = conn.execute(f"SELECT {', '.join(KEYED_COLUMNS)} FROM target.items ORDER BY id")
            assert got.fetchall() == want, f"postgres target after phase {phase}"
            for a, b in (("public.items", "target.items"), ("target.items", "public.items")):
                cols = ", ".join(KEYED_COLUMNS)
                extra = conn.execute(f"SELECT {cols} FROM {a} EXCEPT SELECT {cols} FROM {b}")
                assert extra.fetchall() == [], f"rows of {a} not in {b} after phase {phase}"
        delta = _delta_rows(f"{warehouse}/dbz/items_delta")
        assert delta == want, f"delta target after phase {phase}"

    check(len(capture.expected) - 1)
    if len(capture.expected) == 2:
        phase_two(capture)
        check(2)


def _delta_rows(path: str) -> list[tuple[Any, ...]]:
    import pyarrow as pa
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    # The log's files read by pyarrow (deltalake's own reader can abort a process at exit:
    # sinks/delta.py's _read_files).
    dt = DeltaTable(path)
    files = [uri.removeprefix("file://") for uri in dt.file_uris()]
    schema = pa.schema(dt.schema().to_arrow())
    table = ds.dataset(files, schema=schema, format="parquet").to_table()
    table = table.select(list(KEYED_COLUMNS)).sort_by("id")
    return [tuple(row.values()) for row in table.to_pylist()]


def test_debezium_writes_envelopes_for_every_change(capture: Capture) -> None:
    """Snapshot reads, inserts, updates, deletes with their tombstones and a truncate,
    each as Debezium's JSON envelope (with the JsonConverter's schema), in commit order."""
    phase_two(capture)
    expected = [op for phase in capture.expected for op in phase]
    messages = read_topic(capture.servers, capture.topic, len(expected))
    inserted = {(p, i): row for p, rows in enumerate(capture.inserted) for i, row in rows.items()}
    phase_of = [p for p, ops in enumerate(capture.expected) for _ in ops]
    got: list[tuple[str, int | None]] = []
    for n, message in enumerate(messages):
        key = json.loads(message.key()) if message.key() else None
        if not message.value():
            got.append(("tombstone", key["id"]))
            continue
        value = json.loads(message.value())
        assert set(value) == {"schema", "payload"}, value
        assert value["schema"]["name"] == f"{capture.topic}.Envelope"
        payload = value["payload"]
        op = payload["op"]
        assert payload["source"]["connector"] == "postgresql"
        assert payload["source"]["table"] == TABLE
        if op == "t":
            assert key is None and payload["before"] is None and payload["after"] is None
            got.append(("t", None))
            continue
        row = payload["before"] if op == "d" else payload["after"]
        assert key == {"id": row["id"]}
        got.append((op, row["id"]))
        if op in ("c", "r"):
            assert row == inserted[(phase_of[n], row["id"])]
        if op == "d":
            # REPLICA IDENTITY DEFAULT: the old row carries its key only; Debezium
            # fills a NOT NULL column it was not given with a placeholder, so a reader
            # takes the key of `before` and nothing else.
            assert payload["after"] is None
            assert {k for k, v in row.items() if v is not None} == {"id", "name"}, row
            assert row["name"] == "", row
    assert got == expected
    # Nothing more than the workload's changes.
    assert capture.end_offset() == len(expected)
