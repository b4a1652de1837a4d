"""Read work items inside a Spark executor: transport -> format -> table schema -> sink
parts, with bad records counted, reported and (``errors.tolerance: all``) written to the
dead-letter table. Pure Python + pyarrow; :func:`ingest_partition` is the Spark task body
the engine runs, :mod:`.datasource` wraps the same code as Spark data sources.

One Spark task ingests a group of work items (the engine packs small items together by
size, as Spark's file sources do) and writes their rows through ONE rolling part writer
per kind (rows, dead letters): a new part starts once the Arrow bytes written reach the
sink's ``target_file_size``, so a batch of many small inputs makes few table files.
Receipts stay per item. Under ``errors.tolerance: all`` an item may still be skipped as
unreadable after some of its rows were decoded, so its output is held back until it
completes: in memory up to :data:`ITEM_BUFFER_BYTES`, beyond that in parts of its own that
stay open (and are aborted if it is skipped). Under ``none`` any failure fails the
batch, whose attempt is discarded whole, so rows go straight to the shared parts.

A failure that is not about one record is classified here, in the worker, and returned
to the driver as an :class:`ItemFailure` (one line, plus the worker's trace for DEBUG
logs) instead of being raised: a raised exception reaches the driver as a Py4J error of
thousands of lines. Stages:

- ``object``: the object cannot be decoded (a corrupt or empty Parquet file) or vanished
  since it was planned. Under ``errors.tolerance: all`` the item is skipped (completed
  with no rows, counted as a transport error), as Spark's ``ignoreCorruptFiles`` and
  ``ignoreMissingFiles``; under ``none`` the batch fails naming the object.
- ``source``: the source cannot be reached (a closed port, HTTP 5xx, a timeout). Never
  skipped: the batch stays planned and the next run retries it.
- ``sink``: the table cannot be written (:class:`SinkUnwritable`).
- ``parse``: a bad record under ``errors.tolerance: none`` (:class:`RecordRejected`).
- ``internal``: anything else (a bug); the trace is kept for DEBUG logs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import socket
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_connectors.engine.answer import ItemFailure, Stage, TaskAnswer
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.formats.base import (
    Decoded,
    NewFields,
    RecordError,
    conform,
    count_newlines,
)
from airflow_connectors.sinks.base import Kind, PartWriter, SinkConfig, SinkUnwritable
from airflow_connectors.state.store import BatchPlan, ErrorRecord, ItemReceipt
from airflow_connectors.transports import WorkItem
from airflow_connectors.transports.base import LINES_BEFORE
from airflow_connectors.transports.compression import CompressionError
from airflow_connectors.transports.retry import RetryStats, counting, current_stats

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.formats import Format
    from airflow_connectors.sinks import Sink
    from airflow_connectors.transports import Transport

log = logging.getLogger(__name__)
MAX_REPORTED_ERRORS = 100
#: Decoded bytes of one item held in memory until it completes (``errors.tolerance:
#: all``); an item that decodes to more writes parts of its own.
ITEM_BUFFER_BYTES = 16 << 20
#: A part's size when the sink's config has no ``target_file_size``.
DEFAULT_TARGET_BYTES = 128 << 20


class RecordRejected(ValueError):
    """A bad record with ``errors.tolerance: none``: the batch fails, nothing commits."""


class ItemFailed(Exception):
    """Raised inside :func:`ingest_item` with the classified failure; caught by
    :func:`ingest_partition`, which returns it to the driver."""

    def __init__(self, failure: ItemFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


@dataclass
class ItemOutcome:
    """What ingesting one work item produced: its receipt and the errors to store."""

    receipt: ItemReceipt
    errors: list[ErrorRecord] = field(default_factory=list)
    #: Fields the table lacks that the item held (``schema_evolution:
    #: add_new_columns``), each with the SQL type texts of its values.
    new_fields: dict[str, list[str]] = field(default_factory=dict)


class _Counter:
    """The transport's chunks, counted; remembers an error the transport raised, so a
    failure surfacing through the format is still told apart from a decoding error.
    ``retried`` counts the transient errors the transport retried while reading."""

    def __init__(self, read: Callable[[], Iterable[Any]]) -> None:
        self.read = read
        self.bytes = 0
        self.error: BaseException | None = None
        self.retried = RetryStats()

    def __iter__(self) -> Iterator[Any]:
        try:
            with counting(self.retried):
                chunks = iter(self.read())
            while True:
                # Only the transport's own steps count as this item's retries.
                with counting(self.retried):
                    chunk = next(chunks, None)
                if chunk is None:
                    return
                if isinstance(chunk, bytes | bytearray | memoryview):
                    self.bytes += len(chunk)
                yield chunk
        except Exception as e:
            self.error = e
            raise


class _ItemWriter:
    """Where one kind of an item's output goes; whatever the sink raises is a sink
    failure of the item."""

    def __init__(self, out: _ItemParts, kind: Kind, fail: Callable[[BaseException], Any]) -> None:
        self.out = out
        self.kind = kind
        self.fail = fail

    def write(self, table: pa.Table) -> None:
        """Hands ``table`` to the item's output."""
        try:
            self.out.write(self.kind, table)
        except Exception as e:
            raise self.fail(e) from e


class _Rolling:
    """One kind's part writers: a part is written until the Arrow bytes written to it
    reach the sink's ``target_file_size``, then the next one starts. Shared parts close
    as they fill; an item's own parts (``keep_open``) stay open until the item is
    committed or skipped, so a skip drops all of them."""

    def __init__(self, parts: _TaskParts, kind: Kind, *, keep_open: bool) -> None:
        self.task = parts
        self.kind: Kind = kind
        self.keep_open = keep_open
        self.open: list[PartWriter] = []
        self.current: PartWriter | None = None
        self.bytes = 0
        self.rows = 0  # handed to the parts
        self.closed_rows = 0  # what closed parts reported

    def write(self, table: pa.Table) -> None:
        """Appends ``table`` to the current part (starting one if needed)."""
        if table.num_rows == 0:
            return
        if self.current is None:
            self.current = self.task.open_part(self.kind)
            self.open.append(self.current)
            self.bytes = 0
        self.current.write(table)
        self.rows += table.num_rows
        self.bytes += table.nbytes
        if self.bytes >= self.task.target:
            if not self.keep_open:
                self.open.remove(self.current)
                self.closed_rows += self.current.close()
            self.current = None

    def close(self) -> int:
        """Closes the open parts; returns the rows the parts reported written."""
        while self.open:
            self.closed_rows += self.open.pop(0).close()
        self.current = None
        return self.closed_rows

    def abort(self) -> None:
        """Drops the open parts (closed ones stay: only shared parts close early)."""
        for w in self.open:
            w.abort()
        self.open = []
        self.current = None


class _TaskParts:
    """The part writers of one Spark task: one rolling writer per kind shared by the
    task's items, and the part numbers: task ``t`` of ``n`` numbers its parts ``t``,
    ``t + n``, ``t + 2n``... (unique in the batch, the same on a re-run of the plan)."""

    def __init__(self, ctx: BatchContext, sink: Sink, task: int, tasks: int) -> None:
        self.ctx = ctx
        self.sink = sink
        self.task = task
        self.tasks = max(tasks, task + 1)
        config = sink.config
        self.target = (
            config.target_file_size if isinstance(config, SinkConfig) else DEFAULT_TARGET_BYTES
        )
        self.parts = 0
        self.shared: dict[Kind, _Rolling] = {}

    def open_part(self, kind: Kind) -> PartWriter:
        """A new part of the batch attempt."""
        part = self.task + self.parts * self.tasks
        self.parts += 1
        return self.sink.writer(self.ctx.batch_id, self.ctx.attempt, part, kind)

    def rolling(self, kind: Kind) -> _Rolling:
        """The task's shared writer of ``kind``."""
        if kind not in self.shared:
            self.shared[kind] = _Rolling(self, kind, keep_open=False)
        return self.shared[kind]

    def close(self) -> None:
        """Closes the shared parts; checks they hold every row handed to them."""
        for kind, w in self.shared.items():
            written = w.close()
            assert written == w.rows, f"wrote {written} {kind}, handed {w.rows} to the parts"

    def abort(self) -> None:
        """Drops the open shared parts (the batch fails: its attempt is discarded)."""
        for w in self.shared.values():
            w.abort()


class _ItemParts:
    """What one item writes. ``buffered`` (``errors.tolerance: all``, where the item may
    be skipped as unreadable after some rows): held back until :meth:`commit`, in memory
    up to :data:`ITEM_BUFFER_BYTES`, then in parts of its own; otherwise straight into
    the task's shared parts."""

    def __init__(self, parts: _TaskParts, *, buffered: bool) -> None:
        self.task = parts
        self.buffered = buffered
        self.pending: list[tuple[Kind, pa.Table]] = []
        self.pending_bytes = 0
        self.own: dict[Kind, _Rolling] | None = None

    def write(self, kind: Kind, table: pa.Table) -> None:
        """Writes (or holds back) ``table``."""
        if table.num_rows == 0:
            return
        if not self.buffered:
            self.task.rolling(kind).write(table)
        elif self.own is not None:
            self._own(kind).write(table)
        else:
            self.pending.append((kind, table))
            self.pending_bytes += table.nbytes
            if self.pending_bytes > ITEM_BUFFER_BYTES:  # too big to hold: parts of its own
                self.own = {}
                pending, self.pending = self.pending, []
                for k, t in pending:
                    self._own(k).write(t)

    def _own(self, kind: Kind) -> _Rolling:
        assert self.own is not None
        if kind not in self.own:
            self.own[kind] = _Rolling(self.task, kind, keep_open=True)
        return self.own[kind]

    def commit(self) -> None:
        """The item completed: what it held back goes into the shared parts, its own
        parts close."""
        pending, self.pending = self.pending, []
        for kind, table in pending:
            self.task.rolling(kind).write(table)
        for kind, w in (self.own or {}).items():
            written = w.close()
            assert written == w.rows, f"wrote {written} {kind}, handed {w.rows} to the parts"

    def abort(self) -> None:
        """The item is skipped: nothing of it lands (its shared rows, if unbuffered,
        go with the failed batch's attempt)."""
        self.pending = []
        for w in (self.own or {}).values():
            w.abort()


def cause(e: BaseException) -> str:
    """The first line of an exception's message (its type when it has none)."""
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return lines[0].strip().rstrip(".") if lines else type(e).__name__


class _Task:
    """One Spark task: a group of work items read with one transport and format and
    written through the task's shared parts (:class:`_TaskParts`)."""

    def __init__(self, ctx: BatchContext, task: int, tasks: int) -> None:
        self.ctx = ctx
        self.parts = _TaskParts(ctx, ctx.sink(), task, tasks)
        self.tolerate = ctx.connector.errors.tolerance == "all"
        self.schema = ctx.table.arrow_schema()
        self._transport: Transport | None = None
        self._format: tuple[Format | None] | None = None
        #: An item of the task failed: the batch fails, the shared parts are dropped.
        self.failed = False
        self.last: WorkItem | None = None
        self._ahead: _ReadAhead | None = None

    def read_ahead(self, items: Sequence[WorkItem]) -> None:
        """Reads the task's small ``items`` (in the order they will be ingested) ahead in
        threads, when the transport asks for it (:attr:`Transport.read_ahead`)."""
        try:
            ahead = type(self.transport()).read_ahead
        except Exception:  # the first item's read says what is wrong, as without it
            return
        if ahead > 0 and len(items) > 2:
            self._ahead = _ReadAhead(self.transport(), items, ahead)

    def reader(self, item: WorkItem) -> Callable[[], Iterable[Any]] | None:
        """How ``item`` is read: from what was read ahead, or None (as it comes)."""
        return None if self._ahead is None else self._ahead.take(item)

    def transport(self) -> Transport:
        """The connector's transport, built once per task."""
        if self._transport is None:
            self._transport = self.ctx.transport()
        return self._transport

    def format(self) -> Format | None:
        """The connector's format (None: integrated transport), built once per task."""
        if self._format is None:
            self._format = (self.ctx.format(),)
        return self._format[0]

    def ingest(self, item: WorkItem, index: int = 0) -> ItemOutcome:
        """Read ``item`` (the ``index``-th of the batch plan) into the task's parts.

        Raises :class:`ItemFailed` when the item cannot be ingested; returns a skipped
        item's receipt (and its transport error) when ``errors.tolerance: all`` lets an
        unreadable object pass."""
        self.last = item
        out = _ItemParts(self.parts, buffered=self.tolerate)
        try:
            return _ingest_item(self, item, out, index)
        except ItemFailed as failed:
            f = failed.failure
            out.abort()  # nothing of a skipped object lands
            if f.stage != "object" or not self.tolerate:
                self.failed = True
                raise
        except BaseException:
            self.failed = True
            raise
        return ItemOutcome(
            ItemReceipt(
                key=item.key,
                offset=item.end if item.end is not None else item.start,
                records=0,
                bad=0,
                bytes=0,
                completed=True,
                records_done=item.records_done,
                # What the item was planned with stays with its offset, as for a read
                # item: a transport that tells its keys' rounds apart by it (postgres_input's
                # window) must see the skipped item as done, not plan it again forever.
                meta={**item.meta, "skipped": True},
                executor=executor_identity(),
            ),
            [ErrorRecord("transport", f.message, item.key)],
        )

    def close(self) -> ItemFailure | None:
        """Finish the task's parts (drop them when an item failed); a failure to write
        them is the sink failure of the task's last item."""
        if self._ahead is not None:
            self._ahead.close()
        if self.failed or self.last is None:
            self.parts.abort()
            return None
        try:
            self.parts.close()
        except Exception as e:
            self.parts.abort()
            return _sink_failure(self.ctx, self.last, e).failure
        return None


class _ReadAhead:
    """A task's small work items read ahead whole, ``ahead`` at a time in threads, while
    the task decodes the item before them. The first two items are read as they come:
    the first builds the transport's clients, which the threads then share. An item's
    error is raised where its read would have raised it (the task classifies it as
    without read-ahead), and its retries count as its own."""

    def __init__(self, transport: Transport, items: Sequence[WorkItem], ahead: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from airflow_connectors.transports.base import READ_AHEAD_BYTES

        self.transport = transport
        self.items = list(items)
        self.ahead = ahead
        self.limit = READ_AHEAD_BYTES
        self.pool = ThreadPoolExecutor(ahead, thread_name_prefix="read-ahead")
        self.pending: dict[int, Any] = {}
        self.taken = 0  # items taken so far
        self.submitted = 2  # items[0] and items[1] are read as they come

    def _small(self, item: WorkItem) -> bool:
        if item.size is None:
            return False
        end = item.end if item.end is not None else item.size
        return end - item.start <= self.limit

    def _fetch(self, item: WorkItem) -> tuple[list[Any], int]:
        stats = RetryStats()
        with counting(stats):
            chunks = list(self.transport.read(item))
        return chunks, stats.count

    def take(self, item: WorkItem) -> Callable[[], Iterable[Any]] | None:
        """How the task's next item, ``item``, is read; None: as it comes."""
        n = self.taken
        self.taken += 1
        if n >= len(self.items) or self.items[n] != item:  # not the planned order
            self.close()
            return None
        if n >= 1:
            upto = min(len(self.items), n + 1 + self.ahead)
            while self.submitted < upto:
                i = self.submitted
                self.submitted += 1
                if self._small(self.items[i]):
                    self.pending[i] = self.pool.submit(self._fetch, self.items[i])
        future = self.pending.pop(n, None)
        if future is None:
            return None

        def read() -> Iterator[Any]:
            chunks, retried = future.result()
            if retried:
                stats = current_stats()
                if stats is not None:
                    stats.add(retried)
            yield from chunks

        return read

    def close(self) -> None:
        """Stops reading ahead (what is being read finishes in its thread, unused)."""
        self.items = []
        self.pending.clear()
        self.pool.shutdown(wait=False, cancel_futures=True)


def ingest_item(ctx: BatchContext, part: int, item: WorkItem) -> ItemOutcome:
    """Read ``item`` and write its rows as parts of the batch attempt, alone in its
    task (task ``part`` of ``len(ctx.items)``).

    Raises :class:`ItemFailed` when the item cannot be ingested; returns a skipped
    item's receipt (and its transport error) when ``errors.tolerance: all`` lets an
    unreadable object pass."""
    task = _Task(ctx, part, len(ctx.items))
    try:
        outcome = task.ingest(item)
    finally:
        failure = task.close()
    if failure is not None:
        raise ItemFailed(failure)
    return outcome


def _failure(
    ctx: BatchContext, item: WorkItem, stage: Stage, e: BaseException, text: str
) -> ItemFailed:
    """The failure of ``item`` in one line: the connector, ``text`` (the object and the
    cause), and what to do under the connector's ``errors.tolerance``."""
    ref, batch = ctx.ref, ctx.batch_id
    if stage == "object" and ctx.connector.errors.tolerance == "all":
        message = f"connector {ref}: skipped an unreadable object (errors.tolerance: all): {text}"
    elif stage == "object":
        message = (
            f"connector {ref}: {text}; batch {batch} was not committed. Fix or remove the "
            "object, or set errors.tolerance: all to skip unreadable objects; then stop and "
            "resume the connector so the batch is planned again"
        )
    elif stage == "source":
        message = (
            f"connector {ref}: {text}; batch {batch} was not committed; the next run retries it"
        )
    else:  # sink, parse
        message = f"connector {ref}: {text}; batch {batch} was not committed"
    return ItemFailed(ItemFailure(stage, item.key, message, "".join(traceback.format_exception(e))))


def _names(text: str, key: str) -> bool:
    from airflow_connectors.spec.redact import mask_url

    return key in text or mask_url(key) in text


def _sink_failure(ctx: BatchContext, item: WorkItem, e: BaseException) -> ItemFailed:
    """Classify an error raised while writing the table (``item`` was being written)."""
    if isinstance(e, ItemFailed):
        return e
    text = (
        str(e)
        if isinstance(e, SinkUnwritable)
        else f"cannot write table {ctx.table.name}: {type(e).__name__}: {cause(e)}"
    )
    return _failure(ctx, item, "sink", e, text)


def _ingest_item(task: _Task, item: WorkItem, out: _ItemParts, index: int = 0) -> ItemOutcome:
    fmt = task.format()
    if fmt is not None:
        fmt.evolution.take()  # what an earlier (skipped) item met is not this item's
    ingest = _ItemIngest(task.ctx, item, task.transport(), out, index, task.reader(item))
    rows = ingest.writer("rows")
    # A transport that decodes with the format itself (adding columns of its own) yields
    # decoded blocks, as an integrated transport does.
    if fmt is None or task.transport().use_format(fmt):
        nbytes = ingest.convert(rows, task.schema)
        # Records that became dead letters were read too: a resumed item starts after them.
        offset = item.end if item.end is not None else item.start + ingest.good + ingest.bad
    else:
        nbytes = ingest.decode(rows, fmt)
        # A transport whose offsets count records (message sequences) commits the range.
        if task.transport().record_offsets and item.end is not None:
            offset = item.end
        else:
            offset = item.start + nbytes
    try:
        out.commit()
    except Exception as e:
        raise ingest.sink_failed(e) from e
    receipt = _receipt(item, offset, ingest.good, ingest.bad, nbytes, ingest.counted.retried.count)
    if receipt.meta is not None:
        receipt.meta.pop(LINES_BEFORE, None)  # the item's, not the new offset's
    if ingest.lines_at_offset is not None:
        receipt = dataclasses.replace(
            receipt, meta={**(receipt.meta or {}), LINES_BEFORE: ingest.lines_at_offset}
        )
    return ItemOutcome(
        receipt,
        ingest.reported,
        _new_fields(fmt),
    )


def _new_fields(fmt: Format | None) -> dict[str, list[str]]:
    """The new fields ``fmt`` met in the item (``add_new_columns``), for the driver."""
    if fmt is None or fmt.evolution.mode != "add_new_columns":
        return {}
    from airflow_connectors.engine.evolution import item_fields

    return item_fields(fmt.evolution.take())


class _ItemIngest:
    """One work item being ingested: where its output goes, its counts of rows and bad
    records, the errors to report, and the classification of its failures."""

    def __init__(
        self,
        ctx: BatchContext,
        item: WorkItem,
        transport: Transport,
        out: _ItemParts,
        index: int = 0,
        read: Callable[[], Iterable[Any]] | None = None,
    ) -> None:
        self.ctx = ctx
        self.item = item
        #: The item's place in the batch plan: the high half of a change's ``__order``;
        #: the rows written so far are the low half.
        self.index = index
        self.ordinal = 0
        self.out = out
        self.counted = _Counter(read or (lambda: transport.read(item)))
        self.sink = out.task.sink
        self.dead: _ItemWriter | None = None
        self.good = 0
        self.bad = 0
        #: Lines of the object before the offset this item ends at (line formats, when
        #: the item's own first line is known): kept with the offset (``meta``) so a
        #: later read from there numbers its lines.
        self.lines_at_offset: int | None = None
        self.reported: list[ErrorRecord] = []

    def writer(self, kind: Kind) -> _ItemWriter:
        """Where the item's rows (or dead letters) go; sink errors are its failures."""
        return _ItemWriter(self.out, kind, self.sink_failed)

    def convert(self, rows: _ItemWriter, schema: pa.Schema) -> int:
        """Writes the integrated transport's record batches (or :class:`Decoded` blocks:
        rows and the records the transport could not read, numbered ``start + 1``...);
        returns their size in bytes."""
        import pyarrow as pa

        nbytes = 0
        first = self.item.start + 1
        try:
            for chunk in self.counted:
                if isinstance(chunk, Decoded):
                    data, errors, count = chunk.table, chunk.errors, chunk.records
                else:
                    assert isinstance(chunk, pa.RecordBatch)
                    data, errors, count = pa.Table.from_batches([chunk]), [], chunk.num_rows
                table, misfits = self._conformed(data, schema, first, count, errors)
                errors = [*errors, *misfits]
                self.reject(errors)
                self.write_rows(rows, table, first, count, errors)
                first += count
                nbytes += table.nbytes
        except Exception as e:
            raise self.read_failed(e, f"cannot convert the records of {self.item.key}") from e
        return nbytes

    def decode(self, rows: _ItemWriter, fmt: Format) -> int:
        """Writes the records ``fmt`` decodes from the transport's bytes and handles the
        bad ones; returns how many bytes were consumed."""
        item = self.item
        consumed = 0
        first = item.records_done + 1
        before = lines_before(item)
        lines = _LineCounter(_bytes_only(self.counted)) if fmt.line_oriented else None
        reported: int | None = 0  # line ends the format counted itself (None: not all)
        try:
            for decoded in fmt.decode(
                iter(lines if lines is not None else _bytes_only(self.counted)),
                final=item.final,
                first_record=first,
                at_start=item.start == 0,
                first_line=before + 1 if before is not None else None,
            ):
                self.reject(decoded.errors)
                self.write_rows(rows, decoded.table, first, decoded.records, decoded.errors)
                first += decoded.records
                consumed = max(consumed, decoded.consumed)
                if reported is not None and decoded.newlines is not None:
                    reported += decoded.newlines
                    if lines is not None:
                        lines.counting = False  # the format counts: no need to count twice
                else:
                    reported = None
        except NewFields as e:
            raise self._new_fields(e) from e
        except Exception as e:
            raise self.read_failed(e, f"cannot decode {item.key} as {fmt.name}") from e
        if lines is not None and before is not None:
            upto = reported if reported is not None else lines.before(consumed)
            self.lines_at_offset = None if upto is None else before + upto
        return consumed

    def _new_fields(self, e: NewFields) -> ItemFailed:
        """The item has fields the table lacks under ``fail_on_new_columns``: the batch
        fails whatever ``errors.tolerance`` says (no record is bad)."""
        ctx, item = self.ctx, self.item
        names = ", ".join(e.fields)
        message = (
            f"connector {ctx.ref}: {item.key} has new field(s) {names} that table "
            f"{ctx.table.name} lacks (schema_evolution: fail_on_new_columns); batch "
            f"{ctx.batch_id} was not committed. Add the column(s) to the table, or set "
            "schema_evolution: add_new_columns (or rescue, or none to ignore them)"
        )
        return ItemFailed(ItemFailure("parse", item.key, message))

    def _conformed(
        self,
        data: pa.Table,
        schema: pa.Schema,
        first: int,
        count: int,
        errors: list[RecordError],
    ) -> tuple[pa.Table, list[RecordError]]:
        """``data`` in the table's columns, at Arrow speed, whole columns at a time. When
        a value does not fit its column (NaN into DECIMAL, 3,000,000,000 into INT, a
        missing NOT NULL value), only the rows that fail are bad records, found by
        bisection (each its dead letter under ``errors.tolerance: all``, numbered as the
        transport counts them: ``first`` ... of this block); the others land. A whole
        object used to be skipped for one such value. Under ``errors.tolerance: none``
        the item fails with the value and its row."""
        import json

        import pyarrow as pa

        from airflow_connectors.formats.base import clip, isolate

        try:
            return conform(data, self.ctx.table, schema), []
        except NewFields:
            raise
        except Exception:
            if self.ctx.connector.errors.tolerance != "all":
                raise  # the item fails with the value and its row (formats/_conform.py)

            def convert(rs: Sequence[int]) -> pa.Table:
                return conform(data.slice(rs[0], len(rs)), self.ctx.table, schema)

            def text(i: int) -> str:
                return clip(json.dumps(data.slice(i, 1).to_pylist()[0], default=str))

            numbers = _row_numbers(first, count, errors, data.num_rows)
            tables, bad = isolate(range(data.num_rows), convert, 0, text)
            misfits = [dataclasses.replace(e, record=numbers[e.record]) for e in bad]
            table = pa.concat_tables(tables) if tables else schema.empty_table()
            return table, misfits

    def write_rows(
        self,
        rows: _ItemWriter,
        table: pa.Table,
        first: int,
        count: int,
        errors: list[RecordError],
    ) -> None:
        """Writes ``table``, the good rows of records ``first`` .. ``first + count - 1``
        (``errors`` are the others), but for the rows the sink cannot store
        (:meth:`~airflow_connectors.sinks.base.Sink.unstorable`): each is a bad record,
        found before anything is written (a dead letter, or the item fails naming it)."""
        import json

        import pyarrow as pa

        unstorable = self.sink.unstorable(table) if table.num_rows else []
        if unstorable:
            numbers = _row_numbers(first, count, errors, table.num_rows)
            refused = [
                RecordError(
                    numbers[i],
                    why,
                    json.dumps(table.slice(i, 1).to_pylist()[0], default=str),
                )
                for i, why in unstorable
            ]
            self.reject(refused)  # errors.tolerance: none raises here
            parts, start = [], 0
            for i, _ in unstorable:  # zero-copy slices between the refused rows
                parts.append(table.slice(start, i - start))
                start = i + 1
            parts.append(table.slice(start))
            table = pa.concat_tables(parts)
        if self.ctx.table.keyed and table.num_rows:
            table = self._ordered(table)
        rows.write(table)
        self.good += table.num_rows

    def _ordered(self, table: pa.Table) -> pa.Table:
        """``table`` (changes into a keyed table) with ``__order``: the item's place in
        the plan, then the row's place among the item's rows, so the sink applies a
        key's changes in the order the source holds them."""
        import pyarrow as pa

        from airflow_connectors.changes import ORDER

        start = (self.index << 32) | self.ordinal
        self.ordinal += table.num_rows
        order = pa.array(range(start, start + table.num_rows), pa.int64())
        return table.append_column(pa.field(ORDER, pa.int64(), nullable=False), order)

    def reject(self, errors: list[RecordError]) -> None:
        """Bad records: the item fails under ``errors.tolerance: none``; under ``all``
        they go to the dead-letter table and the first ones are reported."""
        if not errors:
            return
        if self.ctx.connector.errors.tolerance != "all":
            raise self._refused(errors[0])
        self.bad += len(errors)
        self._write_dead_letters(errors)
        for e in errors:
            if len(self.reported) < MAX_REPORTED_ERRORS:
                self.reported.append(
                    ErrorRecord(
                        "parse",
                        f"record {e.record}{_at_line(e)} of {self.item.key}: {e.error}",
                        self.item.key,
                        e.record,
                    )
                )

    def _refused(self, e: RecordError) -> ItemFailed:
        ctx, item = self.ctx, self.item
        message = (
            f"connector {ctx.ref}: record {e.record}{_at_line(e)} of {item.key}: {e.error}; "
            f"raw text: {e.raw[:300]!r}. The batch was not committed. Fix the source, or set "
            f"errors.tolerance: all to send bad records to {ctx.table.name}__errors"
        )
        return ItemFailed(ItemFailure("parse", item.key, message))

    def _write_dead_letters(self, errors: list[RecordError]) -> None:
        import pyarrow as pa

        from airflow_connectors.sinks.base import errors_schema

        ctx, item = self.ctx, self.item
        if self.dead is None:
            self.dead = self.writer("errors")
        self.dead.write(
            pa.table(
                {
                    "connector": [ctx.connector.name] * len(errors),
                    "source_key": [item.key] * len(errors),
                    "record_number": [e.record for e in errors],
                    "line_number": [e.line for e in errors],
                    "raw_text": [e.raw for e in errors],
                    "error": [e.error for e in errors],
                    "batch_id": [ctx.batch_id] * len(errors),
                },
                schema=errors_schema(),
            )
        )

    def sink_failed(self, e: BaseException) -> ItemFailed:
        """Classify an error raised while writing the table."""
        return _sink_failure(self.ctx, self.item, e)

    def read_failed(self, e: Exception, what: str) -> ItemFailed:
        """Classify an error raised while reading and decoding the item."""
        if isinstance(e, ItemFailed):
            return e
        ctx, item = self.ctx, self.item
        err = self.counted.error
        if err is not None:  # raised by the transport
            text = (
                cause(err)
                if _names(cause(err), item.key)
                else f"cannot read {item.key}: {cause(err)}"
            )
            # A vanished or corrupt (compressed) object is unreadable (skippable);
            # anything else is a source that cannot be reached now, retried by the next run.
            unreadable = isinstance(err, FileNotFoundError | CompressionError)
            return _failure(ctx, item, "object" if unreadable else "source", err, text)
        return _failure(ctx, item, "object", e, f"{what}: {cause(e)}")


@functools.cache
def executor_identity() -> dict[str, str]:
    """Which Spark executor this Python worker serves, for the item receipts
    (:attr:`ItemReceipt.executor`): ``host`` (this machine's hostname), ``id`` and
    ``dir`` (the worker's working directory).

    Spark gives a Python worker no executor id, but runs it in its executor's working
    directory: on a standalone cluster ``<worker work dir>/<app id>/<executor id>``, so
    ``id`` is that folder's name when its parent is an ``app-...`` folder. Elsewhere
    ``SPARK_EXECUTOR_ID`` when the cluster manager sets it (Kubernetes), else
    ``"driver"``: on ``local[*]`` the executor is the driver."""
    cwd = os.getcwd()
    if os.path.basename(os.path.dirname(cwd)).startswith("app-"):
        executor = os.path.basename(cwd)
    else:
        executor = os.environ.get("SPARK_EXECUTOR_ID") or "driver"
    return {"host": socket.gethostname(), "id": executor, "dir": cwd}


def _receipt(
    item: WorkItem, offset: int, good: int, bad: int, nbytes: int, retries: int = 0
) -> ItemReceipt:
    return ItemReceipt(
        key=item.key,
        offset=offset,
        records=good,
        bad=bad,
        bytes=nbytes,
        completed=item.final,
        records_done=item.records_done,
        retries=retries,
        # What the item was planned with (e.g. an HTTP body's ETag and length) stays with
        # the offset, so the next discovery can tell a changed source from more of it.
        meta={
            **item.meta,
            **({"seen": item.end} if item.end is not None and offset < item.end else {}),
        }
        or None,
        executor=executor_identity(),
    )


def _row_numbers(first: int, count: int, errors: list[RecordError], rows: int) -> list[int]:
    """The record numbers of a block's ``rows`` good rows: ``first`` .. ``first + count
    - 1`` but the bad ones, when the block says so consistently; else counted from
    ``first`` (a format that drops records that are no rows, such as deletes)."""
    bad = {e.record for e in errors}
    numbers = [n for n in range(first, first + count) if n not in bad]
    return numbers if len(numbers) == rows else list(range(first, first + rows))


def _at_line(e: RecordError) -> str:
    """`` (line N)`` where the format knows the record's first line."""
    return f" (line {e.line})" if e.line is not None else ""


def lines_before(item: WorkItem) -> int | None:
    """Lines of the object before ``item.start``: 0 at its start, else what the offset
    it resumes from recorded (None: not known, e.g. a range planned before the range
    ahead of it committed; its dead letters then have no line, only a record number)."""
    if item.start == 0:
        return 0
    value = item.meta.get(LINES_BEFORE)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _LineCounter:
    """Passes bytes through so the lines before any position read so far can be told
    (:meth:`before`); keeps the last few chunks for that. Chunks are counted only when
    asked, or when they leave the tail while :attr:`counting` (the formats that count
    their own line ends turn it off: a chunk's bytes were counted twice, a twentieth of a
    JSON block's CPU)."""

    KEEP = 64 << 20

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.read = 0
        self.newlines = 0  # in the chunks counted: all but the tail's last `fresh` ones
        self.tail: deque[bytes] = deque()  # the last chunks read, up to KEEP bytes
        self.tail_bytes = 0
        self.fresh = 0
        self.counting = True
        self.lost = False  # a chunk left uncounted: lines before a position are unknown

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.read += len(chunk)
            self.tail.append(chunk)
            self.tail_bytes += len(chunk)
            self.fresh += 1
            while self.tail_bytes - len(self.tail[0]) >= self.KEEP:
                old = self.tail.popleft()
                self.tail_bytes -= len(old)
                if self.fresh > len(self.tail):  # it was not counted yet
                    self.fresh -= 1
                    if self.counting:
                        self.newlines += count_newlines(old)
                    else:
                        self.lost = True
            yield chunk

    def before(self, position: int) -> int | None:
        """Newlines before byte ``position`` of what was read (None: too far back)."""
        unread_after = self.read - position
        if self.lost or unread_after < 0 or unread_after > self.tail_bytes:
            return None
        for chunk in list(self.tail)[len(self.tail) - self.fresh :]:
            self.newlines += count_newlines(chunk)
        self.fresh = 0
        after = b"".join(self.tail)[self.tail_bytes - unread_after :] if unread_after else b""
        return self.newlines - count_newlines(after)


def _bytes_only(chunks: Iterable[object]) -> Iterator[bytes]:
    for chunk in chunks:
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise TypeError(
                f"a transport that needs a format must yield bytes, got {type(chunk).__name__}"
            )
        yield bytes(chunk)


def ingest_partition(plan: str, tasks: int, task: int, groups: Iterator[str]) -> Iterator[str]:
    """Spark task body (see :func:`ingest_arrow`): task ``task`` of ``tasks``
    ingests its group of work items (each element of ``groups``: a JSON list of ``[index
    in the plan, work item]``) of the batch ``plan`` describes (:meth:`BatchPlan.to_json`;
    its own items are not read) and returns, per item, its
    :class:`~airflow_connectors.engine.answer.TaskAnswer` (its receipt or its
    :class:`ItemFailure`) as one JSON string. Never raises for bad input: the driver
    turns a failure into one line. Module-level so Spark's Python workers import it by
    reference."""
    import json

    data = json.loads(plan)
    entries: list[tuple[int, dict[str, Any]]] = [
        (int(index), raw) for group in groups for index, raw in json.loads(group)
    ]
    try:
        ctx = BatchContext.from_plan(BatchPlan.from_json({**data, "items": []}))
        runner = _Task(ctx, task, tasks)
        runner.read_ahead([WorkItem.from_json(raw) for _, raw in entries])
    except Exception as e:  # a bug, not bad input: still one line, the trace for DEBUG
        for index, raw in entries:
            yield _internal(index, raw["key"], f"batch {data['batch_id']}", e).to_json()
        return
    results: list[TaskAnswer] = []
    for index, raw in entries:
        where = f"connector {ctx.ref}: batch {ctx.batch_id} failed on {raw['key']}"
        try:
            outcome = runner.ingest(WorkItem.from_json(raw), index)
        except ItemFailed as e:
            results.append(TaskAnswer(index, failure=e.failure))
        except Exception as e:
            results.append(_internal(index, raw["key"], where, e))
        else:
            new_fields = {k: tuple(v) for k, v in outcome.new_fields.items()}
            results.append(TaskAnswer(index, outcome.receipt, tuple(outcome.errors), new_fields))
    failure = runner.close()
    if failure is not None:  # the task's parts could not be written
        results.append(TaskAnswer(entries[-1][0], failure=failure))
    yield from (r.to_json() for r in results)


def ingest_arrow(
    plan: str,
    groups: Sequence[str],
    env: Mapping[str, str | None],
    batches: Iterable[Any],
) -> Iterator[Any]:
    """Spark task body of a batch's DataFrame job (``session.range(0, n, 1, n)
    .mapInArrow``, bound to the batch with :func:`functools.partial`): each row of
    ``batches`` (pyarrow record batches of ``id``) is the index of a task group, whose
    items ``groups[index]`` are ingested by :func:`ingest_partition`; yields one record
    batch of ``answer`` strings per group. ``env`` is set in this Python worker's
    environment while the task runs (None: unset), and restored after it: a worker is
    reused by later tasks, of other batches and connectors too."""
    import pyarrow as pa

    schema = pa.schema([("answer", pa.string())])
    with _environment(env):
        for batch in batches:
            for index in batch.column(0).to_pylist():
                answers = list(ingest_partition(plan, len(groups), index, iter([groups[index]])))
                yield pa.RecordBatch.from_pydict({"answer": answers}, schema=schema)


@contextlib.contextmanager
def _environment(env: Mapping[str, str | None]) -> Iterator[None]:
    """``env`` in ``os.environ`` (None: unset) until the block ends; then each variable
    as it was before."""
    before = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _internal(index: int, key: str, where: str, e: BaseException) -> TaskAnswer:
    """An internal failure (a bug, not bad input) of item ``index`` as the task's
    answer: one line, the trace for DEBUG logs."""
    failure = ItemFailure(
        "internal",
        key,
        f"{where}: {type(e).__name__}: {cause(e)} (an internal error; the full trace is "
        "logged at DEBUG level)",
        "".join(traceback.format_exception(e)),
    )
    return TaskAnswer(index, failure=failure)
