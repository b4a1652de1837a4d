"""``s3_input``: objects of an S3 (or S3-compatible) bucket, a listing source
(:mod:`.listing`: the framework owns the watermark, re-lists and late keys, collapse,
compression, byte ranges and change notices).

What is S3's own: listing with ``StartAfter`` (one ``HEAD`` for a single ``key``) and the
server's ``Date`` as the re-list time; reading a byte range with a ranged ``GET`` that
carries ``If-Match`` with the ETag planned, so rows of two versions of an object never
mix; S3's errors as one line without secrets. Zero-byte objects (folder
markers) are skipped. Reads stream in chunks of 8 MiB; an object is never held whole in
memory.
"""

from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, TypeVar

from pydantic import Field, field_validator

from airflow_connectors.connections.aws import KIND as AWS
from airflow_connectors.connections.aws import AwsConfigFields
from airflow_connectors.transports import _s3, retry
from airflow_connectors.transports.base import WorkItem
from airflow_connectors.transports.listing import (
    ListingConfig,
    ListingSource,
    ObjectInfo,
    PrefixOrKey,
)

#: Bytes asked of a response body at a time.
READ_CHUNK = 8 << 20

T = TypeVar("T")

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class S3InputConfig(ListingConfig, AwsConfigFields, PrefixOrKey):
    """Feldera's ``s3_input`` config, plus an Airflow connection, follow mode, the re-list
    cadence, byte-range splitting and decompression."""

    bucket_name: str = Field(
        description="The bucket to read (S3 naming rules: 3-63 lowercase letters, digits, "
        "'.' and '-').",
    )
    max_concurrent_fetches: int = Field(
        default=8,
        gt=0,
        description="HTTP connections a client keeps to the endpoint. Objects are read in "
        "parallel by the connector's Spark tasks (tasks_max); a task reads small objects "
        "(up to 4 MiB) 6 at a time ahead of the one it decodes, larger ones one at a time.",
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


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class ObjectChanged(FileNotFoundError):
    """The object was replaced since its range was planned: the version planned is gone.
    A ``FileNotFoundError`` so the engine treats it as an unreadable object."""


class S3InputTransport(ListingSource):
    """The ``s3_input`` transport: each object under the prefix is a work item keyed by
    its key; byte offsets let an object be resumed mid-way with a ranged GET."""

    name = "s3_input"
    Config = S3InputConfig
    read_ahead = 6  # small objects fetched 6 at a time: each GET is a round trip
    config: S3InputConfig
    connection_fields: ClassVar[Mapping[str, str]] = {"aws_conn_id": AWS}

    def __init__(self, config: S3InputConfig, table: Any) -> None:
        super().__init__(config, table)
        self._client: Any = None
        self._creds: _s3.AwsCredentials | None = None
        self._started_at: Callable[[], float | None] = lambda: None
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

    def object_url(self, key: str) -> str:
        """``s3://bucket/key``."""
        return f"s3://{self.config.bucket_name}/{key}"

    _url = object_url

    # --- listing ----------------------------------------------------------------------

    def location(self) -> str:
        """``s3://bucket/prefix`` (or the one key)."""
        return self._url(self.scope())

    def scope(self) -> str:
        """The one key, or the prefix."""
        return self.config.key if self.config.key is not None else self.config.prefix or ""

    def empty_message(self) -> str:
        """A prefix or key that holds nothing."""
        return (
            f"s3_input: {self.location()} holds no object; nothing was read. Check "
            "bucket_name and prefix/key, or add objects and run the connector again"
        )

    def list_objects(self, after: str | None) -> Iterator[ObjectInfo]:
        """``ListObjectsV2`` with ``StartAfter`` = ``after`` (a ``HEAD`` for one key)."""
        if self.config.key is not None:
            return self._one_object(self.config.key)
        listing = _s3.Listing(
            self.client, self.config.bucket_name, self.config.prefix or "", after, self._call
        )
        self._started_at = lambda: listing.started_at

        def objects() -> Iterator[ObjectInfo]:
            try:
                for obj in listing:
                    yield ObjectInfo(key=obj.key, size=obj.size, mtime=obj.mtime, etag=obj.etag)
            finally:
                self.list_requests += listing.pages

        return objects()

    def listing_started_at(self) -> float | None:
        """The server's ``Date`` at the listing's first response."""
        return self._started_at()

    def _one_object(self, key: str) -> Iterator[ObjectInfo]:
        when: list[float | None] = [None]
        self._started_at = lambda: when[0]
        what = f"HEAD {self._url(key)}"
        asked_at = time.time()
        try:
            head = self._call(
                what, lambda: self.client.head_object(Bucket=self.config.bucket_name, Key=key)
            )
        except FileNotFoundError:
            return
        finally:
            self.list_requests += 1
        when[0] = _s3.server_time(head) or asked_at
        yield ObjectInfo(
            key=key,
            size=int(head["ContentLength"]),
            mtime=head["LastModified"].timestamp(),
            etag=str(head.get("ETag", "")) or None,
        )

    # --- reading ----------------------------------------------------------------------

    def read_label(self, key: str) -> str:
        """``GET s3://bucket/key``."""
        return f"GET {self._url(key)}"

    def open_range(self, item: WorkItem, start: int, end: int | None) -> Iterator[bytes]:
        """One ranged GET (``If-Match`` the ETag planned): ``FileNotFoundError`` when the
        object is gone or was replaced since it was planned; ``PermissionError`` when
        access is refused."""
        return self._open(item, start, end)

    def wrap_errors(self, chunks: Iterator[bytes], what: str) -> Iterator[bytes]:
        """S3's errors that outlived the retries as one line."""
        return self._translated(chunks, what)

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
        return f"s3_input: {self.location()}{' (follow)' if self.config.follow else ''}"
