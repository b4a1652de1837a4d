"""Triggers that poll a connector's source for data discovery would find.

``ConnectorNewDataTrigger`` is an event trigger for an ``AssetWatcher``: a connector with
``trigger: {on: new_data}`` is scheduled on an asset it watches. It fires once per new
set of data: the digest of what discovery would find is recorded before the event, so
the triggerer's restart of the trigger after each event (and a second triggerer) does
not fire again for the same data. The digest is kept in Airflow's asset state store of
the watched asset (key :data:`FINGERPRINT_KEY`; Airflow 3.3+, experimental there), where
the triggerer injects it and the UI and REST API show it; where Airflow gives the trigger
no asset state store, in the connector's row of our state store. ``ConnectorDataAvailableTrigger``
is the deferral trigger of :class:`ConnectorNewDataSensor`: it fires whenever something
is there to ingest.

Triggers must be importable by the triggerer from the installed package, not from a DAG
bundle, which is why they live here.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from airflow_connectors.airflow.triggers.watch import watch
from airflow_connectors.settings import Settings
from airflow_connectors.state.store import ConnectorRef, StateStore

#: The watched asset's state-store key holding what the trigger last fired for:
#: ``{"fingerprint": <digest>, "fired_at": <ISO time>}``.
FINGERPRINT_KEY = "connector_new_data"

log = logging.getLogger(__name__)


def probe(
    pipeline: str, table: dict[str, Any], connector: dict[str, Any], *, record: bool
) -> str | None:
    """The digest of what the connector's discovery would find now (None: nothing, or
    the pipeline is paused). ``record``: also claim it, returning None when it was
    claimed before."""
    from airflow_connectors.engine.context import BatchContext
    from airflow_connectors.engine.discovery import new_data_fingerprint
    from airflow_connectors.spec.models import ConnectorSpec, TableSpec

    settings = Settings.load()
    store = StateStore(settings.state_store_url)
    try:
        if store.pipeline_paused(pipeline):
            return None
        ctx = BatchContext(
            pipeline,
            TableSpec.model_validate(table),
            ConnectorSpec.model_validate(connector),
            settings.warehouse,
        )
        fingerprint = new_data_fingerprint(store, ctx)
        if fingerprint is None or (record and not store.signal_new_data(ctx.ref, fingerprint)):
            return None
        return fingerprint
    finally:
        store.close()


def watch_paths(table: dict[str, Any], connector: dict[str, Any]) -> list[str]:
    """The local folders whose changes may mean new data for the connector (its
    transport's :meth:`~airflow_connectors.transports.base.Transport.watch_paths`);
    none when its config cannot be built here (the probe says why)."""
    from airflow_connectors.catalog import transport_of
    from airflow_connectors.spec.models import ConnectorSpec, TableSpec

    try:
        transport = transport_of(
            ConnectorSpec.model_validate(connector), TableSpec.model_validate(table)
        )
        return list(transport.watch_paths())
    except Exception:  # a bad config fails the probe, in its own words
        log.debug("no folders to watch", exc_info=True)
        return []


def change_watch(
    table: dict[str, Any], connector: dict[str, Any], wake: Callable[[], None]
) -> contextlib.AbstractContextManager[Any] | None:
    """The transport's :meth:`~airflow_connectors.transports.base.Transport.watch_changes`
    (a Kafka topic's next message); None when it has none or its config cannot be
    built here (the probe says why)."""
    from airflow_connectors.catalog import transport_of
    from airflow_connectors.spec.models import ConnectorSpec, TableSpec

    try:
        transport = transport_of(
            ConnectorSpec.model_validate(connector), TableSpec.model_validate(table)
        )
        return transport.watch_changes(wake)
    except Exception:  # a bad config fails the probe, in its own words
        log.debug("no changes to watch", exc_info=True)
        return None


class _Poll:
    """Polls the connector's discovery every ``poll_interval`` seconds (in a thread)."""

    def __init__(
        self,
        *,
        pipeline: str,
        table: dict[str, Any],
        connector: dict[str, Any],
        poll_interval: float = 30.0,
    ) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.table = table
        self.connector = connector
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        kwargs = {
            "pipeline": self.pipeline,
            "table": self.table,
            "connector": self.connector,
            "poll_interval": self.poll_interval,
        }
        return (f"{type(self).__module__}.{type(self).__qualname__}", kwargs)

    @property
    def ref(self) -> ConnectorRef:
        return ConnectorRef(self.pipeline, self.table["name"], self.connector["name"])

    async def _poll(self, *, record: bool) -> AsyncIterator[TriggerEvent]:
        # Watching starts before the first probe: a file that lands in between wakes
        # the next one.
        paths = await asyncio.to_thread(watch_paths, self.table, self.connector)
        changed = asyncio.Event()
        loop = asyncio.get_running_loop()

        def wake() -> None:  # from the source's watcher thread
            loop.call_soon_threadsafe(changed.set)

        watching = await asyncio.to_thread(change_watch, self.table, self.connector, wake)
        with contextlib.ExitStack() as stack:
            if paths:
                try:
                    stack.enter_context(watch(paths, changed))
                except OSError as e:
                    log.warning(
                        "connector %s: cannot watch %s for new files (%s); polling only",
                        self.ref,
                        ", ".join(paths),
                        e,
                    )
            source = None
            if watching is not None:
                source = stack.enter_context(watching)
                # Until the source's watch listens (a broker not reached in time: the
                # poll finds what arrives meanwhile).
                await asyncio.to_thread(source.armed)
            while True:
                fingerprint = await self._probe(record=record)
                if fingerprint is not None:
                    yield TriggerEvent(  # type: ignore[no-untyped-call]  # Airflow's is untyped
                        {
                            "connector": str(self.ref),
                            "endpoint": self.ref.endpoint_name,
                            "data": fingerprint,
                        }
                    )
                    return
                # Until the next poll, or something changed in a watched folder since
                # the last probe.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), self.poll_interval)
                if source is not None and changed.is_set():
                    source.rearm()  # it wakes once per arm
                    await asyncio.to_thread(source.armed)
                changed.clear()

    async def _probe(self, *, record: bool) -> str | None:
        """What discovery would find now (see :func:`probe`); ``record``: claimed in our
        state store."""
        return await asyncio.to_thread(
            probe, self.pipeline, self.table, self.connector, record=record
        )


class ConnectorNewDataTrigger(_Poll, BaseEventTrigger):
    """Fires once each time new data appears for the connector (for ``AssetWatcher``)."""

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Polls every ``poll_interval`` seconds; yields an event for each new set of data,
        recording its digest first so a restarted trigger does not fire for it again."""
        async for event in self._poll(record=True):
            self.log.info("connector %s has new data: firing", self.ref)
            yield event

    async def _probe(self, *, record: bool) -> str | None:
        """With an asset state store (the triggerer's, for the watched asset): the digest
        of what discovery finds unless it is the one recorded there, recorded before the
        event. A trigger runs in one triggerer at a time, so read-then-write claims it.
        Without one: claimed in our state store."""
        states = self.asset_state_store
        if states is None:
            return await super()._probe(record=record)
        fingerprint = await super()._probe(record=False)
        if fingerprint is None:
            return None
        last = await states.aget(FINGERPRINT_KEY)
        if isinstance(last, dict) and last.get("fingerprint") == fingerprint:
            return None
        fired_at = dt.datetime.now(dt.UTC).isoformat()
        await states.aset(FINGERPRINT_KEY, {"fingerprint": fingerprint, "fired_at": fired_at})
        return fingerprint


class ConnectorDataAvailableTrigger(_Poll, BaseTrigger):
    """Fires when the connector's discovery would find something (sensor deferral)."""

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Polls every ``poll_interval`` seconds; yields an event whenever discovery would
        find something, recording nothing."""
        async for event in self._poll(record=False):
            yield event
