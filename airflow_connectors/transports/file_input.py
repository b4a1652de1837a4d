"""``file_input``: local files: one file, every file under a directory, or a glob.

Files are work items ordered by path. ``follow: false`` reads what matches now and ends
the input once every matching file is committed (new files found by a later run are
still picked up). ``follow: true`` also reads lines appended to files it already read and
never ends the input.
"""

from __future__ import annotations

import contextlib
import glob
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import Field, field_validator

from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.datasets import LineageDataset, storage_dataset
from airflow_connectors.transports.base import Cursor, WorkItem
from airflow_connectors.transports.listing import (
    COMPRESSED_SIZE,
    Compression,
    ListingSource,
    ObjectInfo,
)

__all__ = ["COMPRESSED_SIZE", "FileInputConfig", "FileInputTransport"]

READ_CHUNK = 8 << 20


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
        f"{READ_CHUNK >> 20} MiB. The rest of a file shorter than three of them is read "
        "in one request.",
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

    compression: Compression = Field(
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


class FileInputTransport(ListingSource):
    """The ``file_input`` transport: each matching local file is a work item, keyed by its
    absolute path; the listing mechanics are :class:`~.listing.ListingSource`'s. Files
    tail (``follow: true`` reads appended lines) and empty files are committed."""

    name = "file_input"
    Config = FileInputConfig
    config: FileInputConfig
    skip_empty = False
    appends = True
    follow_tails = True
    noun = "file"

    @classmethod
    def resolve_config(cls, raw: dict[str, object], base_dir: Path | None) -> dict[str, object]:
        """Make a relative ``path`` absolute against the spec file's folder."""
        path = raw.get("path")
        if isinstance(path, str) and base_dir is not None:
            bare = path.removeprefix("file://")
            if bare and not os.path.isabs(bare):
                return {**raw, "path": str(base_dir / bare)}
        return raw

    def location(self) -> str:
        """The configured path (file, folder or glob)."""
        return str(self.config.path)

    def lineage_datasets(self) -> list[LineageDataset]:
        """The file or folder read; of a glob, its fixed folder (:meth:`scope`)."""
        return [storage_dataset(self.scope())]

    def scope(self) -> str:
        """The folder before the first glob character, the folder, or the file."""
        return _scope(str(self.config.path))

    def watch_paths(self) -> list[str]:
        """The folder every listed path is under (of a file, its folder; of a folder or a
        glob not there yet, its deepest existing parent): a new or renamed file there
        wakes the ``new_data`` trigger at once."""
        scope = self.scope()
        folder = scope if scope.endswith("/") else os.path.dirname(scope)
        folder = folder.rstrip("/") or "/"
        while not os.path.isdir(folder) and folder != os.path.dirname(folder):
            folder = os.path.dirname(folder)
        return [folder] if os.path.isdir(folder) else []

    def empty_message(self) -> str:
        """A path that matches nothing."""
        return (
            f"file_input: {self.config.path} matches no file (missing file or folder, or an "
            "empty glob); nothing was read. Check the path, or add files and run the "
            "connector again"
        )

    def _listed(self) -> list[str]:
        """Absolute paths of what ``path`` matches now, in no order; under a folder,
        names starting with ``.`` or ``_`` (and their folders) are skipped. Nothing is
        stat-ed here (a glob may match folders, skipped once stat-ed), so a folder of
        many committed files costs a directory listing."""
        path = self.config.path
        if glob.has_magic(path):
            return list({os.path.abspath(f) for f in glob.glob(path, recursive=True)})
        if os.path.isdir(path):
            return _walk(os.path.abspath(path))
        return [os.path.abspath(path)] if os.path.isfile(path) else []

    def list_objects(self, after: str | None) -> Iterator[ObjectInfo]:
        """The files whose paths sort after ``after`` (every file when None)."""
        return _stat(sorted(p for p in self._listed() if after is None or p > after))

    def objects_to_consider(self, cursor: Cursor, full: bool) -> Iterator[ObjectInfo]:
        """Every file on a re-list; otherwise the paths after the watermark and those up
        to it that still have an offsets row (appends to them are read, changes noticed,
        before they collapse). Only those are ``stat``-ed: committed paths cost a string
        comparison each."""
        files = self._listed()
        return _stat(sorted(files) if full else _after_watermark(files, cursor))

    def open_range(self, item: WorkItem, start: int, end: int | None) -> Iterator[bytes]:
        """Bytes ``[start, end)`` of the file (``FileNotFoundError`` when it is gone)."""
        return _read_range(item.key, start, end, self.config.buffer_size_bytes or READ_CHUNK)

    def read_label(self, key: str) -> str:
        """``file_input: <path>``."""
        return f"file_input: {key}"

    def describe(self) -> str:
        """The path, with ``(follow)`` when following."""
        return f"file_input: {self.config.path}{' (follow)' if self.config.follow else ''}"


def _stat(paths: Iterable[str]) -> Iterator[ObjectInfo]:
    """The regular files of ``paths`` (in their order) with size and times; a file
    renamed into the folder keeps its mtime but gets a new ctime, which is when it took
    its current content or name."""
    for path in paths:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue  # removed since it was listed
        if stat.S_ISREG(st.st_mode):
            yield ObjectInfo(
                key=path,
                size=st.st_size,
                mtime=st.st_mtime,
                changed=max(st.st_mtime, st.st_ctime),
            )


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
        # A rest of under three chunks is read at once: a file of one or two blocks
        # reaches the format as one piece, not pieces it joins again (a copy). A file
        # read to its end is read on past the size it had here if it grew meanwhile.
        known = end
        if known is None:
            with contextlib.suppress(OSError):
                known = os.fstat(fh.fileno()).st_size
        at = start
        while end is None or at < end:
            left = None if known is None else known - at
            size = left if left is not None and 0 < left < 3 * chunk else chunk
            data = fh.read(size if end is None else min(size, end - at))
            if not data:
                break
            at += len(data)
            yield data
