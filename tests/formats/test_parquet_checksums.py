"""Parquet page checksums are verified (issue 22): a page whose CRC does not match (one
flipped byte) makes its file an unreadable object, counted and skipped under
``errors.tolerance: all``, never a wrong value landed. Real pyarrow files, the real
engine and Parquet sink (the conformance kit's ``Connector``)."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_connectors.formats import FORMATS
from airflow_connectors.spec import ColumnSpec, SqlType, TableSpec
from airflow_connectors.testing.conformance import Connector, Source


def parquet_bytes(ids: range, *, checksum: bool = True) -> bytes:
    table = pa.table(
        {"id": pa.array(ids, pa.int64()), "name": pa.array([f"value-{i}" for i in ids])}
    )
    buf = io.BytesIO()
    pq.write_table(table, buf, write_page_checksum=checksum, compression="none")
    return buf.getvalue()


def flipped(data: bytes, needle: bytes) -> bytes:
    """``data`` with one byte of ``needle`` changed: value-500 becomes value-900."""
    out = bytearray(data)
    at = out.find(needle)
    assert at >= 0
    out[at + 6] = ord("9")
    return bytes(out)


def test_a_page_that_fails_its_checksum_is_an_error_not_a_wrong_value() -> None:
    table = TableSpec(
        name="t",
        columns=(
            ColumnSpec(name="id", type=SqlType("BIGINT")),
            ColumnSpec(name="name", type=SqlType("VARCHAR")),
        ),
    )
    cls = FORMATS.get("parquet")
    fmt = cls(cls.Config.model_validate({}), table)
    good = parquet_bytes(range(1000))
    decoded = list(fmt.decode(iter([good]), final=True, first_record=1, at_start=True))
    rows = pa.concat_tables([d.table for d in decoded if d.table is not None])
    assert rows.column("name")[500].as_py() == "value-500"
    bad = flipped(good, b"value-500")
    with pytest.raises(OSError, match="row group 0: a page does not match its CRC checksum"):
        list(fmt.decode(iter([bad]), final=True, first_record=1, at_start=True))
    # Without checksums in the file there is nothing to verify (as every reader does).
    plain = flipped(parquet_bytes(range(1000), checksum=False), b"value-500")
    read = list(fmt.decode(iter([plain]), final=True, first_record=1, at_start=True))
    assert sum(d.table.num_rows for d in read if d.table is not None) == 1000


def test_the_damaged_file_is_skipped_and_counted_the_good_one_lands(tmp_path: Path) -> None:
    folder = tmp_path / "drop"
    folder.mkdir()
    (folder / "a.parquet").write_bytes(flipped(parquet_bytes(range(1000)), b"value-500"))
    (folder / "b.parquet").write_bytes(parquet_bytes(range(1000, 1010)))
    source = Source(
        transport="file_input",
        config={"path": str(folder), "min_file_age": 0},
        columns={"id": "BIGINT NOT NULL", "name": "VARCHAR"},
        format={"name": "parquet"},
        records=[],
        key_column="id",
        connector={"tasks_max": 1, "errors": {"tolerance": "all"}},
    )
    c = Connector(source, tmp_path / "c")
    try:
        found = c.discover()
        c.run(found.batch_ids)
        ids = sorted(c.table().column("id").to_pylist())
        assert ids == list(range(1000, 1010))  # nothing of the damaged file landed
        status = c.store.status(c.ref)
        assert status is not None and status.num_transport_errors == 1
        [error] = status.transport_errors
        assert "a.parquet" in error["message"] and "CRC checksum" in error["message"]
    finally:
        c.close()
