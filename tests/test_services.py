"""scripts/services.sh, as the test command left it: every service up, a second ``up``
changes nothing, ``status`` says when one is down, and servers of the user's own are
used instead of started."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = (
    "AIRFLOW_CONNECTORS_TEST_PG",
    "AIRFLOW_CONNECTORS_TEST_REDIS",
    "AIRFLOW_CONNECTORS_TEST_NATS",
)


def services(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in OVERRIDES}
    return subprocess.run(
        ["bash", "scripts/services.sh", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.nats
def test_status_reports_each_service_up_and_a_second_up_changes_nothing() -> None:
    status = services("status")
    assert status.returncode == 0, status.stdout + status.stderr
    lines = status.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["postgres", "redis", "nats"]
    assert all(" up " in line for line in lines), lines
    again = services("up")
    assert again.returncode == 0, again.stdout + again.stderr
    for line in again.stdout.splitlines():
        assert "used as it is" in line, line
        assert "installed" not in line and "started on" not in line, line


@pytest.mark.nats
def test_status_fails_naming_a_service_that_is_down() -> None:
    down = services("status", "redis", "nats", AIRFLOW_CONNECTORS_TEST_REDIS="127.0.0.1:1")
    assert down.returncode == 1
    redis, nats = down.stdout.splitlines()
    assert redis.startswith("redis:") and "DOWN" in redis and "127.0.0.1:1" in redis
    assert nats.startswith("nats:") and " up " in nats


def test_a_server_of_the_users_own_is_used_not_started() -> None:
    own = services("up", "nats", AIRFLOW_CONNECTORS_TEST_NATS="nats://127.0.0.1:4222")
    assert own.returncode == 0
    assert own.stdout.strip() == (
        "nats:     AIRFLOW_CONNECTORS_TEST_NATS is set: using that server, nothing started"
    )


def test_an_unknown_service_or_action_is_refused() -> None:
    unknown = services("up", "mysql")
    assert unknown.returncode == 2 and "unknown service 'mysql'" in unknown.stderr
    usage = services("restart")
    assert usage.returncode == 2 and usage.stderr.startswith("usage:")
