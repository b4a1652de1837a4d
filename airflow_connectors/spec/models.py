"""Validated, immutable pipeline-spec models (layer 1: no Airflow, no Spark).

The JSON shape of a connector is Feldera's (``name``, ``paused``, ``labels``,
``start_after``, ``transport``, ``format``, ``max_batch_size``) plus ours (``tasks_max``,
``trigger``, ``errors``, Spark's file-packing settings ``max_partition_bytes`` and
``open_cost_bytes``, and ``execution``: spark-submit or a Spark Connect server).
"""

from __future__ import annotations

import datetime
import functools
import re
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import AliasChoices, ConfigDict, Field, field_validator, model_validator

from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.types import SqlType

if TYPE_CHECKING:
    import pyarrow as pa

# The rules below are checked where specs are validated (spec.validate), not by the models,
# which also read connectors back from batch plans stored by earlier versions.

#: Pipeline, table and connector names: they name folders, DAGs and state-store rows.
#: Checked with :func:`re.fullmatch` (``$`` would accept a trailing newline).
NAME_PATTERN = r"[a-zA-Z0-9_-]{1,100}"
NAME_RULE = "1 to 100 characters of letters, digits, '_' and '-'"
CONNECTOR_NAME_PATTERN = NAME_PATTERN
#: A label becomes the Airflow DAG tag ``label:<label>``, which Airflow caps at 100.
MAX_LABEL_LENGTH = 94
_LABEL = re.compile(rf"[^\s\x00-\x1f\x7f]{{1,{MAX_LABEL_LENGTH}}}")
#: Column names may be quoted SQL identifiers (spaces allowed) but no control characters.
_COLUMN_NAME = re.compile(r"[^\x00-\x1f\x7f]+")


def is_valid_name(name: str) -> bool:
    """Whether ``name`` is a valid pipeline, table or connector name."""
    return re.fullmatch(NAME_PATTERN, name) is not None


def is_valid_column_name(name: str) -> bool:
    """Whether ``name`` is a valid column name: any non-empty text without control
    characters, so quoted SQL identifiers with spaces pass."""
    return _COLUMN_NAME.fullmatch(name) is not None


def is_valid_label(label: str) -> bool:
    """Whether ``label`` can be a connector label (see :data:`LABEL_RULE`)."""
    return _LABEL.fullmatch(label) is not None


LABEL_RULE = (
    f"1 to {MAX_LABEL_LENGTH} characters without spaces or control characters (it becomes "
    "the Airflow DAG tag 'label:<label>', at most 100 characters)"
)


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> datetime.timedelta:
    """``"2h"``, ``"30m"``, ``"90s"``, ``"1d"`` or ``"45"`` (seconds) as a timedelta."""
    m = _DURATION.fullmatch(text)
    if m is None:
        raise ValueError(
            f"{text!r} is not a duration; expected a number with a unit s, m, h or d "
            "such as '2h' or '30m'"
        )
    return datetime.timedelta(seconds=float(m.group(1)) * _UNIT_SECONDS[m.group(2) or "s"])


def _labels(value: Any) -> Any:
    # Feldera's docs write both "labels": "price.backfill" and "labels": ["a", "b"].
    if isinstance(value, str):
        return (value,)
    return value


def _unseal_config(cls: type, value: Any) -> Any:
    """A config as stored (secrets sealed, :mod:`.sealed`) with its secrets opened: in
    memory a spec always holds the real values."""
    from airflow_connectors.spec.sealed import unseal

    return unseal(value)


class TransportSpec(StrictConfig):
    """``{name, config}``: which transport reads the data and its settings."""

    name: str
    config: dict[str, Any] = Field(default_factory=dict)

    _unsealed = field_validator("config", mode="before")(_unseal_config)


class FormatSpec(StrictConfig):
    """``{name, config}``: how the transport's bytes become records."""

    name: str
    config: dict[str, Any] = Field(default_factory=dict)

    _unsealed = field_validator("config", mode="before")(_unseal_config)


class ErrorsSpec(StrictConfig):
    """Kafka Connect's ``errors.*`` settings. ``tolerance``: ``none`` fails the batch on
    the first bad record; ``all`` sends bad records to the table's dead-letter table.
    ``retry.timeout`` and ``retry.delay.max.ms``: how transient transport errors
    (throttling, 5xx answers, connection resets, timeouts) are retried with capped
    exponential backoff before the batch fails. Written with Kafka Connect's dotted
    names (``retry.timeout``) or as ``retry_timeout``/``retry_delay_max_ms``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    tolerance: Literal["none", "all"] = "none"
    retry_timeout: int = Field(
        default=60_000,
        ge=-1,
        validation_alias=AliasChoices("retry.timeout", "retry_timeout"),
        serialization_alias="retry.timeout",
        description="Milliseconds one read or listing call may spend retrying transient "
        "errors (Kafka Connect's errors.retry.timeout); 0: never retry, -1: retry forever. "
        "The default is one minute, not Kafka Connect's 0: a batch ingest that fails on the "
        "first throttled request (S3 SlowDown) or connection reset re-reads its whole batch "
        "on the next run, while a minute covers throttling bursts and server restarts and "
        "still fails a batch whose source is really down.",
    )
    retry_delay_max_ms: int = Field(
        default=10_000,
        ge=0,
        validation_alias=AliasChoices("retry.delay.max.ms", "retry_delay_max_ms"),
        serialization_alias="retry.delay.max.ms",
        description="The longest wait between two retries, in milliseconds (Kafka "
        "Connect's errors.retry.delay.max.ms); the waits double from 100 ms up to it, "
        "each drawn at random below its cap (full jitter).",
    )


#: Airflow's cron presets (``airflow.utils.dates.cron_presets``).
CRON_PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
}


@functools.lru_cache(maxsize=256)
def _valid_cron(expression: str) -> bool:
    """Whether croniter reads ``expression``; once per expression (a pipeline's
    thousands of connectors share a handful of schedules)."""
    from croniter import croniter

    return bool(croniter.is_valid(expression))


class TriggerSpec(StrictConfig):
    """When discovery runs under Airflow (Pulsar's triggerers).

    ``schedule``: a cron expression or preset (``@hourly``...): a ``CronTriggerTimetable``.
    ``on: new_data``: an event trigger polls the source every ``poll_interval`` seconds
    and starts a run only when discovery would find something new. Both may be given (a
    run on either). Neither: manual runs only (and ``start_after`` asset events).
    ``start_date``: the first logical date the schedule and backfills may use.
    """

    schedule: str | None = None
    on: Literal["new_data"] | None = None
    poll_interval: float | None = Field(default=None, gt=0)
    start_date: datetime.date | None = None
    #: A date-sliced (scheduled) connector whose runs are Airflow partitions: its
    #: finished event is a partitioned asset event carrying the slice's key, and
    #: ``airflow backfill create`` makes one run per partition (needs ``schedule``).
    partitioned: bool = False

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if value.startswith("@") and value not in CRON_PRESETS:
            raise ValueError(
                f"unknown cron preset {value!r}; use one of {', '.join(CRON_PRESETS)} or a cron expression such as '*/5 * * * *'"
            )
        if not _valid_cron(CRON_PRESETS.get(value, value)):
            raise ValueError(
                f"{value!r} is not a cron expression; expected 5 fields (minute hour day month weekday) such as '0 * * * *', or a preset ({', '.join(CRON_PRESETS)})"
            )
        return value

    @model_validator(mode="after")
    def _poll_needs_event(self) -> TriggerSpec:
        if self.poll_interval is not None and self.on != "new_data":
            raise ValueError("poll_interval applies to event triggers only; add on: new_data")
        return self

    @property
    def poll_seconds(self) -> float:
        """Seconds between polls: ``poll_interval``, or :data:`DEFAULT_POLL_INTERVAL`."""
        return self.poll_interval or DEFAULT_POLL_INTERVAL


#: Seconds between polls of an ``on: new_data`` trigger when ``poll_interval`` is unset.
DEFAULT_POLL_INTERVAL = 30.0


#: Where a connector's batches run (``ConnectorSpec.execution``, ``[connectors] execution``).
Execution = Literal["spark_submit", "spark_connect"]
EXECUTIONS: tuple[str, ...] = get_args(Execution)

#: Spark's ``spark.sql.files.maxPartitionBytes`` and ``openCostInBytes`` defaults.
DEFAULT_MAX_PARTITION_BYTES = 128 << 20
#: Opening a file or object costs this engine's Python reader about what reading 128 KiB
#: does (Spark's JVM file source reckons 4 MiB): 2,000 small files pack into 2 tasks on
#: 2 cores, not 63, and land in 2.4 s, not 7.9 s (bench/smallfiles.py).
DEFAULT_OPEN_COST_BYTES = 128 << 10


class ConnectorSpec(StrictConfig):
    """One input connector of a table."""

    name: str
    paused: bool = False
    labels: tuple[str, ...] = ()
    start_after: tuple[str, ...] | None = None
    transport: TransportSpec
    format: FormatSpec | None = None
    max_batch_size: int | None = Field(default=None, gt=0)
    tasks_max: int = Field(default=1, ge=1, le=1000)
    trigger: TriggerSpec | None = None
    errors: ErrorsSpec = ErrorsSpec()
    max_partition_bytes: int = Field(
        default=DEFAULT_MAX_PARTITION_BYTES,
        gt=0,
        description="Input bytes one Spark task of a batch reads at most (Spark's "
        "spark.sql.files.maxPartitionBytes): the batch's work items are packed in key "
        "order into tasks of up to this many bytes, each item weighing its size plus "
        "open_cost_bytes, so many small files share a task and a table file. Default "
        "128 MiB.",
    )
    open_cost_bytes: int = Field(
        default=DEFAULT_OPEN_COST_BYTES,
        ge=0,
        description="What opening one work item is estimated to cost, in bytes (Spark's "
        "spark.sql.files.openCostInBytes), added to each item's size when packing items "
        "into tasks. Default 128 KiB (Spark's is 4 MiB: opening a file costs this "
        "engine's reader less).",
    )

    execution: Execution | None = Field(
        default=None,
        description="Where the connector's batches run: spark_submit (a spark-submit, "
        "a new Spark application, per batch) or spark_connect (the ingest task is a client "
        "of a warm Spark Connect server, the Airflow connection [connectors] "
        "spark_connect_conn_id or [connectors] spark_connect_url). Default: [connectors] "
        "execution, itself spark_submit by default.",
    )

    #: An Airflow deadline alert fires when no batch of this connector has committed
    #: within this time (``"2h"``, ``"30m"``, ``"90s"``, ``"1d"`` or seconds).
    freshness: datetime.timedelta | None = None

    _split_labels = field_validator("labels", "start_after", mode="before")(_labels)

    @field_validator("freshness", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        # ISO 8601 ("PT2H", how the model dumps it to JSON) is pydantic's own format.
        if isinstance(value, str) and not value.lstrip().upper().startswith("P"):
            return parse_duration(value)
        return value


class ColumnSpec(StrictConfig):
    """One column of a table: name, SQL type and whether it may be NULL."""

    name: str
    type: SqlType
    nullable: bool = True

    def __str__(self) -> str:
        return f"{self.name} {self.type}{'' if self.nullable else ' NOT NULL'}"


class SinkSpec(StrictConfig):
    """Where a table's rows go. Default: a Parquet table under the warehouse."""

    name: str = "parquet"
    config: dict[str, Any] = Field(default_factory=dict)

    _unsealed = field_validator("config", mode="before")(_unseal_config)


#: How a table's schema follows its data (Auto Loader's ``schemaEvolutionMode``).
SchemaEvolution = Literal["add_new_columns", "rescue", "fail_on_new_columns", "none"]
#: The column that holds, as JSON, what ``schema_evolution: rescue`` could not place.
RESCUED_DATA = "_rescued_data"


class TableSpec(StrictConfig):
    """A table: its columns, the sink its rows go to and the connectors that fill it.

    ``columns`` may be omitted: the first discovery infers them from a sample of the
    data (``schema_hints`` pin the types of named columns) and stores them as schema
    version 1. ``schema_evolution`` says what a batch does with fields the table lacks.
    """

    name: str
    columns: tuple[ColumnSpec, ...] = ()
    sink: SinkSpec = SinkSpec()
    connectors: tuple[ConnectorSpec, ...] = ()
    #: ``column -> SQL type`` pinned when the schema is inferred (``{"id": "BIGINT"}``).
    schema_hints: dict[str, str] = Field(default_factory=dict)
    #: None: ``add_new_columns`` for an inferred schema, ``none`` for declared columns.
    schema_evolution: SchemaEvolution | None = None
    #: The columns that identify a row: a keyed table takes changes (upserts, updates,
    #: deletes; :mod:`airflow_connectors.changes`) instead of appending rows.
    primary_key: tuple[str, ...] = ()
    #: The column that orders two changes of one key (a Kafka offset, an LSN, an
    #: ``updated_at``); None: the order the changes arrive in (batch, then record).
    sequence_by: str | None = None
    #: 1: the table holds each key's latest row; 2: it keeps history (``__start_at``,
    #: ``__end_at``).
    scd_type: Literal[1, 2] = 1
    #: How long a deleted key's sequence is remembered, so that an older change of it
    #: arriving later does not bring the row back (Databricks' tombstone threshold).
    tombstone_retention: datetime.timedelta = datetime.timedelta(days=7)

    @field_validator("tombstone_retention", mode="before")
    @classmethod
    def _retention(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.lstrip().upper().startswith("P"):
            return parse_duration(value)
        return value

    @property
    def keyed(self) -> bool:
        """Whether the table declares a primary key (it takes changes)."""
        return bool(self.primary_key)

    @property
    def infers_schema(self) -> bool:
        """Whether the columns are inferred from the data (none were declared)."""
        return not self.columns

    @property
    def evolution(self) -> str:
        """The effective ``schema_evolution`` mode (see the field)."""
        if self.schema_evolution is not None:
            return self.schema_evolution
        return "add_new_columns" if self.infers_schema else "none"

    def connector(self, name: str) -> ConnectorSpec:
        """The connector called ``name``; raises ``KeyError`` naming the table's connectors."""
        for c in self.connectors:
            if c.name == name:
                return c
        raise KeyError(
            f"table {self.name!r} has no connector {name!r}; "
            f"its connectors: {', '.join(c.name for c in self.connectors) or '(none)'}"
        )

    @property
    def column_names(self) -> list[str]:
        """The column names in declaration order."""
        return [c.name for c in self.columns]

    def arrow_schema(self) -> pa.Schema:
        """The table's columns as the Arrow schema every format decodes into and every
        sink writes. pyarrow is imported here, not with the spec: DAG files import the
        spec and must parse fast."""
        import pyarrow as pa

        return pa.schema(
            [pa.field(c.name, c.type.arrow(), nullable=c.nullable) for c in self.columns]
        )


class PipelineSpec(StrictConfig):
    """A pipeline: a named set of tables; ``source`` is the spec file it came from, if any."""

    name: str
    tables: tuple[TableSpec, ...]
    source: str | None = None

    def table(self, name: str) -> TableSpec:
        """The table called ``name``; raises ``KeyError`` naming the pipeline's tables."""
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(
            f"pipeline {self.name!r} has no table {name!r}; its tables: "
            f"{', '.join(t.name for t in self.tables)}"
        )

    def connectors(self) -> list[tuple[TableSpec, ConnectorSpec]]:
        """Every connector of the pipeline with its table, in declaration order."""
        return [(t, c) for t in self.tables for c in t.connectors]

    def find(self, endpoint: str) -> tuple[TableSpec, ConnectorSpec]:
        """Look up ``table.connector``."""
        table, _, connector = endpoint.partition(".")
        if not connector:
            raise KeyError(f"expected TABLE.CONNECTOR, got {endpoint!r}")
        t = self.table(table)
        return t, t.connector(connector)
