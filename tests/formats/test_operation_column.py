"""An operation column (Databricks' apply_as_deletes, AWS DMS's ``Op``) in csv, avro,
parquet and json ``update_format: raw``: delete values make deletes of the row's key,
truncate values truncates, anything else upserts; the column is not stored; a table
without a key refuses it when the spec is loaded."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_connectors.catalog import validate_pipeline
from airflow_connectors.changes import DELETE, OP, TRUNCATE, UPSERT
from airflow_connectors.formats import FORMATS
from airflow_connectors.formats.base import Decoded
from airflow_connectors.spec import ColumnSpec, SqlType, TableSpec

TABLE = TableSpec(
    name="orders",
    columns=(
        ColumnSpec(name="id", type=SqlType("BIGINT"), nullable=False),
        ColumnSpec(name="item", type=SqlType("VARCHAR"), nullable=False),
        ColumnSpec(name="qty", type=SqlType("INT")),
    ),
    primary_key=("id",),
    sink={"name": "delta"},
)

# (operation, id, item, qty): an insert, an update, a delete (DMS gives the whole old
# row; only the key counts), a delete with only its key, a value outside the lists, a
# null operation, a truncate.
ROWS: list[tuple[str | None, int | None, str | None, int | None]] = [
    ("I", 1, "pen", 2),
    ("U", 1, "pen", 3),
    ("D", 2, "ink", 1),
    ("delete", 3, None, None),
    ("merge", 4, "pad", 1),
    (None, 5, "cap", 1),
    ("T", None, None, None),
]
EXPECTED = [UPSERT, UPSERT, DELETE, DELETE, UPSERT, UPSERT, TRUNCATE]
CONFIG = {"operation_column": "Op", "truncate_values": ["T"]}


def decode(
    fmt: str, data: bytes, config: dict[str, Any], table: TableSpec = TABLE
) -> list[Decoded]:
    cls = FORMATS.get(fmt)
    f = cls(cls.Config.model_validate(config), table)
    return list(f.decode(iter([data]), final=True, first_record=1, at_start=True))


def rows(out: list[Decoded]) -> list[dict[str, Any]]:
    assert [e for d in out for e in d.errors] == []
    return pa.concat_tables([d.table for d in out if d.table.num_rows]).to_pylist()


def check(got: list[dict[str, Any]]) -> None:
    assert [r[OP] for r in got] == EXPECTED
    assert [r["id"] for r in got] == [r[1] for r in ROWS]
    assert "Op" not in got[0]  # not a table column: dropped
    assert got[1]["qty"] == 3


def _csv_field(v: object) -> str:
    return "" if v is None else str(v)


@pytest.mark.parametrize("position", ["first", "last"])
def test_csv(position: str) -> None:
    lines = []
    for op, *fields in ROWS:
        values = [_csv_field(v) for v in fields]
        values = [_csv_field(op), *values] if position == "first" else [*values, _csv_field(op)]
        lines.append(",".join(values))
    # A null operation is an empty field in CSV: an upsert like any other value.
    data = ("\n".join(lines) + "\n").encode()
    check(rows(decode("csv", data, {**CONFIG, "operation_position": position})))


def test_csv_error_in_a_row_names_its_column_not_the_operation_field() -> None:
    data = b"I,1,pen,2\nD,x,ink,1\nI,3,pad,many\n"
    out = decode("csv", data, CONFIG)
    found = {e.record: e.error for d in out for e in d.errors}
    assert sorted(found) == [2, 3]
    assert "column 'id' (BIGINT)" in found[2]
    assert "column 'qty' (INT)" in found[3]
    assert [r["id"] for r in rows([Decoded(d.table) for d in out])] == [1]


def test_json_raw() -> None:
    records = [{"Op": op, "id": i, "item": item, "qty": qty} for op, i, item, qty in ROWS]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    check(rows(decode("json", data, {**CONFIG, "update_format": "raw"})))


def _parquet(with_op: bool, rows: list[tuple[Any, ...]] = ROWS) -> bytes:
    cols: dict[str, Any] = {
        "id": pa.array([r[1] for r in rows], pa.int64()),
        "item": [r[2] for r in rows],
        "qty": pa.array([r[3] for r in rows], pa.int32()),
    }
    if with_op:  # dictionary-encoded, as Spark and DMS often write a low-cardinality column
        cols = {"Op": pa.array([r[0] for r in rows]).dictionary_encode(), **cols}
    buf = io.BytesIO()
    pq.write_table(pa.table(cols), buf)
    return buf.getvalue()


def test_parquet() -> None:
    check(rows(decode("parquet", _parquet(True), CONFIG)))


def test_parquet_without_the_column_is_all_upserts() -> None:
    # A full load written before the changes (DMS's first files have no Op column).
    full_load = [r for r in ROWS if r[2] is not None]
    got = rows(decode("parquet", _parquet(False, full_load), CONFIG))
    assert [(r["id"], r[OP]) for r in got] == [(r[1], UPSERT) for r in full_load]


@pytest.mark.parametrize("mode", ["fail_on_new_columns", "add_new_columns"])
def test_parquet_operation_column_is_no_new_column(mode: str) -> None:
    table = TABLE.model_copy(update={"schema_evolution": mode})
    f = FORMATS.get("parquet")(FORMATS.get("parquet").Config.model_validate(CONFIG), table)
    out = list(f.decode(iter([_parquet(True)]), final=True, first_record=1, at_start=True))
    check(rows(out))
    assert f.evolution.take() == {}


def test_avro() -> None:
    schema = {
        "type": "record",
        "name": "change",
        "fields": [
            {"name": "Op", "type": ["null", "string"]},
            {"name": "id", "type": ["null", "long"]},
            {"name": "item", "type": ["null", "string"]},
            {"name": "qty", "type": ["null", "int"]},
        ],
    }
    buf = io.BytesIO()
    records = [{"Op": op, "id": i, "item": item, "qty": qty} for op, i, item, qty in ROWS]
    fastavro.writer(buf, fastavro.parse_schema(schema), records)
    check(rows(decode("avro", buf.getvalue(), CONFIG)))


def test_default_delete_values_and_exact_comparison() -> None:
    data = b"".join(
        json.dumps({"op": op, "id": i, "item": "x"}).encode() + b"\n"
        for i, op in enumerate(["D", "d", "delete", "DELETE", "Delete", " D", "T"], 1)
    )
    got = rows(decode("json", data, {"operation_column": "op", "update_format": "raw"}))
    assert [r[OP] for r in got] == [DELETE] * 4 + [UPSERT] * 3


@pytest.mark.parametrize("fmt", ["csv", "json", "avro", "parquet"])
def test_a_table_without_a_key_refuses_an_operation_column_at_spec_load(fmt: str) -> None:
    config: dict[str, Any] = {"operation_column": "Op"}
    if fmt == "json":
        config["update_format"] = "raw"

    def doc(**table: Any) -> dict[str, Any]:
        connector = {
            "name": "c",
            "transport": {"name": "file_input", "config": {"path": f"/data/x.{fmt}"}},
            "format": {"name": fmt, "config": config},
        }
        t = {"columns": {"id": "BIGINT", "item": "VARCHAR"}, "connectors": [connector], **table}
        return {"pipeline": "p", "tables": {"orders": t}}

    found = [(e.path, e.message) for e in validate_pipeline(doc(sink={"name": "delta"}))]
    assert len(found) == 1, found
    path, message = found[0]
    assert path == "tables.orders.connectors[0].format.config"
    assert "table orders" in message and "primary_key" in message and "\n" not in message
    assert validate_pipeline(doc(sink={"name": "delta"}, primary_key=["id"])) == []
    clash = doc(sink={"name": "delta"}, primary_key=["id"])
    clash["tables"]["orders"]["columns"]["Op"] = "VARCHAR"
    found = [e.message for e in validate_pipeline(clash)]
    assert len(found) == 1 and "'Op' is a column of the table" in found[0], found
