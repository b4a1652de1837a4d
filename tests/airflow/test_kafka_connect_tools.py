"""Kafka Connect's own tooling against ``<airflow>/connect``, unchanged: the
kafka-connect-py client and its ``kc`` CLI (a new process), logging in with HTTP Basic
as they do with a Kafka Connect deployment. Basic credentials are checked by Airflow's
simple auth manager and carry the permissions a token of that user would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from conftest import EndToEnd

from airflow_connectors import __version__

NAME = "kc.events.files"


@pytest.fixture(scope="module")
def kc_airflow(e2e: EndToEnd) -> Any:
    """A pipeline of one file connector that has run once (so it has a task)."""
    root = e2e.folder("kc")
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "a.json").write_text('{"id": 1}\n{"id": 2}\n')
    spec = {
        "pipeline": "kc",
        "tables": {
            "events": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(root / "src"), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        },
    }
    e2e.add({"kc.yaml": yaml.safe_dump(spec)}, [NAME])
    af = e2e.airflow
    af.set_paused(NAME, False)
    assert af.wait_run(NAME, af.trigger(NAME))["state"] == "success"
    return af


def base(af: Any) -> str:
    return f"{af.url}/connect"


def test_basic_auth_is_checked_by_airflow(kc_airflow: Any) -> None:
    af = kc_airflow
    info = httpx.get(base(af) + "/", auth=("admin", af.password), timeout=30)
    assert info.status_code == 200, info.text
    assert set(info.json()) == {"version", "commit", "kafka_cluster_id"}
    assert info.json()["version"] == __version__

    wrong = httpx.get(base(af) + "/connectors", auth=("admin", "wrong"), timeout=30)
    assert wrong.status_code == 401
    assert wrong.headers["www-authenticate"].startswith("Basic")
    assert wrong.json()["error_code"] == 401
    assert "refused the HTTP Basic credentials of user 'admin'" in wrong.json()["message"]
    assert httpx.get(base(af) + "/", timeout=30).status_code == 401

    # The same permissions as a token: the viewer reads but may not pause.
    reader = ("reader", "reader-pw")
    assert NAME in httpx.get(base(af) + "/connectors", auth=reader, timeout=30).json()
    refused = httpx.put(f"{base(af)}/connectors/{NAME}/pause", auth=reader, timeout=30)
    assert refused.status_code == 403 and "edit access" in refused.json()["message"]
    assert af.client.get(f"/api/v2/dags/{NAME}").json()["is_paused"] is False


def test_kafka_connect_py_client(kc_airflow: Any) -> None:
    from kafka_connect import KafkaConnect

    af = kc_airflow
    kc = KafkaConnect(url=base(af), auth=f"admin:{af.password}")
    assert kc.get_cluster_info()["kafka_cluster_id"] == "airflow"
    assert NAME in kc.list_connectors()
    expanded = kc.list_connectors(expand="status")
    assert expanded[NAME]["status"]["connector"]["state"] == "RUNNING"
    assert kc.list_connectors(expand="info")[NAME]["info"]["name"] == NAME
    assert NAME in kc.list_connectors(pattern=r"kc\.", state="RUNNING")
    info = kc.get_connector(NAME)
    assert info["name"] == NAME and info["type"] == "source"
    assert kc.get_connector_config(NAME)["connector.class"] == "file_input"
    status = kc.get_connector_status(NAME)
    assert status["connector"]["state"] == "RUNNING" and len(status["tasks"]) == 1

    kc.pause_connector(NAME)
    assert kc.get_connector_status(NAME)["connector"]["state"] == "PAUSED"
    assert af.client.get(f"/api/v2/dags/{NAME}").json()["is_paused"] is True
    kc.resume_connector(NAME)
    assert kc.get_connector_status(NAME)["connector"]["state"] == "RUNNING"

    restarted = kc.restart_connector(NAME, include_tasks=True, only_failed=True)
    assert restarted["name"] == NAME  # no task failed: nothing restarts
    tasks = kc.list_connector_tasks(NAME)
    assert [t["id"] for t in tasks] == [{"connector": NAME, "task": 0}]
    assert kc.get_connector_task_status(NAME, 0)["state"] == "RUNNING"

    plugins = kc.list_connector_plugins()
    assert {"class": "file_input", "type": "source", "version": __version__} in plugins
    checked = kc.validate_connector_config("file_input", {"follow": "maybe"})
    assert checked["name"] == "file_input" and checked["error_count"] == 2  # path, follow


def test_kc_cli(kc_airflow: Any, tmp_path: Path) -> None:
    af = kc_airflow
    kc_bin = Path(sys.executable).with_name("kc")

    def kc(*args: str) -> Any:
        # kc prints errors and exits 0: every answer must be JSON.
        done = subprocess.run(
            [str(kc_bin), "--url", base(af), "--auth", f"admin:{af.password}", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        if not done.stdout.strip():
            return None
        try:
            return json.loads(done.stdout)
        except ValueError:
            pytest.fail(f"kc {' '.join(args)}: {done.stdout}{done.stderr}")

    assert kc("info")["version"] == __version__
    assert NAME in kc("list")
    assert kc("list", "--expand", "status")[NAME]["status"]["connector"]["state"] == "RUNNING"
    assert kc("list", "--expand", "info", "--pattern", "kc")[NAME]["info"]["type"] == "source"
    assert kc("get", NAME)["name"] == NAME
    assert kc("config", NAME)["connector.class"] == "file_input"
    assert kc("status", NAME)["connector"]["state"] == "RUNNING"
    assert kc("pause", NAME) is None
    assert kc("status", NAME)["connector"]["state"] == "PAUSED"
    assert kc("resume", NAME) is None
    assert kc("status", NAME)["connector"]["state"] == "RUNNING"
    restarted = kc("restart", NAME, "--include-tasks", "--only-failed")
    assert restarted["connector"]["state"] == "RUNNING"
    assert kc("list-tasks", NAME)[0]["id"] == {"connector": NAME, "task": 0}
    assert kc("task-status", NAME, "0")["state"] == "RUNNING"
    assert {"class": "s3_input", "type": "source", "version": __version__} in kc("list-plugins")
    config = tmp_path / "file_input.json"
    config.write_text(json.dumps({"path": "/data", "follow": True}))
    checked = kc("validate-config", "file_input", "--config-file", str(config))
    assert checked["error_count"] == 0
    values = {c["value"]["name"]: c["value"]["value"] for c in checked["configs"]}
    assert values["path"] == "/data" and values["follow"] == "true"  # config strings
