"""``file_input``: local files: one file, every file under a directory, or a glob.

Files are work items ordered by path. ``follow: false`` reads what matches now and ends
the input once every matching file is committed (new files found by a later run are
still picked up). ``follow: true`` also reads lines appended to files it already read and
never ends the input.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.transports.base import (
    MTIME,
    Cursor,
    KeyOffset,
    Limits,
    Transport,
    WorkItem,
    check_scope,
)
from airflow_connectors.transports.compression import codec_of, decompress, skip
from airflow_connectors.transports.retry import retrying_stream

READ_CHUNK = 8 << 20
#: ``meta`` key of a compressed file's size in bytes: its offsets count decompressed
#: bytes, so this is how a change of a committed compressed file is noticed.
COMPRESSED_SIZE = "compressed_size"


class FileInputConfig(StrictConfig):
    """Feldera's ``file_input`` config, reading a folder or glob as well as one file."""

    path: str = Field(
        min_length=1,
        description="What to read: a file, a directory (every file below it, skipping "
        "names that start with '.' or '_') or a glob ('**' recurses). Absolute, or "
        "relative to the spec file's folder; a file:// URL is accepted. Files are read "
        "in path order.",
    )
    follow: bool = Field(
        default=False,
        description="false: read the files that match now, and end the input once all of "
        "them are committed (files added later are still read by later runs). true: "
        "also read lines appended to files already read (line-oriented formats: json, "
        "csv), and never end the input.",
    )
    buffer_size_bytes: int | None = Field(
        default=None,
        gt=0,
        description=f"Bytes read per request (Feldera's buffer_size_bytes); unset: "
        f"{READ_CHUNK >> 20} MiB.",
    )
    min_file_age: float = Field(
        default=5.0,
        ge=0,
        description="Seconds a file must have gone unmodified before it is read: a file "
        "still being written waits for a later discovery instead of being read half-way. "
        "Writers that move (rename) finished files into the folder can set 0.",
    )
    relist_every: int = Field(
        default=10,
        ge=1,
        description="Without follow, committed files are remembered by a watermark (every "
        "path up to it is committed) instead of one offsets row each, so the state stays "
        "small however many files were read; a discovery skips the paths up to the "
        "watermark without looking at them, and every relist_every discoveries looks at "
        "every file, to read files whose paths sort below the watermark but that appeared "
        "(or changed) since the previous such re-list. 1: look at every file each time. "
        "Whatever this is, the new-data probe of `trigger: {on: new_data}` and the "
        "end-of-input check of a discovery that found nothing look at every file, so a "
        "late file is seen at once and the next discovery re-lists to read it. "
        "A committed file rewritten or appended to after it was collapsed into the "
        "watermark looks like a new file and is read again whole (as Auto Loader's "
        "allowOverwrites); with follow: true nothing collapses.",
    )
    relist_margin_s: float = Field(
        default=2.0,
        ge=0,
        description="Seconds subtracted from a re-list's start time before files modified "
        "earlier are taken as committed once their rows collapse: covers clocks and "
        "timestamps that lag (a network file system's clock); raise it for such mounts.",
    )

    compression: Literal["auto", "none", "gzip", "zstd", "bz2"] = Field(
        default="auto",
        description="How files are compressed: auto (by extension: .gz/.gzip, .zst/.zstd, "
        ".bz2; other files are read as they are), none, or gzip, zstd or bz2 for every "
        "file. Compressed files are decompressed as they are read (never whole in memory); "
        "they are never read as growing files, and a resumed one is read again from its "
        "start, skipping what was committed.",
    )

    @field_validator("path")
    @classmethod
    def _strip_scheme(cls, v: str) -> str:
        return v.removeprefix("file://")


class FileInputTransport(Transport):
    """The ``file_input`` transport: each matching local file is a work item, keyed by its
    absolute path; byte offsets let a followed file be read again from where it stopped."""

    name = "file_input"
    Config = FileInputConfig
    config: FileInputConfig

    @classmethod
    def resolve_config(cls, raw: dict[str, object], base_dir: Path | None) -> dict[str, object]:
        """Make a relative ``path`` absolute against the spec file's folder."""
        path = raw.get("path")
        if isinstance(path, str) and base_dir is not None:
            bare = path.removeprefix("file://")
            if bare and not os.path.isabs(bare):
                return {**raw, "path": str(base_dir / bare)}
        return raw

    @property
    def bounded(self) -> bool:
        """Bounded unless ``follow: true``."""
        return not self.config.follow

    def _list_files(self) -> list[str]:
        """Absolute paths of what ``path`` matches now, sorted (see :meth:`_listed`)."""
        return sorted(self._listed())

    def _listed(self) -> list[str]:
        """Absolute paths of what ``path`` matches now, in no order; under a folder,
        names starting with ``.`` or ``_`` (and their folders) are skipped. Nothing is
        stat-ed here (a glob may match folders; ``discover`` skips what is not a file),
        so a folder of many committed files costs a directory listing."""
        path = self.config.path
        if glob.has_magic(path):
            return list({os.path.abspath(f) for f in glob.glob(path, recursive=True)})
        if os.path.isdir(path):
            return _walk(os.path.abspath(path))
        return [os.path.abspath(path)] if os.path.isfile(path) else []

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        """New files from byte 0, and the unread tail of files not read to their end. Files
        modified within ``min_file_age`` wait; a committed file that changed is a notice
        (or new work, when its format is line oriented and it grew).

        Without ``follow``, paths up to the cursor's watermark are skipped without a
        ``stat`` except on a re-list (the first listing, then every ``relist_every``
        discoveries), which also finds files below the watermark that have no offsets
        row and changed at or after ``late_after`` (late files); a complete re-list
        reports its start minus ``relist_margin_s`` as ``relisted_at``."""
        self.relisted_at = None
        self.waiting = []
        started = time.time()
        follow = self.config.follow
        if not follow:  # following keeps every offsets row: no watermark to trust
            check_scope(
                "file_input", str(self.config.path), _scope(str(self.config.path)), cursor.watermark
            )
        files = self._listed()
        if not files and not follow and not cursor.offsets and cursor.watermark is None:
            self.notices.append(
                (
                    f"file_input: {self.config.path} matches no file (missing file or folder, "
                    "or an empty glob); nothing was read. Check the path, or add files and "
                    "run the connector again",
                    None,
                )
            )
        full = (
            follow
            or cursor.watermark is None
            or cursor.since_relist >= self.config.relist_every - 1
        )
        relisted_at = started - self.config.relist_margin_s
        now = limits.now or time.time()
        emitted = 0
        for path in sorted(files) if full else _after_watermark(files, cursor):
            if emitted >= limits.max_items:
                return  # cut: not a complete listing
            if path in cursor.in_flight:
                continue
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue  # removed since it was listed
            if not stat.S_ISREG(st.st_mode):
                continue
            # When the file took its current content or name: a file renamed into the
            # folder keeps its mtime but gets a new ctime.
            changed = max(st.st_mtime, st.st_ctime)
            if now - st.st_mtime < self.config.min_file_age:
                # Modified within min_file_age: maybe still being written. It waits for a
                # later discovery rather than being read up to its current size (and this
                # re-list vouches only for files older than it).
                relisted_at = min(relisted_at, changed)
                self.waiting.append((path, st.st_mtime + self.config.min_file_age))
                continue
            item = self._item(path, st.st_size, changed, cursor, limits)
            if item is None:
                continue
            yield item
            emitted += 1
        if full and not follow:
            self.relisted_at = relisted_at

    def _item(
        self, path: str, size: int, changed: float, cursor: Cursor, limits: Limits
    ) -> WorkItem | None:
        """The work of a listed file (None: nothing to read), with its change time as
        ``MTIME`` unless following (appends need every file's offsets: none collapse)."""
        done = cursor.get(path)
        if done is None and _collapsed(path, changed, cursor):
            return None  # committed; its offsets row collapsed into the watermark
        item: WorkItem | None
        if done is not None and not done.completed and size == 0 == done.offset:
            # An empty file whose planned batch was released: nothing to read but its
            # commit.
            item = None if self.config.follow else WorkItem(key=path, start=0, end=0, size=0)
        elif self._codec(path) is not None:
            item = self._compressed(path, size, done)
        else:
            item = self._plain(path, size, done, limits)
        if item is None or self.config.follow:
            return item
        return dataclasses.replace(item, meta={**item.meta, MTIME: changed})

    def _plain(
        self, path: str, size: int, done: KeyOffset | None, limits: Limits
    ) -> WorkItem | None:
        """The work of an uncompressed file of ``size`` bytes (None: nothing to read)."""
        if done is None:
            return WorkItem(key=path, start=0, end=size, size=size, final=not self.config.follow)
        if not done.completed and size > max(done.offset, done.meta.get("seen", 0)):
            # Bytes past the offset that were already looked at (an unfinished last
            # line) are read again only once the file has grown.
            return WorkItem(
                key=path,
                start=done.offset,
                end=size,
                size=size,
                records_done=done.records,
                final=not self.config.follow,
            )
        if done.completed and size != done.offset:
            return self._changed(path, size, done, limits)
        return None

    def _codec(self, path: str) -> str | None:
        """The codec ``path`` is read with (None: not compressed)."""
        return codec_of(path, self.config.compression)

    def _compressed(self, path: str, size: int, done: KeyOffset | None) -> WorkItem | None:
        """The work of a compressed file: planned whole (``end=None``, its decompressed
        size is unknown), from the decompressed offset committed before, never read as a
        growing file. Its compressed size is kept with the offset (``meta``), so a
        committed file that changed is a notice."""
        meta = {COMPRESSED_SIZE: size}
        if done is None:
            return WorkItem(key=path, start=0, end=None, size=size, meta=meta)
        if not done.completed:
            return WorkItem(
                key=path,
                start=done.offset,
                end=None,
                size=size,
                records_done=done.records,
                meta=meta,
            )
        if done.meta.get(COMPRESSED_SIZE, size) != size:
            self.notices.append(
                (
                    f"file_input: {path} changed after it was committed (compressed size "
                    f"{done.meta[COMPRESSED_SIZE]} bytes, now {size} bytes); its new content "
                    "is not read. Write new data to new files, or reset the connector's "
                    "offsets to read it again",
                    path,
                )
            )
        return None

    def _changed(self, path: str, size: int, done: KeyOffset, limits: Limits) -> WorkItem | None:
        """A file that was read completely and has changed size since."""
        if size > done.offset and limits.appendable:
            # Lines appended after it was committed: read them as new work.
            return WorkItem(
                key=path,
                start=done.offset,
                end=size,
                size=size,
                records_done=done.records,
                final=True,
            )
        self.notices.append(
            (
                f"file_input: {path} changed after it was committed ({done.offset} bytes read, "
                f"now {size} bytes); its new content is not read. Write new data to new "
                "files, or reset the connector's offsets to read it again",
                path,
            )
        )
        return None

    def exhausted(self, cursor: Cursor) -> bool | None:
        """Not at end of input while a matching file is unread or not read to its end,
        including files that wait for ``min_file_age``."""
        if self.config.follow:
            return False
        w = cursor.watermark
        for path in self._list_files():
            done = cursor.get(path)
            if done is None:
                if w is not None and cursor.late_after is not None and path <= w:
                    # Collapsed into the watermark (a late file below it is found by the
                    # next re-list, which then reopens the input).
                    continue
                if os.path.isfile(path):
                    return False
                continue
            if not done.completed:
                return False
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            was = done.meta.get(COMPRESSED_SIZE, done.offset)
            if st.st_size != was and time.time() - st.st_mtime < self.config.min_file_age:
                return False  # changing right now: decided once it settles
        return None

    def read(self, item: WorkItem) -> Iterator[bytes]:
        """The bytes of ``item``'s byte range, or for a compressed file its decompressed
        bytes from ``item.start`` (the file is read from its first byte and what comes
        before is skipped). Transient ``OSError``\\ s of a network mount (EIO, ETIMEDOUT,
        ESTALE) are retried under the connector's ``errors.retry.*``, re-opening the file
        at the byte reached; ``FileNotFoundError`` when the file is gone."""
        chunk = self.config.buffer_size_bytes or READ_CHUNK
        codec = self._codec(item.key)
        if codec is None:
            start, end = item.start, item.end
        else:
            start, end = 0, None

        def open_at(offset: int) -> Iterator[bytes]:
            return _read_range(item.key, start + offset, end, chunk)

        raw = retrying_stream(self.retry, f"file_input: {item.key}", open_at)
        if codec is None:
            yield from raw
        else:
            yield from skip(decompress(raw, codec, name=item.key), item.start)

    def describe(self) -> str:
        """The path, with ``(follow)`` when following."""
        return f"file_input: {self.config.path}{' (follow)' if self.config.follow else ''}"


def _walk(root: str) -> list[str]:
    """Paths of the entries below the folder ``root`` that are not folders, skipping
    names that start with ``.`` or ``_``; symbolic links to folders are not followed
    (as ``os.walk``). One ``scandir`` per folder and no ``stat`` per file."""
    found: list[str] = []
    folders = [root]
    while folders:
        try:
            entries = os.scandir(folders.pop())
        except OSError:
            continue  # removed or unreadable meanwhile, as os.walk skips it
        with entries:
            for entry in entries:
                if entry.name.startswith((".", "_")):
                    continue
                try:
                    folder = entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                (folders if folder else found).append(entry.path)
    return found


def _scope(path: str) -> str:
    """The fixed start of every path ``path`` lists: the folder before its first glob
    character (with a trailing ``/``), the folder itself, or the file."""
    cut = min((path.find(c) for c in "*?[" if c in path), default=-1)
    if cut >= 0:
        folder = path[:cut].rpartition("/")[0]
        return os.path.join(os.path.abspath(folder or "."), "")
    if os.path.isdir(path):
        return os.path.join(os.path.abspath(path), "")
    return os.path.abspath(path)


def _after_watermark(files: list[str], cursor: Cursor) -> list[str]:
    """What a discovery that is not a re-list looks at, in path order: of ``files`` (in
    no order) those after the watermark, and those up to it that still have an offsets
    row (appends to them are read, changes noticed, as before they collapse). Only
    these are sorted: committed paths cost a string comparison each."""
    w = cursor.watermark or ""
    below = sorted(k for k in cursor.offsets if k <= w)
    if below:
        present = set(files)
        below = [k for k in below if k in present]
    return below + sorted(p for p in files if p > w)


def _collapsed(path: str, changed: float, cursor: Cursor) -> bool:
    """Whether a file without an offsets row was committed and collapsed into the
    watermark: at or below it and unchanged since before ``late_after``."""
    w, late_after = cursor.watermark, cursor.late_after
    return w is not None and late_after is not None and path <= w and changed < late_after


def _read_range(path: str, start: int, end: int | None, chunk: int) -> Iterator[bytes]:
    """The bytes of ``path`` from ``start`` up to ``end`` (None: its end)."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; a generator owns it
    except FileNotFoundError as e:
        # FileNotFoundError: the engine treats a vanished object as unreadable (skipped
        # under errors.tolerance: all), other OSErrors as an unreachable source.
        raise FileNotFoundError(f"file_input: {path} was listed for this batch but is gone") from e
    with fh:
        fh.seek(start)
        remaining = None if end is None else end - start
        while remaining is None or remaining > 0:
            data = fh.read(chunk if remaining is None else min(chunk, remaining))
            if not data:
                break
            if remaining is not None:
                remaining -= len(data)
            yield data
