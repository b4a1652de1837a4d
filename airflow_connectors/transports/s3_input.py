"""``s3_input``: objects of an S3 (or S3-compatible) bucket, after Aiven's cloud-storage
source design, made complete.

Keys are work items in key order. Discovery lists with ``StartAfter`` = the cursor's
watermark (every key up to it is committed), so a bucket of 100,000 committed objects
costs a listing of what is new. Every ``relist_every`` discoveries it lists the whole
prefix: a key that sorts below the watermark and has no offsets row is late work when it
was modified at or after the cursor's ``late_after`` (Aiven misses these), and a
collapsed, committed key otherwise. A re-list that reached the end reports when it
started (the server's ``Date``, minus ``relist_margin_s``) as ``relisted_at``.

Zero-byte objects are skipped. An object is read with ranged GETs, so a batch resumes
mid-object from the committed byte offset; line-oriented formats read objects larger than
``max_object_bytes_per_batch`` in byte ranges, one range of a key per discovery (the next
one starts at the committed offset, which is always a record boundary). Compressed
objects (by extension or ``compression``) are streamed through the decompressor from byte
0; their offsets count decompressed bytes, and they are never split. Reads stream in
chunks of 8 MiB; an object is never held whole in memory.
"""

from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar

from pydantic import Field, field_validator, model_validator

from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.transports import _s3, compression, retry
from airflow_connectors.transports.base import (
    MTIME,
    Cursor,
    KeyOffset,
    Limits,
    Transport,
    WorkItem,
    check_scope,
)

#: Bytes asked of a response body at a time.
READ_CHUNK = 8 << 20

T = TypeVar("T")

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class S3InputConfig(StrictConfig):
    """Feldera's ``s3_input`` config, plus an Airflow connection, follow mode, the re-list
    cadence, byte-range splitting and decompression."""

    bucket_name: str = Field(
        description="The bucket to read (S3 naming rules: 3-63 lowercase letters, digits, "
        "'.' and '-').",
    )
    prefix: str | None = Field(
        default=None,
        description="Read every object whose key starts with this prefix, in key order "
        "('' for the whole bucket). Exactly one of prefix and key.",
    )
    key: str | None = Field(
        default=None,
        min_length=1,
        description="Read this one object. Exactly one of prefix and key.",
    )
    region: str | None = Field(
        default=None,
        description="The bucket's AWS region; unset: the connection's region_name, "
        "else AWS_REGION / AWS_DEFAULT_REGION.",
    )
    endpoint_url: str | None = Field(
        default=None,
        description="An S3-compatible endpoint (MinIO, Ceph, a local test server), such as "
        "http://127.0.0.1:9000; unset: the connection's endpoint_url, else AWS.",
    )
    aws_access_key_id: str | None = Field(
        default=None,
        description="Access key id; with aws_secret_access_key. Unset (and no aws_conn_id): "
        "boto3's default credentials (environment, profile, instance role).",
    )
    aws_secret_access_key: str | None = Field(
        default=None,
        description="Secret access key; masked in logs, errors, the UI and the REST API. "
        "Prefer aws_conn_id, so the secret stays in Airflow.",
    )
    no_sign_request: bool = Field(
        default=False,
        description="Send unsigned requests (public buckets); no credentials are used.",
    )
    max_concurrent_fetches: int = Field(
        default=8,
        gt=0,
        description="HTTP connections a client keeps to the endpoint. Objects are read in "
        "parallel by the connector's Spark tasks (tasks_max), one object per task at a time.",
    )
    aws_conn_id: str | None = Field(
        default=None,
        min_length=1,
        description="An Airflow Amazon Web Services connection: its login/password are the "
        "key pair, its extra's region_name and endpoint_url the region and endpoint. "
        "Resolved by Airflow in Airflow tasks, else from the AIRFLOW_CONN_<ID> variable.",
    )
    follow: bool = Field(
        default=False,
        description="false: read the objects that exist now and end the input once all of "
        "them are committed (objects added later are still read by later runs). true: "
        "never end the input; every discovery picks up new objects.",
    )
    relist_every: int = Field(
        default=10,
        ge=1,
        description="Every this many discoveries, list the whole prefix instead of only "
        "the keys after the committed watermark, to find objects whose keys sort below it "
        "(late keys). 1: list everything every time. Whatever this is, the new-data "
        "probe of `trigger: {on: new_data}` and the end-of-input check of a discovery "
        "that found nothing list the whole prefix, so a late key is seen at once and the "
        "next discovery re-lists to read it.",
    )
    relist_margin_s: float = Field(
        default=300.0,
        ge=0,
        description="Seconds taken off a re-list's start time before objects older than it "
        "count as seen: multipart uploads carry their start time as LastModified, so an "
        "upload that completes after a re-list is still found by the next one.",
    )
    max_object_bytes_per_batch: int | None = Field(
        default=None,
        gt=0,
        description="Line-oriented formats (JSON lines, CSV): an uncompressed object larger "
        "than this is read in byte ranges of this size, one range per batch; a crash loses "
        "at most one range. Unset: whole objects.",
    )
    compression: Literal["auto", "none", "gzip", "zstd", "bz2"] = Field(
        default="auto",
        description="How objects are compressed. auto: by extension (.gz, .zst, .bz2); "
        "none: read bytes as they are. Compressed objects are streamed, never split.",
    )

    @field_validator("bucket_name")
    @classmethod
    def _bucket_rules(cls, v: str) -> str:
        if v.startswith("s3://"):
            raise ValueError(f"expected a bucket name, not a URL; write {v[5:].split('/')[0]!r}")
        if not _BUCKET.match(v) or ".." in v or _is_ip(v):
            raise ValueError(
                f"{v!r} is not a valid bucket name: 3-63 lowercase letters, digits, '.' and "
                "'-', starting and ending with a letter or digit, not an IP address"
            )
        return v

    @model_validator(mode="after")
    def _one_source_one_credential(self) -> S3InputConfig:
        if (self.prefix is None) == (self.key is None):
            raise ValueError(
                "set exactly one of prefix (every object under it; '' for the whole bucket) "
                "and key (one object)"
            )
        if (self.aws_access_key_id is None) != (self.aws_secret_access_key is None):
            raise ValueError("set aws_access_key_id and aws_secret_access_key together")
        ways = [
            self.aws_access_key_id is not None,
            self.no_sign_request,
            self.aws_conn_id is not None,
        ]
        if sum(ways) > 1:
            raise ValueError(
                "set one way of authenticating: aws_access_key_id/aws_secret_access_key, "
                "aws_conn_id, or no_sign_request"
            )
        return self


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class ObjectChanged(FileNotFoundError):
    """The object was replaced since its range was planned: the version planned is gone.
    A ``FileNotFoundError`` so the engine treats it as an unreadable object."""


class S3InputTransport(Transport):
    """The ``s3_input`` transport: each object under the prefix is a work item keyed by
    its key; byte offsets let an object be resumed mid-way with a ranged GET."""

    name = "s3_input"
    Config = S3InputConfig
    config: S3InputConfig

    def __init__(self, config: S3InputConfig, table: Any) -> None:
        super().__init__(config, table)
        self._client: Any = None
        self._creds: _s3.AwsCredentials | None = None
        #: List requests made by this transport's discoveries (for tests and benchmarks).
        self.list_requests = 0

    # --- plumbing ---------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The boto3 client, built on first use (credentials resolved then)."""
        if self._client is None:
            self._creds = _s3.credentials(self.config)
            self._client = _s3.make_client(self.config, self._creds)
        return self._client

    def _secrets(self) -> set[str]:
        found = {s for s in (self.config.aws_secret_access_key,) if s}
        return found | (self._creds.secrets() if self._creds else set())

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()`` under the transport's retry policy; failures as one-line ``OSError``."""
        try:
            return retry.retrying(self.retry, what, fn)
        except OSError as e:
            if str(e).startswith("s3_input:"):
                raise
            raise _s3.translate(e, what, self._secrets()) from e
        except Exception as e:
            raise _s3.translate(e, what, self._secrets()) from e

    def _url(self, key: str) -> str:
        return f"s3://{self.config.bucket_name}/{key}"

    @property
    def bounded(self) -> bool:
        """Bounded unless ``follow: true``."""
        return not self.config.follow

    # --- discovery --------------------------------------------------------------------

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        """Objects after the watermark (all of them on a re-list) that are neither in
        flight, empty nor committed, in key order; at most ``limits.max_items``."""
        self.relisted_at = None
        scope = self.config.key if self.config.key is not None else self.config.prefix or ""
        check_scope("s3_input", self._describe_source(), scope, cursor.watermark)
        full = cursor.watermark is None or cursor.since_relist >= self.config.relist_every - 1
        objects, started_at = self._objects(None if full else cursor.watermark)
        seen = emitted = 0
        for obj in objects:
            seen += 1
            item = self._plan(obj, cursor, limits)
            if item is None:
                continue
            if emitted >= limits.max_items:
                return  # cut: not a complete listing
            yield item
            emitted += 1
        if full and started_at() is not None:
            self.relisted_at = float(started_at() or 0) - self.config.relist_margin_s
        if (
            not seen
            and full
            and not self.config.follow
            and not (cursor.offsets or cursor.watermark)
        ):
            self.notices.append(
                (
                    f"s3_input: {self._describe_source()} holds no object; "
                    "nothing was read. Check bucket_name and prefix/key, or add "
                    "objects and run the connector again",
                    None,
                )
            )

    def _describe_source(self) -> str:
        if self.config.key is not None:
            return self._url(self.config.key)
        return self._url(self.config.prefix or "")

    def _objects(
        self, start_after: str | None
    ) -> tuple[Iterator[_s3.S3Object], Callable[[], float | None]]:
        """The objects to consider, and how to get the server's time at listing start."""
        if self.config.key is not None:
            return self._one_object(self.config.key)
        listing = _s3.Listing(
            self.client, self.config.bucket_name, self.config.prefix or "", start_after, self._call
        )

        def objects() -> Iterator[_s3.S3Object]:
            try:
                yield from listing
            finally:
                self.list_requests += listing.pages

        return objects(), lambda: listing.started_at

    def _one_object(self, key: str) -> tuple[Iterator[_s3.S3Object], Callable[[], float | None]]:
        when: list[float | None] = [None]

        def objects() -> Iterator[_s3.S3Object]:
            what = f"HEAD {self._url(key)}"
            asked_at = time.time()
            try:
                head = self._call(
                    what, lambda: self.client.head_object(Bucket=self.config.bucket_name, Key=key)
                )
            except FileNotFoundError:
                when[0] = None
                return
            finally:
                self.list_requests += 1
            when[0] = _s3.server_time(head) or asked_at
            yield _s3.S3Object(
                key=key,
                size=int(head["ContentLength"]),
                mtime=head["LastModified"].timestamp(),
                etag=str(head.get("ETag", "")),
            )

        return objects(), lambda: when[0]

    def _plan(self, obj: _s3.S3Object, cursor: Cursor, limits: Limits) -> WorkItem | None:
        """The work item of a listed object, or None when it has nothing new."""
        if obj.key in cursor.in_flight or obj.size == 0:
            return None  # planned already; empty objects hold no record
        done = cursor.get(obj.key)
        if done is None:
            below = cursor.watermark is not None and obj.key <= cursor.watermark
            if below and cursor.late_after is not None and obj.mtime < cursor.late_after:
                return None  # committed, its offsets row collapsed into the watermark
            return self._item(obj, 0, 0, limits)
        if _changed(obj, done):
            self.notices.append(
                (
                    f"s3_input: {self._url(obj.key)} was replaced after "
                    f"{'it was committed' if done.completed else f'{done.offset} bytes of it were committed'} "
                    f"(ETag {done.meta.get('etag')} -> {obj.etag}); the new version is not read. "
                    "Write new data to new keys, or reset the connector's offsets of this key "
                    "to read it again",
                    obj.key,
                )
            )
            return None
        if done.completed:
            return None
        return self._item(obj, done.offset, done.records, limits, seen=done.meta.get("seen"))

    def _item(
        self,
        obj: _s3.S3Object,
        start: int,
        records_done: int,
        limits: Limits,
        seen: Any = None,
    ) -> WorkItem:
        meta = {MTIME: obj.mtime, "etag": obj.etag}
        if compression.codec_of(obj.key, self.config.compression) is not None:
            # Offsets count decompressed bytes: read from byte 0, to the end, in one item.
            return WorkItem(
                key=obj.key,
                start=start,
                end=None,
                size=obj.size,
                records_done=records_done,
                final=True,
                meta=meta,
            )
        end = obj.size
        step = self.config.max_object_bytes_per_batch
        if step and limits.appendable:
            end = min(obj.size, start + step)
            if seen is not None and end <= int(seen):
                # The last range ended inside one record: read past it this time.
                end = min(obj.size, int(seen) + step)
        return WorkItem(
            key=obj.key,
            start=start,
            end=end,
            size=obj.size,
            records_done=records_done,
            final=end == obj.size,
            meta=meta,
        )

    def exhausted(self, cursor: Cursor) -> bool | None:
        """Never in follow mode; otherwise the engine decides (nothing new listed)."""
        return False if self.config.follow else None

    # --- reading ----------------------------------------------------------------------

    def read(self, item: WorkItem) -> Iterator[bytes]:
        """The bytes of ``item``: a ranged GET from ``start`` (decompressed and skipped to
        ``start`` for compressed objects), re-requested from the byte where it broke after
        a transient error. ``FileNotFoundError`` when the object is gone or was replaced
        since it was planned; ``PermissionError`` when access is refused."""
        codec = compression.codec_of(item.key, self.config.compression)
        first, end = (0, None) if codec else (item.start, item.end)
        url = self._url(item.key)
        raw = retry.retrying_stream(
            self.retry, f"GET {url}", lambda n: self._open(item, first + n, end)
        )
        chunks = self._translated(raw, f"GET {url}")
        if codec is None:
            yield from chunks
        else:
            yield from compression.skip(compression.decompress(chunks, codec, name=url), item.start)

    def _translated(self, chunks: Iterator[bytes], what: str) -> Iterator[bytes]:
        """``chunks``, with a library error that outlived the retries as one line."""
        try:
            yield from chunks
        except OSError as e:
            if str(e).startswith("s3_input:"):
                raise
            raise _s3.translate(e, what, self._secrets()) from e
        except Exception as e:
            if isinstance(e, retry.TransientError) or type(e).__module__.startswith(
                ("botocore", "urllib3")
            ):
                raise _s3.translate(e, what, self._secrets()) from e
            raise

    def _open(self, item: WorkItem, pos: int, end: int | None) -> Iterator[bytes]:
        """Bytes ``[pos, end)`` of the object (to its end when ``end`` is None) from one
        GET, in chunks of :data:`READ_CHUNK`. A body that ends early raises
        ``TransientError`` (re-requested from where it broke)."""
        if end is not None and pos >= end:
            return
        body = self._get(item, pos, end)
        if body is None:
            return  # the object ends before pos
        try:
            for data in body.iter_chunks(READ_CHUNK):
                chunk = data if end is None else data[: end - pos]
                if chunk:
                    pos += len(chunk)
                    yield chunk
                if end is not None and pos >= end:
                    return
            if end is not None:
                raise retry.TransientError(
                    f"s3_input: GET {self._url(item.key)} ended at byte {pos}, before the end "
                    f"of its range ({end})"
                )
        finally:
            body.close()

    def _get(self, item: WorkItem, pos: int, end: int | None) -> Any:
        """The body of one GET from byte ``pos`` (None: the object ends before it).
        Permanent refusals are raised as one-line ``OSError``\\ s; others pass through
        raw, for the retry policy to judge."""
        kwargs: dict[str, Any] = {"Bucket": self.config.bucket_name, "Key": item.key}
        if not (pos == 0 and (end is None or end == item.size)):
            kwargs["Range"] = f"bytes={pos}-{'' if end is None else end - 1}"
        etag = item.meta.get("etag")
        if etag:
            kwargs["IfMatch"] = etag
        url = self._url(item.key)
        try:
            resp = self.client.get_object(**kwargs)
        except Exception as e:
            code, status = _s3.error_code(e)
            if code in ("InvalidRange",) or status == 416:
                if item.size is not None and pos < item.size:
                    raise ObjectChanged(
                        f"s3_input: {url} has no byte {pos} any more: it was replaced since "
                        "it was planned; nothing of it was used"
                    ) from e
                return None
            if code == "PreconditionFailed" or status == 412:
                raise ObjectChanged(
                    f"s3_input: {url} was replaced since it was planned (its ETag is no "
                    f"longer {etag}); nothing of it was used, so rows of two versions never mix"
                ) from e
            if code in _s3.MISSING_CODES or status == 404:
                raise FileNotFoundError(
                    f"s3_input: {url} was listed for this batch but is gone ({code or 404})"
                ) from e
            if code in _s3.DENIED_CODES or status == 403:
                raise _s3.translate(e, f"GET {url}", self._secrets()) from e
            raise
        got = _s3.content_range_start(resp.get("ContentRange"))
        if "Range" in kwargs and got is not None and got != pos:
            resp["Body"].close()
            raise OSError(
                f"s3_input: GET {url} with Range {kwargs['Range']} answered Content-Range "
                f"{resp.get('ContentRange')!r}, which does not start at byte {pos}"
            )
        return resp["Body"]

    def describe(self) -> str:
        """The bucket and prefix or key, with ``(follow)`` when following."""
        return f"s3_input: {self._describe_source()}{' (follow)' if self.config.follow else ''}"


def _changed(obj: _s3.S3Object, done: KeyOffset) -> bool:
    """Whether ``obj`` is not the version whose bytes were committed."""
    before = done.meta.get("etag")
    return bool(before) and bool(obj.etag) and before != obj.etag
