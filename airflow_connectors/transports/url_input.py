"""``url_input``: the body of one HTTP(S) URL, read once; the input ends once the whole
body is committed.

Line formats (JSON lines, CSV) read a body in ranges of ``range_bytes``: each discovery
plans the next range after the committed offset and the batch requests it with
``Range: bytes=<offset>-<end>``. A read killed or cut off mid-body loses only its own
uncommitted range; the next run re-reads that range from the committed offset, which is
always the start of a record (the format commits whole records only). Other formats
(Parquet, JSON arrays) read the whole body in one batch and start over when interrupted.

Never silently wrong data. Discovery asks the server (HEAD) for the body's length, ETag and
Last-Modified and plans them with the range; a response whose validators differ (the body
changed), whose ``Content-Range`` does not start at the requested offset, or that ends
before its range does fails the batch naming the URL. A server that ignores ``Range``
(200 with the whole body) is read from the start and the bytes before the offset dropped.
Bodies are requested with ``Accept-Encoding: identity``: offsets count the bytes the
server stores, which is what ``Range`` addresses.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field, ValidationInfo, field_validator

from airflow_connectors.connections import http as _http
from airflow_connectors.connections.http import HttpConnection, http_connection
from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.datasets import LineageDataset, url_dataset
from airflow_connectors.spec.redact import mask_url
from airflow_connectors.transports.base import Cursor, KeyOffset, Limits, Transport, WorkItem

if TYPE_CHECKING:
    import httpx

#: What a batch reads of a body when the connector sets no ``range_bytes``.
DEFAULT_RANGE_BYTES = 64 << 20

#: Validators planned with a range, as ``WorkItem.meta`` keys -> their response header.
_VALIDATORS = {"etag": "etag", "last_modified": "last-modified"}


class UrlInputConfig(StrictConfig):
    """Config of ``url_input``: Feldera's HTTP GET connector."""

    http_conn_id: str | None = Field(
        default=None,
        description="Airflow HTTP connection whose host (with its schema, http or https, "
        "and port) is the base URL a relative path is joined to; its extra's entries (or "
        'its "headers" object) are sent as request headers and its login and password as '
        "basic auth. The credentials stay in Airflow: never in the spec, the batch plan, "
        "logs or the REST API.",
    )
    path: str = Field(
        min_length=1,
        description="The http:// or https:// URL whose body is read (GET). A user and "
        "password in it (https://user:password@host/...) are sent as basic auth and "
        "masked in logs, errors and the REST API. With http_conn_id it may be a path "
        "(/data/prices.json), joined to the connection's base URL.",
    )
    timeout: float = Field(
        default=30.0,
        gt=0,
        description="Seconds to wait for the server: to connect, and for each read of the "
        "body. A server that does not answer in time fails the batch, which the next run "
        "retries.",
    )
    range_bytes: int = Field(
        default=DEFAULT_RANGE_BYTES,
        gt=0,
        description="Line formats (JSON lines, CSV): bytes of the body one batch reads with "
        "one Range request; each discovery plans the next range after the committed "
        "offset, so an interrupted read loses at most this much and the next run resumes "
        "at the committed offset. A record longer than this is read whole by a larger "
        "range. Other formats read the whole body in one batch.",
    )
    pause_timeout: int = Field(
        default=60,
        description="Accepted for Feldera compatibility and ignored: a batch reads its "
        "range to the end, it never pauses.",
    )

    @field_validator("path")
    @classmethod
    def _http_only(cls, v: str, info: ValidationInfo) -> str:
        if not _absolute(v) and ("://" in v or not info.data.get("http_conn_id")):
            hint = "" if "://" in v else " (a path relative to a base URL needs http_conn_id)"
            raise ValueError(f"expected an http:// or https:// URL, got {mask_url(v)!r}{hint}")
        return v

    def url(self, base_url: str | None) -> str:
        """The URL read: ``path``, joined to ``base_url`` (the connection's) when relative."""
        if _absolute(self.path) or not base_url:
            return self.path
        return base_url.rstrip("/") + "/" + self.path.lstrip("/")


def _absolute(path: str) -> bool:
    return path.startswith(("http://", "https://"))


@dataclass(frozen=True)
class _Head:
    """What the server says of the body before it is read."""

    size: int | None  # None: not told (no Content-Length, or an encoded body)
    validators: Mapping[str, Any] = field(default_factory=dict)
    ranges: bool = True  # False: the server says ``Accept-Ranges: none``


class BodyChanged(OSError):
    """The body is not the one the committed offset or the planned range refers to."""


class UrlInputTransport(Transport):
    """The ``url_input`` transport: the body of one URL is one work item, keyed by the URL;
    line formats read it in byte ranges (HTTP Range requests) across batches."""

    name = "url_input"
    Config = UrlInputConfig
    config: UrlInputConfig
    connection_fields: ClassVar[Mapping[str, str]] = {"http_conn_id": _http.KIND}
    _connection: HttpConnection | None = None

    @property
    def connection(self) -> HttpConnection:
        """The ``http_conn_id`` connection, resolved once (none: no base URL, headers or
        auth beyond the URL's own)."""
        if self._connection is None:
            conn_id = self.config.http_conn_id
            self._connection = http_connection(conn_id) if conn_id else HttpConnection(None)
        return self._connection

    @property
    def url(self) -> str:
        """The URL read: the work item's key (no credential in it but a URL's own)."""
        if self.config.http_conn_id is None:
            return self.config.path
        return self.config.url(self.connection.base_url)

    @property
    def key(self) -> str:
        """The source key of the body: its URL with any password or secret query
        parameter masked, so offsets, plans and messages never hold the secret (the
        request uses :attr:`url`)."""
        return mask_url(self.url)

    def _client(self) -> httpx.Client:
        import httpx

        conn = self.connection
        return httpx.Client(
            timeout=self.config.timeout,
            follow_redirects=False,
            headers=dict(conn.headers),
            auth=conn.auth,
        )

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        """At most one item: the rest of the body after the committed offset (one range of
        ``range_bytes`` for line formats). Raises :class:`BodyChanged` when the body is no
        longer the one whose first bytes were committed."""
        key = self.key
        # Before keys were masked, a URL with a password was its own key.
        done = cursor.get(key) or cursor.get(self.url)
        if key in cursor.in_flight or self.url in cursor.in_flight:
            return
        if done is not None and done.completed:
            return
        start = done.offset if done else 0
        records_done = done.records if done else 0
        head = self._head()
        if head is None or head.size is None:
            # Length unknown (no HEAD, no Content-Length, or unreachable right now: the
            # batch's GET then says why and is retried): the rest of the body, one batch.
            yield WorkItem(
                key=key,
                start=start,
                records_done=records_done,
                final=True,
                meta=dict(head.validators) if head else {},
            )
            return
        size = head.size
        if done is not None:
            self._check_unchanged(done, head)
        end = size
        if limits.appendable and head.ranges:
            seen = int(done.meta.get("seen", 0)) if done else 0
            end = min(size, start + self.config.range_bytes)
            if end <= seen:
                # The last range ended inside one record: read past it this time.
                end = min(size, seen + self.config.range_bytes)
        yield WorkItem(
            key=key,
            start=start,
            end=end,
            size=size,
            records_done=records_done,
            final=end == size,
            meta=dict(head.validators),
        )

    def exhausted(self, cursor: Cursor) -> bool | None:
        """True once the whole body is committed."""
        # Decided from the offsets alone: finalize then asks the server nothing.
        done = cursor.get(self.key) or cursor.get(self.url)
        return done is not None and done.completed

    def _head(self) -> _Head | None:
        import httpx

        try:
            with self._client() as client:
                resp = client.head(self.url, headers={"Accept-Encoding": "identity"})
        except httpx.HTTPError:
            return None
        if not 200 <= resp.status_code < 300:
            return None  # HEAD not allowed (405, 501): plan without a length
        length = resp.headers.get("content-length", "")
        # A HEAD that says 0 may be a server that does not compute lengths for HEAD: a
        # plain GET tells, rather than finishing the input without reading it.
        size = int(length) if length.isdigit() and int(length) and not _encoded(resp) else None
        validators: dict[str, Any] = {
            name: resp.headers[header]
            for name, header in _VALIDATORS.items()
            if header in resp.headers
        }
        if size is not None:
            validators["length"] = size
        return _Head(size, validators, resp.headers.get("accept-ranges", "").lower() != "none")

    def _check_unchanged(self, done: KeyOffset, head: _Head) -> None:
        """The body is still the one whose first ``done.offset`` bytes were committed."""
        assert head.size is not None
        read = max(done.offset, int(done.meta.get("seen", 0)))
        if head.size < read:
            raise self._changed(
                f"it is {head.size} bytes long now, and {read} bytes of it were read before",
                committed=done.offset,
            )
        # The validators a committed range was planned with, when the engine keeps them
        # with the offset.
        for name, now in head.validators.items():
            before = done.meta.get(name)
            if before is not None and before != now:
                raise self._changed(
                    f"{_label(name)} was {before!r} when its first bytes were planned, now {now!r}",
                    committed=done.offset,
                )

    def _changed(self, what: str, committed: int) -> BodyChanged:
        return BodyChanged(
            f"url_input: {mask_url(self.url)} changed after {committed} bytes of it "
            f"were committed ({what}); the rest is not read, so rows of two versions never "
            "mix. To read the new body from the start, stop the connector, reset its offsets "
            "and resume it"
        )

    def read(self, item: WorkItem) -> Iterator[bytes]:
        """GETs ``item``'s byte range. Raises ``TimeoutError`` or another ``OSError`` when the
        server cannot be reached, :class:`BodyChanged` when the body changed since it was planned."""
        import httpx

        try:
            yield from self._get(item)
        except httpx.TimeoutException as e:
            # OSError subclasses: the engine reports an unreachable source in one line
            # and leaves the batch planned for the next run.
            raise TimeoutError(
                f"url_input: GET {mask_url(item.key)} got no answer within "
                f"{self.config.timeout:g} s ({type(e).__name__}); check that the server is "
                "up, or raise timeout"
            ) from e
        except httpx.ConnectError as e:
            raise ConnectionError(
                f"url_input: cannot connect to {mask_url(item.key)} ({_reason(e)}); check "
                "that the server is up and the URL is right"
            ) from e
        except httpx.HTTPError as e:
            raise OSError(f"url_input: GET {mask_url(item.key)} failed: {_reason(e)}") from e

    def _get(self, item: WorkItem) -> Iterator[bytes]:

        if item.end is not None and item.start >= item.end:
            return  # an empty body, or an empty rest
        whole = item.start == 0 and (item.end is None or item.end == item.size)
        headers = {"Accept-Encoding": "identity"}
        if not whole:
            last = "" if item.end is None else str(item.end - 1)
            headers["Range"] = f"bytes={item.start}-{last}"
        with (
            self._client() as client,
            client.stream("GET", self.url, headers=headers) as resp,
        ):
            if resp.status_code == 416:
                if item.size is not None and item.start < item.size:
                    raise self._changed_since_planned(
                        item, f"the server has no byte {item.start} any more (HTTP 416)"
                    )
                return  # nothing left past the offset
            self._check_answer(item, resp, whole)
            self._check_planned(item, resp)
            skip = 0
            if resp.status_code == 206:
                self._check_content_range(item, resp, headers)
            elif item.start:
                skip = item.start  # 200: the server ignored Range; drop what was read
            yield from _range_of_body(item, resp, skip)

    def _check_answer(self, item: WorkItem, resp: httpx.Response, whole: bool) -> None:
        """The GET succeeded with a body whose bytes are the resource's bytes."""
        url = mask_url(item.key)
        if not 200 <= resp.status_code < 300:
            raise OSError(f"url_input: GET {url} answered HTTP {resp.status_code}; expected 2xx")
        if _encoded(resp) and not (whole and item.end is None):
            raise OSError(
                f"url_input: GET {url} answered a {resp.headers['content-encoding']}-encoded "
                "body although identity was asked for; byte ranges of it cannot be read. "
                "Serve the body without Content-Encoding"
            )

    def _check_content_range(
        self, item: WorkItem, resp: httpx.Response, headers: dict[str, str]
    ) -> None:
        """A 206 answer starts at the requested offset, of a body of the planned length."""
        first, total = _content_range(resp.headers.get("content-range", ""))
        if first != item.start:
            raise OSError(
                f"url_input: GET {mask_url(item.key)} with Range {headers.get('Range', '(none)')} "
                f"answered Content-Range {resp.headers.get('content-range', '(none)')!r}, "
                f"which does not start at the requested offset {item.start}; nothing of "
                "it was used. The server's range support is broken: fix it or serve the "
                "body without range support"
            )
        planned = item.meta.get("length")
        if planned is not None and total is not None and total != planned:
            raise self._changed_since_planned(
                item, f"Content-Length was {planned}, Content-Range now says {total}"
            )

    def _check_planned(self, item: WorkItem, resp: httpx.Response) -> None:
        """The response is of the body this range was planned on."""
        for name, header in _VALIDATORS.items():
            planned, now = item.meta.get(name), resp.headers.get(header)
            if planned is not None and now is not None and planned != now:
                raise self._changed_since_planned(
                    item, f"{_label(name)} was {planned!r}, now {now!r}"
                )
        planned = item.meta.get("length")
        length = resp.headers.get("content-length", "")
        if (
            resp.status_code == 200
            and planned is not None
            and length.isdigit()
            and int(length) != planned
        ):
            raise self._changed_since_planned(item, f"Content-Length was {planned}, now {length}")

    def _changed_since_planned(self, item: WorkItem, what: str) -> BodyChanged:
        return BodyChanged(
            f"url_input: {mask_url(item.key)} changed since bytes {item.start}- of it were "
            f"planned ({what}); nothing of it was used, so rows of two versions never mix. "
            "To read the new body from the start, stop the connector, reset its offsets and "
            "resume it"
        )

    def describe(self) -> str:
        """The URL, with any password masked."""
        via = f" (http_conn_id {self.config.http_conn_id})" if self.config.http_conn_id else ""
        return f"url_input: {mask_url(self.config.path)}{via}"

    def lineage_datasets(self) -> list[LineageDataset]:
        """The URL read (``path``, or a relative one joined to ``http_conn_id``'s base
        URL): its path on ``scheme://host:port``."""
        return [url_dataset(self.url)]


def _encoded(resp: httpx.Response) -> bool:
    return resp.headers.get("content-encoding", "identity").strip().lower() not in ("", "identity")


def _label(name: str) -> str:
    return {"etag": "ETag", "last_modified": "Last-Modified", "length": "Content-Length"}[name]


def _reason(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _range_of_body(item: WorkItem, resp: httpx.Response, skip: int) -> Iterator[bytes]:
    """``item``'s bytes of the streamed body: the first ``skip`` bytes dropped, and no
    more than the range holds. Raises ``OSError`` when the body ends before the range."""
    want = None if item.end is None else item.end - item.start
    got = 0
    for data in resp.iter_bytes(1 << 20):
        chunk = data
        if skip:
            cut = min(skip, len(chunk))
            chunk = chunk[cut:]
            skip -= cut
        if want is not None:
            chunk = chunk[: want - got]
        if chunk:
            got += len(chunk)
            yield chunk
        if want is not None and got >= want:
            return  # the rest belongs to later ranges
    if want is not None and got < want:
        raise OSError(
            f"url_input: GET {mask_url(item.key)} ended after {got} of the {want} bytes from "
            f"offset {item.start}; expected the whole range"
        )


def _content_range(value: str) -> tuple[int | None, int | None]:
    """First byte and total length of ``bytes 100-199/200`` (None where absent)."""
    try:
        unit, spec = value.split()
        span, _, total = spec.partition("/")
        first = int(span.split("-")[0]) if unit.lower() == "bytes" else None
    except ValueError:
        return None, None
    return first, int(total) if total.isdigit() else None
