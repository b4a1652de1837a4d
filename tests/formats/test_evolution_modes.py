"""Each format under each ``schema_evolution`` mode (no Spark): what becomes of fields the
table lacks and of values that do not fit their column."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_connectors.formats import Format
from airflow_connectors.formats._conform import NewFields
from airflow_connectors.formats.avro_format import AvroConfig, AvroFormat
from airflow_connectors.formats.csv_format import CsvConfig, CsvFormat
from airflow_connectors.formats.json_format import JsonConfig, JsonFormat
from airflow_connectors.formats.parquet_format import ParquetConfig, ParquetFormat
from airflow_connectors.spec.models import RESCUED_DATA, ColumnSpec, TableSpec
from airflow_connectors.spec.types import SqlType

MODES = ["none", "rescue", "fail_on_new_columns", "add_new_columns"]


def table(mode: str) -> TableSpec:
    columns = [
        ColumnSpec(name="id", type=SqlType("BIGINT"), nullable=False),
        ColumnSpec(name="name", type=SqlType("VARCHAR")),
    ]
    if mode == "rescue":  # what the engine gives a rescuing table
        columns.append(ColumnSpec(name=RESCUED_DATA, type=SqlType("VARCHAR")))
    return TableSpec(name="t", columns=tuple(columns), schema_evolution=mode)  # type: ignore[arg-type]


def decode(fmt: Format, data: bytes) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    rows: list[dict[str, Any]] = []
    errors: list[tuple[int, str]] = []
    for d in fmt.decode(iter([data]), final=True, first_record=1, at_start=True):
        rows += d.table.to_pylist()
        errors += [(e.record, e.error) for e in d.errors]
    return rows, errors


def rescued(rows: list[dict[str, Any]]) -> list[Any]:
    return [None if r[RESCUED_DATA] is None else json.loads(r[RESCUED_DATA]) for r in rows]


JSON = (
    b'{"id": 1, "name": "a"}\n'
    b'{"id": 2, "name": "b", "x": 5, "y": {"k": [1]}}\n'
    b'{"id": "three", "name": "c"}\n'
    b'{"id": 4, "name": true, "x": 2.5}\n'
)


@pytest.mark.parametrize("mode", MODES)
def test_json(mode: str) -> None:
    fmt = JsonFormat(JsonConfig(update_format="raw"), table(mode))
    if mode == "fail_on_new_columns":
        with pytest.raises(NewFields) as exc:
            decode(fmt, JSON)
        assert exc.value.fields == ["x", "y"]
        return
    rows, errors = decode(fmt, JSON)
    if mode == "rescue":
        # "three" cannot be rescued: id is NOT NULL (see test_json_rescue_keeps_not_null).
        assert [(r["id"], r["name"]) for r in rows] == [(1, "a"), (2, "b"), (4, None)]
        assert rescued(rows) == [None, {"x": 5, "y": {"k": [1]}}, {"name": True, "x": 2.5}]
        assert errors == [
            (
                3,
                "column 'id' (BIGINT): expected an integer from -2^63 to 2^63-1, got the string \"three\"",
            )
        ]
        return
    assert rows == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    assert [n for n, _ in errors] == [3, 4]
    seen = fmt.evolution.take()
    if mode == "add_new_columns":  # the types each new field was read as
        assert seen == {"x": [pa.int64()], "y": [pa.struct([("k", pa.list_(pa.int64()))])]}
    else:
        assert seen == {}


def test_json_rescue_keeps_not_null() -> None:
    """A misfit in a NOT NULL column cannot be rescued (the row would have no id): a
    parse error naming the column, whatever else the record rescues."""
    fmt = JsonFormat(JsonConfig(update_format="raw"), table("rescue"))
    data = b'{"id": 1, "name": "a"}\n{"id": "two", "name": 2}\n'
    rows, errors = decode(fmt, data)
    assert [r["id"] for r in rows] == [1]
    assert errors == [
        (
            2,
            "column 'id' (BIGINT): expected an integer from -2^63 to 2^63-1, got the string \"two\"",
        )
    ]


def test_json_insert_delete_reads_new_fields_inside_insert() -> None:
    fmt = JsonFormat(JsonConfig(), table("rescue"))
    rows, errors = decode(fmt, b'{"insert": {"id": 1, "name": "a", "z": "new"}}\n')
    assert errors == [] and rescued(rows) == [{"z": "new"}]


def parquet_file() -> bytes:
    buf = io.BytesIO()
    pq.write_table(
        pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "name": pa.array(["a", None]),
                "x": pa.array([1.5, None]),
                "z": pa.array([None, None], pa.int32()),
            }
        ),
        buf,
    )
    return buf.getvalue()


@pytest.mark.parametrize("mode", MODES)
def test_parquet(mode: str) -> None:
    fmt = ParquetFormat(ParquetConfig(), table(mode))
    if mode == "fail_on_new_columns":
        # A column of the file is a field, whether or not a row has a value in it.
        with pytest.raises(NewFields) as exc:
            decode(fmt, parquet_file())
        assert exc.value.fields == ["x", "z"]
        return
    rows, errors = decode(fmt, parquet_file())
    assert errors == []
    assert [(r["id"], r["name"]) for r in rows] == [(1, "a"), (2, None)]
    if mode == "rescue":
        assert rescued(rows) == [{"x": 1.5}, None]
    seen = fmt.evolution.take()
    assert seen == ({"x": [pa.float64()], "z": [pa.int32()]} if mode == "add_new_columns" else {})


def avro_file() -> bytes:
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"]},
            {"name": "x", "type": ["null", "double"]},
        ],
    }
    buf = io.BytesIO()
    fastavro.writer(buf, schema, [{"id": 1, "name": "a", "x": 0.5}, {"id": 2, "name": None}])
    return buf.getvalue()


@pytest.mark.parametrize("mode", MODES)
def test_avro(mode: str) -> None:
    fmt = AvroFormat(AvroConfig(), table(mode))
    if mode == "fail_on_new_columns":
        with pytest.raises(NewFields) as exc:
            decode(fmt, avro_file())
        assert exc.value.fields == ["x"]
        return
    rows, errors = decode(fmt, avro_file())
    assert errors == [] and [(r["id"], r["name"]) for r in rows] == [(1, "a"), (2, None)]
    if mode == "rescue":
        assert rescued(rows) == [{"x": 0.5}, None]
    seen = fmt.evolution.take()
    assert seen == ({"x": [pa.float64()]} if mode == "add_new_columns" else {})


@pytest.mark.parametrize("mode", MODES)
def test_csv_fields_are_positions(mode: str) -> None:
    """CSV has no field names to compare: every mode reads it as `none` does, `rescue`
    with its _rescued_data column NULL (the made column is no field of the file)."""
    fmt = CsvFormat(CsvConfig(), table(mode))
    rows, errors = decode(fmt, b"1,a\n2,b\n3,c,extra\n")
    assert [(r["id"], r["name"]) for r in rows] == [(1, "a"), (2, "b")]
    assert errors == [(3, "expected 2 columns, found 3")]
    if mode == "rescue":
        assert rescued(rows) == [None, None]
