"""One truth for connector state: every control action, driven in turn through the REST
API, the CLI over that API and the CLI on the local state store and Airflow, leaves the
same state on all three surfaces (and the DAG's paused flag in Airflow agrees)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import yaml
from conftest import EndToEnd

PIPELINE, TABLE, CONNECTOR = "surf", "t", "c"
NAME = f"{PIPELINE}.{TABLE}.{CONNECTOR}"
FELDERA = f"/v0/pipelines/{PIPELINE}/tables/{TABLE}/connectors/{CONNECTOR}"
REST_ACTIONS = {
    "pause": ("PUT", f"/connectors/{NAME}/pause"),
    "resume": ("PUT", f"/connectors/{NAME}/resume"),
    "stop": ("PUT", f"/connectors/{NAME}/stop"),
    "start": ("POST", f"{FELDERA}/start"),  # Feldera's start: refused while stopped
}


class Surfaces:
    def __init__(self, e2e: EndToEnd) -> None:
        self.airflow = e2e.airflow

    def _cli(self, *args: str, local: bool) -> subprocess.CompletedProcess[str]:
        target = ["--local"] if local else ["--url", self.airflow.url]
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "airflow_connectors.cli",
                "connector",
                PIPELINE,
                TABLE,
                CONNECTOR,
                *args,
                *target,
            ],
            env=self.airflow.env,  # the standalone's Airflow home, metadata DB and store
            capture_output=True,
            text=True,
            timeout=300,
        )

    def act(self, surface: str, action: str) -> bool:
        """Do ``action`` through ``surface``; whether it was accepted."""
        if surface == "rest":
            method, path = REST_ACTIONS[action]
            resp = self.airflow.client.request(method, f"/connect{path}")
            assert resp.status_code in (200, 202, 204, 409), resp.text
            return resp.status_code != 409
        proc = self._cli(action, local=surface == "cli-local")
        if proc.returncode != 0:
            assert "only after resume" in proc.stderr, proc.stderr
        return proc.returncode == 0

    def states(self) -> dict[str, Any]:
        """The state each surface reports now."""
        rest = self.airflow.client.get(f"/connect/connectors/{NAME}/status").json()
        feldera = self.airflow.client.get(f"/connect{FELDERA}/stats").json()
        out = {
            "rest": rest["connector"]["state"],
            "rest-feldera": (feldera["state"], feldera["paused"]),
        }
        for surface in ("cli-api", "cli-local"):
            proc = self._cli("stats", local=surface == "cli-local")
            assert proc.returncode == 0, proc.stderr
            doc = json.loads(proc.stdout)
            out[surface] = (doc["state"], doc["paused"])
        out["dag_paused"] = bool(
            self.airflow.client.get(f"/api/v2/dags/{NAME}").json()["is_paused"]
        )
        return out


# (surface, action, accepted, state afterwards)
STEPS = [
    ("rest", "pause", True, "PAUSED"),
    ("cli-api", "start", True, "RUNNING"),
    ("cli-local", "stop", True, "STOPPED"),
    ("rest", "start", False, "STOPPED"),
    ("cli-api", "start", False, "STOPPED"),
    ("cli-local", "start", False, "STOPPED"),
    ("cli-api", "resume", True, "RUNNING"),
    ("cli-local", "pause", True, "PAUSED"),
    ("rest", "resume", True, "RUNNING"),
    ("rest", "stop", True, "STOPPED"),
    ("cli-local", "resume", True, "RUNNING"),
    ("cli-api", "stop", True, "STOPPED"),
    ("rest", "pause", True, "PAUSED"),  # from STOPPED: paused, offsets no longer editable
    ("cli-local", "start", True, "RUNNING"),
]


@pytest.fixture(scope="module")
def surfaces(e2e: EndToEnd) -> Surfaces:
    spec = {
        "pipeline": PIPELINE,
        "tables": {
            TABLE: {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": CONNECTOR,
                        "transport": {"name": "datagen", "config": {"plan": [{"limit": 3}]}},
                    }
                ],
            }
        },
    }
    e2e.add({f"{PIPELINE}.yaml": yaml.safe_dump(spec)}, [NAME])
    # One run, so the connector is RUNNING (never run, it is UNASSIGNED everywhere).
    e2e.airflow.set_paused(NAME, False)
    run = e2e.airflow.wait_run(NAME, e2e.airflow.trigger(NAME), timeout=600)
    assert run["state"] == "success"
    assert len(e2e.ids(PIPELINE, TABLE)) == 3
    return Surfaces(e2e)


def test_every_control_action_reads_the_same_on_every_surface(surfaces: Surfaces) -> None:
    assert surfaces.states()["rest"] == "RUNNING"
    for i, (surface, action, accepted, state) in enumerate(STEPS, start=1):
        step = f"step {i}: {action} through {surface}"
        assert surfaces.act(surface, action) is accepted, step
        paused = state != "RUNNING"
        assert surfaces.states() == {
            "rest": state,
            "rest-feldera": (state, paused),
            "cli-api": (state, paused),
            "cli-local": (state, paused),
            "dag_paused": paused,
        }, step
