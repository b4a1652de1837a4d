"""What one batch needs to run anywhere: the resolved table, connector and sink, stored
in the batch plan so an ingest job needs only the state store and the batch id."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_connectors.catalog import format_of, sink_of, transport_of
from airflow_connectors.formats import Format
from airflow_connectors.sinks import Sink
from airflow_connectors.spec.models import ConnectorSpec, TableSpec
from airflow_connectors.state.store import ConnectorRef
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

    def to_plan(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "table": self.table.model_dump(mode="json", exclude={"connectors"}),
            "connector": self.connector.model_dump(mode="json"),
            "warehouse": self.warehouse,
            "items": [i.to_json() for i in self.items],
        }

    @classmethod
    def from_plan(cls, plan: dict[str, Any], batch_id: int = 0, attempt: str = "") -> BatchContext:
        return cls(
            pipeline=plan["pipeline"],
            table=TableSpec.model_validate(plan["table"]),
            connector=ConnectorSpec.model_validate(plan["connector"]),
            warehouse=plan["warehouse"],
            items=[WorkItem.from_json(i) for i in plan["items"]],
            batch_id=batch_id,
            attempt=attempt,
        )


def table_sink(pipeline: str, table: TableSpec, warehouse: str) -> Sink:
    """The sink a table's rows (and dead letters) are written to."""
    return sink_of(table, pipeline=pipeline, warehouse=warehouse)
