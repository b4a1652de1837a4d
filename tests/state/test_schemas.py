"""Schema versions in the state store (``ac_schemas``) on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import sqlalchemy as sa
from helpers import pipeline

from airflow_connectors.state import schema
from airflow_connectors.state.store import (
    SchemaColumn,
    SchemaConflict,
    SchemaVersion,
    StateStore,
)

TABLE = pipeline(
    {
        "t": {
            "columns": {"id": "BIGINT NOT NULL", "price": "DECIMAL(10, 2)", "name": "VARCHAR"},
            "connectors": [{"name": "c", "transport": {"name": "datagen", "config": {}}}],
        }
    }
).tables[0]


def test_versions_round_trip_in_order(store_url: str) -> None:
    store = StateStore(store_url)
    assert store.schema_versions("p", "t") == []
    assert store.latest_schema("p", "t") is None
    v1 = store.add_schema_version("p", "t", TABLE.columns, based_on=None, origin="inferred from a")
    assert v1 == 1
    cols2 = (*TABLE.columns[:2], SchemaColumn("extra", "INT"))
    v2 = store.add_schema_version("p", "t", cols2, based_on=1, origin="batch 7 added extra")
    assert v2 == 2
    versions = store.schema_versions("p", "t")
    assert [v.version for v in versions] == [1, 2]
    assert versions[0].columns == (
        SchemaColumn("id", "BIGINT", False),
        SchemaColumn("price", "DECIMAL(10, 2)", True),
        SchemaColumn("name", "VARCHAR", True),
    )
    assert versions[0].origin == "inferred from a"
    latest = store.latest_schema("p", "t")
    assert isinstance(latest, SchemaVersion)
    assert latest.version == 2 and latest.column_names == ["id", "price", "extra"]
    assert latest.origin == "batch 7 added extra"
    assert latest.to_json()["columns"][2] == {"name": "extra", "type": "INT", "nullable": True}
    assert versions[1].created_at >= versions[0].created_at > 0
    # Other tables and pipelines have their own versions.
    assert store.latest_schema("p", "other") is None
    assert store.latest_schema("q", "t") is None
    assert store.add_schema_version("q", "t", cols2, based_on=None, origin="x") == 1


def test_stale_based_on_is_a_conflict_and_stores_nothing(store_url: str) -> None:
    store = StateStore(store_url)
    store.add_schema_version("p", "t", TABLE.columns, based_on=None, origin="first")
    with pytest.raises(SchemaConflict, match=r"p\.t: expected the latest schema version to be"):
        store.add_schema_version("p", "t", TABLE.columns, based_on=None, origin="second")
    store.add_schema_version("p", "t", TABLE.columns[:1], based_on=1, origin="v2")
    with pytest.raises(SchemaConflict) as e:
        store.add_schema_version("p", "t", TABLE.columns, based_on=1, origin="lost")
    assert e.value.latest == 2
    assert "expected the latest schema version to be 1 but it is 2" in str(e.value)
    assert [v.origin for v in store.schema_versions("p", "t")] == ["first", "v2"]
    with pytest.raises(SchemaConflict):  # based on a version that does not exist yet
        store.add_schema_version("p", "t", TABLE.columns, based_on=5, origin="ahead")


def test_bad_columns_are_refused(store_url: str) -> None:
    store = StateStore(store_url)
    with pytest.raises(ValueError, match="at least one column"):
        store.add_schema_version("p", "t", [], based_on=None, origin="x")
    dup = [SchemaColumn("a", "INT"), SchemaColumn("A", "VARCHAR")]
    with pytest.raises(ValueError, match="column 'A' appears twice"):
        store.add_schema_version("p", "t", dup, based_on=None, origin="x")
    assert store.schema_versions("p", "t") == []


def test_in_a_caller_transaction_commits_and_rolls_back_with_it(store_url: str) -> None:
    store = StateStore(store_url)
    store.add_schema_version("p", "t", TABLE.columns, based_on=None, origin="v1")

    class Boom(Exception):
        pass

    with pytest.raises(Boom), store.tx() as conn:
        assert store.add_schema_version("p", "t", TABLE.columns, based_on=1, origin="x", conn=conn)
        assert store.latest_schema("p", "t", conn).version == 2  # type: ignore[union-attr]
        raise Boom
    latest = store.latest_schema("p", "t")
    assert latest is not None and latest.version == 1

    with store.tx() as conn:
        # A conflict inside the transaction leaves it usable: the caller merges and retries.
        with pytest.raises(SchemaConflict):
            store.add_schema_version("p", "t", TABLE.columns, based_on=None, origin="y", conn=conn)
        latest = store.latest_schema("p", "t", conn)
        assert latest is not None
        store.add_schema_version(
            "p", "t", TABLE.columns, based_on=latest.version, origin="retried", conn=conn
        )
    assert [v.origin for v in store.schema_versions("p", "t")] == ["v1", "retried"]


def test_concurrent_writers_one_wins_the_other_conflicts(store_url: str) -> None:
    """Two writers based on the same version: exactly one stores version 2, the other
    gets SchemaConflict, retries on the latest with the union, and nothing is lost."""
    store = StateStore(store_url)
    store.add_schema_version("p", "t", TABLE.columns[:1], based_on=None, origin="v1")
    barrier = threading.Barrier(2)
    results: dict[str, Any] = {}

    def writer(name: str) -> None:
        s2 = StateStore(store_url, migrate=False)
        try:
            with s2.tx() as conn:
                base = s2.latest_schema("p", "t", conn)
                assert base is not None
                barrier.wait(timeout=30)
                cols = (*base.columns, SchemaColumn(name, "INT"))
                results[name] = s2.add_schema_version(
                    "p", "t", cols, based_on=base.version, origin=f"added {name}", conn=conn
                )
        except SchemaConflict as e:
            results[name] = e
        finally:
            s2.close()

    if store.engine.dialect.name == "sqlite":
        # SQLite transactions take the write lock up front (BEGIN IMMEDIATE): the
        # second writer reads after the first committed, so the barrier cannot meet.
        barrier = threading.Barrier(1)
    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    outcomes = sorted(type(v).__name__ for v in results.values())
    if store.engine.dialect.name == "sqlite":
        assert outcomes == ["int", "int"]  # serialized: the second extends the first
    else:
        assert outcomes == ["SchemaConflict", "int"]
        loser = next(n for n, v in results.items() if isinstance(v, SchemaConflict))
        latest = store.latest_schema("p", "t")
        assert latest is not None
        union = (*latest.columns, SchemaColumn(loser, "INT"))
        store.add_schema_version("p", "t", union, based_on=latest.version, origin=f"added {loser}")
    final = store.latest_schema("p", "t")
    assert final is not None and sorted(final.column_names) == ["a", "b", "id"]


def test_migration_from_v7_adds_the_table(store_url: str) -> None:
    engine = sa.create_engine(store_url)
    try:
        assert schema.migrate(engine, target=7) == 0
        with engine.connect() as conn:
            assert not sa.inspect(conn).has_table("ac_schemas")
        assert schema.migrate(engine) == 7
        with engine.connect() as conn:
            assert sa.inspect(conn).has_table("ac_schemas")
            assert schema._current_version(conn) == schema.LATEST
    finally:
        engine.dispose()
