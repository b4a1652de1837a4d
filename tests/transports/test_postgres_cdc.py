"""postgres_cdc_input against a private PostgreSQL cluster with ``wal_level=logical`` (the
session fixture ``pg_logical``): inserts, updates (whole and partial rows, key changes),
deletes under both replica identities and truncates decoded from the slot; the slot
advancing only once a range is acknowledged; a re-read after a crash giving the same
changes; the initial snapshot taken while rows change, handed over to the changes
exactly; and the configuration errors, one line each without the password.

The engine's part (conform, ``__order``, the sinks' merge) is tested with the engine and
the sinks; here the transport's output is applied to a model of the table by key, in the
order the engine stages it (item after item, row after row), and compared with the
source table.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from airflow_connectors.changes import DELETE, OP, SET, TRUNCATE, UPDATE, UPSERT
from airflow_connectors.transports import Cursor, KeyOffset, Limits, WorkItem
from airflow_connectors.transports.postgres_cdc_input import (
    PostgresCdcError,
    PostgresCdcInputConfig,
    PostgresCdcInputTransport,
    lsn_int,
)
from tests.helpers import pipeline

pytestmark = [pytest.mark.sources]

COLUMNS = {
    "id": "BIGINT NOT NULL",
    "name": "VARCHAR",
    "qty": "INT",
    "ok": "BOOLEAN",
    "at": "TIMESTAMP",
    "doc": "VARCHAR",
}
SOURCE_DDL = "(id bigint PRIMARY KEY, name text, qty int, ok boolean, at timestamptz, doc text)"


@pytest.fixture(scope="module")
def db(pg_logical: Any) -> Iterator[Any]:
    """A database of the module's own on the logical cluster; its slots are dropped at
    the end (a slot holds WAL back)."""
    name = f"cdc_{uuid.uuid4().hex[:8]}"
    pg_logical.create_database(name)

    class Db:
        url = pg_logical.url(name)

        @staticmethod
        def connect() -> Any:
            return pg_logical.connect(name)

    yield Db
    with pg_logical.connect() as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE database = %s AND NOT active",
            (name,),
        )


def _source(db: Any, identity: str = "DEFAULT") -> str:
    """A new source table and a publication of it; returns the table's name."""
    table = f"t_{uuid.uuid4().hex[:8]}"
    with db.connect() as conn:
        conn.execute(f"CREATE TABLE {table} {SOURCE_DDL}")
        # doc kept out of line, so an update leaving it alone sends it as unchanged TOAST.
        conn.execute(f"ALTER TABLE {table} ALTER COLUMN doc SET STORAGE EXTERNAL")
        conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY {identity}")
        conn.execute(f"CREATE PUBLICATION pub_{table} FOR TABLE {table}")
    return table


def _transport(db: Any, table: str, **config: Any) -> PostgresCdcInputTransport:
    cfg = {"uri": db.url, "publication": f"pub_{table}", "source_table": table, **config}
    spec = pipeline(
        {
            "orders": {
                "columns": COLUMNS,
                "primary_key": ["id"],
                "sink": {"name": "delta"},
                "connectors": [
                    {"name": "cdc", "transport": {"name": "postgres_cdc_input", "config": cfg}}
                ],
            }
        }
    )
    transport = PostgresCdcInputTransport(PostgresCdcInputConfig(**cfg), spec.tables[0])
    transport.context.connector = "cdc"
    transport.context.table = f"orders_{table}"
    return transport


def _read(transport: PostgresCdcInputTransport, items: list[WorkItem]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for item in items:
        for batch in transport.read(item):
            assert isinstance(batch, pa.RecordBatch)
            rows += batch.to_pylist()
    return rows


def _committed(cursor: Cursor, items: list[WorkItem]) -> Cursor:
    """``cursor`` after the batch of ``items`` committed (what the state store keeps)."""
    offsets = dict(cursor.offsets)
    for item in items:
        offsets[item.key] = KeyOffset(item.end or 0, 0, True, dict(item.meta))
    return Cursor(offsets=offsets)


def _slot_at(db: Any, slot: str) -> int:
    with db.connect() as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    assert row is not None, f"slot {slot} is gone"
    return lsn_int(row[0])


def _apply(model: dict[Any, dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    """The changes ``rows`` applied to ``model`` (key -> row) as the sinks apply them."""
    for row in rows:
        op = row[OP]
        values = {k: v for k, v in row.items() if k not in (OP, SET)}
        if op == UPSERT:
            model[row["id"]] = values
        elif op == DELETE:
            model.pop(row["id"], None)
        elif op == TRUNCATE:
            model.clear()
        elif op == UPDATE and row["id"] in model:
            model[row["id"]].update({c: values[c] for c in row[SET]})


def _source_rows(db: Any, table: str) -> dict[Any, dict[str, Any]]:
    with db.connect() as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        got = conn.execute(
            f"SELECT id::text, name, qty::text, CASE WHEN ok THEN 't' WHEN NOT ok THEN 'f' END,"
            f" at::text, doc FROM {table}"
        ).fetchall()
    model = {}
    for r in got:
        model[int(r[0])] = dict(
            zip(
                COLUMNS,
                [int(r[0]), r[1], None if r[2] is None else int(r[2]), r[3], r[4], r[5]],
                strict=True,
            )
        )
    return model


def _normal(model: dict[Any, dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """The transport's rows in the source's text form (booleans as t/f), for comparing."""
    out = {}
    for k, row in model.items():
        ok = row["ok"]
        assert ok is None or isinstance(ok, bool), row
        out[k] = {**row, "ok": None if ok is None else ("t" if ok else "f")}
    return out


def test_changes_are_decoded_in_commit_order_and_the_slot_moves_only_when_acknowledged(
    db: Any,
) -> None:
    table = _source(db)
    with db.connect() as conn:
        conn.execute(f"INSERT INTO {table} VALUES (9, 'before', 9, true, NULL, NULL)")
    transport = _transport(db, table, snapshot=False)
    first = list(transport.discover(Cursor(), Limits()))
    assert [i.key for i in first] == [transport.key], "snapshot: false plans no snapshot"
    assert first[0].start == first[0].end, "a new slot is pinned by an empty range"
    start = first[0].start
    cursor = _committed(Cursor(), first)
    big = "x" * 5000
    with db.connect() as conn:
        conn.execute(
            f"INSERT INTO {table} VALUES (1, 'a', 1, true, '2026-01-02 03:04:05+02', %s),"
            " (2, 'b', 2, false, NULL, NULL)",
            (big,),
        )
        with conn.transaction():
            conn.execute(f"UPDATE {table} SET qty = 10 WHERE id = 1")  # doc: unchanged TOAST
            conn.execute(f"UPDATE {table} SET name = 'bb', doc = 'd' WHERE id = 2")
        conn.execute(f"UPDATE {table} SET id = 3 WHERE id = 2")  # a new key
        conn.execute(f"DELETE FROM {table} WHERE id = 1")
        conn.execute(f"TRUNCATE {table}")
        conn.execute(f"INSERT INTO {table} (id, name) VALUES (4, 'after')")

    items = list(transport.discover(cursor, Limits()))
    assert [i.key for i in items] == [transport.key]
    assert items[0].start == start and items[0].end is not None and items[0].end > start
    rows = _read(transport, items)
    core = [(r[OP], r["id"], r[SET]) for r in rows]
    assert core == [
        (UPSERT, 1, None),
        (UPSERT, 2, None),
        (UPDATE, 1, ["name", "qty", "ok", "at"]),  # every column but the key and doc
        (UPSERT, 2, None),
        (DELETE, 2, None),
        (UPSERT, 3, None),
        (DELETE, 1, None),
        (TRUNCATE, None, None),
        (UPSERT, 4, None),
    ]
    assert rows[0] == {
        "id": 1, "name": "a", "qty": 1, "ok": True, "at": "2026-01-02 01:04:05+00",
        "doc": big, OP: UPSERT, SET: None,
    }  # fmt: skip
    assert rows[2]["qty"] == 10 and rows[2]["doc"] is None
    # REPLICA IDENTITY DEFAULT: a delete carries the key only.
    assert rows[6] == {c: None for c in COLUMNS} | {"id": 1, OP: DELETE, SET: None}
    assert rows[5] == {
        "id": 3, "name": "bb", "qty": 2, "ok": False, "at": None, "doc": "d",
        OP: UPSERT, SET: None,
    }  # fmt: skip

    # Reading never consumes: the slot stays, a second read gives the same changes.
    assert _slot_at(db, transport.slot) <= start
    assert _read(transport, items) == rows
    # A discovery while the range is in flight plans nothing and moves nothing.
    flying = Cursor(offsets=cursor.offsets, in_flight=frozenset({transport.key}))
    assert list(transport.discover(flying, Limits())) == []
    assert _slot_at(db, transport.slot) <= start
    # Once the batch committed, the next discovery acknowledges: the slot moves to the
    # committed position, and the next range starts there.
    done = _committed(cursor, items)
    with db.connect() as conn:
        conn.execute(f"INSERT INTO {table} (id, name) VALUES (5, 'later')")
    later = list(transport.discover(done, Limits()))
    assert _slot_at(db, transport.slot) == items[0].end
    assert [i.start for i in later] == [items[0].end]
    assert [(r[OP], r["id"]) for r in _read(transport, later)] == [(UPSERT, 5)]


def test_replica_identity_full_deletes_carry_the_whole_row(db: Any) -> None:
    table = _source(db, "FULL")
    transport = _transport(db, table, snapshot=False)
    cursor = _committed(Cursor(), list(transport.discover(Cursor(), Limits())))
    with db.connect() as conn:
        conn.execute(f"INSERT INTO {table} VALUES (1, 'a', 1, true, NULL, 'doc')")
        conn.execute(f"DELETE FROM {table} WHERE id = 1")
    rows = _read(transport, list(transport.discover(cursor, Limits())))
    assert rows[-1] == {
        "id": 1, "name": "a", "qty": 1, "ok": True, "at": None, "doc": "doc",
        OP: DELETE, SET: None,
    }  # fmt: skip


def test_a_read_after_a_crash_gives_the_same_changes(db: Any) -> None:
    """A batch killed mid-read leaves the slot where it was: a new transport (a new
    process) reading the planned range again gets the same changes, and discovery does
    not plan past what is in flight."""
    table = _source(db)
    transport = _transport(db, table, snapshot=False)
    cursor = _committed(Cursor(), list(transport.discover(Cursor(), Limits())))
    with db.connect() as conn:
        conn.execute(
            f"INSERT INTO {table} (id, name) SELECT g, 'n' || g FROM generate_series(1, 25000) g"
        )
        conn.execute(f"UPDATE {table} SET qty = id WHERE id % 2 = 0")
        conn.execute(f"DELETE FROM {table} WHERE id % 5 = 0")
    items = list(transport.discover(cursor, Limits()))
    reading = iter(transport.read(items[0]))
    partial = next(reading)  # the first block, then the "crash": its connection goes
    reading.close()
    assert isinstance(partial, pa.RecordBatch)
    assert partial.num_rows > 0
    again = _transport(db, table, snapshot=False)
    flying = Cursor(offsets=cursor.offsets, in_flight=frozenset({again.key}))
    assert list(again.discover(flying, Limits())) == []
    rows = _read(again, items)
    assert rows[: partial.num_rows] == partial.to_pylist()
    assert len(rows) == 25000 + 12500 + 5000
    model: dict[Any, dict[str, Any]] = {}
    _apply(model, rows)
    assert _normal(model) == _source_rows(db, table)


def test_the_snapshot_hands_over_to_the_changes_while_rows_change(db: Any) -> None:
    """Rows change while the slot is created and while the snapshot is read: the
    snapshot, then the changes replayed on top, give exactly the source table."""
    table = _source(db)
    with db.connect() as conn:
        conn.execute(
            f"INSERT INTO {table} (id, name, qty, ok, at) SELECT g, 'n' || g, 0, g % 3 = 0, "
            "timestamptz '2026-01-01 00:00:00+01' + g * interval '1 minute' "
            "FROM generate_series(1, 3000) g"
        )
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        try:
            with db.connect() as conn:
                i = 0
                while not stop.is_set():
                    i += 1
                    with conn.transaction():
                        conn.execute(
                            f"UPDATE {table} SET qty = qty + 1 WHERE id = %s", (i % 3000 + 1,)
                        )
                        conn.execute(
                            f"INSERT INTO {table} (id, name) VALUES (%s, 'new')", (10_000 + i,)
                        )
                        conn.execute(f"DELETE FROM {table} WHERE id = %s", ((i * 7) % 3000 + 1,))
        except BaseException as e:  # reported by the test
            errors.append(e)

    writer = threading.Thread(target=churn, daemon=True)
    writer.start()
    try:
        transport = _transport(db, table)
        first = list(transport.discover(Cursor(), Limits()))
        assert [i.key for i in first] == [transport.snapshot_key, transport.key]
        snapshot = _read(transport, first[:1])
        assert snapshot and {r[OP] for r in snapshot} == {UPSERT}
        changes = _read(transport, first[1:])
        cursor = _committed(Cursor(), first)
        more = list(transport.discover(cursor, Limits()))
        changes += _read(transport, more)
    finally:
        stop.set()
        writer.join(30)
    assert not errors, errors
    assert changes, "the writer's changes after the slot was made"
    cursor = _committed(cursor, more)
    rest = _read(transport, list(transport.discover(cursor, Limits())))
    model: dict[Any, dict[str, Any]] = {}
    _apply(model, snapshot + changes + rest)
    assert _normal(model) == _source_rows(db, table)


def test_a_first_discovery_whose_plan_was_lost_starts_again(db: Any) -> None:
    """A first discovery that made the slot but whose plan was never stored (a crash):
    the next one, still without offsets, makes the slot again and plans the snapshot."""
    table = _source(db)
    transport = _transport(db, table)
    lost = list(transport.discover(Cursor(), Limits()))
    with db.connect() as conn:
        conn.execute(f"INSERT INTO {table} (id, name) VALUES (1, 'a')")
    again = list(transport.discover(Cursor(), Limits()))
    assert [i.key for i in again] == [transport.snapshot_key, transport.key]
    assert again[0].meta["lsn"] > lost[0].meta["lsn"]
    assert _slot_at(db, transport.slot) == again[0].meta["lsn"]
    assert [r["id"] for r in _read(transport, again)] == [1]


def test_bounded_reads_up_to_the_first_discoverys_position(db: Any) -> None:
    """follow: false: the snapshot and the changes up to where the first discovery
    planned; later changes are never planned."""
    table = _source(db)
    with db.connect() as conn:
        conn.execute(f"INSERT INTO {table} (id, name) VALUES (1, 'a')")
    transport = _transport(db, table, follow=False)
    assert transport.bounded
    first = list(transport.discover(Cursor(), Limits()))
    assert [r["id"] for r in _read(transport, first)] == [1]
    with db.connect() as conn:
        conn.execute(f"INSERT INTO {table} (id, name) VALUES (2, 'late')")
    assert list(transport.discover(_committed(Cursor(), first), Limits())) == []


def test_configuration_errors_are_one_line_naming_the_setting_and_the_remedy(
    db: Any, pg_logical: Any
) -> None:
    table = _source(db)
    password = "s3cr3t-cdc-pass"
    with db.connect() as conn:
        conn.execute(f"CREATE ROLE cdc_{table} LOGIN PASSWORD '{password}'")
        conn.execute(f"GRANT SELECT ON {table} TO cdc_{table}")
        conn.execute(f"CREATE TABLE other_{table} (id bigint PRIMARY KEY)")

    def fails(transport: PostgresCdcInputTransport, *words: str) -> str:
        with pytest.raises(PostgresCdcError) as e:
            list(transport.discover(Cursor(), Limits()))
        text = str(e.value)
        assert "\n" not in text and password not in text, text
        assert "orders_" in text and "cdc" in text, text  # names the connector
        for w in words:
            assert w in text, text
        return text

    fails(
        _transport(db, table, publication="nope"),
        "publication nope does not exist",
        "CREATE PUBLICATION",
    )
    fails(
        _transport(db, f"other_{table}", publication=f"pub_{table}"),
        "does not publish",
        "ALTER PUBLICATION",
    )
    fails(_transport(db, f"missing_{table}"), "source_table does not exist")
    user_uri = db.url.replace("postgres@", f"cdc_{table}:{password}@")
    fails(_transport(db, table, uri=user_uri), "REPLICATION")

    transport = _transport(db, table, snapshot=False)
    cursor = _committed(Cursor(), list(transport.discover(Cursor(), Limits())))
    with db.connect() as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (transport.slot,))
    with pytest.raises(PostgresCdcError, match=r"does not exist any more.*reset the connector"):
        list(transport.discover(cursor, Limits()))

    from airflow_connectors.testing.pgcluster import PgCluster

    with PgCluster(settings={"wal_level": "replica"}) as plain:
        t = _transport(db, table, uri=plain.url())
        text = fails(t, "wal_level is replica", "wal_level = logical")
        assert "postgresql://127.0.0.1" in text
