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
from typing import Any, Literal

from pydantic import Field

from airflow_connectors import failpoints
from airflow_connectors.sinks import _fs
from airflow_connectors.sinks.base import KINDS, Kind, PartWriter, Sink, SinkConfig, SinkUnwritable
from airflow_connectors.sinks.parts import ParquetPart, blocker


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


REMEDY = (
    "make it a writable folder, or point the warehouse (--warehouse, [connectors] "
    "warehouse) or the table's sink path at one"
)


REMEDY_URL = "the warehouse (--warehouse, [connectors] warehouse) or the table's sink path"


def unwritable(path: str, cause: OSError | None = None) -> SinkUnwritable:
    """The one-line error for a folder that cannot be written."""
    reason = blocker(path)
    if reason is None and cause is not None:
        reason = cause.strerror or str(cause) or type(cause).__name__
        if cause.filename:
            reason += f": {cause.filename}"
    return SinkUnwritable(f"cannot write {path}: {reason or 'unknown error'}; {REMEDY}")


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
    #: Parquet folders are appended to: a table with a primary_key (updates, deletes) is
    #: refused at spec validation, which names the sinks that apply changes.
    applies_changes = False

    def location(self, kind: Kind = "rows") -> str:
        """``path``, or ``<warehouse>/<pipeline>/<table>``; dead letters beside it with ``__errors``."""
        base = self.config.path or _fs.join(self.warehouse, self.pipeline, self.table.name)
        return base if kind == "rows" else f"{base}__errors"

    def column_max(self, column: str) -> object | None:
        """The greatest ``column`` of the published files, reading that column only."""
        import pyarrow.compute as pc

        dataset = _fs.parquet_dataset(self.location())
        if dataset is None:
            return None
        if column not in dataset.schema.names:
            raise ValueError(
                f"table {self.table.name} ({self.location()}) has no column {column!r}; "
                "name one of its columns in handover.column"
            )
        greatest: object | None = pc.max(dataset.to_table(columns=[column]).column(0)).as_py()
        return greatest

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
            reason = blocker(path)
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
        """A Parquet file ``part-<batch>-<part>.parquet`` in the attempt's staging folder
        (one file: the engine starts the next part once this one is big enough)."""
        name = f"part-{batch_id:010d}-{part:05d}.parquet"
        folder = _fs.join(self._staging(batch_id, attempt), kind)
        if self.on_object_store:
            url = _fs.join(folder, name)
            failed = lambda e: SinkUnwritable(_fs.describe_error(url, e))  # noqa: E731
        else:
            failed = lambda e: unwritable(folder, e)  # noqa: E731
        return ParquetPart(
            folder, lambda _: name, compression=self.config.compression, failed=failed
        )

    def staged_folder(self, batch_id: int, attempt: str, kind: Kind) -> str | None:
        """The attempt's staging folder of ``kind``."""
        return _fs.join(self._staging(batch_id, attempt), kind)

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
