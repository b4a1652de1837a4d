"""Run one planned batch in Spark, exactly once.

1. The plan was persisted by discovery before any data moved.
2. A committed batch is a no-op (its publish is rolled forward if a crash interrupted it).
3. Executors write the batch's parts to a staging folder of this attempt.
4. Offsets, metrics and the batch state commit in one state-store transaction.
5. The committed attempt is published into the table.
A crash anywhere before 4 leaves the batch planned and the next run re-executes it.
"""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_connectors.engine import failpoints
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.engine.reader import ingest_partition
from airflow_connectors.spec.redact import mask_text, secret_values
from airflow_connectors.state.store import ErrorRecord, ItemReceipt, StateStore

log = logging.getLogger(__name__)


class BatchFailed(RuntimeError):
    """A batch could not be ingested; the message names connector, object and record."""


@dataclass
class BatchResult:
    batch_id: int
    endpoint: str
    committed: bool  # False: the batch was already committed (no-op)
    records: int = 0
    parse_errors: int = 0
    bytes: int = 0
    seconds: float = 0.0


def publish_committed(store: StateStore, ctx: BatchContext, batch_id: int, attempt: str) -> None:
    ctx.sink().publish(batch_id, attempt)
    store.mark_published(batch_id)


def run_batch(store: StateStore, batch_id: int, spark: Callable[[], Any]) -> BatchResult:
    """Ingest batch ``batch_id``; ``spark`` returns the session (started lazily)."""
    t0 = time.monotonic()
    batch = store.load_batch(batch_id)
    ctx = BatchContext.from_plan(batch.plan, batch_id)
    if batch.status == "committed":
        if not batch.published and batch.attempt:
            publish_committed(store, ctx, batch_id, batch.attempt)
        log.info("%s batch %d is already committed; nothing to do", ctx.ref, batch_id)
        return BatchResult(batch_id, ctx.ref.endpoint_name, committed=False)

    ctx.attempt = f"{store.start_attempt(batch_id)}-{uuid.uuid4().hex[:8]}"
    sink = ctx.sink()
    sink.prepare(batch_id, ctx.attempt)
    failpoints.reach("before_sink_write")
    session = spark()
    plan = json.dumps({"plan": batch.plan, "batch_id": batch_id, "attempt": ctx.attempt})
    failpoints.reach("sink_write_started")
    try:
        # One Spark task per work item; each writes its sink part and returns a receipt.
        # A plain RDD job: Spark's pooled Python workers start once per session, where
        # reading through the data source would start planner processes per batch.
        items = len(batch.plan["items"])
        rows = (
            session.sparkContext.parallelize(range(items), items)
            .mapPartitionsWithIndex(functools.partial(ingest_partition, plan))
            .collect()
            if items
            else []
        )
    except Exception as exc:
        message, kind = _failure(exc, ctx, batch_id)
        recorded = store.record_failure(ctx.ref, message, batch_id=batch_id, kind=kind)
        sink.discard(batch_id, ctx.attempt)
        if not recorded:
            # A concurrent run of the connector committed this batch (its publish removes
            # the batch's other staging folders), or a stop released it: not a failure.
            log.warning(
                "%s batch %d: this attempt stopped (%s) but another run committed or a stop "
                "released the batch meanwhile; nothing to do",
                ctx.ref,
                batch_id,
                message,
            )
            return BatchResult(batch_id, ctx.ref.endpoint_name, committed=False)
        raise BatchFailed(message) from exc
    failpoints.reach("after_sink_write")
    receipts: list[ItemReceipt] = []
    errors: list[ErrorRecord] = []
    for data in sorted((json.loads(r) for r in rows), key=lambda d: d["part"]):
        receipts.append(ItemReceipt(**data["receipt"]))
        errors.extend(ErrorRecord(**e) for e in data["errors"])
    if not store.commit_batch(batch_id, ctx.attempt, receipts, errors):
        sink.discard(batch_id, ctx.attempt)  # another attempt won the commit
        return BatchResult(batch_id, ctx.ref.endpoint_name, committed=False)
    failpoints.reach("after_commit")
    publish_committed(store, ctx, batch_id, ctx.attempt)
    result = BatchResult(
        batch_id,
        ctx.ref.endpoint_name,
        committed=True,
        records=sum(r.records for r in receipts),
        parse_errors=sum(r.bad for r in receipts),
        bytes=sum(r.bytes for r in receipts),
        seconds=time.monotonic() - t0,
    )
    log.info(
        "%s batch %d committed: %d records, %d parse errors, %d bytes, %d items in %.1f s",
        ctx.ref,
        batch_id,
        result.records,
        result.parse_errors,
        result.bytes,
        len(receipts),
        result.seconds,
    )
    return result


def _failure(exc: Exception, ctx: BatchContext, batch_id: int) -> tuple[str, str]:
    """The user-facing message inside a Spark/Python worker traceback, with the
    connector's secrets masked (it is stored, shown by the REST API and logged)."""
    message, kind = _failure_line(str(exc), ctx, batch_id)
    return mask_text(message, secret_values(ctx.connector.model_dump(mode="json"))), kind


def _failure_line(text: str, ctx: BatchContext, batch_id: int) -> tuple[str, str]:
    for marker, kind in (
        ("RecordRejected: ", "parse"),
        ("FileNotFoundError: ", "transport"),
        ("OSError: ", "transport"),
        ("ValueError: ", "transport"),
    ):
        if marker in text:
            line = text.split(marker, 1)[1].splitlines()[0]
            return line, kind
    first = text.strip().splitlines()[0] if text.strip() else "unknown error"
    return f"connector {ctx.ref}: batch {batch_id} failed: {first}", "transport"
