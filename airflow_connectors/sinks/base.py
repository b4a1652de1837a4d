"""The sink contract: stage a batch's rows from the executors, publish it once the batch
is committed. Re-running a batch replaces its staged output, never duplicates it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.datasets import LineageDataset, storage_dataset

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.spec.models import TableSpec

Kind = Literal["rows", "errors"]
KINDS: tuple[Kind, ...] = ("rows", "errors")


def errors_schema() -> pa.Schema:
    """The Arrow schema of a dead-letter table, whatever the sink: one row per record
    that could not be ingested, with where it came from, its raw text and the error."""
    import pyarrow as pa

    return pa.schema(
        [
            ("connector", pa.string()),
            ("source_key", pa.string()),
            ("record_number", pa.int64()),
            ("line_number", pa.int64()),
            ("raw_text", pa.string()),
            ("error", pa.string()),
            ("batch_id", pa.int64()),
        ]
    )


class SinkConfig(StrictConfig):
    """Settings every sink has; a sink's ``Config`` subclasses it."""

    target_file_size: int = Field(
        default=128 << 20,
        gt=0,
        description="Bytes a table file (part) should reach before the next one is "
        "started: a batch of many small inputs yields few files of about this size, "
        "not one file per input. Default 128 MiB.",
    )


class SinkUnwritable(RuntimeError):
    """The sink's location cannot be written (a read-only folder, a file where a folder
    should be). One line that names the path and says what to do; raised by sinks from
    ``prepare`` (on the driver, before Spark starts), part writers and ``publish``."""


class PartWriter(ABC):
    """Writes one work item's rows (or dead letters) of one batch attempt."""

    @abstractmethod
    def write(self, table: pa.Table) -> None:
        """Append rows with the table's Arrow schema; called once per decoded chunk, so
        a part is written in several calls before :meth:`close`."""

    @abstractmethod
    def close(self) -> int:
        """Finish the part; returns rows written."""

    def abort(self) -> None:  # noqa: B027 - optional hook: staged output is discarded anyway
        """Drop what was written: the work item is skipped (``errors.tolerance: all``
        and an object that cannot be decoded). The attempt's ``discard`` removes it too."""


class Sink(ABC):
    """Where a table's rows go. Subclasses set ``name`` and ``Config`` and implement
    the staged-write protocol: ``prepare`` an attempt, ``writer`` per part inside Spark,
    then ``publish`` once the batch commits, or ``discard`` the attempt's output.
    ``publish`` is called again after a crash, so it must be idempotent."""

    name: ClassVar[str]
    Config: ClassVar[type[StrictConfig]]
    #: Config fields that name an Airflow connection, with the connection type as the
    #: Airflow UI names it (``{"postgres_conn_id": "Postgres"}``), as for transports.
    connection_fields: ClassVar[Mapping[str, str]] = {}
    #: Whether the sink applies a keyed table's changes (:mod:`.changes`): upserts,
    #: deletes and truncates by ``primary_key``. False: it only appends, and spec
    #: validation refuses a keyed table on it, naming the sinks that apply changes.
    applies_changes: ClassVar[bool] = False
    #: The connector whose batch this sink writes: set by the engine on a batch's sink
    #: (None on a sink built only to read the table). Sinks that record batches in the
    #: table itself (Delta's app transactions) key them by it.
    connector: str | None = None
    #: The state store's database URL, set by the engine on the driver (prepare, publish;
    #: None inside Spark executors). Sinks that keep a catalog in that database (the
    #: Iceberg SQL catalog) use it. Holds a password: never log or show it.
    state_store_url: str | None = None

    def __init__(
        self, config: StrictConfig, *, pipeline: str, table: TableSpec, warehouse: str
    ) -> None:
        self.config = config
        self.pipeline = pipeline
        self.table = table
        self.warehouse = warehouse

    @abstractmethod
    def location(self, kind: Kind = "rows") -> str:
        """Where the table (or its dead-letter table) can be read."""

    def lineage_dataset(self, kind: Kind = "rows") -> LineageDataset:
        """The table (or its dead-letter table) as OpenLineage names it, without a
        secret. Default: the storage location (:meth:`location`) of a folder or URL."""
        return storage_dataset(self.location(kind))

    @abstractmethod
    def prepare(self, batch_id: int, attempt: str) -> None:
        """Before an attempt writes: remove anything an earlier attempt of it left.
        Raises :class:`SinkUnwritable` when the sink cannot be written at all."""

    @abstractmethod
    def writer(self, batch_id: int, attempt: str, part: int, kind: Kind) -> PartWriter:
        """A writer for one part; runs inside Spark executors."""

    def staged_folder(self, batch_id: int, attempt: str, kind: Kind) -> str | None:
        """The folder (path or URL) where ``attempt`` stages its Parquet parts of
        ``kind``, the files its publish lists: the engine combines the small ones there
        before the batch commits (:mod:`.combine`). None (the default): the sink stages
        no Parquet files (a database's staging table)."""
        return None

    @abstractmethod
    def publish(self, batch_id: int, attempt: str) -> None:
        """Make a committed attempt visible. Idempotent: called again after a crash."""

    @abstractmethod
    def discard(self, batch_id: int, attempt: str | None = None) -> None:
        """Drop staged output of an attempt (or every attempt of the batch)."""

    def schema(self, kind: Kind = "rows") -> pa.Schema:
        """The Arrow schema of the table's rows (or of its dead letters,
        :func:`errors_schema`) as the sink stores them."""
        return self.table.arrow_schema() if kind == "rows" else errors_schema()

    def unstorable(self, table: pa.Table) -> list[tuple[int, str]]:
        """The rows of ``table`` (in the table's Arrow schema) that this sink cannot
        store although the table's columns hold them, found before anything is written:
        ``(row index, why)`` per such row, ``why`` naming the column and the value. The
        engine asks before writing each block: each such row is that record's dead
        letter (``errors.tolerance: all``) or the batch's failure naming it. Default:
        none."""
        return []

    def read(self, kind: Kind = "rows") -> pa.Table | None:
        """The table's rows (or dead letters) as a reader sees them now; None when it has
        none yet. For summaries (the CLI's run) and tests. Default: the Parquet files
        directly in :meth:`location`; table formats read through their own metadata.
        Raises OSError or ValueError (one line) when the location cannot be read."""
        from airflow_connectors.sinks._fs import parquet_dataset

        dataset = parquet_dataset(self.location(kind))
        return None if dataset is None else dataset.to_table()

    def count_rows(self, kind: Kind = "rows") -> int | None:
        """How many rows (or dead letters) :meth:`read` would give, without reading them
        where the table's metadata says (the CLI's summary after a run counted whole
        tables by reading them); None when it has none yet. Default: the Parquet files'
        footers, or the rows of :meth:`read` for a sink that reads its own way."""
        if type(self).read is not Sink.read:
            data = self.read(kind)
            return None if data is None else data.num_rows
        from airflow_connectors.sinks._fs import parquet_dataset

        dataset = parquet_dataset(self.location(kind))
        return None if dataset is None else dataset.count_rows()

    def column_max(self, column: str) -> object | None:
        """The greatest non-null value of ``column`` in the table's rows now (a stream's
        hand-over point after a backfill, ``transports/handover.py``); None when the
        table holds no such value. Default: that column of the Parquet files (a sink
        reading through :meth:`read` as this class does), else through its own
        :meth:`read`; raises ValueError in one line when the table lacks the column."""
        import pyarrow.compute as pc

        from airflow_connectors.sinks._fs import parquet_dataset

        if type(self).read is Sink.read:  # plain Parquet files: read that column only
            dataset = parquet_dataset(self.location())
            names = [] if dataset is None else dataset.schema.names
            rows = None if dataset is None or column not in names else dataset.to_table([column])
            if dataset is not None and rows is None:
                rows = dataset.head(0)  # the column is missing: say so below
        else:
            rows = self.read()
        if rows is None or (rows.num_rows == 0 and column in rows.column_names):
            return None
        if column not in rows.column_names:
            raise ValueError(
                f"table {self.table.name} ({self.location()}) has no column {column!r}; "
                "name one of its columns in handover.column"
            )
        greatest: object | None = pc.max(rows.column(column)).as_py()
        return greatest
