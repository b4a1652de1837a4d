"""The scale-out deployment for the cluster tests, started once per session
(:class:`airflow_connectors.testing.cluster.Cluster`: Spark standalone with two workers,
Airflow with the CeleryExecutor and two Celery workers, the state store in PostgreSQL,
the warehouse and the sources on the S3 test server).

``cluster`` is the running :class:`Cluster`; ``deployment`` wraps it with what the test
modules share: adding a pipeline (its spec and a DAG file rendering it), the source
bucket, reading a table and the state store. Every module adds pipelines of its own
(names must differ) and keeps its objects under a prefix of its own in
:data:`SOURCE_BUCKET`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

#: The bucket on the cluster's S3 server that the modules' sources live in (the warehouse
#: has a bucket of its own).
SOURCE_BUCKET = "cluster-sources"
#: Spark standalone workers (one core each) and Celery workers (concurrency 2 each).
SPARK_WORKERS = 2
CELERY_WORKERS = 2

#: The DAG file of a pipeline: ingest tasks are retried (the fault tests kill them).
DAG_FILE = """\
import datetime as dt

from airflow_connectors.airflow import ConnectorPipeline

ConnectorPipeline.from_file(
    {spec!r},
    default_args={{"retries": 2, "retry_delay": dt.timedelta(seconds=5)}},
    spark_conf={spark_conf!r},
).dags()
"""


def lines(ids: Iterable[int]) -> str:
    """JSON lines ``{"id": i, "name": "n<i>"}`` for ``ids``."""
    return "".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in ids)


class Deployment:
    """The running cluster and the helpers the cluster test modules share."""

    def __init__(self, cluster: Any, dags: Path) -> None:
        self.cluster = cluster
        self.api = cluster.api
        self.dags = dags
        self.bucket = cluster.s3.create_bucket(SOURCE_BUCKET)
        self._store: Any = None

    # --- pipelines ----------------------------------------------------------------

    def add(
        self,
        name: str,
        tables: dict[str, Any],
        *,
        spark_conf: dict[str, str] | None = None,
        timeout: float = 180,
    ) -> list[str]:
        """Write pipeline ``name`` (``tables`` as in a spec) and a DAG file rendering it
        into the DAGs folder; return its DAG ids once Airflow parsed all of them."""
        spec = self.dags / f"{name}.yaml"
        spec.write_text(yaml.safe_dump({"pipeline": name, "tables": tables}))
        (self.dags / f"{name}_dags.py").write_text(
            DAG_FILE.format(spec=spec.name, spark_conf=dict(spark_conf or {}))
        )
        dag_ids = [
            f"{name}.{table}.{c['name']}" for table, t in tables.items() for c in t["connectors"]
        ]
        self.api.wait_for_dags(dag_ids, timeout=timeout)
        return dag_ids

    def s3_input(self, prefix: str, **extra: Any) -> dict[str, Any]:
        """An ``s3_input`` transport over ``prefix`` of the source bucket."""
        return {
            "name": "s3_input",
            "config": self.cluster.s3.config(self.bucket, prefix=prefix, **extra),
        }

    def put(self, key: str, body: str) -> None:
        """Write one object of the source bucket."""
        self.cluster.s3.client().put_object(Bucket=self.bucket, Key=key, Body=body.encode())

    # --- results --------------------------------------------------------------------

    def ids(self, pipeline: str, table: str) -> list[int]:
        """The sorted ``id`` column of a table in the warehouse ([] before its first batch)."""
        try:
            table_data = self.cluster.read_table(pipeline, table)
        except FileNotFoundError:
            return []
        if table_data is None or table_data.num_rows == 0:
            return []
        return sorted(table_data.column("id").to_pylist())

    @property
    def store(self) -> Any:
        """The connectors' state store (PostgreSQL), opened on first use."""
        if self._store is None:
            import os

            from airflow_connectors.state.store import StateStore

            # Plans hold sealed secrets: this process reads them with the cluster's key,
            # as its Airflow components do.
            os.environ["AIRFLOW__CORE__FERNET_KEY"] = self.cluster.env["AIRFLOW__CORE__FERNET_KEY"]
            self._store = StateStore(self.cluster.state_store_url)
        return self._store

    def batches(self, dag_id: str) -> list[Any]:
        """Every batch of the connector ``pipeline.table.connector``, oldest first."""
        from airflow_connectors.state.store import ConnectorRef

        return list(self.store.batches(ConnectorRef(*dag_id.split("."))))

    def states(self, dag_id: str, run_id: str) -> dict[str, str]:
        """``task_id[map_index] -> state`` of one run."""
        return {
            f"{ti['task_id']}[{ti['map_index']}]": ti["state"]
            for ti in self.api.task_instances(dag_id, run_id)
        }

    def connect(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A call of the connector REST API the plugin mounts at ``/connect``."""
        response: httpx.Response = self.api.client.request(method, f"/connect{path}", **kwargs)
        return response

    def worker_of(self, path: str) -> int | None:
        """The Spark worker whose work directory holds ``path`` (None: none of them)."""
        for i in range(self.cluster.spark.workers):
            if Path(path).resolve().is_relative_to(self.cluster.spark.worker_dir(i).resolve()):
                return i
        return None

    def close(self) -> None:
        """Release the state store's connections."""
        if self._store is not None:
            self._store.close()
            self._store = None


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The deployment, started once for the session's cluster tests and stopped after."""
    from airflow_connectors.testing.cluster import Cluster

    root = tmp_path_factory.mktemp("cluster")
    dags = root / "dags"
    dags.mkdir()
    running = Cluster(
        root / "deploy", dags, spark_workers=SPARK_WORKERS, celery_workers=CELERY_WORKERS
    ).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def deployment(cluster: Any) -> Iterator[Deployment]:
    """The running cluster with the helpers the cluster test modules share."""
    shared = Deployment(cluster, Path(cluster.dags_folder))
    try:
        yield shared
    finally:
        shared.close()
