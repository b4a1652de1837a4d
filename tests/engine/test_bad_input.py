"""Bad input through the real engine: a corpus of 29 kinds of bad input (see
:mod:`bad_input_corpus`), each the files of one file_input connector, all in one
pipeline and one table beside clean connectors, run once per ``errors.tolerance`` on
real local Spark.

- ``none``: each bad connector fails alone, naming its first bad object and record (or
  the object, when the object as a whole cannot be read); nothing of it lands.
- ``all``: the good records land with exactly the values written; each bad record is
  one dead letter with its record number, line and raw text; each unreadable object is
  one transport error; good + dead letters + unreadable objects = what was written.
- Either way the clean connectors land everything."""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path
from typing import Any

import bad_input_corpus
import pyarrow as pa
import pytest
from bad_input_corpus import BOM, COLUMNS, Kind, corpus, csv_line, json_line, row
from helpers import pipeline, read_table, run, status

from airflow_connectors.formats import FORMATS
from airflow_connectors.formats.base import NotText, clip

NAMES = [*bad_input_corpus.KINDS, *bad_input_corpus.CLEAN]


@functools.cache
def built() -> list[Kind]:
    """The corpus, built once when a test first needs it (not at collection: it holds
    about 100 MB)."""
    return corpus()


def bad() -> list[Kind]:
    return [k for k in built() if k.name in bad_input_corpus.KINDS]


def clean() -> list[Kind]:
    return [k for k in built() if k.name in bad_input_corpus.CLEAN]


@pytest.mark.slow  # about 0.5 s or more: outside the fast lane
def test_the_corpus_is_what_the_issue_asks_for() -> None:
    assert len(bad()) >= 16
    for k in built():
        # Every record and unreadable object written is accounted for exactly once.
        assert len(k.good) + len(k.bad) + len(k.bad_objects) == k.inputs, k.name
        assert len({r["id"] for r in k.good}) == len(k.good), k.name
    for k in bad():
        assert k.bad or k.bad_objects, k.name
        assert k.good, f"{k.name}: good records beside the bad ones show nothing is lost"
    ids = [r["id"] for k in built() for r in k.good]
    assert len(ids) == len(set(ids))


#: What the failure of each unreadable object says (beside the object and what to do).
CAUSES = {
    "parquet_corrupt": {
        "b.parquet": "Parquet magic bytes not found",
        "c.parquet": "Parquet magic bytes not found",
        "d.parquet": "Parquet file size is 0 bytes",
    },
    "json_gzip": {"b.json": "not UTF-8 text but gzip-compressed data (decompress it first)"},
    "avro_corrupt": {
        "b.avro": "not an Avro object container file: it does not start with 'Obj\\x01'",
        "c.avro": "corrupt or truncated Avro container: the block at byte ",
        "d.avro": "(it looks like JSON: format json?)",
        "e.avro": "corrupt or truncated Avro container: the block at byte ",
    },
    "csv_binary": {
        "b.csv": "not UTF-8 text but binary data (NUL bytes in its first 8192 bytes)",
        "c.csv": "the csv format reads UTF-8 text (it starts like a Parquet file: format parquet?)",
    },
}


def spec(root: Path, tolerance: str) -> Any:
    for k in built():
        k.write(root / tolerance)
    return pipeline(
        {
            "t": {
                "columns": COLUMNS,
                "connectors": [k.connector(root / tolerance, tolerance) for k in built()],
            }
        }
    )


def by_connector(table: pa.Table, kinds: list[Kind]) -> dict[str, list[dict[str, Any]]]:
    """Landed rows of each kind (ids are unique across the corpus), sorted by id."""
    owner = {k.base // 1_000_000: k.name for k in kinds}
    out: dict[str, list[dict[str, Any]]] = {k.name: [] for k in kinds}
    for r in table.to_pylist():
        out[owner[r["id"] // 1_000_000]].append(r)
    return {name: sorted(rows, key=lambda r: r["id"]) for name, rows in out.items()}


def expected_rows(k: Kind) -> list[dict[str, Any]]:
    return sorted(({c: r.get(c) for c in COLUMNS} for r in k.good), key=lambda r: r["id"])


def test_tolerance_none_fails_each_bad_connector_alone(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    wh = str(tmp_path / "wh")
    root = tmp_path / "data"
    report = run(spec(root, "none"), sqlite_url, wh, spark, raise_on_failure=False)

    assert set(report.failed) == {f"t.{k.name}" for k in bad()}
    for k in bad():
        message = report.failed[f"t.{k.name}"]
        key = str(root / "none" / k.name / k.first_failure[0])
        record = k.first_failure[1]
        assert message.startswith(f"connector p.t.{k.name}: "), message
        assert "\n" not in message and "Traceback" not in message
        if record is None:  # the object as a whole
            assert f"cannot decode {key} as " in message, (k.name, message)
            assert CAUSES[k.name][k.first_failure[0]] in message, message
        else:
            at = "" if record.line is None else f" (line {record.line})"
            assert f"record {record.record}{at} of {key}: " in message, (k.name, message)
        assert "errors.tolerance: all" in message, message
        # The batch's other failed objects are counted, not lost.
        more = len({b.file for b in k.bad} | set(k.bad_objects)) - 1
        tail = f"(and {more} more object(s) of the batch failed)"
        assert (tail in message) == bool(more), (k.name, message)
        st = status(sqlite_url, "p", "t", k.name)
        assert (st.state, st.total_records, st.fatal_error) == ("FAILED", 0, message)
    landed = by_connector(read_table(wh, "p", "t"), built())
    for k in bad():
        assert landed[k.name] == [], f"{k.name}: a failed batch landed rows"
    for k in clean():
        assert report.connectors[f"t.{k.name}"].status == "finished"
        assert landed[k.name] == expected_rows(k)
    assert read_table(wh, "p", "t__errors").num_rows == 0


def test_tolerance_all_lands_good_rows_and_dead_letters_exactly(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    wh = str(tmp_path / "wh")
    root = tmp_path / "data"
    report = run(spec(root, "all"), sqlite_url, wh, spark, raise_on_failure=False)

    assert report.failed == {}
    landed = by_connector(read_table(wh, "p", "t"), built())
    dead = read_table(wh, "p", "t__errors").to_pylist()
    dead_by: dict[str, list[dict[str, Any]]] = {k.name: [] for k in built()}
    for d in dead:
        dead_by[d["connector"]].append(d)
    for k in built():
        folder = root / "all" / k.name
        rep = report.connectors[f"t.{k.name}"]
        assert rep.status == "finished", (k.name, rep)
        # The good records, each with exactly the values written: nothing coerced.
        got = landed[k.name]
        want = expected_rows(k)
        assert [r["id"] for r in got] == [r["id"] for r in want], k.name
        for g, w in zip(got, want, strict=True):
            assert g == w, (k.name, _short(g), _short(w))
        # One dead letter per bad record: its object, record, line and raw text.
        letters = sorted(dead_by[k.name], key=lambda d: (d["source_key"], d["record_number"]))
        assert [(d["source_key"], d["record_number"], d["line_number"]) for d in letters] == [
            (str(folder / b.file), b.record, b.line) for b in k.bad
        ], k.name
        for d, b in zip(letters, k.bad, strict=True):
            assert d["error"], d
            if b.raw is not None:
                assert d["raw_text"] == clip(b.raw), (k.name, d["raw_text"][:200])
        # One transport error per unreadable object, naming it.
        st = status(sqlite_url, "p", "t", k.name)
        assert sorted(e["tag"] for e in st.transport_errors) == [
            str(folder / name) for name in k.bad_objects
        ], k.name
        for e in st.transport_errors:
            assert e["message"].startswith(f"connector p.t.{k.name}: skipped an unreadable")
            cause = CAUSES[k.name][Path(e["tag"]).name]
            assert e["tag"] in e["message"] and cause in e["message"], e
        # The counts add up to what was written.
        assert (st.total_records, st.num_parse_errors, st.num_transport_errors) == (
            len(k.good),
            len(k.bad),
            len(k.bad_objects),
        ), k.name
        assert st.total_records + st.num_parse_errors + st.num_transport_errors == k.inputs
        assert (rep.records, rep.parse_errors, rep.skipped_objects) == (
            len(k.good),
            len(k.bad),
            len(k.bad_objects),
        ), k.name
        assert st.finished and st.fatal_error is None, k.name
    assert Counter(d["connector"] for d in dead) == {k.name: len(k.bad) for k in built() if k.bad}


def _short(r: dict[str, Any]) -> dict[str, Any]:
    return {c: (v[:40] + "..." if isinstance(v, str) and len(v) > 40 else v) for c, v in r.items()}


# --- the same corpus through the formats alone (no Spark), and the BOM's bytes ----------


def decode_kind(
    k: Kind,
) -> tuple[list[dict[str, Any]], list[tuple[str, int, int | None]], list[str]]:
    from airflow_connectors.catalog import parse_pipeline

    table = parse_pipeline({"pipeline": "p", "tables": {"t": {"columns": COLUMNS}}}).tables[0]
    cls = FORMATS.get(k.format["name"])
    fmt = cls(cls.Config.model_validate(k.format.get("config", {})), table)
    rows: list[dict[str, Any]] = []
    bad: list[tuple[str, int, int | None]] = []
    unreadable: list[str] = []
    for name, data in sorted(k.files.items()):
        chunks = iter([data[i : i + (1 << 20)] for i in range(0, len(data), 1 << 20)])
        try:
            for d in fmt.decode(chunks, final=True, first_record=1, at_start=True):
                rows += d.table.to_pylist()
                bad += [(name, e.record, e.line) for e in d.errors]
        except Exception:
            unreadable.append(name)
    return rows, bad, unreadable


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n.endswith("_huge_line") else n for n in NAMES],
)
def test_each_kind_through_its_format(name: str) -> None:
    [k] = [k for k in built() if k.name == name]
    rows, bad, unreadable = decode_kind(k)
    assert sorted(rows, key=lambda r: r["id"]) == expected_rows(k)
    assert bad == [(b.file, b.record, b.line) for b in k.bad]
    assert unreadable == k.bad_objects


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_bom_is_consumed_and_binary_is_refused(fmt: str) -> None:
    from airflow_connectors.catalog import parse_pipeline

    table = parse_pipeline({"pipeline": "p", "tables": {"t": {"columns": COLUMNS}}}).tables[0]
    config = {"update_format": "raw"} if fmt == "json" else {}
    cls = FORMATS.get(fmt)
    f = cls(cls.Config.model_validate(config), table)
    line = (json_line if fmt == "json" else csv_line)(row(1)) + b"\n"

    def consumed(data: bytes, **kw: Any) -> tuple[int, int, int]:
        out = list(f.decode(iter([data[:2], data[2:]]), first_record=1, at_start=True, **kw))
        return (
            sum(d.records for d in out),
            sum(len(d.errors) for d in out),
            max([0, *(d.consumed for d in out)]),
        )

    # The BOM's bytes are consumed with the records, so a followed file's offset is the
    # byte offset of the object; a file that holds only a BOM is consumed too.
    assert consumed(BOM + line, final=True) == (1, 0, len(BOM + line))
    assert consumed(BOM + line + line[:5], final=False) == (1, 0, len(BOM + line))
    assert consumed(BOM, final=True) == (0, 0, 3)
    # A text with a NUL here and there is not binary: its record is the matter.
    out = list(
        f.decode(
            iter([line + line.replace(b"n1", b"n\0")]), final=True, first_record=1, at_start=True
        )
    )
    assert sum(d.table.num_rows for d in out) + sum(len(d.errors) for d in out) == 2
    with pytest.raises(NotText, match="gzip"):
        list(
            f.decode(iter([b"\x1f\x8b\x08\x00" + line]), final=True, first_record=1, at_start=True)
        )


@pytest.mark.slow
def test_a_long_quoted_line_across_blocks_is_one_record() -> None:
    """A quoted value longer than MAX_QUOTED_BYTES on one line, beginning in one block
    and ending in the next, is one record (it was cut where the block ended)."""
    from airflow_connectors.catalog import parse_pipeline
    from airflow_connectors.formats.csv_format import MAX_QUOTED_BYTES

    table = parse_pipeline({"pipeline": "p", "tables": {"t": {"columns": COLUMNS}}}).tables[0]
    cls = FORMATS.get("csv")
    f = cls(cls.Config(), table)
    f.block_bytes = 64 << 10  # type: ignore[attr-defined]
    rows = [row(i) for i in range(1, 101)]
    rows[50]["name"] = "q" * (2 * MAX_QUOTED_BYTES)
    data = b"".join(csv_line(r) + b"\n" for r in rows)
    chunks = iter([data[i : i + 4096] for i in range(0, len(data), 4096)])
    out = list(f.decode(chunks, final=True, first_record=1, at_start=True))
    assert [e for d in out for e in d.errors] == []
    assert [r for d in out for r in d.table.to_pylist()] == [
        {c: r[c] for c in COLUMNS} for r in rows
    ]


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_followed_file_with_a_bom_reads_appended_lines_once(
    spark: Any, sqlite_url: str, tmp_path: Path, fmt: str
) -> None:
    """The BOM's bytes count in the committed offset: the appended lines are read from
    where the first run stopped, each record once, with its line number."""
    encode = json_line if fmt == "json" else csv_line
    src = tmp_path / f"log.{fmt}"
    rows = [row(i) for i in range(1, 8)]
    src.write_bytes(BOM + b"".join(encode(r) + b"\r\n" for r in rows[:3]))
    config = {"update_format": "raw"} if fmt == "json" else {}
    connector = {
        "name": "log",
        "transport": {
            "name": "file_input",
            "config": {"path": str(src), "min_file_age": 0, "follow": True},
        },
        "format": {"name": fmt, "config": config},
        "errors": {"tolerance": "all"},
    }
    spec = pipeline({"t": {"columns": COLUMNS, "connectors": [connector]}})
    wh = str(tmp_path / "wh")
    run(spec, sqlite_url, wh, spark)
    with src.open("ab") as fh:
        fh.write(b"".join(encode(r) + b"\r\n" for r in rows[3:5]))
        fh.write(encode(row(100), qty='"x"' if fmt == "json" else "x") + b"\r\n")
        fh.write(b"".join(encode(r) + b"\r\n" for r in rows[5:]))
    run(spec, sqlite_url, wh, spark)
    landed = sorted(read_table(wh, "p", "t").to_pylist(), key=lambda r: r["id"])
    assert landed == [{c: r[c] for c in COLUMNS} for r in rows]
    [dead] = read_table(wh, "p", "t__errors").to_pylist()
    assert dead["record_number"] == 6 and dead["raw_text"] == clip(
        encode(row(100), qty='"x"' if fmt == "json" else "x")
    )
    st = status(sqlite_url, "p", "t", "log")
    assert (st.total_records, st.num_parse_errors) == (7, 1)
