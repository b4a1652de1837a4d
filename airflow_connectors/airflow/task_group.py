"""A connector inside a user's own DAG: its tasks as an Airflow task group::

    from airflow_connectors.airflow import ConnectorTaskGroup

    with DAG("shop_daily", schedule="@daily", max_active_runs=1, ...):
        ingest = ConnectorTaskGroup(spec="shop.yaml", connector="orders.live")
        ingest >> my_transform

The group holds the connector DAG's tasks (``discover >> ingest[batch...] >> finalize >>
finished``, built by the same :func:`.render.connector_tasks`) and a last
task ``done``, prefixed by the group id (``orders__live.discover``). What the connector
DAG guaranteed and the host DAG must now give:

- **One run at a time.** A connector's runs plan after the last commit, and a second run
  would pick up the batches the first one is still ingesting: the host DAG must have
  ``max_active_runs=1`` (checked here), and a connector runs in one place only (its own
  DAG or one task group, never both: nothing can check that across DAG files).
- **When it runs** is the host DAG's schedule: a connector with a ``trigger`` or a
  ``freshness`` (both rendered on a connector's own DAG) is refused, naming the field.
- **Pausing**: the host DAG's pause flag belongs to the user; the connector is paused
  with its pipeline (``airflow-connectors pipeline P pause``) or stopped (``connector P
  T C stop``) in the state store, which its gate (the start of ``discover``) reads. The REST API lists connector
  DAGs; a task-group connector shows in the state store's listings (``pipeline P
  status``, ``connector P T C stats``) once it has run.
- ``finished`` emits the connector's asset ``connector://<pipeline>/<table>/<connector>``
  as in its own DAG.
- ``done`` succeeds once the connector's run did its work (``finalize`` succeeded,
  whether or not the connector finished), so ``group >> my_transform`` runs the
  transform after every ingesting run; it is skipped, and with it a downstream task with
  the default trigger rule, when the gate (``discover``) skipped the run (pipeline paused, connector
  stopped, ``start_after`` not yet satisfied).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import TaskGroup

from airflow_connectors.airflow.hooks.spark import DEFAULT_CONN_ID
from airflow_connectors.airflow.render import connector_tasks, pipeline_spec

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airflow_connectors.spec import PipelineSpec
    from airflow_connectors.spec.builder import Pipeline, TableBuilder
    from airflow_connectors.spec.models import ConnectorSpec, TableSpec

__all__ = ["ConnectorTaskGroup"]


class ConnectorTaskGroup(TaskGroup):
    """One connector of a pipeline as a task group of the DAG being defined.

    :param spec: the pipeline: a ``PipelineSpec``, the path of a ``.yaml``/``.json``/
        ``.sql`` spec (a relative one is taken from the DAG file's folder) or a
        pipeline built with ``airflow_connectors.Pipeline``.
    :param connector: ``<table>.<connector>``; may be left out when the pipeline has
        one connector.
    :param group_id: the group's id, the prefix of its task ids (default
        ``<table>__<connector>``).
    :param pipeline: the pipeline name of a ``.sql`` spec (default: the file's stem).
    :param conn_id: Spark connection of the ingest tasks (as ``ConnectorPipeline``'s).
    :param spark_conf: extra ``--conf`` of every spark-submit.
    :param kwargs: further ``TaskGroup`` arguments (``dag``, ``default_args``,
        ``tooltip``...).

    The tasks are attributes too (``discover``, ``ingest``, ``finalize``, ``finished``,
    ``done``; ``gate`` is ``discover``, whose start is the gate), to depend on one of
    them rather than on the group.
    """

    def __init__(
        self,
        *,
        spec: PipelineSpec | str | Path | Pipeline | TableBuilder,
        connector: str | None = None,
        group_id: str | None = None,
        pipeline: str | None = None,
        conn_id: str = DEFAULT_CONN_ID,
        spark_conf: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        parsed = pipeline_spec(spec, pipeline=pipeline)
        table, chosen = _pick(parsed, connector)
        name = f"{parsed.name}.{table.name}.{chosen.name}"
        _refuse_own_dag_fields(name, chosen)
        super().__init__(
            group_id=group_id or f"{table.name}__{chosen.name}",
            tooltip=kwargs.pop("tooltip", f"connector {name}"),
            doc_md=kwargs.pop("doc_md", _doc(parsed, table, chosen)),
            **kwargs,
        )
        runs = self.dag.max_active_runs
        if runs != 1:
            raise ValueError(
                f"connector {name}: DAG {self.dag.dag_id} has max_active_runs={runs}, but a "
                "connector's runs go one at a time (each plans after the last commit, and a "
                "second run would take up the batches the first is ingesting); set "
                f"max_active_runs=1 on DAG {self.dag.dag_id}"
            )
        retries = {**self.dag.default_args, **self.default_args}.get("retries", 0)
        with self:
            tasks = connector_tasks(
                parsed,
                table,
                chosen,
                conn_id=conn_id,
                spark_conf=spark_conf,
                retries=retries,
            )
            done = EmptyOperator(task_id="done", trigger_rule="none_failed_min_one_success")
            done.set_upstream([tasks.finalize, tasks.finished])
        self.spec = parsed
        self.connector_name = name
        self.gate = tasks.gate
        self.discover = tasks.discover
        self.ingest = tasks.ingest
        self.finalize = tasks.finalize
        self.finished = tasks.finished
        self.done = done


def _pick(spec: PipelineSpec, connector: str | None) -> tuple[TableSpec, ConnectorSpec]:
    """The table and connector named ``<table>.<connector>`` (or the only one)."""
    found = list(spec.connectors())
    names = ", ".join(f"{t.name}.{c.name}" for t, c in found) or "(none)"
    if connector is None:
        if len(found) == 1:
            return found[0]
        raise ValueError(
            f"pipeline {spec.name} has {len(found)} connectors ({names}); name one with "
            "connector='<table>.<connector>'"
        )
    for table, candidate in found:
        if f"{table.name}.{candidate.name}" == connector:
            return table, candidate
    raise ValueError(
        f"pipeline {spec.name} has no connector {connector!r}; its connectors: {names} "
        "(connector='<table>.<connector>')"
    )


def _doc(spec: PipelineSpec, table: TableSpec, connector: ConnectorSpec) -> str:
    """The group's Markdown in the UI: what it is, how to pause it, its config (secrets
    masked)."""
    import json

    from airflow_connectors.spec.redact import mask_config

    config = mask_config(connector.model_dump(mode="json", exclude_defaults=True))
    p, t, c = spec.name, table.name, connector.name
    return "\n".join(
        [
            f"### Connector `{c}` of table `{t}` (pipeline `{p}`)",
            "",
            "Pausing this DAG pauses all of it. To pause the connector alone: "
            f"`airflow-connectors pipeline {p} pause --local` (its pipeline) or "
            f"`airflow-connectors connector {p} {t} {c} stop --local`; its `discover` skips "
            "the run (the gate), and `done` with it, meanwhile.",
            "",
            "```json",
            json.dumps(config, indent=2),
            "```",
        ]
    )


def _refuse_own_dag_fields(name: str, connector: ConnectorSpec) -> None:
    """A field a connector's own DAG renders cannot apply inside the user's DAG: say so
    rather than drop it. Freshness first: it needs a schedule, which is the trigger."""
    if connector.freshness is not None:
        raise ValueError(
            f"connector {name}: freshness becomes a deadline alert of the connector's own "
            "DAG; inside your DAG give the DAG a deadline (DAG(deadline=...)) and remove "
            "freshness from the connector, or render it with ConnectorPipeline"
        )
    if connector.trigger is not None:
        raise ValueError(
            f"connector {name}: its trigger ({connector.trigger.model_dump(exclude_defaults=True)}) "
            "schedules the connector's own DAG; inside your DAG its schedule runs the "
            "connector: remove trigger from the connector, or render it with ConnectorPipeline"
        )
