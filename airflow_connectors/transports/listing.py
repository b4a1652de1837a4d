"""Listing sources: folders and object stores (local files, S3, Google Cloud Storage,
Azure Blob Storage), after Aiven's cloud-storage source design, made complete.

A listing source names objects by sortable keys. The framework (this module) owns what
every such source needs and each used to write again:

- the **watermark**: every key up to it is committed, so a discovery lists only the keys
  after it (``StartAfter``), and offsets rows of completed keys below it collapse into
  it (``state/watermark.py``): state stays O(keys in flight), not O(keys ever seen);
- the **re-list** every ``relist_every`` discoveries, which lists every key so a key
  that sorts below the watermark and appeared since the previous re-list (a *late* key:
  ``part-9`` after ``part-10``, UUID names) is read, and whose start time (the source's
  clock minus ``relist_margin_s``) becomes the cursor's ``late_after``;
- the **minimum age** (``min_file_age``): an object modified more recently waits for a
  later discovery instead of being read half-written;
- **compression** (by extension or ``compression``): a compressed object is planned
  whole, streamed through its decompressor from byte 0 and skipped to the committed
  (decompressed) offset; it is never split nor read as a growing object;
- **byte ranges**: line-oriented formats resume an object mid-way at the committed byte
  offset, and with ``max_object_bytes_per_batch`` read large objects one range per batch;
- **changes after commit**: an object replaced (another ETag or generation) or rewritten
  (another size) after its bytes were committed is a notice in the connector's stats,
  never silently read twice or skipped; bytes appended to a local file are new work when
  the format is line oriented;
- **end of input** and the report of keys that wait (``SourceReport``);
- **reading**: transient errors are retried under the connector's ``errors.retry.*``,
  re-opening the object at the byte reached.

A subclass writes only what is its own: where it lists (:meth:`ListingSource.location`,
:meth:`ListingSource.scope`), how it lists objects after a key
(:meth:`ListingSource.list_objects`) and how it opens a byte range
(:meth:`ListingSource.open_range`). ``s3_input`` is the example to copy.
"""

from __future__ import annotations

import dataclasses
import time
from abc import abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, Self

from pydantic import Field, model_validator

from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.datasets import LineageDataset, storage_dataset
from airflow_connectors.transports import compression as _compression
from airflow_connectors.transports.base import (
    MTIME,
    Cursor,
    KeyOffset,
    Limits,
    Transport,
    WorkItem,
    check_scope,
)
from airflow_connectors.transports.retry import retrying_stream

#: ``meta`` key of an object's version tag (ETag, GCS generation) as planned: a read
#: refuses another version, and a committed key whose tag changed is a notice.
ETAG = "etag"
#: ``meta`` key of a compressed object's size in bytes: its offsets count decompressed
#: bytes, so this is how a change of a committed compressed object is noticed.
COMPRESSED_SIZE = "compressed_size"
#: ``meta`` key of how far a read looked past its committed offset (an unfinished last
#: record): such bytes are read again only once the object has grown.
SEEN = "seen"


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object."""

    #: The object's key (its full name in the bucket, container or file system); keys
    #: order the work.
    key: str
    #: Its size in bytes.
    size: int
    #: When it was last modified, epoch seconds on the source's clock (the minimum age
    #: is measured from it).
    mtime: float
    #: Its version tag (ETag, GCS generation); None: versions are told apart by size.
    etag: str | None = None
    #: When it took its current content or name (a local file's ctime: a file renamed
    #: into the folder keeps its mtime); None: ``mtime``. Collapse and late keys use it.
    changed: float | None = None

    @property
    def changed_at(self) -> float:
        """``changed``, else ``mtime``."""
        return self.mtime if self.changed is None else self.changed


Compression = Literal["auto", "none", "gzip", "zstd", "bz2"]


class ListingConfig(StrictConfig):
    """The settings every listing source has; a source's ``Config`` extends it (and may
    redefine a field to change its default or description)."""

    follow: bool = Field(
        default=False,
        description="false: read the objects that exist now and end the input once all of "
        "them are committed (objects added later are still read by later runs). true: "
        "never end the input; every discovery picks up new objects.",
    )
    relist_every: int = Field(
        default=10,
        ge=1,
        description="Every this many discoveries, list every key instead of only the keys "
        "after the committed watermark, to find objects whose keys sort below it (late "
        "keys). 1: list everything every time. Whatever this is, the new-data probe of "
        "`trigger: {on: new_data}` and the end-of-input check of a discovery that found "
        "nothing list every key, so a late key is seen at once and the next discovery "
        "re-lists to read it.",
    )
    relist_margin_s: float = Field(
        default=300.0,
        ge=0,
        description="Seconds taken off a re-list's start time before objects older than it "
        "count as seen: multipart uploads carry their start time as their modification "
        "time, so an upload that completes after a re-list is still found by the next one.",
    )
    compression: Compression = Field(
        default="auto",
        description="How objects are compressed. auto: by extension (.gz/.gzip, .zst/.zstd, "
        ".bz2); none: read bytes as they are; or gzip, zstd or bz2 for every object. "
        "Compressed objects are streamed (never whole in memory), never split, and a "
        "resumed one is read again from its start, skipping what was committed.",
    )
    max_object_bytes_per_batch: int | None = Field(
        default=None,
        gt=0,
        description="Line-oriented formats (JSON lines, CSV): an uncompressed object larger "
        "than this is read in byte ranges of this size, one range per batch; a crash loses "
        "at most one range. Unset: whole objects.",
    )


class PrefixOrKey(StrictConfig):
    """Where in a bucket a source reads: every object under a prefix, or one object."""

    prefix: str | None = Field(
        default=None,
        description="Read every object whose key starts with this prefix, in key order "
        "('' for the whole bucket). Exactly one of prefix and key.",
    )
    key: str | None = Field(
        default=None,
        min_length=1,
        description="Read this one object. Exactly one of prefix and key.",
    )

    @model_validator(mode="after")
    def _prefix_or_key(self) -> Self:
        if (self.prefix is None) == (self.key is None):
            raise ValueError(
                "set exactly one of prefix (every object under it; '' for the whole bucket) "
                "and key (one object)"
            )
        return self

    @property
    def scope(self) -> str:
        """The one key, or the prefix: the fixed start of every key listed."""
        return self.key if self.key is not None else self.prefix or ""


class ListingSettings(Protocol):
    """What the framework reads of a listing source's config: a ``Config`` that extends
    :class:`ListingConfig` has it, and one that declares the four fields itself (to keep
    its own field order in messages and docs) does too."""

    follow: bool
    relist_every: int
    relist_margin_s: float
    compression: Compression


class ListingSource(Transport):
    """A source of objects named by sortable keys; see the module's docstring for what
    the framework does. Subclasses implement :meth:`location`, :meth:`scope`,
    :meth:`list_objects` and :meth:`open_range`, and may set the class flags below."""

    config: ListingSettings  # type: ignore[assignment]
    #: Zero-byte objects hold no record: skipped (folder markers of object stores).
    skip_empty: ClassVar[bool] = True
    #: Bytes appended to a committed object are new work when the format is line
    #: oriented (local files); otherwise a size change is a notice.
    appends: ClassVar[bool] = False
    #: With ``follow: true``, also read what is appended to objects already read
    #: (a tail): every listing is complete, nothing collapses, no object is ever
    #: completed. Otherwise ``follow`` only means the input never ends.
    follow_tails: ClassVar[bool] = False
    #: What one object is called in messages.
    noun: ClassVar[str] = "object"

    # --- what a subclass writes -------------------------------------------------------

    @abstractmethod
    def location(self) -> str:
        """What is listed, for messages and lineage: a URL such as
        ``gs://bucket/prefix``, or a path or glob."""

    @abstractmethod
    def scope(self) -> str:
        """The fixed start of every key this source lists (its prefix, or its one key):
        a watermark that sorts after all of them means the source was moved, and
        discovery stops rather than take unread keys as committed."""

    @abstractmethod
    def list_objects(self, after: str | None) -> Iterable[ObjectInfo]:
        """The objects whose keys sort after ``after`` (every object when None), in key
        order. Errors are one-line ``OSError``\\ s naming the location."""

    @abstractmethod
    def open_range(self, item: WorkItem, start: int, end: int | None) -> Iterator[bytes]:
        """One attempt at bytes ``[start, end)`` of ``item.key`` (``end`` None: to its
        end). Raise ``FileNotFoundError`` when the object is gone or is not the version
        planned (``item.meta[ETAG]``), ``PermissionError`` when access is refused, and
        let transient errors out: the framework retries under the connector's
        ``errors.retry.*``, calling this again from the byte reached."""

    def listing_started_at(self) -> float | None:
        """When the last :meth:`list_objects` started on the source's clock (an object
        store's ``Date``); None: no complete listing happened. The default is this
        host's clock at its start."""
        return self._listing_began

    def object_url(self, key: str) -> str:
        """How an object is named in messages (the default: its key)."""
        return key

    def lineage_datasets(self) -> list[LineageDataset]:
        """What is listed (:meth:`location`), as OpenLineage names a storage URL or a
        path (``gs://bucket`` and the prefix, ``file`` and the path...)."""
        return [storage_dataset(self.location())]

    def read_label(self, key: str) -> str:
        """How a read of ``key`` is named in retry messages."""
        return f"{self.name}: read {self.object_url(key)}"

    def wrap_errors(self, chunks: Iterator[bytes], what: str) -> Iterator[bytes]:
        """``chunks`` with a library's errors that outlived the retries made one line
        (the default passes them through)."""
        return chunks

    def empty_message(self) -> str:
        """The notice of a first listing that found nothing at all."""
        return (
            f"{self.name}: {self.location()} holds no {self.noun}; nothing was read. Check "
            f"the location and credentials, or add {self.noun}s and run the connector again"
        )

    def objects_to_consider(self, cursor: Cursor, full: bool) -> Iterable[ObjectInfo]:
        """What a discovery looks at, in key order: every object on a re-list (``full``),
        else those after the watermark. A source whose listing costs little per key may
        also return keys at or below the watermark that still have offsets rows (local
        files: appends to them are read)."""
        return self.list_objects(None if full else cursor.watermark)

    # --- settings ---------------------------------------------------------------------

    @property
    def tailing(self) -> bool:
        """Following the tails of objects (``follow: true`` on a source that tails)."""
        return self.follow_tails and self.config.follow

    @property
    def bounded(self) -> bool:
        """Bounded unless ``follow: true``."""
        return not self.config.follow

    def _min_age(self) -> float:
        return float(getattr(self.config, "min_file_age", 0.0) or 0.0)

    def _range_bytes(self) -> int | None:
        step = getattr(self.config, "max_object_bytes_per_batch", None)
        return int(step) if step else None

    def codec(self, key: str) -> str | None:
        """The codec ``key`` is read with (None: not compressed)."""
        return _compression.codec_of(key, self.config.compression)

    # --- discovery --------------------------------------------------------------------

    _listing_began: float | None = None

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        """Objects that are neither in flight nor committed, in key order, at most
        ``limits.max_items``: new objects from their first byte, the unread rest of
        objects not read to their end, and (local files, line formats) appended bytes.
        Objects modified within the minimum age wait (``report.waiting``); a committed
        object that changed is a notice. A complete listing reports its start (minus
        ``relist_margin_s``, and before any object that waits) as ``relisted_at``."""
        report = self.report
        report.relisted_at, report.waiting = None, []  # this listing's outcome only
        tailing = self.tailing
        if not tailing:  # tailing keeps every offsets row: no watermark to trust
            check_scope(self.name, self.location(), self.scope(), cursor.watermark)
        full = (
            tailing
            or cursor.watermark is None
            or cursor.since_relist >= self.config.relist_every - 1
        )
        min_age = self._min_age()
        now = limits.now or time.time()
        floor: float | None = None  # a waiting object's change time caps the re-list time
        self._listing_began = time.time()
        seen = emitted = 0
        for obj in self.objects_to_consider(cursor, full):
            seen += 1
            if obj.key in cursor.in_flight or (self.skip_empty and obj.size == 0):
                continue
            if min_age and now - obj.mtime < min_age:
                floor = obj.changed_at if floor is None else min(floor, obj.changed_at)
                report.wait(obj.key, obj.mtime + min_age)
                continue
            item = self._plan(obj, cursor, limits)
            if item is None:
                continue
            if emitted >= limits.max_items:
                return  # cut: not a complete listing
            yield item
            emitted += 1
        if full and not tailing:
            began = self.listing_started_at()
            if began is not None:
                at = began - self.config.relist_margin_s
                report.relisted_at = at if floor is None else min(at, floor)
        first = not cursor.offsets and cursor.watermark is None
        if not seen and full and first and not self.config.follow:
            report.notice(self.empty_message())

    def _plan(self, obj: ObjectInfo, cursor: Cursor, limits: Limits) -> WorkItem | None:
        """The work of a listed object (None: nothing to read)."""
        done = cursor.get(obj.key)
        if done is None:
            if _collapsed(obj, cursor):
                return None  # committed; its offsets row collapsed into the watermark
            return self._item(obj, 0, 0, limits)
        before = done.meta.get(ETAG)
        if before and obj.etag and before != obj.etag:
            what = (
                "it was committed"
                if done.completed
                else f"{done.offset} bytes of it were committed"
            )
            self.report.notice(
                f"{self.name}: {self.object_url(obj.key)} was replaced after {what} (ETag "
                f"{before} -> {obj.etag}); the new version is not read. Write new data to "
                f"new {self.noun}s, or reset the connector's offsets to read it again",
                obj.key,
            )
            return None
        if self.codec(obj.key) is not None:
            return self._compressed(obj, done, limits)
        if not done.completed:
            if obj.size == 0 == done.offset:
                # An empty object whose planned batch was released: nothing to read but
                # its commit.
                return (
                    None
                    if self.tailing
                    else self._stamped(WorkItem(key=obj.key, start=0, end=0, size=0), obj)
                )
            seen = int(done.meta.get(SEEN, 0) or 0)
            if self._range_bytes() and limits.appendable:
                return self._item(obj, done.offset, done.records, limits, seen=seen)
            if obj.size > max(done.offset, seen):
                # Bytes past the offset that were already looked at (an unfinished last
                # record) are read again only once the object has grown.
                return self._item(obj, done.offset, done.records, limits)
            return None
        if obj.size == done.offset:
            return None
        if self.appends and obj.size > done.offset and limits.appendable:
            # Lines appended after it was committed: read them as new work.
            return self._stamped(
                WorkItem(
                    key=obj.key,
                    start=done.offset,
                    end=obj.size,
                    size=obj.size,
                    records_done=done.records,
                    final=True,
                ),
                obj,
            )
        if not before or not obj.etag:  # same tag, same bytes: nothing changed
            self.report.notice(
                f"{self.name}: {self.object_url(obj.key)} changed after it was committed "
                f"({done.offset} bytes read, now {obj.size} bytes); its new content is not "
                f"read. Write new data to new {self.noun}s, or reset the connector's offsets "
                "to read it again",
                obj.key,
            )
        return None

    def _compressed(self, obj: ObjectInfo, done: KeyOffset, limits: Limits) -> WorkItem | None:
        """A compressed object that has an offsets row: the rest of it from the committed
        (decompressed) offset, or a notice when it changed after it was committed."""
        if not done.completed:
            return self._item(obj, done.offset, done.records, limits)
        was = done.meta.get(COMPRESSED_SIZE, obj.size)
        if was != obj.size and not (done.meta.get(ETAG) and obj.etag):
            self.report.notice(
                f"{self.name}: {self.object_url(obj.key)} changed after it was committed "
                f"(compressed size {was} bytes, now {obj.size} bytes); its new content is "
                f"not read. Write new data to new {self.noun}s, or reset the connector's "
                "offsets to read it again",
                obj.key,
            )
        return None

    def _item(
        self, obj: ObjectInfo, start: int, records_done: int, limits: Limits, seen: int = 0
    ) -> WorkItem:
        """The work item of ``obj`` from byte ``start``: whole (compressed objects: to
        their end, ``end=None``), or one range of ``max_object_bytes_per_batch``."""
        if self.codec(obj.key) is not None:
            return self._stamped(
                WorkItem(
                    key=obj.key,
                    start=start,
                    end=None,
                    size=obj.size,
                    records_done=records_done,
                    meta={COMPRESSED_SIZE: obj.size},
                ),
                obj,
            )
        end = obj.size
        step = self._range_bytes()
        if step and limits.appendable and not self.tailing:
            end = min(obj.size, start + step)
            if seen and end <= seen:
                # The last range ended inside one record: read past it this time.
                end = min(obj.size, seen + step)
        return self._stamped(
            WorkItem(
                key=obj.key,
                start=start,
                end=end,
                size=obj.size,
                records_done=records_done,
                final=end == obj.size and not self.tailing,
            ),
            obj,
        )

    def _stamped(self, item: WorkItem, obj: ObjectInfo) -> WorkItem:
        """``item`` with the object's version tag and (unless tailing: nothing collapses)
        its change time as ``MTIME``, which opts its row in to collapse."""
        meta: dict[str, Any] = dict(item.meta)
        if obj.etag:
            meta[ETAG] = obj.etag
        if not self.tailing:
            meta[MTIME] = obj.changed_at
        return dataclasses.replace(item, meta=meta)

    def exhausted(self, cursor: Cursor) -> bool | None:
        """Never while following; otherwise the framework decides (a discovery that
        finds nothing, with nothing waiting, and no late key on a complete listing)."""
        return False if self.config.follow else None

    # --- reading ----------------------------------------------------------------------

    def read(self, item: WorkItem) -> Iterator[bytes]:
        """The bytes of ``item``'s range, or for a compressed object its decompressed
        bytes from ``item.start`` (the object is read from its first byte and what comes
        before is skipped). Transient errors are retried under the connector's
        ``errors.retry.*``, re-opening the object at the byte reached."""
        codec = self.codec(item.key)
        first, end = (0, None) if codec else (item.start, item.end)
        what = self.read_label(item.key)
        raw = retrying_stream(self.retry, what, lambda n: self.open_range(item, first + n, end))
        chunks = self.wrap_errors(raw, what)
        if codec is None:
            yield from chunks
        else:
            name = self.object_url(item.key)
            yield from _compression.skip(
                _compression.decompress(chunks, codec, name=name), item.start
            )


def _collapsed(obj: ObjectInfo, cursor: Cursor) -> bool:
    """Whether an object without an offsets row was committed and collapsed into the
    watermark: at or below it and unchanged since before ``late_after``."""
    w, late_after = cursor.watermark, cursor.late_after
    return w is not None and late_after is not None and obj.key <= w and obj.changed_at < late_after


__all__ = [
    "COMPRESSED_SIZE",
    "ETAG",
    "ListingConfig",
    "ListingSettings",
    "ListingSource",
    "ObjectInfo",
    "PrefixOrKey",
]
