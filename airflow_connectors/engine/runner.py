"""Embedded runs: every active connector of a pipeline discovers and ingests until there
is nothing new, on local Spark, without an Airflow scheduler. A connector with
``execution: spark_connect`` (its own, else ``[connectors] execution``) runs its batches
on the Spark Connect server of ``[connectors] spark_connect_url`` instead.

A connector is active when the pipeline is running and the connector is not paused;
a ``start_after`` connector waits until every connector carrying one of its labels has
finished (end of input and nothing planned-but-uncommitted).

A connector that fails (a batch it cannot ingest, a source it cannot list) fails alone:
it is FAILED in the state store with a one-line cause, passed over for the rest of the
run, and every other connector still runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_connectors.engine import control
from airflow_connectors.engine.batch import BatchFailed, BatchResult, run_batch
from airflow_connectors.engine.connect import (
    START_HINT,
    SparkConnectError,
    SparkConnectUrlError,
    connect_session,
    forget_session,
    server_address,
)
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.engine.discovery import LeaseBusy, discover, finalize
from airflow_connectors.settings import Settings
from airflow_connectors.sinks.base import SinkUnwritable
from airflow_connectors.spec.graph import label_carriers, start_order
from airflow_connectors.spec.models import ConnectorSpec, PipelineSpec, TableSpec
from airflow_connectors.state.store import ConnectorRef, ConnectorStopped, StateStore

log = logging.getLogger(__name__)


@dataclass
class ConnectorReport:
    """What an embedded run did for one connector: its final status and counts."""

    endpoint: str
    status: str = "idle"  # paused | stopped | waiting | busy | failed | finished | idle
    batches: int = 0
    records: int = 0
    parse_errors: int = 0
    #: Unreadable objects skipped under ``errors.tolerance: all``.
    skipped_objects: int = 0
    #: Why it failed (status ``failed``): one line naming the connector and the object.
    error: str | None = None
    #: Who held its planning lease when it was skipped (status ``busy``): ``another run
    #: (HOST:PID)``; the connector ingested nothing in this run.
    busy: str | None = None
    #: Keys seen but not read yet (files modified within ``min_file_age``) and when the
    #: last of them becomes readable (epoch seconds), when its last round read nothing.
    waiting: int = 0
    ready_at: float | None = None


@dataclass
class RunReport:
    """What an embedded run did for a pipeline, per connector (``table.connector``)."""

    pipeline: str
    connectors: dict[str, ConnectorReport] = field(default_factory=dict)
    spark_started: bool = False

    @property
    def batches(self) -> int:
        """Batches ingested by the run, over all connectors."""
        return sum(c.batches for c in self.connectors.values())

    @property
    def failed(self) -> dict[str, str]:
        """``table.connector`` -> its one-line error, for every connector that failed."""
        return {
            ep: c.error or "failed" for ep, c in self.connectors.items() if c.status == "failed"
        }

    @property
    def busy(self) -> dict[str, str]:
        """``table.connector`` -> who was planning it, for every connector this run
        skipped because another run held its planning lease (it ingested nothing)."""
        return {
            ep: c.busy or "another run" for ep, c in self.connectors.items() if c.status == "busy"
        }


class RunFailed(BatchFailed):
    """Connectors failed in an embedded run; every other connector ran. The message is
    the failed connectors' one-line errors, one per line; ``report`` is the whole run."""

    def __init__(self, report: RunReport) -> None:
        super().__init__("\n".join(report.failed.values()))
        self.report = report


def connector_paused(store: StateStore, ref: ConnectorRef, spec: ConnectorSpec) -> bool:
    """Paused or stopped (engine.control's rule, the store's own flag as the switch), so
    an embedded run passes it over."""
    return control.ConnectorControl(store).halted(ref, spec_paused=spec.paused) is not None


def waiting_for(store: StateStore, pipeline: PipelineSpec, spec: ConnectorSpec) -> list[str]:
    """Endpoints carrying a label in ``spec.start_after`` that have not finished."""
    return unfinished(store, pipeline.name, label_carriers(pipeline, spec.start_after or ()))


def unfinished(store: StateStore, pipeline: str, endpoints: list[str]) -> list[str]:
    """Those of ``endpoints`` that have not finished (end of input, nothing in flight)."""
    blocking = []
    for endpoint in endpoints:
        table, _, connector = endpoint.partition(".")
        st = store.status(ConnectorRef(pipeline, table, connector))
        if st is None or not st.finished:
            blocking.append(endpoint)
    return blocking


class EmbeddedRunner:
    """Runs a pipeline's connectors in this process, without Airflow (``airflow-connectors
    run``): discover, then ingest each batch on a Spark session started only when there
    is data, until nothing new is found."""

    def __init__(
        self,
        pipeline: PipelineSpec,
        settings: Settings,
        store: StateStore | None = None,
        spark: Callable[[], Any] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.settings = settings
        self.store = store or StateStore(settings.state_store_url)
        #: Embedded: the connector's paused flag is the store's own (no DAG).
        self.control = control.ConnectorControl(self.store, control.StoreSwitch(self.store))
        self._spark_factory = spark
        self._spark: Any = None
        self._owns_spark = False
        #: The Spark Connect server's URL once a spark_connect connector connected.
        self._connect_url: str | None = None

    def spark(self) -> Any:
        """The run's Spark session, started on first use."""
        if self._spark is None:
            if self._spark_factory is not None:
                self._spark = self._spark_factory()
            else:
                from pyspark import SparkContext

                from airflow_connectors.engine.spark import spark_session

                # close() stops only a Spark this runner started, not one of the process.
                self._owns_spark = SparkContext._active_spark_context is None
                log.info("starting Spark (%s)", self.settings.spark_master)
                self._spark = spark_session(
                    self.settings, f"airflow-connectors {self.pipeline.name}"
                )
        return self._spark

    def connect_spark(self) -> Any:
        """The run's Spark Connect session (``[connectors] spark_connect_url``), for
        connectors with ``execution: spark_connect``; connected on first use."""
        url = self.settings.spark_connect_url
        if not url:
            raise SparkConnectUrlError(
                "its execution is spark_connect but [connectors] spark_connect_url is not "
                "set; set it (AIRFLOW__CONNECTORS__SPARK_CONNECT_URL=sc://HOST:15002) to a "
                f"running Spark Connect server ({START_HINT})"
            )
        if self._connect_url is None:
            log.info("connecting to Spark Connect server %s", server_address(url))
        session = connect_session(url, self.settings, data_sources=False)
        self._connect_url = url
        return session

    def spark_for(self, connector: ConnectorSpec) -> Callable[[], Any]:
        """What starts the Spark session ``connector``'s batches run on: the local
        session, or (``execution: spark_connect``, unless this runner was given a
        ``spark`` factory) the Spark Connect session."""
        if (
            self._spark_factory is None
            and self.settings.execution_of(connector.execution) == "spark_connect"
        ):
            return self.connect_spark
        return self.spark

    def close(self) -> None:
        """Stops the Spark session this runner started (not one a ``spark`` factory
        gave it, nor one the process had already) and its gateway, and its Spark Connect
        session; the store stays open for the caller's summary."""
        if self._connect_url is not None:
            forget_session(self._connect_url)
            self._connect_url = None
        if self._spark is not None and self._owns_spark:
            from airflow_connectors.engine.spark import stop_session

            stop_session(self._spark)
        self._spark = None
        self._owns_spark = False

    def context(self, table: TableSpec, connector: ConnectorSpec) -> BatchContext:
        """A batch context of one of the pipeline's connectors under the run's warehouse."""
        return BatchContext(self.pipeline.name, table, connector, self.settings.warehouse)

    def run(
        self,
        only: str | None = None,
        max_rounds: int | None = None,
        *,
        raise_on_failure: bool = True,
    ) -> RunReport:
        """Run until no connector finds anything new. A connector that fails is passed
        over for the rest of the run while the others go on; afterwards
        :class:`RunFailed` names the failed ones, or with ``raise_on_failure=False`` the
        report lists them (``report.failed``)."""
        report = RunReport(self.pipeline.name)
        targets = self._targets(only)
        for t, c in targets:
            self.store.ensure_connector(
                ConnectorRef(self.pipeline.name, t.name, c.name), paused=c.paused
            )
            report.connectors[f"{t.name}.{c.name}"] = ConnectorReport(f"{t.name}.{c.name}")
        if self.store.pipeline_paused(self.pipeline.name):
            log.info(
                "pipeline %s is paused: no connector runs (resume it first)", self.pipeline.name
            )
            for r in report.connectors.values():
                r.status = "paused"
            return report
        rounds = 0
        while max_rounds is None or rounds < max_rounds:
            rounds += 1
            if not self._round(targets, report):
                break
        report.spark_started = self._spark is not None or self._connect_url is not None
        if raise_on_failure and report.failed:
            raise RunFailed(report)
        return report

    def _targets(self, only: str | None) -> list[tuple[TableSpec, ConnectorSpec]]:
        """The connectors to run (all, or the one ``only`` names) in start order."""
        targets = start_order(
            [
                (t, c)
                for t, c in self.pipeline.connectors()
                if only is None or f"{t.name}.{c.name}" == only
            ],
        )
        if only is not None and not targets:
            self.pipeline.find(only)  # raises KeyError naming the tables/connectors
        return targets

    def _round(self, targets: list[tuple[TableSpec, ConnectorSpec]], report: RunReport) -> bool:
        """One round: each target that may run now runs once. Returns whether any batch
        committed."""
        progress = False
        for table, spec in targets:
            rep = report.connectors[f"{table.name}.{spec.name}"]
            if rep.status == "failed":
                continue  # fails alone, once per run; the next run retries it
            ref = ConnectorRef(self.pipeline.name, table.name, spec.name)
            if self._may_run(ref, spec, rep):
                progress |= self._run_connector(ref, self.context(table, spec), rep)
        return progress

    def _may_run(self, ref: ConnectorRef, spec: ConnectorSpec, rep: ConnectorReport) -> bool:
        """Whether the connector is neither halted nor waiting for its ``start_after``;
        when it is, ``rep.status`` says which."""
        halted = self.control.halted(ref, spec_paused=spec.paused)
        if halted:
            rep.status = halted  # paused, or stopped until resumed
            return False
        blocking = waiting_for(self.store, self.pipeline, spec)
        if blocking:
            if rep.status != "waiting":
                log.info(
                    "%s waits for %s to finish (start_after %s)",
                    ref,
                    ", ".join(blocking),
                    list(spec.start_after or ()),
                )
            rep.status = "waiting"
            return False
        return True

    def _run_connector(self, ref: ConnectorRef, ctx: BatchContext, rep: ConnectorReport) -> bool:
        """One round of one connector: discover, run its batches, finalize. Returns
        whether a batch committed. A failure is recorded and reported, never raised."""
        try:
            found = discover(self.store, ctx)
        except (LeaseBusy, ConnectorStopped) as e:
            # Another run of this connector is planning (or it was just stopped):
            # skip it in this run, one line, no traceback.
            log.warning("%s; skipped in this run", e)
            rep.status = "stopped" if isinstance(e, ConnectorStopped) else "busy"
            if isinstance(e, LeaseBusy):
                rep.busy = f"another run ({e.holder})" if e.holder else "another run"
            return False
        except Exception as e:
            # discover recorded it as the connector's failure (one line, FAILED).
            self._failed(ref, rep, e, recorded=True)
            return False
        if found.waiting and not found.batch_ids:
            rep.waiting, rep.ready_at = found.waiting, found.ready_at
        progress = False
        spark = self.spark_for(ctx.connector)
        for batch_id in found.batch_ids:
            # The connector's other batches still run: their items are independent.
            try:
                result = run_batch(self.store, batch_id, spark)
            except BatchFailed as e:
                self._lost_connect_session(spark)
                self._failed(ref, rep, e, recorded=True)
                continue
            except Exception as e:
                self._lost_connect_session(spark)
                self._failed(ref, rep, e, recorded=False)
                continue
            self._count(rep, result)
            progress = progress or result.committed
        if rep.status == "failed":
            return progress
        try:
            finished = finalize(self.store, ctx) if found.batch_ids else found.end_of_input
        except Exception as e:
            self._failed(ref, rep, e, recorded=False)
            return progress
        rep.status = "finished" if finished else "idle"
        return progress or bool(found.batch_ids)

    def _lost_connect_session(self, spark: Callable[[], Any]) -> None:
        """After a failed batch on Spark Connect, the next one connects again: a server
        that restarted has lost the session (and the package sent to it)."""
        if spark == self.connect_spark and self._connect_url is not None:
            forget_session(self._connect_url)

    def _failed(
        self, ref: ConnectorRef, rep: ConnectorReport, e: Exception, *, recorded: bool
    ) -> None:
        """Report a connector's failure in one line (the trace at DEBUG); ``recorded``:
        the batch already stored it as the connector's fatal error."""
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        message = text if text.startswith(f"connector {ref}") else f"connector {ref}: {text}"
        if not isinstance(e, BatchFailed | OSError | SinkUnwritable | SparkConnectError):
            message = f"connector {ref}: {type(e).__name__}: {text}"
        if not isinstance(e, BatchFailed):  # a batch logs its own traces, masked
            log.debug("%s failed", ref, exc_info=e)
        if not recorded:
            self.store.record_failure(ref, message)
        log.error("%s; the pipeline's other connectors go on", message)
        if rep.status != "failed":
            rep.status, rep.error = "failed", message

    @staticmethod
    def _count(rep: ConnectorReport, result: BatchResult) -> None:
        if result.committed:
            rep.batches += 1
            rep.records += result.records
            rep.parse_errors += result.parse_errors
            rep.skipped_objects += result.skipped
