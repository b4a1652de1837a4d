"""The connector REST API (``/connect``) in a real ``airflow standalone`` API server with
the provider's plugin loaded: Kafka Connect and Feldera shapes over the same truth (the
DAG's paused flag, the pipeline flag, the state store)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from conftest import EndToEnd
from helpers import headless_chromium

from airflow_connectors import __version__
from airflow_connectors.testing.standalone import StandaloneAirflow

COLUMNS = {"id": "BIGINT NOT NULL"}


class Api:
    def __init__(self, e2e: EndToEnd, root: Path) -> None:
        self.e2e = e2e
        self.airflow: StandaloneAirflow = e2e.airflow
        self.root = root

    def __call__(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.airflow.client.request(method, f"/connect{path}", **kwargs)

    def rows(self, table: str) -> list[int]:
        return self.rows_of("api", table)

    def rows_of(self, pipeline: str, table: str) -> list[int]:
        return self.e2e.ids(pipeline, table)

    def dag_paused(self, dag_id: str) -> bool:
        return bool(self.airflow.client.get(f"/api/v2/dags/{dag_id}").json()["is_paused"])


# Feldera's test_pipeline_orchestration_basic name cases that our names allow (1 to 100
# letters, digits, '_' and '-': they name DAGs and folders): (pipeline, table, connector)
# as stored; unquoted table names are lower-cased, quoted ones kept. Its fourth case,
# table "numbers +C0_-,.!%()&/", is not a valid name here.
ORCHESTRATION_NAMES = [
    ("fldr", "numbers", "c1"),
    ("fldr", "numbersc0_", "aA0_-"),
    ("fldrq", "Numbers", "c1"),
]


def orchestration_connectors(connector: str) -> list[dict[str, Any]]:
    """One running datagen connector, as in Feldera's orchestration tests."""
    return [
        {"name": connector, "transport": {"name": "datagen", "config": {"plan": [{"limit": 1}]}}}
    ]


def orchestration_ddl(table: str, connector: str) -> str:
    connectors = json.dumps(orchestration_connectors(connector))
    return f"CREATE TABLE {table} (id BIGINT NOT NULL) WITH ('connectors' = '{connectors}');\n"


@pytest.fixture(scope="module")
def api(e2e: EndToEnd) -> Api:
    root = e2e.folder("connect")
    (root / "src").mkdir()
    (root / "src" / "a.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(3)))
    (root / "flaky").mkdir()
    (root / "flaky" / "good.json").write_text('{"id": 10}\n')
    (root / "flaky" / "bad.json").write_text('{"id": "x"}\n')  # fixed later, same length
    spec = {
        "pipeline": "api",
        "tables": {
            "events": {
                "columns": COLUMNS,
                "connectors": [
                    {
                        "name": "files",
                        "labels": ["events.loaded"],
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(root / "src"), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    },
                    {
                        "name": "flaky",
                        "tasks_max": 2,
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(root / "flaky"), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    },
                    {
                        "name": "gen",
                        "paused": True,
                        "start_after": "events.loaded",
                        "transport": {"name": "datagen", "config": {"plan": [{"limit": 2}]}},
                    },
                ],
            }
        },
    }
    # Feldera's orchestration example: c1 created paused, c2 running.
    numbers = [
        {
            "name": name,
            "paused": paused,
            "transport": {
                "name": "datagen",
                "config": {
                    "seed": n,
                    "plan": [{"limit": 3, "fields": {"id": {"range": [n * 10, n * 10 + 3]}}}],
                },
            },
        }
        for n, (name, paused) in enumerate([("c1", True), ("c2", False)], start=1)
    ]
    ddl = (
        f"CREATE TABLE numbers (id BIGINT NOT NULL) WITH ('connectors' = '{json.dumps(numbers)}');"
    )
    e2e.add(
        {
            "api.yaml": yaml.safe_dump(spec),
            "numbers.sql": ddl,
            "fldr.sql": orchestration_ddl("numbers", "c1")
            + orchestration_ddl("numbersC0_", "aA0_-"),
            # A YAML spec keeps a table name as written, as a quoted SQL identifier
            # would (spec.sql lower-cases a quoted CREATE TABLE name: a known bug).
            "fldrq.yaml": yaml.safe_dump(
                {
                    "pipeline": "fldrq",
                    "tables": {
                        "Numbers": {
                            "columns": COLUMNS,
                            "connectors": orchestration_connectors("c1"),
                        }
                    },
                }
            ),
        },
        [
            "api.events.files",
            "api.events.flaky",
            "api.events.gen",
            "numbers.numbers.c1",
            "numbers.numbers.c2",
            *(f"{p}.{t}.{c}" for p, t, c in ORCHESTRATION_NAMES),
        ],
    )
    return Api(e2e, root)


def test_needs_airflow_authentication(api: Api) -> None:
    anonymous = httpx.get(f"{api.airflow.url}/connect/connectors", timeout=30)
    assert anonymous.status_code == 401
    assert anonymous.json()["error_code"] == 401


def test_errors_have_one_shape(api: Api) -> None:
    unknown_route = api("GET", "/nowhere")
    assert unknown_route.status_code == 404 and unknown_route.json()["error_code"] == 404
    bad_body = api("PATCH", "/connectors/api.events.files/offsets", json={"offsets": "all"})
    assert bad_body.status_code == 400
    assert bad_body.json()["message"].startswith("invalid request: body.offsets")


def test_feldera_answers_are_valid_against_felderas_own_schemas(api: Api) -> None:
    """Issue 28: a client generated from Feldera's openapi.json reads every answer of the
    Feldera routes: checked with an OpenAPI 3.0 validator against the schemas of
    Feldera's own document (``feldera_schemas.json``, the subset, with its commit)."""
    from feldera_schemas import validate

    for errors in ("false", "true"):
        stats = api("GET", f"/v0/pipelines/api/stats?include_connector_errors={errors}")
        assert stats.status_code == 200, stats.text
        doc = stats.json()
        validate(doc, "ControllerStatus")
        assert doc["outputs"] == []
        names = [i["endpoint_name"] for i in doc["inputs"]]
        assert names == sorted(names) and "events.files" in names
        metrics = doc["global_metrics"]
        assert metrics["total_input_records"] == sum(
            i["metrics"]["total_records"] for i in doc["inputs"]
        )
        assert metrics["total_completed_steps"] <= metrics["total_initiated_steps"]
        listed = [i["parse_errors"] is not None for i in doc["inputs"]]
        assert all(listed) if errors == "true" else not any(listed)
    # The pipeline's status, as Feldera's SDK and fda poll it.
    info = api("GET", "/v0/pipelines/api")
    assert info.status_code == 200, info.text
    validate(info.json(), "PipelineSelectedInfo")
    assert info.json()["name"] == "api"
    assert info.json()["deployment_status"] == doc["global_metrics"]["state"]
    for connector in ("files", "flaky", "gen"):
        status = api("GET", f"/v0/pipelines/api/tables/events/connectors/{connector}/stats")
        assert status.status_code == 200, status.text
        validate(status.json(), "InputEndpointStatus")
        assert status.json()["barrier"] is False
    errors = [
        api("GET", "/v0/pipelines/nope/stats"),
        api("GET", "/v0/pipelines/nope"),
        api("GET", "/v0/pipelines/api/tables/events/connectors/nope/stats"),
        api("GET", "/v0/pipelines/api/tables/nope/schema"),
        api("POST", "/v0/pipelines/api/tables/events/connectors/files/restart"),
        api("POST", "/v0/pipelines/api/restart"),
        api("GET", "/v0/pipelines/api/stats?include_connector_errors=maybe"),
        api.airflow.client_for("reader", "reader-pw").post("/connect/v0/pipelines/api/pause"),
        httpx.get(f"{api.airflow.url}/connect/v0/pipelines/api/stats", timeout=30),
    ]
    codes = []
    for answer in errors:
        validate(answer.json(), "ErrorResponse")
        codes.append((answer.status_code, answer.json()["error_code"]))
    assert codes == [
        (404, "UnknownPipelineName"),
        (404, "UnknownPipelineName"),
        (404, "UnknownInputEndpoint"),
        (404, "UnknownTableName"),
        (400, "InvalidConnectorAction"),
        (404, "UnsupportedPipelineAction"),
        (400, "InvalidRequest"),
        (403, "Forbidden"),
        (401, "Unauthorized"),
    ]
    # The Kafka Connect routes keep Kafka Connect's shape.
    assert api("GET", "/connectors/nope/status").json()["error_code"] == 404


def test_feldera_start_runs_the_pipeline(api: Api) -> None:
    """Feldera's ``POST /v0/pipelines/{p}/start`` answers 202 and runs the pipeline: it
    resumes a paused one; ``initial=paused`` pauses it instead."""

    def state() -> str:
        return str(api("GET", "/v0/pipelines/api/stats").json()["global_metrics"]["state"])

    assert api("POST", "/v0/pipelines/api/pause").status_code == 202
    assert state() == "Paused"
    assert api("POST", "/v0/pipelines/api/start").status_code == 202
    assert state() == "Running"
    assert api("POST", "/v0/pipelines/api/start?initial=paused").status_code == 202
    assert state() == "Paused"
    refused = api("POST", "/v0/pipelines/api/start?initial=standby")
    assert refused.status_code == 400 and "no standby" in refused.json()["message"]
    assert api("POST", "/v0/pipelines/api/start").status_code == 202
    assert state() == "Running"
    assert api("POST", "/v0/pipelines/nope/start").status_code == 404


def test_lists_connectors_with_config_and_status(api: Api) -> None:
    listed = api("GET", "/connectors").json()  # other modules' pipelines may be there too
    assert [c for c in listed if c.startswith(("api.", "numbers."))] == [
        "api.events.files",
        "api.events.flaky",
        "api.events.gen",
        "numbers.numbers.c1",
        "numbers.numbers.c2",
    ]
    expanded = api("GET", "/connectors", params={"expand": ["status", "info"]}).json()
    assert expanded["api.events.files"]["status"]["connector"]["state"] == "UNASSIGNED"
    assert expanded["api.events.gen"]["status"]["connector"]["state"] == "PAUSED"
    assert expanded["api.events.gen"]["info"]["config"]["paused"] == "true"
    config = api("GET", "/connectors/api.events.files/config").json()
    # Kafka Connect's Map<String,String>: the nested spec flattened into dotted keys.
    assert config["connector.class"] == "file_input"
    assert config["name"] == "api.events.files" and config["tasks.max"] == "1"
    assert config["format.name"] == "json" and config["errors.tolerance"] == "none"
    assert all(isinstance(v, str) for v in config.values())
    info = api("GET", "/connectors/api.events.files").json()
    assert info["name"] == "api.events.files" and info["type"] == "source"
    assert info["config"] == config and info["tasks"] == []
    assert api("GET", "/connectors/api.events.files/tasks").json() == []
    missing = api("GET", "/connectors/api.events.nope/status")
    assert missing.status_code == 404
    assert missing.json()["error_code"] == 404
    assert "Connector api.events.nope not found" in missing.json()["message"]


def test_pause_and_resume_flip_the_dag(api: Api) -> None:
    assert api("PUT", "/connectors/api.events.gen/resume").status_code == 202
    assert api.dag_paused("api.events.gen") is False
    assert api("PUT", "/connectors/api.events.gen/pause").status_code == 202
    assert api.dag_paused("api.events.gen") is True
    status = api("GET", "/connectors/api.events.gen/status").json()
    assert status["connector"]["state"] == "PAUSED"


def test_feldera_connector_and_pipeline_actions(api: Api) -> None:
    base = "/v0/pipelines/api/tables/EVENTS/connectors/gen"  # unquoted: case-insensitive
    assert api("POST", f"{base}/start").status_code == 200
    assert api.dag_paused("api.events.gen") is False
    assert api("POST", f"{base}/pause").status_code == 200
    assert api.dag_paused("api.events.gen") is True
    bad = api("POST", f"{base}/Start")  # actions are case-sensitive
    assert bad.status_code == 400 and bad.json() == {  # Feldera's ErrorResponse
        "message": "Invalid connector action 'Start'; valid actions are: 'start' or 'pause'",
        "error_code": "InvalidConnectorAction",
        "details": {"action": "Start"},
    }
    assert api("POST", '/v0/pipelines/api/tables/"EVENTS"/connectors/gen/start').status_code == 404
    assert api("POST", "/v0/pipelines/nope/tables/events/connectors/gen/start").status_code == 404
    assert api("POST", "/v0/pipelines/api/tables/events/connectors/nope/start").status_code == 404
    stats = api("GET", f"{base}/stats").json()
    assert stats["endpoint_name"] == "events.gen" and stats["paused"] is True

    assert api("POST", "/v0/pipelines/api/pause").status_code == 202
    assert api("GET", "/v0/pipelines/api/stats").json()["global_metrics"]["state"] == "Paused"
    assert api("POST", "/v0/pipelines/api/resume").status_code == 202
    pipeline = api("GET", "/v0/pipelines/api/stats").json()
    assert pipeline["global_metrics"]["state"] == "Running"
    assert [i["endpoint_name"] for i in pipeline["inputs"]] == [
        "events.files",
        "events.flaky",
        "events.gen",
    ]


def test_offsets_edit_only_when_stopped_then_reread(api: Api) -> None:
    af = api.airflow
    run = af.wait_run("api.events.files", af.trigger("api.events.files"))
    assert run["state"] == "success"
    assert api.rows("events") == [0, 1, 2]
    offsets = keyed(api("GET", "/connectors/api.events.files/offsets").json())
    assert [o["offset"]["completed"] for o in offsets] == [True]

    running = api("DELETE", "/connectors/api.events.files/offsets")
    assert running.status_code == 400 and "stop it first" in running.json()["message"]

    assert api("PUT", "/connectors/api.events.files/stop").status_code == 204
    assert (
        api("GET", "/connectors/api.events.files/status").json()["connector"]["state"] == "STOPPED"
    )
    assert api("DELETE", "/connectors/api.events.files/offsets").status_code == 200
    assert api("GET", "/connectors/api.events.files/offsets").json() == {"offsets": []}  # all
    assert api("PUT", "/connectors/api.events.files/resume").status_code == 202

    again = af.wait_run("api.events.files", af.trigger("api.events.files"))
    assert again["state"] == "success"
    assert api.rows("events") == [0, 0, 1, 1, 2, 2]  # read again, as the reset asked
    assert (
        api("GET", "/connectors/api.events.files/status").json()["connector"]["state"] == "RUNNING"
    )


def test_stopped_connector_runs_only_after_resume(api: Api) -> None:
    """Kafka Connect's transitions, enforced by the API and by the gate (runs after
    test_offsets_edit_only_when_stopped_then_reread: the latest run has an ingest task)."""
    af, name = api.airflow, "api.events.files"
    feldera = "/v0/pipelines/api/tables/events/connectors/files"
    before = api.rows("events")
    assert api("PUT", f"/connectors/{name}/pause").status_code == 202
    paused = api("GET", f"/connectors/{name}/status").json()
    assert paused["connector"]["state"] == "PAUSED"
    assert paused["tasks"] and {t["state"] for t in paused["tasks"]} == {"PAUSED"}

    assert api("PUT", f"/connectors/{name}/stop").status_code == 204
    stopped = api("GET", f"/connectors/{name}/status").json()
    assert stopped["connector"]["state"] == "STOPPED" and stopped["tasks"] == []
    refused = api("POST", f"{feldera}/start")
    assert refused.status_code == 409 and "only after resume" in refused.json()["message"]
    assert api.dag_paused(name) is True
    assert api("POST", f"/connectors/{name}/restart").status_code == 409

    # Unpausing the DAG in Airflow (the UI toggle) does not run it: the gate skips.
    af.set_paused(name, False)
    run_id = af.trigger(name)
    assert af.wait_run(name, run_id)["state"] == "success"
    gate = {ti["task_id"]: ti["state"] for ti in af.task_instances(name, run_id)}["discover"]
    assert gate == "skipped"
    stats = api("GET", f"{feldera}/stats").json()
    assert (stats["state"], stats["paused"]) == ("STOPPED", True)
    assert api.rows("events") == before

    assert api("PUT", f"/connectors/{name}/resume").status_code == 202
    assert api.dag_paused(name) is False
    resumed = api("GET", f"{feldera}/stats").json()
    assert (resumed["state"], resumed["paused"]) == ("RUNNING", False)


def keyed(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The source keys' entries of an offsets answer (without the watermark's)."""
    return [o for o in answer["offsets"] if "key" in o["partition"]]


def records(entry: dict[str, Any], n: int) -> dict[str, Any]:
    """A KIP-875 offsets entry with its records count set to ``n``."""
    return {**entry, "offset": {**entry["offset"], "records": n}}


def cli_run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``airflow-connectors`` in a new process (the environment of this one, plus ``env``)."""
    return subprocess.run(
        [sys.executable, "-m", "airflow_connectors.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_patch_offsets_with_kafka_connect_and_own_shapes(api: Api) -> None:
    """PATCH /offsets of a stopped connector: Kafka Connect's KIP-875 shape
    (partition/offset, a null offset forgets the key) and ours (key/offset/...); the
    offsets GET shows are the offsets the connector then resumes from."""
    name = "api.events.files"
    path = f"/connectors/{name}/offsets"
    shown = api("GET", path).json()["offsets"]
    before = keyed({"offsets": shown})
    assert len(before) == 1 and before[0]["offset"]["completed"] is True
    # The watermark's entry comes last, once the connector has one.
    assert [o["partition"] for o in shown[1:]] == [{"watermark": name}]
    key = before[0]["partition"]["key"]
    assert api("PUT", f"/connectors/{name}/stop").status_code == 204
    try:
        kip875 = {
            "offsets": [
                {
                    "partition": {"key": key},
                    "offset": {
                        "offset": before[0]["offset"]["offset"],
                        "records": 2,
                        "completed": False,
                    },
                }
            ]
        }
        answer = api("PATCH", path, json=kip875)
        assert answer.status_code == 200, answer.text
        assert "were altered" in answer.json()["message"]
        (edited,) = keyed(api("GET", path).json())
        assert edited == {
            "partition": {"key": key},
            "offset": {"offset": before[0]["offset"]["offset"], "records": 2, "completed": False},
        }
        forget = api("PATCH", path, json={"offsets": [{"partition": {"key": key}, "offset": None}]})
        assert forget.status_code == 200, forget.text
        assert keyed(api("GET", path).json()) == []
        bad = api("PATCH", path, json={"offsets": [{"partition": {"file": key}, "offset": None}]})
        assert bad.status_code == 400 and "partition" in bad.json()["message"]
        # Entries as GET shows them, the watermark's among them as it is now.
        marks = [o for o in api("GET", path).json()["offsets"] if "watermark" in o["partition"]]
        own = api("PATCH", path, json={"offsets": before + marks})
        assert own.status_code == 200, own.text
        assert keyed(api("GET", path).json()) == before
        flat = {"key": key, **before[0]["offset"]}
        ours = api("PATCH", path, json={"offsets": [flat]})  # our own flat entries
        assert ours.status_code == 200, ours.text
        assert keyed(api("GET", path).json()) == before
        mark = {"partition": {"watermark": name}, "offset": {**shown[1]["offset"], "key": "/x"}}
        derived = api("PATCH", path, json={"offsets": [mark]})
        assert derived.status_code == 400 and "not edited" in derived.json()["message"]
    finally:
        assert api("PUT", f"/connectors/{name}/resume").status_code == 202


def test_cli_sets_offsets_from_a_file_with_credentials_from_the_environment(
    api: Api, tmp_path: Path
) -> None:
    """``connector ... offsets --set FILE`` through the API, which the CLI finds and logs
    in to from AIRFLOW_CONNECTORS_API_URL/USER/PASSWORD (no --url)."""
    admin = {
        "AIRFLOW_CONNECTORS_API_URL": api.airflow.url,
        "AIRFLOW_CONNECTORS_API_USER": "admin",
        "AIRFLOW_CONNECTORS_API_PASSWORD": api.airflow.password,
    }
    target = ("connector", "api", "events", "files")
    shown = cli_run(*target, "offsets", env=admin)
    assert shown.returncode == 0, shown.stderr
    before = json.loads(shown.stdout)["offsets"]
    assert before == api("GET", "/connectors/api.events.files/offsets").json()["offsets"]
    before = keyed({"offsets": before})

    entries = tmp_path / "offsets.json"
    entries.write_text(json.dumps([{**before[0], "offset": {**before[0]["offset"], "records": 5}}]))
    running = cli_run(*target, "offsets", "--set", str(entries), env=admin)
    assert running.returncode == 1 and "stop it first" in running.stderr
    assert cli_run(*target, "stop", env=admin).returncode == 0
    try:
        changed = cli_run(*target, "offsets", "--set", str(entries), env=admin)
        assert changed.returncode == 0, changed.stderr
        assert "were altered" in json.loads(changed.stdout)["message"]
        after = keyed(api("GET", "/connectors/api.events.files/offsets").json())
        assert after == [{**before[0], "offset": {**before[0]["offset"], "records": 5}}]
        entries.write_text(json.dumps(before))
        assert cli_run(*target, "offsets", "--set", str(entries), env=admin).returncode == 0
    finally:
        assert cli_run(*target, "resume", env=admin).returncode == 0
    assert keyed(api("GET", "/connectors/api.events.files/offsets").json()) == before

    # The user and password are the environment's: the reader reads but may not stop.
    reader = {**admin, "AIRFLOW_CONNECTORS_API_USER": "reader"}
    reader["AIRFLOW_CONNECTORS_API_PASSWORD"] = "reader-pw"
    assert cli_run(*target, "offsets", env=reader).returncode == 0
    refused = cli_run(*target, "stop", env=reader)
    assert refused.returncode == 1 and "HTTP 403" in refused.stderr, refused.stderr
    wrong = cli_run(*target, "stats", env={**admin, "AIRFLOW_CONNECTORS_API_PASSWORD": "nope"})
    assert wrong.returncode == 1 and "refused the credentials of 'admin'" in wrong.stderr


def test_failed_task_shows_trace_and_restarts_alone(api: Api) -> None:
    af, name = api.airflow, "api.events.flaky"
    run_id = af.trigger(name)
    assert af.wait_run(name, run_id)["state"] == "failed"
    status = api("GET", f"/connectors/{name}/status").json()
    assert status["connector"]["state"] == "FAILED"
    assert "record 1 (line 1) of" in status["connector"]["trace"]
    tasks = {t["id"]: t for t in status["tasks"]}
    failed = [i for i, t in tasks.items() if t["state"] == "FAILED"]
    assert len(tasks) == 2 and len(failed) == 1
    assert "bad.json" in tasks[failed[0]]["trace"]
    assert api("GET", f"/connectors/{name}/tasks/{failed[0]}/status").json()["state"] == "FAILED"
    assert api("GET", f"/connectors/{name}/tasks/7/status").status_code == 404
    tries = {
        ti["map_index"]: ti["try_number"]
        for ti in af.task_instances(name, run_id)
        if ti["task_id"] == "ingest"
    }

    (api.root / "flaky" / "bad.json").write_text('{"id": 11 }\n')
    restarted = api(
        "POST", f"/connectors/{name}/restart", params={"onlyFailed": "true", "includeTasks": "true"}
    )
    assert restarted.status_code == 202
    body = restarted.json()
    assert body["connector"]["state"] == "RESTARTING"
    assert [t["state"] for t in body["tasks"] if t["id"] == failed[0]] == ["RESTARTING"]

    assert af.wait_run(name, run_id)["state"] == "success"
    after = {
        ti["map_index"]: ti["try_number"]
        for ti in af.task_instances(name, run_id)
        if ti["task_id"] == "ingest"
    }
    ok = next(i for i in tasks if i not in failed)
    assert after[ok] == tries[ok] and after[failed[0]] == tries[failed[0]] + 1  # only it reran
    assert api("GET", f"/connectors/{name}/status").json()["connector"]["state"] == "RUNNING"
    assert api.rows("events")[-2:] == [10, 11] or {10, 11} <= set(api.rows("events"))

    tasks = api("GET", f"/connectors/{name}/tasks").json()
    assert sorted(t["id"]["task"] for t in tasks) == [0, 1]
    assert api("POST", f"/connectors/{name}/tasks/{ok}/restart").status_code == 204
    assert af.wait_run(name, run_id)["state"] == "success"
    assert api("POST", f"/connectors/{name}/tasks/9/restart").status_code == 404
    assert api("POST", f"/connectors/{name}/restart").status_code == 204  # a new run


def test_connector_plugins_describe_and_validate_configs(api: Api) -> None:
    plugins = api("GET", "/connector-plugins").json()
    assert {"class": "file_input", "type": "source", "version": __version__} in plugins
    # Kafka Connect lists connectors only, unless connectorsOnly=false: formats are
    # converters.
    assert {p["type"] for p in plugins} == {"source", "sink"}
    everything = api("GET", "/connector-plugins", params={"connectorsOnly": "false"}).json()
    assert {"class": "json", "type": "converter", "version": __version__} in everything
    assert {"class": "parquet", "type": "sink", "version": __version__} in plugins
    for source in ("postgres_input", "nats_input", "delta_table_input", "iceberg_input"):
        assert {"class": source, "type": "source", "version": __version__} in plugins
    assert {"class": "postgres", "type": "sink", "version": __version__} in plugins
    pg = {d["name"]: d for d in api("GET", "/connector-plugins/postgres_input/config").json()}
    assert {"uri", "postgres_conn_id", "query", "mode", "cursor_column"} <= set(pg)
    definition = {d["name"]: d for d in api("GET", "/connector-plugins/file_input/config").json()}
    path = definition["path"]
    assert path["required"] is True and path["type"] == "STRING"
    assert path["default_value"] is None and path["importance"] == "HIGH"
    assert (path["group"], path["order_in_group"], path["width"]) == ("file_input", 0, "NONE")
    assert path["display_name"] == "Path" and path["dependents"] == []
    assert path["documentation"].startswith(
        "What to read: a file, a directory (every file below it, skipping names that "
        "start with '.' or '_') or a glob ('**' recurses). Absolute, or relative to the "
        "spec file's folder"
    )
    follow = definition["follow"]
    assert {k: v for k, v in follow.items() if k != "documentation"} == {
        "name": "follow",
        "type": "BOOLEAN",
        "required": False,
        "default_value": "false",  # Kafka Connect's defaults are config strings
        "importance": "MEDIUM",
        "group": "file_input",
        "order_in_group": 1,
        "width": "NONE",
        "display_name": "Follow",
        "dependents": [],
    }
    assert "false: read the files that match now, and end the input" in follow["documentation"]
    assert "true: also read lines appended to files already read" in follow["documentation"]
    assert definition["min_file_age"]["default_value"] == "5.0"
    assert definition["min_file_age"]["documentation"].startswith("Seconds a file must")
    csv = {d["name"]: d for d in api("GET", "/connector-plugins/csv/config").json()}
    assert csv["delimiter"]["default_value"] == ","
    assert csv["delimiter"]["documentation"].startswith("The one character between fields")
    datagen = {d["name"]: d for d in api("GET", "/connector-plugins/datagen/config").json()}
    assert datagen["plan"]["type"] == "LIST"
    assert json.loads(datagen["plan"]["default_value"]) == [
        {"rate": None, "limit": None, "worker_chunk_size": None, "fields": {}}
    ]
    # Two plugins named parquet: the format (its operation column for keyed tables, issue
    # 25) and the sink, picked by type (the format first when none is given).
    fmt = api("GET", "/connector-plugins/parquet/config").json()
    assert [d["name"] for d in fmt] == ["operation_column", "delete_values", "truncate_values"]
    sink = api("GET", "/connector-plugins/parquet/config", params={"type": "sink"}).json()
    # The sink's own fields first, then those every sink has.
    assert [d["name"] for d in sink] == ["path", "compression", "target_file_size"]
    # Every field of every plugin says what it is.
    undocumented = [
        f"{p['class']} ({p['type']}): {d['name']}"
        for p in plugins
        for d in api(
            "GET", f"/connector-plugins/{p['class']}/config", params={"type": p["type"]}
        ).json()
        if not d["documentation"].strip()
    ]
    assert undocumented == []
    assert api("GET", "/connector-plugins/json/config", params={"type": "sink"}).status_code == 404
    result = api(
        "PUT",
        "/connector-plugins/file_input/config/validate",
        json={"follow": "maybe", "colour": 1},
    ).json()
    assert result["name"] == "file_input" and result["error_count"] == 3
    values = {c["value"]["name"]: c["value"] for c in result["configs"]}
    # The CLI's messages (issue 22): the field's path, a did-you-mean, the allowed fields.
    assert values["path"]["errors"] == ["path: required field is missing"]
    assert values["follow"]["errors"][0].startswith("follow: ")
    assert "'maybe'" in values["follow"]["errors"][0]
    [colour] = values["colour"]["errors"]
    assert colour.startswith("colour: unknown field 'colour'"), colour
    assert "allowed fields: path, follow" in colour
    typo = api(
        "PUT", "/connector-plugins/file_input/config/validate", json={"path": "/x", "folow": True}
    ).json()
    [folow] = [c["value"]["errors"] for c in typo["configs"] if c["value"]["name"] == "folow"]
    assert folow[0].startswith("folow: unknown field 'folow' (did you mean 'follow'?)"), folow
    assert api("GET", "/connector-plugins/nope/config").status_code == 404


# Ten orders of pipeline and connector actions (as in Feldera's orchestration tests),
# each from the state the spec creates: pipeline running, c1 paused, c2 running.
ORDERS = [
    ["pipeline:pause", "pipeline:resume"],
    ["c1:start", "pipeline:pause", "c2:pause"],
    ["pipeline:pause", "c1:start", "c2:start", "pipeline:resume"],
    ["c2:pause", "c1:start", "c1:pause", "c2:start"],
    ["pipeline:pause", "c2:pause", "pipeline:resume", "c2:start"],
    ["c1:start", "c1:start", "c2:pause", "c2:pause"],
    ["pipeline:pause", "pipeline:pause", "c1:start", "pipeline:resume"],
    ["c1:start", "c2:pause", "pipeline:pause", "c1:pause", "pipeline:resume"],
    ["c2:pause", "pipeline:pause", "c2:start", "c1:start"],
    ["c1:start", "pipeline:pause", "pipeline:resume", "c2:pause", "c2:start", "c1:pause"],
]


def triple(api: Api) -> tuple[bool, bool, bool]:
    stats = api("GET", "/v0/pipelines/numbers/stats").json()
    paused = {i["endpoint_name"]: i["paused"] for i in stats["inputs"]}
    return (
        stats["global_metrics"]["state"] == "Paused",
        paused["numbers.c1"],
        paused["numbers.c2"],
    )


@pytest.mark.parametrize("order", ORDERS, ids=[" ".join(o) for o in ORDERS])
def test_feldera_orchestration_orders(api: Api, order: list[str]) -> None:
    connectors = "/v0/pipelines/numbers/tables/numbers/connectors"
    api("POST", "/v0/pipelines/numbers/resume")
    api("POST", f"{connectors}/c1/pause")
    api("POST", f"{connectors}/c2/start")
    expected = {"pipeline": False, "c1": True, "c2": False}
    assert triple(api) == (False, True, False)
    for step in order:
        target, action = step.split(":")
        if target == "pipeline":
            assert api("POST", f"/v0/pipelines/numbers/{action}").status_code == 202
        else:
            assert api("POST", f"{connectors}/{target}/{action}").status_code == 200
        expected[target] = action == "pause"
        assert triple(api) == (expected["pipeline"], expected["c1"], expected["c2"]), step


@pytest.mark.parametrize(
    ("pipeline", "table", "connector", "path"),
    [
        ("fldr", "numbers", "c1", "numbers/connectors/c1"),
        ("fldr", "numbersc0_", "aA0_-", "numbersC0_/connectors/aA0_-"),
        ("fldrq", "Numbers", "c1", "%22Numbers%22/connectors/c1"),
    ],
    ids=["numbers-c1", "numbersC0_-aA0_-", "quoted-Numbers-c1"],
)
def test_feldera_orchestration_basic(
    api: Api, pipeline: str, table: str, connector: str, path: str
) -> None:
    """Feldera's test_pipeline_orchestration_basic: a running connector of a paused
    pipeline; pausing the connector; resuming the pipeline leaves it paused; starting it
    runs it. Unquoted table names in the URL are case-insensitive, quoted ones exact."""
    base = f"/v0/pipelines/{pipeline}/tables/{path}"

    def stats() -> tuple[str, bool, int]:
        pipe = api("GET", f"/v0/pipelines/{pipeline}/stats?include_connector_errors=true").json()
        mine = api("GET", f"{base}/stats")
        assert mine.status_code == 200, mine.text
        doc = mine.json()
        assert doc["endpoint_name"] == f"{table}.{connector}"
        assert doc in pipe["inputs"]
        return pipe["global_metrics"]["state"], doc["paused"], doc["metrics"]["total_records"]

    assert api("POST", f"/v0/pipelines/{pipeline}/pause").status_code == 202
    assert stats() == ("Paused", False, 0)
    assert api("POST", f"{base}/pause").status_code == 200
    assert stats() == ("Paused", True, 0)
    assert api.dag_paused(f"{pipeline}.{table}.{connector}") is True
    assert api("POST", f"/v0/pipelines/{pipeline}/resume").status_code == 202
    assert stats() == ("Running", True, 0)
    assert api("POST", f"{base}/start").status_code == 200
    assert stats() == ("Running", False, 0)
    assert api.dag_paused(f"{pipeline}.{table}.{connector}") is False
    assert api("POST", f"{base}/pause").status_code == 200  # leave it as no run can start


def test_feldera_orchestration_errors(api: Api) -> None:
    """Feldera's test_pipeline_orchestration_errors: its status codes."""
    pipeline = "/v0/pipelines/fldr"
    assert api("POST", f"{pipeline}/resume").status_code == 202
    assert api("POST", f"{pipeline}/pause").status_code == 202
    assert api("POST", f"{pipeline}/resume").status_code == 202
    for table in ("numbers", "Numbers", "NUMBERS", "%22numbers%22"):
        for action in ("start", "pause"):
            answer = api("POST", f"{pipeline}/tables/{table}/connectors/c1/{action}")
            assert answer.status_code == 200, (table, action, answer.text)
    for action in ("action2", "START"):
        answer = api("POST", f"{pipeline}/tables/numbers/connectors/c1/{action}")
        assert answer.status_code == 400 and answer.json()["error_code"] == "InvalidConnectorAction"
    # Feldera's codes: the pipeline manager's for a pipeline, the runtime's for an
    # endpoint (an unknown table or connector alike), each with its details.
    not_found = {
        "/v0/pipelines/fldr-nope/tables/numbers/connectors/c1/start": (
            "UnknownPipelineName",
            {"pipeline_name": "fldr-nope"},
        ),
        f"{pipeline}/tables/numbers/connectors/c2/start": (
            "UnknownInputEndpoint",
            {"endpoint_name": "numbers.c2"},
        ),
        f"{pipeline}/tables/numbers/connectors/C1/start": (
            "UnknownInputEndpoint",
            {"endpoint_name": "numbers.C1"},
        ),
        f"{pipeline}/tables/numbers2/connectors/c1/start": (
            "UnknownInputEndpoint",
            {"endpoint_name": "numbers2.c1"},
        ),
        f"{pipeline}/tables/%22Numbers%22/connectors/c1/start": (
            "UnknownInputEndpoint",
            {"endpoint_name": '"Numbers".c1'},
        ),
        f"{pipeline}/Start": ("UnsupportedPipelineAction", {"action": "Start"}),
        "/v0/pipelines/fldr-nope/pause": ("UnknownPipelineName", {"pipeline_name": "fldr-nope"}),
    }
    for path, (code, details) in not_found.items():
        answer = api("POST", path)
        assert answer.status_code == 404, (path, answer.text)
        assert (answer.json()["error_code"], answer.json()["details"]) == (code, details), path
    assert "the pipeline actions are 'start', 'pause' and 'resume'" in (
        api("POST", f"{pipeline}/Start").text
    )


def test_data_flows_only_when_pipeline_and_connector_run(api: Api) -> None:
    af, connectors = api.airflow, "/v0/pipelines/numbers/tables/numbers/connectors"
    api("POST", f"{connectors}/c2/start")
    api("POST", "/v0/pipelines/numbers/pause")
    held = af.wait_run("numbers.numbers.c2", af.trigger("numbers.numbers.c2"))
    assert held["state"] == "success" and api.rows_of("numbers", "numbers") == []
    api("POST", "/v0/pipelines/numbers/resume")
    flowed = af.wait_run("numbers.numbers.c2", af.trigger("numbers.numbers.c2"))
    assert flowed["state"] == "success"
    assert api.rows_of("numbers", "numbers") == [20, 21, 22]  # c2 only: c1 stays paused


def test_cli_steers_connectors_through_the_api(api: Api) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "airflow_connectors.cli", *args, "--url", api.airflow.url],
            capture_output=True,
            text=True,
            timeout=120,
        )

    paused = cli("connector", "numbers", "numbers", "c2", "pause")
    assert paused.returncode == 0, paused.stderr
    assert api.dag_paused("numbers.numbers.c2") is True
    assert cli("connector", "numbers", "numbers", "c2", "start").returncode == 0
    assert api.dag_paused("numbers.numbers.c2") is False
    stats = json.loads(cli("connector", "numbers", "numbers", "c2", "stats").stdout)
    assert stats["endpoint_name"] == "numbers.c2"

    assert cli("pipeline", "numbers", "pause").stdout.startswith("pipeline numbers: PAUSED")
    status = json.loads(cli("pipeline", "numbers", "resume", "--json").stdout)
    assert status["state"] == "RUNNING"
    assert [c["endpoint_name"] for c in status["connectors"]] == ["numbers.c1", "numbers.c2"]

    missing = cli("connector", "numbers", "numbers", "nope", "pause")
    assert missing.returncode == 1 and "has no connector 'nope'" in missing.stderr


ARTIFACTS = Path(
    os.environ.get("AIRFLOW_CONNECTORS_TEST_ARTIFACTS")
    or Path(__file__).resolve().parents[2] / "test-artifacts"
)


def chrome() -> Any:
    return headless_chromium(1400, 900)


@pytest.mark.browser
def test_connectors_page_in_a_browser(api: Api) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    # The page is in Airflow's navigation.
    plugins = api.airflow.client.get("/api/v2/plugins").json()["plugins"]
    views = [v for p in plugins if p["name"] == "airflow_connectors" for v in p["external_views"]]
    assert [(v["name"], v["href"], v["url_route"]) for v in views] == [
        ("Connectors", "/connect/ui", "connectors")
    ]

    api("POST", "/v0/pipelines/numbers/tables/numbers/connectors/c2/start")
    token = api.airflow.client.headers["Authorization"].removeprefix("Bearer ")
    browser = chrome()
    try:
        browser.get(f"{api.airflow.url}/api/v2/monitor/health")
        browser.add_cookie(
            {"name": "_token", "value": token, "path": "/"}
        )  # Airflow's login cookie
        browser.get(f"{api.airflow.url}/connect/ui")
        row = 'tr[data-connector="numbers.numbers.c2"]'
        wait = WebDriverWait(browser, 30)
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, row)))
        cells = [td.text for td in browser.find_elements(By.CSS_SELECTOR, f"{row} td")]
        assert cells[0] == "numbers.c2" and cells[1] in ("RUNNING", "UNASSIGNED")
        gen = [
            td.text
            for td in browser.find_elements(
                By.CSS_SELECTOR, 'tr[data-connector="api.events.gen"] td'
            )
        ]
        assert gen[8] == "start_after events.loaded"  # the trigger column, not "manual"
        paused_row = browser.find_element(
            By.CSS_SELECTOR, 'tr[data-connector="numbers.numbers.c1"]'
        )
        assert "PAUSED" in paused_row.text
        # The start_after graph: files -> gen.
        edges = browser.find_elements(
            By.CSS_SELECTOR, 'svg.start-after-graph[data-pipeline="api"] line'
        )
        assert len(edges) == 1
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "connectors-page.png"))

        browser.find_element(By.CSS_SELECTOR, f'{row} button[data-action="pause"]').click()
        deadline = time.monotonic() + 30
        while not api.dag_paused("numbers.numbers.c2"):
            assert time.monotonic() < deadline, "the pause button did not pause the DAG"
            time.sleep(0.5)
        # The page refreshes by itself and shows the new state.
        wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, f"{row} .state"), "PAUSED"))
        browser.save_screenshot(str(ARTIFACTS / "connectors-page-paused.png"))

        # In Airflow's own UI the page is the plugin view /plugin/connectors.
        browser.get(f"{api.airflow.url}/plugin/connectors")
        frame = WebDriverWait(browser, 60).until(
            ec.presence_of_element_located((By.CSS_SELECTOR, 'iframe[src*="/connect/ui"]'))
        )
        browser.switch_to.frame(frame)
        WebDriverWait(browser, 30).until(ec.presence_of_element_located((By.CSS_SELECTOR, row)))
        browser.switch_to.default_content()
        browser.save_screenshot(str(ARTIFACTS / "connectors-page-in-airflow.png"))
    finally:
        browser.quit()


def test_openapi_document_and_no_server_errors_under_fuzzing(api: Api) -> None:
    """Schemathesis generates requests for every operation of the served OpenAPI
    document (property-based, hypothesis) and checks each answer against it: no 5xx,
    every status code documented, the documented content type, and the body valid
    against the documented schema (errors too: ``{"error_code", "message"}``)."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error
    from schemathesis.core.failures import FailureGroup
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    document = api("GET", "/openapi.json")  # behind the login like every route
    assert document.status_code == 200
    responses = [
        op["responses"] for path in document.json()["paths"].values() for op in path.values()
    ]
    assert all("422" not in r and {"400", "401", "403"} <= set(r) for r in responses)
    schema = schemathesis.openapi.from_dict(document.json())
    auth = {"Authorization": api.airflow.client.headers["Authorization"]}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 22
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]
    failures: list[str] = []
    statuses: list[int] = []
    for operation in operations:

        @settings(
            max_examples=15,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def call(case: Any) -> None:
            response = case.call(base_url=f"{api.airflow.url}/connect", headers=auth)
            statuses.append(response.status_code)
            try:
                case.validate_response(response, checks=checks)
            except FailureGroup as e:  # what did not conform
                failures.append(
                    f"{case.method} {case.formatted_path} -> {response.status_code} "
                    f"{response.text[:200]}: {str(e)[:600]}"
                )

        call()
    assert failures == [], "\n\n".join(failures[:10])
    assert len(statuses) >= 5 * len(operations)  # it really sent requests
    print(f"\nfuzzed {len(operations)} operations with {len(statuses)} requests: all conform")


def test_documented_shapes_of_real_answers(api: Api) -> None:
    """The answers the fuzzer rarely reaches (real connectors, tasks, plugins) conform
    to the OpenAPI document too."""
    import schemathesis
    from schemathesis.specs.openapi.checks import response_schema_conformance

    schema = schemathesis.openapi.from_dict(api("GET", "/openapi.json").json())
    auth = {"Authorization": api.airflow.client.headers["Authorization"]}
    statuses = api("GET", "/connectors", params={"expand": "status"}).json()
    with_tasks = [
        (n, s["status"]["tasks"][0]["id"]) for n, s in statuses.items() if s["status"]["tasks"]
    ]
    assert with_tasks, "no connector's latest run has an ingest task"
    name, task = with_tasks[0]
    calls = [
        ("GET", "/", {}),
        ("GET", "/connectors", {}),
        ("GET", "/connectors", {"expand": ["status", "info"]}),
        ("GET", "/connectors/{name}", {"name": "api.events.flaky"}),
        ("GET", "/connectors/{name}/config", {"name": "api.events.flaky"}),
        ("GET", "/connectors/{name}/status", {"name": "api.events.flaky"}),
        ("GET", "/connectors/{name}/tasks", {"name": "api.events.flaky"}),
        ("GET", "/connectors/{name}/tasks/{task}/status", {"name": name, "task": task}),
        ("GET", "/connectors/{name}/offsets", {"name": "api.events.files"}),
        ("GET", "/connector-plugins", {}),
        ("GET", "/connector-plugins/{plugin}/config", {"plugin": "file_input"}),
        ("GET", "/v0/pipelines/{pipeline}/stats", {"pipeline": "api"}),
        (
            "GET",
            "/v0/pipelines/{pipeline}/tables/{table}/connectors/{connector}/stats",
            {"pipeline": "api", "table": "events", "connector": "flaky"},
        ),
    ]
    for method, path, params in calls:
        operation = schema[path][method]
        path_params = {k: v for k, v in params.items() if f"{{{k}}}" in path}
        query = {k: v for k, v in params.items() if k not in path_params}
        case = operation.Case(path_parameters=path_params, query=query or None)
        response = case.call(base_url=f"{api.airflow.url}/connect", headers=auth)
        assert response.status_code == 200, (path, response.text)
        case.validate_response(response, checks=[response_schema_conformance])


STEERING = [
    ("PUT", "/connectors/api.events.files/pause", None),
    ("PUT", "/connectors/api.events.files/resume", None),
    ("PUT", "/connectors/api.events.files/stop", None),
    ("POST", "/connectors/api.events.files/restart", None),
    ("POST", "/connectors/api.events.files/tasks/0/restart", None),
    ("PATCH", "/connectors/api.events.files/offsets", {"offsets": []}),
    ("DELETE", "/connectors/api.events.files/offsets", None),
    ("POST", "/v0/pipelines/api/tables/events/connectors/files/start", None),
    ("POST", "/v0/pipelines/api/tables/events/connectors/files/pause", None),
    ("POST", "/v0/pipelines/api/pause", None),
    ("POST", "/v0/pipelines/api/resume", None),
]


def test_read_only_user_reads_but_cannot_steer(api: Api) -> None:
    """A viewer (DAG read access only) sees connectors but every change answers 403, as
    Airflow's own pause endpoint does; the OpenAPI document and docs need a login."""
    reader = api.airflow.client_for("reader", "reader-pw")
    name = "api.events.files"
    assert name in reader.get("/connect/connectors").json()
    assert reader.get(f"/connect/connectors/{name}/status").status_code == 200
    assert reader.get(f"/connect/connectors/{name}/config").status_code == 200
    assert reader.get("/connect/v0/pipelines/api/stats").status_code == 200
    before = api("GET", f"/connectors/{name}/status").json()["connector"]["state"]
    paused_before = api.dag_paused(name)
    for method, path, body in STEERING:
        answer = reader.request(method, f"/connect{path}", json=body)
        assert answer.status_code == 403, (method, path, answer.text)
        # Each route's own error shape: Feldera's ErrorResponse, Kafka Connect's message.
        feldera = path.startswith("/v0/")
        assert answer.json()["error_code"] == ("Forbidden" if feldera else 403), path
        assert "edit access" in answer.json()["message"]
    assert api("GET", f"/connectors/{name}/status").json()["connector"]["state"] == before
    assert api.dag_paused(name) == paused_before
    for path in ("/connect/openapi.json", "/connect/docs"):
        assert httpx.get(f"{api.airflow.url}{path}", timeout=30).status_code == 401
        assert reader.get(path).status_code == 200
    assert "/connectors/{name}/pause" in reader.get("/connect/openapi.json").json()["paths"]


PASSWORD = "Rest-S3cret-4711"


def test_secrets_masked_on_every_rest_surface(api: Api, http_server: Any, tmp_path: Path) -> None:
    """A source URL with a password: configs, info, offset keys, traces, the stats the
    Connectors page shows, and validate (REST and CLI) show it masked; offsets edited
    with the masked key still act on the real one."""
    import subprocess
    import sys

    http_server.files["/hush/rows.json"] = b'{"id": 1}\n{"id": 2}\n'

    def url(path: str) -> str:
        return http_server.url(path).replace("http://", f"http://reader:{PASSWORD}@")

    def connector(name: str, path: str) -> dict[str, Any]:
        return {
            "name": name,
            "transport": {"name": "url_input", "config": {"path": url(path)}},
            "format": {"name": "json", "config": {"update_format": "raw"}},
        }

    spec = {
        "pipeline": "hushapi",
        "tables": {
            "rows": {
                "columns": COLUMNS,
                "connectors": [
                    connector("good", "/hush/rows.json"),
                    connector("broken", "/hush/gone.json"),
                ],
            }
        },
    }
    af = api.airflow
    api.e2e.add(
        {"hushapi.yaml": yaml.safe_dump(spec)}, ["hushapi.rows.good", "hushapi.rows.broken"]
    )
    runs = {dag: af.trigger(dag) for dag in ("hushapi.rows.good", "hushapi.rows.broken")}
    assert af.wait_run("hushapi.rows.good", runs["hushapi.rows.good"])["state"] == "success"
    assert af.wait_run("hushapi.rows.broken", runs["hushapi.rows.broken"])["state"] == "failed"

    good, broken = "hushapi.rows.good", "hushapi.rows.broken"
    seen: list[str] = []

    def get(path: str) -> Any:
        answer = api("GET", path)
        assert answer.status_code == 200, answer.text
        seen.append(answer.text)
        return answer.json()

    config = get(f"/connectors/{good}/config")
    assert config["transport.config.path"] == url("/hush/rows.json").replace(PASSWORD, "***")
    get(f"/connectors/{good}")
    get("/connectors?expand=info&expand=status")
    offsets = keyed(get(f"/connectors/{good}/offsets"))
    assert [o["partition"]["key"] for o in offsets] == [
        url("/hush/rows.json").replace(PASSWORD, "***")
    ]
    status = get(f"/connectors/{broken}/status")
    assert status["connector"]["state"] == "FAILED"
    assert "gone.json" in status["connector"]["trace"] and "***" in status["connector"]["trace"]
    get(f"/connectors/{broken}/tasks/0/status")
    get("/v0/pipelines/hushapi/stats")  # what the Connectors page shows, latest errors too
    get("/v0/pipelines/hushapi/tables/rows/connectors/broken/stats")

    # Offsets are edited with the key as shown; the real key is kept.
    assert api("PUT", f"/connectors/{good}/stop").status_code == 204
    edit = api(
        "PATCH", f"/connectors/{good}/offsets", json={"offsets": [two := records(offsets[0], 2)]}
    )
    assert edit.status_code == 200, edit.text
    assert keyed(get(f"/connectors/{good}/offsets")) == [two]
    assert api("PUT", f"/connectors/{good}/resume").status_code == 202

    checked = api(
        "PUT",
        "/connector-plugins/url_input/config/validate",
        json={"path": url("/x.json"), "timeout": -1},
    )
    assert checked.status_code == 200 and checked.json()["error_count"] == 1
    seen.append(checked.text)
    spec_file = tmp_path / "hushapi.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    cli = subprocess.run(
        [sys.executable, "-m", "airflow_connectors.cli", "validate", str(spec_file)],
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 0 and "hushapi.rows.good" in cli.stdout, cli.stderr
    seen.append(cli.stdout + cli.stderr)
    for text in seen:
        assert PASSWORD not in text


def test_kafka_connect_configs_are_flat_maps_that_validate_and_round_trip(api: Api) -> None:
    """Issue 28: a connector's config is Kafka Connect's Map<String,String>; fetched with
    GET it validates with 0 errors and PUT back unchanged answers 200, while a config
    that would change or create a connector is refused with where to change it."""
    name = "api.events.files"
    config = api("GET", f"/connectors/{name}/config").json()
    assert json.loads(config["labels"]) == ["events.loaded"]
    assert config["transport.config.path"] == str(api.root / "src")
    assert json.loads(config["transport.config.min_file_age"]) == 0
    assert config["format.config.update_format"] == "raw"
    assert "format" not in config and "transport" not in config  # no nested objects

    checked = api("PUT", "/connector-plugins/file_input/config/validate", json=config).json()
    assert checked["error_count"] == 0, checked
    shown = {c["value"]["name"]: c["value"]["value"] for c in checked["configs"]}
    assert {k: shown[k] for k in config} == config  # every key, as given
    groups = {c["definition"]["group"] for c in checked["configs"]}
    assert {"connector", "errors", "file_input", "json"} <= groups

    put = api("PUT", f"/connectors/{name}/config", json=config)
    assert put.status_code == 200, put.text
    assert put.json() == api("GET", f"/connectors/{name}").json()
    assert api("GET", f"/connectors/{name}/config").json() == config  # unchanged

    moved = api("PUT", f"/connectors/{name}/config", json={**config, "transport.config.path": "/x"})
    assert moved.status_code == 409 and "changes transport.config.path" in moved.json()["message"]
    assert "change the connector in its spec" in moved.json()["message"]
    bad = api(
        "PUT", f"/connectors/{name}/config", json={**config, "transport.config.follow": "maybe"}
    )
    assert bad.status_code == 400
    assert bad.json()["message"].startswith(
        "Connector configuration is invalid and contains the following 1 error(s):\n"
        "transport.config.follow: "
    )
    other = api("PUT", f"/connectors/{name}/config", json={**config, "name": "api.events.gen"})
    assert other.status_code == 400 and "doesn't match connector name" in other.json()["message"]
    new = api(
        "PUT", "/connectors/api.events.nope/config", json=config | {"name": "api.events.nope"}
    )
    assert new.status_code == 409 and "not created through this API" in new.json()["message"]
    created = api("POST", "/connectors", json={"name": "api.events.nope", "config": config})
    assert created.status_code == 409 and "declared in pipeline specs" in created.json()["message"]
    exists = api("POST", "/connectors", json={"name": name, "config": config})
    assert (
        exists.status_code == 409 and exists.json()["message"] == f"Connector {name} already exists"
    )
    reader = api.airflow.client_for("reader", "reader-pw")
    assert reader.put(f"/connect/connectors/{name}/config", json=config).status_code == 403

    # A flat config with problems: each error on its flat key.
    typo = api(
        "PUT",
        "/connector-plugins/file_input/config/validate",
        json={"connector.class": "file_input", "transport.config.folow": "true", "tasks.max": "0"},
    ).json()
    errors = {
        c["value"]["name"]: c["value"]["errors"] for c in typo["configs"] if c["value"]["errors"]
    }
    # Every problem at once: the connector's own fields, then its plugins' (the bad
    # fields at their defaults), each on the key it belongs to.
    assert set(errors) == {
        "transport.config.folow",
        "transport.config.path",
        "tasks.max",
        "format.name",
    }, errors
    assert "did you mean 'follow'" in errors["transport.config.folow"][0]
    assert "needs a format" in errors["format.name"][0]
    # The task configs are maps of strings too.
    for task in api("GET", f"/connectors/{name}/tasks").json():
        assert all(isinstance(v, str) for v in task["config"].values())


def test_topics_loggers_and_a_task_restart_right_after_a_connector_restart(api: Api) -> None:
    """KIP-558's topics (the connector's table), KIP-495's loggers (the package's Python
    loggers in the API server), and a task that still exists while its connector
    restarts (runs after test_offsets_edit_only_when_stopped_then_reread)."""
    af, name = api.airflow, "api.events.files"
    reader = af.client_for("reader", "reader-pw")
    assert api("GET", f"/connectors/{name}/topics").json() == {name: {"topics": ["events"]}}
    assert api("PUT", f"/connectors/{name}/topics/reset").status_code == 202
    assert reader.put(f"/connect/connectors/{name}/topics/reset").status_code == 403
    assert api("GET", "/connectors/api.events.nope/topics").status_code == 404

    loggers = api("GET", "/admin/loggers").json()
    assert "root" in loggers and all(
        n == "root" or n.startswith("airflow_connectors") for n in loggers
    )
    logger = "airflow_connectors.airflow"
    changed = api("PUT", f"/admin/loggers/{logger}", json={"level": "DEBUG"})
    assert changed.status_code == 200, changed.text
    assert logger in changed.json() and all(n.startswith(logger) for n in changed.json())
    try:
        shown = api("GET", f"/admin/loggers/{logger}").json()
        assert shown["level"] == "DEBUG" and isinstance(shown["last_modified"], int)
    finally:
        assert api("PUT", f"/admin/loggers/{logger}", json={"level": "INFO"}).status_code == 200
    assert api("GET", f"/admin/loggers/{logger}").json()["level"] == "INFO"
    # Kafka Connect's answer to a level log4j does not know: 404.
    assert api("PUT", f"/admin/loggers/{logger}", json={"level": "LOUD"}).status_code == 404
    cluster = api("PUT", f"/admin/loggers/{logger}?scope=cluster", json={"level": "DEBUG"})
    assert cluster.status_code == 400 and "scope=cluster" in cluster.json()["message"]
    assert api("GET", "/admin/loggers/airflow_connectors.nope").status_code == 404
    assert api("PUT", "/admin/loggers/sqlalchemy", json={"level": "DEBUG"}).status_code == 400
    assert (
        reader.put(f"/connect/admin/loggers/{logger}", json={"level": "DEBUG"}).status_code == 403
    )

    before = {r["dag_run_id"] for r in af.runs(name)}
    assert api("POST", f"/connectors/{name}/restart").status_code == 204  # a new run
    again = api("POST", f"/connectors/{name}/tasks/0/restart")
    assert again.status_code == 204, again.text  # the tasks live on while it restarts
    assert api("GET", f"/connectors/{name}/tasks/0/status").status_code == 200
    for run in af.runs(name):
        af.wait_run(name, run["dag_run_id"])
    assert {r["dag_run_id"] for r in af.runs(name)} > before


KAFKA_SCHEMAS = Path(__file__).with_name("kafka_connect_schemas.json")


def test_kafka_connect_answers_are_valid_against_kafkas_own_entities(api: Api) -> None:
    """Issue 28: every Kafka Connect route's answer validates against the JSON Schemas
    written from Kafka's REST entity classes (``kafka_connect_schemas.json``, citing the
    apache/kafka commit): field names, types, required fields, and no extra field where
    Kafka's own client (Jackson, unknown properties fail) would reject one."""
    import jsonschema

    document = json.loads(KAFKA_SCHEMAS.read_text())
    name, flaky = "api.events.files", "api.events.flaky"
    config = api("GET", f"/connectors/{name}/config").json()
    calls: list[tuple[str, str, dict[str, Any], int, str]] = [
        ("GET", "/", {}, 200, "ServerInfo"),
        ("GET", "/connectors", {}, 200, "ConnectorNames"),
        (
            "GET",
            "/connectors",
            {"params": {"expand": ["status", "info"]}},
            200,
            "ExpandedConnectors",
        ),
        ("GET", f"/connectors/{name}", {}, 200, "ConnectorInfo"),
        ("GET", f"/connectors/{name}/config", {}, 200, "ConnectorConfig"),
        ("GET", f"/connectors/{name}/status", {}, 200, "ConnectorStateInfo"),
        ("GET", f"/connectors/{flaky}/status", {}, 200, "ConnectorStateInfo"),
        ("GET", f"/connectors/{name}/tasks", {}, 200, "TaskInfoList"),
        ("GET", f"/connectors/{name}/tasks/0/status", {}, 200, "TaskState"),
        ("GET", f"/connectors/{name}/offsets", {}, 200, "ConnectorOffsets"),
        ("GET", f"/connectors/{name}/topics", {}, 200, "TopicsAnswer"),
        ("GET", "/connector-plugins", {}, 200, "PluginInfoList"),
        (
            "GET",
            "/connector-plugins",
            {"params": {"connectorsOnly": "false"}},
            200,
            "PluginInfoList",
        ),
        ("GET", "/connector-plugins/file_input/config", {}, 200, "ConfigKeyInfoList"),
        ("GET", "/connector-plugins/kafka_input/config", {}, 200, "ConfigKeyInfoList"),
        (
            "PUT",
            "/connector-plugins/file_input/config/validate",
            {"json": {"follow": "maybe"}},
            200,
            "ConfigInfos",
        ),
        (
            "PUT",
            "/connector-plugins/file_input/config/validate",
            {"json": config},
            200,
            "ConfigInfos",
        ),
        ("PUT", f"/connectors/{name}/config", {"json": config}, 200, "ConnectorInfo"),
        (
            "POST",
            f"/connectors/{name}/restart",
            {"params": {"includeTasks": "true", "onlyFailed": "true"}},
            202,
            "ConnectorStateInfo",
        ),
        ("GET", "/admin/loggers", {}, 200, "Loggers"),
        ("GET", "/admin/loggers/root", {}, 200, "LoggerLevel"),
        (
            "PUT",
            "/admin/loggers/airflow_connectors",
            {"json": {"level": "INFO"}},
            200,
            "LoggerNames",
        ),
        ("GET", "/connectors/api.events.nope", {}, 404, "ErrorMessage"),
        ("GET", "/connectors/api.events.nope/offsets", {}, 404, "ErrorMessage"),
        ("POST", "/connectors", {"json": {"name": "x.y.z", "config": config}}, 409, "ErrorMessage"),
        (
            "PUT",
            f"/connectors/{name}/config",
            {"json": {**config, "tasks.max": "0"}},
            400,
            "ErrorMessage",
        ),
        ("DELETE", f"/connectors/{name}/offsets", {}, 400, "ErrorMessage"),  # not stopped
    ]
    problems = []
    for method, path, kwargs, status, entity in calls:
        answer = api(method, path, **kwargs)
        assert answer.status_code == status, (method, path, answer.text)
        schema = {**document, "$ref": f"#/$defs/{entity}"}
        for error in jsonschema.Draft202012Validator(schema).iter_errors(answer.json()):
            problems.append(f"{method} {path} ({entity}): {error.json_path}: {error.message}")
    assert problems == [], "\n".join(problems)
