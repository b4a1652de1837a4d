"""Streamed decompression of objects and files: gzip, zstd and bz2.

:func:`codec_of` picks the codec of a key (from its extension, or as configured) and
:func:`decompress` turns an iterator of compressed chunks into an iterator of
decompressed chunks of at most :data:`OUT_CHUNK` bytes, holding one input chunk and one
output chunk at a time, never the whole object. Concatenated members (``cat a.gz b.gz``,
pigz, multi-stream bzip2, multi-frame zstd) are read as one stream. A corrupt or
truncated stream raises :class:`CompressionError` (a ``ValueError``) naming the codec.

A compressed object cannot be read from a byte offset of its decompressed content:
resuming one re-reads it from its first byte and :func:`skip` drops the decompressed
bytes already committed.
"""

from __future__ import annotations

import bz2
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

__all__ = ["CODECS", "CompressionError", "codec_of", "decompress", "skip"]

#: The codecs :func:`decompress` reads, by their config name.
CODECS = ("gzip", "zstd", "bz2")
#: Names accepted for each codec (config values and extensions).
_ALIASES = {
    "gzip": "gzip",
    "gz": "gzip",
    "zstd": "zstd",
    "zst": "zstd",
    "zstandard": "zstd",
    "bz2": "bz2",
    "bzip2": "bz2",
}
_EXTENSIONS = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2"}
#: The most bytes one decompression step returns (bounds memory whatever the ratio).
OUT_CHUNK = 1 << 20
#: zstd input is fed in slices of this size (its decompressor has no output cap).
_ZSTD_IN = 1 << 17


class CompressionError(ValueError):
    """Compressed data that cannot be decompressed: corrupt, truncated or not in the
    codec's format."""


def codec_of(key: str, configured: str | None) -> str | None:
    """The codec to read ``key`` with: ``configured`` when it names a codec, none for
    ``'none'``, and by ``key``'s extension (``.gz``/``.gzip``, ``.zst``/``.zstd``,
    ``.bz2``) for ``'auto'`` or ``None``. ``ValueError`` for an unknown name."""
    if configured is not None and configured.lower() not in ("auto", ""):
        name = configured.lower()
        if name == "none":
            return None
        if name not in _ALIASES:
            raise ValueError(
                f"unknown compression {configured!r}; expected auto, none, {', '.join(CODECS)}"
            )
        return _ALIASES[name]
    path = key.split("?", 1)[0].rstrip("/")
    dot = path.rfind(".")
    if dot < 0 or "/" in path[dot:]:
        return None
    return _EXTENSIONS.get(path[dot:].lower())


class _Member(Protocol):
    """The decoder of one member (gzip member, bzip2 stream, zstd frame)."""

    eof: bool

    def feed(self, data: bytes) -> Iterator[bytes]:
        """Decompress ``data``, stopping at the member's end; then ``eof`` is true and
        :meth:`unused` holds the input past the member."""
        ...  # pragma: no cover - protocol

    def unused(self) -> bytes:
        """The input after the member's end."""
        ...  # pragma: no cover - protocol


class _Gzip:
    """One gzip member (or zlib stream: wbits 47 detects the header)."""

    def __init__(self) -> None:
        self._d = zlib.decompressobj(47)
        self.eof = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        d = self._d
        while True:
            out = d.decompress(data, OUT_CHUNK)
            if out:
                yield out
            data = d.unconsumed_tail
            self.eof = d.eof
            if d.eof or (not data and len(out) < OUT_CHUNK):
                return

    def unused(self) -> bytes:
        return self._d.unused_data


class _Bz2:
    """One bzip2 stream."""

    def __init__(self) -> None:
        self._d = bz2.BZ2Decompressor()
        self.eof = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        d = self._d
        while True:
            out = d.decompress(data, OUT_CHUNK)
            if out:
                yield out
            self.eof = d.eof
            if d.eof or d.needs_input:
                return
            data = b""

    def unused(self) -> bytes:
        return self._d.unused_data


class _Zstd:
    """One zstd frame."""

    def __init__(self) -> None:
        import zstandard

        self._d = zstandard.ZstdDecompressor().decompressobj(write_size=OUT_CHUNK)
        self.eof = False
        self._rest = b""

    def feed(self, data: bytes) -> Iterator[bytes]:
        for i in range(0, len(data), _ZSTD_IN):
            out = self._d.decompress(data[i : i + _ZSTD_IN])
            for j in range(0, len(out), OUT_CHUNK):
                yield out[j : j + OUT_CHUNK]
            if self._d.eof:
                self.eof = True
                self._rest = self._d.unused_data + data[i + _ZSTD_IN :]
                return

    def unused(self) -> bytes:
        return self._rest


_DECODERS: dict[str, Callable[[], _Member]] = {"gzip": _Gzip, "bz2": _Bz2, "zstd": _Zstd}


def _corrupt_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [zlib.error, OSError, EOFError]
    try:
        import zstandard

        types.append(zstandard.ZstdError)
    except ImportError:  # pragma: no cover - zstandard is a dependency
        pass
    return tuple(types)


def decompress(
    chunks: Iterable[bytes], codec: str | None, *, name: str | None = None
) -> Iterator[bytes]:
    """The decompressed bytes of ``chunks`` (``codec`` None: ``chunks`` unchanged), in
    chunks of at most :data:`OUT_CHUNK` bytes. Concatenated members are one stream (and
    zero bytes padding a gzip file's end are ignored, as gzip does). Corrupt, truncated
    or trailing non-compressed data raises :class:`CompressionError` naming the codec
    (and ``name``, the object, when given). Errors of ``chunks`` itself pass through."""
    if codec is None:
        yield from chunks
        return
    if codec not in _DECODERS:
        raise ValueError(f"unknown compression {codec!r}; expected one of {', '.join(CODECS)}")
    new = _DECODERS[codec]
    where = f" in {name}" if name else ""
    corrupt = _corrupt_types()
    member: _Member | None = None
    members = 0
    consumed = 0
    for chunk in chunks:
        data = bytes(chunk)
        while data:
            if member is None:
                if members and codec == "gzip":
                    data = data.lstrip(b"\0")
                    if not data:
                        break
                member = new()
            size = len(data)
            try:
                yield from member.feed(data)
            except corrupt as e:
                raise CompressionError(
                    f"{codec} data{where} is corrupt (member {members + 1}, compressed "
                    f"bytes {consumed}-{consumed + size}): {e}"
                ) from e
            if member.eof:
                data = member.unused()
                consumed += size - len(data)
                member = None
                members += 1
            else:
                consumed += size
                data = b""
    if member is not None:
        raise CompressionError(
            f"{codec} data{where} is truncated: it ends inside member {members + 1}, after "
            f"{consumed} compressed bytes; the file or object is incomplete"
        )


def skip(chunks: Iterable[bytes], n: int) -> Iterator[bytes]:
    """``chunks`` without their first ``n`` bytes. Fewer than ``n`` bytes in all yield
    nothing; the caller decides whether that is an error."""
    todo = n
    for chunk in chunks:
        if todo <= 0:
            yield chunk
        elif len(chunk) <= todo:
            todo -= len(chunk)
        else:
            yield chunk[todo:]
            todo = 0
