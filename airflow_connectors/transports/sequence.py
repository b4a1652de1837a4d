"""Sequence sources: partitions of numbered messages (a NATS stream, Kafka topic
partitions, a database's change log), read as ranges of sequence numbers.

A subclass says what its partitions are and reads a range; this base owns the rest:

- **One offsets key per partition** (``orders@seq``, ``orders/3``). A work item is a
  range of it: ``start``/``end`` are sequences (``end`` exclusive) and a read range
  commits at its end (:attr:`Transport.record_offsets`). The state store keeps a key's
  contiguous committed prefix and holds a range committed ahead of an earlier,
  uncommitted one aside until the prefix reaches it (``state/ranges.py``), so batches of
  one discovery commit in any order and the key's offset is the partition's **committed
  position**: every sequence below it (from where the connector started) is committed.
  State is one row per partition plus the ranges in flight, however long it runs.
- **Planning.** A partition with a range in flight is skipped (its position is not final
  yet); the others are planned from their position up to their end, in items of at most
  :data:`ITEM_RECORDS` sequences that divide the connector's ``max_batch_size`` evenly,
  partition after partition, within the discovery's record and item limits.
- **Bounded or following.** Following (``bounded`` False), a partition's end is its last
  sequence now. Bounded, it is the last sequence the first discovery that planned
  anything saw, of every partition: kept in each item's ``meta`` (:data:`ENDS`) and so in
  each partition's offsets row, so end of input does not move while the connector reads.
- **Holes.** Sequences below a partition's first available one (purged, aged out) and
  the removed sequences it lists (deleted, compacted) are reported as notices of the
  discovery that plans over them (counted as transport errors), never skipped silently;
  the item still covers them, so the position moves past them once it commits. A
  partition that ends below the committed position (deleted and created again) is
  reported at every discovery until its offsets are reset.
- **Acknowledgement.** Every discovery (which runs after commits, and in a following
  connector's finalize step) hands :meth:`SequenceSource.acknowledge` the committed
  position of every partition: a durable consumer, a consumer group or a replication
  slot learns what the table holds, and never more.
- **Lag.** Every discovery (and a following connector's finalize step) reports the
  source's lag (``SourceReport.lag``): per partition, its last sequence + 1 minus its
  committed position, summed, as Kafka's consumer-group LAG counts it. The framework
  stores it with the connector's status.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_connectors.transports.base import Cursor, KeyOffset, Limits, Transport, WorkItem

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

#: Sequences in one work item at most (one Spark task reads one item): a batch of the
#: default million records is read by several tasks.
ITEM_RECORDS = 100_000
#: Records per batch when the connector sets no ``max_batch_size`` (the engine's default).
DEFAULT_BATCH_RECORDS = 1_000_000
#: ``WorkItem.meta`` key of a bounded source's end: ``{partition key: last sequence}``.
ENDS = "ends"


@dataclass(frozen=True)
class Partition:
    """One partition as the source shows it now."""

    #: Its offsets key: sorts the partitions, names it in messages and the offsets API.
    key: str
    #: The first sequence still available (``last + 1`` when everything was removed).
    first: int
    #: The last sequence (``first - 1``, or less, when it holds nothing).
    last: int
    #: Sequences between ``first`` and ``last`` the source knows were removed (deleted
    #: messages); reported when a range over them is planned.
    removed: tuple[int, ...] = ()


class SequenceSource(Transport):
    """A source of numbered messages in partitions (see the module doc). A subclass
    sets ``name`` and ``Config`` and implements :meth:`partitions` and
    :meth:`read_range`; it may override :meth:`start_at`, :meth:`acknowledge` and
    ``bounded`` (True: read up to the ends the first discovery saw)."""

    record_offsets = True
    #: What a partition belongs to, in messages ("stream", "topic").
    source_kind: ClassVar[str] = "source"

    # --- what a subclass writes -----------------------------------------------------------

    @abstractmethod
    def partitions(self) -> Sequence[Partition]:
        """Every partition and its current bounds (errors: one line naming the
        connector, the source and what to do)."""

    @abstractmethod
    def read_range(self, partition: str, first: int, last: int) -> Iterator[bytes | pa.RecordBatch]:
        """The messages of ``partition`` with sequences ``first..last``, in order: bytes
        for the connector's format, or record batches (a transport without format).
        ``first`` may lie below the partition's first available sequence (read from
        that one); removed sequences are skipped, never waited for."""

    def start_at(self, partition: Partition) -> int:
        """The first sequence of a partition nothing of which is committed: by default
        its first available one (a subclass's start option overrides it)."""
        return partition.first

    def where(self, partition: str) -> str:
        """``partition`` in messages (``stream orders``, ``topic orders partition 3``)."""
        return partition

    def pins_start(self) -> bool:
        """Whether :meth:`start_at` moves with time (Kafka's ``latest``): the first
        discovery then plans an empty range at the start of every partition nothing of
        which is committed, whose commit fixes where it starts."""
        return False

    def missing(self, partition: Partition, first: int, last: int) -> None:
        """Sequences ``first..last`` of ``partition``, below its first available one,
        were removed before they were read and a range over them is being planned. By
        default a notice (counted as a transport error) and they are skipped; a
        subclass may raise instead (one line: the partition, the sequences, what to
        do)."""
        self.report.notice(
            f"{self.name}: {last - first + 1} of the sequences {first}..{last} of "
            f"{self.where(partition.key)} were removed from the {self.source_kind} "
            "(deleted, purged, compacted or aged out) before this connector read them; "
            "they cannot be read and are skipped",
            partition.key,
        )

    def acknowledge(self, positions: Mapping[str, int]) -> None:
        """Tell the source what the table holds: per partition key, the first sequence
        not committed (everything below it is). Called by every discovery, after the
        commits it follows; the default does nothing."""

    # --- hooks for a source whose older releases stored offsets under other keys ----------

    def committed(self, cursor: Cursor, partition: Partition) -> KeyOffset | None:
        """The committed position of ``partition`` (the offsets row of its key)."""
        return cursor.get(partition.key)

    def in_flight(self, cursor: Cursor, partition: Partition) -> bool:
        """Whether a range of ``partition`` is planned and not committed."""
        return partition.key in cursor.in_flight

    # --- what the framework does ---------------------------------------------------------

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        """Acknowledge the committed positions, then plan each partition that has no
        range in flight from its position to its end (see the module doc)."""
        parts = sorted(self.partitions(), key=lambda p: p.key)
        rows = {p.key: self.committed(cursor, p) for p in parts}
        positions = {p.key: self._position(p, rows[p.key]) for p in parts}
        self.acknowledge(positions)
        # The lag as the source's own tools count it (Kafka's consumer-group LAG): from
        # the committed position to the last sequence, removed sequences included.
        self.report.lag = sum(max(0, p.last + 1 - positions[p.key]) for p in parts)
        for p in parts:
            if positions[p.key] - 1 > p.last and rows[p.key] is not None:
                self.report.notice(
                    f"{self.name}: {self.where(p.key)} ends at sequence {p.last}, below the "
                    f"committed "
                    f"sequence {positions[p.key] - 1}: it was deleted and created again, so "
                    "its new messages are not read; stop the connector, reset its offsets "
                    "and resume it to read it from the start",
                    p.key,
                )
        ends = self._ends(cursor, parts, rows)
        if ends is None:
            return iter(())
        return iter(self._plan(cursor, parts, rows, positions, ends, limits))

    def exhausted(self, cursor: Cursor) -> bool | None:
        """Bounded: the framework decides (a discovery that finds nothing). Following:
        never; the finalize step that asks still acknowledges what the run's batches
        committed, as a bounded connector's end-of-input discovery does."""
        if self.bounded:
            return None
        try:
            parts = self.partitions()
            positions = {p.key: self._position(p, self.committed(cursor, p)) for p in parts}
            self.report.lag = sum(max(0, p.last + 1 - positions[p.key]) for p in parts)
            self.acknowledge(positions)
        except OSError as e:  # acks only show progress; the next discovery catches up
            log.warning("%s", e)
        return False

    def read(self, item: WorkItem) -> Iterator[bytes | pa.RecordBatch]:
        """The range ``item.start .. item.end - 1`` of partition ``item.key``."""
        if item.end is None or item.end < item.start:
            raise ValueError(f"{self.name}: work item {item.key!r} is no sequence range")
        if item.end == item.start:
            return  # a pinned start (see pins_start): nothing to read
        yield from self.read_range(item.key, item.start, item.end - 1)

    def _position(self, partition: Partition, row: KeyOffset | None) -> int:
        return row.offset if row is not None else self.start_at(partition)

    def _ends(
        self, cursor: Cursor, parts: Sequence[Partition], rows: Mapping[str, KeyOffset | None]
    ) -> dict[str, int] | None:
        """Where each partition ends; None: not known yet (bounded, and the ranges the
        first discovery planned are all in flight)."""
        if not self.bounded:
            return {p.key: p.last for p in parts}
        for row in rows.values():
            kept = row.meta.get(ENDS) if row is not None else None
            if isinstance(kept, dict):
                return {str(k): int(v) for k, v in kept.items()}
        if any(self.in_flight(cursor, p) for p in parts):
            return None
        return {p.key: p.last for p in parts}

    def _plan(
        self,
        cursor: Cursor,
        parts: Sequence[Partition],
        rows: Mapping[str, KeyOffset | None],
        positions: Mapping[str, int],
        ends: Mapping[str, int],
        limits: Limits,
    ) -> list[WorkItem]:
        size = self._item_records(limits)
        meta: dict[str, Any] = {ENDS: dict(ends)} if self.bounded else {}
        budget = limits.max_records
        items: list[WorkItem] = []
        for p in parts:
            # A partition that appeared after a bounded source fixed its ends is not read.
            end = min(ends.get(p.key, positions[p.key] - 1), p.last)
            if self.in_flight(cursor, p):
                continue
            if positions[p.key] > end:
                if rows[p.key] is None and self.pins_start() and len(items) < limits.max_items:
                    at = positions[p.key]
                    items.append(WorkItem(key=p.key, start=at, end=at, records=0, meta=meta))
                continue
            row = rows[p.key]
            start, done = positions[p.key], row.records if row is not None else 0
            readable = max(start, p.first)
            while start <= end:
                if len(items) >= limits.max_items or (budget is not None and budget <= 0):
                    return items
                # The first item also spans the sequences removed below ``first``.
                last = min(end, max(start, readable) + size - 1)
                records = max(0, last - max(start, readable) + 1)
                items.append(
                    WorkItem(
                        key=p.key,
                        start=start,
                        end=last + 1,
                        records_done=done,
                        records=records,
                        meta=meta,
                    )
                )
                self._report_removed(p, start, last)
                done += records
                if budget is not None:
                    budget -= records
                start = last + 1
        return items

    def _item_records(self, limits: Limits) -> int:
        """Sequences per item: items that divide a batch evenly, so a discovery's
        batches hold what it plans."""
        per_batch = self.context.max_batch_size
        if per_batch is None and self.context.connector is None:
            per_batch = limits.max_records  # outside a connector: what the caller asks
        per_batch = per_batch or DEFAULT_BATCH_RECORDS
        return max(1, per_batch // -(-per_batch // ITEM_RECORDS))

    def _report_removed(self, p: Partition, first: int, last: int) -> None:
        """A notice when sequences of a newly planned range are gone from the source."""
        below = min(last, p.first - 1)
        if below >= first:
            self.missing(p, first, below)
        gone = sum(1 for s in p.removed if first <= s <= last and s >= p.first)
        if gone:
            self.report.notice(
                f"{self.name}: {gone} of the sequences {first}..{last} of "
                f"{self.where(p.key)} were removed from the {self.source_kind} (deleted, "
                "purged, compacted or aged out) before this connector read them; they "
                "cannot be read and are skipped",
                p.key,
            )


__all__ = ["DEFAULT_BATCH_RECORDS", "ENDS", "ITEM_RECORDS", "Partition", "SequenceSource"]
