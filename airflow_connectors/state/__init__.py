"""Layer 3: the connector state store."""

from airflow_connectors.state.store import (
    Batch,
    ConnectorRef,
    ConnectorState,
    ErrorRecord,
    ItemReceipt,
    StateStore,
)

__all__ = ["Batch", "ConnectorRef", "ConnectorState", "ErrorRecord", "ItemReceipt", "StateStore"]
