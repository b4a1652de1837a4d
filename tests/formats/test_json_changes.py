"""json ``update_format: insert_delete`` (Feldera's default) as change records: insert ->
upsert, delete -> delete, update -> a partial update whose ``__set`` names the columns
the record gives; into a table without a key a delete or update is that record's dead
letter, never appended."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from airflow_connectors.changes import DELETE, OP, SET, UPDATE, UPSERT
from airflow_connectors.formats.base import Decoded
from airflow_connectors.formats.json_format import JsonConfig, JsonFormat
from airflow_connectors.spec import ColumnSpec, SqlType, TableSpec


def table(*, keyed: bool = True, evolution: str | None = None) -> TableSpec:
    return TableSpec(
        name="people",
        columns=(
            ColumnSpec(name="id", type=SqlType("BIGINT"), nullable=False),
            ColumnSpec(name="name", type=SqlType("VARCHAR")),
            ColumnSpec(name="n", type=SqlType("INT")),
            ColumnSpec(name="day", type=SqlType("DATE")),
        ),
        primary_key=("id",) if keyed else (),
        sink={"name": "delta"},
        **({"schema_evolution": evolution} if evolution else {}),
    )


def decode(
    records: list[Any], *, keyed: bool = True, chunk: int = 0, **config: Any
) -> list[Decoded]:
    text = b"".join(
        (r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in records
    )
    fmt = JsonFormat(JsonConfig.model_validate(config), table(keyed=keyed))
    chunks = [text[i : i + chunk] for i in range(0, len(text), chunk)] if chunk else [text]
    return list(fmt.decode(iter(chunks), final=True, first_record=1, at_start=True))


def rows(out: list[Decoded]) -> list[dict[str, Any]]:
    tables = [d.table for d in out if d.table.num_rows]
    return pa.concat_tables(tables).to_pylist() if tables else []


def errors(out: list[Decoded]) -> list[tuple[int, str]]:
    return [(e.record, e.error) for d in out for e in d.errors]


CHANGES: list[Any] = [
    {"insert": {"id": 1, "name": "ann", "n": 7, "day": "2024-01-02"}},
    {"delete": {"id": 2}},
    {"update": {"id": 3, "n": None}},  # sets n to null, keeps name and day
    {"update": {"day": "2024-02-03", "name": "bo", "id": 4, "other": 1}},  # table order
]


@pytest.mark.parametrize(
    "config", [{}, {"lines": "single"}, {"array": True}], ids=["multiple", "single", "array"]
)
def test_insert_delete_and_update_become_upsert_delete_and_partial_update(config: dict) -> None:
    records = [CHANGES] if config.get("array") else CHANGES
    out = decode(records, **config)
    assert errors(out) == []
    got = rows(out)
    assert [r[OP] for r in got] == [UPSERT, DELETE, UPDATE, UPDATE]
    assert [r["id"] for r in got] == [1, 2, 3, 4]
    assert got[0]["name"] == "ann" and got[0]["n"] == 7 and got[0][SET] is None
    assert got[1][SET] is None and got[1]["name"] is None  # a delete carries its key
    # __set: the table's columns the update's object gives, in table order; a field
    # given as null is set (to null), a field left out keeps its value.
    assert got[2][SET] == ["id", "n"]
    assert got[3][SET] == ["id", "name", "day"]
    assert str(got[3]["day"]) == "2024-02-03" and got[3]["name"] == "bo"


def test_pretty_printed_updates_cut_in_small_chunks_keep_their_set() -> None:
    text = b"".join(json.dumps(r, indent=2).encode() + b"\n" for r in CHANGES)
    fmt = JsonFormat(JsonConfig(), table())
    chunks = [text[i : i + 5] for i in range(0, len(text), 5)]
    out = list(fmt.decode(iter(chunks), final=True, first_record=1, at_start=True))
    got = rows(out)
    assert [r[OP] for r in got] == [UPSERT, DELETE, UPDATE, UPDATE]
    assert [r[SET] for r in got] == [None, None, ["id", "n"], ["id", "name", "day"]]


def test_a_block_of_inserts_alone_is_plain_rows_and_upserts_of_a_keyed_table() -> None:
    inserts = [{"insert": {"id": i, "name": f"p{i}"}} for i in range(1, 1001)]
    plain = rows(decode(inserts, keyed=False))
    assert [r["id"] for r in plain] == list(range(1, 1001))
    assert OP not in plain[0]  # appended rows, as always
    keyed = rows(decode(inserts))
    assert {r[OP] for r in keyed} == {UPSERT}


def test_deletes_and_updates_into_a_table_without_a_key_are_dead_letters() -> None:
    out = decode([*CHANGES, {"insert": {"id": 5}}], keyed=False)
    assert [r["id"] for r in rows(out)] == [1, 5]
    found = errors(out)
    assert [n for n, _ in found] == [2, 3, 4]
    for _, message in found:
        assert "table people, which has no primary key" in message
        assert "primary_key" in message
    assert sum(d.records for d in out) == 5


def test_bad_change_records_are_isolated_and_the_others_land() -> None:
    out = decode(
        [
            {"insert": {"id": 1}},
            {"delete": {"id": 1}, "insert": {"id": 1}},  # two changes in one record
            {"id": 3},  # a bare row
            {"update": {"name": "no key"}},  # an update must give the key
            {"delete": {"id": "two"}},  # a key that does not fit
            {"update": {"id": 6, "n": 1.5}},  # a value that does not fit
            {"update": {"id": 7, "n": 2}},
        ],
        chunk=9,
    )
    got = rows(out)
    assert [(r["id"], r[OP], r[SET]) for r in got] == [(1, UPSERT, None), (7, UPDATE, ["id", "n"])]
    found = dict(errors(out))
    assert sorted(found) == [2, 3, 4, 5, 6]
    assert "more than one of insert, delete and update" in found[2]
    assert '"update_format": "raw"' in found[3]
    assert "'id'" in found[4] and "NOT NULL" in found[4]
    assert "column 'id' (BIGINT)" in found[5]
    assert "column 'n' (INT)" in found[6] and "1.5" in found[6]


def test_updates_under_add_new_columns_name_only_table_columns_in_set() -> None:
    fmt = JsonFormat(JsonConfig(), table(evolution="add_new_columns"))
    data = b'{"update": {"id": 1, "extra": 5, "n": 2}}\n{"insert": {"id": 2, "extra": 6}}\n'
    out = list(fmt.decode(iter([data]), final=True, first_record=1, at_start=True))
    got = rows(out)
    assert [r[SET] for r in got] == [["id", "n"], None]
    assert "extra" in fmt.evolution.take()
