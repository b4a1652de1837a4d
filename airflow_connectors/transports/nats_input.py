"""``nats_input``: messages of a NATS JetStream stream, read as sequence ranges.

Feldera's ``nats_input`` reads a stream through a consumer and never ends; here a batch
is a **range of stream sequence numbers**, so a re-run after a crash re-reads exactly
that range and the table stays exact. The stream is a sequence source
(:mod:`.sequence`) of one partition, keyed ``<stream>@seq`` (``<stream>/<filter>@seq``
with a subject filter): the framework plans the ranges, keeps the committed sequence,
reports removed messages and fixes the end of a bounded read; this module lists the
stream's bounds, reads a range and acknowledges.

Reading a range creates an ephemeral pull consumer (no acks, memory storage) that starts
at the range's first sequence, with the subject filter, and fetches until a message at
or past the range's end, or until the consumer has nothing pending: deleted or purged
sequences are skipped and never waited for. Each message's payload, followed by a line
end unless it ends with one, is what ``read`` yields: one message is one or more
records of a line-oriented format (JSON objects, CSV lines without a header, raw lines);
whole-object formats (Parquet, Avro, a JSON array) cannot be split into messages.
A range's ``records`` is its length, an upper bound: deleted messages and messages of
other subjects are not records.

Acknowledgement after the commit: every discovery (which runs after commits, and in the
connector's finalize step) moves the connector's durable pull consumer up to the
committed sequence, delivering it the committed messages as headers only and acking the
last one (ack policy ``all``). NATS tools then show the connector's backlog as the
durable consumer's pending messages and its ack floor as what the table holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Coroutine, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import ConfigDict, Field, field_validator, model_validator

from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.datasets import DEFAULT_PORTS, LineageDataset, host_port
from airflow_connectors.spec.redact import mask_text, mask_url
from airflow_connectors.transports.base import Cursor, KeyOffset
from airflow_connectors.transports.sequence import ENDS, Partition, SequenceSource

if TYPE_CHECKING:
    from airflow_connectors.spec.models import TableSpec

T = TypeVar("T")

#: ``WorkItem.meta`` key of the bounded input's last sequence in releases before the
#: sequence source (read from their offsets rows on upgrade).
LAST_SEQ = "last_seq"
_STREAM = re.compile(r"^[^\s.*>/\\@]+$")


class NatsCredentialsConfig(StrictConfig):
    """A NATS user credentials file's text, or its path: exactly one."""

    from_string: str | None = Field(
        default=None,
        alias="FromString",
        json_schema_extra={"secret": True},
        description="The text of a .creds file (user JWT and NKey seed); masked in logs, "
        "errors and the REST API.",
    )
    from_file: str | None = Field(
        default=None,
        alias="FromFile",
        description="The path of a .creds file, readable where discovery and the Spark "
        "executors run.",
    )
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _exactly_one(self) -> NatsCredentialsConfig:
        if (self.from_string is None) == (self.from_file is None):
            raise ValueError("set exactly one of FromString and FromFile")
        return self


class NatsUserPasswordConfig(StrictConfig):
    """A user name and password."""

    user: str = Field(min_length=1, description="The user name.")
    password: str = Field(description="The password; masked in logs, errors and the REST API.")


class NatsAuthConfig(StrictConfig):
    """One way of authenticating (Feldera's ``auth``); none: an open server."""

    credentials: NatsCredentialsConfig | None = Field(
        default=None, description="A user credentials (.creds) file, by text or path."
    )
    jwt: str | None = Field(
        default=None,
        json_schema_extra={"secret": True},
        description="A user JWT; signed with the NKey seed in nkey, which it needs.",
    )
    nkey: str | None = Field(
        default=None,
        json_schema_extra={"secret": True},
        description="An NKey seed (SU...): alone, NKey authentication; with jwt, the seed "
        "that signs the JWT's challenge. Masked in logs, errors and the REST API.",
    )
    token: str | None = Field(
        default=None, description="An authentication token; masked everywhere."
    )
    user_and_password: NatsUserPasswordConfig | None = Field(
        default=None, description="A user name and password."
    )

    @model_validator(mode="after")
    def _one_way(self) -> NatsAuthConfig:
        if self.jwt is not None and self.nkey is None:
            raise ValueError("jwt needs nkey (the seed that signs the server's challenge)")
        ways = [
            self.credentials is not None,
            self.nkey is not None,
            self.token is not None,
            self.user_and_password is not None,
        ]
        if sum(ways) > 1:
            raise ValueError(
                "set one way of authenticating: credentials, jwt with nkey, nkey, token or "
                "user_and_password"
            )
        return self

    def secrets(self) -> set[str]:
        """The secret values of this config, to mask in messages."""
        found = {self.nkey, self.token, self.jwt}
        if self.user_and_password is not None:
            found.add(self.user_and_password.password)
        if self.credentials is not None:
            found.add(self.credentials.from_string)
        return {s for s in found if s}


class NatsConnectionConfig(StrictConfig):
    """Feldera's ``connection_config``: where the server is and how to log in."""

    server_url: str = Field(
        description="The NATS server, such as nats://127.0.0.1:4222 (tls:// for TLS); "
        "several servers separated by commas.",
    )
    auth: NatsAuthConfig = Field(
        default_factory=NatsAuthConfig,
        description="How to authenticate: credentials, jwt with nkey, nkey, token or "
        "user_and_password; none for an open server.",
    )
    connection_timeout_secs: float = Field(
        default=10, gt=0, description="Seconds to wait for the connection to the server."
    )
    request_timeout_secs: float = Field(
        default=10,
        gt=0,
        description="Seconds to wait for an answer of the JetStream API (stream and "
        "consumer information, creating consumers).",
    )

    @field_validator("server_url")
    @classmethod
    def _nats_url(cls, v: str) -> str:
        for url in v.split(","):
            if not re.match(r"^(nats|tls|ws|wss)://[^/\s]+/?$", url.strip()):
                raise ValueError(
                    f"{mask_url(url.strip())!r} is not a NATS server URL; expected "
                    "nats://host:port (or tls://, ws://, wss://), several separated by commas"
                )
        return v


class StartSequence(StrictConfig):
    """Where ``ByStartSequence`` starts."""

    start_sequence: int = Field(ge=1, description="The first stream sequence to read.")


class ByStartSequence(StrictConfig):
    """Feldera's ``{"ByStartSequence": {"start_sequence": N}}``."""

    by_start_sequence: StartSequence = Field(
        alias="ByStartSequence", description="Start at this stream sequence."
    )
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


_NOT_SUPPORTED = {
    "Last": "the last message",
    "New": "messages published after the first discovery",
    "LastPerSubject": "the last message of each subject",
    "ByStartTime": "a start time",
}


class NatsConsumerConfig(StrictConfig):
    """Feldera's ``consumer_config``: the connector's durable consumer and what it reads."""

    name: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="The durable consumer that tracks what the table holds (its ack floor "
        "is the committed sequence; its pending count the backlog). Unset: "
        "ac_<table>_<connector>.",
    )
    description: str | None = Field(
        default=None, description="A description of the durable consumer, shown by NATS tools."
    )
    filter_subjects: tuple[str, ...] = Field(
        default=(),
        description="Read only messages of these subjects (wildcards allowed); messages "
        "of other subjects are skipped, their sequences still count as read. Empty: "
        "every subject. More than one needs NATS server 2.10 or later.",
    )
    deliver_policy: Literal["All"] | ByStartSequence = Field(
        default="All",
        description="Where the connector starts: 'All' (the stream's first message) or "
        '{"ByStartSequence": {"start_sequence": N}}. After that the committed sequence '
        "decides. Last, New, LastPerSubject and ByStartTime are not supported.",
    )
    max_batch: int = Field(
        default=1000,
        gt=0,
        le=100_000,
        description="Messages asked of the server per fetch request when reading a range.",
    )

    @field_validator("deliver_policy", mode="before")
    @classmethod
    def _supported(cls, v: Any) -> Any:
        name = v if isinstance(v, str) else next(iter(v), None) if isinstance(v, dict) else None
        if name in _NOT_SUPPORTED:
            raise ValueError(
                f"{name} (start at {_NOT_SUPPORTED[name]}) is not supported: batches are "
                "fixed sequence ranges; use 'All' or "
                '{"ByStartSequence": {"start_sequence": N}}'
            )
        return v

    @field_validator("filter_subjects")
    @classmethod
    def _subjects(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for s in v:
            if not s or " " in s:
                raise ValueError(f"{s!r} is not a NATS subject")
        return v


class NatsInputConfig(StrictConfig):
    """Feldera's ``nats_input`` config, plus ``follow``."""

    connection_config: NatsConnectionConfig = Field(
        description="The server URL, authentication and timeouts."
    )
    stream_name: str = Field(
        description="The JetStream stream to read (it must exist).",
    )
    consumer_config: NatsConsumerConfig = Field(
        default_factory=NatsConsumerConfig,
        description="The durable consumer's name, subject filter, start and fetch size.",
    )
    inactivity_timeout_secs: float = Field(
        default=60,
        gt=0,
        description="Seconds a read waits for the next message the server said is pending "
        "before the batch fails (the next run retries it).",
    )
    follow: bool = Field(
        default=False,
        description="false: read up to the stream's last sequence as the first discovery "
        "saw it, then end the input. true: never end; every discovery plans the messages "
        "published since.",
    )

    @field_validator("stream_name")
    @classmethod
    def _stream(cls, v: str) -> str:
        if not _STREAM.match(v):
            raise ValueError(
                f"{v!r} is not a JetStream stream name (no spaces, '.', '*', '>', '/', '\\' or '@')"
            )
        return v


@dataclass(frozen=True)
class _StreamState:
    first_seq: int
    last_seq: int
    deleted: tuple[int, ...]


class NatsInputTransport(SequenceSource):
    """The ``nats_input`` transport: the stream is one partition of sequences, read
    through ephemeral consumers; a durable consumer acknowledges what is committed."""

    name = "nats_input"
    Config = NatsInputConfig
    config: NatsInputConfig
    source_kind = "stream"

    def __init__(self, config: NatsInputConfig, table: TableSpec) -> None:
        super().__init__(config, table)
        cc = config.consumer_config
        filters = ",".join(cc.filter_subjects)
        base = f"{config.stream_name}/{filters}" if filters else config.stream_name
        #: The stream's offsets key; keys of releases before the sequence source were
        #: ``<base>@<first>-<last>``, one per range (see :meth:`committed`).
        self.key = f"{base}@seq"
        self._legacy = re.compile(rf"^{re.escape(base)}@(\d{{20}})-(\d{{20}})$")
        self.origin = (
            1 if cc.deliver_policy == "All" else cc.deliver_policy.by_start_sequence.start_sequence
        )

    @property
    def bounded(self) -> bool:
        """Bounded unless ``follow: true``."""
        return not self.config.follow

    @property
    def durable_name(self) -> str:
        """The connector's durable consumer."""
        if self.config.consumer_config.name:
            return self.config.consumer_config.name
        who = self.context.connector or "nats"
        return re.sub(r"[^A-Za-z0-9_-]", "_", f"ac_{self.table.name}_{who}")

    def _session(self) -> _Session:
        who = f"nats_input connector {self.context.who}" if self.context.connector else "nats_input"
        return _Session(self.config, who)

    # --- the sequence source ------------------------------------------------------------

    def partitions(self) -> list[Partition]:
        """The stream, with its first and last sequence and its deleted sequences."""
        with self._session() as server:
            state = server.run(server.stream_state(with_deleted=True))
        return [Partition(self.key, state.first_seq, state.last_seq, state.deleted)]

    def where(self, partition: str) -> str:
        """``stream <name>``."""
        return f"stream {self.config.stream_name}"

    def start_at(self, partition: Partition) -> int:
        """``deliver_policy``'s start (purged sequences after it are reported)."""
        return self.origin

    def acknowledge(self, positions: Mapping[str, int]) -> None:
        """Move the durable consumer up to the committed sequence (creating it)."""
        with self._session() as server:
            server.run(server.acknowledge(self.durable_name, positions[self.key], self.origin))

    def read_range(self, partition: str, first: int, last: int) -> Iterator[bytes]:
        """The payloads of the range's messages (of the filtered subjects), each followed
        by a line end, in sequence order."""
        if partition != self.key and not self._legacy.match(partition):
            raise ValueError(f"nats_input: work item {partition!r} is no range of {self.key}")
        with self._session() as nats:
            yield from nats.read(
                first,
                last + 1,
                self.config.consumer_config.max_batch,
                self.config.inactivity_timeout_secs,
            )

    # --- offsets of earlier releases ------------------------------------------------------

    def committed(self, cursor: Cursor, partition: Partition) -> KeyOffset | None:
        """The stream's offsets row; for a connector that committed under the earlier
        keys (a range per key, collapsed into the watermark), the first sequence from
        the origin that those do not cover, so an upgrade reads nothing twice."""
        row = cursor.get(self.key)
        if row is not None:
            return row
        spans, ends = [], None
        if cursor.watermark and (m := self._legacy.match(cursor.watermark)):
            spans.append((self.origin, int(m.group(2))))
        for key, off in cursor.offsets.items():
            if (m := self._legacy.match(key)) is None:
                continue
            first, last = int(m.group(1)), int(m.group(2))
            ends = off.meta.get(LAST_SEQ, ends)
            if off.completed or off.offset > last:
                spans.append((first, last))
            elif off.offset > first:
                spans.append((first, off.offset - 1))
        if not spans:
            return None
        pos = self.origin
        for first, last in sorted(spans):
            if first > pos:
                break
            pos = max(pos, last + 1)
        return KeyOffset(pos, 0, False, {ENDS: {self.key: ends}} if ends is not None else {})

    def in_flight(self, cursor: Cursor, partition: Partition) -> bool:
        """A range is planned, under this key or an earlier release's."""
        return self.key in cursor.in_flight or any(map(self._legacy.match, cursor.in_flight))

    def describe(self) -> str:
        """Server, stream, filter and follow on one line."""
        cc = self.config.consumer_config
        parts = [
            f"nats_input: stream {self.config.stream_name} on "
            f"{mask_url(self.config.connection_config.server_url)}"
        ]
        if cc.filter_subjects:
            parts.append(f"subjects {', '.join(cc.filter_subjects)}")
        parts.append(f"durable consumer {self.durable_name}")
        parts.append("follow" if self.config.follow else "until the last sequence")
        return ", ".join(parts)

    def lineage_datasets(self) -> list[LineageDataset]:
        """The stream, on ``nats://host:port``."""
        server = host_port(self.config.connection_config.server_url, DEFAULT_PORTS["nats"])
        return [LineageDataset(f"nats://{server}", self.config.stream_name)]


class _Session:
    """A connection to the server on an event loop of its own; errors become one-line
    ``OSError``s naming the connector and the server, without secrets."""

    def __init__(self, config: NatsInputConfig, who: str) -> None:
        self.config = config
        self.who = who
        self.loop = asyncio.new_event_loop()
        self.nc: Any = None
        self.js: Any = None
        self.jsm: Any = None
        self.server = mask_url(config.connection_config.server_url)

    def __enter__(self) -> _Session:
        try:
            self.run(self._connect())
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection and the loop."""
        try:
            if self.nc is not None and not self.nc.is_closed:
                self.loop.run_until_complete(self.nc.close())
        except Exception:  # closing a broken connection: nothing to keep
            pass
        finally:
            self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """``coro`` on the session's loop; errors translated."""
        try:
            return self.loop.run_until_complete(coro)
        except OSError as e:
            if str(e).startswith(self.who):
                raise
            raise self._error(e) from e
        except Exception as e:
            raise self._error(e) from e

    def _error(self, e: BaseException) -> OSError:
        import nats.errors
        import nats.js.errors

        text = mask_text(str(e).splitlines()[0] if str(e) else type(e).__name__, self._secrets())
        where = f"{self.who}: stream {self.config.stream_name} on {self.server}"
        if isinstance(e, nats.js.errors.NotFoundError):
            return FileNotFoundError(
                f"{where}: not found ({text}); create the stream or fix stream_name"
            )
        if isinstance(e, nats.errors.NoServersError | ConnectionError):
            return ConnectionError(
                f"{where}: cannot connect to the server ({text}); check server_url and that "
                "the server runs"
            )
        if isinstance(e, nats.errors.TimeoutError | asyncio.TimeoutError | TimeoutError):
            return TimeoutError(f"{where}: no answer in time ({type(e).__name__}); retry later")
        if isinstance(e, nats.errors.AuthorizationError):
            return PermissionError(f"{where}: authentication failed ({text}); check auth")
        return OSError(f"{where}: {type(e).__name__}: {text}")

    def _secrets(self) -> set[str]:
        return self.config.connection_config.auth.secrets()

    async def _connect(self) -> None:
        import nats
        from nats.aio.client import RawCredentials

        cc = self.config.connection_config
        auth = cc.auth
        opts: dict[str, Any] = {}
        if auth.user_and_password is not None:
            opts["user"] = auth.user_and_password.user
            opts["password"] = auth.user_and_password.password
        if auth.token is not None:
            opts["token"] = auth.token
        if auth.credentials is not None:
            creds = auth.credentials
            opts["user_credentials"] = (
                RawCredentials(creds.from_string) if creds.from_string else creds.from_file
            )
        if auth.jwt is not None and auth.nkey is not None:
            opts["user_credentials"] = RawCredentials(_creds_text(auth.jwt, auth.nkey))
        elif auth.nkey is not None:
            opts["nkeys_seed_str"] = auth.nkey
        errors: list[BaseException] = []

        async def keep(e: Exception) -> None:
            errors.append(e)

        try:
            # nats-py retries an unreachable server on its first connect whatever
            # allow_reconnect says: the whole connect is bounded here.
            self.nc = await asyncio.wait_for(
                nats.connect(
                    servers=[s.strip() for s in cc.server_url.split(",")],
                    connect_timeout=max(1, round(cc.connection_timeout_secs)),
                    allow_reconnect=False,
                    max_reconnect_attempts=0,
                    reconnect_time_wait=0.5,
                    error_cb=keep,
                    **opts,
                ),
                cc.connection_timeout_secs,
            )
        except Exception as e:
            cause = errors[0] if errors else e
            raise ConnectionError(f"{type(cause).__name__}: {cause}") from e
        self.js = self.nc.jetstream(timeout=cc.request_timeout_secs)
        self.jsm = self.nc.jsm(timeout=cc.request_timeout_secs)

    async def stream_state(self, *, with_deleted: bool) -> _StreamState:
        """The stream's first and last sequence (and its deleted sequences)."""
        name = self.config.stream_name
        info = await self.jsm.stream_info(name)
        deleted: tuple[int, ...] = ()
        if with_deleted and info.state.num_deleted:
            answer = await self.nc.request(
                f"$JS.API.STREAM.INFO.{name}",
                json.dumps({"deleted_details": True}).encode(),
                timeout=self.config.connection_config.request_timeout_secs,
            )
            deleted = tuple(json.loads(answer.data).get("state", {}).get("deleted") or ())
        return _StreamState(info.state.first_seq, info.state.last_seq, deleted)

    def _consumer(self, **kw: Any) -> Any:
        from nats.js import api

        filters = self.config.consumer_config.filter_subjects
        if len(filters) == 1:
            kw["filter_subject"] = filters[0]
        elif filters:
            kw["filter_subjects"] = list(filters)
        return api.ConsumerConfig(**kw)

    async def acknowledge(self, durable: str, committed: int, origin: int) -> None:
        """Move the durable consumer's ack floor up to ``committed - 1``: deliver it the
        committed messages (headers only) and ack the last one (ack policy all)."""
        import nats.js.errors
        from nats.js import api

        stream = self.config.stream_name
        try:
            info = await self.jsm.consumer_info(stream, durable)
        except nats.js.errors.NotFoundError:
            desc = self.config.consumer_config.description
            await self.jsm.add_consumer(
                stream,
                self._consumer(
                    durable_name=durable,
                    description=desc or "airflow-connectors nats_input: committed sequences",
                    deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                    opt_start_seq=origin,
                    ack_policy=api.AckPolicy.ALL,
                    headers_only=True,
                    ack_wait=30.0,
                    max_ack_pending=-1,
                ),
            )
            info = await self.jsm.consumer_info(stream, durable)
        if (
            info.ack_floor.stream_seq >= committed - 1
            or info.num_pending + info.num_ack_pending == 0
        ):
            return
        pull = _Pull(self, durable, self.config.connection_config.request_timeout_secs)
        await pull.open()
        try:
            await self._ack_up_to(pull, committed - 1)
        finally:
            await pull.close(delete=False)

    async def _ack_up_to(self, pull: _Pull, last: int) -> None:
        timeout = self.config.connection_config.request_timeout_secs
        while True:
            got = await pull.next(1000)
            upto = [g for g in got if g[0] <= last]
            beyond = [g for g in got if g[0] > last]
            if upto:  # ack policy all: acks every message before it too
                await self.nc.request(upto[-1][3], b"+ACK", timeout=timeout)
            for g in beyond:  # delivered early: deliver them again once committed
                await self.nc.publish(g[3], b"-NAK")
            if beyond or not got or got[-1][1] == 0:
                return

    def read(self, start: int, end: int, max_batch: int, idle: float) -> Iterator[bytes]:
        """The payloads of sequences ``start <= seq < end``, a chunk per pull request."""
        from nats.js import api

        name = self.nc._nuid.next().decode()
        cfg = self._consumer(
            name=name,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start,
            ack_policy=api.AckPolicy.NONE,
            mem_storage=True,
            inactive_threshold=max(60.0, idle * 2),
            num_replicas=1,
        )
        info = self.run(self.jsm.add_consumer(self.config.stream_name, cfg))
        pull = _Pull(self, name, idle)
        try:
            self.run(pull.open())
            pending = int(info.num_pending)
            while pending > 0:
                got = self.run(pull.next(min(max_batch, pending)))
                if not got:
                    return
                chunk = bytearray()
                for seq, left, data, _ in got:
                    if seq >= end:
                        break
                    if data:
                        chunk += data
                        if not data.endswith(b"\n"):
                            chunk += b"\n"
                    pending = left
                    if seq >= end - 1:
                        pending = 0
                        break
                if chunk:
                    yield bytes(chunk)
                if got[-1][0] >= end:
                    return
        finally:
            self.run(pull.close())


class _Pull:
    """Pull requests to one consumer, answered on an inbox of their own: messages are
    collected by the subscription's callback (nats-py's ``fetch`` costs an awaited
    timeout per message, a third of the speed)."""

    def __init__(self, session: _Session, consumer: str, idle: float) -> None:
        self.s = session
        self.consumer = consumer
        self.idle = idle
        self.sub: Any = None
        #: (stream sequence, pending after it, payload, reply subject) per message.
        self.got: list[tuple[int, int, bytes, str]] = []
        self.want = 0
        self.done = asyncio.Event()

    async def open(self) -> None:
        """Subscribe to the inbox the answers come to."""
        self.inbox = self.s.nc.new_inbox()
        self.sub = await self.s.nc.subscribe(self.inbox, cb=self._on_msg)

    async def _on_msg(self, msg: Any) -> None:
        reply = msg.reply
        if not reply:  # a status: 404 no messages, 408 request expired
            self.done.set()
            return
        seq, left = _seq_and_pending(reply)
        self.got.append((seq, left, msg.data, reply))
        if len(self.got) >= self.want or left == 0:
            self.done.set()

    async def next(self, n: int) -> list[tuple[int, int, bytes, str]]:
        """Up to ``n`` messages that are available now, in sequence order; [] when the
        consumer has none (they were deleted meanwhile)."""
        self.got, self.want = [], n
        self.done.clear()
        request = json.dumps({"batch": n, "no_wait": True}).encode()
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{self.s.config.stream_name}.{self.consumer}"
        await self.s.nc.publish(subject, request, reply=self.inbox)
        await asyncio.wait_for(self.done.wait(), self.idle)
        return self.got

    async def close(self, *, delete: bool = True) -> None:
        """Unsubscribe; ``delete``: delete the (ephemeral) consumer too, else it expires
        when inactive."""
        try:
            if self.sub is not None:
                await self.sub.unsubscribe()
        finally:
            if delete:
                with contextlib.suppress(Exception):
                    await self.s.jsm.delete_consumer(self.s.config.stream_name, self.consumer)


def _seq_and_pending(reply: str) -> tuple[int, int]:
    """Stream sequence and pending count from a JetStream message's reply subject:
    ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`` or, with a
    domain and account hash, ``$JS.ACK.<domain>.<hash>.<stream>...<pending>[.<token>]``."""
    t = reply.split(".")
    if len(t) == 9:
        return int(t[5]), int(t[8])
    return int(t[7]), int(t[10])


def _creds_text(jwt: str, seed: str) -> str:
    """A .creds file's text from a user JWT and its NKey seed."""
    return (
        f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
    )
