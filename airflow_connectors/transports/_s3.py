"""S3 plumbing of ``s3_input``: the boto3 client, listing with the server's clock, and S3
errors turned into one-line ``OSError``\\ s naming the object.

Credentials (explicit keys, anonymous, or an Airflow AWS connection) are resolved by the
connection layer, :class:`airflow_connectors.connections.aws.AwsSettings`; the names
below that ``s3_input`` and its tests used before that layer existed point there.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from functools import partial
from typing import Any, Protocol

from airflow_connectors.connections.aws import KIND, AwsConfig, AwsSettings
from airflow_connectors.connections.base import ConnectionProblem, lookup, set_connection_resolver
from airflow_connectors.connections.base import env_var as conn_env_var
from airflow_connectors.spec.redact import mask_text

#: The credentials of a config: the connection layer's AWS settings.
AwsCredentials = AwsSettings
#: A connection nobody knows, or one that cannot be read: the connection layer's error.
ConnectionNotFound = ConnectionProblem

__all__ = [
    "DENIED_CODES",
    "MISSING_CODES",
    "AwsCredentials",
    "ConnectionNotFound",
    "Listing",
    "S3Object",
    "conn_env_var",
    "content_range_start",
    "credentials",
    "error_code",
    "make_client",
    "resolve_connection",
    "server_time",
    "set_connection_resolver",
    "translate",
]

#: S3 error codes of a refused request: credentials or permissions, never retried.
DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "ExpiredToken",
        "TokenRefreshRequired",
        "AccountProblem",
        "403",
        "Forbidden",
    }
)
#: S3 error codes of a key or bucket that is not there.
MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


class ClientConfig(AwsConfig, Protocol):
    """What :func:`make_client` reads of a config besides its AWS settings."""

    @property
    def max_concurrent_fetches(self) -> int: ...


def resolve_connection(conn_id: str) -> AwsSettings:
    """The settings of Airflow AWS connection ``conn_id`` (see
    :func:`airflow_connectors.connections.base.lookup`)."""
    return AwsSettings.from_connection(
        lookup(conn_id, who="s3_input", field="aws_conn_id", kind=KIND)
    )


def credentials(config: AwsConfig) -> AwsSettings:
    """The settings of ``config``: its own keys, or its connection's, with the config's
    ``region``/``endpoint_url`` taking precedence over the connection's."""
    return AwsSettings.resolve(config, who="s3_input")


#: boto3 clients of this process by what they were made from: building one takes tens
#: to hundreds of milliseconds, and an executor reads many small objects.
_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()
_MAX_CLIENTS = 32
#: Variables boto3's default credential chain and endpoint resolution read.
_AWS_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)


def make_client(config: ClientConfig, creds: AwsSettings) -> Any:
    """A boto3 S3 client, shared by the transports of this process made from the same
    credentials and settings (boto3 clients are thread safe). botocore's own retries
    are off: the transport's retry policy decides (one place, counted)."""
    ambient = tuple(os.environ.get(v) for v in _AWS_ENV) if creds.access_key is None else ()
    key = (creds, config.max_concurrent_fetches, ambient)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            if len(_clients) >= _MAX_CLIENTS:
                _clients.pop(next(iter(_clients)))
            client = _clients[key] = _new_client(config, creds)
    return client


def _new_client(config: ClientConfig, creds: AwsSettings) -> Any:
    import boto3

    return boto3.session.Session().client(
        "s3",
        **creds.client_kwargs(
            max_pool_connections=config.max_concurrent_fetches,
            retries={"total_max_attempts": 1, "mode": "standard"},
        ),
    )


@dataclass(frozen=True)
class S3Object:
    """One listed object."""

    key: str
    size: int
    mtime: float
    etag: str


class Listing:
    """The objects of ``bucket`` under ``prefix`` in key order (after ``start_after``),
    page by page; ``started_at`` is the server's clock at the first page (its ``Date``
    header; this machine's clock before the first request when the answer has none),
    ``pages`` the list requests made."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        prefix: str,
        start_after: str | None,
        call: Callable[[str, Callable[[], Any]], Any],
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.start_after = start_after
        self.call = call
        self.started_at: float | None = None
        self.pages = 0

    def __iter__(self) -> Iterator[S3Object]:
        token: str | None = None
        asked_at = time.time()
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix}
            if token:
                kwargs["ContinuationToken"] = token
            elif self.start_after:
                kwargs["StartAfter"] = self.start_after
            where = f"list s3://{self.bucket}/{self.prefix}"
            page = self.call(where, partial(self.client.list_objects_v2, **kwargs))
            self.pages += 1
            if self.started_at is None:
                self.started_at = server_time(page) or asked_at
            for obj in page.get("Contents", ()):
                yield S3Object(
                    key=obj["Key"],
                    size=int(obj["Size"]),
                    mtime=obj["LastModified"].timestamp(),
                    etag=str(obj.get("ETag", "")),
                )
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return


def server_time(response: Mapping[str, Any]) -> float | None:
    """The ``Date`` header of a boto3 response as epoch seconds (None: absent)."""
    headers = (response.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
    date = headers.get("date")
    if not date:
        return None
    try:
        return parsedate_to_datetime(date).timestamp()
    except (TypeError, ValueError):
        return None


def error_code(exc: BaseException) -> tuple[str, int | None]:
    """The S3 error code and HTTP status of a botocore ``ClientError`` ("" otherwise)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, Mapping):
        return "", None
    code = str((response.get("Error") or {}).get("Code", ""))
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return code, int(status) if status is not None else None


def translate(exc: Exception, what: str, secrets: set[str]) -> OSError:
    """A botocore error of ``what`` (``GET s3://b/k``) as one line, secrets scrubbed:
    ``PermissionError`` for refused credentials, ``FileNotFoundError`` for a missing key,
    ``ConnectionError``/``TimeoutError`` for an unreachable endpoint, else ``OSError``."""
    from botocore.exceptions import (
        ClientError,
        NoCredentialsError,
        ReadTimeoutError,
    )
    from botocore.exceptions import (
        ConnectionError as BotoConnectionError,
    )

    code, status = error_code(exc)
    reason = mask_text(_first_line(exc), secrets)
    if isinstance(exc, NoCredentialsError):
        return PermissionError(
            f"s3_input: {what}: no AWS credentials found; set aws_access_key_id and "
            "aws_secret_access_key, aws_conn_id, or no_sign_request: true for a public bucket"
        )
    if isinstance(exc, ClientError):
        http = f", HTTP {status}" if status else ""
        if code in DENIED_CODES or status == 403:
            return PermissionError(
                f"s3_input: {what} was refused ({code or 'Forbidden'}{http}): {reason}; check "
                "the credentials (aws_access_key_id/aws_secret_access_key or aws_conn_id) "
                "and that they may list and read the bucket"
            )
        if code == "NoSuchBucket":
            return FileNotFoundError(
                f"s3_input: {what}: the bucket does not exist (NoSuchBucket); check "
                "bucket_name, endpoint_url and region"
            )
        if code in MISSING_CODES or status == 404:
            return FileNotFoundError(f"s3_input: {what} does not exist ({code or 'NotFound'})")
        return OSError(f"s3_input: {what} failed ({code or 'error'}{http}): {reason}")
    if isinstance(exc, ReadTimeoutError):
        return TimeoutError(f"s3_input: {what} timed out: {reason}")
    if isinstance(exc, BotoConnectionError):
        return ConnectionError(
            f"s3_input: {what}: cannot reach the endpoint ({reason}); check endpoint_url "
            "and that the server is up"
        )
    return OSError(f"s3_input: {what} failed: {type(exc).__name__}: {reason}")


def content_range_start(value: str | None) -> int | None:
    """The first byte of a ``Content-Range: bytes 100-199/200`` value (None: absent)."""
    if not value:
        return None
    unit, _, spec = value.partition(" ")
    first = spec.split("-", 1)[0]
    return int(first) if unit.lower() == "bytes" and first.isdigit() else None


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0].strip() if lines else type(exc).__name__
