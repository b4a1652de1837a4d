"""What one batch needs to run anywhere: the resolved table, connector and sink, stored
in the batch plan so an ingest job needs only the state store and the batch id."""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_connectors.catalog import format_of, sink_of, transport_of
from airflow_connectors.formats import Format
from airflow_connectors.sinks import Sink
from airflow_connectors.spec.models import ConnectorSpec, TableSpec
from airflow_connectors.state.store import BatchPlan, ConnectorRef
from airflow_connectors.transports import Transport, WorkItem


@dataclass
class BatchContext:
    """One batch of one connector, with what is needed to read and write it: the
    engine's working form of a :class:`BatchPlan` (see :meth:`to_plan`, :meth:`from_plan`)."""

    pipeline: str
    table: TableSpec
    connector: ConnectorSpec
    warehouse: str
    items: list[WorkItem] = field(default_factory=list)
    batch_id: int = 0
    attempt: str = ""
    #: The stored schema version ``table`` has the columns of (see ``engine/schema.py``);
    #: None while the table has no stored version (declared columns not yet evolved).
    schema_version: int | None = None

    @property
    def ref(self) -> ConnectorRef:
        """The connector this batch belongs to."""
        return ConnectorRef(self.pipeline, self.table.name, self.connector.name)

    def transport(self) -> Transport:
        """A new transport built from the connector's config."""
        return transport_of(self.connector, self.table)

    def format(self) -> Format | None:
        """A new format built from the connector's config; None for a transport that
        produces records."""
        return format_of(self.connector, self.table)

    def sink(self) -> Sink:
        """The table's sink under this batch's warehouse, told the batch's connector."""
        sink = table_sink(self.pipeline, self.table, self.warehouse)
        sink.connector = self.connector.name
        return sink

    def to_plan(self) -> BatchPlan:
        """The batch as the plan the state store keeps (the table without its connectors)."""
        return BatchPlan(
            pipeline=self.pipeline,
            # The table as planned; its other connectors are no part of this batch.
            table=self.table.model_copy(update={"connectors": ()}),
            connector=self.connector,
            warehouse=self.warehouse,
            items=tuple(self.items),
            batch_id=self.batch_id,
            attempt=self.attempt,
            schema_version=self.schema_version,
        )

    @classmethod
    def from_plan(cls, plan: BatchPlan) -> BatchContext:
        """The batch a stored plan describes."""
        return cls(
            pipeline=plan.pipeline,
            table=plan.table,
            connector=plan.connector,
            warehouse=plan.warehouse,
            items=list(plan.items),
            batch_id=plan.batch_id,
            attempt=plan.attempt,
            schema_version=plan.schema_version,
        )


def table_sink(pipeline: str, table: TableSpec, warehouse: str) -> Sink:
    """The sink a table's rows (and dead letters) are written to."""
    return sink_of(table, pipeline=pipeline, warehouse=warehouse)
