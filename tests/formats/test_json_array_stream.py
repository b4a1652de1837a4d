"""JSON ``array: true`` objects are read a block at a time: elements are cut out of the
bytes as they arrive (across any chunk boundary), decoded as records, and memory stays
bounded by the block plus the largest element, not by the object."""

from __future__ import annotations

import json
import random
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import pipeline, read_table, run

from airflow_connectors.formats import FORMATS
from airflow_connectors.formats.base import Decoded, NotText
from airflow_connectors.formats.json_format import JsonFormat
from airflow_connectors.spec import ColumnSpec, SqlType, TableSpec

TABLE = TableSpec(
    name="t",
    columns=(
        ColumnSpec(name="id", type=SqlType("BIGINT"), nullable=False),
        ColumnSpec(name="name", type=SqlType("VARCHAR")),
        ColumnSpec(name="score", type=SqlType("DOUBLE")),
    ),
)
RAW = {"update_format": "raw", "array": True}


def fmt(config: dict[str, Any] | None = None, block_bytes: int | None = None) -> JsonFormat:
    cls = FORMATS.get("json")
    f = cls(cls.Config.model_validate(config or RAW), TABLE)
    assert isinstance(f, JsonFormat)
    if block_bytes is not None:
        f.block_bytes = block_bytes
    return f


def decode(
    data: bytes,
    *,
    chunk: int = 7,
    block_bytes: int | None = None,
    config: dict[str, Any] | None = None,
    final: bool = True,
    at_start: bool = True,
    first: int = 1,
) -> list[Decoded]:
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    return list(
        fmt(config, block_bytes).decode(
            iter(chunks), final=final, first_record=first, at_start=at_start
        )
    )


def ids(out: list[Decoded]) -> list[int]:
    return [r["id"] for d in out for r in d.table.to_pylist()]


def errors(out: list[Decoded]) -> list[tuple[int, int | None, str]]:
    return [(e.record, e.line, e.error) for d in out for e in d.errors]


ELEMENTS = [
    b'{"id": 1, "name": "plain"}',
    b'{"id": 2, "name": "a ] and a } and a [ in a string"}',
    b'{"id": 3, "name": "an escaped \\" quote and \\\\ backslash"}',
    b'{\n  "id": 4,\n  "name": "pretty",\n  "nested": {"x": [1, {"y": "}"}]}\n}',
    b'{"id": 5, "name": "\xc3\xbc\xe2\x82\xac multibyte"}',
    b'{"id": 6, "score": 1.5, "list": [[], [[]], {}]}',
]


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 16, 1000])
@pytest.mark.parametrize("block_bytes", [1, 17, 64, 1 << 20])
def test_elements_are_cut_at_any_chunk_and_block_boundary(chunk: int, block_bytes: int) -> None:
    data = (
        b" \n[ "
        + b" ,\n ".join(ELEMENTS)
        + b"\n]\n\n[]\n["
        + ELEMENTS[0].replace(b"1", b"7")
        + b"]\n"
    )
    out = decode(data, chunk=chunk, block_bytes=block_bytes)
    assert ids(out) == [1, 2, 3, 4, 5, 6, 7]
    names = [r["name"] for d in out for r in d.table.to_pylist()]
    assert names[1] == "a ] and a } and a [ in a string"
    assert names[2] == 'an escaped " quote and \\ backslash'
    assert names[4] == "ü€ multibyte"
    assert errors(out) == []
    assert sum(d.records for d in out) == 7
    assert out[-1].consumed == len(data)


def test_bad_elements_are_dead_letters_with_record_and_line() -> None:
    data = (
        b"[\n"
        b'  {"id": 1},\n'
        b'  {"id": "x"},\n'  # wrong type
        b"  42,\n"  # not an object
        b'  {"id": 4, "name": "\xff"},\n'  # invalid UTF-8
        b'  {"id": 5, "oops"},\n'  # invalid JSON inside an element
        b'  {"id": 6}\n'
        b"]"
    )
    for block_bytes in (8, 1 << 20):
        out = decode(data, block_bytes=block_bytes)
        assert ids(out) == [1, 6]
        found = errors(out)
        assert [(r, line) for r, line, _ in found] == [(2, 3), (3, 4), (4, 5), (5, 6)]
        assert "column 'id' (BIGINT)" in found[0][2]
        assert "expected a JSON object per record" in found[1][2]
        assert "invalid UTF-8" in found[2][2]
        assert "invalid JSON" in found[3][2]
        assert sum(d.records for d in out) == 6


@pytest.mark.parametrize(
    ("data", "good", "record", "byte", "what"),
    [
        (b'[{"id": 1}, {"id": 2} {"id": 3}]', [1, 2], 3, 23, "expected ',' or ']'"),
        (
            b'[{"id": 1}, {"id": 2},\n',
            [1, 2],
            3,
            24,
            "the object ends before the array's closing ']'",
        ),
        (b'[{"id": 1}, {"id": 2', [1], 2, 13, "ends inside an array element"),
        (b'[{"id": 1},, {"id": 2}]', [1], 2, 12, "expected an array element, got ','"),
        (b'[{"id": 1}, ]', [1], 2, 13, "expected an array element, got ']'"),
        (b'[{"id": 1}] {"id": 2}', [1], 2, 13, "expected a JSON array of records"),
        (b'{"id": 1}', [], 1, 1, "expected a JSON array of records"),
    ],
)
def test_a_malformed_array_is_one_dead_letter_naming_its_byte(
    data: bytes, good: list[int], record: int, byte: int, what: str
) -> None:
    """The elements before the error land; the rest of the object is one dead letter
    whose message names the byte and what was expected (an error in one line)."""
    for chunk in (1, 4, 1000):
        out = decode(data, chunk=chunk)
        assert ids(out) == good
        [(number, _, error)] = errors(out)
        assert number == record
        assert error.startswith(f"invalid JSON array at byte {byte}: "), error
        assert what in error, error
        assert "\n" not in error
        assert out[-1].consumed == len(data)  # the object is done with


def test_not_final_holds_back_an_open_element_and_resumes_after_it() -> None:
    data = b'[{"id": 1}, {"id": 2}, {"id": 3'
    out = decode(data, final=False)
    assert ids(out) == [1, 2]
    assert errors(out) == []
    offset = out[-1].consumed
    assert data[:offset].rstrip().endswith(b'{"id": 2},') or data[:offset].rstrip().endswith(
        b'{"id": 2}'
    )
    # Resuming at the committed offset once the object is complete reads the rest.
    whole = data + b', "name": "x"}, {"id": 4}]'
    rest = decode(whole[offset:], at_start=False, first=3)
    assert ids(rest) == [3, 4]
    assert errors(rest) == []
    assert sum(d.records for d in rest) == 2


def test_a_new_array_after_a_closed_one_resumes() -> None:
    first = b'[{"id": 1}]\n'
    out = decode(first, final=False)
    assert ids(out) == [1] and out[-1].consumed == len(first)
    assert ids(decode(b'[{"id": 2}]', at_start=False, first=2)) == [2]


def test_insert_delete_elements() -> None:
    data = b'[{"insert": {"id": 1}}, {"id": 2}, {"insert": {"id": 3}}]'
    out = decode(data, config={"array": True})
    assert ids(out) == [1, 3]
    [(record, _, error)] = errors(out)
    assert record == 2 and "insert" in error


def test_bom_is_skipped_and_compressed_data_refused() -> None:
    assert ids(decode(b'\xef\xbb\xbf[{"id": 1}]')) == [1]
    import gzip

    with pytest.raises(NotText, match="gzip"):
        decode(gzip.compress(b'[{"id": 1}]'))


N_LARGE = 600_000  # about 50 MB of JSON


def _large_array(n: int) -> Iterator[bytes]:
    """A JSON array of ``n`` records, produced in 1 MB chunks (never whole)."""
    yield b"[\n"
    part: list[bytes] = []
    for i in range(n):
        part.append(
            b'%s{"id": %d, "name": "record number %d with some padding text", "score": %d.25}'
            % (b",\n" if i else b"", i, i, i)
        )
        if len(part) == 10_000:
            yield b"".join(part)
            part = []
    yield b"".join(part) + b"\n]\n"


def _peak(f: JsonFormat, n: int) -> tuple[int, int]:
    """Decodes an array of ``n`` records; returns Python's peak allocation while doing so
    and the object's size, after checking every record landed."""
    tracemalloc.start()
    try:
        rows = total = records = consumed = 0
        for d in f.decode(_large_array(n), final=True, first_record=1, at_start=True):
            assert not d.errors
            rows += d.table.num_rows
            total += sum(d.table.column("id").to_pylist())
            records += d.records
            consumed = d.consumed
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rows == records == n
    assert total == n * (n - 1) // 2
    assert consumed == sum(len(c) for c in _large_array(n))
    return peak, consumed


@pytest.mark.slow
def test_a_large_array_is_decoded_with_bounded_memory() -> None:
    f = fmt()
    list(f.decode(_large_array(10), final=True, first_record=1, at_start=True))  # imports
    small_peak, small = _peak(f, N_LARGE // 10)
    peak, size = _peak(f, N_LARGE)
    assert size > 50_000_000
    # The object is never held whole: Python's allocations peak far below its size,
    # and ten times the data needs no more memory than a tenth of it (the block).
    assert peak < size / 3, (peak, size)
    assert peak < small_peak + (2 << 20), (peak, small_peak, small)


def test_engine_run_lands_array_objects(spark: Any, sqlite_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    records = [{"id": i, "name": f"n{i}", "score": i / 4} for i in range(1, 2001)]
    (folder / "a.json").write_text(json.dumps(records[:1500], indent=2))
    (folder / "b.json").write_bytes(
        b'[{"id": 1501}, {"id": "bad"}, ' + json.dumps(records[1501:]).encode()[1:]
    )
    spec = pipeline(
        {
            "t": {
                "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR", "score": "DOUBLE"},
                "connectors": [
                    {
                        "name": "arr",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(folder), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": RAW},
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
    want = [*records[:1500], {"id": 1501, "name": None, "score": None}, *records[1501:]]
    assert landed == want
    [dead] = read_table(wh, "p", "t__errors").to_pylist()
    assert (dead["record_number"], dead["raw_text"]) == (2, '{"id": "bad"}')
    assert dead["source_key"] == str(folder / "b.json")


def _random_value(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(7 if depth < 3 else 4)
    if kind == 0:
        return rng.randint(-(10**6), 10**6)
    if kind == 1:
        return rng.choice([True, False, None, 1.5])
    if kind in (2, 3):
        alphabet = ['"', "\\", "[", "]", "{", "}", ",", " ", "\n", "\t", "ü", "€", "a", "/", "\x01"]
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
    if kind == 4:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randrange(4))}


@pytest.mark.parametrize("seed", range(6))
def test_random_arrays_split_exactly_as_json_parses_them(seed: int) -> None:
    """Random elements (strings full of quotes, backslashes, brackets, control and
    multibyte characters; nested arrays and objects), dumped compact, indented or with
    non-ASCII unescaped, at random chunk and block sizes: every record lands with the
    name json.loads gives it."""
    rng = random.Random(seed)
    records = [
        {"id": i, "name": json.dumps(_random_value(rng, 0)), "extra": _random_value(rng, 0)}
        for i in range(300)
    ]
    indent = rng.choice([None, 1, 4])
    data = json.dumps(records, indent=indent, ensure_ascii=rng.random() < 0.5).encode()
    out = decode(
        data, chunk=rng.choice([1, 7, 64, 4096]), block_bytes=rng.choice([5, 333, 1 << 20])
    )
    assert errors(out) == []
    got = [(r["id"], r["name"]) for d in out for r in d.table.to_pylist()]
    assert got == [(r["id"], r["name"]) for r in json.loads(data)]
    assert out[-1].consumed == len(data)
