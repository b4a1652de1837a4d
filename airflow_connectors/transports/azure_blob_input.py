"""``azure_blob_input``: blobs of an Azure Blob Storage container, a listing source
(:mod:`.listing`: the framework owns the watermark, re-lists and late keys, collapse,
compression, byte ranges and change notices).

What is Azure's own: listing a container by name prefix with the service's ``Date`` as
the re-list time, reading a byte range with a ranged download that carries ``If-Match``
with the ETag planned (rows of two versions of a blob never mix), the account reached
through :mod:`airflow_connectors.connections.azure` (``wasb_conn_id``, a connection
string, a key or a SAS token), and Azure's errors as one line without secrets.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from airflow_connectors.connections.azure import KIND, AzureConfigFields, AzureSettings
from airflow_connectors.spec.datasets import LineageDataset, storage_dataset
from airflow_connectors.spec.redact import mask_text
from airflow_connectors.transports import retry
from airflow_connectors.transports.base import WorkItem
from airflow_connectors.transports.listing import ETAG, ListingConfig, ListingSource, ObjectInfo

T = TypeVar("T")
#: Bytes one download request asks for (the SDK's first and later requests alike).
READ_CHUNK = 8 << 20
_CONTAINER = re.compile(r"^(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")


class AzureBlobInputConfig(ListingConfig, AzureConfigFields):
    """A container and a name prefix (or one blob), how to reach the account, and the
    settings of every listing source."""

    container: str = Field(
        description="The container to read (3-63 lowercase letters, digits and '-').",
    )
    prefix: str | None = Field(
        default=None,
        description="Read every blob whose name starts with this prefix, in name order "
        "('' for the whole container). Exactly one of prefix and blob.",
    )
    blob: str | None = Field(
        default=None,
        min_length=1,
        description="Read this one blob. Exactly one of prefix and blob.",
    )

    @field_validator("container")
    @classmethod
    def _container_rules(cls, v: str) -> str:
        if "://" in v or "/" in v:
            raise ValueError(f"expected a container name, not a URL or path: {v!r}")
        if not _CONTAINER.match(v) and v not in ("$root", "$web", "$logs"):
            raise ValueError(
                f"{v!r} is not a valid container name: 3-63 lowercase letters, digits and "
                "'-', starting and ending with a letter or digit, no '--'"
            )
        return v

    @model_validator(mode="after")
    def _prefix_or_blob(self) -> AzureBlobInputConfig:
        if (self.prefix is None) == (self.blob is None):
            raise ValueError(
                "set exactly one of prefix (every blob under it; '' for the whole "
                "container) and blob (one blob)"
            )
        return self


class AzureBlobInputTransport(ListingSource):
    """The ``azure_blob_input`` transport: each blob under the prefix is a work item keyed
    by its name; byte offsets let a blob be resumed mid-way with a ranged download."""

    name = "azure_blob_input"
    Config = AzureBlobInputConfig
    read_ahead = 6  # small objects fetched 6 at a time: each GET is a round trip
    config: AzureBlobInputConfig
    connection_fields: ClassVar[Mapping[str, str]] = {"wasb_conn_id": KIND}
    noun = "blob"

    def __init__(self, config: AzureBlobInputConfig, table: Any) -> None:
        super().__init__(config, table)
        self._client: Any = None
        self._settings: AzureSettings | None = None
        self._began: float | None = None

    @property
    def client(self) -> Any:
        """The container's client, built on first use (the connection resolved then).
        The SDK does not retry: the connector's ``errors.retry.*`` do."""
        if self._client is None:
            self._settings = self.config.azure_settings(self.name)
            service = self._settings.blob_service_client(
                retry_total=0,
                connection_timeout=20,
                read_timeout=60,
                max_single_get_size=READ_CHUNK,
                max_chunk_get_size=READ_CHUNK,
            )
            self._client = service.get_container_client(self.config.container)
        return self._client

    def object_url(self, key: str) -> str:
        """``az://container/name``."""
        return f"az://{self.config.container}/{key}"

    def location(self) -> str:
        """``az://container/prefix`` (or the one blob)."""
        return self.object_url(self.scope())

    def scope(self) -> str:
        """The one blob, or the prefix."""
        return self.config.blob if self.config.blob is not None else self.config.prefix or ""

    # --- listing ----------------------------------------------------------------------

    def list_objects(self, after: str | None) -> Iterator[ObjectInfo]:
        """The blobs under the prefix in name order, those named ``<= after`` skipped.
        Azure's List Blobs has no "start after": its ``marker`` is an opaque token of
        the service, and the ``startFrom`` of the newest API versions is not served by
        Azurite, which the tests run against. So every discovery lists the whole prefix
        (one request per 5,000 blobs, committed ones included); state, planning and
        reads stay O(new) through the framework's watermark."""
        self._began = None
        hook = self._note_date
        if self.config.blob is not None:
            blob = self.client.get_blob_client(self.config.blob)
            what = f"get the properties of {self.location()}"
            try:
                props = self._call(what, lambda: blob.get_blob_properties(raw_response_hook=hook))
            except FileNotFoundError:
                return
            yield _info(props)
            return
        pages = self.client.list_blobs(
            name_starts_with=self.config.prefix or None, raw_response_hook=hook
        ).by_page()
        what = f"list {self.location()}"
        while (page := self._call(what, lambda: next(pages, None))) is not None:
            for props in page:
                if after is None or props.name > after:
                    yield _info(props)

    def _note_date(self, response: Any) -> None:
        """The service's clock at the first answer of a listing (its ``Date``)."""
        if self._began is None:
            date = response.http_response.headers.get("Date")
            self._began = parsedate_to_datetime(date).timestamp() if date else time.time()

    def listing_started_at(self) -> float | None:
        """The service's ``Date`` at the listing's first answer."""
        return self._began

    # --- reading ----------------------------------------------------------------------

    def read_label(self, key: str) -> str:
        """``GET az://container/name``."""
        return f"GET {self.object_url(key)}"

    def open_range(self, item: WorkItem, start: int, end: int | None) -> Iterator[bytes]:
        """One ranged download (``If-Match`` the ETag planned)."""
        if (end is not None and start >= end) or (item.size is not None and start >= item.size):
            return iter(())  # nothing left: Azure answers 416 to a range past the end
        etag = item.meta.get(ETAG)
        match: dict[str, Any] = {}
        if etag:
            from azure.core import MatchConditions

            match = {"etag": etag, "match_condition": MatchConditions.IfNotModified}
        blob = self.client.get_blob_client(item.key)
        what = self.read_label(item.key)
        length = None if end is None else end - start
        download = self._once(what, lambda: blob.download_blob(start, length, **match))
        return self._chunks(download.chunks(), what)

    def _chunks(self, chunks: Iterator[bytes], what: str) -> Iterator[bytes]:
        try:
            yield from chunks
        except Exception as e:
            raise self._error(e, what) from e

    # --- errors -----------------------------------------------------------------------

    def _once(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()`` with Azure's errors as one-line :class:`AzureBlobError`\\ s."""
        try:
            return fn()
        except Exception as e:
            raise self._error(e, what) from e

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()`` retried under the connector's ``errors.retry.*``."""
        return retry.retrying(self.retry, what, lambda: self._once(what, fn))

    def _error(self, e: Exception, what: str) -> Exception:
        """An Azure SDK error as one line naming the blob and what to do; a missing or
        replaced blob a ``FileNotFoundError``, a refusal a ``PermissionError``; other
        errors keep their class (ours, the framework's)."""
        from azure.core import exceptions as az

        if not isinstance(e, az.AzureError):
            return e
        status = getattr(e, "status_code", None)
        code = getattr(e, "error_code", None)
        code = str(getattr(code, "value", code) or type(e).__name__)
        lines = [line for line in str(e.message or e).splitlines() if line.strip()]
        said = f"{status or ''} {code}".strip()
        text = f"{self.name}: cannot {what}: {said}: {lines[0] if lines else ''}"
        text = mask_text(text.rstrip(": "), self._settings.secrets() if self._settings else ())
        if status == 404 and "ContainerNotFound" in code:
            return FileNotFoundError(f"{text}; create container {self.config.container!r}")
        if status == 404:
            return FileNotFoundError(f"{text}; it was listed for this batch but is gone")
        if status == 412:
            return FileNotFoundError(
                f"{text}; the blob was replaced or deleted since it was planned (its ETag "
                "changed); nothing of it was used, so rows of two versions never mix"
            )
        if status in (401, 403):
            return PermissionError(
                f"{text}; check the account key, SAS token or connection (wasb_conn_id) and "
                f"that it may read container {self.config.container!r}"
            )
        transient = status is None or status in (408, 429) or status >= 500
        return AzureBlobError(text, transient=transient and status != 501)

    def lineage_datasets(self) -> list[LineageDataset]:
        """``wasbs://<container>@<account host>`` and the prefix or blob, as OpenLineage
        names Azure Blob Storage (the connection resolved for the account's host)."""
        host = urlsplit(self.config.azure_settings(self.name).blob_endpoint).netloc
        return [storage_dataset(f"wasbs://{self.config.container}@{host}/{self.scope()}")]

    def describe(self) -> str:
        """The container and prefix or blob, with ``(follow)`` when following."""
        return f"{self.name}: {self.location()}{' (follow)' if self.config.follow else ''}"


class AzureBlobError(OSError):
    """A failure to reach or read Azure Blob Storage, one line without secrets;
    ``transient`` says whether it is worth retrying (network errors, 5xx, throttling)."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def _info(props: Any) -> ObjectInfo:
    return ObjectInfo(
        key=props.name,
        size=int(props.size or 0),
        mtime=props.last_modified.timestamp(),
        # Listings give the ETag bare, properties quoted: keep one form (quoted, as HTTP).
        etag=f'"{props.etag.strip(chr(34))}"' if props.etag else None,
    )
