"""Where a sink's files live: a local folder or an ``s3://bucket/prefix`` URL, both
through one :class:`pyarrow.fs.FileSystem` (what the executors write with).

    fs, path = filesystem("s3://lake/wh/p/events")   # S3FileSystem, "lake/wh/p/events"
    fs, path = filesystem("/data/wh/p/events")        # LocalFileSystem, the same path
    location = join("s3://lake/wh", "p", "events")     # URL-aware os.path.join

S3 settings come from the standard AWS environment, read by the connection layer
(:meth:`~airflow_connectors.connections.aws.AwsSettings.from_environment`) because
pyarrow's S3 filesystem reads only the credentials by itself:

- ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (``http://127.0.0.1:9000`` for MinIO or
  a test server: its scheme becomes pyarrow's ``scheme``); unset: AWS itself.
- ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``; unset: the AWS
  SDK's chain (``~/.aws``, instance roles).
- ``AWS_REGION``, else ``AWS_DEFAULT_REGION``; unset (and no endpoint): the bucket's
  region, asked of AWS once per bucket.

Azure Blob Storage (``az://container/path``, ``abfs[s]://container@account.dfs.core.
windows.net/path``) is reached through the ``AZURE_STORAGE_*`` environment, read by
:meth:`~airflow_connectors.connections.azure.AzureSettings.from_environment`
(:func:`azure_settings`): the account and its key, SAS token or connection string, and
``AZURE_STORAGE_ENDPOINT`` for an emulator such as Azurite.

Google Cloud Storage (``gs://bucket/path``) is reached through the Google environment, read
by :meth:`~airflow_connectors.connections.gcp.GcpSettings.from_environment`:
``GOOGLE_APPLICATION_CREDENTIALS`` (else Application Default Credentials),
``GOOGLE_CLOUD_PROJECT``, and ``STORAGE_EMULATOR_HOST`` for an emulator.

Spark's Python workers inherit the driver's environment in local mode; ``spark-submit``
jobs get it from the task's environment (never on a command line), and executors of a
cluster through the job's environment (see :func:`storage_environment`).

Object stores have no renames and no folders: write each object under its final name
(an S3 upload becomes visible whole, when it completes), publish by server-side copy
(:meth:`~pyarrow.fs.FileSystem.copy_file`), and remove staging with :func:`remove_tree`.
pyarrow leaves an empty "folder" marker object (a key ending in ``/``) above whatever
it deletes; readers (pyarrow.dataset, Spark, DuckDB) ignore them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from airflow_connectors.connections.aws import AwsSettings
from airflow_connectors.connections.azure import AZURE_VARIABLES, AzureSettings
from airflow_connectors.connections.gcp import GCP_VARIABLES, GcpSettings

if TYPE_CHECKING:
    import pyarrow.dataset as ds
    from pyarrow import fs as pafs

#: URL schemes served by the S3 filesystem (``s3a`` is Hadoop's name for the same).
S3_SCHEMES = ("s3", "s3a")
#: URL schemes of Azure Blob Storage: ``az://container/path`` (delta-rs, fsspec) and
#: Hadoop's ``abfs[s]://container@account.dfs.core.windows.net/path``.
AZURE_SCHEMES = ("az", "abfs", "abfss")
#: URL schemes of Google Cloud Storage.
GCS_SCHEMES = ("gs",)
#: Environment variables the S3 filesystem is configured from; what executors need.
AWS_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ALLOW_HTTP",
    "AWS_PROFILE",
)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def scheme(location: str) -> str:
    """The URL scheme of ``location`` (lower case), ``""`` for a local path."""
    m = _SCHEME.match(location)
    return m.group(1).lower() if m else ""


def is_object_store(location: str) -> bool:
    """Whether ``location`` is on an object store (``s3://``, ``az://``): no renames, no
    folders."""
    return scheme(location) in S3_SCHEMES + AZURE_SCHEMES + GCS_SCHEMES


def join(base: str, *parts: str) -> str:
    """``os.path.join`` for local paths, ``/``-joined for URLs."""
    if not scheme(base):
        return os.path.join(base, *parts)
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def bucket_of(location: str) -> str:
    """The bucket of an ``s3://bucket/prefix`` URL, the container of an Azure URL (``""``
    for a local path)."""
    return urlsplit(location).netloc.split("@")[0] if is_object_store(location) else ""


def endpoint() -> str | None:
    """The S3 endpoint the environment names (``AWS_ENDPOINT_URL_S3``, then
    ``AWS_ENDPOINT_URL``), or None for AWS itself."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of a local path, ``file://`` or ``s3://bucket/prefix`` URL and the
    path inside it (``bucket/prefix`` on S3, an absolute path locally). Raises
    ValueError (one line) for other schemes."""
    from pyarrow import fs as pafs

    kind = scheme(location)
    if not kind:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(location))
    if kind == "file":
        return pafs.LocalFileSystem(), urlsplit(location).path
    if kind in S3_SCHEMES:
        url = urlsplit(location)
        if not url.netloc:
            raise ValueError(f"{location}: an S3 URL needs a bucket: s3://bucket/prefix")
        path = f"{url.netloc}/{url.path.strip('/')}".rstrip("/")
        settings = AwsSettings.from_environment()
        if not settings.endpoint_url and not settings.region:  # AWS: the bucket's own region
            settings = dataclasses.replace(settings, region=_bucket_region(url.netloc))
        return settings.pyarrow_filesystem(), path
    if kind in AZURE_SCHEMES:
        container, path = bucket_of(location), urlsplit(location).path.strip("/")
        if not container:
            raise ValueError(f"{location}: an Azure URL needs a container: az://container/path")
        return azure_settings(location).pyarrow_filesystem(), f"{container}/{path}".rstrip("/")
    if kind in GCS_SCHEMES:
        url = urlsplit(location)
        if not url.netloc:
            raise ValueError(f"{location}: a Cloud Storage URL needs a bucket: gs://bucket/path")
        path = f"{url.netloc}/{url.path.strip('/')}".rstrip("/")
        return _gcs(GcpSettings.from_environment()), path
    raise ValueError(
        f"{location}: unsupported URL scheme {kind!r}; use a local folder, s3://bucket/prefix, "
        "az://container/path or gs://bucket/path"
    )


@functools.lru_cache(maxsize=8)
def _gcs(settings: GcpSettings) -> pafs.FileSystem:
    """One Cloud Storage filesystem per distinct environment (pyarrow renews its tokens),
    listing folders that are only name prefixes as folders."""
    return settings.pyarrow_listing_filesystem()


def azure_settings(location: str) -> AzureSettings:
    """How to reach the storage account of an Azure URL: the ``AZURE_STORAGE_*``
    environment (:meth:`AzureSettings.from_environment`), the account an
    ``abfs[s]://container@account...`` URL names when the environment names none. Raises
    ValueError (one line) when no account is known."""
    settings = AzureSettings.from_environment()
    host = urlsplit(location).netloc.partition("@")[2]
    if host and not settings.account_name:
        settings = dataclasses.replace(settings, account_name=host.split(".")[0])
    if not settings.account_name:
        raise ValueError(
            f"{location}: no Azure storage account: set AZURE_STORAGE_ACCOUNT_NAME with "
            "AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN, or "
            "AZURE_STORAGE_CONNECTION_STRING (AZURE_STORAGE_ENDPOINT for an emulator)"
        )
    return settings


@functools.lru_cache(maxsize=64)
def _bucket_region(bucket: str) -> str | None:
    """The AWS region of ``bucket`` (None when it cannot be told: the SDK's default)."""
    from pyarrow import fs as pafs

    try:
        return str(pafs.resolve_s3_region(bucket))
    except (OSError, ValueError):
        return None


def aws_environment() -> dict[str, str]:
    """The ``AWS_*`` variables of this process that configure S3 (:data:`AWS_VARIABLES`):
    what Spark executors outside this machine need (``spark.executorEnv.*``, which Spark
    redacts where the name holds ``secret``/``token``/``key``). Never for a command line."""
    return {k: os.environ[k] for k in AWS_VARIABLES if os.environ.get(k)}


#: Every variable an object-store warehouse is configured from (S3's, Azure's, GCS's).
STORAGE_VARIABLES = AWS_VARIABLES + AZURE_VARIABLES + GCP_VARIABLES


def storage_environment() -> dict[str, str]:
    """The variables of :data:`STORAGE_VARIABLES` this process has: what Spark's Python
    workers need to write a warehouse on ``s3://``, ``az://`` or ``gs://``. Never for a command line."""
    return {k: os.environ[k] for k in STORAGE_VARIABLES if os.environ.get(k)}


def remove_tree(fs: pafs.FileSystem, path: str, tries: int = 5) -> None:
    """Remove folder (or prefix) ``path`` with everything under it; nothing when absent.

    Another process may be removing the same folder (two retries of one batch): Azure's
    batch delete then fails for the blobs the other one deleted first ("Failed to delete
    blobs"). The delete is tried again, and only an error on a folder that still holds
    something after ``tries`` attempts is raised."""
    for attempt in range(tries):
        try:
            fs.delete_dir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if not entries(fs, path):
                return
            if attempt == tries - 1:
                raise
            time.sleep(0.05 * 2**attempt)


def is_s3(fs: pafs.FileSystem) -> bool:
    """Whether ``fs`` is an S3 filesystem (an object store)."""
    return bool(fs.type_name == "s3")


def entries(fs: pafs.FileSystem, path: str) -> list[pafs.FileInfo]:
    """Files and folders directly under folder ``path`` (empty when it does not exist)."""
    from pyarrow import fs as pafs

    return list(fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))


def files(fs: pafs.FileSystem, path: str, suffix: str = "") -> list[str]:
    """Paths of the files (objects) directly under folder ``path`` whose name ends with
    ``suffix``, sorted; empty when the folder does not exist."""
    from pyarrow import fs as pafs

    return sorted(
        i.path
        for i in entries(fs, path)
        if i.type == pafs.FileType.File and i.path.endswith(suffix)
    )


def parquet_dataset(location: str) -> ds.Dataset | None:
    """The Parquet files directly in folder ``location`` (a path or ``s3://`` URL) as
    one dataset, to read or count a table back; None when there is no such file."""
    import pyarrow.dataset as ds

    fs, path = filesystem(location)
    names = files(fs, path, ".parquet")
    if not names:
        return None
    dataset = ds.dataset(names, filesystem=fs, format="parquet")
    # Files of several schema versions (schema_evolution: add_new_columns): read with
    # their union, so a column a later batch added reads as null in earlier files
    # (Spark's mergeSchema). One schema, the common case, is the dataset's own.
    schemas = [f.physical_schema for f in dataset.get_fragments()]
    if any(s != schemas[0] for s in schemas):
        import pyarrow as pa

        unified = pa.unify_schemas(schemas)
        dataset = ds.dataset(names, filesystem=fs, format="parquet", schema=unified)
    return dataset


#: pyarrow's S3 errors (``AWS Error <CODE> during ...``) and what the user should do.
_S3_ERRORS = (
    (("NO_SUCH_BUCKET", "not found. To create buckets"), "bucket {bucket} does not exist",
     "create the bucket or point the warehouse at an existing one"),
    (("ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH",
      "EXPIRED_TOKEN", "Forbidden", "403"),
     "access to bucket {bucket} was denied",
     "check the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile or role) "
     "and that they may write this bucket"),
    (("NETWORK_CONNECTION", "Could not resolve", "Couldn't connect", "Connection refused"),
     "the S3 endpoint {endpoint} cannot be reached",
     "check AWS_ENDPOINT_URL, AWS_REGION and the network"),
)  # fmt: skip


def describe_error(location: str, error: BaseException, action: str = "write") -> str:
    """One line for an error to ``action`` (write, read) ``location``: what is wrong and
    what to do. For S3:
    a missing bucket, denied access or an unreachable endpoint named as such (the URL's
    credentials, if any, masked); never a secret."""
    from airflow_connectors.spec.redact import mask_text, mask_url

    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    secrets = aws_secret_values()
    if scheme(location) in AZURE_SCHEMES:
        secrets += sorted(AzureSettings.from_environment().secrets())
    where = mask_url(location)
    if scheme(location) in S3_SCHEMES:
        for needles, what, todo in _S3_ERRORS:
            if any(n in text for n in needles):
                what = what.format(bucket=bucket_of(location), endpoint=_endpoint_name())
                return f"cannot {action} {where}: {what}; {todo}"
    if isinstance(error, OSError) and error.strerror:
        text = error.strerror + (f": {error.filename}" if error.filename else "")
    return f"cannot {action} {where}: {mask_text(text, secrets)}"


def _endpoint_name() -> str:
    from airflow_connectors.spec.redact import mask_url

    url = endpoint()
    return mask_url(url) if url else "of AWS"


def aws_secret_values() -> list[str]:
    """The secrets among this process's AWS variables (secret key, session token): what
    log maskers must hide."""
    return sorted(AwsSettings.from_environment().secrets())
