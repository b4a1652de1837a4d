"""The Parquet part writer every sink that stages Parquet files uses (``parquet``,
``delta``, ``iceberg``), and the check that a local folder can be written.

A part is one or more Parquet files in a folder: a new file starts once the current one
reached ``target`` bytes (``None``: one file per part, the engine rolling to the next
part instead). Locally a file is written under a hidden temporary name
(``.<name>.<random>.tmp``) and renamed when it is finished, so a crashed writer never
leaves a half-written ``.parquet`` file; on an object store it is written in place (an
upload appears whole when it completes).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from airflow_connectors.sinks import _fs
from airflow_connectors.sinks.base import PartWriter, SinkUnwritable

if TYPE_CHECKING:
    import pyarrow as pa

#: Where parts encode and write their tables, one table of a part at a time, while the
#: task decodes its next block (pyarrow releases the GIL in both): a Spark task alone on
#: its cores, as in a batch's last wave, uses two of them. One pool per process (a
#: forked child has none of its parent's threads).
_WRITERS: tuple[int, ThreadPoolExecutor] | None = None


def _writers() -> ThreadPoolExecutor:
    global _WRITERS
    if _WRITERS is None or _WRITERS[0] != os.getpid():
        _WRITERS = (os.getpid(), ThreadPoolExecutor(4, thread_name_prefix="parquet-part"))
    return _WRITERS[1]


def blocker(path: str) -> str | None:
    """Why local folder ``path`` cannot be created or written (its nearest existing
    ancestor is a file, or is not writable), or None."""
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


#: Rows of a part's first table sampled to choose its dictionary-encoded columns.
DICTIONARY_SAMPLE = 8192


def dictionary_columns(table: pa.Table) -> list[str] | None:
    """The columns of ``table`` worth dictionary encoding: those whose first
    :data:`DICTIONARY_SAMPLE` non-null values repeat (at most half of them distinct).
    A column of mostly distinct values (ids, amounts, timestamps) costs a hash per value
    and a dictionary that Parquet's writer abandons or that outweighs its data, so it is
    written plain, as DuckDB's writer does past its compression-ratio threshold. None
    (every column, Parquet's default) when a column is nested, or the table too small to
    judge."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sample = table.slice(0, DICTIONARY_SAMPLE)
    if sample.num_rows < 64:
        return None
    chosen: list[str] = []
    for field, column in zip(sample.schema, sample.columns, strict=True):
        if pa.types.is_nested(field.type) or pa.types.is_dictionary(field.type):
            return None
        values = len(column) - column.null_count
        if values and pc.count_distinct(column).as_py() * 2 > values:
            continue
        chosen.append(field.name)
    return chosen


class ParquetPart(PartWriter):
    """One part's Parquet files in ``folder`` (a path or URL), named ``name(n)`` for the
    part's n-th file. A table is encoded and written in the background while the caller
    goes on (see :func:`_writers`); an error writing it is raised by the part's next
    ``write`` or ``close`` (a sink failure, which fails the batch whatever item it is
    raised for).

    ``target``: bytes after which the next file starts (None: never). ``schema``: the
    files' schema, each table cast to it (None: the first table's). ``failed``: the
    error an ``OSError`` becomes (default: one line naming the folder)."""

    def __init__(
        self,
        folder: str,
        name: Callable[[int], str],
        *,
        compression: str,
        target: int | None = None,
        schema: pa.Schema | None = None,
        failed: Callable[[OSError], SinkUnwritable] | None = None,
    ) -> None:
        self.url = folder
        self.fs, self.folder = _fs.filesystem(folder)
        self.local = not _fs.is_object_store(folder)
        self.name = name
        self.compression = compression
        self.target = target
        self.schema = schema
        self.failed = failed or (lambda e: SinkUnwritable(_fs.describe_error(folder, e)))
        self.rows = 0
        #: Finished files, in the filesystem's path form.
        self.files: list[str] = []
        self._writer: Any = None
        self._stream: Any = None
        self._path = ""  # the file being written (its final path)
        self._tmp = ""  # where it is written (a temporary name when local)
        self._pending: Future[None] | None = None  # the table being written
        #: The columns written with dictionary encoding (None: all), from the part's
        #: first table (:func:`dictionary_columns`).
        self._dictionary: list[str] | None = None

    def _open(self, schema: pa.Schema) -> None:
        import pyarrow.parquet as pq

        name = self.name(len(self.files))
        self._path = f"{self.folder}/{name}"
        if self.local:
            os.makedirs(self.folder, exist_ok=True)
            self._tmp = f"{self.folder}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
        else:
            self._tmp = self._path
        self._stream = self.fs.open_output_stream(self._tmp)
        self._writer = pq.ParquetWriter(
            self._stream,
            schema,
            compression=self.compression,
            use_dictionary=self._dictionary if self._dictionary is not None else True,
        )

    def _finish(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        self._stream.close()
        self._writer = self._stream = None
        if self._tmp != self._path:
            os.replace(self._tmp, self._path)
        self.files.append(self._path)

    def write(self, table: pa.Table) -> None:
        """Append rows; starts the next file once the current one reached ``target``.
        The rows are written in the background: an error writing them is raised by the
        next call (``write`` or ``close``), before anything else is written."""
        if table.num_rows == 0:
            return
        self._wait()
        self._pending = _writers().submit(self._write, table)
        self.rows += table.num_rows

    def _write(self, table: pa.Table) -> None:
        if self.schema is not None:
            table = table.cast(self.schema)
        if self._writer is None:
            if not self.files:
                self._dictionary = dictionary_columns(table)
            self._open(table.schema)
        self._writer.write_table(table, row_group_size=1 << 20)
        if self.target is not None and self._stream.tell() >= self.target:
            self._finish()

    def _wait(self) -> None:
        """The table being written is written (its error raised)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            pending.result()
        except OSError as e:
            raise self.failed(e) from e

    def close(self) -> int:
        """Finish the current file; returns the rows written."""
        self._wait()
        try:
            self._finish()
        except OSError as e:
            raise self.failed(e) from e
        return self.rows

    def abort(self) -> None:
        """Remove every file of this part."""
        with contextlib.suppress(Exception):
            self._wait()
        doomed = list(self.files)
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
                self._stream.close()
            doomed.append(self._tmp)
        for path in doomed:
            with contextlib.suppress(OSError):
                self.fs.delete_file(path)
        self._writer = self._stream = None
        self.files, self.rows = [], 0
