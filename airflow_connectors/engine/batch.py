"""Run one planned batch in Spark, exactly once.

1. The plan was persisted by discovery before any data moved.
2. A committed batch is a no-op (its publish is rolled forward if a crash interrupted it).
3. Executors write the batch's parts to a staging folder of this attempt: the work items
   are packed into Spark tasks by size (:func:`pack`), each task writing few parts.
4. Offsets, metrics and the batch state commit in one state-store transaction.
5. The committed attempt is published into the table.
A crash anywhere before 4 leaves the batch planned and the next run re-executes it.

A stop (``engine/control.py``) marks the connector stopped, then drops the staged output
of its planned batches and releases them. The state store decides between it and step
4: a commit is refused once the connector is stopped or the batch released (or its id
reused by a batch planned since), and the refused attempt drops its own staged output;
a batch that committed is no longer planned, so the stop neither drops nor releases it,
and step 5 publishes it.

Under ``schema_evolution: add_new_columns`` a batch whose tasks met fields the table
lacks is staged again with the widened table (:mod:`.evolution`), and step 4 stores the
widened columns as the table's next schema version in the same transaction; publish
then applies the schema change to the table with the batch's rows.

Step 3 is a DataFrame job, never an RDD or the SparkContext, so a classic session
(spark-submit, a local session, a standalone cluster) and a Spark Connect session
(:func:`is_connect`) run it alike: ``session.range(0, n, 1, n)`` has one row per task
group, each in a partition (a Spark task) of its own, and ``mapInArrow`` runs
:func:`~.reader.ingest_arrow` over it, bound (``functools.partial``) to the plan's
header, the groups' work items and the tasks' environment; the answers are collected
here and committed here. Classic pyspark broadcasts a task function over 1 MiB (20,000
small files plan about 4 MB of items); on Spark Connect the function is bytes of the
request's plan, which the server accepts up to its ``spark.connect.grpc.maxInboundMessageSize``
(128 MiB by default): a batch needing more fails in one line saying what to change.

Credentials on the executors. Storage variables (``AWS_*``, ``AZURE_STORAGE_*``,
``GOOGLE_*``: the warehouse's) reach a classic session's Python workers through
``SparkContext.environment`` (:func:`~.spark.share_aws_environment`). The
``AIRFLOW_CONN_<ID>`` of each connection the connector's transport and the table's sink
name (the ingest operator exports them into its process) used to reach executors only by
inheritance: on ``local[*]`` the workers are children of this process, on a standalone
cluster they never saw them. Now the task function carries them, on a Spark Connect
session with the storage variables (its server's executors never see the client's
environment and it has no SparkContext): :func:`~.reader.ingest_arrow` sets them in the
Python worker's ``os.environ`` for the task's duration and restores the worker's own
after it, since a worker is reused by later tasks of other batches and connectors of a
shared server. Secrets travel only as bytes of the pickled function (gRPC to a Spark
Connect server, whose logs and UI abbreviate a plan's bytes fields; Spark's broadcast or
task closure on a classic session, as the plan header always did): never as a string in
a plan, a Spark setting, a data source option or a log line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_connectors import failpoints
from airflow_connectors.engine.answer import ItemFailure, TaskAnswer
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.engine.evolution import (
    BatchSchema,
    EvolutionFailed,
    batch_table,
    new_fields,
    store_version,
    widen,
)
from airflow_connectors.engine.reader import ingest_arrow
from airflow_connectors.engine.spark import (
    default_parallelism,
    is_connect,
    share_aws_environment,
    task_environment,
)
from airflow_connectors.sinks.base import Sink, SinkUnwritable
from airflow_connectors.spec.models import TableSpec
from airflow_connectors.spec.redact import mask_text, secret_values
from airflow_connectors.state.store import (
    BatchStatus,
    ErrorRecord,
    ItemReceipt,
    SchemaConflict,
    StateStore,
)
from airflow_connectors.transports import WorkItem

log = logging.getLogger(__name__)


class BatchFailed(RuntimeError):
    """A batch could not be ingested; the message is one line that names the connector,
    the object (and record) and what to do. The batch stays planned: the next run
    retries it."""


@dataclass
class BatchResult:
    """What :func:`run_batch` did to one batch: rows and bytes ingested, records that
    became dead letters, objects skipped, and whether this run committed it."""

    batch_id: int
    endpoint: str
    committed: bool  # False: the batch was already committed (no-op)
    records: int = 0
    parse_errors: int = 0
    bytes: int = 0
    seconds: float = 0.0
    #: Unreadable objects skipped under ``errors.tolerance: all`` (transport errors).
    skipped: int = 0


def publish_committed(store: StateStore, ctx: BatchContext, batch_id: int, attempt: str) -> None:
    """Make a committed attempt's sink output visible, then record it published. Safe
    to call again after a crash between the two: the sink's publish is idempotent.

    The sink gets the table as of its latest schema version: it holds the columns this
    batch added (stored with its commit) and those of batches committed since, so the
    table keeps every column whatever order batches publish in."""
    ctx.table = batch_table(store, ctx.pipeline, ctx.table).table
    sink = ctx.sink()
    sink.state_store_url = store.url
    sink.publish(batch_id, attempt)
    store.mark_published(batch_id)


def run_batch(store: StateStore, batch_id: int, spark: Callable[[], Any]) -> BatchResult:
    """Ingest batch ``batch_id``; ``spark`` returns the session (started lazily)."""
    t0 = time.monotonic()
    batch = store.load_batch(batch_id)
    ctx = BatchContext.from_plan(batch.plan)
    # The table as of its latest schema version (add_new_columns), with _rescued_data
    # (rescue): what the batch reads and writes, and what publish makes the table.
    base = batch_table(store, ctx.pipeline, ctx.table)
    ctx.table = base.table
    if batch.status == BatchStatus.COMMITTED:
        if not batch.published and batch.attempt:
            publish_committed(store, ctx, batch_id, batch.attempt)
        log.info("%s batch %d is already committed; nothing to do", ctx.ref, batch_id)
        store.restart_done(ctx.ref)  # a restarted task of a committed batch: done
        return BatchResult(batch_id, ctx.ref.endpoint_name, committed=False)
    for _ in range(MAX_SCHEMA_CONFLICTS):
        written = _write(store, ctx, batch.plan.items, spark)
        if isinstance(written, BatchResult):
            return written
        if not isinstance(written, _Written):  # new columns: the batch again, wider
            written.sink.discard(batch_id, ctx.attempt)
            ctx.table = written.table
            widened = _write(store, ctx, batch.plan.items, spark)
            if isinstance(widened, BatchResult):
                return widened
            if not isinstance(widened, _Written):
                message = (
                    f"connector {ctx.ref}: batch {batch_id} read new fields again after "
                    "its table was widened by them (the input changed while it was read); "
                    "the next run retries it"
                )
                return _fail(store, ctx, widened.sink, message, "transport")
            failpoints.reach("after_widened_write")
            written = widened
        combined = _combine(store, ctx, written)
        if combined is not None:
            return combined
        try:
            return _commit(store, ctx, base, written, t0, batch.created_at)
        except SchemaConflict:
            # A concurrent batch stored a schema version since this one read the latest:
            # read it again (its columns too) and redo the batch.
            written.sink.discard(batch_id, ctx.attempt)
            base = batch_table(store, ctx.pipeline, batch.plan.table)
            ctx.table = base.table
    message = (
        f"connector {ctx.ref}: batch {batch_id} met {MAX_SCHEMA_CONFLICTS} concurrent schema "
        "changes of its table; the next run retries it"
    )
    return _fail(store, ctx, ctx.sink(), message, "transport")


#: Times a batch is redone after another batch stored a schema version meanwhile.
MAX_SCHEMA_CONFLICTS = 3


@dataclass
class _Written:
    """A batch attempt whose parts are staged: its sink and the tasks' answers."""

    sink: Sink
    results: list[TaskAnswer]


@dataclass
class _Wider:
    """An attempt that met fields the table lacks (``add_new_columns``): the table
    widened by them, to run the batch again with."""

    sink: Sink
    table: TableSpec


def _write(
    store: StateStore, ctx: BatchContext, items: Sequence[WorkItem], spark: Callable[[], Any]
) -> _Written | _Wider | BatchResult:
    """Stages the batch's parts in a new attempt (steps 3 of the protocol)."""
    batch_id = ctx.batch_id
    try:
        ctx.attempt = f"{store.start_attempt(batch_id)}-{uuid.uuid4().hex[:8]}"
    except KeyError:
        log.warning("%s batch %d was released by a stop; nothing to do", ctx.ref, batch_id)
        return BatchResult(batch_id, ctx.ref.endpoint_name, committed=False)
    sink = ctx.sink()
    sink.state_store_url = store.url
    try:
        sink.prepare(batch_id, ctx.attempt)  # an unwritable warehouse fails here, no Spark
    except SinkUnwritable as exc:
        return _fail(store, ctx, sink, f"connector {ctx.ref}: {exc}", "transport", exc)
    failpoints.reach("before_sink_write")
    session = spark()
    failpoints.reach("sink_write_started")
    try:
        share_aws_environment(session)  # a warehouse on s3:// is written by the workers
        # Work items packed into Spark tasks by size (as Spark's file sources pack
        # files); each task writes its items' rows into its own rolling parts and
        # returns one receipt per item (or the item's failure: bad input never raises
        # in the worker, see reader). A plain mapInArrow job: Spark's pooled Python
        # workers start once per session, where reading through the data source would
        # start planner processes per batch.
        rows = _run_tasks(session, ctx, items)
    except Exception as exc:
        # Spark itself failed (a worker crashed, the JVM ran out of memory): one line of
        # the error, the whole Py4J text at DEBUG.
        message, kind = _failure(exc, ctx, batch_id)
        return _fail(store, ctx, sink, message, kind, exc)
    failpoints.reach("after_sink_write")
    results = sorted((TaskAnswer.from_json(r) for r in rows), key=lambda a: a.part)
    failures = _failures(results, items, f"connector {ctx.ref}: batch {batch_id}")
    if failures:
        for f in failures:
            log.debug(
                "%s batch %d: %s failed in its Spark task:\n%s",
                ctx.ref,
                batch_id,
                f.key,
                _masked(f.trace, ctx),
            )
        first = failures[0]
        message = first.message
        if len(failures) > 1:
            message += f" (and {len(failures) - 1} more object(s) of the batch failed)"
        return _fail(
            store,
            ctx,
            sink,
            _masked(message, ctx),
            "parse" if first.stage == "parse" else "transport",
            source_key=first.key,
        )
    found = new_fields(results)
    if not found:
        return _Written(sink, results)
    try:
        added = widen(ctx.table, found, f"connector {ctx.ref}: batch {batch_id}")
    except EvolutionFailed as exc:
        return _fail(store, ctx, sink, _masked(str(exc), ctx), "parse")
    if not added:
        return _Written(sink, results)
    log.info(
        "%s batch %d: new column(s) %s; the batch is read again with them",
        ctx.ref,
        batch_id,
        ", ".join(str(c) for c in added),
    )
    columns = (*ctx.table.columns, *added)
    return _Wider(sink, ctx.table.model_copy(update={"columns": columns}))


def _combine(store: StateStore, ctx: BatchContext, written: _Written) -> BatchResult | None:
    """Combines the attempt's small staged parts before the commit, so each kind has at
    most 1 + bytes read / ``target_file_size`` files
    (:mod:`airflow_connectors.sinks.combine`); a failure fails the batch, which the next
    run retries."""
    from airflow_connectors.sinks.combine import combine_small_parts

    try:
        read = sum(a.receipt.bytes for a in written.results if a.receipt is not None)
        combined = combine_small_parts(written.sink, ctx.batch_id, ctx.attempt, read)
    except SinkUnwritable as exc:
        return _fail(store, ctx, written.sink, f"connector {ctx.ref}: {exc}", "transport", exc)
    for kind, (parts, nbytes) in combined.items():
        log.info(
            "%s batch %d: %d small %s part(s) of %d bytes in all combined into one file",
            ctx.ref,
            ctx.batch_id,
            parts,
            "row" if kind == "rows" else "dead-letter",
            nbytes,
        )
    return None


def _commit(
    store: StateStore,
    ctx: BatchContext,
    base: BatchSchema,
    written: _Written,
    t0: float,
    planned_at: float,
) -> BatchResult:
    """Steps 4 and 5: the state-store commit (with the batch's new schema version, if
    it widened the table), then publish. A refused commit (another attempt committed
    the batch, or a stop released it: ``planned_at`` tells the batch from one planned
    later under the same id) drops this attempt's staged output and publishes nothing;
    a committed one is published, whatever a stop does meanwhile (a stop releases and
    discards only batches still planned)."""
    batch_id, sink = ctx.batch_id, written.sink
    receipts: list[ItemReceipt] = []
    errors: list[ErrorRecord] = []
    for answer in written.results:
        assert answer.receipt is not None  # a batch with failures is not written
        receipts.append(answer.receipt)
        for error in answer.errors:
            if error.kind == "transport":  # an unreadable object skipped (tolerance: all)
                error = ErrorRecord(error.kind, _masked(error.message, ctx), error.source_key)
                log.warning("%s", error.message)
            errors.append(error)
    on_commit = None
    if ctx.table.columns != base.table.columns:

        def on_commit(conn: Any) -> None:
            store_version(store, conn, ctx.pipeline, ctx.table, base, batch_id)

    if not store.commit_batch(
        batch_id, ctx.attempt, receipts, errors, on_commit=on_commit, planned_at=planned_at
    ):
        # Another attempt won the commit, or a stop released the batch (or is releasing
        # it): this attempt's staged output is never published.
        sink.discard(batch_id, ctx.attempt)
        log.warning(
            "%s batch %d: not committed by this attempt: another run committed it, or the "
            "connector was stopped and the batch released (it is planned again after "
            "resume); its staged output was removed",
            ctx.ref,
            batch_id,
        )
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
        skipped=sum(e.kind == "transport" for e in errors),
    )
    log.info(
        "%s batch %d committed: %d records, %d parse errors, %d bytes, %d items%s in %.1f s",
        ctx.ref,
        batch_id,
        result.records,
        result.parse_errors,
        result.bytes,
        len(receipts),
        f" ({result.skipped} unreadable skipped)" if result.skipped else "",
        result.seconds,
    )
    return result


def _failures(
    results: list[TaskAnswer], items: Sequence[WorkItem], where: str
) -> list[ItemFailure]:
    """The items' failures in plan order; an item no task answered for is one too."""
    failures = [a.failure for a in results if a.failure is not None]
    answered = {a.part for a in results}
    lost = [item.key for n, item in enumerate(items) if n not in answered]
    if lost and not failures:
        failures.append(
            ItemFailure(
                "internal",
                lost[0],
                f"{where} failed: {len(lost)} work item(s) from {lost[0]} on got no answer "
                "from their Spark task (an internal error); the next run retries it",
            )
        )
    return failures


def _run_tasks(session: Any, ctx: BatchContext, items: Sequence[WorkItem]) -> list[str]:
    """Runs the batch's Spark job: ``items`` packed into tasks (:func:`pack`); returns
    the tasks' answers, one JSON string per item. DataFrame operations only, so a classic
    and a Spark Connect session run it alike: ``range(0, n, 1, n)`` is one row per task
    group in a partition of its own, and :func:`~.reader.ingest_arrow`, bound to the
    plan's header, the groups' items and the tasks' environment, ingests each."""
    if not items:
        return []
    groups = pack(
        items,
        ctx.connector.max_partition_bytes,
        ctx.connector.open_cost_bytes,
        default_parallelism(session),
    )
    # Each task gets the plan without its items (small) and its own items.
    # In clear, as the tasks' closure: executors may not have the key that opens sealed
    # secrets (a Spark worker started without Airflow's config); nothing stores it.
    header = json.dumps(dataclasses.replace(ctx.to_plan(), items=()).to_json(sealed=False))
    payload = [json.dumps([[n, items[n].to_json()] for n in group]) for group in groups]
    env = task_environment(session, ctx.connector, ctx.table)
    connect = is_connect(session)
    if connect:
        _check_plan_size(session, ctx, header, payload, env)
    log.info(
        "%s batch %d: %d work item(s) in %d Spark task(s)%s",
        ctx.ref,
        ctx.batch_id,
        len(items),
        len(groups),
        " on Spark Connect" if connect else "",
    )
    body = functools.partial(ingest_arrow, header, payload, env)
    n = len(groups)
    rows = session.range(0, n, 1, n).mapInArrow(body, "answer string").collect()
    return [row[0] for row in rows]


#: Spark Connect's default limit of a message the server accepts (its
#: ``spark.connect.grpc.maxInboundMessageSize``): the batch's job is one.
CONNECT_MESSAGE_BYTES = 128 * 1024 * 1024


def _check_plan_size(
    session: Any, ctx: BatchContext, header: str, payload: list[str], env: dict[str, Any]
) -> None:
    """Fails in one line when the batch's job (its items ride in the plan, as bytes of
    the task function) would exceed what the Spark Connect server accepts."""
    size = len(header) + sum(len(p) for p in payload) + len(json.dumps(env)) + 64 * 1024
    if size < CONNECT_MESSAGE_BYTES // 2:  # the server's limit is asked only when near
        return
    try:
        limit = int(
            session.conf.get("spark.connect.grpc.maxInboundMessageSize", None)
            or CONNECT_MESSAGE_BYTES
        )
    except Exception:  # a static server setting the client may not read
        limit = CONNECT_MESSAGE_BYTES
    if size >= limit:
        raise BatchTooLarge(
            f"connector {ctx.ref}: batch {ctx.batch_id} of {len(ctx.items) or len(payload)} "
            f"work item(s) needs a Spark Connect request of about {size >> 20} MiB, more "
            f"than the server accepts ({limit >> 20} MiB): raise the server's "
            "spark.connect.grpc.maxInboundMessageSize, or give the connector a smaller "
            "max_batch_size (batches planned from then on are smaller)"
        )


class BatchTooLarge(RuntimeError):
    """A batch's Spark Connect request would exceed the server's message limit."""


def item_bytes(item: WorkItem) -> int:
    """The bytes a work item reads, when its size is known (else 0)."""
    if item.size is None:
        return 0
    end = item.end if item.end is not None else item.size
    return max(0, end - item.start)


def pack(
    items: Sequence[WorkItem], max_bytes: int, open_cost: int, parallelism: int = 1
) -> list[list[int]]:
    """The indexes of ``items`` grouped into Spark tasks, as Spark's file sources pack
    files (``FilePartition.getFilePartitions``) but in key order: each item weighs its
    bytes plus ``open_cost``; a task takes items while its weight plus the next item's
    bytes stays within ``min(max_bytes, max(open_cost, total weight / parallelism))``,
    so small items share tasks, large inputs still spread over ``parallelism`` tasks,
    and an item never shares a task it would overfill. Deterministic for a plan and
    these settings."""
    sizes = [item_bytes(i) for i in items]
    total = sum(sizes) + open_cost * len(sizes)
    split = max(1, min(max_bytes, max(open_cost, total // max(1, parallelism))))
    groups: list[list[int]] = []
    current: list[int] = []
    weight = 0
    for n, size in enumerate(sizes):
        if current and weight + size > split:
            groups.append(current)
            current, weight = [], 0
        current.append(n)
        weight += size + open_cost
    if current:
        groups.append(current)
    return groups


def _fail(
    store: StateStore,
    ctx: BatchContext,
    sink: Sink,
    message: str,
    kind: str,
    exc: BaseException | None = None,
    *,
    source_key: str | None = None,
) -> BatchResult:
    """Record the batch's failure (the connector becomes FAILED with ``message``), drop
    its staged output and raise :class:`BatchFailed`; or, when the batch is no longer
    planned, say so and return a no-op result."""
    batch_id = ctx.batch_id
    if exc is not None:
        log.debug("%s batch %d failed:\n%s", ctx.ref, batch_id, _masked(_trace(exc), ctx))
    recorded = store.record_failure(
        ctx.ref, message, batch_id=batch_id, kind=kind, source_key=source_key
    )
    with contextlib.suppress(OSError):
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


def _trace(exc: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception(exc))


def _masked(message: str, ctx: BatchContext) -> str:
    """``message`` with the connector's secrets masked (it is stored, shown by the REST
    API and logged)."""
    return mask_text(message, secret_values(ctx.connector.model_dump(mode="json")))


def _failure(exc: Exception, ctx: BatchContext, batch_id: int) -> tuple[str, str]:
    """One line for an exception Spark raised (a Py4J error or a ``PythonException``
    whose text holds Java and Python traces), masked."""
    if isinstance(exc, BatchTooLarge):
        return str(exc), "transport"
    text = str(exc)
    if _lost_server(exc):
        status = _GRPC_STATUS.search(text)
        return (
            f"connector {ctx.ref}: batch {batch_id}: the Spark Connect server stopped "
            f"answering while the batch ran ({status[1] if status else type(exc).__name__}); "
            "the next run retries it"
        ), "transport"
    if _MISSING_PACKAGE.search(text):  # executors whose Python lacks this package
        from airflow_connectors.engine.package import missing_package_message

        return missing_package_message(f"connector {ctx.ref}: batch {batch_id}"), "transport"
    message, kind = _failure_line(text, ctx, batch_id)
    return _masked(message, ctx), kind


def _lost_server(exc: BaseException) -> bool:
    """Whether ``exc`` is a Spark Connect client's error for a server it cannot reach
    (not running, gone or restarted mid-batch): the client's own
    ``SparkConnectGrpcException`` with the call's failed gRPC status (its subclasses
    are errors the server reported), or the server not knowing the session or the
    operation any more (``INVALID_HANDLE``: restarted)."""
    names = {c.__name__ for c in type(exc).__mro__}
    if "SparkConnectGrpcException" not in names:
        return False
    text = str(exc)
    if type(exc).__name__ == "SparkConnectGrpcException" and _UNREACHABLE.search(text):
        return True
    return "INVALID_HANDLE" in text


#: The gRPC status of a failed call, as the client's error quotes it.
_GRPC_STATUS = re.compile(r"StatusCode\.(\w+)")
_UNREACHABLE = re.compile(r"StatusCode\.(?:UNAVAILABLE|CANCELLED|DEADLINE_EXCEEDED|UNKNOWN)")


#: A Python worker that could not import this package (not shipped, not installed).
_MISSING_PACKAGE = re.compile(r"ModuleNotFoundError: No module named 'airflow_connectors[.']")


#: ``SomeError: message`` as the last line of a Python trace, or a Java exception.
_EXCEPTION_LINE = re.compile(
    r"^(?:[\w.]+\.)?(\w*(?:Error|Exception|Rejected|Failed|Unwritable)): (.+)$"
)


def _failure_line(text: str, ctx: BatchContext, batch_id: int) -> tuple[str, str]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "Traceback (most recent call last):" in text:
        # The Python worker's own error: the last exception line of its trace.
        tail = text.rsplit("Traceback (most recent call last):", 1)[1].splitlines()
        for line in reversed(tail):
            m = _EXCEPTION_LINE.match(line.strip())
            if m and not line.startswith((" ", "\t")):
                name, cause = m.groups()
                if name == "RecordRejected":
                    return cause, "parse"
                if cause.startswith("connector "):
                    return cause, "transport"
                return (
                    f"connector {ctx.ref}: batch {batch_id} failed in Spark: {name}: {cause}",
                    "transport",
                )
    for line in lines:
        m = _EXCEPTION_LINE.match(line.removeprefix(": "))
        if m and "py4j" not in line.lower():
            name, cause = m.groups()
            cause = cause.split(": ", 1)[-1] if name == "SparkException" else cause
            return f"connector {ctx.ref}: batch {batch_id} failed in Spark: {cause}", "transport"
    first = lines[0] if lines else "unknown error"
    return f"connector {ctx.ref}: batch {batch_id} failed: {first}", "transport"
