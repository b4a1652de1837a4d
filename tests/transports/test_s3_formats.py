"""Every format over s3_input on the S3 test server: JSON lines, a JSON array, CSV,
Parquet, Avro and raw lines, plain and compressed, each landing exactly its rows."""

from __future__ import annotations

import bz2
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_connectors.testing.s3server import S3Server
from tests.helpers import pipeline, read_table, run, status

IDS = range(1, 201)
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR"}


def _records(ids: range) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}"} for i in ids]


def _json_lines(ids: range) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in _records(ids)).encode()


def _json_array(ids: range) -> bytes:
    return json.dumps(_records(ids)).encode()


def _csv(ids: range) -> bytes:
    return ("id,name\n" + "".join(f"{i},n{i}\n" for i in ids)).encode()


def _parquet(ids: range) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(_records(ids)), buf)
    return buf.getvalue()


def _avro(ids: range) -> bytes:
    import fastavro

    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]}],
    }
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), _records(ids))
    return buf.getvalue()


def _raw(ids: range) -> bytes:
    return "".join(f"line {i}\n" for i in ids).encode()


# name: (format spec, encoder, object suffix, compressor)
CASES: dict[str, tuple[dict[str, Any], Any, str, Any]] = {
    "json_lines": (
        {"name": "json", "config": {"update_format": "raw"}},
        _json_lines,
        ".json",
        None,
    ),
    "json_lines_gzip": (
        {"name": "json", "config": {"update_format": "raw"}},
        _json_lines,
        ".json.gz",
        gzip.compress,
    ),
    "json_array": (
        {"name": "json", "config": {"update_format": "raw", "array": True}},
        _json_array,
        ".json",
        None,
    ),
    "csv_bz2": ({"name": "csv", "config": {"headers": True}}, _csv, ".csv.bz2", bz2.compress),
    "parquet": ({"name": "parquet", "config": {}}, _parquet, ".parquet", None),
    "avro": ({"name": "avro", "config": {}}, _avro, ".avro", None),
    "raw_lines": ({"name": "raw", "config": {"mode": "lines"}}, _raw, ".txt", None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_format_over_s3(
    case: str, s3_server: S3Server, s3_bucket: str, tmp_path: Path, spark: Any
) -> None:
    fmt, encode, suffix, compress = CASES[case]
    client = s3_server.client()
    # Three objects so several work items (and tasks) take part.
    chunks = (range(1, 81), range(81, 151), range(151, 201))
    for n, ids in enumerate(chunks):
        body = encode(ids)
        client.put_object(
            Bucket=s3_bucket, Key=f"in/part-{n}{suffix}", Body=compress(body) if compress else body
        )
    columns = {"line": "VARCHAR"} if fmt["name"] == "raw" else COLUMNS
    spec = pipeline(
        {
            "t": {
                "columns": columns,
                "connectors": [
                    {
                        "name": "c",
                        "transport": {
                            "name": "s3_input",
                            "config": s3_server.config(s3_bucket, prefix="in/"),
                        },
                        "format": fmt,
                    }
                ],
            }
        }
    )
    store = f"sqlite:///{tmp_path / 'state.db'}"
    warehouse = str(tmp_path / "wh")
    run(spec, store, warehouse, spark)
    table = read_table(warehouse, "p", "t")
    st = status(store, "p", "t", "c")
    assert st.finished, st
    assert st.num_parse_errors == 0 and st.num_transport_errors == 0, st
    if fmt["name"] == "raw":
        assert sorted(table.column("line").to_pylist()) == sorted(f"line {i}" for i in IDS)
    else:
        got = sorted(
            zip(table.column("id").to_pylist(), table.column("name").to_pylist(), strict=True)
        )
        assert got == [(i, f"n{i}") for i in IDS]
    # A second run finds nothing new and adds nothing.
    run(spec, store, warehouse, spark)
    assert read_table(warehouse, "p", "t").num_rows == len(IDS)
