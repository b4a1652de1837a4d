"""OpenLineage of connector tasks: what a batch read and which table it wrote.

The ingest and finished operators report lineage through the operator lineage methods
(``get_openlineage_facets_on_complete``), which the OpenLineage provider calls after a
task succeeded, possibly in a forked child process that must not talk to Airflow. So
the facts are gathered while the task still runs (:func:`remember_ingest`,
:func:`remember_finished`: state-store reads, connections resolved through Airflow) as
plain data (:class:`TaskLineage`), and the lineage method only turns them into
OpenLineage objects (:func:`operator_lineage`).

Dataset names follow the OpenLineage naming spec:

=====================  ==============================  ==============================
source or sink         namespace                       name
=====================  ==============================  ==============================
local path             ``file``                        the absolute path
``s3://bucket/key``    ``s3://bucket``                 the key or prefix
other storage URL      ``scheme://host[:port]``        the path
``url_input``          ``http(s)://host:port``         the URL's path
PostgreSQL             ``postgres://host:port``        ``database.schema.table``
``nats_input``         ``nats://host:port``            the stream
``datagen``, others    ``connector://<pipeline>``      ``<table>/<connector>/<transport>``
a connector's asset    ``connector://<pipeline>``      ``<table>/<connector>``
=====================  ==============================  ==============================

Delta and Iceberg sources and sinks are named by their storage location. Nothing here
carries a secret: URLs lose their userinfo and query, descriptions go through
:func:`airflow_connectors.spec.redact.mask_text`.

The asset scheme ``connector://`` is registered in the provider info with
:func:`sanitize_uri` and :func:`convert_asset_to_openlineage`. Importing this module is
cheap (the DAG processor imports the handler while parsing DAG files).
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from urllib.parse import SplitResult

    from airflow_connectors.spec.models import ConnectorSpec, TableSpec
    from airflow_connectors.state.records import Batch, ConnectorRef
    from airflow_connectors.state.store import StateStore

log = logging.getLogger(__name__)

#: The scheme of the asset every connector emits an event on when it finishes.
CONNECTOR_SCHEME = "connector"
#: The attribute of an operator that holds the :class:`TaskLineage` its run gathered.
LINEAGE_ATTRIBUTE = "_connector_lineage"

_DEFAULT_PORTS = {"http": 80, "https": 443, "postgres": 5432, "nats": 4222}


@dataclass(frozen=True)
class DatasetFacts:
    """One dataset of a lineage event, as plain data: its OpenLineage namespace and
    name, the columns of its schema facet, statistics and a one-line description."""

    namespace: str
    name: str
    #: ``(column, SQL type)`` of the schema facet; empty: no schema facet.
    fields: tuple[tuple[str, str], ...] = ()
    #: Rows written (outputs) or read (inputs); None: not reported.
    rows: int | None = None
    #: Bytes of source data the batches read; None: not reported.
    size: int | None = None
    description: str | None = None

    def with_stats(self, rows: int | None, size: int | None) -> DatasetFacts:
        """This dataset with the given statistics."""
        return DatasetFacts(self.namespace, self.name, self.fields, rows, size, self.description)


@dataclass(frozen=True)
class TaskLineage:
    """What one task read and wrote."""

    inputs: tuple[DatasetFacts, ...] = ()
    outputs: tuple[DatasetFacts, ...] = ()


# --- names of storage locations ---------------------------------------------------------


def storage_dataset(location: str) -> DatasetFacts:
    """The dataset of a folder, file or object-store URL (``/data/t``,
    ``file:///data/t``, ``s3://bucket/prefix``...), without userinfo or query."""
    parts = urllib.parse.urlsplit(location)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or len(scheme) == 1:  # a path (C:\ on Windows) or file://
        host = parts.hostname if scheme == "file" else None
        path = parts.path if scheme == "file" else location
        path = os.path.abspath(urllib.parse.unquote(path)) if not host else path
        return DatasetFacts(f"file://{host}" if host else "file", _strip_slash(path))
    if scheme in ("s3", "s3a", "s3n"):
        return DatasetFacts(f"s3://{parts.hostname or ''}", _key(parts.path))
    return DatasetFacts(f"{scheme}://{_host_port(parts, None)}", _key(parts.path))


def _strip_slash(path: str) -> str:
    return path.rstrip("/") or "/"


def _key(path: str) -> str:
    """An object key or prefix as OpenLineage names it: no leading or trailing ``/``;
    the bucket's root is ``/``."""
    return path.strip("/") or "/"


def _host_port(parts: SplitResult, default_port: int | None) -> str:
    """``host[:port]`` of a URL, never its userinfo."""
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    try:
        port = parts.port or default_port
    except ValueError:
        port = default_port
    return f"{host}:{port}" if port else host


def postgres_dataset(uri: str, table: str) -> DatasetFacts:
    """The dataset of ``table`` (``table``, ``schema.table`` or ``db.schema.table``) in
    the database of the libpq URI ``uri``; the schema defaults to ``public``."""
    parts = urllib.parse.urlsplit(uri)
    database = urllib.parse.unquote(parts.path.lstrip("/"))
    names = table.split(".")
    if len(names) == 1:
        names = ["public", *names]
    if len(names) == 2:
        names = [database, *names]
    return DatasetFacts(
        f"postgres://{_host_port(parts, _DEFAULT_PORTS['postgres'])}", ".".join(names)
    )


def query_tables(query: str) -> list[str]:
    """The tables a SELECT reads (``schema.table`` when the query names the schema),
    parsed with OpenLineage's SQL parser; empty when it names none or cannot be parsed."""
    try:
        import openlineage_sql
    except ImportError:
        return []
    try:
        parsed = openlineage_sql.parse([query], dialect="postgres")
    except Exception:  # a query the parser does not understand: no input tables
        log.debug("lineage: cannot parse the query of a postgres_input", exc_info=True)
        return []
    if parsed is None:
        return []
    return [".".join(p for p in (t.database, t.schema, t.name) if p) for t in parsed.in_tables]


# --- sources ------------------------------------------------------------------------------


def _file_input(config: Any) -> list[DatasetFacts]:
    path: str = config.path
    if path.startswith("file://"):
        return [storage_dataset(path)]
    cut = min((path.find(c) for c in "*?[" if c in path), default=-1)
    if cut >= 0:  # a glob: the folder before its first wildcard
        path = path[:cut].rpartition("/")[0] or "."
    return [storage_dataset(path)]


def _s3_input(config: Any) -> list[DatasetFacts]:
    key = config.key if config.key is not None else (config.prefix or "")
    return [DatasetFacts(f"s3://{config.bucket_name}", _key(key))]


def _url_input(config: Any, transport: Any) -> list[DatasetFacts]:
    # The URL read: ``path``, or a relative path joined to ``http_conn_id``'s base URL.
    url = getattr(transport, "url", None) if getattr(config, "http_conn_id", None) else None
    parts = urllib.parse.urlsplit(str(url or config.path))
    scheme = parts.scheme.lower()
    namespace = f"{scheme}://{_host_port(parts, _DEFAULT_PORTS.get(scheme))}"
    return [DatasetFacts(namespace, parts.path or "/")]


def _postgres_input(config: Any) -> list[DatasetFacts]:
    uri = config.libpq_uri("postgres_input")  # postgres_conn_id resolved (no secret kept)
    return [postgres_dataset(uri, table) for table in query_tables(config.query)]


def _nats_input(config: Any) -> list[DatasetFacts]:
    parts = urllib.parse.urlsplit(config.connection_config.server_url)
    return [DatasetFacts(f"nats://{_host_port(parts, _DEFAULT_PORTS['nats'])}", config.stream_name)]


def _delta_table_input(config: Any) -> list[DatasetFacts]:
    return [storage_dataset(config.uri)]


def _iceberg_input(config: Any, transport: Any) -> list[DatasetFacts]:
    """The table's storage location, read from its catalog."""
    try:
        location = str(transport.load(fresh=False).location())
    except Exception:  # the catalog cannot be read now: name the table in its catalog
        log.warning("lineage: cannot read the location of Iceberg table %s", config.table_name)
        return [DatasetFacts(f"iceberg://{config.catalog_name}", config.table_name)]
    return [storage_dataset(location)]


_SOURCES: dict[str, Callable[[Any], list[DatasetFacts]]] = {
    "file_input": _file_input,
    "s3_input": _s3_input,
    "postgres_input": _postgres_input,
    "nats_input": _nats_input,
    "delta_table_input": _delta_table_input,
}


def source_datasets(
    pipeline: str, table: TableSpec, connector: ConnectorSpec
) -> list[DatasetFacts]:
    """The datasets a connector reads, each described by its transport's ``describe()``
    (masked). A source without a name in the naming spec (``datagen``, third-party
    transports) is ``<table>/<connector>/<transport>`` in ``connector://<pipeline>``."""
    from airflow_connectors.catalog import transport_of
    from airflow_connectors.spec.redact import mask_text, secret_values

    name = connector.transport.name
    transport = transport_of(connector, table)
    if name in _SOURCES:
        found = _SOURCES[name](transport.config)
    elif name == "iceberg_input":
        found = _iceberg_input(transport.config, transport)
    elif name == "url_input":
        found = _url_input(transport.config, transport)
    else:
        found = [
            DatasetFacts(
                f"{CONNECTOR_SCHEME}://{pipeline}", f"{table.name}/{connector.name}/{name}"
            )
        ]
    try:
        description: str | None = mask_text(
            transport.describe(), secret_values(connector.transport.model_dump(mode="json"))
        )
    except Exception:  # a description is a nicety; never a reason for no lineage
        description = None
    return [DatasetFacts(d.namespace, d.name, d.fields, d.rows, d.size, description) for d in found]


# --- the table ----------------------------------------------------------------------------


def table_dataset(
    pipeline: str, table: TableSpec, warehouse: str, store: StateStore | None = None
) -> DatasetFacts:
    """Where the table's sink writes, with the table's columns: those declared, else the
    latest schema version the store holds for an inferred table."""
    from airflow_connectors.engine.context import table_sink

    sink = table_sink(pipeline, table, warehouse)
    if sink.name == "postgres":
        schema, name = sink.target()  # type: ignore[attr-defined]
        uri = sink.config.libpq_uri("postgres sink")  # type: ignore[attr-defined]
        target = postgres_dataset(uri, f"{schema or 'public'}.{name}")
    else:
        target = storage_dataset(sink.location())
    fields: tuple[tuple[str, str], ...] = tuple((c.name, str(c.type)) for c in table.columns)
    if not fields and store is not None:
        latest = store.latest_schema(pipeline, table.name)
        if latest is not None:
            fields = tuple((c.name, c.type) for c in latest.columns)
    return DatasetFacts(target.namespace, target.name, fields)


def connector_dataset(pipeline: str, table: str, connector: str) -> DatasetFacts:
    """The dataset of a connector's finished asset ``connector://<pipeline>/<table>/<connector>``."""
    return DatasetFacts(f"{CONNECTOR_SCHEME}://{pipeline}", f"{table}/{connector}")


def errors_dataset(pipeline: str, table: TableSpec, warehouse: str) -> DatasetFacts:
    """The table's dead-letter table (records that failed to parse), with its columns."""
    from airflow_connectors.engine.context import table_sink
    from airflow_connectors.sinks.base import errors_schema

    sink = table_sink(pipeline, table, warehouse)
    if sink.name == "postgres":
        schema, name = sink.target("errors")  # type: ignore[attr-defined]
        uri = sink.config.libpq_uri("postgres sink")  # type: ignore[attr-defined]
        target = postgres_dataset(uri, f"{schema or 'public'}.{name}")
    else:
        target = storage_dataset(sink.location("errors"))
    fields = tuple((f.name, str(f.type)) for f in errors_schema())
    return DatasetFacts(target.namespace, target.name, fields)


def batch_statistics(batches: Iterable[Batch]) -> tuple[int, int, int]:
    """``(rows, bytes, records that failed to parse)`` of the committed batches among
    ``batches``."""
    from airflow_connectors.state.records import BatchStatus

    committed = [b for b in batches if b.status == BatchStatus.COMMITTED]
    return (
        sum(b.records or 0 for b in committed),
        sum(b.bytes or 0 for b in committed),
        sum(b.parse_errors or 0 for b in committed),
    )


def batch_lineage(
    store: StateStore,
    pipeline: str,
    table: TableSpec,
    connector: ConnectorSpec,
    warehouse: str,
    batches: Sequence[Batch],
) -> TaskLineage:
    """The source read and the table written, with the statistics of the committed
    ``batches``: rows written and source bytes read; and the dead-letter table with the
    records that went there, when some did."""
    rows, size, bad = batch_statistics(batches)
    inputs = tuple(d.with_stats(None, size) for d in source_datasets(pipeline, table, connector))
    outputs = [table_dataset(pipeline, table, warehouse, store).with_stats(rows, size)]
    if bad:
        outputs.append(errors_dataset(pipeline, table, warehouse).with_stats(bad, None))
    return TaskLineage(inputs, tuple(outputs))


# --- gathered by the tasks ----------------------------------------------------------------


def openlineage_enabled() -> bool:
    """Whether the OpenLineage provider is installed and configured to emit events."""
    try:
        from airflow.providers.openlineage import conf
    except ImportError:
        return False
    return not conf.is_disabled()


def remember_ingest(task: Any, store: StateStore, batch: Batch) -> None:
    """Keep on the ingest ``task`` what its batch read and wrote (from the batch's plan:
    the configs as rendered for this run). Never fails the task."""
    if not openlineage_enabled():
        return
    try:
        plan = batch.plan
        facts = batch_lineage(
            store, plan.pipeline, plan.table, plan.connector, plan.warehouse, [batch]
        )
    except Exception:
        log.warning("lineage of batch %d not reported", batch.batch_id, exc_info=True)
        return
    setattr(task, LINEAGE_ATTRIBUTE, facts)


def remember_finished(
    task: Any,
    context: Any,
    store: StateStore,
    ref: ConnectorRef,
    find_discover: Callable[[], Any],
) -> None:
    """Keep on the finished ``task`` the source, the table with the statistics of the
    batches this DAG run planned (the ids its discover task returned), and the
    connector's asset. ``find_discover`` returns the connector's discover task upstream
    of ``task`` (None when there is none). Never fails the task."""
    if not openlineage_enabled():
        return
    try:
        facts = _finished_lineage(task, context, store, ref, find_discover())
    except Exception:
        log.warning("lineage of connector %s not reported", ref, exc_info=True)
        return
    if facts is not None:
        setattr(task, LINEAGE_ATTRIBUTE, facts)


def _finished_lineage(
    task: Any, context: Any, store: StateStore, ref: ConnectorRef, discover: Any
) -> TaskLineage | None:
    from airflow_connectors.airflow.connections import install_resolver
    from airflow_connectors.settings import Settings
    from airflow_connectors.spec.models import ConnectorSpec, TableSpec

    install_resolver()  # a postgres_conn_id of the source or the sink, through Airflow
    if discover is None:
        log.info("lineage: no discover task of %s upstream of %s", ref, task.task_id)
        return None
    batch_ids = context["ti"].xcom_pull(task_ids=discover.task_id) or []
    batches = []
    for batch_id in batch_ids:
        try:
            batches.append(store.load_batch(int(batch_id)))
        except KeyError:  # released by a stop
            continue
    doc = dict(discover.connector)
    doc["transport"] = {
        **doc["transport"],
        "config": discover.render_template(discover.transport_config, context),
    }
    table = TableSpec.model_validate(discover.table)
    connector = ConnectorSpec.model_validate(doc)
    facts = batch_lineage(store, ref.pipeline, table, connector, Settings.load().warehouse, batches)
    asset = connector_dataset(ref.pipeline, ref.table, ref.connector)
    return TaskLineage(facts.inputs, (*facts.outputs, asset))


# --- OpenLineage objects ------------------------------------------------------------------


def operator_lineage(task: Any) -> Any:
    """The ``OperatorLineage`` of what ``task`` gathered while it ran (empty when it
    gathered nothing: OpenLineage disabled then, or the task did not succeed)."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import (
        input_statistics_input_dataset,
        output_statistics_output_dataset,
    )

    facts: TaskLineage | None = getattr(task, LINEAGE_ATTRIBUTE, None)
    if facts is None:
        return OperatorLineage()
    inputs = []
    for d in facts.inputs:
        stats: dict[str, Any] = {}
        if d.rows is not None or d.size is not None:
            stats["inputStatistics"] = (
                input_statistics_input_dataset.InputStatisticsInputDatasetFacet(
                    rowCount=d.rows, size=d.size
                )
            )
        inputs.append(InputDataset(d.namespace, d.name, facets=_facets(d), inputFacets=stats))
    outputs = []
    for d in facts.outputs:
        out_stats: dict[str, Any] = {}
        if d.rows is not None or d.size is not None:
            out_stats["outputStatistics"] = (
                output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                    rowCount=d.rows, size=d.size
                )
            )
        outputs.append(
            OutputDataset(d.namespace, d.name, facets=_facets(d), outputFacets=out_stats)
        )
    return OperatorLineage(inputs=inputs, outputs=outputs)


def _facets(d: DatasetFacts) -> dict[str, Any]:
    from openlineage.client.facet_v2 import documentation_dataset, schema_dataset

    facets: dict[str, Any] = {}
    if d.fields:
        facets["schema"] = schema_dataset.SchemaDatasetFacet(
            fields=[schema_dataset.SchemaDatasetFacetFields(name=n, type=t) for n, t in d.fields]
        )
    if d.description:
        facets["documentation"] = documentation_dataset.DocumentationDatasetFacet(
            description=d.description
        )
    return facets


# --- the connector:// asset scheme --------------------------------------------------------


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's URI handler of ``connector://<pipeline>/<table>/<connector>``: checks
    the three parts are there; changes nothing."""
    parts = [p for p in uri.path.split("/") if p]
    if not uri.netloc or len(parts) != 2:
        raise ValueError(
            "a connector asset URI is connector://<pipeline>/<table>/<connector>; use "
            "airflow_connectors.airflow.connector_asset(pipeline, table, connector)"
        )
    return uri


def convert_asset_to_openlineage(asset: Any, lineage_context: Any) -> Any:
    """The OpenLineage dataset of a connector's asset (see :func:`connector_dataset`)."""
    from openlineage.client.event_v2 import Dataset

    parts = urllib.parse.urlsplit(asset.uri)
    table, _, connector = parts.path.strip("/").partition("/")
    d = connector_dataset(parts.netloc, table, connector)
    return Dataset(namespace=d.namespace, name=d.name)
