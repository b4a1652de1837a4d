"""The avro format: object container files read block by block as bytes arrive, the
writer schema resolved to the table by field name (schema evolution), logical types,
dead letters for values that do not fit, and one-line failures for containers that are
not Avro, cut short or corrupt."""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest
from helpers import pipeline, read_table, run, status

from airflow_connectors.catalog import validate_pipeline
from airflow_connectors.formats import FORMATS
from airflow_connectors.formats.avro_format import AvroError
from airflow_connectors.formats.base import Decoded
from airflow_connectors.spec import ColumnSpec, SqlType, TableSpec

TABLE = TableSpec(
    name="t",
    columns=(
        ColumnSpec(name="id", type=SqlType("BIGINT"), nullable=False),
        ColumnSpec(name="name", type=SqlType("VARCHAR")),
        ColumnSpec(name="qty", type=SqlType("INT")),
        ColumnSpec(name="amount", type=SqlType("DECIMAL", 10, 2)),
        ColumnSpec(name="day", type=SqlType("DATE")),
        ColumnSpec(name="at", type=SqlType("TIMESTAMP")),
        ColumnSpec(name="score", type=SqlType("DOUBLE")),
    ),
)

V1 = {
    "type": "record",
    "name": "Row",
    "namespace": "test",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"], "default": None},
        {"name": "qty", "type": "int"},
        {
            "name": "amount",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "extra", "type": "string"},  # the table has no such column
    ],
}


def v1_row(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "name": f"n{i} ü",
        "qty": i * 3,
        "amount": Decimal(f"{i}.{i % 100:02d}"),
        "day": dt.date(2024, 1, 1) + dt.timedelta(days=i),
        "at": dt.datetime(2024, 1, 1, 10, tzinfo=dt.UTC) + dt.timedelta(seconds=i),
        "extra": "x",
    }


def v1_expected(i: int) -> dict[str, Any]:
    r = v1_row(i)
    return {
        **{k: r[k] for k in ("id", "name", "qty", "amount", "day")},
        "at": r["at"].replace(tzinfo=None),
        "score": None,
    }


def container(schema: dict[str, Any], records: list[dict[str, Any]], **kw: Any) -> bytes:
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), records, **kw)
    return out.getvalue()


def fmt(config: dict[str, Any] | None = None, table: TableSpec = TABLE) -> Any:
    cls = FORMATS.get("avro")
    return cls(cls.Config.model_validate(config or {}), table)


def decode(
    data: bytes, *, chunk: int = 7, first: int = 1, config: dict[str, Any] | None = None
) -> list[Decoded]:
    chunks = iter([data[i : i + chunk] for i in range(0, len(data), chunk)])
    return list(fmt(config).decode(chunks, final=True, first_record=first, at_start=True))


def rows(out: list[Decoded]) -> list[dict[str, Any]]:
    return [r for d in out for r in d.table.to_pylist()]


def errs(out: list[Decoded]) -> list[tuple[int, str, str]]:
    return [(e.record, e.error, e.raw) for d in out for e in d.errors]


@pytest.mark.parametrize("chunk", [1, 13, 4096, 1 << 20])
@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_container_records_land_with_logical_types(chunk: int, codec: str) -> None:
    data = container(V1, [v1_row(i) for i in range(1, 301)], codec=codec, sync_interval=500)
    out = decode(data, chunk=chunk)
    assert rows(out) == [v1_expected(i) for i in range(1, 301)]
    assert errs(out) == []
    assert sum(d.records for d in out) == 300
    assert out[-1].consumed == len(data)


@pytest.mark.slow
def test_blocks_are_read_as_bytes_arrive() -> None:
    """The first rows are decoded before the last chunk is read: the object is not
    loaded whole."""
    n = 30_000
    data = container(V1, [v1_row(i) for i in range(n)], sync_interval=16_000)
    pulled = 0
    chunk = 4096

    def chunks() -> Any:
        nonlocal pulled
        for i in range(0, len(data), chunk):
            pulled += chunk
            yield data[i : i + chunk]

    it = fmt().decode(chunks(), final=True, first_record=1, at_start=True)
    first = next(it)
    assert first.table.num_rows > 0
    assert pulled < len(data) / 2, (pulled, len(data))
    assert first.table.num_rows + sum(d.table.num_rows for d in it) == n


def test_schema_evolution_added_and_removed_optional_fields() -> None:
    """Files written before and after schema changes land in the same table: a column
    the writer lacks is NULL, a field the table lacks is ignored, int -> BIGINT and
    float -> DOUBLE are promotions, and names match regardless of case."""
    old = {
        "type": "record",
        "name": "Row",
        "fields": [
            {"name": "ID", "type": "int"},  # int, another case
            {"name": "name", "type": "string"},
        ],
    }
    new = {
        "type": "record",
        "name": "Row",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"], "default": None},
            {"name": "score", "type": ["null", "float"], "default": None},  # added
            {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
        ],
    }
    removed = {
        "type": "record",
        "name": "Row",
        "fields": [{"name": "id", "type": "long"}],  # name removed
    }
    a = rows(decode(container(old, [{"ID": 1, "name": "a"}])))
    b = rows(decode(container(new, [{"id": 2, "name": None, "score": 1.5, "tags": ["t"]}])))
    c = rows(decode(container(removed, [{"id": 3}])))
    empty = dict.fromkeys(c.name for c in TABLE.columns)
    assert a == [{**empty, "id": 1, "name": "a"}]
    assert b == [{**empty, "id": 2, "score": 1.5}]
    assert c == [{**empty, "id": 3}]


def test_values_that_do_not_fit_are_dead_letters() -> None:
    schema = {
        "type": "record",
        "name": "Row",
        "fields": [
            {"name": "id", "type": ["null", "long"]},
            {"name": "qty", "type": ["null", "long", "string"]},  # a union of two types
            {"name": "name", "type": ["null", "string"]},
        ],
    }
    records = [
        {"id": 1, "qty": 5, "name": "ok"},
        {"id": None, "qty": 1, "name": "null id"},  # NOT NULL
        {"id": 3, "qty": 2**40, "name": "overflow"},  # beyond INT
        {"id": 4, "qty": "five", "name": "text"},  # a string into INT
        {"id": 5, "qty": None, "name": "ok"},
    ]
    out = decode(container(schema, records))
    assert [r["id"] for r in rows(out)] == [1, 5]
    found = errs(out)
    assert [e[0] for e in found] == [2, 3, 4]
    assert "'id' is NOT NULL" in found[0][1]
    assert "column 'qty' (INT)" in found[1][1] and str(2**40) in found[1][1]
    assert "column 'qty' (INT)" in found[2][1]
    assert json.loads(found[2][2]) == records[3]


def test_wrong_types_for_every_record_of_a_file() -> None:
    """A file whose schema gives a column another type: each record a dead letter naming
    the column, never a crash."""
    schema = {
        "type": "record",
        "name": "Row",
        "fields": [
            {"name": "id", "type": "double"},
            {"name": "day", "type": "string"},
        ],
    }
    out = decode(container(schema, [{"id": 1.5, "day": "2024-01-02"}, {"id": 2.0, "day": "x"}]))
    assert rows(out) == []
    assert [e[0] for e in errs(out)] == [1, 2]
    assert all("column 'id' (BIGINT)" in e[1] for e in errs(out))


def test_records_already_committed_are_skipped() -> None:
    data = container(V1, [v1_row(i) for i in range(1, 21)], sync_interval=200)
    out = decode(data, first=8)
    assert [r["id"] for r in rows(out)] == list(range(8, 21))
    assert sum(d.records for d in out) == 13


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not an Avro object container file: the object is empty"),
        (b'{"id": 1}\n', "does not start with 'Obj\\x01' (it looks like JSON: format json?)"),
        (b"PAR1" + b"\0" * 100, "format parquet?"),
        (b"Obj\x01\x02", "cannot read the Avro container's header"),
    ],
)
def test_not_avro_is_one_line_naming_what_it_is(data: bytes, message: str) -> None:
    with pytest.raises(AvroError) as e:
        decode(data)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_truncated_and_corrupt_containers_fail_naming_the_block() -> None:
    data = container(V1, [v1_row(i) for i in range(1, 201)], sync_interval=1000)
    blocks = [b.offset for b in fastavro.block_reader(io.BytesIO(data))]
    assert len(blocks) > 3
    with pytest.raises(AvroError, match=r"truncated Avro container: the block at byte \d+"):
        decode(data[: (blocks[2] + blocks[3]) // 2])
    corrupt = bytearray(data)
    corrupt[blocks[1] + 40 : blocks[1] + 60] = b"\xff" * 20
    with pytest.raises(AvroError) as e:
        decode(bytes(corrupt))
    assert f"the block at byte {blocks[1] + 1} " in str(e.value)
    assert "\n" not in str(e.value)


def test_schemaless_records_with_a_configured_schema() -> None:
    schema = {"type": "record", "name": "Row", "fields": [{"name": "id", "type": "long"}]}
    parsed = fastavro.parse_schema(schema)

    def record(i: int, header: bool) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {"id": i})
        return (b"\0" + struct.pack(">I", 7) if header else b"") + out.getvalue()

    config = {"schema": json.dumps(schema)}
    with_header = b"".join(record(i, True) for i in (1, 2, 3))
    assert [r["id"] for r in rows(decode(with_header, config=config))] == [1, 2, 3]
    bare = b"".join(record(i, False) for i in (4, 5))
    skip = {**config, "skip_schema_id": True}
    assert [r["id"] for r in rows(decode(bare, config=skip))] == [4, 5]
    with pytest.raises(AvroError, match="skip_schema_id: true"):
        decode(bare, config=config)
    assert fmt(config).config.model_dump()["schema"] == json.dumps(schema)
    with pytest.raises(AvroError, match="an Avro container file: remove format config schema"):
        decode(container(schema, [{"id": 1}]), config=config)


def test_a_bad_configured_schema_is_a_spec_error() -> None:
    problems = validate_pipeline(
        {
            "pipeline": "p",
            "tables": {
                "t": {
                    "columns": {"id": "BIGINT"},
                    "connectors": [
                        {
                            "name": "c",
                            "transport": {"name": "file_input", "config": {"path": "/tmp"}},
                            "format": {"name": "avro", "config": {"schema": '"long"'}},
                        }
                    ],
                }
            },
        }
    )
    assert any("config schema is 'long', not a record" in p.message for p in problems), problems


def test_engine_run_two_schema_versions_into_one_table(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.avro").write_bytes(container(V1, [v1_row(i) for i in range(1, 501)]))
    v2 = {
        **V1,
        "fields": [
            *[f for f in V1["fields"] if f["name"] not in ("name", "extra")],  # removed
            {"name": "score", "type": ["null", "double"], "default": None},  # added
        ],
    }
    later = [{**v1_row(i), "score": i / 2} for i in range(501, 601)]
    for r in later:
        del r["name"], r["extra"]
    later.append({**later[0], "id": 601, "qty": 2**31})  # does not fit INT
    (folder / "b.avro").write_bytes(container(v2, later, codec="deflate"))
    (folder / "c.avro").write_bytes(b"not avro at all")
    spec = pipeline(
        {
            "t": {
                "columns": {
                    "id": "BIGINT NOT NULL",
                    "name": "VARCHAR",
                    "qty": "INT",
                    "amount": "DECIMAL(10, 2)",
                    "day": "DATE",
                    "at": "TIMESTAMP",
                    "score": "DOUBLE",
                },
                "connectors": [
                    {
                        "name": "av",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(folder), "min_file_age": 0},
                        },
                        "format": {"name": "avro"},
                        "errors": {"tolerance": "all"},
                    }
                ],
            }
        }
    )
    wh = str(tmp_path / "wh")
    report = run(spec, sqlite_url, wh, spark, raise_on_failure=False)
    assert report.failed == {}
    landed = sorted(read_table(wh, "p", "t").to_pylist(), key=lambda r: r["id"])
    want = [v1_expected(i) for i in range(1, 501)] + [
        {**v1_expected(i), "name": None, "score": i / 2} for i in range(501, 601)
    ]
    assert landed == want
    [dead] = read_table(wh, "p", "t__errors").to_pylist()
    assert (dead["source_key"], dead["record_number"]) == (str(folder / "b.avro"), 101)
    assert "column 'qty' (INT)" in dead["error"]
    st = status(sqlite_url, "p", "t", "av")
    assert (st.total_records, st.num_parse_errors, st.num_transport_errors) == (600, 1, 1)
    [skipped] = st.transport_errors
    assert str(folder / "c.avro") in skipped["message"]
    assert "not an Avro object container file" in skipped["message"]


def test_a_schema_without_a_not_null_column_makes_every_record_a_dead_letter() -> None:
    schema = {"type": "record", "name": "Row", "fields": [{"name": "name", "type": "string"}]}
    out = decode(container(schema, [{"name": f"n{i}"} for i in range(20_000)]), chunk=1 << 16)
    assert rows(out) == []
    found = errs(out)
    assert [e[0] for e in found] == list(range(1, 20_001))
    assert (
        "column 'id' is NOT NULL but the Avro schema of the object has no such field"
        in (found[0][1])
    )
    assert json.loads(found[-1][2]) == {"name": "n19999"}


def _recompress(data: bytes, codec: str) -> bytes:
    """``data`` (a container written with codec null) with its blocks compressed as
    Avro's ``codec`` specifies: built by hand, as fastavro writes these codecs only with
    libraries this project does not install."""
    import zlib

    import pyarrow as pa
    import zstandard

    def long(n: int) -> bytes:
        n = (n << 1) ^ (n >> 63)
        out = bytearray()
        while n & ~0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        return bytes(out)

    reader = fastavro.block_reader(io.BytesIO(data))
    header = io.BytesIO()
    meta = {**reader.metadata, "avro.codec": codec}
    fastavro.schemaless_writer(
        header,
        fastavro.parse_schema(
            {
                "type": "record",
                "name": "org.apache.avro.file.Header",
                "fields": [
                    {"name": "magic", "type": {"type": "fixed", "name": "Magic", "size": 4}},
                    {"name": "meta", "type": {"type": "map", "values": "bytes"}},
                    {"name": "sync", "type": {"type": "fixed", "name": "Sync", "size": 16}},
                ],
            }
        ),
        {"magic": b"Obj\x01", "meta": {k: v.encode() for k, v in meta.items()}, "sync": b"s" * 16},
    )
    out = bytearray(header.getvalue())
    for block in reader:
        raw = block.bytes_.getvalue()
        if codec == "snappy":
            body = pa.Codec("snappy").compress(raw, asbytes=True)
            body += zlib.crc32(raw).to_bytes(4, "big")
        elif codec == "zstandard":
            body = zstandard.ZstdCompressor().compress(raw)
        else:  # lz4, as lz4.block stores it: the size, then the raw block
            body = len(raw).to_bytes(4, "little") + pa.Codec("lz4_raw").compress(raw, asbytes=True)
        out += long(block.num_records) + long(len(body)) + body + b"s" * 16
    return bytes(out)


@pytest.mark.parametrize("codec", ["snappy", "zstandard", "lz4"])
def test_snappy_zstandard_and_lz4_blocks(codec: str) -> None:
    plain = container(V1, [v1_row(i) for i in range(1, 401)], sync_interval=2000)
    data = _recompress(plain, codec)
    assert data != plain and fastavro.block_reader(io.BytesIO(data)).codec == codec
    out = decode(data, chunk=1000)
    assert rows(out) == [v1_expected(i) for i in range(1, 401)]
    if codec == "snappy":  # a block whose checksum does not match is corrupt
        bad = bytearray(data)
        bad[-17] ^= 0xFF  # the last CRC byte of the last block
        with pytest.raises(AvroError, match="CRC-32"):
            decode(bytes(bad))
