"""The raw format (Feldera's): each line (``mode: lines``) or each object (``mode:
blob``) is one row's value in one VARCHAR column; text that is not UTF-8 is a dead
letter; tables that cannot take the values are refused when the spec is loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import pipeline, read_table, run, status

from airflow_connectors.catalog import validate_pipeline
from airflow_connectors.formats import FORMATS
from airflow_connectors.formats.base import Decoded, NotText
from airflow_connectors.spec import ColumnSpec, SqlType, TableSpec

ONE = TableSpec(name="t", columns=(ColumnSpec(name="line", type=SqlType("VARCHAR")),))


def fmt(config: dict[str, Any], table: TableSpec = ONE) -> Any:
    cls = FORMATS.get("raw")
    f = cls(cls.Config.model_validate(config), table)
    return f


def decode(
    data: bytes,
    config: dict[str, Any],
    *,
    table: TableSpec = ONE,
    chunk: int = 3,
    block_bytes: int | None = None,
    final: bool = True,
    at_start: bool = True,
    first: int = 1,
) -> list[Decoded]:
    f = fmt(config, table)
    if block_bytes is not None:
        f.block_bytes = block_bytes
    chunks = iter([data[i : i + chunk] for i in range(0, len(data), chunk)])
    return list(f.decode(chunks, final=final, first_record=first, at_start=at_start))


def values(out: list[Decoded], column: str = "line") -> list[str]:
    return [r[column] for d in out for r in d.table.to_pylist()]


LINES = {"mode": "lines"}


@pytest.mark.parametrize("block_bytes", [1, 5, 1 << 20])
def test_lines_one_row_per_line(block_bytes: int) -> None:
    data = b'first line\n{"json": "as text"}\n\nwith crlf\r\n  spaces  \nlast without end'
    out = decode(data, LINES, block_bytes=block_bytes)
    assert values(out) == [
        "first line",
        '{"json": "as text"}',
        "",
        "with crlf",
        "  spaces  ",
        "last without end",
    ]
    assert sum(d.records for d in out) == 6
    assert out[-1].consumed == len(data)


def test_lines_partial_last_line_waits_and_resume_at_offset() -> None:
    data = b"a\nb\npartial"
    out = decode(data, LINES, final=False)
    assert values(out) == ["a", "b"]
    assert out[-1].consumed == 4
    rest = decode(b"partial line\nc\n", LINES, at_start=False, first=3)
    assert values(rest) == ["partial line", "c"]
    assert fmt(LINES).line_oriented and not fmt({}).line_oriented


def test_lines_invalid_utf8_is_a_dead_letter_with_line() -> None:
    data = b"good\ncaf\xe9\n\xef\xbb\xbfbom inside is text\nx\x80y\nend\n"
    out = decode(data, LINES)
    assert values(out) == ["good", "\ufeffbom inside is text", "end"]
    found = [(e.record, e.line, e.raw) for d in out for e in d.errors]
    assert found == [(2, 2, "caf\\xe9"), (4, 4, "x\\x80y")]
    error = next(e for d in out for e in d.errors).error
    assert "invalid UTF-8 at byte 4" in error and "column 'line' is VARCHAR" in error


def test_lines_skip_a_bom_and_refuse_compressed_objects() -> None:
    assert values(decode(b"\xef\xbb\xbfa\nb\n", LINES)) == ["a", "b"]
    import gzip

    with pytest.raises(NotText, match="gzip"):
        decode(gzip.compress(b"a\nb\n"), LINES)


def test_blob_one_row_per_object() -> None:
    data = b"line 1\nline 2\r\n\xc3\xbc"
    out = decode(data, {})
    assert values(out) == ["line 1\nline 2\r\nü"]
    assert (sum(d.records for d in out), out[-1].consumed) == (1, len(data))
    assert decode(b"", {}) == [Decoded(decode(b"x", {})[0].table.slice(0, 0), [], 0, 0)]
    bad = decode(b"\x89PNG\r\n\x1a\n\x00", {})
    assert values(bad) == []
    [e] = bad[0].errors
    assert (e.record, e.line) == (1, 1) and "invalid UTF-8 at byte 1" in e.error
    # A blob already committed is not read twice.
    assert values(decode(data, {}, first=2)) == []


def test_column_name_with_other_nullable_columns() -> None:
    table = TableSpec(
        name="t",
        columns=(
            ColumnSpec(name="n", type=SqlType("BIGINT")),
            ColumnSpec(name="body", type=SqlType("VARCHAR")),
        ),
    )
    out = decode(b"x\ny\n", {"mode": "lines", "column_name": "body"}, table=table)
    assert [r for d in out for r in d.table.to_pylist()] == [
        {"n": None, "body": "x"},
        {"n": None, "body": "y"},
    ]


@pytest.mark.parametrize(
    ("columns", "config", "message"),
    [
        (
            {"a": "VARCHAR", "b": "VARCHAR"},
            {},
            "format raw: table 't' has 2 columns (a, b); set format config column_name",
        ),
        ({"a": "BIGINT"}, {}, "column 'a' of table 't' is BIGINT; raw values are text"),
        ({"a": "VARCHAR"}, {"column_name": "b"}, "column_name 'b' is not a column of table 't'"),
        (
            {"a": "VARCHAR", "b": "INT NOT NULL"},
            {"column_name": "a"},
            "NOT NULL column(s) b that raw values cannot fill",
        ),
    ],
)
def test_a_table_that_cannot_take_raw_values_is_a_spec_error(
    columns: dict[str, str], config: dict[str, Any], message: str
) -> None:
    problems = validate_pipeline(
        {
            "pipeline": "p",
            "tables": {
                "t": {
                    "columns": columns,
                    "connectors": [
                        {
                            "name": "c",
                            "transport": {"name": "file_input", "config": {"path": "/tmp"}},
                            "format": {"name": "raw", "config": config},
                        }
                    ],
                }
            },
        }
    )
    [problem] = problems
    assert message in problem.message, problem
    assert problem.path.endswith("format.config"), problem
    assert "\n" not in problem.message


def test_engine_run_lines_and_blobs(spark: Any, sqlite_url: str, tmp_path: Path) -> None:
    lines_dir, blob_dir = tmp_path / "lines", tmp_path / "blobs"
    lines_dir.mkdir()
    blob_dir.mkdir()
    written = [f"log line {i} ü" for i in range(1000)]
    (lines_dir / "a.log").write_bytes(
        "\n".join(written[:500]).encode() + b"\nbad \xff byte\n" + "\n".join(written[500:]).encode()
    )
    blobs = {f"{i}.txt": f"document {i}\nsecond line" for i in range(5)}
    for name, text in blobs.items():
        (blob_dir / name).write_text(text)
    (blob_dir / "z.bin").write_bytes(b"\x00\xff\xfe binary")

    def connector(name: str, folder: Path, config: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": name,
            "transport": {"name": "file_input", "config": {"path": str(folder), "min_file_age": 0}},
            "format": {"name": "raw", "config": config},
            "errors": {"tolerance": "all"},
        }

    spec = pipeline(
        {
            "logs": {
                "columns": {"line": "VARCHAR"},
                "connectors": [connector("lines", lines_dir, {"mode": "lines"})],
            },
            "docs": {
                "columns": {"id": "BIGINT", "body": "VARCHAR"},
                "connectors": [connector("blobs", blob_dir, {"column_name": "body"})],
            },
        }
    )
    wh = str(tmp_path / "wh")
    report = run(spec, sqlite_url, wh, spark, raise_on_failure=False)
    assert report.failed == {}
    assert sorted(read_table(wh, "p", "logs").column("line").to_pylist()) == sorted(written)
    [dead] = read_table(wh, "p", "logs__errors").to_pylist()
    assert (dead["record_number"], dead["line_number"], dead["raw_text"]) == (
        501,
        501,
        "bad \\xff byte",
    )
    docs = read_table(wh, "p", "docs").to_pylist()
    assert sorted(r["body"] for r in docs) == sorted(blobs.values())
    assert all(r["id"] is None for r in docs)
    [bad_blob] = read_table(wh, "p", "docs__errors").to_pylist()
    assert bad_blob["source_key"] == str(blob_dir / "z.bin")
    st = status(sqlite_url, "p", "logs", "lines")
    assert (st.total_records, st.num_parse_errors) == (1000, 1)
    st = status(sqlite_url, "p", "docs", "blobs")
    assert (st.total_records, st.num_parse_errors) == (5, 1)
