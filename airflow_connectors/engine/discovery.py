"""Discovery (Pulsar's ``discover``): list new work after the committed offsets, plan it
into at most ``tasks_max`` batches, persist the plans, and keep ``end_of_input`` current.
Runs without Spark: a run that finds nothing new never starts Spark."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from itertools import islice

from airflow_connectors import failpoints
from airflow_connectors.engine import handover, schema
from airflow_connectors.engine.batch import publish_committed
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.engine.failures import one_line
from airflow_connectors.engine.schema import SchemaInferenceError
from airflow_connectors.formats import FORMATS, Format
from airflow_connectors.spec.models import (
    ConnectorSpec,
    FormatSpec,
    PipelineSpec,
    TableSpec,
    TransportSpec,
)
from airflow_connectors.state.signals import local_owner
from airflow_connectors.state.store import BatchPlan, ConnectorRef, ConnectorStopped, StateStore
from airflow_connectors.state.watermark import FORCE_RELIST
from airflow_connectors.transports import Cursor, Limits, Transport, WorkItem
from airflow_connectors.transports.base import LINES_BEFORE, MTIME, SourceReport

log = logging.getLogger(__name__)

#: Records per batch when the connector sets no ``max_batch_size`` (record-counting
#: transports such as datagen; byte transports plan whole objects).
DEFAULT_BATCH_RECORDS = 1_000_000


class LeaseBusy(RuntimeError):
    """Another discovery holds the connector's lease; ``holder`` is its owner when
    known (``host:pid`` of an embedded run, ``airflow:<run id>`` of an Airflow run)."""

    def __init__(self, message: str, *, holder: str | None = None) -> None:
        super().__init__(message)
        self.holder = holder


@dataclass
class Discovery:
    """What one discovery did: the batches it planned, how many work items they hold, and
    whether the connector reached end of input."""

    batch_ids: list[int]
    new_items: int
    end_of_input: bool
    #: Keys the transport saw but held back for a later discovery (files modified
    #: within ``min_file_age``), and when the last of them becomes readable.
    waiting: int = 0
    ready_at: float | None = None


def _owner_id() -> str:
    """This process as a lease owner: ``host:pid`` (a dead one's lease is free at once)."""
    return local_owner()


def context(
    pipeline: PipelineSpec | str, table: TableSpec, connector: ConnectorSpec, warehouse: str
) -> BatchContext:
    """The batch context of a connector of ``pipeline`` (a spec or its name)."""
    name = pipeline if isinstance(pipeline, str) else pipeline.name
    return BatchContext(pipeline=name, table=table, connector=connector, warehouse=warehouse)


def roll_forward(store: StateStore, ref: ConnectorRef) -> None:
    """Publish batches whose commit happened but whose publish a crash interrupted."""
    for b in store.unpublished_batches(ref):
        if b.attempt:
            log.info(
                "%s: publishing committed batch %d left by an interrupted run", ref, b.batch_id
            )
            publish_committed(store, BatchContext.from_plan(b.plan), b.batch_id, b.attempt)


def _sliced(cursor: Cursor) -> Cursor:
    """The cursor a date slice (a rendered template: each Airflow run lists its own
    prefix or folder) is discovered with: no watermark. The watermark is one key per
    connector, and slices commit in any order (a backfill runs days side by side), so a
    later day's keys would put it above an earlier day's never-read keys, which would
    then pass for collapsed, committed ones. A slice lists all of its keys and reads
    those without an offsets row; its items carry no ``MTIME``, so their rows never
    collapse (a slice holds one run's keys: its state stays small)."""
    return dataclasses.replace(cursor, watermark=None, late_after=None, since_relist=0)


def discover(
    store: StateStore,
    ctx: BatchContext,
    *,
    owner: str | None = None,
    own_slice_only: bool = False,
) -> Discovery:
    """Plan new batches for the connector. Pending (planned, uncommitted) batches come
    first: they are returned again so a crashed batch is re-run with the same plan.

    ``own_slice_only``: the config is a rendered template (an Airflow run's date slice);
    pending batches planned from other renderings belong to their own runs and are
    neither returned nor counted against ``tasks_max``.

    A table without declared columns is planned with its latest stored schema version;
    the first discovery infers and stores version 1 (``engine/schema.py``), and plans
    nothing while there is no data to infer it from.
    """
    ctx = dataclasses.replace(ctx)  # given the effective schema below
    ref = ctx.ref
    owner = owner or _owner_id()
    # Renewed by a heartbeat while held: a run that dies frees it within seconds.
    lease = store.hold_lease(ref, owner)
    if lease is None:
        holder = store.lease_holder(ref)
        by = f" ({holder})" if holder else ""
        raise LeaseBusy(
            f"connector {ref} is being planned by another run{by}; try again later",
            holder=holder,
        )
    try:
        failpoints.reach("while_planning")
        found = _plan(store, ctx, own_slice_only)
    except (ConnectorStopped, SchemaInferenceError):  # reported as they are
        raise
    except Exception as e:
        # Visible on every surface (REST status, Feldera stats, CLI, the page) as FAILED
        # with this line, until a later discovery or commit succeeds.
        store.record_failure(ref, f"connector {ref}: discovery failed: {one_line(e)}")
        raise
    finally:
        lease.release()
    return found


def _plan(store: StateStore, ctx: BatchContext, own_slice_only: bool) -> Discovery:
    """The body of :func:`discover`, run while the lease is held."""
    ref = ctx.ref
    roll_forward(store, ref)
    pending = [
        b.batch_id
        for b in store.pending_batches(ref)
        if not own_slice_only or same_source(b.plan, ctx)
    ]
    tasks_max = ctx.connector.tasks_max
    ids = pending[:tasks_max]
    typed = _with_schema(store, ctx)
    transport = ctx.transport()
    cursor = _sliced(store.cursor(ref)) if own_slice_only else store.cursor(ref)
    handover.prime(transport, ctx, cursor, store.url)
    new_items: list[WorkItem] = []
    waiting: list[tuple[str, float]] = []
    if len(ids) < tasks_max and typed:
        slots = tasks_max - len(ids)
        per_batch = ctx.connector.max_batch_size or DEFAULT_BATCH_RECORDS
        limits = Limits(
            max_records=slots * per_batch,
            now=time.time(),
            appendable=_appendable(ctx),
            tasks_max=tasks_max,
        )
        report = transport.context.new_report()
        new_items = list(islice(transport.discover(cursor, limits), limits.max_items))
        new_items = [_with_lines_before(i, cursor) for i in new_items]
        waiting = list(report.waiting)
        if report.lag is not None:  # shown with the connector's stats
            store.set_lag(ref, report.lag)
        if own_slice_only:  # offsets rows of slices never collapse (see _sliced)
            new_items = [
                dataclasses.replace(i, meta={k: v for k, v in i.meta.items() if k != MTIME})
                for i in new_items
            ]
        for message, key in report.notices:
            log.warning("%s: %s", ref, message)
            store.record_transport_error(ref, message, source_key=key)
        groups = split(new_items, slots, ctx.connector.max_batch_size)
        plans = [dataclasses.replace(ctx, items=items).to_plan() for items in groups]
        # Planned with the listing's outcome, in one transaction, also when nothing
        # was planned (state/watermark.py).
        planned = store.plan_batches(
            ref,
            plans,
            listed=True,
            relisted_at=_relisted_at(report, new_items, groups, limits),
        )
        if planned:
            log.info(
                "%s: planned %d batch(es) %s over %d new work item(s)",
                ref,
                len(planned),
                planned,
                len(new_items),
            )
            ids += planned
    if not pending:
        # Nothing failed is waiting to be retried: a failure of an earlier discovery is
        # over (a failed batch keeps the connector FAILED until it commits).
        store.clear_failure(ref)
    eoi = False
    if not ids:
        after = store.cursor(ref)
        sliced = _sliced(after) if own_slice_only else after
        eoi = _exhausted(transport, sliced) and not _late_work(store, ctx, sliced)
        store.set_end_of_input(ref, eoi)
    if waiting and not ids:
        log.info(
            "%s: %d key(s) wait to be read (modified within min_file_age), the last until %s",
            ref,
            len(waiting),
            time.strftime("%H:%M:%S", time.localtime(max(t for _, t in waiting))),
        )
    return Discovery(
        ids,
        len(new_items),
        eoi,
        waiting=len(waiting),
        ready_at=max((t for _, t in waiting), default=None),
    )


def _with_lines_before(item: WorkItem, cursor: Cursor) -> WorkItem:
    """``item`` with the lines before its start when it resumes exactly at a committed
    offset that recorded them (see ``transports.base.LINES_BEFORE``)."""
    if item.start == 0 or LINES_BEFORE in item.meta:
        return item
    row = cursor.get(item.key)
    if row is None or row.offset != item.start or LINES_BEFORE not in row.meta:
        return item
    return dataclasses.replace(item, meta={**item.meta, LINES_BEFORE: row.meta[LINES_BEFORE]})


def _with_schema(store: StateStore, ctx: BatchContext) -> bool:
    """Give ``ctx`` its table's effective schema (:func:`.schema.prepare`); False when
    the table's schema is still to be inferred and there is nothing to infer it from.
    A sample that cannot be typed fails the connector with the inference's message."""
    try:
        return schema.prepare(store, ctx)
    except schema.SchemaInferenceError as e:
        store.record_failure(ctx.ref, str(e))
        raise


def _relisted_at(
    report: SourceReport, items: list[WorkItem], groups: list[list[WorkItem]], limits: Limits
) -> float | None:
    """The report's ``relisted_at`` when the listing was a complete re-list and every
    item it yielded is planned: not cut at ``max_items`` (possibly more to come) and not
    cut by ``split`` (groups beyond the free slots wait for a later discovery)."""
    if report.relisted_at is None or len(items) >= limits.max_items:
        return None
    if sum(len(g) for g in groups) != len(items):
        return None
    return report.relisted_at


def new_data_fingerprint(
    store: StateStore, ctx: BatchContext, *, max_items: int = 1000
) -> str | None:
    """What discovery would find now, as a digest of its work items (None: nothing new).

    Lists without planning or taking the lease, so event triggers and sensors can poll
    it; the digest changes whenever different data becomes available. It lists every
    key (a re-list), so a key that sorts below the watermark is seen at once; when one
    is, the next discovery is made a re-list so the run it starts reads it."""
    import hashlib

    cursor = store.cursor(ctx.ref)
    items = list(
        islice(
            ctx.transport().discover(
                _complete_listing(cursor),
                Limits(
                    max_records=1, max_items=max_items, now=time.time(), appendable=_appendable(ctx)
                ),
            ),
            max_items,
        )
    )
    if not items:
        return None
    if cursor.watermark is not None and any(i.key <= cursor.watermark for i in items):
        # Found only by listing every key: the run this signal starts must list them too.
        store.request_relist(ctx.ref)
    digest = hashlib.sha256()
    for item in items:
        digest.update(f"{item.key}\0{item.start}\0{item.end}\0{item.size}\n".encode())
    return digest.hexdigest()


def _appendable(ctx: BatchContext) -> bool:
    """Whether bytes appended to an object already read can be read on their own: the
    format is ``line_oriented``.

    Asked of the format's base part (its config, table and evolution, what
    ``line_oriented`` reads), not of a whole format: the JSON format builds its Arrow
    schema when made, which imports pyarrow, a quarter of a second of every discovery
    in a fresh process, also of one that finds nothing. A format whose
    ``line_oriented`` needs more of itself is made whole."""
    spec = ctx.connector.format
    if spec is None:
        return False
    cls = FORMATS.get(spec.name)
    probe = cls.__new__(cls)
    Format.__init__(probe, cls.Config.model_validate(spec.config), ctx.table)
    try:
        return bool(probe.line_oriented)
    except AttributeError:
        fmt = ctx.format()
        return fmt is not None and fmt.line_oriented


def same_source(plan: BatchPlan, ctx: BatchContext) -> bool:
    """Whether a batch plan was made from the same transport and format config."""

    def as_json(spec: TransportSpec | FormatSpec | None) -> object:
        return spec.model_dump(mode="json") if spec is not None else None

    planned, current = plan.connector, ctx.connector
    same_transport = as_json(planned.transport) == as_json(current.transport)
    return same_transport and as_json(planned.format) == as_json(current.format)


def finalize(store: StateStore, ctx: BatchContext, *, own_slice_only: bool = False) -> bool:
    """Recompute end of input after batches ran (and end a restart the run's batches did
    not end); returns whether the connector finished.
    ``own_slice_only``: as for :func:`discover` (a date slice looks without the
    watermark)."""
    ref = ctx.ref
    # The run's batches are in: a restart (Kafka Connect's RESTARTING) whose work
    # committed nothing new, or found nothing, is over.
    store.restart_done(ref)
    if store.pending_batches(ref):
        store.set_end_of_input(ref, False)
        return False
    cursor = store.cursor(ref)
    if own_slice_only:
        cursor = _sliced(cursor)
    transport = ctx.transport()
    transport.context.new_report()
    eoi = _exhausted(transport, cursor)
    # The lag after the run's commits, when the look at the source measured it (a
    # sequence source: its exhausted check, or the end-of-input discovery; the latter
    # makes a report of its own, hence ``transport.report``, the latest).
    lag = transport.report.lag
    if lag is not None:
        store.set_lag(ref, lag)
    eoi = eoi and not _late_work(store, ctx, cursor)
    store.set_end_of_input(ref, eoi)
    return eoi


def _complete_listing(cursor: Cursor) -> Cursor:
    """``cursor`` as a discovery that lists every key sees it (a re-list): keys below
    the watermark that appeared since the last re-list are found too."""
    return dataclasses.replace(cursor, since_relist=FORCE_RELIST)


def _late_work(store: StateStore, ctx: BatchContext, cursor: Cursor) -> bool:
    """Whether a complete listing finds work that a listing after the watermark skips (a
    late key: a name that sorts below the watermark and appeared after the last re-list,
    such as ``a.json`` after ``b.json``, ``part-9`` after ``part-10``, or UUID names).
    Then the next discovery is made a re-list (so it reads the key) and the input is not
    at its end. Nothing to check without a watermark."""
    if cursor.watermark is None:
        return False
    transport = ctx.transport()
    limits = Limits(max_records=1, max_items=1, now=time.time(), appendable=_appendable(ctx))
    report = transport.context.new_report()
    late = next(iter(transport.discover(_complete_listing(cursor), limits)), None)
    if late is None:
        # A key that waits for its minimum age and sorts below the watermark is read by
        # a re-list once it is old enough.
        if any(key <= cursor.watermark for key, _ in report.waiting):
            store.request_relist(ctx.ref)
        return bool(report.waiting)
    if late.key <= cursor.watermark:
        log.info(
            "%s: %s sorts below the watermark and arrived after the last re-list; the "
            "next discovery lists every key to read it",
            ctx.ref,
            late.key,
        )
        store.request_relist(ctx.ref)
    return True


def _exhausted(transport: Transport, cursor: Cursor) -> bool:
    """The transport's verdict; else (None) whether it is bounded and a discovery finds
    nothing new and nothing that waits (for a minimum age)."""
    verdict = transport.exhausted(cursor)
    if verdict is not None:
        return verdict
    if not transport.bounded:
        return False
    report = transport.context.new_report()
    limits = Limits(max_records=1, max_items=1, now=time.time())
    return next(iter(transport.discover(cursor, limits)), None) is None and not report.waiting


def split(items: list[WorkItem], slots: int, max_records: int | None) -> list[list[WorkItem]]:
    """Contiguous groups in key order: by record count where known, else evenly."""
    if not items:
        return []
    if max_records and all(i.records is not None for i in items):
        groups: list[list[WorkItem]] = [[]]
        size = 0
        for item in items:
            if groups[-1] and size + (item.records or 0) > max_records:
                groups.append([])
                size = 0
            groups[-1].append(item)
            size += item.records or 0
        return groups[:slots]
    n = min(slots, len(items))
    per = -(-len(items) // n)
    return [items[i : i + per] for i in range(0, len(items), per)]
