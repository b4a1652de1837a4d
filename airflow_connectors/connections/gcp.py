"""Google Cloud connections: a ``gcp_conn_id`` (Airflow's Google provider connection,
conn_type ``google_cloud_platform``) or the standard Google environment, resolved to one
:class:`GcpSettings` that renders itself for each library that reaches Cloud Storage:
google-cloud-storage (:meth:`~GcpSettings.storage_client`), pyarrow's ``GcsFileSystem``
(:meth:`~GcpSettings.pyarrow_filesystem`) and delta-rs (:meth:`~GcpSettings.storage_options`).

The connection's extra, as the Google provider writes it (keys with or without the
provider's old ``extra__google_cloud_platform__`` prefix):

- ``keyfile_dict``: a service-account key (JSON object or its text); or ``key_path``: the
  path of one; neither: Application Default Credentials (``GOOGLE_APPLICATION_CREDENTIALS``,
  the metadata server of a Google Cloud machine);
- ``project``: the project (needed only to create buckets);
- ``is_anonymous``: no credentials at all (public buckets, emulators);
- ``endpoint_url`` (this package's addition; the provider has none): another endpoint
  than Google's, such as an emulator on ``http://127.0.0.1:4443``.

Without a connection, :meth:`GcpSettings.from_environment` reads what Google's own
libraries read: ``GOOGLE_APPLICATION_CREDENTIALS``, ``GOOGLE_CLOUD_PROJECT`` and
``STORAGE_EMULATOR_HOST`` (an emulator, reached anonymously unless a key is named too).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, model_validator

from airflow_connectors.connections.base import AirflowConnection, ConnectionProblem, lookup

#: The Google provider's connection type, and what the Airflow UI calls it.
CONN_TYPE = "google_cloud_platform"
KIND = "Google Cloud"
_PREFIX = f"extra__{CONN_TYPE}__"
_ADC_VARIABLE = "GOOGLE_APPLICATION_CREDENTIALS"
#: Environment variables :meth:`GcpSettings.from_environment` reads; what executors need.
GCP_VARIABLES = ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "STORAGE_EMULATOR_HOST")


@dataclass(frozen=True)
class GcpSettings:
    """How to reach Google Cloud Storage: an endpoint (None: Google's) and one way of
    authenticating (a service-account key, its file, anonymous, or Application Default
    Credentials when none is set). ``repr`` shows no key."""

    project: str | None = None
    keyfile_dict: Mapping[str, Any] | None = field(default=None, repr=False)
    key_path: str | None = None
    anonymous: bool = False
    endpoint: str | None = None

    # --- resolving --------------------------------------------------------------------

    @classmethod
    def resolve(cls, config: Any, *, who: str = "") -> GcpSettings:
        """The settings of a transport or sink config: its ``gcp_conn_id``'s (else the
        environment's), overridden by what the config sets itself (``endpoint_url``,
        ``key_path``, ``anonymous``; each read only when the config has it).
        :class:`ConnectionProblem` for a connection nobody knows."""
        base = gcp_settings(getattr(config, "gcp_conn_id", None), who=who)
        key_path = getattr(config, "key_path", None)
        anonymous = bool(getattr(config, "anonymous", False))
        endpoint = _endpoint(getattr(config, "endpoint_url", None))
        if key_path or anonymous:
            base = dataclasses.replace(
                base, keyfile_dict=None, key_path=key_path, anonymous=anonymous
            )
        return dataclasses.replace(base, endpoint=endpoint or base.endpoint)

    @classmethod
    def from_connection(cls, conn: AirflowConnection, *, who: str = "") -> GcpSettings:
        """The settings of an Airflow Google Cloud connection (see the module)."""

        def get(name: str) -> Any:
            value = conn.extra.get(name, conn.extra.get(_PREFIX + name))
            return None if value in (None, "") else value

        keyfile = get("keyfile_dict")
        if isinstance(keyfile, str):
            try:
                keyfile = json.loads(keyfile)
            except ValueError:
                keyfile = None
            if keyfile is None:
                raise ConnectionProblem(
                    f"{who + ': ' if who else ''}the keyfile_dict of connection "
                    f"{conn.conn_id!r} is not JSON; paste the service account's key file "
                    "(a JSON object) there, or give key_path instead"
                )
        if keyfile is not None and not isinstance(keyfile, Mapping):
            raise ConnectionProblem(
                f"{who + ': ' if who else ''}the keyfile_dict of connection {conn.conn_id!r} "
                "is not a JSON object; paste the service account's key file there"
            )
        return cls(
            project=_text(get("project")),
            keyfile_dict=keyfile,
            key_path=_text(get("key_path")),
            anonymous=_flag(get("is_anonymous")),
            endpoint=_endpoint(_text(get("endpoint_url"))),
        )

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> GcpSettings:
        """What Google's libraries read from the environment (see the module)."""
        env = os.environ if env is None else env
        emulator = _endpoint(env.get("STORAGE_EMULATOR_HOST") or None)
        key_path = env.get("GOOGLE_APPLICATION_CREDENTIALS") or None
        return cls(
            project=env.get("GOOGLE_CLOUD_PROJECT") or None,
            key_path=key_path,
            anonymous=emulator is not None and key_path is None,
            endpoint=emulator,
        )

    # --- rendering ----------------------------------------------------------------------

    def credentials(self) -> Any:
        """google-auth credentials: anonymous, of the key, or None (the client's default,
        Application Default Credentials)."""
        if self.anonymous:
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials()  # type: ignore[no-untyped-call]
        if self.keyfile_dict is None and self.key_path is None:
            return None
        from google.oauth2 import service_account

        scopes = ["https://www.googleapis.com/auth/devstorage.read_write"]
        if self.keyfile_dict is not None:
            return service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
                dict(self.keyfile_dict), scopes=scopes
            )
        return service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
            str(self.key_path), scopes=scopes
        )

    def storage_client(self) -> Any:
        """A ``google.cloud.storage.Client`` with these settings."""
        from google.cloud import storage

        options = {"api_endpoint": self.endpoint} if self.endpoint else None
        project = self.project or ("-" if self.anonymous else None)
        return storage.Client(
            project=project, credentials=self.credentials(), client_options=options
        )

    def pyarrow_filesystem(self) -> Any:
        """A ``pyarrow.fs.GcsFileSystem`` with these settings. The key that
        ``GOOGLE_APPLICATION_CREDENTIALS`` names, or none, is pyarrow's own Application
        Default Credentials; another key is exchanged for an access token here (valid
        for an hour: long enough for one batch's writer, so do not keep the filesystem
        longer)."""
        from pyarrow import fs as pafs

        kwargs: dict[str, Any] = {}
        if self.endpoint:
            url = urlsplit(self.endpoint)
            kwargs.update(endpoint_override=url.netloc, scheme=url.scheme or "https")
        if self.project:
            kwargs["project_id"] = self.project
        if self.anonymous:
            return pafs.GcsFileSystem(anonymous=True, **kwargs)
        if self.keyfile_dict is None and self.key_path == os.environ.get(_ADC_VARIABLE):
            return pafs.GcsFileSystem(**kwargs)  # pyarrow reads that key and renews tokens
        creds = self.credentials()
        if creds is not None:
            import google.auth.transport.requests

            creds.refresh(google.auth.transport.requests.Request())
            kwargs.update(access_token=creds.token, credential_token_expiration=creds.expiry)
        return pafs.GcsFileSystem(**kwargs)

    def pyarrow_listing_filesystem(self) -> Any:
        """:meth:`pyarrow_filesystem` whose non-recursive listings also report the
        folders that only exist as name prefixes. pyarrow's own reports only objects
        there, so code that removes a folder it sees as empty would remove what lies
        under its sub-folders."""
        return _listing_folders(self.pyarrow_filesystem())

    def storage_options(self) -> dict[str, str]:
        """delta-rs (``object_store``) storage options. An endpoint goes in the
        service-account document (``gcs_base_url``), with ``disable_oauth`` when
        anonymous: object_store has no other way to name one."""
        if self.keyfile_dict is not None or self.anonymous or self.endpoint:
            doc: dict[str, Any] = dict(self.keyfile_dict or {})
            if self.keyfile_dict is None and self.key_path is not None:
                with open(self.key_path, encoding="utf-8") as fh:
                    doc = json.load(fh)
            if self.anonymous or not doc:
                doc = {"private_key": "", "private_key_id": "", "client_email": "", **doc}
                doc["disable_oauth"] = True
            if self.endpoint:
                doc["gcs_base_url"] = self.endpoint.rstrip("/")
            return {"google_service_account_key": json.dumps(doc)}
        if self.key_path is not None:
            return {"google_service_account": self.key_path}
        return {}

    def environment(self) -> dict[str, str]:
        """The settings as the Google environment variables (:data:`GCP_VARIABLES`) of
        :meth:`from_environment`, for processes started elsewhere (Spark executors); a
        ``keyfile_dict`` has no variable and is left out."""
        env = {}
        if self.project:
            env["GOOGLE_CLOUD_PROJECT"] = self.project
        if self.key_path:
            env["GOOGLE_APPLICATION_CREDENTIALS"] = self.key_path
        if self.endpoint:
            env["STORAGE_EMULATOR_HOST"] = self.endpoint
        return env

    def secrets(self) -> set[str]:
        """Values no message may hold: the key's private key and the whole key document."""
        if not self.keyfile_dict:
            return set()
        found = {str(v) for k, v in self.keyfile_dict.items() if "private" in k and v}
        found.add(json.dumps(dict(self.keyfile_dict)))
        return {s for s in found if len(s) >= 3}

    def describe(self) -> str:
        """How these settings authenticate, for messages (no secret)."""
        if self.anonymous:
            how = "anonymously"
        elif self.keyfile_dict is not None:
            how = f"as {self.keyfile_dict.get('client_email') or 'the keyfile_dict account'}"
        elif self.key_path:
            how = f"with the key file {self.key_path}"
        else:
            how = "with Application Default Credentials"
        return how + (f" at {self.endpoint}" if self.endpoint else "")


def _listing_folders(fs: Any) -> Any:  # noqa: C901 - one method per filesystem call
    """A pyarrow filesystem over ``fs`` (a ``GcsFileSystem``) whose non-recursive
    listings report prefixes as folders (from a recursive listing); everything else is
    ``fs``'s own."""
    from pyarrow import fs as pafs

    class Folders(pafs.FileSystemHandler):  # type: ignore[misc]
        def __eq__(self, other: object) -> bool:
            return isinstance(other, Folders) and bool(fs.equals(other.fs))

        def __ne__(self, other: object) -> bool:
            return not self == other

        def __hash__(self) -> int:
            return id(fs)

        @property
        def fs(self) -> Any:
            return fs

        def get_type_name(self) -> str:
            return "gcs"

        def normalize_path(self, path: str) -> str:
            return str(fs.normalize_path(path))

        def get_file_info(self, paths: list[str]) -> Any:
            return fs.get_file_info(paths)

        def get_file_info_selector(self, selector: Any) -> Any:
            if selector.recursive:
                return fs.get_file_info(selector)
            deep = pafs.FileSelector(selector.base_dir, selector.allow_not_found, True)
            base = selector.base_dir.rstrip("/") + "/"
            found, folders = [], set()
            for info in fs.get_file_info(deep):
                rest = info.path[len(base) :]
                if "/" in rest:
                    folders.add(base + rest.split("/", 1)[0])
                elif info.type != pafs.FileType.Directory:
                    found.append(info)
            return found + [pafs.FileInfo(f, pafs.FileType.Directory) for f in sorted(folders)]

        def create_dir(self, path: str, recursive: bool) -> None:
            fs.create_dir(path, recursive=recursive)

        def delete_dir(self, path: str) -> None:
            # Its objects; a folder that is only a prefix has no marker object to delete.
            for info in fs.get_file_info(pafs.FileSelector(path, True, True)):
                if info.type == pafs.FileType.File:
                    fs.delete_file(info.path)
            with contextlib.suppress(OSError):
                fs.delete_dir(path)

        def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
            fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

        def delete_root_dir_contents(self) -> None:
            raise OSError("refusing to empty every bucket")

        def delete_file(self, path: str) -> None:
            fs.delete_file(path)

        def move(self, src: str, dest: str) -> None:
            fs.move(src, dest)

        def copy_file(self, src: str, dest: str) -> None:
            fs.copy_file(src, dest)

        def open_input_stream(self, path: str) -> Any:
            return fs.open_input_stream(path)

        def open_input_file(self, path: str) -> Any:
            return fs.open_input_file(path)

        def open_output_stream(self, path: str, metadata: Any) -> Any:
            return fs.open_output_stream(path, metadata=metadata)

        def open_append_stream(self, path: str, metadata: Any) -> Any:
            return fs.open_append_stream(path, metadata=metadata)

    return pafs.PyFileSystem(Folders())


def gcp_settings(conn_id: str | None, *, who: str = "", field: str = "gcp_conn_id") -> GcpSettings:
    """The settings connection ``conn_id`` names (see :func:`.base.lookup`), or those of
    the environment when it is None. :class:`ConnectionProblem` when the connection is
    unknown, unreadable or not a Google Cloud one."""
    if conn_id is None:
        return GcpSettings.from_environment()
    conn = lookup(
        conn_id,
        who=who,
        field=field,
        kind=KIND,
        instead="leave it unset to use Application Default Credentials",
    )
    if conn.conn_type not in (None, CONN_TYPE, "gcpbigquery", "gcp"):
        raise ConnectionProblem(
            f"{who + ': ' if who else ''}{field} {conn_id!r} has conn_type "
            f"{conn.conn_type!r}; expected a Google Cloud connection (conn_type {CONN_TYPE})"
        )
    return GcpSettings.from_connection(conn, who=who)


def _endpoint(value: str | None) -> str | None:
    """An endpoint URL (``STORAGE_EMULATOR_HOST`` may be ``host:port`` alone: http)."""
    if not value:
        return None
    return value if "://" in value else f"http://{value}"


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _flag(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


class GcpConfigFields(BaseModel):
    """The config fields that say how to reach Cloud Storage, declared once for every
    transport and sink that reads or writes it: one way of authenticating (an Airflow
    connection, a key file, anonymous; none: the Google environment and Application
    Default Credentials) and an endpoint. Mixed into a ``StrictConfig``."""

    gcp_conn_id: str | None = Field(
        default=None,
        min_length=1,
        description="An Airflow Google Cloud connection (conn_type google_cloud_platform): "
        "its extra's keyfile_dict or key_path, project, is_anonymous and endpoint_url. "
        "Resolved by Airflow in Airflow tasks, else from the AIRFLOW_CONN_<ID> variable. "
        "Unset: GOOGLE_APPLICATION_CREDENTIALS, else Application Default Credentials.",
    )
    key_path: str | None = Field(
        default=None,
        description="The path of a service-account key file, instead of a connection.",
    )
    anonymous: bool = Field(
        default=False, description="Send no credentials (public buckets, emulators)."
    )
    endpoint_url: str | None = Field(
        default=None,
        description="Another endpoint than Google's, such as an emulator on "
        "http://127.0.0.1:4443; unset: the connection's endpoint_url, else "
        "STORAGE_EMULATOR_HOST, else Google.",
    )

    @model_validator(mode="after")
    def _one_gcp_credential(self) -> GcpConfigFields:
        if sum([self.gcp_conn_id is not None, self.key_path is not None, self.anonymous]) > 1:
            raise ValueError("set one way of authenticating: gcp_conn_id, key_path or anonymous")
        return self

    def gcp_settings(self, who: str = "") -> GcpSettings:
        """These fields resolved (:meth:`GcpSettings.resolve`)."""
        return GcpSettings.resolve(self, who=who)
