"""Small parts of one batch combined before it commits.

Each Spark task of a batch writes its own parts, so a batch of many small inputs spread
over several tasks would leave one small table file per task (Spark's file sources
write one per task too). Before the engine commits a batch it calls
:func:`combine_small_parts`, which holds each kind (rows, dead letters) to at most
``1 + bytes / target_file_size`` files, ``bytes`` being what the batch read (for dead
letters, their files' size): when the attempt staged more, the fewest of its smallest
parts (each under a quarter of ``target_file_size``, up to ``target_file_size`` bytes in
all) that bring the count within the bound are rewritten as one file, in the parts'
order, and deleted. A batch of small inputs becomes one table file; a large batch's
parts (a task's share of large inputs each) are within the bound and stay as written,
so the driver rewrites nothing there, and never more than ``target_file_size`` bytes.

Crash safety: this runs before the state-store commit, inside the attempt's staging.
The combined file is written under a hidden name and renamed when complete (an object
store upload appears whole when it completes); a crash before the deletes finish leaves
an attempt that was never committed, which the next run discards whole (fail point
``mid_combine``). Receipts and offsets are per work item and do not change.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from airflow_connectors import failpoints
from airflow_connectors.sinks import _fs
from airflow_connectors.sinks.base import KINDS, Kind, SinkConfig, SinkUnwritable
from airflow_connectors.sinks.parts import ParquetPart

if TYPE_CHECKING:
    from pyarrow import fs as pafs

    from airflow_connectors.sinks.base import Sink

log = logging.getLogger(__name__)

#: A part smaller than ``target_file_size`` / SMALL is small.
SMALL = 4


def combine_small_parts(
    sink: Sink, batch_id: int, attempt: str, read_bytes: int
) -> dict[Kind, tuple[int, int]]:
    """Combines small staged parts of ``attempt``, a batch that read ``read_bytes``
    (see the module docstring); returns, per kind where parts were combined, (parts
    combined, their bytes). Raises :class:`SinkUnwritable` naming the folder when the
    staging cannot be read or written."""
    config = sink.config
    if not isinstance(config, SinkConfig):
        return {}
    target = config.target_file_size
    done: dict[Kind, tuple[int, int]] = {}
    for kind in KINDS:
        folder = sink.staged_folder(batch_id, attempt, kind)
        if folder is None:
            continue
        try:
            combined = _combine(
                folder,
                target,
                str(getattr(config, "compression", "snappy")),
                read_bytes if kind == "rows" else None,
            )
        except OSError as e:
            raise SinkUnwritable(_fs.describe_error(folder, e)) from e
        if combined is not None:
            done[kind] = combined
    return done


def _combine(
    folder: str, target: int, compression: str, read_bytes: int | None
) -> tuple[int, int] | None:
    """Combines parts of ``folder`` (``read_bytes``: what the batch read; None: the
    parts' own size)."""
    import pyarrow.parquet as pq

    fs, path = _fs.filesystem(folder)
    chosen = _small(fs, path, target, read_bytes)
    if len(chosen) < 2:
        return None
    # Parts of one kind share the table's schema; any that do not stay as they are.
    schemas = {p: pq.read_schema(p, filesystem=fs) for p in chosen}
    first = schemas[chosen[0]]
    chosen = [p for p in chosen if schemas[p].equals(first, check_metadata=True)]
    if len(chosen) < 2:
        return None
    name = _name(chosen[0])
    out = ParquetPart(folder, lambda _: name, compression=compression, schema=first)
    nbytes = 0
    try:
        for p in chosen:
            with fs.open_input_file(p) as fh:
                nbytes += fh.size()
                out.write(pq.read_table(fh, schema=first))
        out.close()
    except BaseException:
        out.abort()
        raise
    failpoints.reach("mid_combine")
    for p in chosen:
        fs.delete_file(p)
    return len(chosen), nbytes


def _small(fs: pafs.FileSystem, path: str, target: int, read_bytes: int | None) -> list[str]:
    """The parts to combine, in name order (the order they were written in): none when
    the folder holds at most ``1 + bytes / target`` parts; else the fewest of the
    smallest parts under ``target / SMALL`` bytes (up to ``target`` bytes in all) whose
    combining brings the count within that bound, or as near as those allow."""
    from pyarrow import fs as pafs

    parts = [
        i
        for i in _fs.entries(fs, path)
        if i.type == pafs.FileType.File
        and i.base_name.endswith(".parquet")
        and not i.base_name.startswith((".", "_"))
        and i.size is not None
    ]
    size = sum(i.size for i in parts) if read_bytes is None else read_bytes
    excess = len(parts) - (1 + size // target)
    if excess < 1:
        return []
    chosen: list[str] = []
    total = 0
    small = (i for i in parts if i.size < target // SMALL)
    for info in sorted(small, key=lambda i: (i.size, i.path)):
        if len(chosen) > excess or (chosen and total + info.size > target):
            break
        chosen.append(info.path)
        total += info.size
    return sorted(chosen)


def _name(first: str) -> str:
    """The combined file's name: the first part's, marked (unique in the batch: part
    names are, and no part is written with this mark)."""
    base = first.rsplit("/", 1)[-1]
    return base.removesuffix(".parquet") + "-combined.parquet"
