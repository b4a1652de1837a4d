"""The import surface for plugin authors: what a third-party transport, format or sink
and its tests need, in one typed module (the package ships ``py.typed``).

::

    from airflow_connectors.sdk import Cursor, Limits, StrictConfig, Transport, WorkItem
    from airflow_connectors.sdk import Source, TransportConformance  # in tests

Importing it is cheap: it imports neither pyspark nor Airflow, and the conformance kits
(:class:`TransportConformance`, :class:`SinkConformance`, :class:`ChangesConformance`,
which need pytest) are imported on first use only.

A plugin is registered by an entry point of its distribution in the group of its kind
(:data:`TRANSPORT_GROUP`, :data:`FORMAT_GROUP`, :data:`SINK_GROUP`), so that Airflow's
tasks and Spark's workers find it by name::

    [project.entry-points."airflow_connectors.transports"]
    my_source = "my_package.my_source:MySourceTransport"

:func:`load_plugin` resolves a name as the engine does (a check that the entry point is
installed and points at the class).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Literal

from airflow_connectors._registry import Registry
from airflow_connectors.formats import FORMATS
from airflow_connectors.formats.base import Decoded, Format, NotText, RecordError
from airflow_connectors.sinks import SINKS
from airflow_connectors.sinks.base import Kind, PartWriter, Sink, SinkConfig, SinkUnwritable
from airflow_connectors.spec.config import StrictConfig
from airflow_connectors.spec.datasets import (
    LineageDataset,
    postgres_dataset,
    server_dataset,
    storage_dataset,
    url_dataset,
)
from airflow_connectors.spec.models import TableSpec
from airflow_connectors.transports import TRANSPORTS
from airflow_connectors.transports.base import (
    Cursor,
    KeyOffset,
    Limits,
    SourceContext,
    SourceReport,
    Transport,
    WorkItem,
)
from airflow_connectors.transports.listing import (
    ListingConfig,
    ListingSource,
    ObjectInfo,
    PrefixOrKey,
)
from airflow_connectors.transports.retry import RetryPolicy, TransientError
from airflow_connectors.transports.sequence import Partition, SequenceSource

if TYPE_CHECKING:
    from airflow_connectors.testing.changes_kit import ChangesConformance
    from airflow_connectors.testing.conformance import Source, TransportConformance
    from airflow_connectors.testing.sink_kit import SinkConformance

#: What a plugin is: the kinds :func:`load_plugin` takes.
PluginKind = Literal["transport", "format", "sink"]

#: The entry-point groups plugins register in (pyproject.toml's
#: ``[project.entry-points."<group>"]``).
TRANSPORT_GROUP = TRANSPORTS.group
FORMAT_GROUP = FORMATS.group
SINK_GROUP = SINKS.group

_REGISTRIES: dict[str, Registry] = {"transport": TRANSPORTS, "format": FORMATS, "sink": SINKS}

#: The conformance kits, imported on first use (they need pytest): name -> module.
_KITS = {
    "Source": "airflow_connectors.testing.conformance",
    "TransportConformance": "airflow_connectors.testing.conformance",
    "SinkConformance": "airflow_connectors.testing.sink_kit",
    "ChangesConformance": "airflow_connectors.testing.changes_kit",
}


def load_plugin(kind: PluginKind, name: str) -> type[Any]:
    """The class registered as ``name`` (a built-in or an installed entry point of the
    group of ``kind``), found as the engine finds it; ``KeyError`` naming the available
    ones when there is none."""
    registry = _REGISTRIES.get(kind)
    if registry is None:
        raise ValueError(f"unknown plugin kind {kind!r}; one of {', '.join(_REGISTRIES)}")
    plugin: type[Any] = registry.get(name)
    return plugin


def plugin_names(kind: PluginKind) -> list[str]:
    """The names of every plugin of ``kind``: the built-in ones and the installed ones."""
    return _REGISTRIES[kind].names()


def __getattr__(name: str) -> Any:
    # The kits lazily, so that importing the SDK (a plugin module does) needs no pytest.
    module = _KITS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "FORMAT_GROUP",
    "SINK_GROUP",
    "TRANSPORT_GROUP",
    "ChangesConformance",
    "Cursor",
    "Decoded",
    "Format",
    "KeyOffset",
    "Kind",
    "Limits",
    "LineageDataset",
    "ListingConfig",
    "ListingSource",
    "NotText",
    "ObjectInfo",
    "PartWriter",
    "Partition",
    "PluginKind",
    "PrefixOrKey",
    "RecordError",
    "RetryPolicy",
    "SequenceSource",
    "Sink",
    "SinkConfig",
    "SinkConformance",
    "SinkUnwritable",
    "Source",
    "SourceContext",
    "SourceReport",
    "StrictConfig",
    "TableSpec",
    "TransientError",
    "Transport",
    "TransportConformance",
    "WorkItem",
    "load_plugin",
    "plugin_names",
    "postgres_dataset",
    "server_dataset",
    "storage_dataset",
    "url_dataset",
]
