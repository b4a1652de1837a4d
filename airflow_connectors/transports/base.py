"""The batch-source contract every transport implements.

A transport says *what* it reads (``name``, ``Config``, ``needs_format``) and implements
two methods: ``discover`` lists new work after the committed offsets (it runs on the
driver, or in Airflow's discover task) and ``read`` reads one work item (it runs inside a
Spark executor). The framework owns offsets, batches, retries and metrics; transport code
never writes state.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

# Re-exported: formats and sinks still import the base config from here.
from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.transports.handover import Handover
from airflow_connectors.transports.retry import RetryPolicy

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa

    from airflow_connectors.formats.base import Format
    from airflow_connectors.spec.datasets import LineageDataset
    from airflow_connectors.spec.models import TableSpec


@dataclass(frozen=True)
class WorkItem:
    """One unit of reading: a native, sortable key and the range to read from it.

    ``start``/``end`` are byte offsets for byte transports and record indexes for
    generators; ``end=None`` reads to the end of the object. ``records_done`` is how many
    records of this key were committed before ``start``; it numbers records in errors.
    """

    key: str
    start: int = 0
    end: int | None = None
    records_done: int = 0
    size: int | None = None
    records: int | None = None
    final: bool = True
    meta: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The item as a JSON-ready dict; the batch plan stores work items this way."""
        return {**dataclasses.asdict(self), "meta": dict(self.meta)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkItem:
        """The inverse of :meth:`to_json`."""
        return cls(**data)


@dataclass(frozen=True)
class KeyOffset:
    """What the state store knows about one native key."""

    offset: int
    records: int
    completed: bool
    meta: Mapping[str, Any] = field(default_factory=dict)


#: ``WorkItem.meta`` key of an object's modification time (epoch seconds, on the
#: source's clock). A transport that sets it opts in to the watermark: once the key is
#: completed, below the watermark and older than ``Cursor.late_after``, its offsets row
#: collapses into the watermark (the state store drops it).
MTIME = "mtime"

#: ``WorkItem.meta`` / offsets ``meta`` key: how many lines of the object lie before the
#: item's start (before the committed offset). The engine records it with the offset of
#: a line-format read and gives it to the item that resumes there, so dead letters of a
#: read that does not start at the object's first line still carry their line.
LINES_BEFORE = "lines_before"


class SourceOrderError(ValueError):
    """The committed watermark sorts after every key the source now lists (its prefix or
    folder changed, or date slices ran out of key order): reading on could skip keys
    below the watermark as committed. Discovery stops instead of losing them."""


def check_scope(connector: str, what: str, scope: str, watermark: str | None) -> None:
    """Raise :class:`SourceOrderError` when ``watermark`` sorts after every key that
    starts with ``scope`` (the listing's fixed prefix): the watermark and the listing
    time it rests on come from listings of other keys, so a key of this listing that
    sorts below it, has no offsets row and is older than ``late_after`` would count as
    committed without ever having been read."""
    if watermark is None or watermark.startswith(scope) or watermark < scope:
        return
    raise SourceOrderError(
        f"{connector}: the committed watermark {watermark!r} sorts after every key of "
        f"{what} (keys starting with {scope!r}); its keys would be taken as committed "
        "without being read. This happens when date slices run out of key order (run "
        "backfills forward: airflow backfill create ... --max-active-runs 1, without "
        "--run-backwards) or when the source's prefix or folder was changed to one that "
        "sorts earlier (give the new source a connector of its own, or reset this one's "
        "offsets)"
    )


@dataclass(frozen=True)
class Cursor:
    """Committed offsets per key, plus the keys that are planned but not committed.

    Watermark (Aiven's design, made complete): every key ``<= watermark`` is committed.
    Offsets rows of such keys are dropped once they are completed and their ``mtime``
    is older than ``late_after``, so state stays O(keys in flight), not O(keys ever
    seen). A transport lists from after ``watermark`` (S3 ``StartAfter``), and every
    ``relist_every`` discoveries lists everything: a key ``<= watermark`` that has no
    offsets row is new ("late") work when ``late_after`` is None or its ``mtime >=
    late_after``; otherwise it is a collapsed, committed key.
    """

    offsets: Mapping[str, KeyOffset] = field(default_factory=dict)
    in_flight: frozenset[str] = frozenset()
    first_discovered_at: float | None = None
    #: The greatest key such that it and every key below it are committed; None: none.
    watermark: str | None = None
    #: Objects modified before this time (the source's clock, epoch seconds) and below
    #: the watermark are committed even without an offsets row; None: nothing collapsed.
    late_after: float | None = None
    #: Discoveries since the last complete re-list (a transport re-lists when this
    #: reaches its ``relist_every - 1``).
    since_relist: int = 0

    def get(self, key: str) -> KeyOffset | None:
        """The committed offset of ``key``; ``None`` when nothing of it was committed."""
        return self.offsets.get(key)


@dataclass(frozen=True)
class Limits:
    """Bounds for one discovery: records (when a transport knows them) and work items."""

    max_records: int | None = None
    max_items: int = 100_000
    now: float = 0.0
    #: Whether the connector's format can read an object from a byte offset (lines):
    #: then bytes appended to an object already read are new work.
    appendable: bool = False
    #: The connector's ``tasks_max``: a transport that splits one source into ranges
    #: read in parallel (``postgres_input``'s ``partition_column``) makes this many.
    tasks_max: int = 1


@dataclass
class SourceReport:
    """What one discovery reports besides its work items; the framework hands a fresh
    one to the transport (``context.report``) before each ``discover`` and reads it once
    the listing is consumed."""

    #: Problems that are not a reason to stop (an object changed after it was
    #: committed, a bounded source that matches nothing, sequences removed before they
    #: were read), as ``(message, source key)``: the framework logs them and counts them
    #: as transport errors in the connector's stats.
    notices: list[tuple[str, str | None]] = field(default_factory=list)
    #: Set when the listing covered every key of the source, below the watermark too (a
    #: re-list): the time that listing started, on the source's clock, minus any safety
    #: margin. Once every item that discovery yielded is planned, the framework makes it
    #: the cursor's ``late_after`` and restarts the ``since_relist`` count; otherwise the
    #: count goes up by one.
    relisted_at: float | None = None
    #: Keys seen but held back for a later discovery (a file modified within
    #: ``min_file_age``), as ``(key, epoch seconds when readable)``, so a run that found
    #: nothing can say that something waits, and until when.
    waiting: list[tuple[str, float]] = field(default_factory=list)
    #: The source's lag: how many messages it holds that the connector has not committed
    #: yet, as this discovery saw them (a sequence source: per partition, its last
    #: sequence + 1 minus its committed position, summed). None: the transport cannot
    #: tell (files, objects, queries). The framework stores it with the connector's
    #: status (``lag`` in stats, the REST APIs and the Connectors page).
    lag: int | None = None

    def notice(self, message: str, key: str | None = None) -> None:
        """Report a problem that does not stop the discovery (see ``notices``)."""
        self.notices.append((message, key))

    def wait(self, key: str, until: float) -> None:
        """Report ``key`` as held back until ``until`` (epoch seconds)."""
        self.waiting.append((key, until))


@dataclass
class SourceContext:
    """What the framework tells a transport about where it runs: the connector it
    serves, the connector's batch limits and retry settings, and the report of the
    current discovery. ``Transport.context``; a transport built outside a connector
    (a user's ``spark.read.format(...)``, the conformance kit) gets the defaults."""

    #: The connector's name; None outside a connector.
    connector: str | None = None
    #: The name of the table the connector feeds.
    table: str = ""
    #: The connector's ``tasks_max``.
    tasks_max: int = 1
    #: The connector's ``max_batch_size`` (records per batch); None: the default.
    max_batch_size: int | None = None
    #: How transient errors of one call are retried (the connector's ``errors.retry.*``).
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    report: SourceReport = field(default_factory=SourceReport)
    #: What a stream starts after (``transports/handover.py``): set by the engine's
    #: planning discovery for a transport whose :meth:`Transport.handover_column` names
    #: a column; None elsewhere (listings without planning start from the config).
    handover: Handover | None = None

    @property
    def who(self) -> str:
        """``table.connector`` for messages, or the table alone outside a connector."""
        return f"{self.table}.{self.connector}" if self.connector else self.table

    def new_report(self) -> SourceReport:
        """A fresh report for the next discovery (the framework calls it)."""
        self.report = SourceReport()
        return self.report


__all__ = [
    "LINES_BEFORE",
    "MTIME",
    "Cursor",
    "KeyOffset",
    "Limits",
    "SourceContext",
    "SourceReport",
    "Transport",
    "WorkItem",
]


class ChangeWatch(Protocol):
    """What :meth:`Transport.watch_changes` gives a waiter while it is open."""

    def armed(self, timeout: float = ...) -> bool:
        """Waits until a change from now on would wake (False: not in ``timeout`` s)."""
        ...

    def rearm(self) -> None:
        """After a wake: listen for the next change (a watch may wake once per arm)."""
        ...


#: The largest work item a task reads ahead whole (:attr:`Transport.read_ahead`).
READ_AHEAD_BYTES = 4 << 20


class Transport(ABC):
    """A batch source. Subclasses set ``name``, ``Config`` and implement two methods."""

    name: ClassVar[str]
    Config: ClassVar[type[StrictConfig]]
    needs_format: ClassVar[bool] = True
    #: ``start``/``end`` of work items count records (message sequence numbers), not
    #: bytes, also when the transport yields bytes for a format: a read item commits at
    #: its ``end`` (it is always read whole), not at the bytes the format consumed.
    record_offsets: ClassVar[bool] = False
    #: Config fields that name an Airflow connection, with the connection type to create
    #: as the Airflow UI names it (``{"aws_conn_id": "Amazon Web Services"}``): the
    #: Airflow integration exports, checks and explains exactly these.
    connection_fields: ClassVar[Mapping[str, str]] = {}
    #: Small work items (at most :data:`READ_AHEAD_BYTES` each) a Spark task reads ahead
    #: in threads while it decodes the one before: each GET of an object store is a round
    #: trip, so a task of many small objects waits on one after the other otherwise. 0
    #: (the default): items are read one by one. A transport that sets it must read items
    #: from several threads at once (its clients built before, by the first item's read).
    read_ahead: ClassVar[int] = 0

    def __init__(self, config: StrictConfig, table: TableSpec) -> None:
        self.config = config
        self.table = table
        #: Set by the framework after construction (``catalog.transport_of``); the
        #: defaults otherwise.
        self.context = SourceContext(table=getattr(table, "name", ""))

    # The report of the current discovery and the retry settings, under the names
    # transports used before ``context`` existed.

    @property
    def report(self) -> SourceReport:
        """The current discovery's report (``context.report``)."""
        return self.context.report

    @property
    def notices(self) -> list[tuple[str, str | None]]:
        """``context.report.notices``."""
        return self.context.report.notices

    @property
    def relisted_at(self) -> float | None:
        """``context.report.relisted_at``."""
        return self.context.report.relisted_at

    @relisted_at.setter
    def relisted_at(self, value: float | None) -> None:
        self.context.report.relisted_at = value

    @property
    def waiting(self) -> list[tuple[str, float]]:
        """``context.report.waiting``."""
        return self.context.report.waiting

    @waiting.setter
    def waiting(self, value: list[tuple[str, float]]) -> None:
        self.context.report.waiting = value

    @property
    def retry(self) -> RetryPolicy:
        """``context.retry``."""
        return self.context.retry

    @retry.setter
    def retry(self, value: RetryPolicy) -> None:
        self.context.retry = value

    @classmethod
    def resolve_config(cls, raw: dict[str, object], base_dir: Path | None) -> dict[str, object]:
        """The config as written in a spec file whose folder is ``base_dir``, before
        validation: a transport whose config names local paths makes relative ones
        absolute here. The default changes nothing."""
        return raw

    @property
    def bounded(self) -> bool:
        """True when this configuration can reach end of input."""
        return True

    @abstractmethod
    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        """Yield new work items after ``cursor``, in key order, skipping in-flight keys."""

    @abstractmethod
    def read(self, item: WorkItem) -> Iterator[bytes | pa.RecordBatch]:
        """Yield the bytes of ``item`` (or record batches for integrated transports; a
        :class:`~airflow_connectors.formats.base.Decoded` block of rows and the records
        it could not read, numbered ``item.start + 1``... in the item, which the engine
        makes dead letters or the batch's failure by ``errors.tolerance``)."""

    def exhausted(self, cursor: Cursor) -> bool | None:
        """Whether all input is committed; ``None`` lets the framework decide
        (bounded and discovery found nothing new)."""
        return None

    def handover_column(self) -> str | None:
        """The column whose greatest value in the table this connector starts after (a
        stream after a backfill: ``transports/handover.py``); None (the default): none."""
        return None

    def describe(self) -> str:
        """One line for ``validate`` output."""
        return self.name

    def use_format(self, fmt: Format) -> bool:
        """Called by the engine before reading, with the connector's format. Return True
        when :meth:`read` then yields :class:`~airflow_connectors.formats.base.Decoded`
        blocks itself, decoded with ``fmt`` (a transport that adds columns of its own
        to each record, such as Kafka's partition and offset); the engine takes them as
        an integrated transport's. By default False: ``read`` yields bytes for ``fmt``."""
        return False

    def watch_paths(self) -> list[str]:
        """Local folders whose changes may mean new data: a ``new_data`` trigger (and
        the sensor's) watches them (inotify and its peers) and probes at once when
        something changes in them, rather than at its next poll; it still polls every
        ``poll_interval`` (a network filesystem may deliver no change events). Default:
        none, and the trigger polls only."""
        return []

    def watch_changes(self, wake: Callable[[], None]) -> AbstractContextManager[ChangeWatch] | None:
        """For a source that can say when something arrives (a message on a Kafka
        topic): a context in which ``wake()`` is called, from any thread, when new data
        may be there; a ``new_data`` trigger then probes at once rather than at its next
        poll (and still polls: a wake is a hint). Default: None, nothing to watch but
        :meth:`watch_paths`."""
        return None

    def lineage_datasets(self) -> list[LineageDataset]:
        """The datasets this configuration reads, named as OpenLineage names them (the
        helpers of :mod:`airflow_connectors.spec.datasets`); may resolve connections,
        never names a secret. Default: none known, and lineage names the connector
        itself (``<table>/<connector>/<transport>`` in ``connector://<pipeline>``)."""
        return []
