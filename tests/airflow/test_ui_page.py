"""The Connectors page's own logic, run in Node.js (the browser test in
test_connect_api.py drives the whole page in Chromium)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "airflow_connectors" / "airflow" / "api" / "ui.html"


def describe_trigger(configs: list[dict]) -> list[str]:
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.fail("this test needs Node.js (Debian: apt-get install nodejs)")
    source = re.search(
        r"^function describeTrigger\(config\) \{.*?^\}", PAGE.read_text(), re.M | re.S
    )
    assert source is not None, "describeTrigger not found in ui.html"
    script = f"{source.group(0)}\nconsole.log(JSON.stringify({json.dumps(configs)}.map(describeTrigger)));"
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout))


def test_trigger_column_shows_start_after() -> None:
    assert describe_trigger(
        [
            {},
            {"start_after": ["orders.backfill", "customers.loaded"]},
            {"start_after": ["x"], "trigger": {"schedule": "@hourly"}},
            {"trigger": {"on": "new_data", "poll_interval": 30}},
        ]
    ) == [
        "manual",
        "start_after orders.backfill, customers.loaded",
        "start_after x or @hourly",
        "on new_data (every 30s)",
    ]
