"""Layer 3: the connector state store."""

from airflow_connectors.state.store import (
    Batch,
    BatchPlan,
    BatchStatus,
    ConnectorRef,
    ConnectorState,
    ConnectorStatus,
    ErrorRecord,
    ItemReceipt,
    StateStore,
)

__all__ = [
    "Batch",
    "BatchPlan",
    "BatchStatus",
    "ConnectorRef",
    "ConnectorState",
    "ConnectorStatus",
    "ErrorRecord",
    "ItemReceipt",
    "StateStore",
]
