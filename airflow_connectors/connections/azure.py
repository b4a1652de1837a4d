"""Azure Blob Storage settings, resolved once and rendered for each library that talks to
a storage account: azure-storage-blob (:meth:`AzureSettings.blob_service_client`),
delta-rs (:meth:`AzureSettings.storage_options`) and pyarrow
(:meth:`AzureSettings.pyarrow_filesystem`). :class:`AzureConfigFields` declares the
config fields once for every transport and sink.

An Airflow Azure Blob Storage connection (``conn_type`` ``wasb``, named by
``wasb_conn_id``) is read as Airflow's Microsoft Azure provider reads it: its extra's
``connection_string`` first; else ``login`` is the account name, ``host`` the account URL
(``https://<account>.blob.core.windows.net`` when empty), and the credential is the
extra's ``shared_access_key``, its ``sas_token`` (a token, or a whole URL that carries
one), the ``password`` or the extra's ``account_key``, in that order. Active Directory
logins (the extra's ``tenant_id``) and Azure's default credential chain (managed
identities) need ``azure-identity``, which is not installed: such a connection is a
:class:`~airflow_connectors.connections.base.ConnectionProblem` that says so.

The environment's ``AZURE_STORAGE_CONNECTION_STRING``, or ``AZURE_STORAGE_ACCOUNT_NAME``
with ``AZURE_STORAGE_ACCOUNT_KEY`` or ``AZURE_STORAGE_SAS_TOKEN`` (and
``AZURE_STORAGE_ENDPOINT``, the account URL of an emulator or another cloud), fill what a
config leaves unset (:meth:`AzureSettings.with_environment`): what a warehouse on
``az://`` and Spark executors use, as ``AWS_*`` serve ``s3://``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, Field, model_validator

from airflow_connectors.connections.base import AirflowConnection, ConnectionProblem, lookup

if TYPE_CHECKING:
    from pyarrow import fs as pafs

#: What the Airflow UI calls the connection type ``wasb_conn_id`` names.
KIND = "Azure Blob Storage"
#: The environment variables :meth:`AzureSettings.with_environment` reads.
AZURE_VARIABLES = (
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_ENDPOINT",
)


class AzureConfig(Protocol):
    """The fields of a config that says how to reach a storage account (see
    :class:`AzureConfigFields`). Read-only."""

    @property
    def account_url(self) -> str | None: ...  # noqa: D102
    @property
    def account_name(self) -> str | None: ...  # noqa: D102
    @property
    def account_key(self) -> str | None: ...  # noqa: D102
    @property
    def sas_token(self) -> str | None: ...  # noqa: D102
    @property
    def connection_string(self) -> str | None: ...  # noqa: D102
    @property
    def wasb_conn_id(self) -> str | None: ...  # noqa: D102


@dataclass(frozen=True)
class AzureSettings:
    """How to reach one storage account's Blob service. No key and no SAS token: anonymous
    requests (a public container). ``repr`` shows no secret."""

    account_name: str | None = None
    account_key: str | None = dataclasses.field(default=None, repr=False)
    #: A shared access signature, without the leading ``?``.
    sas_token: str | None = dataclasses.field(default=None, repr=False)
    #: The Blob endpoint (``http://127.0.0.1:10000/devstoreaccount1`` for Azurite);
    #: None: ``https://<account_name>.blob.core.windows.net``.
    account_url: str | None = None

    # --- building --------------------------------------------------------------------

    @classmethod
    def resolve(cls, config: AzureConfig, *, who: str = "") -> AzureSettings:
        """The settings of ``config``: its ``wasb_conn_id``'s, its connection string, or
        its own account, key or token; then what it leaves unset from the environment.
        The config's ``account_url`` takes precedence over a connection's. Raises
        :class:`ConnectionProblem` (its message starting with ``who``) for a connection
        nobody knows or one that cannot be used."""
        if config.wasb_conn_id:
            conn = lookup(
                config.wasb_conn_id,
                who=who,
                field="wasb_conn_id",
                kind=KIND,
                instead="give account_name with account_key or sas_token",
            )
            base = cls.from_connection(conn, who=who)
        elif config.connection_string:
            base = cls.from_connection_string(config.connection_string, where="connection_string")
        else:
            base = cls(
                account_name=config.account_name or _account_of(config.account_url),
                account_key=config.account_key,
                sas_token=_token(config.sas_token),
            )
        base = dataclasses.replace(base, account_url=config.account_url or base.account_url)
        return base if config.wasb_conn_id else base.with_environment()

    @classmethod
    def from_connection(cls, conn: AirflowConnection, *, who: str = "") -> AzureSettings:
        """An Airflow Azure Blob Storage (``wasb``) connection's settings."""
        extra = conn.extra

        def get(name: str) -> str | None:
            # Airflow's older forms prefix the extra's keys with extra__wasb__.
            value = extra.get(name) or extra.get(f"extra__wasb__{name}")
            return str(value) if value else None

        text = get("connection_string")
        if text:
            return cls.from_connection_string(text, where=f"connection {conn.conn_id!r}")
        if get("tenant_id"):
            raise ConnectionProblem(
                f"{who + ': ' if who else ''}connection {conn.conn_id!r} logs in with "
                "Active Directory (its extra's tenant_id), which needs azure-identity (not "
                "installed); give the account key (password), a sas_token or a "
                "connection_string instead"
            )
        url = _account_url(conn.host, conn.login)
        sas = get("sas_token")
        if sas and sas.startswith(("https://", "http://")):
            parts = urlsplit(sas)
            url, sas = f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/"), parts.query
        key = None if sas else get("shared_access_key") or conn.password or get("account_key")
        name = conn.login or _account_of(url)
        if not (key or sas):
            raise ConnectionProblem(
                f"{who + ': ' if who else ''}connection {conn.conn_id!r} has no credential "
                "(Azure's default credential chain needs azure-identity, not installed); "
                "set its password to the account key, or its extra's sas_token or "
                "connection_string"
            )
        return cls(account_name=name, account_key=key, sas_token=_token(sas), account_url=url)

    @classmethod
    def from_connection_string(cls, text: str, *, where: str = "") -> AzureSettings:
        """An Azure Storage connection string
        (``DefaultEndpointsProtocol=https;AccountName=...;AccountKey=...;BlobEndpoint=...``,
        or with ``SharedAccessSignature=...``). Raises :class:`ConnectionProblem` naming
        ``where`` (never the string) when it has neither an account name nor a Blob
        endpoint."""
        parts: dict[str, str] = {}
        for item in text.strip().split(";"):
            key, sep, value = item.partition("=")
            if sep:
                parts[key.strip().lower()] = value.strip()
        name = parts.get("accountname")
        url = parts.get("blobendpoint")
        if not url and name:
            scheme = parts.get("defaultendpointsprotocol", "https")
            url = f"{scheme}://{name}.blob.{parts.get('endpointsuffix', 'core.windows.net')}"
        if not url:
            raise ConnectionProblem(
                f"the Azure Storage connection string of {where or 'the config'} has no "
                "AccountName and no BlobEndpoint; expected "
                "'DefaultEndpointsProtocol=https;AccountName=...;AccountKey=...' as the "
                "portal's Access keys page shows it"
            )
        return cls(
            account_name=name or _account_of(url),
            account_key=parts.get("accountkey") or None,
            sas_token=_token(parts.get("sharedaccesssignature")),
            account_url=url.rstrip("/"),
        )

    def with_environment(self) -> AzureSettings:
        """These settings, what they leave unset taken from the ``AZURE_STORAGE_*``
        environment (see the module's docstring); a credential only for the same account
        and only when these settings have none."""
        env = os.environ.get
        text = env("AZURE_STORAGE_CONNECTION_STRING")
        found = (
            AzureSettings.from_connection_string(text, where="AZURE_STORAGE_CONNECTION_STRING")
            if text
            else AzureSettings(
                account_name=env("AZURE_STORAGE_ACCOUNT_NAME") or None,
                account_key=env("AZURE_STORAGE_ACCOUNT_KEY") or None,
                sas_token=_token(env("AZURE_STORAGE_SAS_TOKEN")),
                account_url=(env("AZURE_STORAGE_ENDPOINT") or "").rstrip("/") or None,
            )
        )
        if found.account_name and self.account_name not in (None, found.account_name):
            return self  # the environment names another account
        if self.account_url and found.account_url not in (None, self.account_url):
            return self  # ... or another endpoint
        changes: dict[str, Any] = {
            "account_name": self.account_name or found.account_name,
            "account_url": self.account_url or found.account_url,
        }
        if not (self.account_key or self.sas_token):
            changes.update(account_key=found.account_key, sas_token=found.sas_token)
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_environment(cls) -> AzureSettings:
        """The ``AZURE_STORAGE_*`` variables of this process."""
        return cls().with_environment()

    # --- what may not be shown -------------------------------------------------------

    def secrets(self) -> set[str]:
        """The secret values (account key, SAS token and its signature), to scrub from
        messages."""
        found = {s for s in (self.account_key, self.sas_token) if s}
        sig = dict(parse_qsl(self.sas_token or "")).get("sig")
        return found | ({sig} if sig else set())

    @property
    def blob_endpoint(self) -> str:
        """The account's Blob endpoint URL (no token)."""
        if self.account_url:
            return self.account_url.rstrip("/")
        if not self.account_name:
            raise ConnectionProblem(
                "no Azure storage account: set account_name or account_url (or "
                "wasb_conn_id, connection_string, AZURE_STORAGE_ACCOUNT_NAME)"
            )
        return f"https://{self.account_name}.blob.core.windows.net"

    def where(self) -> str:
        """The endpoint for messages (no token)."""
        try:
            return self.blob_endpoint
        except ConnectionProblem:
            return "Azure Blob Storage"

    # --- rendering -------------------------------------------------------------------

    def blob_service_client(self, **kwargs: Any) -> Any:
        """An ``azure.storage.blob.BlobServiceClient``; ``kwargs`` are the client's
        options (``retry_total``, ``connection_timeout``...)."""
        from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
        from azure.storage.blob import BlobServiceClient

        credential: Any = None
        if self.account_key:
            name = self.account_name or _account_of(self.blob_endpoint) or ""
            credential = AzureNamedKeyCredential(name, self.account_key)
        elif self.sas_token:
            credential = AzureSasCredential(self.sas_token)
        return BlobServiceClient(self.blob_endpoint, credential=credential, **kwargs)

    def storage_options(self) -> dict[str, str]:
        """delta-rs (object_store) storage options for ``az://`` and ``abfs[s]://``."""
        values = {
            "account_name": self.account_name,
            "account_key": self.account_key,
            "sas_token": None if self.account_key else self.sas_token,
            "azure_storage_endpoint": self.account_url and self.account_url.rstrip("/"),
        }
        opts = {k: v for k, v in values.items() if v}
        if (self.account_url or "").startswith("http://"):
            opts["allow_http"] = "true"
        if not (self.account_key or self.sas_token):
            opts["azure_skip_signature"] = "true"
        return opts

    def pyarrow_filesystem(self) -> pafs.AzureFileSystem:
        """A :class:`pyarrow.fs.AzureFileSystem` (paths ``<container>/<path>``); one per
        distinct settings in a process."""
        return _filesystem(self)


def _token(sas: str | None) -> str | None:
    return sas.strip().lstrip("?") or None if sas else None


def _account_url(host: str | None, login: str | None) -> str | None:
    """The account URL of a connection's host, as the Azure provider reads it: a URL, a
    host name (``https://`` added), or nothing (from the login, when there is one)."""
    host = (host or "").strip()
    if "://" in host:
        return host.rstrip("/")
    if "." in host:
        return f"https://{host}".rstrip("/")
    return f"https://{login}.blob.core.windows.net" if login else None


def _account_of(url: str | None) -> str | None:
    """The account an account URL names: its host's first label
    (``acct.blob.core.windows.net``), or its path's first segment for a path-style
    endpoint (``http://127.0.0.1:10000/devstoreaccount1``)."""
    if not url:
        return None
    parts = urlsplit(url if "://" in url else f"https://{url}")
    segment = parts.path.strip("/").split("/")[0]
    if segment:
        return segment
    host = parts.hostname or ""
    return host.split(".")[0] if ".blob." in host or ".dfs." in host else None


@functools.lru_cache(maxsize=8)
def _filesystem(settings: AzureSettings) -> pafs.AzureFileSystem:
    from pyarrow import fs as pafs

    kwargs: dict[str, Any] = {"account_name": settings.account_name or ""}
    if settings.account_key:
        kwargs["account_key"] = settings.account_key
    elif settings.sas_token:
        kwargs["sas_token"] = settings.sas_token
    if settings.account_url:
        url = urlsplit(settings.account_url)
        if url.path.strip("/"):  # a path-style endpoint (an emulator): host and scheme
            kwargs.update(blob_storage_authority=url.netloc, dfs_storage_authority=url.netloc)
            kwargs.update(blob_storage_scheme=url.scheme, dfs_storage_scheme=url.scheme)
        else:  # another cloud: the part of the host after the account
            suffix = url.netloc.split(".", 1)[1] if "." in url.netloc else url.netloc
            kwargs.update(blob_storage_authority=suffix, blob_storage_scheme=url.scheme)
    return pafs.AzureFileSystem(**kwargs)


class AzureConfigFields(BaseModel):
    """The config fields that say how to reach a storage account, declared once for every
    transport and sink that reads or writes Azure Blob Storage: the account and one way of
    authenticating (an Airflow connection, a connection string, an account key or a SAS
    token; none: the ``AZURE_STORAGE_*`` environment, else anonymous requests). Mixed
    into a ``StrictConfig``."""

    account_url: str | None = Field(
        default=None,
        description="The account's Blob endpoint, such as https://myaccount.blob.core."
        "windows.net or, for the Azurite emulator, http://127.0.0.1:10000/devstoreaccount1; "
        "unset: the connection's, else https://<account_name>.blob.core.windows.net.",
    )
    account_name: str | None = Field(
        default=None,
        description="The storage account; unset: the connection's login, or the account "
        "account_url names.",
    )
    account_key: str | None = Field(
        default=None,
        description="An access key of the account; masked in logs, errors, the UI and the "
        "REST API. Prefer wasb_conn_id, so the key stays in Airflow.",
    )
    sas_token: str | None = Field(
        default=None,
        description="A shared access signature (the query string, with or without its "
        "'?'); masked like a key.",
    )
    connection_string: str | None = Field(
        default=None,
        json_schema_extra={"secret": True},
        description="An Azure Storage connection string "
        "(DefaultEndpointsProtocol=https;AccountName=...;AccountKey=...); masked.",
    )
    wasb_conn_id: str | None = Field(
        default=None,
        min_length=1,
        description="An Airflow Azure Blob Storage connection (type wasb): its login is "
        "the account, its password the key; or its extra's connection_string, "
        "shared_access_key or sas_token. Resolved by Airflow in Airflow tasks, else from "
        "the AIRFLOW_CONN_<ID> variable.",
    )

    @model_validator(mode="after")
    def _one_azure_credential(self) -> AzureConfigFields:
        ways = [
            name
            for name in ("wasb_conn_id", "connection_string", "account_key", "sas_token")
            if getattr(self, name)
        ]
        if len(ways) > 1:
            raise ValueError(
                f"set one way of authenticating, not {' and '.join(ways)}: wasb_conn_id, "
                "connection_string, account_key or sas_token"
            )
        if self.account_key and not (self.account_name or _account_of(self.account_url)):
            raise ValueError("account_key needs account_name (or an account_url naming it)")
        return self

    def azure_settings(self, who: str = "") -> AzureSettings:
        """:meth:`AzureSettings.resolve` of this config."""
        return AzureSettings.resolve(self, who=who)
