"""The engine's half of a stream's hand-over after a backfill (``transports/handover.py``):
before a planning discovery of a connector whose transport names a hand-over column,
look up that column's greatest value in the table, once, while the connector has
committed nothing (no offsets row and nothing in flight); afterwards its committed
offsets decide where it reads."""

from __future__ import annotations

import logging

from airflow_connectors.engine.context import BatchContext
from airflow_connectors.transports import Cursor, Transport
from airflow_connectors.transports.handover import Handover

log = logging.getLogger(__name__)


def prime(transport: Transport, ctx: BatchContext, cursor: Cursor, store_url: str) -> None:
    """Set ``transport.context.handover`` for a transport that asks for one
    (``store_url``: the state store's, where the Iceberg sink keeps its catalog)."""
    column = transport.handover_column()
    if column is None:
        return
    if cursor.offsets or cursor.in_flight:
        transport.context.handover = Handover(column)
        return
    sink = ctx.sink()
    sink.state_store_url = store_url
    try:
        value = sink.column_max(column)
    except (OSError, ValueError) as e:
        raise ValueError(
            f"connector {ctx.ref}: cannot read the hand-over value (the greatest {column} "
            f"in table {ctx.table.name}): {e}"
        ) from e
    log.info(
        "%s: hand-over: the table's greatest %s is %r%s",
        ctx.ref,
        column,
        value,
        "" if value is not None else " (empty table: start_from decides)",
    )
    transport.context.handover = Handover(column, value)


__all__ = ["prime"]
