"""The installed plugins wired into spec loading.

The spec layer validates against the :class:`~airflow_connectors.spec.plugins.Plugins`
it is given and imports no plugin; this module, above both, gives it the installed
transports, formats and sinks (built-ins plus the entry-point groups of third parties).
The CLI, the Airflow rendering and the Airflow tasks load and check specs through it,
and the engine builds a resolved connector's transport, format and sink here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_connectors.formats import FORMATS, Format
from airflow_connectors.sinks import SINKS, Sink
from airflow_connectors.spec import load as _load
from airflow_connectors.spec import validate as _validate
from airflow_connectors.spec.errors import SpecError
from airflow_connectors.spec.models import ConnectorSpec, PipelineSpec, TableSpec
from airflow_connectors.spec.plugins import Plugins
from airflow_connectors.transports import TRANSPORTS, Transport
from airflow_connectors.transports.base import SourceContext
from airflow_connectors.transports.retry import RetryPolicy

#: The installed plugins.
PLUGINS = Plugins(transports=TRANSPORTS, formats=FORMATS, sinks=SINKS)


def load_pipeline(path: str | Path, *, pipeline: str | None = None) -> PipelineSpec:
    """:func:`airflow_connectors.spec.load.load_pipeline` against the installed plugins."""
    return _load.load_pipeline(path, pipeline=pipeline, plugins=PLUGINS)


def load_pipeline_keeping_valid(
    path: str | Path, *, pipeline: str | None = None
) -> tuple[PipelineSpec, dict[tuple[str, str], list[str]]]:
    """:func:`airflow_connectors.spec.load.load_pipeline_keeping_valid` against the
    installed plugins."""
    return _load.load_pipeline_keeping_valid(path, pipeline=pipeline, plugins=PLUGINS)


def parse_pipeline(
    doc: Any, *, name: str | None = None, base_dir: Path | None = None, source: str | None = None
) -> PipelineSpec:
    """:func:`airflow_connectors.spec.validate.parse_pipeline` against the installed
    plugins."""
    return _validate.parse_pipeline(
        doc, name=name, base_dir=base_dir, source=source, plugins=PLUGINS
    )


def validate_pipeline(
    doc: Any, *, name: str | None = None, base_dir: Path | None = None
) -> list[SpecError]:
    """:func:`airflow_connectors.spec.validate.validate_pipeline` against the installed
    plugins."""
    return _validate.validate_pipeline(doc, name=name, base_dir=base_dir, plugins=PLUGINS)


def resolve_connector(
    connector: ConnectorSpec, table: TableSpec, *, base_dir: Path | None = None
) -> ConnectorSpec:
    """:func:`airflow_connectors.spec.validate.resolve_connector` against the installed
    plugins: the one check of a connector's transport and format configs."""
    return _validate.resolve_connector(connector, table, plugins=PLUGINS, base_dir=base_dir)


# A resolved connector's configs were checked by resolve_connector (when its spec was
# loaded, or by the Airflow task after templating): building its plugins only types them.


def transport_of(connector: ConnectorSpec, table: TableSpec) -> Transport:
    """The transport of a resolved connector."""
    cls = TRANSPORTS.get(connector.transport.name)
    transport: Transport = cls(cls.Config.model_validate(connector.transport.config), table)
    transport.context = SourceContext(
        connector=connector.name,
        table=table.name,
        tasks_max=connector.tasks_max,
        max_batch_size=connector.max_batch_size,
        retry=RetryPolicy.from_errors(connector.errors),
    )
    return transport


def format_of(connector: ConnectorSpec, table: TableSpec) -> Format | None:
    """The format of a resolved connector; None for a transport that produces records."""
    if connector.format is None:
        return None
    cls = FORMATS.get(connector.format.name)
    fmt: Format = cls(cls.Config.model_validate(connector.format.config), table)
    return fmt


def sink_of(table: TableSpec, *, pipeline: str, warehouse: str) -> Sink:
    """The sink a table's rows (and dead letters) are written to."""
    cls = SINKS.get(table.sink.name)
    sink: Sink = cls(
        cls.Config.model_validate(table.sink.config),
        pipeline=pipeline,
        table=table,
        warehouse=warehouse,
    )
    return sink


def sealed_connector(doc: dict[str, Any]) -> dict[str, Any]:
    """A connector as JSON (``model_dump(mode="json")``) with every secret of its
    transport and format configs sealed (:mod:`.spec.sealed`): what may be stored in
    Airflow's serialized DAG or the state store."""
    from airflow_connectors.spec.redact import secret_fields
    from airflow_connectors.spec.sealed import seal

    out = dict(doc)
    for part, registry in (("transport", TRANSPORTS), ("format", FORMATS)):
        spec = doc.get(part)
        if isinstance(spec, dict) and isinstance(spec.get("config"), dict):
            name = str(spec.get("name"))
            model = registry.get(name).Config if name in registry else None
            out[part] = {**spec, "config": seal(spec["config"], secret_fields(model))}
    return out


def sealed_table(doc: dict[str, Any]) -> dict[str, Any]:
    """A table as JSON with every secret of its sink config sealed (see
    :func:`sealed_connector`); its connectors, if any, sealed too."""
    from airflow_connectors.spec.redact import secret_fields
    from airflow_connectors.spec.sealed import seal

    out = dict(doc)
    sink = doc.get("sink")
    if isinstance(sink, dict) and isinstance(sink.get("config"), dict):
        name = str(sink.get("name"))
        model = SINKS.get(name).Config if name in SINKS else None
        out["sink"] = {**sink, "config": seal(sink["config"], secret_fields(model))}
    if isinstance(doc.get("connectors"), list):
        out["connectors"] = [
            sealed_connector(c) if isinstance(c, dict) else c for c in doc["connectors"]
        ]
    return out
