"""Connector control beyond pause: Kafka Connect's stop and offset edits.

``stop`` releases the connector's planned-but-uncommitted batches (their staged output is
discarded and their items become new work again), so nothing is in flight and offsets may
be edited; ``resume`` clears it. Pausing itself is the Airflow DAG's paused flag (or, for
embedded runs, the state store's) and lives with the caller.
"""

from __future__ import annotations

import logging

from airflow_connectors.engine.context import BatchContext
from airflow_connectors.state.store import ConnectorRef, StateStore

log = logging.getLogger(__name__)


def stop(store: StateStore, ref: ConnectorRef) -> list[int]:
    """Mark the connector stopped and release its planned batches; returns their ids."""
    store.set_stopped(ref, True)
    released = []
    for batch in store.pending_batches(ref):
        BatchContext.from_plan(batch.plan, batch.batch_id).sink().discard(batch.batch_id)
        if store.drop_planned_batch(batch.batch_id):
            released.append(batch.batch_id)
    if released:
        log.info("connector %s stopped: released planned batch(es) %s", ref, released)
    return released


def resume(store: StateStore, ref: ConnectorRef) -> None:
    store.set_stopped(ref, False)
