"""sinks/changes.py: a keyed table fed by batches published in any order ends as the
source's changes applied in their true order (pure pyarrow, no sink)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from airflow_connectors.changes import DELETE, TRUNCATE, UPDATE, UPSERT, change_fields
from airflow_connectors.sinks import changes as ch
from airflow_connectors.spec.models import ColumnSpec, TableSpec
from airflow_connectors.spec.types import parse_type


def _table(sequence_by: str | None = None) -> TableSpec:
    cols = [("id", "BIGINT", False), ("v", "VARCHAR", True), ("w", "INT", True)]
    if sequence_by:
        cols.append((sequence_by, "BIGINT", True))
    return TableSpec(
        name="t",
        columns=[ColumnSpec(name=n, type=parse_type(t)[0], nullable=nl) for n, t, nl in cols],
        primary_key=["id"],
        sequence_by=sequence_by,
        sink={"name": "delta"},
    )


def _staged(table: TableSpec, rows: list[dict[str, object]]) -> pa.Table:
    schema = pa.schema([*table.arrow_schema(), *change_fields()])
    full = [{"__set": None, **r, "__order": i} for i, r in enumerate(rows)]
    return pa.Table.from_pylist(full, schema=schema)


class Target:
    """A keyed table as a sink keeps it: rows and key state, applied as a sink does."""

    def __init__(self, table: TableSpec) -> None:
        self.table = table
        self.rows: dict[int, dict[str, object]] = {}
        self.state = ch.state_schema(table).empty_table()

    def publish(self, batch_id: int, rows: list[dict[str, object]]) -> ch.Resolved:
        collapsed = ch.collapse(_staged(self.table, rows), self.table, batch_id)

        def current(keys: pa.Table) -> pa.Table:
            found = [self.rows[k] for k in keys.column("id").to_pylist() if k in self.rows]
            return pa.Table.from_pylist(found, schema=self.table.arrow_schema())

        r = ch.resolve(collapsed, self.state, current, self.table)
        if r.truncate is not None:
            for k in ch.truncated_keys(self.state, self.table, r.truncate).column("id").to_pylist():
                self.rows.pop(k, None)
        for k in r.deletes.column("id").to_pylist():
            self.rows.pop(k, None)
        for row in r.upserts.drop_columns(["__seq"]).to_pylist():
            self.rows[row["id"]] = row
        self.state = ch.merge_state(self.state, r.state, self.table)
        return r


def _truth(changes: list[dict[str, object]]) -> dict[int, dict[str, object]]:
    out: dict[int, dict[str, object]] = {}
    for c in changes:
        op = c["__op"]
        if op == TRUNCATE:
            out.clear()
        elif op == DELETE:
            out.pop(c["id"], None)
        elif op == UPSERT:
            out[c["id"]] = {k: c.get(k) for k in ("id", "v", "w")}
        elif op == UPDATE and c["id"] in out:
            out[c["id"]].update({k: c[k] for k in c["__set"]})
    return out


def _workload(rng: random.Random, n: int, truncates: bool) -> list[dict[str, object]]:
    changes: list[dict[str, object]] = []
    for i in range(n):
        k = rng.randrange(12)
        roll = rng.random()
        if truncates and roll < 0.02:
            changes.append({"id": None, "v": None, "w": None, "__op": TRUNCATE})
        elif roll < 0.25:
            changes.append({"id": k, "v": None, "w": None, "__op": DELETE})
        elif roll < 0.4:
            changes.append({"id": k, "v": None, "w": i, "__op": UPDATE, "__set": ["w"]})
        else:
            changes.append({"id": k, "v": f"v{i}", "w": i, "__op": UPSERT})
    return changes


@pytest.mark.parametrize("seed", range(12))
def test_batches_in_order_give_the_true_table(seed: int) -> None:
    rng = random.Random(seed)
    changes = _workload(rng, 300, truncates=True)
    table = _table()
    target = Target(table)
    for b, start in enumerate(range(0, len(changes), 25), start=1):
        target.publish(b, changes[start : start + 25])
    assert target.rows == _truth(changes)


@pytest.mark.parametrize("seed", range(12))
def test_batches_out_of_order_never_let_an_older_change_win(seed: int) -> None:
    """Whole-row changes (the order-independent kind) published in shuffled batch
    order, each batch published twice (a re-run after a crash): the true table."""
    rng = random.Random(100 + seed)
    changes = [c for c in _workload(rng, 300, truncates=False) if c["__op"] != UPDATE]
    table = _table()
    target = Target(table)
    batches = [(b, changes[s : s + 20]) for b, s in enumerate(range(0, len(changes), 20), start=1)]
    rng.shuffle(batches)
    for b, rows in batches:
        target.publish(b, rows)
        target.publish(b, rows)  # a re-run: nothing changes
    assert target.rows == _truth(changes)


def test_a_delete_keeps_an_older_insert_out() -> None:
    table = _table()
    target = Target(table)
    target.publish(2, [{"id": 1, "v": None, "w": None, "__op": DELETE}])
    r = target.publish(1, [{"id": 1, "v": "old", "w": 1, "__op": UPSERT}])
    assert target.rows == {}
    assert r.stale == 1


def test_sequence_by_orders_changes_across_and_within_batches() -> None:
    table = _table("ts")
    target = Target(table)
    target.publish(
        1,
        [
            {"id": 1, "v": "late", "w": 1, "ts": 30, "__op": UPSERT},
            {"id": 1, "v": "early", "w": 1, "ts": 10, "__op": UPSERT},
        ],
    )
    assert target.rows[1]["v"] == "late"
    target.publish(2, [{"id": 1, "v": "older", "w": 1, "ts": 20, "__op": UPSERT}])
    assert target.rows[1]["v"] == "late"
    target.publish(3, [{"id": 1, "v": None, "w": None, "ts": 40, "__op": DELETE}])
    assert target.rows == {}


def test_partial_update_of_a_missing_key_changes_nothing() -> None:
    table = _table()
    target = Target(table)
    r = target.publish(1, [{"id": 7, "v": None, "w": 3, "__op": UPDATE, "__set": ["w"]}])
    assert target.rows == {} and r.missing == 1


def test_expired_tombstones_are_dropped_but_not_the_floor() -> None:
    table = _table()
    state = pa.Table.from_pylist(
        [
            {"id": 1, "__seq": 1, "__batch": 1, "__order": 0, "__deleted": True, "__changed_ms": 0},
            {
                "id": 2,
                "__seq": 1,
                "__batch": 1,
                "__order": 1,
                "__deleted": False,
                "__changed_ms": 0,
            },
            {
                "id": None,
                "__seq": None,
                "__batch": 1,
                "__order": 2,
                "__deleted": True,
                "__changed_ms": 0,
            },
        ],
        schema=ch.state_schema(table),
    )
    kept = ch.merge_state(state, state.slice(0, 0), table, now_ms=10**13)
    assert sorted(kept.column("id").to_pylist(), key=str) == [2, None]
