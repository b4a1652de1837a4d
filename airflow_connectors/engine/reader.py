"""Read one work item inside a Spark executor: transport -> format -> table schema ->
sink part, with bad records counted, reported and (``errors.tolerance: all``) written to
the dead-letter table. Pure Python + pyarrow; :func:`ingest_partition` is the Spark task
body the engine runs, :mod:`.datasource` wraps the same code as Spark data sources."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from airflow_connectors.engine.context import BatchContext
from airflow_connectors.formats.base import RecordError, conform, target_schema
from airflow_connectors.state.store import ErrorRecord, ItemReceipt
from airflow_connectors.transports import WorkItem

log = logging.getLogger(__name__)
MAX_REPORTED_ERRORS = 100


class RecordRejected(ValueError):
    """A bad record with ``errors.tolerance: none``: the batch fails, nothing commits."""


@dataclass
class ItemOutcome:
    receipt: ItemReceipt
    errors: list[ErrorRecord] = field(default_factory=list)


class _Counter:
    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.bytes = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.bytes += len(chunk)
            yield chunk


def ingest_item(ctx: BatchContext, part: int, item: WorkItem) -> ItemOutcome:
    """Read ``item`` and write its rows as part ``part`` of the batch attempt."""
    import pyarrow as pa

    transport = ctx.transport()
    fmt = ctx.format()
    sink = ctx.sink()
    schema = target_schema(ctx.table)
    rows = sink.writer(ctx.batch_id, ctx.attempt, part, "rows")
    dead = None
    good = bad = 0
    reported: list[ErrorRecord] = []
    tolerate = ctx.connector.errors.tolerance == "all"

    def reject(errors: list[RecordError]) -> None:
        nonlocal bad, dead
        if not errors:
            return
        if not tolerate:
            e = errors[0]
            raise RecordRejected(
                f"connector {ctx.ref}: record {e.record} of {item.key}: {e.error}; "
                f"raw text: {e.raw[:300]!r}. The batch was not committed. Fix the source, or set "
                f"errors.tolerance: all to send bad records to {ctx.table.name}__errors"
            )
        from airflow_connectors.sinks.parquet import errors_schema

        bad += len(errors)
        if dead is None:
            dead = sink.writer(ctx.batch_id, ctx.attempt, part, "errors")
        dead.write(
            pa.table(
                {
                    "connector": [ctx.connector.name] * len(errors),
                    "source_key": [item.key] * len(errors),
                    "record_number": [e.record for e in errors],
                    "raw_text": [e.raw for e in errors],
                    "error": [e.error for e in errors],
                    "batch_id": [ctx.batch_id] * len(errors),
                },
                schema=errors_schema(),
            )
        )
        for e in errors:
            if len(reported) < MAX_REPORTED_ERRORS:
                reported.append(
                    ErrorRecord(
                        "parse", f"record {e.record} of {item.key}: {e.error}", item.key, e.record
                    )
                )

    if fmt is None:  # integrated transport: record batches in the table schema
        nbytes = 0
        for rb in transport.read(item):
            assert isinstance(rb, pa.RecordBatch)
            table = conform(pa.Table.from_batches([rb]), ctx.table, schema)
            rows.write(table)
            good += table.num_rows
            nbytes += table.nbytes
        offset = item.end if item.end is not None else item.start + good
        completed = item.final
    else:
        counted = _Counter(iter(_bytes_only(transport.read(item))))
        consumed = 0
        for decoded in fmt.decode(
            iter(counted),
            final=item.final,
            first_record=item.records_done + 1,
            at_start=item.start == 0,
        ):
            rows.write(decoded.table)
            good += decoded.table.num_rows
            reject(decoded.errors)
            consumed = max(consumed, decoded.consumed)
        nbytes = consumed
        offset = item.start + consumed
        completed = item.final
    written = rows.close()
    if dead is not None:
        dead.close()
    assert written == good, f"wrote {written} rows, decoded {good}"
    receipt = ItemReceipt(
        key=item.key,
        offset=offset,
        records=good,
        bad=bad,
        bytes=nbytes,
        completed=completed,
        records_done=item.records_done,
        meta={"seen": item.end} if item.end is not None and offset < item.end else None,
    )
    return ItemOutcome(receipt, reported)


def _bytes_only(chunks: Iterator[object]) -> Iterator[bytes]:
    for chunk in chunks:
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise TypeError(
                f"a transport that needs a format must yield bytes, got {type(chunk).__name__}"
            )
        yield bytes(chunk)


def ingest_partition(plan: str, part: int, _rows: Iterator[object]) -> Iterator[str]:
    """Spark task body (``rdd.mapPartitionsWithIndex``): ingest work item ``part`` of the
    batch described by ``plan`` (JSON: plan, batch_id, attempt) and return its receipt as
    one JSON string. Module-level so Spark's Python workers import it by reference."""
    import json

    data = json.loads(plan)
    ctx = BatchContext.from_plan(data["plan"], data["batch_id"], data["attempt"])
    outcome = ingest_item(ctx, part, ctx.items[part])
    yield json.dumps(
        {
            "part": part,
            "receipt": outcome.receipt.to_json(),
            "errors": [e.__dict__ for e in outcome.errors],
        }
    )
