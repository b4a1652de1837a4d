"""What the state store hands out and takes in: typed records and the state enums.

The enums' values are what the store's columns hold; write ``.value`` to the database
(a driver may adapt an enum by its name)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

# Defined below the plan and the records, which both name connectors; re-exported.
from airflow_connectors.state.refs import ConnectorRef as ConnectorRef

if TYPE_CHECKING:
    from airflow_connectors.state.plan import BatchPlan


class BatchStatus(StrEnum):
    """A batch's place in the exactly-once protocol (column ``ac_batches.status``)."""

    #: Persisted by discovery before any data moved; re-run until it commits.
    PLANNED = "planned"
    #: Offsets, metrics and the batch committed in one transaction.
    COMMITTED = "committed"


class ConnectorStatus(StrEnum):
    """What the store records of a connector's runs (column ``ac_connectors.state``).

    Pause and stop are flags of their own; the state a user sees (Kafka Connect's, with
    PAUSED and STOPPED) is derived from both by ``engine.control.connector_view``."""

    UNASSIGNED = "UNASSIGNED"  # never planned
    RUNNING = "RUNNING"
    FAILED = "FAILED"  # the last batch failed; its trace is the fatal error
    RESTARTING = "RESTARTING"  # until the next batch commits or fails


@dataclass(frozen=True)
class ItemReceipt:
    """What reading one work item did; the commit turns it into the key's offset."""

    key: str
    offset: int  # where the next read of this key starts
    records: int  # good rows written
    bad: int  # records that failed to parse
    bytes: int
    completed: bool
    records_done: int  # records of this key committed before this batch
    #: Transport bookkeeping kept with the offset, e.g. ``{"seen": n}``: bytes up to n
    #: were looked at (a partial last line stays unread until the file grows past n).
    meta: dict[str, Any] | None = None
    #: Transient transport errors retried while reading the item (throttling, resets,
    #: timeouts); the commit adds them to the connector's ``num_transport_errors``.
    retries: int = 0
    #: The Spark executor that read the item: ``{"host": hostname, "id": executor id,
    #: "dir": its working directory}`` (``engine.reader.executor_identity``; on a
    #: standalone cluster ``dir`` is ``<worker work dir>/<app id>/<executor id>``, on
    #: ``local[*]`` the id is ``"driver"``). None: not known (a receipt made elsewhere).
    #: The commit sums the batch's receipts per executor into :attr:`Batch.executors`.
    executor: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The receipt as a dict; a Spark task sends receipts to the driver this way."""
        return self.__dict__.copy()


@dataclass(frozen=True)
class ErrorRecord:
    """One parse or transport error to keep with the connector (the last ``MAX_ERRORS``
    of each kind are kept)."""

    kind: str  # parse | transport
    message: str
    source_key: str | None = None
    record_number: int | None = None


@dataclass
class Batch:
    """A stored batch (a row of ``ac_batches``): its plan, status and, once committed,
    the attempt that won and whether its output is published."""

    batch_id: int
    ref: ConnectorRef
    status: BatchStatus
    plan: BatchPlan
    planned_records: int | None
    planned_items: int
    attempt: str | None  # the committed attempt
    published: bool
    records: int | None = None
    #: Bytes of source data the committed batch read (None while planned).
    bytes: int | None = None
    #: Records of the committed batch that failed to parse (None while planned).
    parse_errors: int | None = None
    committed_at: float | None = None
    created_at: float = 0.0
    #: Which Spark executors ran the committed batch (column ``ac_batches.executors``,
    #: since schema version 7): one entry per executor, sorted by host, dir and id,
    #: ``{"host", "id", "dir"`` (see :attr:`ItemReceipt.executor`) ``, "items": work
    #: items it read, "records": good rows it wrote}``. None while planned, and for
    #: batches committed before version 7.
    executors: list[dict[str, Any]] | None = None


@dataclass
class ConnectorState:
    """A connector's row with its buffered batches and latest errors; plain data (the
    shapes the REST API shows are made by ``engine.control``)."""

    ref: ConnectorRef
    paused: bool | None = None
    end_of_input: bool = False
    total_records: int = 0
    total_bytes: int = 0
    num_parse_errors: int = 0
    num_transport_errors: int = 0
    fatal_error: str | None = None
    state: ConnectorStatus = ConnectorStatus.UNASSIGNED
    stopped: bool = False
    finished_at: float | None = None
    #: The source's lag as the latest discovery measured it: messages it holds that are
    #: not committed (a sequence source's ``SourceReport.lag``); None where the
    #: transport cannot tell, or before the first discovery that measured it.
    lag: int | None = None
    buffered_records: int = 0
    #: Bytes the planned batches read (those whose work items all have a known size):
    #: planned, not committed (Feldera's ``buffered_bytes``).
    buffered_bytes: int = 0
    buffered_batches: int = 0
    parse_errors: list[dict[str, Any]] = field(default_factory=list)
    transport_errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        """Feldera's test: end of input and nothing planned-but-uncommitted."""
        return self.end_of_input and self.buffered_batches == 0


class ConnectorNotStopped(RuntimeError):
    """Offsets change only while the connector is stopped."""


class ConnectorStopped(RuntimeError):
    """A stopped connector plans nothing and runs only after ``resume``."""
