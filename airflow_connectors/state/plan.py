"""The batch plan: what one batch reads and where it writes, persisted by discovery
before any data moves (step 1 of the exactly-once protocol) and read back by the ingest
job, which needs nothing but the state store and the batch id."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_connectors.spec.models import ConnectorSpec, TableSpec
from airflow_connectors.state.refs import ConnectorRef
from airflow_connectors.transports.base import WorkItem

_ITEM_FIELDS = frozenset(f.name for f in dataclasses.fields(WorkItem))


@dataclass(frozen=True)
class BatchPlan:
    """One batch: its work items in key order and a snapshot of the configuration they
    were planned with, so a re-run reads exactly the same data the same way even after
    the spec changed.

    ``batch_id`` and ``attempt`` are set by the store (the batch's row) and by the
    running attempt; a plan not persisted yet has ``batch_id`` 0."""

    pipeline: str
    #: The table as planned, without its connectors.
    table: TableSpec
    #: The connector as planned: its transport and format configs, limits and errors
    #: policy.
    connector: ConnectorSpec
    warehouse: str
    items: tuple[WorkItem, ...] = ()
    batch_id: int = 0
    attempt: str = ""
    #: The stored schema version (``ac_schemas``, :mod:`.schemas`) whose columns
    #: ``table`` holds, for a table whose columns are inferred; None for declared
    #: columns (and for plans made before schema versions existed).
    schema_version: int | None = None

    @property
    def ref(self) -> ConnectorRef:
        """The connector this plan belongs to."""
        return ConnectorRef(self.pipeline, self.table.name, self.connector.name)

    def to_json(self, *, sealed: bool = True) -> dict[str, Any]:
        """The plan as JSON (what the store keeps, plus ``batch_id`` and ``attempt``),
        its secrets sealed (:mod:`..spec.sealed`): the store never holds one in clear.
        ``sealed=False``: in clear, only for handing the plan to the job's own Spark
        tasks in memory (executors may run where the key is not configured)."""
        from airflow_connectors.catalog import sealed_connector, sealed_table

        table = self.table.model_dump(mode="json", exclude={"connectors"})
        connector = self.connector.model_dump(mode="json")
        return {
            "pipeline": self.pipeline,
            "table": sealed_table(table) if sealed else table,
            "connector": sealed_connector(connector) if sealed else connector,
            "warehouse": self.warehouse,
            "items": [i.to_json() for i in self.items],
            "batch_id": self.batch_id,
            "attempt": self.attempt,
            "schema_version": self.schema_version,
        }

    @classmethod
    def from_json(
        cls, doc: Mapping[str, Any], *, batch_id: int | None = None, attempt: str | None = None
    ) -> BatchPlan:
        """Read a plan; ``batch_id`` and ``attempt`` override the document's.

        Tolerant of plans the previous versions stored (no ``batch_id``, ``attempt``;
        keys this version does not know, in the plan or in its work items, are
        ignored), so batches planned before an upgrade still run."""
        table = {k: v for k, v in doc["table"].items() if k != "connectors"}
        return cls(
            pipeline=doc["pipeline"],
            table=TableSpec.model_validate(table),
            connector=ConnectorSpec.model_validate(doc["connector"]),
            warehouse=doc["warehouse"],
            items=tuple(
                WorkItem.from_json({k: v for k, v in i.items() if k in _ITEM_FIELDS})
                for i in doc.get("items") or ()
            ),
            batch_id=int(doc.get("batch_id") or 0) if batch_id is None else batch_id,
            attempt=str(doc.get("attempt") or "") if attempt is None else attempt,
            schema_version=_optional_int(doc.get("schema_version")),
        )

    def stored(self) -> dict[str, Any]:
        """What the store's ``plan`` column holds: the batch's row has its id and
        attempts. The same keys the previous versions wrote, so they can read it."""
        doc = self.to_json()
        del doc["batch_id"], doc["attempt"]
        return doc


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def stored_keys(doc: Mapping[str, Any]) -> frozenset[str]:
    """The work-item keys of a stored plan, without validating the rest (the cursor
    reads every planned batch of a connector at each discovery)."""
    return frozenset(str(i["key"]) for i in doc.get("items") or ())
