"""``file_input``: local files: one file, every file under a directory, or a glob.

Files are work items ordered by path. ``follow: false`` reads what matches now and ends
the input once every matching file is committed (new files found by a later run are
still picked up). ``follow: true`` also reads lines appended to files it already read and
never ends the input.
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Iterator
from pathlib import Path

from pydantic import Field, field_validator

from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.transports.base import Cursor, KeyOffset, Limits, Transport, WorkItem

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
        f"{READ_CHUNK >> 20} MiB.",
    )
    min_file_age: float = Field(
        default=5.0,
        ge=0,
        description="Seconds a file must have gone unmodified before it is read: a file "
        "still being written waits for a later discovery instead of being read half-way. "
        "Writers that move (rename) finished files into the folder can set 0.",
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
        """Absolute paths of the files ``path`` matches now, sorted; under a folder,
        names starting with ``.`` or ``_`` (and their folders) are skipped."""
        path = self.config.path
        if glob.has_magic(path):
            found = glob.glob(path, recursive=True)
        elif os.path.isdir(path):
            found = [
                os.path.join(root, f)
                for root, dirs, files in os.walk(path)
                for f in files
                if not f.startswith((".", "_"))
                and not any(
                    part.startswith((".", "_"))
                    for part in os.path.relpath(root, path).split(os.sep)
                    if part != "."
                )
            ]
        else:
            found = [path] if os.path.exists(path) else []
        return sorted(os.path.abspath(f) for f in found if os.path.isfile(f))

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        """New files from byte 0, and the unread tail of files not read to their end. Files
        modified within ``min_file_age`` wait; a committed file that changed is a notice
        (or new work, when its format is line oriented and it grew)."""
        emitted = 0
        files = self._list_files()
        if not files and not self.config.follow and not cursor.offsets:
            self.notices.append(
                (
                    f"file_input: {self.config.path} matches no file (missing file or folder, "
                    "or an empty glob); nothing was read. Check the path, or add files and "
                    "run the connector again",
                    None,
                )
            )
        now = limits.now or time.time()
        for path in files:
            if emitted >= limits.max_items:
                return
            if path in cursor.in_flight:
                continue
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue  # removed since it was listed
            size = st.st_size
            if now - st.st_mtime < self.config.min_file_age:
                # Modified within min_file_age: maybe still being written. It waits for a
                # later discovery rather than being read up to its current size.
                continue
            done = cursor.get(path)
            item: WorkItem | None
            if done is None:
                item = WorkItem(
                    key=path, start=0, end=size, size=size, final=not self.config.follow
                )
            elif not done.completed and size > max(done.offset, done.meta.get("seen", 0)):
                # Bytes past the offset that were already looked at (an unfinished last
                # line) are read again only once the file has grown.
                item = WorkItem(
                    key=path,
                    start=done.offset,
                    end=size,
                    size=size,
                    records_done=done.records,
                    final=not self.config.follow,
                )
            elif done.completed and size != done.offset:
                item = self._changed(path, size, done, limits)
                if item is None:
                    continue
            else:
                continue
            yield item
            emitted += 1

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
        for path in self._list_files():
            done = cursor.get(path)
            if done is None or not done.completed:
                return False
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            if st.st_size != done.offset and time.time() - st.st_mtime < self.config.min_file_age:
                return False  # changing right now: decided once it settles
        return None

    def read(self, item: WorkItem) -> Iterator[bytes]:
        """The bytes of ``item``'s byte range; ``FileNotFoundError`` when the file is gone."""
        chunk = self.config.buffer_size_bytes or READ_CHUNK
        try:
            fh = open(item.key, "rb")  # noqa: SIM115 - closed below; a generator owns it
        except FileNotFoundError as e:
            # FileNotFoundError: the engine treats a vanished object as unreadable (skipped
            # under errors.tolerance: all), other OSErrors as an unreachable source.
            raise FileNotFoundError(
                f"file_input: {item.key} was listed for this batch but is gone"
            ) from e
        with fh:
            fh.seek(item.start)
            remaining = None if item.end is None else item.end - item.start
            while remaining is None or remaining > 0:
                data = fh.read(chunk if remaining is None else min(chunk, remaining))
                if not data:
                    break
                if remaining is not None:
                    remaining -= len(data)
                yield data

    def describe(self) -> str:
        """The path, with ``(follow)`` when following."""
        return f"file_input: {self.config.path}{' (follow)' if self.config.follow else ''}"
