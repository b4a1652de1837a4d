"""Names of the datasets a connector reads and a table is written to, as the OpenLineage
naming spec gives them: plain data, without Airflow or OpenLineage.

A transport names what it reads (``Transport.lineage_datasets``) and a sink names the
table it writes (``Sink.lineage_dataset``); :mod:`airflow_connectors.airflow.lineage`
turns them into OpenLineage events. The helpers below name the usual kinds of place:

=====================  ==============================  ==============================
place                  namespace                       name
=====================  ==============================  ==============================
local path             ``file``                        the absolute path
``s3://bucket/key``    ``s3://bucket``                 the key or prefix
``abfss://c@account``  ``abfss://c@account.dfs...``    the path
other storage URL      ``scheme://host[:port]``        the path
a server (HTTP, NATS)  ``scheme://host:port``          what the source names (a path,
                                                       a stream)
PostgreSQL             ``postgres://host:port``        ``database.schema.table``
=====================  ==============================  ==============================

No name carries a secret: URLs lose their userinfo (an Azure container, which is none,
stays) and their query.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass

#: Azure URL schemes whose userinfo is the container (OpenLineage keeps it).
_AZURE = ("abfs", "abfss", "wasb", "wasbs")
#: Ports a namespace names even when the URL leaves them out.
DEFAULT_PORTS = {"http": 80, "https": 443, "postgres": 5432, "postgresql": 5432, "nats": 4222}


@dataclass(frozen=True)
class LineageDataset:
    """One dataset: its OpenLineage namespace and name."""

    namespace: str
    name: str


def storage_dataset(location: str) -> LineageDataset:
    """The dataset of a folder, file or object-store URL (``/data/t``,
    ``file:///data/t``, ``s3://bucket/prefix``, ``gs://bucket/prefix``...), without
    userinfo or query."""
    parts = urllib.parse.urlsplit(location)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or len(scheme) == 1:  # a path (C:\ on Windows) or file://
        host = parts.hostname if scheme == "file" else None
        path = parts.path if scheme == "file" else location
        path = os.path.abspath(urllib.parse.unquote(path)) if not host else path
        return LineageDataset(f"file://{host}" if host else "file", path.rstrip("/") or "/")
    if scheme in ("s3", "s3a", "s3n"):
        return LineageDataset(f"s3://{parts.hostname or ''}", object_key(parts.path))
    if scheme in _AZURE and parts.username and parts.password is None:
        # abfss://<container>@<account>.dfs.core.windows.net: the container is no secret.
        container = f"{parts.username}@{host_port(location)}"
        return LineageDataset(f"{scheme}://{container}", object_key(parts.path))
    return LineageDataset(f"{scheme}://{host_port(location)}", object_key(parts.path))


def object_key(path: str) -> str:
    """An object key or prefix as OpenLineage names it: no leading or trailing ``/``;
    the bucket's root is ``/``."""
    return path.strip("/") or "/"


def host_port(url: str, default_port: int | None = None) -> str:
    """``host[:port]`` of ``url`` (the port ``default_port`` when it names none), never
    its userinfo."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    try:
        port = parts.port or default_port
    except ValueError:
        port = default_port
    return f"{host}:{port}" if port else host


def server_dataset(url: str, name: str) -> LineageDataset:
    """Dataset ``name`` of the server at ``url``: namespace ``scheme://host:port`` (the
    scheme's usual port when the URL names none)."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    return LineageDataset(f"{scheme}://{host_port(url, DEFAULT_PORTS.get(scheme))}", name)


def url_dataset(url: str) -> LineageDataset:
    """The dataset a URL reads: :func:`server_dataset` named by the URL's path."""
    return server_dataset(url, urllib.parse.urlsplit(url).path or "/")


def postgres_dataset(uri: str, table: str) -> LineageDataset:
    """The dataset of ``table`` (``table``, ``schema.table`` or ``db.schema.table``) in
    the database of the libpq URI ``uri``; the schema defaults to ``public``."""
    database = urllib.parse.unquote(urllib.parse.urlsplit(uri).path.lstrip("/"))
    names = table.split(".")
    if len(names) == 1:
        names = ["public", *names]
    if len(names) == 2:
        names = [database, *names]
    return LineageDataset(
        f"postgres://{host_port(uri, DEFAULT_PORTS['postgres'])}", ".".join(names)
    )
