"""Streamed decompression (transports.compression) with real gzip, zstd and bz2 data."""

from __future__ import annotations

import bz2
import gzip
import io
import itertools
import json
import os
import zlib
from pathlib import Path

import pytest
import zstandard

from airflow_connectors.testing.conformance import Source, TransportConformance
from airflow_connectors.transports.compression import (
    OUT_CHUNK,
    CompressionError,
    codec_of,
    decompress,
    skip,
)

TEXT = b"".join(b'{"id": %d, "name": "row %d"}\n' % (i, i) for i in range(200))


def compress(codec: str, data: bytes) -> bytes:
    if codec == "gzip":
        return gzip.compress(data)
    if codec == "bz2":
        return bz2.compress(data)
    return zstandard.ZstdCompressor().compress(data)


def split_at(data: bytes, *cuts: int) -> list[bytes]:
    points = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points)]


def test_codec_of_by_extension_and_config() -> None:
    assert codec_of("s3://b/x/a.json.gz", None) == "gzip"
    assert codec_of("/data/a.JSON.GZIP", "auto") == "gzip"
    assert codec_of("a.csv.zst", "auto") == "zstd"
    assert codec_of("a.csv.zstd", None) == "zstd"
    assert codec_of("a.csv.bz2", None) == "bz2"
    assert codec_of("a.csv", None) is None
    assert codec_of("dir.gz/a.csv", None) is None
    assert codec_of("a.csv.gz", "none") is None
    assert codec_of("a.csv", "gzip") == "gzip"
    assert codec_of("a.csv.gz", "zstd") == "zstd"  # an explicit codec wins
    with pytest.raises(ValueError, match="unknown compression 'lzma'"):
        codec_of("a", "lzma")


@pytest.mark.parametrize("codec", ["gzip", "zstd", "bz2"])
def test_every_chunk_boundary(codec: str) -> None:
    small = TEXT[:300]
    packed = compress(codec, small)
    for cut in range(len(packed) + 1):
        assert b"".join(decompress(split_at(packed, cut), codec)) == small, cut
    # one byte at a time
    assert b"".join(decompress([packed[i : i + 1] for i in range(len(packed))], codec)) == small


@pytest.mark.parametrize("codec", ["gzip", "zstd", "bz2"])
def test_concatenated_members_are_one_stream(codec: str) -> None:
    parts = [TEXT[:1000], TEXT[1000:1001], TEXT[1001:]]
    packed = b"".join(compress(codec, p) for p in parts)
    if codec == "gzip":
        assert gzip.decompress(packed) == TEXT  # the standard library agrees
    for cut in range(0, len(packed) + 1, 7):
        assert b"".join(decompress(split_at(packed, cut), codec)) == TEXT, cut


def test_gzip_zero_padding_after_members_is_ignored() -> None:
    packed = gzip.compress(TEXT[:50]) + b"\0" * 10 + gzip.compress(TEXT[50:]) + b"\0" * 100
    assert b"".join(decompress([packed], "gzip")) == TEXT


@pytest.mark.parametrize("codec", ["gzip", "zstd", "bz2"])
def test_corrupt_truncated_and_trailing_garbage(codec: str) -> None:
    packed = compress(codec, TEXT)
    with pytest.raises(CompressionError, match=f"^{codec} data in obj.{codec} is truncated"):
        b"".join(decompress([packed[: len(packed) // 2]], codec, name=f"obj.{codec}"))
    with pytest.raises(CompressionError, match=f"^{codec} data is corrupt"):
        b"".join(decompress([b"this is not compressed at all, just text\n" * 3], codec))
    with pytest.raises(CompressionError, match=codec):
        b"".join(decompress([packed, b"trailing garbage that is not a member"], codec))
    assert issubclass(CompressionError, ValueError)


@pytest.mark.parametrize("codec", ["gzip", "zstd", "bz2"])
def test_output_is_bounded_whatever_the_ratio(codec: str) -> None:
    big = b"\0" * (8 * OUT_CHUNK + 123)  # compresses to a few KiB
    packed = compress(codec, big)
    assert len(packed) < OUT_CHUNK
    sizes = [len(c) for c in decompress([packed], codec)]
    assert max(sizes) <= OUT_CHUNK
    assert sum(sizes) == len(big)


def test_large_random_input_round_trips_in_arbitrary_chunks() -> None:
    data = os.urandom(300_000) + TEXT * 50
    for codec in ("gzip", "zstd", "bz2"):
        packed = compress(codec, data)
        chunks = [packed[i : i + 4099] for i in range(0, len(packed), 4099)]
        assert b"".join(decompress(chunks, codec)) == data


def test_zlib_stream_is_read_as_gzip_codec() -> None:
    # wbits 47 detects the header: a raw zlib stream named .gz still reads.
    assert b"".join(decompress([zlib.compress(TEXT)], "gzip")) == TEXT


def test_none_passes_chunks_through() -> None:
    assert list(decompress([b"ab", b"c"], None)) == [b"ab", b"c"]


def test_errors_of_the_source_pass_through() -> None:
    def source() -> io.BytesIO:
        raise ConnectionResetError("reset")

    def chunks():  # type: ignore[no-untyped-def]
        yield gzip.compress(TEXT)[:10]
        source()

    with pytest.raises(ConnectionResetError):
        b"".join(decompress(chunks(), "gzip"))


def test_skip() -> None:
    chunks = [b"abc", b"", b"defg", b"hi"]
    for n in range(12):
        assert b"".join(skip(chunks, n)) == b"abcdefghi"[n:]
    # resume of a compressed file: decompress from byte 0, skip what was committed
    packed = gzip.compress(TEXT)
    assert b"".join(skip(decompress([packed], "gzip"), 1234)) == TEXT[1234:]


# --- file_input reads compressed files ------------------------------------------------


def _jsonl(ids: range) -> bytes:
    return b"".join(b'{"id": %d}\n' % i for i in ids)


def _file_spec(path: object, **config: object) -> object:
    from helpers import pipeline

    return pipeline(
        {
            "t": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(path), "min_file_age": 0, **config},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        }
    )


def _ids(warehouse: str) -> list[int]:
    from helpers import read_table

    data = read_table(warehouse, "p", "t")
    return sorted(data.column("id").to_pylist()) if data.num_columns else []


def test_file_input_reads_gzip_zstd_bz2_and_plain_files(
    spark: object, sqlite_url: str, tmp_path: Path
) -> None:
    from helpers import run, status

    folder = tmp_path / "drop"
    folder.mkdir()
    wh = str(tmp_path / "wh")
    # a multi-member gzip (as `cat a.gz b.gz` or pigz write), zstd, bz2 and a plain file
    (folder / "a.json.gz").write_bytes(
        gzip.compress(_jsonl(range(0, 500))) + gzip.compress(_jsonl(range(500, 1000)))
    )
    (folder / "b.json.zst").write_bytes(compress("zstd", _jsonl(range(1000, 2000))))
    (folder / "c.json.bz2").write_bytes(compress("bz2", _jsonl(range(2000, 3000))))
    (folder / "d.json").write_bytes(_jsonl(range(3000, 3010)))
    pipe = _file_spec(folder)
    run(pipe, sqlite_url, wh, spark)  # type: ignore[arg-type]
    assert _ids(wh) == list(range(3010))
    st = status(sqlite_url, "p", "t", "files")
    assert st.total_records == 3010 and st.end_of_input and st.num_transport_errors == 0

    # Committed compressed files are not read again (their offsets count decompressed
    # bytes; their compressed size is kept to notice a change) ...
    again = run(pipe, sqlite_url, wh, spark)  # type: ignore[arg-type]
    assert again.batches == 0 and _ids(wh) == list(range(3010))
    assert status(sqlite_url, "p", "t", "files").num_transport_errors == 0

    # ... and one rewritten after its commit is a transport error naming it, never
    # appended to (a compressed file cannot be read from a byte offset).
    (folder / "a.json.gz").write_bytes(gzip.compress(_jsonl(range(0, 1200))))
    run(pipe, sqlite_url, wh, spark)  # type: ignore[arg-type]
    assert _ids(wh) == list(range(3010))
    st = status(sqlite_url, "p", "t", "files")
    assert st.num_transport_errors == 1
    assert "a.json.gz changed after it was committed" in st.transport_errors[-1]["message"]


def test_file_input_corrupt_compressed_file_fails_naming_it(
    spark: object, sqlite_url: str, tmp_path: Path
) -> None:
    from helpers import run, status

    folder = tmp_path / "drop"
    folder.mkdir()
    packed = gzip.compress(_jsonl(range(100)))
    (folder / "bad.json.gz").write_bytes(packed[: len(packed) // 2])
    wh = str(tmp_path / "wh")
    run(_file_spec(folder), sqlite_url, wh, spark, raise_on_failure=False)  # type: ignore[arg-type]
    st = status(sqlite_url, "p", "t", "files")
    assert st.state == "FAILED", st
    assert "bad.json.gz is truncated" in (st.fatal_error or ""), st.fatal_error
    assert "gzip data" in (st.fatal_error or "")
    assert _ids(wh) == []


def test_file_input_compression_config_and_resume_from_a_decompressed_offset(
    tmp_path: Path,
) -> None:
    from airflow_connectors.catalog import transport_of
    from airflow_connectors.transports.base import Cursor, KeyOffset, Limits, WorkItem

    folder = tmp_path
    data = _jsonl(range(5000))
    (folder / "x.data").write_bytes(compress("zstd", data))  # no telling extension
    pipe = _file_spec(folder / "x.data", compression="zstd", buffer_size_bytes=1000)
    table = pipe.tables[0]  # type: ignore[attr-defined]
    transport = transport_of(table.connectors[0], table)
    [item] = list(transport.discover(Cursor(), Limits()))
    assert (item.start, item.end, item.final) == (0, None, True)
    assert b"".join(transport.read(item)) == data
    # resumed mid-file: decompressed from its first byte, the committed bytes skipped
    resumed = WorkItem(key=item.key, start=12_345, end=None, meta=item.meta)
    assert b"".join(transport.read(resumed)) == data[12_345:]
    # discovery after a partial commit plans the rest, from the decompressed offset
    partial = KeyOffset(offset=12_345, records=1000, completed=False, meta=dict(item.meta))
    [rest] = list(transport.discover(Cursor(offsets={item.key: partial}), Limits()))
    assert (rest.start, rest.end, rest.records_done) == (12_345, None, 1000)
    # compression: none reads the bytes as they are
    plain = _file_spec(folder / "x.data", compression="none")
    t2 = transport_of(plain.tables[0].connectors[0], plain.tables[0])  # type: ignore[attr-defined]
    [raw] = list(t2.discover(Cursor(), Limits()))
    assert (raw.start, raw.end) == (0, (folder / "x.data").stat().st_size)
    # a followed compressed file is read once, whole: never as a growing file
    followed = _file_spec(folder / "x.data", compression="zstd", follow=True)
    t3 = transport_of(followed.tables[0].connectors[0], followed.tables[0])  # type: ignore[attr-defined]
    [once] = list(t3.discover(Cursor(), Limits(appendable=True)))
    assert (once.end, once.final) == (None, True)
    done = KeyOffset(offset=len(data), records=5000, completed=True, meta=dict(once.meta))
    assert list(t3.discover(Cursor(offsets={once.key: done}), Limits(appendable=True))) == []


class TestFileInputCompressed(TransportConformance):
    """``file_input`` over gzip (two members), zstd and bz2 files and a plain one runs
    the conformance kit."""

    @pytest.fixture
    def source(self, tmp_path: Path) -> Source:
        def lines(ids: range) -> bytes:
            return b"".join(
                json.dumps({"id": i, "name": f"n{i}", "amount": i / 4}).encode() + b"\n"
                for i in ids
            )

        folder = tmp_path / "drop"
        (folder / "2026").mkdir(parents=True)
        (folder / "2026" / "a.json.gz").write_bytes(
            gzip.compress(lines(range(0, 100))) + gzip.compress(lines(range(100, 200)))
        )
        (folder / "2026" / "b.json.zst").write_bytes(compress("zstd", lines(range(200, 400))))
        (folder / "c.json.bz2").write_bytes(compress("bz2", lines(range(400, 550))))
        (folder / "d.json").write_bytes(lines(range(550, 600)))
        config = {"path": str(folder), "min_file_age": 0}
        return Source(
            transport="file_input",
            config=config,
            columns={"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"},
            format={"name": "json", "config": {"update_format": "raw"}},
            records=[{"id": i, "name": f"n{i}", "amount": i / 4} for i in range(600)],
            key_column="id",
            unbounded_config={**config, "follow": True},
            invalid_configs={"compression": {**config, "compression": "lzma"}},
        )


def test_file_input_corrupt_compressed_file_is_skipped_under_tolerance_all(
    spark: object, sqlite_url: str, tmp_path: Path
) -> None:
    from helpers import pipeline, run, status

    folder = tmp_path / "drop"
    folder.mkdir()
    (folder / "a.json.gz").write_bytes(gzip.compress(_jsonl(range(100))))
    (folder / "b.json.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"not zstd at all" * 10)
    (folder / "c.json").write_bytes(_jsonl(range(100, 110)))
    spec = pipeline(
        {
            "t": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(folder), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                        "errors": {"tolerance": "all"},
                    }
                ],
            }
        }
    )
    wh = str(tmp_path / "wh")
    run(spec, sqlite_url, wh, spark)
    assert _ids(wh) == list(range(110))
    st = status(sqlite_url, "p", "t", "files")
    assert st.fatal_error is None and st.num_transport_errors == 1
    assert "b.json.zst is corrupt" in st.transport_errors[-1]["message"]
    assert "zstd data" in st.transport_errors[-1]["message"]
