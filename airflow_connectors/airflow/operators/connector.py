"""The tasks of a connector DAG: ``discover -> ingest[n] -> finalize -> finished``.

Each is a thin shell over the engine: discover asks the state store whether the connector
may run (the gate) and plans batches (no Spark), ingest spark-submits one planned batch (or,
with ``execution: spark_connect``, runs it in the task as a client of a Spark Connect
server), finalize recomputes end of input, finished emits the connector's asset event
once per finishing.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowNotFoundException,
    AirflowSkipException,
)
from airflow.sdk.log import mask_secret

from airflow_connectors.airflow.connections import export_connections, install_resolver
from airflow_connectors.airflow.hooks.spark import (
    DEFAULT_CONN_ID,
    connection_exists,
    connection_master,
    define_local_connection,
    spark_connect_url,
    spark_submit_binary,
)
from airflow_connectors.airflow.lineage import remember_finished, remember_ingest
from airflow_connectors.engine.package import submit_options
from airflow_connectors.engine.spark import ingest_submit_conf
from airflow_connectors.settings import Settings, SettingsError
from airflow_connectors.sinks._fs import aws_secret_values
from airflow_connectors.spec.models import ConnectorSpec, TableSpec
from airflow_connectors.spec.redact import secret_fields, secret_values
from airflow_connectors.state.store import ConnectorRef, ConnectorStopped, StateStore

if TYPE_CHECKING:
    from airflow.sdk import Asset, Context

    from airflow_connectors.engine.context import BatchContext

#: How long a discover task waits for another run of its connector to finish planning.
LEASE_WAIT_SECONDS = 120

#: The file spark-submit runs for one batch.
INGEST_APPLICATION = str(
    Path(__file__).resolve().parents[2] / "engine" / "submit" / "ingest_batch.py"
)


@contextmanager
def _state_store(settings: Settings) -> Iterator[StateStore]:
    """The state store of ``settings``, closed when the block ends."""
    store = StateStore(settings.state_store_url)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def _told_in_one_line(task: BaseOperator, ref: ConnectorRef | str) -> Iterator[None]:
    """An error of the engine becomes one ERROR line naming the connector and the cause
    (the traceback at DEBUG, the library's chained errors dropped) and fails the task:
    at once when it is permanent (a missing bucket or connection, refused credentials,
    a bad config: retrying only delays the failure), through the task's retries when it
    is transient (the transport's own retry policy already ran inside the attempt)."""
    from airflow_connectors.engine.failures import is_permanent, one_line

    try:
        yield
    except (AirflowSkipException, AirflowException):
        raise
    except Exception as e:
        permanent = is_permanent(e)
        message = f"connector {ref}: {one_line(e)}"
        if not permanent:
            message += " (transient: the task's retries try again)"
        task.log.error("%s", message)
        task.log.debug("connector %s: the failure in detail", ref, exc_info=True)
        if permanent:
            raise AirflowFailException(message) from None
        raise AirflowException(message) from None


class _ConnectorOperator(BaseOperator):
    """A task of one connector. ``transport_config`` and ``format_config`` are templated
    with the run's context (``{{ ds }}``...), so each run can read its own slice."""

    template_fields: Sequence[str] = ("transport_config", "format_config")
    template_fields_renderers: ClassVar[dict[str, str]] = {
        "transport_config": "json",
        "format_config": "json",
    }

    def __init__(
        self, *, pipeline: str, table: dict[str, Any], connector: dict[str, Any], **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.table = table
        self.connector = connector
        self.transport_config = dict(connector["transport"]["config"])
        fmt = connector.get("format")
        self.format_config = dict(fmt["config"]) if fmt else None

    @property
    def ref(self) -> ConnectorRef:
        return ConnectorRef(self.pipeline, self.table["name"], self.connector["name"])

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Render the configs, then register every secret in them (URL passwords, fields
        named or marked secret) with Airflow's secrets masker, before Airflow stores the
        rendered fields or writes a log line: the UI, the task log and tracebacks show
        ``***`` instead. A partitioned run (no logical date) renders ``{{ ds }}``... from
        its partition's date."""
        from airflow_connectors.airflow.partitions import with_partition_dates

        super().render_template_fields(with_partition_dates(context), jinja_env)
        for secret in self.secrets():
            mask_secret(secret)

    def secrets(self) -> set[str]:
        """The secrets of the connector's configs, as written and as rendered."""
        rendered = {
            "transport": {**self.connector["transport"], "config": self.transport_config},
            "format": {**(self.connector.get("format") or {}), "config": self.format_config},
        }
        return plan_secrets({"connector": self.connector}) | plan_secrets({"connector": rendered})

    @property
    def templated(self) -> bool:
        """Whether the configs as written contain Jinja (each run renders its slice)."""
        written = [self.connector["transport"]["config"], (self.connector.get("format") or {})]
        return "{{" in json.dumps(written) or "{%" in json.dumps(written)

    def batch_context(self, settings: Settings) -> BatchContext:
        """The connector with its configs as rendered for this run, checked again as
        loading the spec checks them, with the same messages and JSON paths."""
        from airflow_connectors.catalog import resolve_connector
        from airflow_connectors.engine.context import BatchContext
        from airflow_connectors.spec import SpecValidationError

        install_resolver()  # transports resolve aws_conn_id through Airflow in this task
        doc = dict(self.connector)
        doc["transport"] = {**doc["transport"], "config": self.transport_config}
        if doc.get("format") and self.format_config is not None:
            doc["format"] = {**doc["format"], "config": self.format_config}
        table = TableSpec.model_validate(self.table)
        try:
            connector = resolve_connector(ConnectorSpec.model_validate(doc), table)
        except SpecValidationError as e:
            raise AirflowFailException(
                f"connector {self.ref}: its config is not valid once templated for this run:\n"
                + "\n".join(str(err) for err in e.errors)
                + "\nFix the template in the pipeline spec."
            ) from None
        return BatchContext(self.pipeline, table, connector, settings.warehouse)


def gate(
    task: BaseOperator,
    pipeline: str,
    endpoint: str,
    start_after: Sequence[str] = (),
    waits_for: Sequence[str] = (),
) -> None:
    """The gate, at the start of a connector's discover task: raises
    ``AirflowSkipException`` (skipping the rest of the run, never blocking) with the reason
    when the pipeline is paused, the connector is stopped (it runs again only after resume,
    even if its DAG is unpaused) or ``start_after`` is not satisfied: every connector
    carrying one of the labels (``waits_for``) must be finished."""
    from airflow_connectors.airflow.dag_switch import AirflowDagSwitch
    from airflow_connectors.engine.control import ConnectorControl
    from airflow_connectors.engine.runner import unfinished

    settings = Settings.load()
    name = f"{pipeline}.{endpoint}"
    table, _, connector = endpoint.partition(".")
    with _state_store(settings) as store:
        # The gate's rule reads the store only (a task cannot reach Airflow's
        # metadata database); the switch is the one the other surfaces use.
        control = ConnectorControl(store, AirflowDagSwitch())
        reason = control.gate_blocker(ConnectorRef(pipeline, table, connector))
        if reason:
            raise AirflowSkipException(reason)
        blocking = unfinished(store, pipeline, list(waits_for))
    if blocking:
        raise AirflowSkipException(
            f"connector {name} waits (start_after {', '.join(start_after)}) for "
            f"{', '.join(blocking)} to finish: end of input with nothing in flight"
        )
    task.log.info(
        "connector %s may run: pipeline running, not stopped, start_after satisfied", name
    )


class ConnectorInvalidOperator(BaseOperator):
    """The one task of a connector whose spec is not valid: fails at once (no retries)
    with the spec's problems, one per line."""

    ui_color = "#fce8e6"

    def __init__(self, *, connector: str, problems: Sequence[str], **kwargs: Any) -> None:
        kwargs.setdefault("retries", 0)
        super().__init__(**kwargs)
        self.connector = connector
        self.problems = list(problems)

    def execute(self, context: Context) -> None:
        """Fails with the problems."""
        message = f"connector {self.connector} is not valid; fix its spec: " + "; ".join(
            self.problems
        )
        self.log.error("%s", message)
        raise AirflowFailException(message)


class ConnectorDiscoverOperator(_ConnectorOperator):
    """The gate (:func:`gate`: skips the run while the pipeline is paused, the connector
    stopped or ``start_after`` unsatisfied), then lists new work after the committed
    offsets under the connector's lease, persists at most ``tasks_max`` batch plans and
    returns their ids (empty: nothing to do). One task rather than a gate task and a
    discover task: a task process less between a trigger's event and the ingest.

    :param start_after: the connector's ``start_after`` labels (for the gate's message).
    :param waits_for: the connectors carrying them (``<table>.<connector>``), which must
        be finished before this one runs.
    """

    ui_color = "#fef7e0"

    def __init__(
        self, *, start_after: Sequence[str] = (), waits_for: Sequence[str] = (), **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.start_after = list(start_after)
        self.waits_for = list(waits_for)
        #: The table and connector as written, as JSON text: stored with the serialized
        #: DAG, where the REST API reads the connector before it ever runs (rendering a
        #: DAG file writes nothing to the state store). Text, because Airflow serializes
        #: extra operator fields but does not read nested dicts back.
        self.spec_json = json.dumps(
            {"table": self.table, "connector": self.connector}, sort_keys=True
        )
        #: The batch this task runs on Spark Connect while it runs (:meth:`_ingest_here`).
        self._connect_batch: SparkConnectBatch | None = None

    @classmethod
    def get_serialized_fields(cls) -> frozenset[str]:
        """Airflow's serialized fields plus ``spec_json``."""
        base: frozenset[str] = super().get_serialized_fields()  # type: ignore[no-untyped-call]
        return frozenset(base | {"spec_json"})

    def execute(self, context: Context) -> list[int]:
        """Returns the planned batch ids (XCom, one ingest task each). Skips when the
        connector is stopped, or when another run holds the lease past the wait (with
        templated configs, fails instead so the task's retries plan its own slice); skips
        first when the gate says the connector may not run now."""
        gate(
            self,
            self.pipeline,
            f"{self.table['name']}.{self.connector['name']}",
            self.start_after,
            self.waits_for,
        )
        with _told_in_one_line(self, self.ref):
            settings = Settings.load()
            ctx = self.batch_context(settings)
            batch_ids = self._discover(ctx, settings, context)
        if len(batch_ids) == 1 and (
            settings.execution_of(self.connector.get("execution")) == "spark_connect"
        ):
            self._ingest_here(settings, batch_ids[0])
        return batch_ids

    def _ingest_here(self, settings: Settings, batch_id: int) -> None:
        """On Spark Connect, runs a single planned batch in this task rather than in an
        ingest task process of its own (which would start, parse the DAG file and connect
        first: a second or two between a new file and its rows). The ingest task still
        runs and finds the batch committed. A batch that does not commit here is left to
        its ingest task, which runs it again and fails or succeeds in its own log."""
        endpoint = f"{self.table['name']}.{self.connector['name']}"
        try:
            prepare_batch(self, settings, self.pipeline, endpoint, batch_id)
            self._connect_batch = SparkConnectBatch(self, self.pipeline, endpoint, batch_id)
            self._connect_batch.run(settings)
        except AirflowSkipException:  # released by a stop in the meantime
            return
        except Exception as e:
            self.log.warning(
                "connector %s.%s: batch %d did not commit in the discover task (%s); its "
                "ingest task runs it",
                self.pipeline,
                endpoint,
                batch_id,
                str(e).splitlines()[0] if str(e) else type(e).__name__,
            )
        finally:
            self._connect_batch = None

    def on_kill(self) -> None:
        """A killed discover task stops the batch it runs on Spark Connect, if any (its
        ingest task re-runs it)."""
        if self._connect_batch is not None:
            self._connect_batch.interrupt()

    def _discover(self, ctx: BatchContext, settings: Settings, context: Context) -> list[int]:
        from airflow_connectors.engine.discovery import LeaseBusy, discover

        with _state_store(settings) as store:
            # Planning takes a moment: a run that finds another one planning the same
            # connector (backfilled days run side by side) waits for its turn.
            deadline = time.monotonic() + LEASE_WAIT_SECONDS
            while True:
                try:
                    found = discover(
                        store,
                        ctx,
                        owner=f"airflow:{context['run_id']}",
                        own_slice_only=self.templated,
                    )
                    break
                except LeaseBusy as e:
                    if time.monotonic() < deadline:
                        time.sleep(1)
                        continue
                    if self.templated:  # its own slice: retried by the task's retries
                        raise AirflowException(f"{e} (waited {LEASE_WAIT_SECONDS} s)") from None
                    raise AirflowSkipException(
                        f"{e}; this run skips, the other one ingests"
                    ) from None
                except ConnectorStopped as e:
                    raise AirflowSkipException(str(e)) from None
        if found.batch_ids:
            self.log.info(
                "connector %s: %d batch(es) to ingest: %s (%d new work item(s))",
                ctx.ref,
                len(found.batch_ids),
                found.batch_ids,
                found.new_items,
            )
        else:
            self.log.info(
                "connector %s: nothing new%s; no Spark job will start",
                ctx.ref,
                " (end of input)" if found.end_of_input else "",
            )
        return found.batch_ids


def prepare_batch(
    task: BaseOperator, settings: Settings, pipeline: str, endpoint: str, batch_id: int
) -> Any:
    """What a task does before it runs batch ``batch_id`` (spark-submitted or on Spark
    Connect): masks the secrets its output could quote, exports the state store URL and
    the connections the plan names to this process's environment, and returns the plan.
    Skips when a stop released the batch; a missing connection fails in one line."""
    # The job finds the batch plan in the state store. Its URL may carry a password,
    # so it reaches spark-submit only through this task process's environment, which
    # the child inherits: never an argument, a --conf, a template field or XCom.
    mask_secret(settings.state_store_url)
    for secret in secret_values(settings.state_store_url):
        mask_secret(secret)
    os.environ["AIRFLOW__CONNECTORS__STATE_STORE_URL"] = settings.state_store_url
    # A warehouse on s3:// is written with the AWS_* variables of this process, which
    # spark-submit inherits (never --conf or arguments); the job hands them to its
    # executors with each Spark job. Their secrets stay out of this task's log.
    for secret in aws_secret_values():
        mask_secret(secret)
    with _state_store(settings) as store:
        try:
            plan = store.load_batch(batch_id).plan
        except KeyError:
            raise AirflowSkipException(
                f"connector {pipeline}.{endpoint}: batch {batch_id} was "
                "released (the connector was stopped after it was planned); nothing to ingest"
            ) from None
    # spark-submit's output (errors of the job) may quote the source's config.
    for secret in plan_secrets(plan.to_json()):
        mask_secret(secret)
    # Connections the transport and the sink name reach the job as AIRFLOW_CONN_<ID>
    # variables of this process's environment, which spark-submit inherits (never its
    # arguments): the sink's part writers run in Spark executors too.
    try:
        for config in (plan.connector.transport.config, plan.table.sink.config):
            export_connections(config, f"{pipeline}.{endpoint}")
    except LookupError as e:
        raise AirflowFailException(str(e)) from None
    return plan


class SparkConnectBatch:
    """One planned batch run in this task process as a client of the Spark Connect
    server (the ingest task's, or the discover task's for a single planned batch): the
    Spark job runs on the server's executors, the commit here. Its jobs carry a tag of
    their own (a shared session runs other tasks' jobs too), what :meth:`interrupt`
    stops."""

    def __init__(self, task: BaseOperator, pipeline: str, endpoint: str, batch_id: int) -> None:
        self.task = task
        self.pipeline = pipeline
        self.endpoint = endpoint
        self.batch_id = batch_id
        #: The session while the batch runs.
        self.session: Any = None
        self.tag = f"airflow-connectors-{pipeline}-{endpoint}-batch-{batch_id}".replace(",", "_")

    def url(self, settings: Settings) -> tuple[str, str]:
        """The server's URL (a secret when it carries a token) and what gave it: the
        ``spark_connect`` connection ``[connectors] spark_connect_conn_id``, else
        ``[connectors] spark_connect_url``; neither fails the task in one line."""
        conn_id = settings.spark_connect_conn_id
        name = f"{self.pipeline}.{self.endpoint}"
        try:
            url = spark_connect_url(conn_id)
        except ValueError as e:  # the provider refuses a host with a path
            raise AirflowFailException(
                f"connector {name}: the Spark Connect connection {conn_id!r} is not valid "
                f"({e}); set its host to sc://HOST and its port (15002 by default)"
            ) from None
        if url is not None:
            return url, f"the Airflow connection {conn_id!r}"
        if settings.spark_connect_url:
            return settings.spark_connect_url, "[connectors] spark_connect_url"
        raise AirflowFailException(
            f"connector {name}: its execution is spark_connect but there is no Airflow "
            f"connection {conn_id!r} and no [connectors] spark_connect_url; create the "
            "connection (type spark_connect, host sc://HOST, port 15002, password = the "
            "server's token if it requires one) or set [connectors] spark_connect_url "
            "(AIRFLOW__CONNECTORS__SPARK_CONNECT_URL) to sc://HOST:15002"
        )

    def run(self, settings: Settings) -> bool:
        """Runs the batch in this process as a client of the Spark Connect server (the
        batch's Spark job runs on the server's executors, the commit here) and returns
        whether this run committed it (False: it was committed already); a failed batch
        raises with its one line, as the spark-submit job's output does."""
        from airflow_connectors.engine.batch import BatchFailed, run_batch
        from airflow_connectors.engine.connect import (
            SparkConnectRefused,
            SparkConnectUnreachable,
            SparkConnectUrlError,
            connect_session,
            forget_session,
            server_address,
            url_token,
        )
        from airflow_connectors.sinks.base import SinkUnwritable

        name = f"{self.pipeline}.{self.endpoint}"
        url, where = self.url(settings)
        try:
            token = url_token(url)
            address = server_address(url)
        except SparkConnectUrlError as e:
            mask_secret(url)  # it may hold a token even so
            raise AirflowFailException(f"connector {name}: {where}: {e}") from None
        if token:  # before any line that could quote it
            mask_secret(url)
            mask_secret(token)
        self.task.log.info(
            "connector %s: batch %d runs on Spark Connect server %s (%s)",
            name,
            self.batch_id,
            address,
            where,
        )

        def spark() -> Any:
            # Connected only when the batch needs Spark (a committed batch does not).
            if self.session is None:
                session = connect_session(url, settings, data_sources=False, where=where)
                # The session may be shared with other tasks (spark_connect_session =
                # shared): this task's jobs carry a tag of their own, what on_kill stops.
                session.addTag(self.tag)
                self.session = session
            return self.session

        table, _, connector = self.endpoint.partition(".")
        ref = ConnectorRef(self.pipeline, table, connector)
        try:
            with _state_store(settings) as store:
                t0 = time.monotonic()
                try:
                    result = run_batch(store, self.batch_id, spark)
                except (SparkConnectUnreachable, SparkConnectRefused) as e:
                    message = f"connector {name}: {e}"
                    store.record_failure(ref, message, batch_id=self.batch_id)
                    self.task.log.error("%s", message)
                    if isinstance(e, SparkConnectRefused):  # retrying cannot help
                        raise AirflowFailException(message) from None
                    raise AirflowException(message) from None
                except (BatchFailed, SinkUnwritable) as e:
                    # The batch stored its failure as the connector's error; its Spark
                    # tasks' traces went to DEBUG, masked.
                    self.task.log.error("ingest failed: %s", e)
                    raise AirflowException(f"ingest failed: {e}") from None
                self.task.log.info(
                    "connector %s: batch %d %s on Spark Connect in %.2f s",
                    name,
                    self.batch_id,
                    "ingested" if result.committed else "needed nothing",
                    time.monotonic() - t0,
                )
                return bool(result.committed)
        finally:
            # This process is done with the server: a session of its own ends with the
            # batch (and the package sent to it); a shared one stays for the next tasks.
            if self.session is not None:
                with contextlib.suppress(Exception):
                    self.session.removeTag(self.tag)
            self.session = None
            forget_session(url)

    def interrupt(self) -> None:
        """Stops the batch's operations on the server (a killed task)."""
        session = self.session
        if session is not None:
            try:
                session.interruptTag(self.tag)
            except Exception:  # the server may be gone; nothing left to stop
                self.task.log.debug("interrupting the Spark Connect session failed", exc_info=True)


class ConnectorIngestOperator(BaseOperator):
    """spark-submit of one planned batch (the package's ingest job, in client mode, through
    the Spark provider's ``SparkSubmitHook``). Idempotent: a committed batch is a no-op, a
    crashed one re-runs its plan.

    Not a ``SparkSubmitOperator`` subclass: importing that module imports the OpenLineage
    listener and Airflow's ORM (about 0.5 s), which every task process of the DAG file
    (and the dag-processor, on each parse) would pay; the hook is imported when a batch
    is submitted.

    ``conn_id`` defaults to ``connectors_spark``; while no such connection exists the job
    runs on ``[connectors] spark_master`` (``local[*]``), never on ``yarn``.

    A connector with ``execution: spark_connect`` (its own, else ``[connectors]
    execution``) is not spark-submitted: the task runs the batch itself as a client of
    the Spark Connect server of the ``spark_connect`` connection ``[connectors]
    spark_connect_conn_id`` (else ``[connectors] spark_connect_url``).
    """

    ui_color = "#fce8e6"
    template_fields: Sequence[str] = ("conf", "env_vars", "name", "application_args")

    def __init__(
        self,
        *,
        batch_id: int,
        pipeline: str,
        endpoint: str,
        conn_id: str = DEFAULT_CONN_ID,
        conf: dict[str, Any] | None = None,
        env_vars: dict[str, Any] | None = None,
        spark_binary: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.application = INGEST_APPLICATION
        self.application_args = ["--batch-id", str(batch_id)]
        self._conn_id = conn_id
        self.name = f"{pipeline}.{endpoint}.batch-{batch_id}"
        self.conf: dict[str, Any] = {
            "spark.ui.enabled": "false",
            "spark.log.level": "WARN",
            **(conf or {}),
        }
        # Driver and Python workers must import airflow_connectors: this interpreter.
        self.env_vars: dict[str, Any] = {
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            **(env_vars or {}),
        }
        self.py_files: str | None = None
        self._spark_binary = spark_binary or spark_submit_binary()
        #: The spark-submit hook while a batch is submitted (what on_kill stops).
        self._hook: Any = None
        self.batch_id = batch_id
        self.pipeline = pipeline
        self.endpoint = endpoint
        #: Whether this run goes through Spark Connect, and the batch run there (what
        #: on_kill interrupts).
        self._on_spark_connect = False
        self._connect_batch: SparkConnectBatch | None = None

    def execute(self, context: Context) -> None:
        """spark-submits the ingest job for ``batch_id`` (the state store URL only in its
        environment); skips when a stop released the batch."""
        try:
            settings = Settings.load()
        except SettingsError as e:
            raise AirflowFailException(str(e)) from None
        plan = prepare_batch(self, settings, self.pipeline, self.endpoint, self.batch_id)
        self.log.info(
            "connector %s.%s: ingesting batch %d", self.pipeline, self.endpoint, self.batch_id
        )
        if settings.execution_of(plan.connector.execution) == "spark_connect":
            self._on_spark_connect = True
            self._connect_batch = SparkConnectBatch(
                self, self.pipeline, self.endpoint, self.batch_id
            )
            self._connect_batch.run(settings)
        else:
            self._spark_submit(context)
        with _state_store(settings) as store:
            batch = store.load_batch(self.batch_id)
            remember_ingest(self, store, batch)
        self.log.info(
            "connector %s.%s: batch %d %s: %s records",
            self.pipeline,
            self.endpoint,
            self.batch_id,
            batch.status,
            batch.records,
        )

    def on_kill(self) -> None:
        """A killed task stops its batch's Spark job: the spark-submit process, or on
        Spark Connect the session's operations on the server."""
        if not self._on_spark_connect:
            if self._hook is not None:
                self._hook.on_kill()
            return
        if self._connect_batch is not None:
            self._connect_batch.interrupt()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the source the batch read, the table it wrote with its schema and
        the batch's rows and source bytes (see :mod:`..lineage`)."""
        from airflow_connectors.airflow.lineage import operator_lineage

        return operator_lineage(self)

    def _get_hook(self) -> Any:
        """The stock hook, configured through Airflow's public surfaces before it is built:
        it decides at construction whether the master is YARN (and then puts the
        environment on the command line), so the master must be known by then."""
        conn_id = self._conn_id
        if connection_exists(conn_id):
            master = connection_master(conn_id)
        elif conn_id != DEFAULT_CONN_ID:
            raise AirflowNotFoundException(
                f"connector {self.pipeline}.{self.endpoint}: Spark connection {conn_id!r} "
                "does not exist; create it (type spark, host = the master URL such as "
                f"spark://host:7077) or drop conn_id to run on local Spark"
            )
        else:
            # The stock hook falls back to `yarn` for a missing connection; ours is the
            # configured local master, provided as an Airflow connection for this task.
            master = Settings.load().spark_master
            define_local_connection(conn_id, master)
            self.log.info(
                "no connection %r: running on %s ([connectors] spark_master)", conn_id, master
            )
        # On a cluster the executors get this package with the job (--py-files) and run
        # [connectors] executor_python; the user's conf and py_files come on top.
        shipping = submit_options(Settings.load(), master, sys.executable)
        if shipping.py_files and shipping.py_files not in (self.py_files or ""):
            self.py_files = ",".join(p for p in (shipping.py_files, self.py_files) if p)
            self.log.info("shipping airflow-connectors to the executors: %s", shipping.py_files)
        self.conf = {**ingest_submit_conf(master, self.conf), **shipping.conf, **(self.conf or {})}
        if master.startswith("local"):
            # Local Spark talks to itself only: bind the driver to loopback.
            self.conf = {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                **(self.conf or {}),
            }
            self.env_vars = {**(self.env_vars or {}), "SPARK_LOCAL_IP": "127.0.0.1"}
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        return SparkSubmitHook(
            conf=self.conf,
            conn_id=conn_id,
            py_files=self.py_files,
            name=self.name,
            application_args=self.application_args,
            env_vars=self.env_vars,
            spark_binary=self._spark_binary,
        )

    def _spark_submit(self, context: Context) -> None:
        """spark-submits the batch's job and waits for it (the hook raises when it fails).
        OpenLineage's parent job and transport reach the job's Spark properties when
        ``[openlineage] spark_inject_parent_job_info`` / ``spark_inject_transport_info``
        say so, as the provider's operator does."""
        from airflow.providers.common.compat.sdk import conf as airflow_conf

        for option, inject in (
            ("spark_inject_parent_job_info", "inject_parent_job_information_into_spark_properties"),
            ("spark_inject_transport_info", "inject_transport_information_into_spark_properties"),
        ):
            if airflow_conf.getboolean("openlineage", option, fallback=False):
                from airflow.providers.common.compat.openlineage.utils import spark as ol_spark

                self.conf = getattr(ol_spark, inject)(dict(self.conf or {}), context)
        self._hook = self._get_hook()
        self._hook.submit(self.application)


class ConnectorFinalizeOperator(_ConnectorOperator):
    """Recomputes end of input once the run's batches are in; logs the metrics."""

    ui_color = "#e6f4ea"

    def execute(self, context: Context) -> dict[str, Any]:
        """Returns ``{"finished": bool, "metrics": {...}}`` (the connector's counters);
        in a partitioned run also ``"slice_finished"``: the run's own slice is ingested."""
        from airflow_connectors.airflow.partitions import slice_finished
        from airflow_connectors.engine.discovery import finalize

        partitioned = context.get("partition_key") is not None
        with _told_in_one_line(self, self.ref):
            settings = Settings.load()
            ctx = self.batch_context(settings)
            with _state_store(settings) as store:
                finished = finalize(store, ctx, own_slice_only=self.templated)
                st = store.status(ctx.ref)
                done = slice_finished(store, ctx) if partitioned else None
        assert st is not None
        metrics = _metrics(st)
        self.log.info(
            "connector %s: %s; %s",
            ctx.ref,
            "finished" if finished else "not finished",
            json.dumps(metrics),
        )
        if partitioned:
            return {"finished": finished, "metrics": metrics, "slice_finished": done}
        return {"finished": finished, "metrics": metrics}


class ConnectorFinishedOperator(BaseOperator):
    """Emits the connector's asset event, with its metrics in ``extra``, once: the first
    time it is finished (end of input and nothing planned-but-uncommitted), as Feldera
    signals end of input once. Later runs that ingest new data and finish again skip it,
    so a connector that ``start_after`` one of its labels (scheduled on this asset) runs
    once per finish; editing or resetting the offsets makes a new finish."""

    ui_color = "#e6f4ea"

    def __init__(self, *, pipeline: str, endpoint: str, asset: Asset, **kwargs: Any) -> None:
        super().__init__(outlets=[asset], **kwargs)
        self.pipeline = pipeline
        self.endpoint = endpoint
        self.asset = asset

    def execute(self, context: Context) -> None:
        """Emits the asset event; skips when the connector is not finished or this finish
        was already signalled. A partitioned run emits its partition's event instead, once
        its own slice is ingested (see :mod:`..partitions`)."""
        table, _, connector = self.endpoint.partition(".")
        ref = ConnectorRef(self.pipeline, table, connector)
        if context.get("partition_key") is not None:
            from airflow_connectors.airflow.partitions import emit_partition_event

            with _state_store(Settings.load()) as store:
                st = store.status(ref)
                emit_partition_event(self, context, _metrics(st) if st else {})
                remember_finished(self, context, store, ref, lambda: upstream_discover(self, ref))
            return
        with _state_store(Settings.load()) as store:
            claimed = store.claim_finished_signal(ref, context["run_id"])
            st = store.status(ref)
        if st is None or not st.finished:
            raise AirflowSkipException(
                f"connector {ref} is not finished (end_of_input="
                f"{st.end_of_input if st else False}, buffered_records="
                f"{st.buffered_records if st else 0}); no asset event"
            )
        if not claimed:
            raise AirflowSkipException(
                f"connector {ref} finished earlier and its asset event was already emitted "
                "(once per finish; resetting its offsets makes a new finish)"
            )
        context["outlet_events"][self.asset].extra.update(_metrics(st))
        self.log.info("connector %s finished: asset event on %s", ref, self.asset.uri)
        with _state_store(Settings.load()) as store:
            remember_finished(self, context, store, ref, lambda: upstream_discover(self, ref))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the source, the table with the rows and source bytes of the
        run's batches, and the connector's asset (see :mod:`..lineage`)."""
        from airflow_connectors.airflow.lineage import operator_lineage

        return operator_lineage(self)


def upstream_discover(task: Any, ref: ConnectorRef) -> Any:
    """The discover task of connector ``ref`` upstream of ``task`` (also inside a task
    group, or beside other connectors in a user's DAG); None when there is none."""
    for up in task.get_flat_relatives(upstream=True):
        if (
            isinstance(up, ConnectorDiscoverOperator)
            and up.pipeline == ref.pipeline
            and up.table.get("name") == ref.table
            and up.connector.get("name") == ref.connector
        ):
            return up
    return None


def _metrics(st: Any) -> dict[str, Any]:
    return {
        "total_records": st.total_records,
        "total_bytes": st.total_bytes,
        "buffered_records": st.buffered_records,
        "num_parse_errors": st.num_parse_errors,
        "num_transport_errors": st.num_transport_errors,
        "end_of_input": st.end_of_input,
        "lag": st.lag,
    }


def plan_secrets(plan: dict[str, Any]) -> set[str]:
    """Every secret in a batch plan's connector and sink configs (see :mod:`..spec.redact`),
    sealed ones opened (:mod:`..spec.sealed`): the values a library error could quote."""
    from airflow_connectors.formats import FORMATS
    from airflow_connectors.sinks import SINKS
    from airflow_connectors.spec.sealed import unseal
    from airflow_connectors.transports import TRANSPORTS

    plan = unseal(plan)

    connector = plan.get("connector") or {}
    found = secret_values(connector)
    sink = (plan.get("table") or {}).get("sink") or {}
    found |= secret_values(sink)
    if str(sink.get("name")) in SINKS:
        found |= secret_values(sink.get("config"), secret_fields(SINKS.get(sink["name"]).Config))
    transport, fmt = connector.get("transport") or {}, connector.get("format") or {}
    if str(transport.get("name")) in TRANSPORTS:
        found |= secret_values(
            transport.get("config"), secret_fields(TRANSPORTS.get(transport["name"]).Config)
        )
    if str(fmt.get("name")) in FORMATS:
        found |= secret_values(fmt.get("config"), secret_fields(FORMATS.get(fmt["name"]).Config))
    return found
