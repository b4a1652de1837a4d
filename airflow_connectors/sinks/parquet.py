"""``parquet``: a folder of Parquet files at ``<warehouse>/<pipeline>/<table>``, readable by
``spark.read.parquet``, pyarrow and DuckDB. Bad records go to ``<table>__errors`` beside it.

Executors write each part to a staging folder outside the table; only a committed batch
is moved in (file renames on one filesystem), so readers never see a crashed attempt.

On an object store (the warehouse or ``path`` an ``s3://bucket/prefix`` URL) there are
no renames: a part writer uploads its staged object under its final staged name, and
publish copies each staged part server-side to its deterministic table name
``part-<batch>-<part>.parquet``, then deletes the staging. A publish repeated after a
crash (or beside a zombie's) overwrites the same objects, never adds others.

A batch that added columns (``schema_evolution: add_new_columns``) writes files with
them; earlier files lack them. Readers merge the files' schemas (``spark.read.option(
"mergeSchema", "true")``, DuckDB ``union_by_name``, :meth:`Sink.read`), so earlier rows
read the new columns as null.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from airflow_connectors import failpoints
from airflow_connectors.sinks import _fs
from airflow_connectors.sinks.base import KINDS, Kind, PartWriter, Sink, SinkConfig, SinkUnwritable

if TYPE_CHECKING:
    import pyarrow as pa


class ParquetSinkConfig(SinkConfig):
    """Where the table's Parquet files go and how they are compressed."""

    path: str | None = Field(
        default=None,
        description="Folder (or s3://bucket/prefix URL) of the table's Parquet files; "
        "its dead letters go to '<path>__errors' beside it. Unset: "
        "<warehouse>/<pipeline>/<table>, the warehouse being [connectors] warehouse.",
    )
    compression: Literal["snappy", "zstd", "gzip", "none"] = Field(
        default="snappy",
        description="Compression codec of the Parquet files written: 'snappy' (default, "
        "fast), 'zstd' (smaller files), 'gzip' or 'none'.",
    )


def errors_schema() -> pa.Schema:
    """The Arrow schema of a dead-letter table: one row per record that could not be
    ingested, with where it came from, its raw text and the error."""
    import pyarrow as pa

    return pa.schema(
        [
            ("connector", pa.string()),
            ("source_key", pa.string()),
            ("record_number", pa.int64()),
            ("line_number", pa.int64()),
            ("raw_text", pa.string()),
            ("error", pa.string()),
            ("batch_id", pa.int64()),
        ]
    )


REMEDY = (
    "make it a writable folder, or point the warehouse (--warehouse, [connectors] "
    "warehouse) or the table's sink path at one"
)


REMEDY_URL = "the warehouse (--warehouse, [connectors] warehouse) or the table's sink path"


def _blocker(path: str) -> str | None:
    """Why folder ``path`` cannot be created or written (its nearest existing ancestor
    is a file, or is not writable), or None."""
    probe = os.path.abspath(path)
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return None
        probe = parent
    if not os.path.isdir(probe):
        return f"{probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def unwritable(path: str, cause: OSError | None = None) -> SinkUnwritable:
    """The one-line error for a folder that cannot be written."""
    reason = _blocker(path)
    if reason is None and cause is not None:
        reason = cause.strerror or str(cause) or type(cause).__name__
        if cause.filename:
            reason += f": {cause.filename}"
    return SinkUnwritable(f"cannot write {path}: {reason or 'unknown error'}; {REMEDY}")


class _ParquetPart(PartWriter):
    """A Parquet part written straight to ``url`` on its filesystem: on an object store
    an S3 object appears whole when its upload completes, so no temporary name is
    needed. :class:`_LocalPart` writes a temporary file and renames it instead."""

    def __init__(self, url: str, compression: str) -> None:
        self.url = url
        self.fs, self.path = _fs.filesystem(url)
        #: Where the writer writes (a temporary name for local parts).
        self.target = self.path
        self.compression = compression
        self._writer: Any = None
        self.rows = 0

    def _failed(self, e: OSError) -> SinkUnwritable:
        return SinkUnwritable(_fs.describe_error(self.url, e))

    def _opening(self) -> None:
        """Before the first write (local parts create their folder)."""

    def _closed(self) -> None:
        """After the writer closed (local parts rename the temporary file)."""

    def write(self, table: pa.Table) -> None:
        import pyarrow.parquet as pq

        if table.num_rows == 0:
            return
        try:
            if self._writer is None:
                self._opening()
                self._writer = pq.ParquetWriter(
                    self.target, table.schema, compression=self.compression, filesystem=self.fs
                )
            self._writer.write_table(table, row_group_size=1 << 20)
        except OSError as e:
            raise self._failed(e) from e
        self.rows += table.num_rows

    def close(self) -> int:
        if self._writer is not None:
            try:
                self._writer.close()
                self._closed()
            except OSError as e:
                raise self._failed(e) from e
        return self.rows

    def abort(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(OSError):
                self._writer.close()
            self._writer = None
            with contextlib.suppress(OSError):
                self.fs.delete_file(self.target)
        self.rows = 0


class _LocalPart(_ParquetPart):
    """A part in a local folder: written under a temporary name, renamed on close, so a
    crashed writer never leaves a half-written ``.parquet`` file."""

    def __init__(self, path: str, compression: str) -> None:
        super().__init__(path, compression)
        self.target = f"{self.path}.{uuid.uuid4().hex}.tmp"

    def _failed(self, e: OSError) -> SinkUnwritable:
        return unwritable(os.path.dirname(self.path), e)

    def _opening(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)

    def _closed(self) -> None:
        os.replace(self.target, self.path)


def _file_type() -> Any:
    from pyarrow import fs as pafs

    return pafs.FileType.File


class ParquetSink(Sink):
    """The default sink: Parquet files under ``<warehouse>/<pipeline>/<table>`` (or
    ``path``), dead letters in ``<path>__errors``. Parts are staged under
    ``<warehouse>/<pipeline>/_staging`` and moved into the table on publish: renamed in
    a local folder, copied server-side (then the staging deleted) on ``s3://``."""

    name = "parquet"
    Config = ParquetSinkConfig
    config: ParquetSinkConfig

    def location(self, kind: Kind = "rows") -> str:
        """``path``, or ``<warehouse>/<pipeline>/<table>``; dead letters beside it with ``__errors``."""
        base = self.config.path or _fs.join(self.warehouse, self.pipeline, self.table.name)
        return base if kind == "rows" else f"{base}__errors"

    @property
    def on_object_store(self) -> bool:
        """Whether the table is on an object store (published by copy, not rename)."""
        return _fs.is_object_store(self.location())

    def _staging(self, batch_id: int, attempt: str | None = None) -> str:
        if _fs.is_object_store(self.warehouse) == self.on_object_store:
            base = _fs.join(self.warehouse, self.pipeline)
        else:  # the table's path and the warehouse are on different stores: stage beside it
            base = self.location().rstrip("/").rsplit("/", 1)[0]
        root = _fs.join(base, "_staging", self.table.name)
        return root if attempt is None else _fs.join(root, f"batch-{batch_id:010d}-{attempt}")

    def prepare(self, batch_id: int, attempt: str) -> None:
        """Clears the attempt's staging folder and checks the table, dead-letter and
        staging folders can be written."""
        if self.on_object_store:
            self._prepare_object_store(batch_id, attempt)
            return
        shutil.rmtree(self._staging(batch_id, attempt), ignore_errors=True)
        # On the driver, before Spark starts: an unwritable warehouse is one line naming
        # the path, not a failure of every Spark task.
        for path in (self.location("rows"), self.location("errors"), self._staging(batch_id)):
            reason = _blocker(path)
            if reason is not None:
                raise SinkUnwritable(
                    f"table {self.table.name}: cannot write {path}: {reason}; {REMEDY}"
                )

    def _prepare_object_store(self, batch_id: int, attempt: str) -> None:
        """On the driver: every bucket the table, its dead letters and the staging use
        exists and can be reached, and the staging can be written (a probe object inside
        the attempt's staging, removed with it); else one line naming the URL."""
        from pyarrow import fs as pafs

        staging = self._staging(batch_id, attempt)
        fs, path = _fs.filesystem(staging)
        urls = (self.location("rows"), self.location("errors"), staging)
        url = urls[0]
        try:
            for url in {_fs.bucket_of(u): u for u in reversed(urls)}.values():
                bucket = _fs.bucket_of(url)
                if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                    raise SinkUnwritable(
                        f"table {self.table.name}: cannot write {url}: bucket {bucket} does "
                        f"not exist; create it, or point {REMEDY_URL} at an existing bucket"
                    )
            url = staging
            _fs.remove_tree(fs, path)
            with fs.open_output_stream(f"{path}/_probe") as out:
                out.write(b"")
        except OSError as e:
            raise SinkUnwritable(
                f"table {self.table.name}: {_fs.describe_error(url, e)} ({REMEDY_URL})"
            ) from e

    def writer(self, batch_id: int, attempt: str, part: int, kind: Kind) -> PartWriter:
        """A Parquet file ``part-<batch>-<part>.parquet`` in the attempt's staging folder."""
        name = f"part-{batch_id:010d}-{part:05d}.parquet"
        if self.on_object_store:
            return _ParquetPart(
                _fs.join(self._staging(batch_id, attempt), kind, name), self.config.compression
            )
        return _LocalPart(
            os.path.join(self._staging(batch_id, attempt), kind, name), self.config.compression
        )

    def publish(self, batch_id: int, attempt: str) -> None:
        """Moves the staged parts into the table folders (a rename each; on an object
        store a copy to the same name), then drops the batch's staging; parts already
        moved by an earlier run are skipped (copied again on an object store)."""
        # Re-run after a crash between two parts (rolled forward), and possibly beside
        # another run publishing the same committed attempt (an Airflow retry beside a
        # zombie task): a part is done once it is in the table, whoever moved it.
        if self.on_object_store:
            self._publish_object_store(batch_id, attempt)
            return
        staging = self._staging(batch_id, attempt)
        parts: list[tuple[str, str, str]] = []
        for kind in KINDS:
            src = os.path.join(staging, kind)
            try:
                names = sorted(n for n in os.listdir(src) if n.endswith(".parquet"))
            except FileNotFoundError:
                continue  # no part of this kind, or every part of it was published
            except OSError as e:
                raise unwritable(src, e) from e
            parts += [(src, self.location(kind), name) for name in names]
        for n, (src, dest, name) in enumerate(parts):
            if n:
                failpoints.reach("mid_publish")
            try:
                os.makedirs(dest, exist_ok=True)
                os.replace(os.path.join(src, name), os.path.join(dest, name))
            except FileNotFoundError as e:
                if not os.path.exists(os.path.join(dest, name)):
                    raise unwritable(dest, e) from e
            except OSError as e:
                raise unwritable(dest, e) from e
        self.discard(batch_id)

    def _publish_object_store(self, batch_id: int, attempt: str) -> None:
        """Copies each staged part server-side to its name in the table (an object that
        is there already is overwritten by the same bytes), then deletes the staging."""
        fs, staging = _fs.filesystem(self._staging(batch_id, attempt))
        parts: list[tuple[str, str, str]] = []
        for kind in KINDS:
            dest_url = self.location(kind)
            _, dest = _fs.filesystem(dest_url)
            try:
                names = _fs.files(fs, f"{staging}/{kind}", ".parquet")
            except OSError as e:
                raise SinkUnwritable(_fs.describe_error(self.location(kind), e)) from e
            parts += [(src, f"{dest}/{src.rsplit('/', 1)[1]}", dest_url) for src in names]
        for n, (src, dest, dest_url) in enumerate(parts):
            if n:
                failpoints.reach("mid_publish")
            try:
                fs.copy_file(src, dest)
            except OSError as e:
                # Beside another run publishing this attempt: it may have finished and
                # deleted the staging; the part is published if it is in the table.
                if fs.get_file_info(dest).type != _file_type():
                    raise SinkUnwritable(_fs.describe_error(dest_url, e)) from e
        try:
            self.discard(batch_id)
        except OSError as e:  # published; the next publish deletes the staging again
            raise SinkUnwritable(_fs.describe_error(self._staging(batch_id), e)) from e

    def discard(self, batch_id: int, attempt: str | None = None) -> None:
        """Removes staging folders; never touches published parts."""
        if self.on_object_store:
            fs, root = _fs.filesystem(self._staging(batch_id))
            if attempt is not None:
                _fs.remove_tree(fs, f"{root}/batch-{batch_id:010d}-{attempt}")
                return
            prefix = f"{root}/batch-{batch_id:010d}-"
            for info in _fs.entries(fs, root):
                if info.path.startswith(prefix):
                    _fs.remove_tree(fs, info.path)
            return
        if attempt is not None:
            shutil.rmtree(self._staging(batch_id, attempt), ignore_errors=True)
            return
        root = self._staging(batch_id)
        prefix = f"batch-{batch_id:010d}-"
        if os.path.isdir(root):
            for name in os.listdir(root):
                if name.startswith(prefix):
                    shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            with contextlib.suppress(OSError):  # only when empty: other batches may be staging
                os.removedirs(root)
