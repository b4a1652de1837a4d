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
    pipeline: str
    table: TableSpec
    connector: ConnectorSpec
    warehouse: str
    items: list[WorkItem] = field(default_factory=list)
    batch_id: int = 0
    attempt: str = ""

    @property
    def ref(self) -> ConnectorRef:
        return ConnectorRef(self.pipeline, self.table.name, self.connector.name)

    def transport(self) -> Transport:
        return transport_of(self.connector, self.table)

    def format(self) -> Format | None:
        return format_of(self.connector, self.table)

    def sink(self) -> Sink:
        return table_sink(self.pipeline, self.table, self.warehouse)

    def to_plan(self) -> BatchPlan:
        return BatchPlan(
            pipeline=self.pipeline,
            # The table as planned; its other connectors are no part of this batch.
            table=self.table.model_copy(update={"connectors": ()}),
            connector=self.connector,
            warehouse=self.warehouse,
            items=tuple(self.items),
            batch_id=self.batch_id,
            attempt=self.attempt,
        )

    @classmethod
    def from_plan(cls, plan: BatchPlan) -> BatchContext:
        return cls(
            pipeline=plan.pipeline,
            table=plan.table,
            connector=plan.connector,
            warehouse=plan.warehouse,
            items=list(plan.items),
            batch_id=plan.batch_id,
            attempt=plan.attempt,
        )


def table_sink(pipeline: str, table: TableSpec, warehouse: str) -> Sink:
    """The sink a table's rows (and dead letters) are written to."""
    return sink_of(table, pipeline=pipeline, warehouse=warehouse)
