"""OpenLineage of connector tasks: what a batch read and which table it wrote.

The ingest and finished operators report lineage through the operator lineage methods
(``get_openlineage_facets_on_complete``), which the OpenLineage provider calls after a
task succeeded, possibly in a forked child process that must not talk to Airflow. So
the facts are gathered while the task still runs (:func:`remember_ingest`,
:func:`remember_finished`: state-store reads, connections resolved through Airflow) as
plain data (:class:`TaskLineage`), and the lineage method only turns them into
OpenLineage objects (:func:`operator_lineage`).

Datasets are named by the components that know them: a transport names what it reads
(``Transport.lineage_datasets``), a sink the table it writes (``Sink.lineage_dataset``),
both after the OpenLineage naming spec (:mod:`airflow_connectors.spec.datasets`). A
source that names none (``datagen``, a third-party transport without the hook) is
``<table>/<connector>/<transport>`` in ``connector://<pipeline>``; a connector's asset is
``<table>/<connector>`` there. Nothing here carries a secret: the names carry none, and
descriptions go through :func:`airflow_connectors.spec.redact.mask_text`.

The asset scheme ``connector://`` is registered in the provider info with
:func:`sanitize_uri` and :func:`convert_asset_to_openlineage`. Importing this module is
cheap (the DAG processor imports the handler while parsing DAG files).
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from urllib.parse import SplitResult

    from airflow_connectors.spec.datasets import LineageDataset
    from airflow_connectors.spec.models import ConnectorSpec, TableSpec
    from airflow_connectors.state.records import Batch, ConnectorRef
    from airflow_connectors.state.store import StateStore

log = logging.getLogger(__name__)

#: The scheme of the asset every connector emits an event on when it finishes.
CONNECTOR_SCHEME = "connector"
#: The attribute of an operator that holds the :class:`TaskLineage` its run gathered.
LINEAGE_ATTRIBUTE = "_connector_lineage"


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

    @classmethod
    def of(cls, dataset: LineageDataset, fields: tuple[tuple[str, str], ...] = ()) -> DatasetFacts:
        """The facts of a dataset a plugin named."""
        return cls(dataset.namespace, dataset.name, fields)

    def with_stats(self, rows: int | None, size: int | None) -> DatasetFacts:
        """This dataset with the given statistics."""
        return DatasetFacts(self.namespace, self.name, self.fields, rows, size, self.description)


@dataclass(frozen=True)
class TaskLineage:
    """What one task read and wrote."""

    inputs: tuple[DatasetFacts, ...] = ()
    outputs: tuple[DatasetFacts, ...] = ()


# --- sources ------------------------------------------------------------------------------


def source_datasets(
    pipeline: str, table: TableSpec, connector: ConnectorSpec
) -> list[DatasetFacts]:
    """The datasets a connector reads, as its transport names them, each described by
    the transport's ``describe()`` (masked). A transport that names none (``datagen``)
    is ``<table>/<connector>/<transport>`` in ``connector://<pipeline>``."""
    from airflow_connectors.catalog import transport_of
    from airflow_connectors.spec.redact import mask_text, secret_values

    name = connector.transport.name
    transport = transport_of(connector, table)
    found = [DatasetFacts.of(d) for d in transport.lineage_datasets()] or [
        DatasetFacts(f"{CONNECTOR_SCHEME}://{pipeline}", f"{table.name}/{connector.name}/{name}")
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

    target = table_sink(pipeline, table, warehouse).lineage_dataset()
    fields: tuple[tuple[str, str], ...] = tuple((c.name, str(c.type)) for c in table.columns)
    if not fields and store is not None:
        latest = store.latest_schema(pipeline, table.name)
        if latest is not None:
            fields = tuple((c.name, c.type) for c in latest.columns)
    return DatasetFacts.of(target, fields)


def connector_dataset(pipeline: str, table: str, connector: str) -> DatasetFacts:
    """The dataset of a connector's finished asset ``connector://<pipeline>/<table>/<connector>``."""
    return DatasetFacts(f"{CONNECTOR_SCHEME}://{pipeline}", f"{table}/{connector}")


def errors_dataset(pipeline: str, table: TableSpec, warehouse: str) -> DatasetFacts:
    """The table's dead-letter table (records that failed to parse), with its columns."""
    from airflow_connectors.engine.context import table_sink
    from airflow_connectors.sinks.base import errors_schema

    target = table_sink(pipeline, table, warehouse).lineage_dataset("errors")
    return DatasetFacts.of(target, tuple((f.name, str(f.type)) for f in errors_schema()))


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
