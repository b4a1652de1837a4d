"""``gcs_input``: objects of a Google Cloud Storage bucket, a listing source
(:mod:`.listing`: the framework owns the watermark, re-lists and late keys, collapse,
the minimum age, compression, byte ranges and change notices).

What is Cloud Storage's own: listing with ``startOffset`` (inclusive, so the key itself
is dropped), the object's generation as its version tag, and reading a byte range of
that generation, so rows of two versions of an object never mix (a replaced object's
old generation is gone: the read fails instead). An object's time is its generation's
creation time (``timeCreated``; ``updated`` also moves when only metadata changes).
Credentials: ``gcp_conn_id`` (Airflow's Google Cloud connection) or the environment
(:mod:`airflow_connectors.connections.gcp`). The re-list time is this host's clock,
which ``relist_margin_s`` also covers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any, ClassVar, TypeVar

from pydantic import Field, field_validator

from airflow_connectors.connections.gcp import KIND, GcpConfigFields, GcpSettings
from airflow_connectors.spec.datasets import LineageDataset, storage_dataset
from airflow_connectors.spec.redact import mask_text
from airflow_connectors.transports import retry
from airflow_connectors.transports.base import WorkItem
from airflow_connectors.transports.listing import (
    ETAG,
    ListingConfig,
    ListingSource,
    ObjectInfo,
    PrefixOrKey,
)

#: Bytes asked of the server per request when reading.
READ_CHUNK = 8 << 20
#: Objects per listing page.
PAGE = 1000

T = TypeVar("T")

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


class GcsInputConfig(ListingConfig, GcpConfigFields, PrefixOrKey):
    """A bucket and a prefix (or one key), how to reach it, and the settings of every
    listing source."""

    bucket_name: str = Field(
        description="The bucket to read (Cloud Storage naming rules: lowercase letters, "
        "digits, '-', '_' and '.').",
    )

    @field_validator("bucket_name")
    @classmethod
    def _bucket_rules(cls, v: str) -> str:
        if v.startswith("gs://"):
            raise ValueError(f"expected a bucket name, not a URL; write {v[5:].split('/')[0]!r}")
        if not _BUCKET.match(v) or ".." in v:
            raise ValueError(
                f"{v!r} is not a valid bucket name: 3-222 lowercase letters, digits, '-', '_' "
                "and '.', starting and ending with a letter or digit"
            )
        return v


class GcsInputTransport(ListingSource):
    """The ``gcs_input`` transport: each object under the prefix is a work item keyed by
    its name, its generation the version read."""

    name = "gcs_input"
    Config = GcsInputConfig
    read_ahead = 6  # small objects fetched 6 at a time: each GET is a round trip
    config: GcsInputConfig
    connection_fields: ClassVar[Mapping[str, str]] = {"gcp_conn_id": KIND}

    def __init__(self, config: GcsInputConfig, table: Any) -> None:
        super().__init__(config, table)
        self._settings: GcpSettings | None = None
        self._bucket: Any = None

    @property
    def bucket(self) -> Any:
        """The google-cloud-storage bucket, its client built on first use."""
        if self._bucket is None:
            self._settings = self.config.gcp_settings(self.name)
            self._bucket = self._settings.storage_client().bucket(self.config.bucket_name)
        return self._bucket

    def object_url(self, key: str) -> str:
        """``gs://bucket/key``."""
        return f"gs://{self.config.bucket_name}/{key}"

    def location(self) -> str:
        """``gs://bucket/prefix`` (or the one key)."""
        return self.object_url(self.scope())

    def scope(self) -> str:
        """The one key, or the prefix."""
        return self.config.key if self.config.key is not None else self.config.prefix or ""

    def lineage_datasets(self) -> list[LineageDataset]:
        """``gs://bucket`` and the prefix or key, as OpenLineage names Cloud Storage."""
        return [storage_dataset(self.location())]

    def describe(self) -> str:
        """The bucket and prefix or key, with ``(follow)`` when following."""
        return f"gcs_input: {self.location()}{' (follow)' if self.config.follow else ''}"

    # --- listing ----------------------------------------------------------------------

    def list_objects(self, after: str | None) -> Iterator[ObjectInfo]:
        """The objects after ``after``, a page (one request, retried) at a time."""
        if self.config.key is not None:
            blob = self._call(f"get {self.location()}", lambda: self._get_blob(self.scope()))
            if blob is not None and (after is None or blob.name > after):
                yield _info(blob)
            return
        token: str | None = None
        while True:
            page, token = self._call(f"list {self.location()}", partial(self._page, after, token))
            for blob in page:
                if after is None or blob.name > after:  # startOffset is inclusive
                    yield _info(blob)
            if not token:
                return

    def _page(self, after: str | None, token: str | None) -> tuple[list[Any], str | None]:
        blobs = self.bucket.client.list_blobs(
            self.bucket,
            prefix=self.config.prefix or None,
            start_offset=after,
            page_token=token,
            page_size=PAGE,
            retry=None,
        )
        page: list[Any] = list(next(blobs.pages, []))
        return page, blobs.next_page_token

    def _get_blob(self, key: str) -> Any:
        return self.bucket.get_blob(key, retry=None)

    # --- reading ----------------------------------------------------------------------

    def read_label(self, key: str) -> str:
        """``GET gs://bucket/key``."""
        return f"GET {self.object_url(key)}"

    def open_range(self, item: WorkItem, start: int, end: int | None) -> Iterator[bytes]:
        """Bytes ``[start, end)`` of the generation planned, ``READ_CHUNK`` per request
        (stored bytes: no decompressive transcoding)."""
        generation = item.meta.get(ETAG)
        blob = self.bucket.blob(item.key, generation=int(generation) if generation else None)
        end = item.size if end is None else end  # a listed object's size is known
        while end is None or start < end:
            stop = None if end is None else min(end, start + READ_CHUNK) - 1
            try:
                data = blob.download_as_bytes(
                    start=start, end=stop, raw_download=True, checksum=None, retry=None
                )
            except Exception as e:
                raise self._translate(e, f"GET {self.object_url(item.key)}", item) from e
            if not data and end is not None:
                raise retry.TransientError(
                    f"gcs_input: GET {self.object_url(item.key)} ended at byte {start}, "
                    f"before the end of its range ({end})"
                )
            start += len(data)
            yield data
            if end is None:
                return

    # --- errors -----------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()`` under the connector's retry policy, its errors translated."""

        def once() -> T:
            try:
                return fn()
            except Exception as e:
                raise self._translate(e, what) from e

        return retry.retrying(self.retry, what, once)

    def _translate(
        self, e: BaseException, what: str, item: WorkItem | None = None
    ) -> BaseException:
        """A library error as an error the framework judges: ``FileNotFoundError``,
        ``PermissionError``, a transient error (retried), or one-line ``OSError``."""
        if isinstance(e, (OSError, retry.TransientError)) and str(e).startswith("gcs_input:"):
            return e
        status = getattr(e, "code", None) if type(e).__module__.startswith("google.") else None
        where = self._settings.describe() if self._settings else "Cloud Storage"
        if status == 404 and item is not None:
            return FileNotFoundError(
                f"gcs_input: {what}: generation {item.meta.get(ETAG)} of the object is gone "
                "(it was replaced or deleted since it was planned); nothing of it was used"
            )
        if status == 404:
            return FileNotFoundError(
                f"gcs_input: {what}: bucket {self.config.bucket_name} does not exist (reached "
                f"{where}); check bucket_name, and endpoint_url or the connection"
            )
        if status in (401, 403):
            return PermissionError(
                f"gcs_input: {what} was refused ({status}, reached {where}); check the "
                "credentials (gcp_conn_id's key, key_path) and that they may read the bucket"
            )
        reason = mask_text(_reason(e), self._settings.secrets() if self._settings else set())
        if type(e).__name__ == "RefreshError" and not getattr(e, "retryable", False):
            return PermissionError(
                f"gcs_input: {what}: the credentials were refused when asking for an access "
                f"token ({reason}); check gcp_conn_id's key (or key_path)"
            )
        if isinstance(status, int) and (status in (408, 429) or 500 <= status <= 599):
            return _Transient(f"gcs_input: {what}: Cloud Storage answered {status}: {reason}")
        if retry.is_transient(e):
            return _Transient(
                f"gcs_input: {what}: cannot reach Cloud Storage {where} ({reason}); check "
                "endpoint_url or the connection, and the network"
            )
        return OSError(f"gcs_input: {what} failed (reached {where}): {reason}")


class _Transient(OSError):
    """A failure worth retrying; one line, as it is shown once retries run out."""

    transient = True


def _info(blob: Any) -> ObjectInfo:
    created = blob.time_created or blob.updated
    return ObjectInfo(
        key=blob.name,
        size=int(blob.size or 0),
        mtime=created.timestamp(),
        etag=str(blob.generation) if blob.generation else None,
    )


def _reason(e: BaseException) -> str:
    """The gist of a library error: the socket's reason (``Connection refused``) when
    there is one, else its first line without the request's URL."""
    text = str(e).strip()
    cause = re.search(r"\[Errno -?\d+\] ([^\"')\]]+)", text)
    if cause:
        return cause.group(1).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    return re.sub(r"(GET|POST|PUT|DELETE|HEAD) https?://\S+", r"\1", first)[:300]
