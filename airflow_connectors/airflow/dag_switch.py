"""The connector's paused flag under Airflow: its DAG's ``is_paused`` in Airflow's
metadata database, read and written in-process through ``DagModel`` (engine.control's
``DagSwitch``). The REST API, the gate task and the CLI's ``--local`` actions (when
``$AIRFLOW_HOME`` holds an Airflow) give it to ``ConnectorControl``.

An Airflow task has no access to the metadata database: the gate's rule does not read
the switch (a running gate means the scheduler let the run start)."""

from __future__ import annotations

from collections.abc import Sequence

from airflow_connectors.engine.control import DagNotFound
from airflow_connectors.state.store import ConnectorRef


def dag_id_of(ref: ConnectorRef) -> str:
    """The connector's DAG id, as ``render`` names it: ``<pipeline>.<table>.<connector>``."""
    return f"{ref.pipeline}.{ref.table}.{ref.connector}"


class AirflowDagSwitch:
    """The DAG's paused flag is the connector's."""

    def paused(self, ref: ConnectorRef) -> bool | None:
        """The DAG's ``is_paused``; None while Airflow has not parsed the DAG."""
        return self.paused_many([ref]).get(ref)

    def paused_many(self, refs: Sequence[ConnectorRef]) -> dict[ConnectorRef, bool]:
        """One query of ``DagModel`` for all of ``refs``; DAGs not parsed yet are left out."""
        if not refs:
            return {}
        from airflow.models.dag import DagModel
        from airflow.utils.session import create_session

        ids = {dag_id_of(r): r for r in refs}
        with create_session() as session:
            rows = (
                session.query(DagModel.dag_id, DagModel.is_paused)
                .filter(DagModel.dag_id.in_(list(ids)))
                .all()
            )
        return {ids[dag_id]: bool(paused) for dag_id, paused in rows}

    def set_paused(self, ref: ConnectorRef, paused: bool) -> None:
        """Sets the DAG's ``is_paused``; :class:`DagNotFound` while the DAG is not parsed."""
        from airflow.models.dag import DagModel
        from airflow.utils.session import create_session

        with create_session() as session:
            dag = session.get(DagModel, dag_id_of(ref))
            if dag is not None:
                dag.is_paused = paused
        if dag is None:
            raise DagNotFound(
                f"connector {ref} has no DAG {dag_id_of(ref)} in Airflow yet; "
                "wait for its DAG file to be parsed"
            )
