"""Plugins registered by name: built-ins plus the entry-point group of third parties.

Modules are imported on first use only, so validating a spec that names ``file_input``
imports that one module and nothing else.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any


class Registry:
    def __init__(self, kind: str, group: str, builtins: dict[str, str]) -> None:
        self.kind = kind
        self.group = group
        self._targets = dict(builtins)
        self._loaded: dict[str, Any] = {}
        self._scanned = False

    def _scan(self) -> None:
        if not self._scanned:
            for ep in entry_points(group=self.group):
                self._targets.setdefault(ep.name, ep.value)
            self._scanned = True

    def names(self) -> list[str]:
        self._scan()
        return sorted(self._targets)

    def __contains__(self, name: str) -> bool:
        # A built-in name is never a plugin's (built-ins win): no scan of the installed
        # packages' entry points (about 800 here, three registries per process) for it.
        if name in self._targets:
            return True
        self._scan()
        return name in self._targets

    def get(self, name: str) -> Any:
        if name in self._loaded:
            return self._loaded[name]
        if name not in self._targets:  # not a built-in (nor found by an earlier scan)
            self._scan()
        target = self._targets.get(name)
        if target is None:
            raise KeyError(f"unknown {self.kind} {name!r}; available: {', '.join(self.names())}")
        module, _, attr = target.partition(":")
        obj = getattr(importlib.import_module(module), attr)
        self._loaded[name] = obj
        return obj
