"""S3 plumbing of ``s3_input``: credentials (explicit keys, anonymous, or an Airflow AWS
connection resolved without importing Airflow), the boto3 client, listing with the
server's clock, and S3 errors turned into one-line ``OSError``\\ s naming the object.

An ``aws_conn_id`` is looked up as Airflow looks up connections from the environment:
the variable ``AIRFLOW_CONN_<ID>`` (JSON or URI form) first, then the resolver a higher
layer installed with :func:`set_connection_resolver` (the Airflow integration installs
one that asks Airflow, so a discover task finds connections of Airflow's metadata
database or secrets backend). Nothing here imports Airflow.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from airflow_connectors.spec.redact import mask_text

if TYPE_CHECKING:
    from airflow_connectors.transports.s3_input import S3InputConfig

#: ``fn(conn_id)`` -> the connection as Airflow's JSON form (``conn_type``, ``login``,
#: ``password``, ``host``, ``extra``), or None when it does not know the connection.
ConnectionResolver = Callable[[str], Mapping[str, Any] | None]

_resolver: ConnectionResolver | None = None

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


def set_connection_resolver(fn: ConnectionResolver | None) -> None:
    """Install how ``aws_conn_id`` is resolved when no ``AIRFLOW_CONN_<ID>`` variable
    names it (None: environment variables only). The Airflow integration installs one
    that asks Airflow."""
    global _resolver
    _resolver = fn


def lookup_connection(conn_id: str) -> Mapping[str, Any] | None:
    """Connection ``conn_id`` as the installed resolver gives it (Airflow's JSON form);
    None when none is installed or it does not know the connection."""
    return _resolver(conn_id) if _resolver is not None else None


def conn_env_var(conn_id: str) -> str:
    """The environment variable Airflow reads a connection from: ``AIRFLOW_CONN_<ID>``."""
    return f"AIRFLOW_CONN_{conn_id.upper()}"


class ConnectionNotFound(OSError):
    """``aws_conn_id`` names a connection that neither the environment nor Airflow knows."""


@dataclass(frozen=True)
class AwsCredentials:
    """What a client needs from a connection or the config; None: boto3's default."""

    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    region: str | None = None
    endpoint_url: str | None = None

    def secrets(self) -> set[str]:
        """The secret values, to scrub from messages."""
        return {s for s in (self.secret_key, self.session_token) if s}


def parse_connection(conn_id: str, value: str | Mapping[str, Any]) -> AwsCredentials:
    """An Airflow AWS connection, as JSON text, a URI (``aws://key:secret@/?region_name=``)
    or an already parsed dict, as credentials: ``login``/``password`` are the key pair,
    ``extra`` gives ``region_name``, ``endpoint_url`` (or ``service_config.s3``) and
    ``aws_session_token``. Raises ``ValueError`` naming the variable
    when it is neither."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                data = json.loads(text)
            except ValueError:
                raise ValueError(
                    f"{conn_env_var(conn_id)} is not valid JSON; expected Airflow's JSON form "
                    '{"conn_type": "aws", "login": ..., "password": ..., "extra": {...}} or a '
                    "URI aws://KEY:SECRET@/?region_name=..."
                ) from None
        else:
            data = _uri_connection(text)
    else:
        data = dict(value)
    extra = data.get("extra") or {}
    if isinstance(extra, str):
        try:
            extra = json.loads(extra) if extra.strip() else {}
        except ValueError:
            raise ValueError(
                f"the extra of Airflow connection {conn_id!r} is not valid JSON"
            ) from None
    service = (extra.get("service_config") or {}).get("s3") or {}
    endpoint = service.get("endpoint_url") or extra.get("endpoint_url")
    return AwsCredentials(
        access_key=data.get("login") or extra.get("aws_access_key_id") or None,
        secret_key=data.get("password") or extra.get("aws_secret_access_key") or None,
        session_token=extra.get("aws_session_token") or None,
        region=extra.get("region_name") or None,
        endpoint_url=endpoint or None,
    )


def _uri_connection(uri: str) -> dict[str, Any]:
    """Airflow's URI form of a connection as its JSON form."""
    parts = urlsplit(uri)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    extra: dict[str, Any] = json.loads(query["__extra__"]) if "__extra__" in query else query
    return {
        "conn_type": parts.scheme,
        "login": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else None,
        "extra": extra,
    }


def resolve_connection(conn_id: str) -> AwsCredentials:
    """The credentials of Airflow connection ``conn_id``: ``AIRFLOW_CONN_<ID>`` first,
    then the installed resolver. Raises :class:`ConnectionNotFound` in one line."""
    var = conn_env_var(conn_id)
    raw = os.environ.get(var)
    if raw:
        return parse_connection(conn_id, raw)
    found = _resolver(conn_id) if _resolver is not None else None
    if found is not None:
        return parse_connection(conn_id, found)
    where = "Airflow does not know it either" if _resolver else "Airflow was not asked"
    raise ConnectionNotFound(
        f"s3_input: aws_conn_id {conn_id!r} names no connection ({var} is not set, and "
        f"{where}); create an Amazon Web Services connection {conn_id!r} in Airflow, set "
        f"{var} (JSON or aws:// URI), or give aws_access_key_id and aws_secret_access_key"
    )


def credentials(config: S3InputConfig) -> AwsCredentials:
    """The credentials of ``config``: its own keys, or its connection's, with the
    config's ``region``/``endpoint_url`` taking precedence over the connection's."""
    base = (
        resolve_connection(config.aws_conn_id)
        if config.aws_conn_id
        else AwsCredentials(config.aws_access_key_id, config.aws_secret_access_key)
    )
    return AwsCredentials(
        access_key=base.access_key,
        secret_key=base.secret_key,
        session_token=base.session_token,
        region=config.region or base.region,
        endpoint_url=config.endpoint_url or base.endpoint_url,
    )


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


def make_client(config: S3InputConfig, creds: AwsCredentials) -> Any:
    """A boto3 S3 client, shared by the transports of this process made from the same
    credentials and settings (boto3 clients are thread safe). botocore's own retries
    are off: the transport's retry policy decides (one place, counted)."""
    ambient = tuple(os.environ.get(v) for v in _AWS_ENV) if creds.access_key is None else ()
    key = (creds, config.no_sign_request, config.max_concurrent_fetches, ambient)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            if len(_clients) >= _MAX_CLIENTS:
                _clients.pop(next(iter(_clients)))
            client = _clients[key] = _new_client(config, creds)
    return client


def _new_client(config: S3InputConfig, creds: AwsCredentials) -> Any:
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    options: dict[str, Any] = {
        "max_pool_connections": config.max_concurrent_fetches,
        "retries": {"total_max_attempts": 1, "mode": "standard"},
    }
    if config.no_sign_request:
        options["signature_version"] = UNSIGNED
    session = boto3.session.Session()
    return session.client(
        "s3",
        endpoint_url=creds.endpoint_url,
        region_name=creds.region,
        aws_access_key_id=None if config.no_sign_request else creds.access_key,
        aws_secret_access_key=None if config.no_sign_request else creds.secret_key,
        aws_session_token=None if config.no_sign_request else creds.session_token,
        config=Config(**options),
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
