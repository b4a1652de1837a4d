"""Secrets stay secret under real Airflow and real spark-submit: the state-store URL's
password and a password inside a source URL appear in no task log, no process command
line, no XCom, no rendered template field, no ``stats`` output, and are stored sealed
(encrypted, :mod:`airflow_connectors.spec.sealed`) in the state store's batch plans and
Airflow's serialized DAGs, never in clear."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import task_states, write_pipeline

STORE_PASSWORD = "St0reP4ss-9f1c"
SOURCE_PASSWORD = "S0urceP4ss-77ab"


def _command_lines(stop: threading.Event, seen: list[str]) -> None:
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                with contextlib.suppress(OSError):
                    seen.append(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
        stop.wait(0.2)


def _xcoms_and_rendered_fields(dag_id: str, run_id: str) -> str:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        xcoms = session.query(XComModel).filter_by(dag_id=dag_id, run_id=run_id).all()
        rendered = (
            session.query(RenderedTaskInstanceFields).filter_by(dag_id=dag_id, run_id=run_id).all()
        )
        assert rendered, "Airflow stored no rendered template fields"
        return repr([x.value for x in xcoms]) + repr([r.rendered_fields for r in rendered])


@pytest.mark.postgres
def test_no_password_in_logs_command_lines_xcom_rendered_fields_or_stats(
    connectors_env: dict[str, str],
    pg_schema_factory: Any,
    http_server: Any,
    capfd: pytest.CaptureFixture[str],
) -> None:
    store_url = pg_schema_factory().replace(
        "postgres@127.0.0.1", f"postgres:{STORE_PASSWORD}@127.0.0.1"
    )  # trust auth here: any password connects, so it is a real URL with a real password
    os.environ["AIRFLOW__CONNECTORS__STATE_STORE_URL"] = store_url
    http_server.files["/secret/rows.json"] = b'{"id": 1}\n{"id": 2}\n'

    def url(path: str) -> str:
        return http_server.url(path).replace("http://", f"http://reader:{SOURCE_PASSWORD}@")

    def connector(name: str, path: str) -> dict[str, Any]:
        return {
            "name": name,
            "transport": {"name": "url_input", "config": {"path": url(path)}},
            "format": {"name": "json", "config": {"update_format": "raw"}},
        }

    dags = write_pipeline(
        "hush",
        {
            "rows": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    connector("good", "/secret/rows.json"),
                    connector("missing", "/secret/nothing-here.json"),
                ],
            }
        },
    )
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=_command_lines, args=(stop, seen), daemon=True)
    watcher.start()
    try:
        good = dags["hush.rows.good"].test()
        missing = dags["hush.rows.missing"].test()
    finally:
        stop.set()
        watcher.join()
    logs = capfd.readouterr()
    states = task_states(good)
    assert str(good.state) == "success", states
    assert states[("ingest", 0)] == "success"  # a real spark-submit ran
    assert str(missing.state) == "failed"  # and the 404 was reported in the log
    assert "nothing-here.json" in logs.out + logs.err
    assert any("spark-submit" in line or "SparkSubmit" in line for line in seen)

    stats = subprocess.run(
        [sys.executable, "-m", "airflow_connectors.cli", "stats", "hush", "rows", "good"],
        capture_output=True,
        text=True,
        env={**os.environ, "AIRFLOW__CONNECTORS__STATE_STORE_URL": store_url},
    )
    assert stats.returncode == 0, stats.stderr
    assert "rows.good" in stats.stdout and "total_records=2" in stats.stdout

    import json

    import sqlalchemy as sa
    from airflow.serialization.serialized_objects import DagSerialization

    engine = sa.create_engine(store_url)
    try:
        with engine.connect() as conn:
            plans = [
                json.dumps(p) if not isinstance(p, str) else p
                for p in conn.execute(sa.text("SELECT plan FROM ac_batches")).scalars()
            ]
    finally:
        engine.dispose()
    assert plans and all("sealed:v1:" in p for p in plans), plans  # stored, sealed
    serialized = json.dumps([DagSerialization.to_dict(dag) for dag in dags.values()])
    assert "sealed:v1:" in serialized
    surfaces = {
        "state store plans (ac_batches.plan)": "\n".join(plans),
        "serialized DAGs": serialized,
        "task logs": logs.out + logs.err,
        "command lines": "\n".join(seen),
        "xcom and rendered fields": _xcoms_and_rendered_fields("hush.rows.good", good.run_id)
        + _xcoms_and_rendered_fields("hush.rows.missing", missing.run_id),
        "stats": stats.stdout + stats.stderr,
    }
    for surface, text in surfaces.items():
        assert STORE_PASSWORD not in text, f"the state store's password leaked into {surface}"
        assert SOURCE_PASSWORD not in text, f"the source URL's password leaked into {surface}"
