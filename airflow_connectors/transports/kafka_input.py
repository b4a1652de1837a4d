"""``kafka_input``: the messages of one Kafka topic, read as offset ranges per partition.

A sequence source (:mod:`.sequence`): each partition of the topic is an offsets key
``<topic>/<partition>``; a work item is a range of its offsets, read by one Spark task
through a confluent-kafka consumer that is *assigned* the partition at the range's first
offset (no group membership, no rebalance, no offset commits while reading), so a re-run
after a crash reads exactly the same range and every message lands once. The framework
plans the ranges up to each partition's end, keeps the committed position per partition
(which commits with the batch), fixes a bounded read's end and reports holes.

- **Ends.** A partition's end is its high watermark, or, read ``read_committed`` (the
  default ``isolation.level``), its last stable offset: an open transaction's messages
  are planned only once it ended. Offsets of aborted transactions, transaction markers
  and compacted-away messages are holes inside a range: the consumer skips them, and the
  read ends at the range's last offset, at the first message after it, or at the
  partition's end (``enable.partition.eof``), never waiting for a missing offset.
- **Deleted by retention.** A committed position below the partition's first offset
  (its messages were deleted before this connector read them) fails discovery in one
  line naming the topic, partition and offsets; ``on_missing: skip`` (or Feldera's
  ``resume_earliest_if_data_expires: true``) skips them instead, counted as transport
  errors.
- **Start.** ``start_from`` decides where a partition nothing of which is committed
  starts: ``earliest``, ``latest`` (the end at the connector's first discovery, pinned
  by an empty range that commits it, so messages produced later are read even when the
  connector waits for a ``start_after`` label), ``{offsets: [...]}`` (one per
  partition, in the order of ``partitions``) or ``{timestamp: ms}`` (the first message
  at or after it, Kafka's ``offsetsForTimes``).
- **Consumer group.** After commits, every discovery writes the committed positions to
  the consumer group ``group.id`` when it is given (``kafka-consumer-groups.sh
  --describe`` then shows the connector's lag); the state store stays the truth.
- **Messages.** Each message's value, followed by a line end unless it ends with one,
  is what ``read`` yields to the connector's format (JSON, CSV, raw: one message is
  one or more records). A message without a value (a tombstone) is no record.
- **Errors.** Transient broker errors (a reset connection, a timeout, a leader that is
  moving, a restarted broker) are retried under the connector's ``errors.retry.*``
  settings; a read resumes after the last message it delivered. Permanent ones (no
  such topic, authentication, authorization) fail at once, in one line without
  secrets.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from airflow_connectors.connections import kafka as _kafka
from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.datasets import LineageDataset
from airflow_connectors.spec.redact import is_secret_option, mask_text
from airflow_connectors.transports import retry
from airflow_connectors.transports.base import ChangeWatch, Cursor, Limits, WorkItem
from airflow_connectors.transports.handover import first_after
from airflow_connectors.transports.sequence import Partition, SequenceSource

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_connectors.formats.base import Decoded, Format, RecordError
    from airflow_connectors.spec.models import TableSpec

log = logging.getLogger(__name__)

NAME = "kafka_input"
#: Keys without a dot that librdkafka takes (Feldera accepts exactly these).
_UNDOTTED = frozenset({"debug", "enabled_events", "retries"})
#: Settings the connector owns: what a user gives is replaced.
_OWNED = frozenset(
    {"enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset", "enable.partition.eof"}
)
#: Messages asked of librdkafka per ``consume`` call.
CONSUME_BATCH = 10_000


#: Kafka metadata a message's rows can carry (Spark's Kafka source's column names).
METADATA_FIELDS = ("key", "topic", "partition", "offset", "timestamp", "headers")
MetadataField = Literal["key", "topic", "partition", "offset", "timestamp", "headers"]
#: The column types each metadata field fits.
METADATA_TYPES = {
    "key": ("VARCHAR",),
    "topic": ("VARCHAR",),
    "partition": ("INT", "BIGINT"),
    "offset": ("BIGINT",),
    "timestamp": ("TIMESTAMP",),
    "headers": ("VARCHAR",),
}


class StartOffsets(StrictConfig):
    """``{offsets: [...]}``: the first offset of each partition."""

    offsets: tuple[int, ...] = Field(
        min_length=1,
        description="The first offset to read of each partition, in the order of "
        "partitions (or of the topic's partitions 0, 1, ...).",
    )

    @model_validator(mode="after")
    def _not_negative(self) -> StartOffsets:
        if any(o < 0 for o in self.offsets):
            raise ValueError("offsets must be 0 or more")
        return self


class StartTimestamp(StrictConfig):
    """``{timestamp: ms}``: the first message at or after this time."""

    timestamp: int = Field(
        ge=0, description="Milliseconds since the epoch: start at the first message at or after it."
    )


class HandoverConfig(StrictConfig):
    """``handover: {column: c}``: start after the greatest ``c`` the table holds
    (``transports/handover.py``)."""

    column: str = Field(
        min_length=1,
        description="A top-level field of each message's JSON value and a column of the "
        "table, growing in the order rows are written and messages produced.",
    )


class KafkaInputConfig(StrictConfig):
    """Feldera's ``kafka_input`` config: the topic, librdkafka settings with dotted keys
    (``bootstrap.servers`` required, unless ``kafka_config_id`` names an Airflow Kafka
    connection that gives it), where to start, and which partitions."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    topic: str = Field(
        min_length=1,
        max_length=249,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="The topic to read (it must exist).",
    )
    start_from: Literal["earliest", "latest"] | StartOffsets | StartTimestamp = Field(
        default="earliest",
        description="Where a partition nothing of which is committed starts: 'earliest' "
        "(its first message), 'latest' (its end at the connector's first discovery), "
        "{offsets: [..]} or {timestamp: ms}. After that the committed offsets decide.",
    )
    partitions: tuple[int, ...] | None = Field(
        default=None,
        description="Read only these partitions (numbers); unset: every partition.",
    )
    follow: bool | None = Field(
        default=None,
        description="true (the default): never end; every discovery plans the messages "
        "produced since. false (or enable.partition.eof: true): read up to the ends the "
        "first discovery saw, then end the input.",
    )
    kafka_config_id: str | None = Field(
        default=None,
        description="An Airflow connection of type Apache Kafka (apache-airflow-providers-"
        "apache-kafka) whose extra holds librdkafka settings; settings given here win.",
    )
    on_missing: Literal["fail", "skip"] = Field(
        default="fail",
        description="Messages deleted by retention before they were read: 'fail' "
        "(discovery fails naming the topic, partition and offsets) or 'skip' (skipped "
        "and counted as transport errors).",
    )
    inactivity_timeout_secs: float = Field(
        default=60,
        gt=0,
        description="Seconds a read waits for the next message of its range before it "
        "retries (a broker restart) or fails.",
    )
    log_level: str | None = Field(
        default=None,
        description="librdkafka's log level (Feldera's; librdkafka's 'log_level' 0-7).",
    )
    group_join_timeout_secs: float | None = Field(
        default=None, description="Accepted for Feldera configs; unused (no group is joined)."
    )
    poller_threads: int | None = Field(
        default=None, description="Accepted for Feldera configs; unused (one consumer per range)."
    )
    handover: HandoverConfig | None = Field(
        default=None,
        description="Start after a backfill of the same table: {column: c}, a field of "
        "each message's JSON value. At the first discovery each partition starts at its "
        "first message whose c is greater than the table's greatest c (an empty table: "
        "start_from decides). c must grow in the order rows became visible to the "
        "backfill and in each partition's message order.",
    )
    resume_earliest_if_data_expires: bool = Field(
        default=False,
        description="Feldera's name for on_missing: skip (true skips deleted messages).",
    )

    include_key: bool = Field(
        default=False, description="Add each message's key (UTF-8 text) as column key."
    )
    include_topic: bool = Field(default=False, description="Add the topic as column topic.")
    include_partition: bool = Field(
        default=False, description="Add the message's partition as column partition."
    )
    include_offset: bool = Field(
        default=False, description="Add the message's offset as column offset."
    )
    include_timestamp: bool = Field(
        default=False, description="Add the message's timestamp as column timestamp."
    )
    include_headers: bool = Field(
        default=False,
        description="Add the message's headers as column headers: a JSON array of "
        '{"key": ..., "value": ...} (values as UTF-8 text), as Spark\'s Kafka source lists them.',
    )
    metadata: dict[MetadataField, str] = Field(
        default_factory=dict,
        description="Kafka metadata into columns of other names: {offset: kafka_offset, "
        "partition: kafka_partition, ...} (key, topic, partition, offset, timestamp, "
        "headers). The table declares each column: key, topic and headers VARCHAR, "
        "partition INT or BIGINT, offset BIGINT, timestamp TIMESTAMP.",
    )

    @property
    def metadata_columns(self) -> dict[str, str]:
        """Metadata field -> column: ``metadata`` and the ``include_*`` flags."""
        found: dict[str, str] = {
            name: name
            for name in METADATA_FIELDS
            if getattr(self, f"include_{name}") and name not in self.metadata
        }
        found.update({str(k): v for k, v in self.metadata.items()})
        return found

    @field_validator("start_from", mode="before")
    @classmethod
    def _one_start(cls, v: Any) -> Any:
        """One line for a start of the wrong shape (not pydantic's error per union arm)."""
        if v in ("earliest", "latest"):
            return v
        if isinstance(v, StartOffsets | StartTimestamp):
            return v
        if isinstance(v, Mapping) and len(v) == 1 and next(iter(v)) in ("offsets", "timestamp"):
            from pydantic import ValidationError

            model = StartOffsets if "offsets" in v else StartTimestamp
            try:
                return model.model_validate(v)
            except ValidationError as e:
                first = e.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or next(iter(v))
                text = str(first["msg"]).removeprefix("Value error, ")
                raise ValueError(f"{where}: {text[:1].lower()}{text[1:]}") from None
        raise ValueError(
            f"{v!r} is no start: expected 'earliest', 'latest', {{offsets: [o0, o1, ...]}} "
            "or {timestamp: <milliseconds since the epoch>}"
        )

    @model_validator(mode="before")
    @classmethod
    def _legacy_topics(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "topics" in data and "topic" not in data:
            topics = data["topics"]
            if not isinstance(topics, list | tuple) or len(topics) != 1:
                raise ValueError(
                    "topics: give exactly one topic (or use topic: <name>); one connector "
                    "reads one topic"
                )
            data = {k: v for k, v in data.items() if k != "topics"}
            data["topic"] = topics[0]
        if isinstance(data, Mapping):
            _unknown_keys(cls, data)
        return data

    @model_validator(mode="after")
    def _options(self) -> KafkaInputConfig:
        for key, value in (self.model_extra or {}).items():
            if key == "group.id" and not str(value).strip():
                raise ValueError("group.id is empty; remove it or name the consumer group")
            if not isinstance(value, str | int | float | bool):
                raise ValueError(f"{key}: expected a text, number or boolean librdkafka value")
        if "bootstrap.servers" not in self.options and self.kafka_config_id is None:
            raise ValueError(
                "bootstrap.servers is required (the brokers, host:port,...), or name an "
                "Airflow Kafka connection in kafka_config_id"
            )
        if self.partitions is not None and (
            len(set(self.partitions)) != len(self.partitions) or min(self.partitions) < 0
        ):
            raise ValueError("partitions: give distinct partition numbers, 0 or more")
        if (
            isinstance(self.start_from, StartOffsets)
            and self.partitions is not None
            and len(self.start_from.offsets) != len(self.partitions)
        ):
            raise ValueError(
                f"start_from.offsets has {len(self.start_from.offsets)} offsets for "
                f"{len(self.partitions)} partitions; give one per partition"
            )
        isolation = self.options.get("isolation.level", "read_committed")
        if isolation not in ("read_committed", "read_uncommitted"):
            raise ValueError("isolation.level: expected read_committed or read_uncommitted")
        return self

    def __repr_args__(self) -> Any:
        # The model's repr (and str) mask the secret librdkafka settings, as describe() does.
        for name, value in super().__repr_args__():
            yield name, "***" if name and is_secret_option(name) else value

    @property
    def options(self) -> dict[str, str]:
        """The librdkafka settings given in the config, as text."""
        return {k: _kafka.as_text(v) for k, v in (self.model_extra or {}).items()}

    @property
    def bounded(self) -> bool:
        """``follow: false``, or ``enable.partition.eof: true`` without ``follow``."""
        if self.follow is not None:
            return not self.follow
        return self.options.get("enable.partition.eof", "false").lower() == "true"

    @property
    def skip_missing(self) -> bool:
        """Deleted messages are skipped (counted), not an error."""
        return self.on_missing == "skip" or self.resume_earliest_if_data_expires


def _unknown_keys(config: type[KafkaInputConfig], data: Mapping[str, Any]) -> None:
    """A key that is neither a field nor a librdkafka setting (a dotted name) fails at
    its own path, as an unknown key of a strict config does."""
    from pydantic import ValidationError
    from pydantic_core import InitErrorDetails, PydanticCustomError

    known = set(config.model_fields) | {f.alias for f in config.model_fields.values() if f.alias}
    bad = [
        InitErrorDetails(
            type=PydanticCustomError(
                "extra_forbidden",
                "unknown field '{key}': kafka_input takes its own fields and librdkafka "
                "settings, whose names have a dot (bootstrap.servers, security.protocol...)",
                {"key": key},
            ),
            loc=(key,),
            input=value,
        )
        for key, value in data.items()
        if isinstance(key, str) and "." not in key and key not in _UNDOTTED and key not in known
    ]
    if bad:
        raise ValidationError.from_exception_data(config.__name__, bad)


class KafkaInputTransport(SequenceSource):
    """The ``kafka_input`` transport: a topic's partitions as sequence ranges of offsets."""

    name = NAME
    Config = KafkaInputConfig
    config: KafkaInputConfig
    source_kind = "topic"
    connection_fields: ClassVar[Mapping[str, str]] = {"kafka_config_id": _kafka.KIND}

    def __init__(self, config: KafkaInputConfig, table: TableSpec) -> None:
        super().__init__(config, table)
        self._check_metadata(config, table)
        self._settings: dict[str, str] | None = None
        self._starts: dict[str, int] | None = None
        #: Where the last discovery's hand-over started each partition.
        self._handover_starts: dict[str, int] = {}

    @staticmethod
    def _check_metadata(config: KafkaInputConfig, table: TableSpec) -> None:
        """Every metadata column is a declared column of a type that holds it."""
        wanted = config.metadata_columns
        if not wanted:
            return
        if not table.columns:
            raise ValueError(
                f"{NAME}: table {table.name} infers its columns, but the Kafka metadata "
                f"columns ({', '.join(wanted.values())}) must be declared; declare the "
                "table's columns"
            )
        types = {c.name: c.type.kind for c in table.columns}
        for name, column in wanted.items():
            kind = types.get(column)
            if kind is None:
                raise ValueError(
                    f"{NAME}: Kafka {name} goes to column {column}, which table "
                    f"{table.name} lacks; declare {column} {METADATA_TYPES[name][0]}"
                )
            if kind not in METADATA_TYPES[name]:
                raise ValueError(
                    f"{NAME}: column {column} of table {table.name} is {kind}, but Kafka "
                    f"{name} needs {' or '.join(METADATA_TYPES[name])}"
                )

    @property
    def bounded(self) -> bool:
        """See :attr:`KafkaInputConfig.bounded`."""
        return self.config.bounded

    # --- settings and errors ------------------------------------------------------------

    def settings(self) -> dict[str, str]:
        """librdkafka settings: the connection's, then the config's (without the ones
        the connector owns)."""
        if self._settings is None:
            base: dict[str, str] = {}
            if self.config.kafka_config_id:
                base = _kafka.kafka_settings(self.config.kafka_config_id, self._who())
            base.update(self.config.options)
            self._settings = base
        return dict(self._settings)

    def secrets(self) -> set[str]:
        """Secret values of the settings, to mask in messages."""
        return {v for k, v in self.settings().items() if v and is_secret_option(k)}

    def _who(self) -> str:
        return f"{NAME} connector {self.context.who}" if self.context.connector else NAME

    def _where(self) -> str:
        return f"{self._who()}: topic {self.config.topic}"

    def _client_config(self, **extra: str) -> dict[str, Any]:
        conf: dict[str, Any] = {
            k: v for k, v in self.settings().items() if k not in _OWNED and k != "group.id"
        }
        conf.setdefault("isolation.level", "read_committed")
        conf.setdefault("socket.connection.setup.timeout.ms", "10000")
        conf.setdefault("client.id", "airflow-connectors")
        if self.config.log_level is not None:
            conf["log_level"] = self.config.log_level
        conf.update(
            {
                "group.id": f"airflow-connectors-reader-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": "false",
                "enable.auto.offset.store": "false",
                "enable.partition.eof": "true",
                "auto.offset.reset": "error",
            }
        )
        conf.update(extra)
        conf["error_cb"] = _errors_to_log
        conf["logger"] = _LIBRDKAFKA_LOG
        return conf

    def _error(self, e: BaseException, doing: str) -> OSError:
        """One line naming the connector, topic and what failed, without secrets;
        transient broker errors become ``ConnectionError``/``TimeoutError`` (retried)."""
        from confluent_kafka import KafkaError, KafkaException

        err = e.args[0] if isinstance(e, KafkaException) and e.args else None
        text = mask_text(err.str() if isinstance(err, KafkaError) else str(e), self.secrets())
        where = f"{self._where()}: {doing}"
        if isinstance(err, KafkaError):
            code = err.code()
            if code in (
                KafkaError.UNKNOWN_TOPIC_OR_PART,
                KafkaError._UNKNOWN_TOPIC,
                KafkaError._UNKNOWN_PARTITION,
            ):
                return FileNotFoundError(
                    f"{where}: the topic or partition does not exist ({text}); create the "
                    "topic or fix topic and partitions"
                )
            if code in (
                KafkaError.TOPIC_AUTHORIZATION_FAILED,
                KafkaError.GROUP_AUTHORIZATION_FAILED,
                KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                KafkaError.SASL_AUTHENTICATION_FAILED,
                KafkaError._AUTHENTICATION,
            ):
                return PermissionError(f"{where}: refused ({text}); check the credentials and ACLs")
            if code in (KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT):
                return TimeoutError(f"{where}: no answer in time ({text}); retry later")
            if err.retriable() or code in _TRANSIENT_CODES:
                return ConnectionError(
                    f"{where}: {text}; check bootstrap.servers and that the brokers run"
                )
            if code == KafkaError._INVALID_ARG:
                return _Permanent(f"{where}: a librdkafka setting is invalid ({text})")
            return _Permanent(f"{where}: {text}")
        if isinstance(e, OSError):
            return e
        return _Permanent(f"{where}: {type(e).__name__}: {text}")

    def _call(self, doing: str, fn: Any) -> Any:
        """``fn()`` with Kafka errors translated, retried while transient."""

        def once() -> Any:
            try:
                return fn()
            except OSError:
                raise
            except Exception as e:
                raise self._error(e, doing) from e

        return retry.retrying(self.retry, f"{self._where()}: {doing}", once)

    # --- the sequence source ------------------------------------------------------------

    def _admin_consumer(self) -> Any:
        from confluent_kafka import Consumer, KafkaException

        try:
            return Consumer(self._client_config())
        except KafkaException as e:
            raise self._error(e, "creating a consumer") from e

    def _partition_ids(self, consumer: Any) -> list[int]:
        topic = self.config.topic
        meta = consumer.list_topics(topic, timeout=10)
        tmeta = meta.topics.get(topic)
        if tmeta is None:
            raise FileNotFoundError(f"{self._where()}: not found; create the topic or fix topic")
        if tmeta.error is not None:
            from confluent_kafka import KafkaException

            raise KafkaException(tmeta.error)
        found = sorted(tmeta.partitions)
        if not found:
            raise FileNotFoundError(f"{self._where()}: the topic has no partitions")
        if self.config.partitions is None:
            return found
        missing = [p for p in self.config.partitions if p not in found]
        if missing:
            raise FileNotFoundError(
                f"{self._where()}: partition(s) {', '.join(map(str, missing))} do not exist "
                f"(the topic has {len(found)}: 0..{len(found) - 1}); fix partitions"
            )
        return sorted(self.config.partitions)

    def key(self, partition: int) -> str:
        """The offsets key of ``partition``: ``<topic>/<partition>``."""
        return f"{self.config.topic}/{partition}"

    def partition_of(self, key: str) -> int:
        """The partition number of offsets key ``key``."""
        topic, _, number = key.rpartition("/")
        if topic != self.config.topic or not number.isdigit():
            raise ValueError(f"{NAME}: work item {key!r} is no partition of {self.config.topic}")
        return int(number)

    def partitions(self) -> list[Partition]:
        """Every partition read, with its first offset and its end (the last stable
        offset under ``read_committed``) minus one; where nothing-committed partitions
        start is resolved too."""

        def look() -> list[Partition]:
            from confluent_kafka import TopicPartition

            consumer = self._admin_consumer()
            try:
                ids = self._partition_ids(consumer)
                parts = []
                for p in ids:
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(self.config.topic, p), timeout=10, cached=False
                    )
                    parts.append(Partition(self.key(p), int(low), int(high) - 1))
                self._starts = self._resolve_starts(consumer, ids, parts)
                return parts
            finally:
                consumer.close()

        result: list[Partition] = self._call("listing the partitions", look)
        return result

    def _resolve_starts(
        self, consumer: Any, ids: Sequence[int], parts: Sequence[Partition]
    ) -> dict[str, int]:
        """Where each partition nothing of which is committed starts: after the
        hand-over value when the engine gave one, else by ``start_from``."""
        handover = self.context.handover
        if self.config.handover is None or handover is None or handover.value is None:
            return self._start_from(consumer, ids, parts)
        starts = {}
        for number, p in zip(ids, parts, strict=True):
            probe = self._probe(consumer, number, handover.column)
            try:
                starts[p.key] = first_after(probe, p.first, p.last + 1, handover.value)
                self._check_growing(probe, number, starts[p.key], p.last + 1, handover.value)
            except TypeError as e:
                raise _Permanent(
                    f"{self._where()} partition {number}: the table's greatest "
                    f"{handover.column} ({type(handover.value).__name__}) cannot be compared "
                    f"with the messages' ({e}); handover.column needs a number or text "
                    "column whose messages carry the same type"
                ) from e
        self._handover_starts = dict(starts)
        log.info(
            "%s: hand-over after %s = %r: starts at offsets %s",
            self._where(),
            handover.column,
            handover.value,
            ", ".join(f"partition {k.rpartition('/')[2]}: {v}" for k, v in starts.items()),
        )
        return starts

    def _probe(self, consumer: Any, number: int, column: str) -> Callable[[int], Any]:
        """The first message of partition ``number`` at or after an offset, as
        ``(offset, its value's column)``; None at the partition's end."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        def probe(offset: int) -> tuple[int, Any] | None:
            consumer.assign([TopicPartition(self.config.topic, number, offset)])
            deadline = time.monotonic() + self.config.inactivity_timeout_secs
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return None
                    raise KafkaException(err)
                if msg.value() is None or msg.offset() < offset:
                    continue  # a tombstone (no record), or fetched for an earlier probe
                return msg.offset(), self._column_of(msg, column)
            raise TimeoutError(
                f"{self._where()} partition {number}: no message at offset {offset} within "
                f"{self.config.inactivity_timeout_secs:g} s while finding the hand-over "
                "offset; the broker may be down (inactivity_timeout_secs)"
            )

        return probe

    def _column_of(self, msg: Any, column: str) -> Any:
        import json

        try:
            value = json.loads(msg.value())
        except ValueError as e:
            raise _Permanent(
                f"{self._where()} partition {msg.partition()} offset {msg.offset()}: "
                f"handover.column needs a JSON object value ({e}); fix handover or the "
                "messages"
            ) from e
        if not isinstance(value, dict) or value.get(column) is None:
            raise _Permanent(
                f"{self._where()} partition {msg.partition()} offset {msg.offset()}: the "
                f"message has no {column!r} (handover.column); every message needs it"
            )
        return value[column]

    def _check_growing(
        self, probe: Callable[[int], Any], number: int, start: int, end: int, value: Any
    ) -> None:
        """One warning when the messages around the start do not grow in the column."""
        if start >= end:
            return
        at = probe(start)
        after = probe(at[0] + 1) if at is not None else None
        if at is not None and after is not None and after[1] < at[1]:
            log.warning(
                "%s partition %d: offsets %d and %d hold %r then %r: the hand-over column "
                "does not grow in message order, so the start after %r may skip or repeat "
                "messages (see 'Backfill, then Kafka' in docs/transports/kafka_input.md)",
                self._where(),
                number,
                at[0],
                after[0],
                at[1],
                after[1],
                value,
            )

    def _start_from(
        self, consumer: Any, ids: Sequence[int], parts: Sequence[Partition]
    ) -> dict[str, int]:
        start = self.config.start_from
        if start == "earliest":
            return {p.key: p.first for p in parts}
        if start == "latest":
            return {p.key: p.last + 1 for p in parts}
        if isinstance(start, StartOffsets):
            if len(start.offsets) != len(ids):
                raise _Permanent(
                    f"{self._where()}: start_from.offsets has {len(start.offsets)} offsets "
                    f"for {len(ids)} partitions; give one per partition"
                )
            return {p.key: off for p, off in zip(parts, start.offsets, strict=True)}
        from confluent_kafka import TopicPartition

        asked = [TopicPartition(self.config.topic, p, start.timestamp) for p in ids]
        found = consumer.offsets_for_times(asked, timeout=10)
        starts = {}
        for p, tp in zip(parts, found, strict=True):
            if tp.error is not None:
                from confluent_kafka import KafkaException

                raise KafkaException(tp.error)
            # -1: no message at or after the time: start at the end.
            starts[p.key] = int(tp.offset) if tp.offset >= 0 else p.last + 1
        return starts

    def start_at(self, partition: Partition) -> int:
        """Where ``start_from`` starts ``partition`` (resolved by :meth:`partitions`)."""
        if self._starts is None or partition.key not in self._starts:
            return partition.first
        return self._starts[partition.key]

    def pins_start(self) -> bool:
        """``latest`` moves with time, and so does the hand-over value once the stream
        writes: the first discovery commits where each partition starts."""
        return self.config.start_from == "latest" or self.config.handover is not None

    def handover_column(self) -> str | None:
        """``handover.column`` (see :mod:`.handover`)."""
        return self.config.handover.column if self.config.handover is not None else None

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        """The sequence source's plan; after a hand-over, the first item of each
        partition records it in its meta (and so in the partition's offsets row)."""
        self._handover_starts = {}
        items = list(super().discover(cursor, limits))
        kept = {
            k: row.meta["handover"] for k, row in cursor.offsets.items() if "handover" in row.meta
        }
        if kept:  # the mark stays in the partition's offsets row (the offsets API shows it)
            items = [
                dataclasses.replace(i, meta={**i.meta, "handover": kept[i.key]})
                if i.key in kept
                else i
                for i in items
            ]
        handover = self.context.handover
        if self._handover_starts and handover is not None:
            mark = {"column": handover.column, "value": handover.value}
            items = [
                dataclasses.replace(i, meta={**i.meta, "handover": mark})
                if self._handover_starts.get(i.key) == i.start
                else i
                for i in items
            ]
            # Every partition's start is pinned by this discovery, even one the batch
            # budget left unplanned: the next discovery no longer knows the value.
            planned = {i.key for i in items}
            meta = {k: v for k, v in items[0].meta.items() if k != "handover"} if items else {}
            items += [
                WorkItem(key=k, start=at, end=at, records=0, meta={**meta, "handover": mark})
                for k, at in sorted(self._handover_starts.items())
                if k not in planned and k not in cursor.in_flight and cursor.get(k) is None
            ]
        return iter(items)

    def where(self, partition: str) -> str:
        """``topic <t> partition <p>``."""
        return f"topic {self.config.topic} partition {partition.rpartition('/')[2]}"

    def missing(self, partition: Partition, first: int, last: int) -> None:
        """Offsets ``first..last`` of ``partition`` were deleted (retention) before they
        were read: an error unless ``on_missing: skip``."""
        if self.config.skip_missing:
            super().missing(partition, first, last)
            return
        raise _Permanent(
            f"{self._where()}: offsets {first}..{last} of partition "
            f"{partition.key.rpartition('/')[2]} were deleted (retention) before this "
            f"connector read them; the partition now starts at offset {partition.first}. "
            "Set on_missing: skip to skip them (counted as transport errors), or stop the "
            "connector and reset its offsets"
        )

    def acknowledge(self, positions: Mapping[str, int]) -> None:
        """With ``group.id``: commit the committed positions to the consumer group, so
        Kafka's tools show the connector's lag."""
        group = self.settings().get("group.id")
        if not group or not positions:
            return
        from confluent_kafka import Consumer, TopicPartition

        offsets = [
            TopicPartition(self.config.topic, self.partition_of(k), int(pos))
            for k, pos in sorted(positions.items())
        ]

        def commit() -> None:
            consumer = Consumer(self._client_config(**{"group.id": group}))
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
            finally:
                consumer.close()

        self._call(f"committing offsets to consumer group {group}", commit)

    def use_format(self, fmt: Format) -> bool:
        """With metadata columns (``include_*``, ``metadata``), or a format whose
        records are not lines (Avro, a raw blob, a JSON array: one message is one
        object), ``read`` decodes the messages with ``fmt`` (the table without the
        metadata columns) and adds each message's key, topic, partition, offset,
        timestamp or headers to its rows."""
        columns = self.config.metadata_columns
        if not columns and fmt.line_oriented:
            return False  # the values, a line each, are decoded by the engine
        taken = set(columns.values())
        payload = self.table.model_copy(
            update={"columns": tuple(c for c in self.table.columns if c.name not in taken)}
        )
        own = type(fmt)(fmt.config, payload)
        own.evolution = fmt.evolution  # new fields met reach the engine's format
        self._format = own
        return True

    def read_range(self, partition: str, first: int, last: int) -> Iterator[Any]:
        """The values of offsets ``first..last`` of ``partition``, each followed by a line
        end (or, with metadata columns, decoded blocks); holes are skipped. A transient
        error resumes after the last message delivered."""
        number = self.partition_of(partition)
        at = _Position(first, first + 1)
        what = f"{self._where()} partition {number}: read offsets {first}..{last}"
        batches = retry.retrying_iter(self.retry, what, lambda: self._messages(number, at, last))
        fmt = getattr(self, "_format", None)
        for messages in batches:
            if fmt is None:
                chunk = _values(messages)
                if chunk:
                    yield chunk
            else:
                decoded = self._decoded(fmt, messages, at.record)
                at.record += decoded.records
                yield decoded

    def _messages(self, number: int, at: _Position, last: int) -> Iterator[list[Any]]:
        """The messages of partition ``number`` from ``at.offset`` to ``last``, a list
        per ``consume`` call; ``at.offset`` moves past each list before it is yielded."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        if at.offset > last:
            return
        doing = f"reading partition {number} offsets {at.offset}..{last}"
        try:
            consumer = Consumer(self._client_config())
        except KafkaException as e:
            raise self._error(e, doing) from e
        try:
            self._past_deleted(consumer, number, at, last)
            if at.offset > last:
                return  # the whole rest of the range was deleted
            consumer.assign([TopicPartition(self.config.topic, number, at.offset)])
            idle_since = time.monotonic()
            idle = self.config.inactivity_timeout_secs
            while True:
                # consume returns once it holds the count asked for (or on the timeout):
                # asking for no more than the range's rest returns at once at its end
                # instead of waiting out the timeout for messages past the partition's
                # end (its end-of-partition event comes with the next, empty, fetch).
                want = min(CONSUME_BATCH, last - at.offset + 1)
                try:
                    got = consumer.consume(want, timeout=0.5)
                    taken, done = self._take(got, last, doing)
                except KafkaException as e:
                    raise self._error(e, doing) from e
                except SystemError as e:
                    # An exception a client callback left behind (seen once in CI):
                    # the read is retried as for a dropped connection.
                    raise ConnectionError(
                        f"{self._where()}: {doing}: the Kafka client failed ({e}); retried"
                    ) from e
                if taken:
                    at.offset = taken[-1].offset() + 1
                    yield taken
                if done or at.offset > last:
                    return
                if got:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > idle:
                    raise TimeoutError(
                        f"{self._where()}: {doing}: no message for {idle:g} s at offset "
                        f"{at.offset}; the broker may be down (inactivity_timeout_secs)"
                    )
        finally:
            consumer.close()

    def _past_deleted(self, consumer: Any, number: int, at: _Position, last: int) -> None:
        """A range may start below the partition's first offset (the sequence source
        plans the offsets that retention deleted into its first item, counted at
        discovery; or they were deleted after it was planned): the read starts at the
        first offset there is, never at a deleted one (the broker answers that with
        "offset out of range"). Deleted after planning: skipped and logged with
        ``on_missing: skip``, an error naming the offsets otherwise."""
        from confluent_kafka import KafkaException, TopicPartition

        tp = TopicPartition(self.config.topic, number)
        try:
            low, _ = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        except KafkaException as e:
            raise self._error(e, f"reading partition {number}'s first offset") from e
        if low <= at.offset:
            return
        gone = f"offsets {at.offset}..{min(last, low - 1)} of partition {number}"
        if not self.config.skip_missing:
            raise _Permanent(
                f"{self._where()}: {gone} were deleted (retention) before this connector "
                f"read them; the partition now starts at offset {low}. Set on_missing: "
                "skip to skip them (counted as transport errors), or stop the connector "
                "and reset its offsets"
            )
        log.warning("%s: %s were deleted before they were read; skipped", self._where(), gone)
        at.offset = low

    def _take(self, got: list[Any], last: int, doing: str) -> tuple[list[Any], bool]:
        """The messages of ``got`` up to offset ``last``, and whether the range is read
        (its last offset, a later one, or the partition's end was reached)."""
        from confluent_kafka import KafkaError, KafkaException

        # Fast path, the common case: no error among the messages and the last one (one
        # partition's, in offset order) within the range.
        if got and [m.error() for m in got].count(None) == len(got):
            end = int(got[-1].offset())
            if end <= last:
                return got, end >= last
        taken: list[Any] = []
        for m in got:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return taken, True  # the end: the offsets left are holes
                raise self._error(KafkaException(err), doing)
            offset = int(m.offset())
            if offset > last:
                return taken, True
            taken.append(m)
            if offset >= last:
                return taken, True
        return taken, False

    def _decoded(self, fmt: Format, messages: list[Any], first_record: int) -> Decoded:
        """``messages`` decoded with ``fmt``, each row with its message's metadata; a
        message whose value, key or headers cannot be read is a bad record."""
        import pyarrow as pa

        from airflow_connectors.formats.base import Decoded

        with_value = [m for m in messages if m.value()]  # a tombstone is no record
        tables: list[pa.Table] = []
        errors: list[RecordError] = []
        owner: list[int] = []  # the message (index in with_value) of each row
        numbers: list[int] = []  # the record number of each row
        record = first_record
        # Fast path (line formats): one block; one record per message lines the rows up.
        blocks = (
            list(
                fmt.decode(
                    iter([_values(with_value)]), final=True, first_record=record, at_start=False
                )
            )
            if fmt.line_oriented
            else []
        )
        if fmt.line_oriented and sum(b.records for b in blocks) == len(with_value):
            bad = {e.record - record for b in blocks for e in b.errors}
            owner = [i for i in range(len(with_value)) if i not in bad]
            numbers = [record + i for i in owner]
            tables = [b.table for b in blocks]
            errors = [e for b in blocks for e in b.errors]
            record += len(with_value)
        else:  # a message of several records (or none): one message at a time
            for i, m in enumerate(with_value):
                at = f"partition {m.partition()} offset {m.offset()}"
                for b in _decode_one(fmt, m.value(), record, at):
                    tables.append(b.table)
                    errors += b.errors
                    owner += [i] * b.table.num_rows
                    gone = {e.record for e in b.errors}
                    numbers += [n for n in range(record, record + b.records) if n not in gone]
                    record += b.records
        table = pa.concat_tables(tables) if tables else fmt.table.arrow_schema().empty_table()
        if not table.num_rows == len(owner) == len(numbers):
            raise ValueError(
                f"{self._where()}: the format gave {table.num_rows} rows for "
                f"{len(owner)} records; cannot tell which message each row came from"
            )
        table, unreadable = self._with_metadata(table, [with_value[i] for i in owner], numbers)
        errors += unreadable
        return Decoded(table, errors, record - first_record)

    def _with_metadata(
        self, table: pa.Table, messages: list[Any], numbers: list[int]
    ) -> tuple[pa.Table, list[RecordError]]:
        """``table`` with the metadata columns of its rows' ``messages``; rows whose key
        or headers are not UTF-8 text (a VARCHAR column cannot hold them) are dropped
        as bad records."""

        import pyarrow as pa

        from airflow_connectors.formats.base import RecordError, clip

        columns = self.config.metadata_columns
        good = [True] * len(messages)
        errors: list[RecordError] = []

        def text(i: int, raw: bytes | None, what: str) -> str | None:
            if raw is None:
                return None
            try:
                return raw.decode()
            except UnicodeDecodeError:
                if good[i]:
                    good[i] = False
                    m = messages[i]
                    errors.append(
                        RecordError(
                            numbers[i],
                            f"partition {m.partition()} offset {m.offset()}: the message's "
                            f"{what} is not UTF-8 text, which column "
                            f"{columns['key' if what == 'key' else 'headers']} (VARCHAR) "
                            "cannot hold",
                            clip(m.value() or b""),
                        )
                    )
                return None

        arrays = {column: _metadata_array(name, messages, text) for name, column in columns.items()}
        for column, array in arrays.items():
            if column in table.column_names:
                table = table.drop_columns([column])
            table = table.append_column(column, array)
        if not all(good):
            table = table.filter(pa.array(good))
        return table, errors

    # --- the rest -----------------------------------------------------------------------

    def describe(self) -> str:
        """Brokers, topic, start and follow on one line."""
        servers = self.config.options.get("bootstrap.servers") or (
            f"connection {self.config.kafka_config_id}"
        )
        start = self.config.start_from
        start_text = start if isinstance(start, str) else start.model_dump_json()
        return (
            f"{NAME}: topic {self.config.topic} on {mask_text(servers, self.secrets())}, "
            f"from {start_text}, {'until the ends seen first' if self.bounded else 'follow'}"
        )

    def watch_changes(self, wake: Callable[[], None]) -> AbstractContextManager[ChangeWatch]:
        """The topic's next message wakes (see :mod:`._kafka_wake`: one consumer per
        cluster and process, at the partitions' ends, paused after each wake)."""
        from airflow_connectors.transports._kafka_wake import watch_topic

        return watch_topic(self.settings(), self._client_config, self.config.topic, wake)

    def lineage_datasets(self) -> list[LineageDataset]:
        """The topic, on ``kafka://<first bootstrap server>`` (OpenLineage's naming)."""
        servers = self.config.options.get("bootstrap.servers")
        if not servers:
            return []
        first = servers.split(",")[0].strip()
        if "://" in first:
            first = first.split("://", 1)[1]
        return [LineageDataset(f"kafka://{first}", self.config.topic)]


class _Permanent(OSError):
    """A Kafka error retrying cannot help."""

    transient = False


def _decode_one(fmt: Format, value: bytes, record: int, where: str) -> Iterator[Decoded]:
    """One message's value decoded with ``fmt``, its records numbered from ``record``: a
    line of a line format, or a whole object (Avro records, a raw blob, a JSON array)."""
    import dataclasses

    if fmt.line_oriented:
        yield from fmt.decode(
            iter([_values_of(value)]), final=True, first_record=record, at_start=False
        )
        return
    from airflow_connectors.formats.base import Decoded, NewFields, RecordError, clip

    # The message is a whole object: decoded from its start, renumbered after. An object
    # that cannot be read at all is this message's dead letter, not the batch's failure.
    try:
        blocks = list(fmt.decode(iter([value]), final=True, first_record=1, at_start=True))
    except NewFields:
        raise
    except Exception as e:
        text = str(e).splitlines()[0] if str(e) else type(e).__name__
        empty = fmt.table.arrow_schema().empty_table()
        yield Decoded(empty, [RecordError(record, f"{where}: {text}", clip(value))], records=1)
        return
    for b in blocks:
        b.errors = [dataclasses.replace(e, record=record + e.record - 1) for e in b.errors]
        yield b
        record += b.records


def _values_of(value: bytes) -> bytes:
    return value if value.endswith(b"\n") else value + b"\n"


def _metadata_array(
    name: str, messages: Sequence[Any], text: Callable[[int, bytes | None, str], str | None]
) -> pa.Array:
    """The values of metadata field ``name`` of ``messages`` (``text`` decodes a key or
    header value of message ``i``, noting a bad one)."""
    import json

    import pyarrow as pa

    if name == "key":
        return pa.array([text(i, m.key(), "key") for i, m in enumerate(messages)], pa.string())
    if name == "topic":
        return pa.array([m.topic() for m in messages], pa.string())
    if name == "partition":
        return pa.array([m.partition() for m in messages], pa.int32())
    if name == "offset":
        return pa.array([m.offset() for m in messages], pa.int64())
    if name == "timestamp":
        stamps = [m.timestamp() for m in messages]
        return pa.array(
            [ms if kind != 0 and ms >= 0 else None for kind, ms in stamps], pa.timestamp("ms")
        )
    rows: list[str | None] = []
    for i, m in enumerate(messages):
        hs = m.headers()
        pairs = [{"key": k, "value": text(i, v, "headers")} for k, v in hs or ()]
        rows.append(json.dumps(pairs, ensure_ascii=False) if pairs else None)
    return pa.array(rows, pa.string())


@dataclass
class _Position:
    """Where a range read is: the next offset to read and the next record's number."""

    offset: int
    record: int


def _values(messages: Sequence[Any]) -> bytes:
    """The values of ``messages``, each followed by a line end unless it ends with one;
    a message without a value (a tombstone) adds nothing."""
    values = [m.value() for m in messages]
    if values and all(values):
        # Fast path: no tombstone, and no value ending with a line end (else ``\n\n``).
        joined = b"\n".join(values) + b"\n"
        if b"\n\n" not in joined:
            return joined
    parts: list[bytes] = []
    for m in messages:
        value = m.value()
        if value:
            parts.append(value)
            if not value.endswith(b"\n"):
                parts.append(b"\n")
    return b"".join(parts)


def _transient_codes() -> frozenset[int]:
    try:
        from confluent_kafka import KafkaError
    except ImportError:  # pragma: no cover - a dependency
        return frozenset()
    names = (
        "_TRANSPORT",
        "_ALL_BROKERS_DOWN",
        "_RESOLVE",
        "_MSG_TIMED_OUT",
        "LEADER_NOT_AVAILABLE",
        "NOT_LEADER_FOR_PARTITION",
        "NOT_COORDINATOR",
        "COORDINATOR_NOT_AVAILABLE",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "NETWORK_EXCEPTION",
        "BROKER_NOT_AVAILABLE",
        "_WAIT_COORD",
        "REBALANCE_IN_PROGRESS",
        "_NOENT",
    )
    return frozenset(getattr(KafkaError, n) for n in names if hasattr(KafkaError, n))


_TRANSIENT_CODES = _transient_codes()


def _errors_to_log(err: Any) -> None:
    """librdkafka's background errors (a broker down, a reconnect): DEBUG only; a read
    or call that fails because of them raises its own one-line error. Never raises: an
    exception left by a callback surfaces in the client's next call as a SystemError
    (confluentinc/confluent-kafka-python#865)."""
    with contextlib.suppress(Exception):  # nothing may leave a librdkafka callback
        log.debug("librdkafka: %s", err)


class _CallbackLog:
    """librdkafka's log lines to a logger, never raising out of the callback (see
    :func:`_errors_to_log`)."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        with contextlib.suppress(Exception):  # nothing may leave a librdkafka callback
            self.logger.log(level, msg, *args, **kwargs)


_LIBRDKAFKA_LOGGER = logging.getLogger("airflow_connectors.transports.kafka_input.librdkafka")
_LIBRDKAFKA_LOGGER.setLevel(logging.WARNING)
_LIBRDKAFKA_LOG = _CallbackLog(_LIBRDKAFKA_LOGGER)


__all__ = ["KafkaInputConfig", "KafkaInputTransport", "is_secret_option"]
