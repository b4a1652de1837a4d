"""Render a parsed pipeline into one Airflow DAG per connector (parse, then render).

A DAG file::

    from airflow_connectors.airflow import ConnectorPipeline

    ConnectorPipeline.from_file("../pipelines/shop.yaml").dags()

Each connector becomes the DAG ``<pipeline>.<table>.<connector>``::

    discover >> ingest[batch...] >> finalize >> finished

(``discover`` starts with the gate: it skips the run while the connector may not run.)

Rendering reads the spec file and nothing else: no Spark, no state store, no network.
The REST API finds the connectors in Airflow's own records of the DAGs (their tags and
the serialized ``discover`` task, see :mod:`.api.connect`).
"""

from __future__ import annotations

import datetime as dt
import gc
import inspect
import json
import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic_core
from airflow.sdk import (
    DAG,
    Asset,
    AssetAll,
    AssetAny,
    AssetOrTimeSchedule,
    AssetWatcher,
)

from airflow_connectors.airflow.hooks.spark import DEFAULT_CONN_ID
from airflow_connectors.airflow.timetables import ConnectorCronTimetable
from airflow_connectors.catalog import (
    load_pipeline,
    load_pipeline_keeping_valid,
    sealed_connector,
    sealed_table,
)
from airflow_connectors.spec import PipelineSpec
from airflow_connectors.spec.models import CRON_PRESETS, ConnectorSpec, TableSpec
from airflow_connectors.spec.redact import mask_config

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    from airflow_connectors.spec.builder import Pipeline, TableBuilder

log = logging.getLogger(__name__)

#: The first logical date of connector DAGs (schedules and backfills) unless the
#: connector's ``trigger.start_date`` or ``ConnectorPipeline(start_date=...)`` says else.
DEFAULT_START_DATE = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)


def connector_asset(pipeline: str, table: str, connector: str) -> Asset:
    """The asset a connector emits an event on each time it finishes."""
    return Asset(
        name=f"{pipeline}.{table}.{connector}", uri=f"connector://{pipeline}/{table}/{connector}"
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a pipeline's DAGs are built, back on
    after (when it was on). A DAG and its tasks are a few thousand container objects, so
    rendering 2,000 connectors triggers collections that traverse an ever larger heap of
    objects that all stay alive: a quarter of the parse time, for nothing to collect."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def caller_dir() -> Path:
    """The folder of the first caller outside this package and Airflow (the DAG file)."""
    import airflow

    skip = [Path(__file__).resolve().parent, *(Path(p).resolve() for p in airflow.__path__)]
    # The frames themselves, not inspect.stack(), which reads every frame's source lines
    # (a tenth of a second of each DAG file parse).
    frame = inspect.currentframe()
    frame = frame.f_back if frame is not None else None
    while frame is not None:
        path = Path(frame.f_code.co_filename).resolve()
        if path.is_file() and not any(d == path.parent or d in path.parents for d in skip):
            return path.parent
        frame = frame.f_back
    return Path.cwd()


def pipeline_spec(
    spec: PipelineSpec | str | Path | Pipeline | TableBuilder, *, pipeline: str | None = None
) -> PipelineSpec:
    """The parsed pipeline of ``spec``: a spec file's path (a relative one is taken from
    the folder of the calling DAG file) or a built pipeline (validated against the
    installed plugins, its relative paths taken from its ``base_dir``, else from that
    folder) or a parsed one as is."""
    from airflow_connectors.catalog import PLUGINS
    from airflow_connectors.spec.builder import Pipeline, TableBuilder

    if isinstance(spec, PipelineSpec):
        return spec
    if isinstance(spec, Pipeline | TableBuilder):
        built = spec.pipeline
        return built.build(PLUGINS, base_dir=built.base_dir or caller_dir())
    if isinstance(spec, str | Path):
        path = Path(spec)
        return load_pipeline(path if path.is_absolute() else caller_dir() / path, pipeline=pipeline)
    raise TypeError(
        f"spec must be a PipelineSpec, the path of a spec file or a Pipeline built with "
        f"airflow_connectors.Pipeline, got {type(spec).__name__}"
    )


@dataclass(frozen=True)
class ConnectorTasks:
    """The tasks of one connector (see :func:`connector_tasks`)."""

    #: The gate, then discovery: skips the run while the connector may not run.
    discover: BaseOperator
    #: Mapped over the batch ids ``discover`` returns (one task instance per batch).
    ingest: MappedOperator
    finalize: BaseOperator
    finished: BaseOperator

    @property
    def gate(self) -> BaseOperator:
        """The task that gates the run: ``discover`` (the gate's checks start it)."""
        return self.discover


def connector_tasks(
    spec: PipelineSpec,
    table: TableSpec,
    connector: ConnectorSpec,
    *,
    conn_id: str = DEFAULT_CONN_ID,
    spark_conf: Mapping[str, str] | None = None,
    retries: int = 0,
) -> ConnectorTasks:
    """``discover >> ingest[batch...] >> finalize >> finished`` of one connector,
    created in the DAG or task group being defined (``with DAG(...)``/``with
    TaskGroup(...)``): a connector DAG's tasks and a :class:`.ConnectorTaskGroup`'s.
    ``retries``: the tasks' retries (discover takes at least 3).

    The gate's checks (pipeline paused, connector stopped, ``start_after``) run at the
    start of ``discover``, which skips the run as a gate task would: one task process
    less between a trigger's event and the ingest."""
    from airflow_connectors.airflow.operators.connector import (
        ConnectorDiscoverOperator,
        ConnectorFinalizeOperator,
        ConnectorFinishedOperator,
        ConnectorIngestOperator,
    )
    from airflow_connectors.spec.graph import label_carriers

    p = spec.name
    endpoint = f"{table.name}.{connector.name}"
    common: dict[str, Any] = {
        "pipeline": p,
        # Secrets sealed: these arguments are stored in Airflow's serialized DAG.
        "table": sealed_table(table.model_dump(mode="json", exclude={"connectors"})),
        "connector": sealed_connector(connector.model_dump(mode="json")),
    }
    discover = ConnectorDiscoverOperator(
        task_id="discover",
        # Also a run that starts while the API server is still starting (a cron tick
        # during the quickstart's restart), which cannot reach the execution API at first.
        retries=max(retries, 3),
        retry_delay=dt.timedelta(seconds=20),
        start_after=connector.start_after or (),
        waits_for=label_carriers(spec, connector.start_after or ()),
        **common,
    )
    ingest = ConnectorIngestOperator.partial(
        task_id="ingest",
        pipeline=p,
        endpoint=endpoint,
        conn_id=conn_id,
        conf=dict(spark_conf or {}),
        map_index_template="batch {{ task.batch_id }}",
        max_active_tis_per_dagrun=connector.tasks_max,
    ).expand(batch_id=discover.output)
    finalize = ConnectorFinalizeOperator(
        task_id="finalize", trigger_rule="none_failed_min_one_success", **common
    )
    finished = ConnectorFinishedOperator(
        task_id="finished",
        pipeline=p,
        endpoint=endpoint,
        asset=connector_asset(p, table.name, connector.name),
    )
    discover >> ingest >> finalize >> finished
    discover >> finalize  # finalize runs when discover found nothing (no ingest)
    return ConnectorTasks(discover, ingest, finalize, finished)


class ConnectorPipeline:
    """A pipeline spec rendered as connector DAGs.

    :param spec: the parsed pipeline, or one built with ``airflow_connectors.Pipeline``
        (see :func:`pipeline_spec`).
    :param conn_id: Spark connection of the ingest tasks (default ``connectors_spark``;
        when it does not exist, ``[connectors] spark_master``, i.e. ``local[*]``).
    :param spark_conf: extra ``--conf`` of every spark-submit.
    :param default_args: Airflow ``default_args`` of every task.
    :param start_date: first logical date of every connector DAG.
    :param dag_kwargs: further ``DAG(...)`` arguments (``max_active_runs``...).
    """

    def __init__(
        self,
        spec: PipelineSpec | Pipeline | TableBuilder,
        *,
        conn_id: str = DEFAULT_CONN_ID,
        spark_conf: Mapping[str, str] | None = None,
        default_args: Mapping[str, Any] | None = None,
        start_date: dt.datetime | None = None,
        dag_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.spec = pipeline_spec(spec)
        self.conn_id = conn_id
        self.spark_conf = dict(spark_conf or {})
        self.default_args = dict(default_args or {})
        self.start_date = start_date
        self.dag_kwargs = dict(dag_kwargs or {})
        self._dags: dict[str, DAG] | None = None
        #: Built once per pipeline rather than per DAG (see :meth:`_dag_defaults`,
        #: :meth:`_cron`): thousands of connectors share a handful of schedules.
        self._defaults: dict[str, Any] | None = None
        self._timetables: dict[tuple[type[Any], str], Any] = {}
        #: ``(table, connector) -> problem lines`` of connectors left out of a spec file
        #: because they are not valid (see :meth:`from_file`).
        self.invalid: dict[tuple[str, str], list[str]] = {}

    @classmethod
    def from_file(
        cls, path: str | Path, *, pipeline: str | None = None, **kwargs: Any
    ) -> ConnectorPipeline:
        """Load a ``.yaml``/``.json``/``.sql`` spec; a relative path is taken from the
        folder of the calling DAG file."""
        p = Path(path)
        if not p.is_absolute():
            p = caller_dir() / p
        # One invalid connector (a start_after typo) must not take its pipeline's valid
        # connectors down: they keep their DAGs, it gets one that fails with its problems.
        with _collector_paused():
            spec, invalid = load_pipeline_keeping_valid(p, pipeline=pipeline)
        rendered = cls(spec, **kwargs)
        rendered.invalid = invalid
        for (table, connector), lines in invalid.items():
            log.error(
                "pipeline %s: connector %s.%s is not valid and does not run until fixed: %s",
                spec.name,
                table,
                connector,
                "; ".join(lines),
            )
        return rendered

    def dags(self) -> dict[str, DAG]:
        """``dag_id -> DAG``, one per connector; built once."""
        if self._dags is None:
            t0 = time.perf_counter()
            dags: dict[str, DAG] = {}
            with _collector_paused():
                for table, connector in self.spec.connectors():
                    dag = self._render(table, connector)
                    dags[dag.dag_id] = dag
                for (table_name, connector_name), lines in self.invalid.items():
                    dag = self._render_invalid(table_name, connector_name, lines)
                    dags[dag.dag_id] = dag
            self._dags = dags
            log.info(
                "pipeline %s: rendered %d connector DAG(s) in %.0f ms",
                self.spec.name,
                len(self._dags),
                (time.perf_counter() - t0) * 1000,
            )
        return self._dags

    # --- one connector --------------------------------------------------------------

    def _render_invalid(self, table: str, connector: str, lines: list[str]) -> DAG:
        """The DAG of a connector whose spec is not valid: no schedule, one task that
        fails at once with the problems (so a run, the UI and the REST API say why)."""
        from airflow_connectors.airflow.operators.connector import ConnectorInvalidOperator

        p = self.spec.name
        problems = "\n".join(f"- {line}" for line in lines)
        with DAG(
            dag_id=f"{p}.{table}.{connector}",
            schedule=None,
            start_date=self.start_date or DEFAULT_START_DATE,
            catchup=False,
            tags=[f"pipeline:{p}", f"table:{table}", "invalid"],
            doc_md=f"**Connector `{p}.{table}.{connector}` is not valid** and does not run "
            f"until its spec is fixed:\n\n{problems}\n",
        ) as dag:
            ConnectorInvalidOperator(
                task_id="gate", connector=f"{p}.{table}.{connector}", problems=lines
            )
        return dag

    def _render(self, table: TableSpec, connector: ConnectorSpec) -> DAG:
        p = self.spec.name
        endpoint = f"{table.name}.{connector.name}"
        waits_for = self._carriers(connector)
        trigger = connector.trigger
        start = (
            dt.datetime.combine(trigger.start_date, dt.time(), tzinfo=dt.UTC)
            if trigger and trigger.start_date
            else self.start_date or DEFAULT_START_DATE
        )
        dag_args: dict[str, Any] = {
            "dag_id": f"{p}.{endpoint}",
            "schedule": self._schedule(table, connector, waits_for),
            "start_date": start,
            "catchup": False,
            # Runs of one connector go one at a time: each plans after the last committed.
            "max_active_runs": 1,
            "is_paused_upon_creation": connector.paused,
            "tags": [f"pipeline:{p}", f"table:{table.name}"]
            + [f"label:{label}" for label in connector.labels],
            "doc_md": self._doc(table, connector, waits_for),
            "default_args": self.default_args,
            **self._dag_defaults(),
            **self.dag_kwargs,
        }
        if connector.freshness is not None:
            from airflow_connectors.airflow.freshness import with_freshness

            dag_args["deadline"] = with_freshness(
                dag_args.get("deadline"), p, table.name, connector.name, connector.freshness
            )
        with DAG(**dag_args) as dag:
            connector_tasks(
                self.spec,
                table,
                connector,
                conn_id=self.conn_id,
                spark_conf=self.spark_conf,
                retries=self.default_args.get("retries", 0),
            )
        return dag

    def _dag_defaults(self) -> dict[str, Any]:
        """The ``DAG(...)`` arguments whose defaults Airflow reads from its configuration
        for each DAG (three configuration lookups a DAG, a fifth of a DAG's rendering
        time): read once per pipeline, same values."""
        if self._defaults is None:
            from airflow.sdk.configuration import conf

            self._defaults = {
                "max_active_tasks": conf.getint("core", "max_active_tasks_per_dag"),
                "max_consecutive_failed_dag_runs": conf.getint(
                    "core", "max_consecutive_failed_dag_runs_per_dag"
                ),
                "disable_bundle_versioning": conf.getboolean(
                    "dag_processor", "disable_bundle_versioning"
                ),
            }
        return self._defaults

    def _cron(self, timetable: type[Any], schedule: str) -> Any:
        """The ``timetable`` of cron ``schedule`` (a preset or an expression), one per
        schedule for the whole pipeline: building one parses and describes the cron
        expression (a millisecond), and timetables hold no state of their own."""
        key = (timetable, schedule)
        if key not in self._timetables:
            self._timetables[key] = timetable(CRON_PRESETS.get(schedule, schedule), timezone="UTC")
        return self._timetables[key]

    def _carriers(self, connector: ConnectorSpec) -> list[tuple[str, str]]:
        from airflow_connectors.spec.graph import label_carriers

        carriers = label_carriers(self.spec, connector.start_after or ())
        return [(e.partition(".")[0], e.partition(".")[2]) for e in carriers]

    def _schedule(
        self, table: TableSpec, connector: ConnectorSpec, waits_for: list[tuple[str, str]]
    ) -> Any:
        p = self.spec.name
        trigger = connector.trigger
        if trigger and trigger.partitioned and trigger.schedule:
            from airflow_connectors.airflow.timetables import ConnectorPartitionTimetable

            # One Airflow partition per tick. Airflow runs a partitioned DAG on its
            # timetable only: start_after is enforced by the gate of each run.
            return self._cron(ConnectorPartitionTimetable, trigger.schedule)
        condition: Any = None
        if waits_for:
            condition = AssetAll(*(connector_asset(p, t, c) for t, c in waits_for))
        if trigger and trigger.on == "new_data":
            if "{{" in json.dumps(connector.transport.config):
                raise ValueError(
                    f"connector {p}.{table.name}.{connector.name}: trigger on: new_data needs a "
                    "transport config without templates ({{ ... }}): the trigger polls outside "
                    "any DAG run; use a schedule for templated (date-sliced) configs"
                )
            from airflow_connectors.airflow.triggers.new_data import ConnectorNewDataTrigger

            watched = Asset(
                name=f"{p}.{table.name}.{connector.name}.new_data",
                uri=f"connector-new-data://{p}/{table.name}/{connector.name}",
                watchers=[
                    AssetWatcher(
                        name=f"{p}.{table.name}.{connector.name}.new_data",
                        trigger=ConnectorNewDataTrigger(
                            pipeline=p,
                            table=sealed_table(
                                table.model_dump(mode="json", exclude={"connectors"})
                            ),
                            connector=sealed_connector(connector.model_dump(mode="json")),
                            poll_interval=trigger.poll_seconds,
                        ),
                    )
                ],
            )
            condition = watched if condition is None else AssetAny(condition, watched)
        cron = (
            self._cron(ConnectorCronTimetable, trigger.schedule)
            if trigger and trigger.schedule
            else None
        )
        if cron is not None and condition is not None:
            # Airflow serializes a registered core timetable inside it too.
            return AssetOrTimeSchedule(timetable=cron, assets=condition)
        return cron if cron is not None else condition

    def _doc(
        self, table: TableSpec, connector: ConnectorSpec, waits_for: list[tuple[str, str]]
    ) -> str:
        config = mask_config(connector.model_dump(mode="json", exclude_defaults=True))
        lines = [
            f"### Connector `{connector.name}` of table `{table.name}` (pipeline `{self.spec.name}`)",
            "",
            f"Columns: {', '.join(str(c) for c in table.columns)}."
            if table.columns
            else "Columns: inferred from the data on the first discovery (`airflow-connectors "
            f"schema {self.spec.name} {table.name}` shows them and their versions).",
            "",
            "Pause this DAG to pause the connector. Tasks: `discover` (skips while the "
            "pipeline is paused, the connector stopped or start_after not satisfied, else "
            f"plans at most {connector.tasks_max} batch(es)), `ingest` (one per batch), "
            "`finalize`, `finished` (asset event once the connector finishes).",
        ]
        if waits_for:
            lines += ["", "Starts after: " + ", ".join(f"`{t}.{c}`" for t, c in waits_for) + "."]
        # pydantic-core's encoder: json.dumps with an indent runs in pure Python, about
        # 3% of a 2,000-connector DAG file's parse.
        lines += ["", "```json", pydantic_core.to_json(config, indent=2).decode(), "```"]
        if self.spec.source:
            lines += ["", f"Spec: `{self.spec.source}`"]
        return "\n".join(lines)


def render_dags(spec: PipelineSpec, **kwargs: Any) -> dict[str, DAG]:
    """One DAG per connector of ``spec`` (see :class:`ConnectorPipeline`)."""
    return ConnectorPipeline(spec, **kwargs).dags()
