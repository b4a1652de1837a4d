"""Read one work item inside a Spark executor: transport -> format -> table schema ->
sink part, with bad records counted, reported and (``errors.tolerance: all``) written to
the dead-letter table. Pure Python + pyarrow; :func:`ingest_partition` is the Spark task
body the engine runs, :mod:`.datasource` wraps the same code as Spark data sources.

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

import logging
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from airflow_connectors.engine.context import BatchContext
from airflow_connectors.formats.base import RecordError, conform
from airflow_connectors.sinks.base import PartWriter, SinkUnwritable
from airflow_connectors.state.store import BatchPlan, ErrorRecord, ItemReceipt
from airflow_connectors.transports import WorkItem
from airflow_connectors.transports.compression import CompressionError
from airflow_connectors.transports.retry import RetryStats, counting

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.formats import Format
    from airflow_connectors.sinks import Sink
    from airflow_connectors.transports import Transport

log = logging.getLogger(__name__)
MAX_REPORTED_ERRORS = 100

Stage = Literal["object", "source", "sink", "parse", "internal"]


class RecordRejected(ValueError):
    """A bad record with ``errors.tolerance: none``: the batch fails, nothing commits."""


@dataclass(frozen=True)
class ItemFailure:
    """Why a work item could not be ingested: plain strings, so it crosses from the
    Spark worker to the driver as JSON (no pickled exception, no Py4J trace)."""

    stage: Stage
    key: str
    #: One line for users: connector, object, cause and what to do.
    message: str
    #: The worker's Python trace, for DEBUG logs only.
    trace: str = ""

    def to_json(self) -> dict[str, Any]:
        """The failure as a dict; a Spark task sends it to the driver this way."""
        return asdict(self)


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


class _SinkPart(PartWriter):
    """A part writer whose failures are sink failures, whatever the sink raises."""

    def __init__(self, inner: PartWriter, fail: Any) -> None:
        self.inner = inner
        self.fail = fail

    def write(self, table: Any) -> None:
        try:
            self.inner.write(table)
        except Exception as e:
            raise self.fail(e) from e

    def close(self) -> int:
        try:
            return self.inner.close()
        except Exception as e:
            raise self.fail(e) from e

    def abort(self) -> None:
        self.inner.abort()


def cause(e: BaseException) -> str:
    """The first line of an exception's message (its type when it has none)."""
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return lines[0].strip().rstrip(".") if lines else type(e).__name__


def ingest_item(ctx: BatchContext, part: int, item: WorkItem) -> ItemOutcome:
    """Read ``item`` and write its rows as part ``part`` of the batch attempt.

    Raises :class:`ItemFailed` when the item cannot be ingested; returns a skipped
    item's receipt (and its transport error) when ``errors.tolerance: all`` lets an
    unreadable object pass."""
    tolerate = ctx.connector.errors.tolerance == "all"
    writers: list[PartWriter] = []
    try:
        return _ingest_item(ctx, part, item, writers)
    except ItemFailed as failed:
        f = failed.failure
        if f.stage != "object" or not tolerate:
            raise
    for w in writers:  # nothing of a skipped object lands
        w.abort()
    return ItemOutcome(
        ItemReceipt(
            key=item.key,
            offset=item.end if item.end is not None else item.start,
            records=0,
            bad=0,
            bytes=0,
            completed=True,
            records_done=item.records_done,
        ),
        [ErrorRecord("transport", f.message, item.key)],
    )


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


def _ingest_item(
    ctx: BatchContext, part: int, item: WorkItem, writers: list[PartWriter]
) -> ItemOutcome:
    transport = ctx.transport()
    fmt = ctx.format()
    ingest = _ItemIngest(ctx, part, item, transport, ctx.sink(), writers)
    schema = ctx.table.arrow_schema()
    rows = ingest.writer("rows")
    if fmt is None:  # integrated transport: record batches in the table schema
        nbytes = ingest.convert(rows, schema)
        offset = item.end if item.end is not None else item.start + ingest.good
    else:
        nbytes = ingest.decode(rows, fmt)
        offset = item.start + nbytes
    written = rows.close()
    if ingest.dead is not None:
        ingest.dead.close()
    assert written == ingest.good, f"wrote {written} rows, decoded {ingest.good}"
    return ItemOutcome(
        _receipt(item, offset, ingest.good, ingest.bad, nbytes, ingest.counted.retried.count),
        ingest.reported,
    )


class _ItemIngest:
    """One work item being ingested: its part writers, its counts of rows and bad
    records, the errors to report, and the classification of its failures."""

    def __init__(
        self,
        ctx: BatchContext,
        part: int,
        item: WorkItem,
        transport: Transport,
        sink: Sink,
        writers: list[PartWriter],
    ) -> None:
        self.ctx = ctx
        self.part = part
        self.item = item
        self.sink = sink
        self.writers = writers
        self.counted = _Counter(lambda: transport.read(item))
        self.dead: PartWriter | None = None
        self.good = 0
        self.bad = 0
        self.reported: list[ErrorRecord] = []

    def writer(self, kind: Literal["rows", "errors"]) -> PartWriter:
        """A part writer of the batch attempt, kept in ``writers`` to abort if needed."""
        ctx = self.ctx
        try:
            w = _SinkPart(
                self.sink.writer(ctx.batch_id, ctx.attempt, self.part, kind), self.sink_failed
            )
        except Exception as e:
            raise self.sink_failed(e) from e
        self.writers.append(w)
        return w

    def convert(self, rows: PartWriter, schema: pa.Schema) -> int:
        """Writes the integrated transport's record batches; returns their size in bytes."""
        import pyarrow as pa

        nbytes = 0
        try:
            for rb in self.counted:
                assert isinstance(rb, pa.RecordBatch)
                table = conform(pa.Table.from_batches([rb]), self.ctx.table, schema)
                rows.write(table)
                self.good += table.num_rows
                nbytes += table.nbytes
        except Exception as e:
            raise self.read_failed(e, f"cannot convert the records of {self.item.key}") from e
        return nbytes

    def decode(self, rows: PartWriter, fmt: Format) -> int:
        """Writes the records ``fmt`` decodes from the transport's bytes and handles the
        bad ones; returns how many bytes were consumed."""
        item = self.item
        consumed = 0
        try:
            for decoded in fmt.decode(
                iter(_bytes_only(self.counted)),
                final=item.final,
                first_record=item.records_done + 1,
                at_start=item.start == 0,
            ):
                rows.write(decoded.table)
                self.good += decoded.table.num_rows
                self.reject(decoded.errors)
                consumed = max(consumed, decoded.consumed)
        except Exception as e:
            raise self.read_failed(e, f"cannot decode {item.key} as {fmt.name}") from e
        return consumed

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

        from airflow_connectors.sinks.parquet import errors_schema

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
        if isinstance(e, ItemFailed):
            return e
        text = (
            str(e)
            if isinstance(e, SinkUnwritable)
            else f"cannot write table {self.ctx.table.name}: {type(e).__name__}: {cause(e)}"
        )
        return _failure(self.ctx, self.item, "sink", e, text)

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
    )


def _at_line(e: RecordError) -> str:
    """`` (line N)`` where the format knows the record's first line."""
    return f" (line {e.line})" if e.line is not None else ""


def _bytes_only(chunks: Iterable[object]) -> Iterator[bytes]:
    for chunk in chunks:
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise TypeError(
                f"a transport that needs a format must yield bytes, got {type(chunk).__name__}"
            )
        yield bytes(chunk)


def ingest_partition(plan: str, part: int, _rows: Iterator[object]) -> Iterator[str]:
    """Spark task body (``rdd.mapPartitionsWithIndex``): ingest work item ``part`` of the
    batch described by ``plan`` (:meth:`BatchPlan.to_json`) and return its receipt,
    or its :class:`ItemFailure`, as one JSON string. Never raises for bad input: the
    driver turns a failure into one line. Module-level so Spark's Python workers import
    it by reference."""
    import json

    data = json.loads(plan)
    where = f"batch {data['batch_id']}"
    try:
        ctx = BatchContext.from_plan(BatchPlan.from_json(data))
        item = ctx.items[part]
        where = f"connector {ctx.ref}: batch {ctx.batch_id} failed on {item.key}"
        outcome = ingest_item(ctx, part, item)
    except ItemFailed as e:
        yield json.dumps({"part": part, "failure": e.failure.to_json()})
        return
    except Exception as e:  # a bug, not bad input: still one line, the trace for DEBUG
        failure = ItemFailure(
            "internal",
            data["items"][part]["key"],  # the plan as sent: it may not have parsed
            f"{where}: {type(e).__name__}: {cause(e)} (an internal error; the full trace is "
            "logged at DEBUG level)",
            "".join(traceback.format_exception(e)),
        )
        yield json.dumps({"part": part, "failure": failure.to_json()})
        return
    yield json.dumps(
        {
            "part": part,
            "receipt": outcome.receipt.to_json(),
            "errors": [e.__dict__ for e in outcome.errors],
        }
    )
