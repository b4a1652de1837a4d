"""The line ends a format counted on its way (``Decoded.newlines``) are the ``\\n`` bytes
of what each block consumed, so the reader does not count every byte a second time; and
the reader's own count (``_LineCounter``), for formats that do not say, counts only
what it is asked for (issue 27: the second count was a twentieth of a JSON block)."""

from __future__ import annotations

import json

import pytest
from test_records import decode

from airflow_connectors.engine.reader import _LineCounter


def rows(n: int, bad: set[int] = frozenset()) -> bytes:  # type: ignore[assignment]
    lines = []
    for i in range(n):
        value = '"x"' if i in bad else str(i)  # a string in INT n: that record's error
        lines.append(f'{{"id": {i}, "name": {json.dumps("a" * (i % 7))}, "n": {value}}}')
    return ("\n".join(lines) + "\n").encode()


def consumed_newlines(data: bytes, out: list) -> int:
    return data[: out[-1].consumed].count(b"\n")


@pytest.mark.parametrize("bad", [set(), {3, 40}], ids=["clean", "bad records"])
@pytest.mark.parametrize("block_bytes", [64, 1000, 1 << 20])
def test_json_blocks_say_their_line_ends(bad: set[int], block_bytes: int) -> None:
    data = rows(100, bad) + b"\n\n"  # blank lines are line ends too
    out = decode("json", data, {"update_format": "raw"}, chunk=97, block_bytes=block_bytes)
    assert all(d.newlines is not None for d in out)
    assert sum(d.newlines or 0 for d in out) == consumed_newlines(data, out) == 102
    assert len([e for d in out for e in d.errors]) == len(bad)


@pytest.mark.parametrize("block_bytes", [64, 1 << 20])
def test_csv_blocks_say_their_line_ends_unless_a_carriage_return_makes_lines(
    block_bytes: int,
) -> None:
    data = b"".join(b"%d,n%d,%d\n" % (i, i, i) for i in range(50))
    out = decode("csv", data, chunk=33, block_bytes=block_bytes)
    counted = [d.newlines for d in out]
    assert None not in counted and sum(counted) == data.count(b"\n") == 50  # type: ignore[arg-type]
    # A lone \r ends a CSV line but is no \n: the block does not say, the reader counts.
    crlf = data.replace(b"\n", b"\r", 3)
    out = decode("csv", crlf, chunk=33, block_bytes=1 << 20)
    assert [d.newlines for d in out] == [None]


def chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_line_counter_counts_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"a\nbb\n\nccc\n" * 50
    counter = _LineCounter(iter(chunks(data, 7)))
    assert b"".join(counter) == data
    assert counter.fresh == len(counter.tail)  # nothing counted yet
    for position in (0, 1, 2, 5, 333, len(data)):
        assert counter.before(position) == data[:position].count(b"\n")


def test_line_counter_counts_what_leaves_its_tail_unless_told_not_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_LineCounter, "KEEP", 40)
    data = b"a\nbb\n\nccc\n" * 50
    counter = _LineCounter(iter(chunks(data, 7)))
    assert b"".join(counter) == data
    assert counter.before(len(data) - 3) == data[:-3].count(b"\n")
    assert counter.before(0) is None  # too far back
    # The format counts for the reader: chunks leave the tail uncounted, and then the
    # lines before a position are unknown rather than wrong.
    counter = _LineCounter(iter(chunks(data, 7)))
    it = iter(counter)
    next(it)
    counter.counting = False
    assert b"".join([chunks(data, 7)[0], *it]) == data
    assert counter.before(len(data)) is None
