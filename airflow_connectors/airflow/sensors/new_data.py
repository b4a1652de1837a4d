"""``ConnectorNewDataSensor``: wait, inside your own DAG, until a connector's source has
data its discovery would pick up. Deferrable by default: the wait runs in the triggerer
and holds no worker slot."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator

from airflow_connectors.airflow.render import caller_dir
from airflow_connectors.airflow.triggers.new_data import ConnectorDataAvailableTrigger, probe
from airflow_connectors.catalog import load_pipeline
from airflow_connectors.spec import PipelineSpec

if TYPE_CHECKING:
    from airflow.sdk import Context


class ConnectorNewDataSensor(BaseSensorOperator):
    """Succeeds once ``connector`` (``table.connector`` of the pipeline ``spec``, a spec
    file or a parsed :class:`PipelineSpec`) has new data to ingest."""

    def __init__(
        self,
        *,
        spec: str | Path | PipelineSpec,
        connector: str,
        poll_interval: float = 30.0,
        deferrable: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poll_interval, **kwargs)
        if not isinstance(spec, PipelineSpec):
            path = Path(spec)
            spec = load_pipeline(path if path.is_absolute() else caller_dir() / path)
        table, conn = spec.find(connector)
        self.pipeline = spec.name
        from airflow_connectors.catalog import sealed_connector, sealed_table

        # Secrets sealed: these attributes are stored in Airflow's serialized DAG.
        self.table = sealed_table(table.model_dump(mode="json"))
        self.connector = sealed_connector(conn.model_dump(mode="json"))
        self.endpoint = connector
        self.poll_interval = poll_interval
        self.deferrable = deferrable

    def poke(self, context: Context) -> bool:
        """Whether the connector's discovery would find something now (nothing is planned)."""
        found = probe(self.pipeline, self.table, self.connector, record=False) is not None
        self.log.info(
            "connector %s.%s: %s",
            self.pipeline,
            self.endpoint,
            "new data" if found else "nothing new",
        )
        return found

    def execute(self, context: Context) -> Any:
        """Deferrable (the default): one poke here, then the wait moves to the triggerer."""
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        self.defer(
            trigger=ConnectorDataAvailableTrigger(
                pipeline=self.pipeline,
                table=self.table,
                connector=self.connector,
                poll_interval=self.poll_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> None:
        """Resumes after the trigger fired: logs what it found; the sensor succeeds."""
        self.log.info("connector %s.%s has new data: %s", self.pipeline, self.endpoint, event)
