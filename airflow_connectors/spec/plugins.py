"""What spec validation needs of the plugins: each kind looked up by name.

The spec layer sits below the transports, formats and sinks and imports none of them;
whoever validates a spec passes a :class:`Plugins`. The installed plugins (built-ins and
entry points) are wired in :mod:`airflow_connectors.catalog`, a module above both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class PluginLookup(Protocol):
    """Plugins of one kind by name (``airflow_connectors._registry.Registry``)."""

    def names(self) -> list[str]:
        """The registered names of this kind, sorted."""
        ...

    def __contains__(self, name: str) -> bool: ...

    def get(self, name: str) -> Any:
        """The plugin class: a transport's has ``Config``, ``resolve_config``,
        ``needs_format`` and is built from ``(config, table)``; a format's has
        ``Config``, ``check_table``, ``infers_schema`` and ``inference_problem``; a
        sink's has ``Config`` and ``applies_changes`` (True: it applies a keyed table's
        changes; False or missing: it only appends, and a keyed table is refused)."""
        ...


@dataclass(frozen=True)
class Plugins:
    """The transports, formats and sinks a spec may name."""

    transports: PluginLookup
    formats: PluginLookup
    sinks: PluginLookup

    def inferring_formats(self) -> list[str]:
        """The formats whose data names and types its columns (``infers_schema``): a
        table whose connectors read only these may leave ``columns`` out."""
        return [
            n for n in self.formats.names() if getattr(self.formats.get(n), "infers_schema", False)
        ]
