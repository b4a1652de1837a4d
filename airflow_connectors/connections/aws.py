"""AWS settings, resolved once and rendered for each library that talks to S3.

:class:`AwsSettings` is what a client needs (key pair, session token, region, endpoint,
anonymous access), built from a config's explicit fields or its ``aws_conn_id``
(:meth:`AwsSettings.resolve`), or from the ``AWS_*`` environment
(:meth:`AwsSettings.from_environment`), and rendered for boto3
(:meth:`~AwsSettings.client_kwargs`), pyarrow (:meth:`~AwsSettings.pyarrow_filesystem`),
delta-rs (:meth:`~AwsSettings.storage_options`) and pyiceberg
(:meth:`~AwsSettings.iceberg_properties`), as dlt's ``AwsCredentials`` renders itself.
:class:`AwsConfigFields` declares the config fields once for every transport and sink.

An Airflow Amazon Web Services connection gives the key pair as ``login``/``password``
(or its extra's ``aws_access_key_id``/``aws_secret_access_key``), and in its extra
``aws_session_token``, ``region_name`` and ``endpoint_url`` (or
``service_config.s3.endpoint_url``), as Airflow's Amazon provider reads them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, model_validator

from airflow_connectors.connections.base import AirflowConnection, lookup

if TYPE_CHECKING:
    from pyarrow import fs as pafs

#: What the Airflow UI calls the connection type ``aws_conn_id`` names.
KIND = "Amazon Web Services"


class AwsConfig(Protocol):
    """The fields of a config that says how to reach S3 (see :class:`AwsConfigFields`;
    ``no_sign_request`` is read when the config has it). Read-only."""

    @property
    def region(self) -> str | None: ...  # noqa: D102
    @property
    def endpoint_url(self) -> str | None: ...  # noqa: D102
    @property
    def aws_access_key_id(self) -> str | None: ...  # noqa: D102
    @property
    def aws_secret_access_key(self) -> str | None: ...  # noqa: D102
    @property
    def aws_conn_id(self) -> str | None: ...  # noqa: D102


@dataclass(frozen=True)
class AwsSettings:
    """How to reach S3; a field left None is the library's default (its credential
    chain, the bucket's region, AWS itself). ``repr`` shows no secret."""

    access_key: str | None = None
    secret_key: str | None = dataclasses.field(default=None, repr=False)
    session_token: str | None = dataclasses.field(default=None, repr=False)
    region: str | None = None
    endpoint_url: str | None = None
    #: Unsigned requests (a public bucket): no credentials are sent.
    anonymous: bool = False
    #: Plain HTTP to the endpoint allowed (``AWS_ALLOW_HTTP``; always for ``http://``).
    allow_http: bool = False

    # --- building --------------------------------------------------------------------

    @classmethod
    def resolve(cls, config: AwsConfig, *, who: str = "") -> AwsSettings:
        """The settings of ``config``: its own key pair, its ``aws_conn_id``'s (the
        config's ``region``/``endpoint_url`` taking precedence over the connection's), or
        anonymous with ``no_sign_request``. Raises
        :class:`~airflow_connectors.connections.base.ConnectionProblem` (its message
        starting with ``who``) for a connection nobody knows."""
        if getattr(config, "no_sign_request", False):
            base = cls(anonymous=True)
        elif config.aws_conn_id:
            base = cls.from_connection(
                lookup(
                    config.aws_conn_id,
                    who=who,
                    field="aws_conn_id",
                    kind=KIND,
                    instead="give aws_access_key_id and aws_secret_access_key",
                )
            )
        else:
            base = cls(config.aws_access_key_id, config.aws_secret_access_key)
        return dataclasses.replace(
            base,
            region=config.region or base.region,
            endpoint_url=config.endpoint_url or base.endpoint_url,
        )

    @classmethod
    def from_connection(cls, conn: AirflowConnection) -> AwsSettings:
        """An Airflow Amazon Web Services connection's settings."""
        extra = conn.extra
        service = extra.get("service_config") or {}
        s3 = service.get("s3") if isinstance(service, dict) else None
        endpoint = (s3 or {}).get("endpoint_url") or extra.get("endpoint_url")
        return cls(
            access_key=conn.login or extra.get("aws_access_key_id") or None,
            secret_key=conn.password or extra.get("aws_secret_access_key") or None,
            session_token=extra.get("aws_session_token") or None,
            region=extra.get("region_name") or None,
            endpoint_url=endpoint or None,
        )

    @classmethod
    def from_environment(cls) -> AwsSettings:
        """The standard ``AWS_*`` variables of this process (``AWS_ENDPOINT_URL_S3``, else
        ``AWS_ENDPOINT_URL``; ``AWS_REGION``, else ``AWS_DEFAULT_REGION``; the key pair
        and session token; ``AWS_ALLOW_HTTP``)."""
        return cls().with_environment()

    def with_environment(self) -> AwsSettings:
        """These settings, what they leave unset taken from the ``AWS_*`` environment (the
        key pair and token only together, and never for anonymous access)."""
        env = os.environ.get
        changes: dict[str, Any] = {
            "endpoint_url": self.endpoint_url
            or env("AWS_ENDPOINT_URL_S3")
            or env("AWS_ENDPOINT_URL")
            or None,
            "region": self.region or env("AWS_REGION") or env("AWS_DEFAULT_REGION") or None,
            "allow_http": self.allow_http
            or (env("AWS_ALLOW_HTTP") or "").lower() in ("1", "true", "yes"),
        }
        if self.access_key is None and not self.anonymous:
            changes.update(
                access_key=env("AWS_ACCESS_KEY_ID") or None,
                secret_key=env("AWS_SECRET_ACCESS_KEY") or None,
                session_token=env("AWS_SESSION_TOKEN") or None,
            )
        return dataclasses.replace(self, **changes)

    # --- what may not be shown -------------------------------------------------------

    def secrets(self) -> set[str]:
        """The secret values (secret key, session token), to scrub from messages."""
        return {s for s in (self.secret_key, self.session_token) if s}

    def where(self) -> str:
        """The endpoint for messages: its URL, or "AWS"."""
        return self.endpoint_url or "AWS"

    @property
    def _keys(self) -> bool:
        return not self.anonymous and bool(self.access_key and self.secret_key)

    # --- rendering -------------------------------------------------------------------

    def client_kwargs(self, **config: Any) -> dict[str, Any]:
        """Keyword arguments of ``boto3.session.Session().client("s3", ...)``; ``config``
        are ``botocore.config.Config`` options (``retries``, timeouts...), joined by
        unsigned requests when anonymous."""
        kwargs: dict[str, Any] = {
            "endpoint_url": self.endpoint_url,
            "region_name": self.region,
            "aws_access_key_id": None if self.anonymous else self.access_key,
            "aws_secret_access_key": None if self.anonymous else self.secret_key,
            "aws_session_token": None if self.anonymous else self.session_token,
        }
        if self.anonymous:
            from botocore import UNSIGNED

            config["signature_version"] = UNSIGNED
        if config:
            from botocore.config import Config

            kwargs["config"] = Config(**config)
        return kwargs

    def pyarrow_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :class:`pyarrow.fs.S3FileSystem`."""
        kwargs: dict[str, Any] = {}
        if self.endpoint_url:
            ep = self.endpoint_url
            url = urlsplit(ep if "://" in ep else f"https://{ep}")
            kwargs["endpoint_override"] = url.netloc
            kwargs["scheme"] = url.scheme or "https"
        if self.region:
            kwargs["region"] = self.region
        if self.anonymous:
            kwargs["anonymous"] = True
        elif self._keys:
            kwargs.update(access_key=self.access_key, secret_key=self.secret_key)
            if self.session_token:
                kwargs["session_token"] = self.session_token
        return kwargs

    def pyarrow_filesystem(self) -> pafs.S3FileSystem:
        """A pyarrow S3 filesystem with these settings (one per distinct settings in a
        process: a part writer per work item reuses it)."""
        return _filesystem(self)

    def storage_options(self) -> dict[str, str]:
        """delta-rs (object_store) storage options."""
        values = {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": self.access_key if self._keys else None,
            "AWS_SECRET_ACCESS_KEY": self.secret_key if self._keys else None,
            "AWS_SESSION_TOKEN": self.session_token if self._keys else None,
        }
        opts = {k: v for k, v in values.items() if v}
        if self.allow_http or (self.endpoint_url or "").startswith("http://"):
            opts["AWS_ALLOW_HTTP"] = "true"
        if self.anonymous:
            opts["AWS_SKIP_SIGNATURE"] = "true"
        return opts

    def iceberg_properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties (``s3.endpoint``, ``s3.region``, ...)."""
        values = {
            "s3.endpoint": self.endpoint_url,
            "s3.region": self.region,
            "s3.access-key-id": self.access_key if self._keys else None,
            "s3.secret-access-key": self.secret_key if self._keys else None,
            "s3.session-token": self.session_token if self._keys else None,
            "s3.anonymous": "true" if self.anonymous else None,
        }
        return {k: v for k, v in values.items() if v}


@functools.lru_cache(maxsize=8)
def _filesystem(settings: AwsSettings) -> pafs.S3FileSystem:
    from pyarrow import fs as pafs

    return pafs.S3FileSystem(**settings.pyarrow_kwargs())


class AwsConfigFields(BaseModel):
    """The config fields that say how to reach S3, declared once for every transport and
    sink that reads or writes it: an endpoint and region, and one way of authenticating
    (a key pair, an Airflow connection, unsigned requests, else the AWS SDK's default
    chain: environment, profile, instance role). Mixed into a ``StrictConfig``."""

    region: str | None = Field(
        default=None,
        description="The bucket's AWS region; unset: the connection's region_name, "
        "else AWS_REGION / AWS_DEFAULT_REGION.",
    )
    endpoint_url: str | None = Field(
        default=None,
        description="An S3-compatible endpoint (MinIO, Ceph, a local test server), such as "
        "http://127.0.0.1:9000; unset: the connection's endpoint_url, else "
        "AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS.",
    )
    aws_access_key_id: str | None = Field(
        default=None,
        description="Access key id; with aws_secret_access_key. Unset (and no aws_conn_id): "
        "the default credentials (environment, profile, instance role).",
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
    aws_conn_id: str | None = Field(
        default=None,
        min_length=1,
        description="An Airflow Amazon Web Services connection: its login/password are the "
        "key pair, its extra's region_name and endpoint_url the region and endpoint. "
        "Resolved by Airflow in Airflow tasks, else from the AIRFLOW_CONN_<ID> variable.",
    )

    @model_validator(mode="after")
    def _one_aws_credential(self) -> AwsConfigFields:
        if (self.aws_access_key_id is None) != (self.aws_secret_access_key is None):
            raise ValueError("set aws_access_key_id and aws_secret_access_key together")
        ways = [self.aws_access_key_id is not None, self.no_sign_request, bool(self.aws_conn_id)]
        if sum(ways) > 1:
            raise ValueError(
                "set one way of authenticating: aws_access_key_id/aws_secret_access_key, "
                "aws_conn_id, or no_sign_request"
            )
        return self

    def aws_settings(self, who: str = "") -> AwsSettings:
        """:meth:`AwsSettings.resolve` of this config."""
        return AwsSettings.resolve(self, who=who)
