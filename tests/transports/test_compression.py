"""Streamed decompression (transports.compression) with real gzip, zstd and bz2 data."""

from __future__ import annotations

import bz2
import gzip
import io
import itertools
import os
import zlib

import pytest
import zstandard

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
