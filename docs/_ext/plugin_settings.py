"""Sphinx directives that render the plugins' reference from their config models, the
same source the REST API answers from, so a page cannot drift from the code:

- ``{plugin-settings} <kind> <name>``: the settings table of one plugin (``kind`` is
  Kafka Connect's plugin type: ``source``, ``converter`` or ``sink``), one row per
  field of :func:`~airflow_connectors.airflow.api.connect.plugin_config.definitions`
  (what ``GET /connect/connector-plugins/{name}/config`` answers);
- ``{plugin-table} <kind>``: every installed plugin of that type, linked to its page,
  with the first paragraph of its config model's docstring.

A plugin without a page, or a page naming a plugin that does not exist, fails the build
(tests/test_docs.py builds with warnings as errors)."""

from __future__ import annotations

import re
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList

#: Where each plugin type's pages live, by Kafka Connect plugin type.
FOLDERS = {"source": "transports", "converter": "formats", "sink": "sinks"}


def _markdown(text: str) -> str:
    """reStructuredText inline literals as Markdown, on one line, safe in a table cell."""
    text = re.sub(r"``([^`]+)``", r"`\1`", " ".join(text.split()))
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    # Outside code spans, `<name>` would be read as an HTML tag and vanish.
    parts = text.split("`")
    parts[::2] = [p.replace("&", "&amp;").replace("<", "&lt;") for p in parts[::2]]
    return "`".join(parts).replace("|", "\\|")


def _cell(value: Any) -> str:
    if value is None or value == "":
        return ""
    return "`" + str(value).replace("|", "\\|").replace("`", "'") + "`"


class _Markdown(Directive):
    def render(self, lines: list[str]) -> list[nodes.Node]:
        node = nodes.section()
        node.document = self.state.document
        self.state.nested_parse(StringList(lines), self.content_offset, node)
        return list(node.children)

    def fail(self, message: str) -> list[nodes.Node]:
        return [self.state.document.reporter.error(message, line=self.lineno)]


class PluginSettings(_Markdown):
    required_arguments = 2

    def run(self) -> list[nodes.Node]:
        from airflow_connectors.airflow.api.connect.errors import ApiError
        from airflow_connectors.airflow.api.connect.plugin_config import (
            definitions,
            plugin_model,
        )

        kind, name = self.arguments
        if kind not in FOLDERS:
            return self.fail(f"plugin-settings: kind {kind!r} is not one of {sorted(FOLDERS)}")
        try:
            model = plugin_model(name, kind)
        except ApiError as e:
            return self.fail(f"plugin-settings: {e.message}")
        rows = definitions(model, group=name)
        if not rows:
            return self.render([f"`{name}` takes no settings."])
        table = [
            "| setting | type | default | description |",
            "|---|---|---|---|",
        ]
        for d in rows:
            default = "required" if d["required"] else _cell(d["default_value"])
            table.append(
                f"| `{d['name']}` | {d['type']} | {default} | {_markdown(d['documentation'])} |"
            )
        return self.render(table)


class PluginTable(_Markdown):
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        from airflow_connectors.airflow.api.connect.plugin_config import registries

        (kind,) = self.arguments
        registry = dict(registries()).get(kind)  # type: ignore[arg-type]
        if registry is None:
            return self.fail(f"plugin-table: kind {kind!r} is not one of {sorted(FOLDERS)}")
        env = self.state.document.settings.env
        table = ["| name | what it is |", "|---|---|"]
        for name in sorted(registry.names()):
            doc = f"{FOLDERS[kind]}/{name}"
            if doc not in env.found_docs:
                return self.fail(f"plugin-table: the {kind} plugin {name!r} has no page {doc}.md")
            summary = (registry.get(name).Config.__doc__ or "").strip().split("\n\n")[0]
            table.append(f"| {{doc}}`{name} </{doc}>` | {_markdown(summary)} |")
        return self.render(table)


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("plugin-settings", PluginSettings)
    app.add_directive("plugin-table", PluginTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
