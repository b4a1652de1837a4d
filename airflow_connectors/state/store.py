"""The connector state store: offsets, batches, metrics, errors, flags and leases.

The framework owns offsets: they change only in :meth:`StateStore.commit_batch`, in the
same transaction as the batch's state and metrics (and in ``edit_offsets`` while a
connector is stopped).

:class:`StateStore` is the one class users construct; its parts live by concern:
:mod:`.records` (typed records, the state enums), :mod:`.plan` (the batch plan),
:mod:`.database` (engine, URL errors), :mod:`.connectors` (rows, flags, errors,
status), :mod:`.batches` (the batch protocol), :mod:`.offsets` (editing offsets),
:mod:`.signals` (leases and signals to Airflow) and :mod:`.schemas` (the schema
versions of tables whose columns are inferred). The names this module exported before
the split are re-exported here.
"""

from __future__ import annotations

from airflow_connectors.state.batches import Batches
from airflow_connectors.state.connectors import MAX_ERRORS
from airflow_connectors.state.database import StateStoreUnavailable, create_engine
from airflow_connectors.state.offsets import Offsets
from airflow_connectors.state.plan import BatchPlan
from airflow_connectors.state.records import (
    Batch,
    BatchStatus,
    ConnectorNotStopped,
    ConnectorRef,
    ConnectorState,
    ConnectorStatus,
    ConnectorStopped,
    ErrorRecord,
    ItemReceipt,
)
from airflow_connectors.state.schemas import (
    SchemaColumn,
    SchemaConflict,
    Schemas,
    SchemaVersion,
)
from airflow_connectors.state.signals import Signals
from airflow_connectors.transports.base import Cursor, KeyOffset

__all__ = [
    "MAX_ERRORS",
    "Batch",
    "BatchPlan",
    "BatchStatus",
    "ConnectorNotStopped",
    "ConnectorRef",
    "ConnectorState",
    "ConnectorStatus",
    "ConnectorStopped",
    "Cursor",
    "ErrorRecord",
    "ItemReceipt",
    "KeyOffset",
    "SchemaColumn",
    "SchemaConflict",
    "SchemaVersion",
    "StateStore",
    "StateStoreUnavailable",
    "create_engine",
]


class StateStore(Batches, Offsets, Signals, Schemas):
    """SQLAlchemy-backed store; SQLite (embedded) or PostgreSQL by URL.

    ``StateStore(url)`` migrates the schema on open (``migrate=False`` skips that) and
    raises :class:`StateStoreUnavailable` when the URL cannot be used."""
