"""The Makefile: `make` lists its targets, `make test` is exactly the full suite, its
lanes are scripts/test.sh's, and the fast lane leaves out every test that needs something
(each marker pyproject.toml registers)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARGETS = (
    "help",
    "setup",
    "services",
    "test",
    "fast",
    "lane-main",
    "lane-side",
    "test-m",
    "lint",
    "format",
    "docs",
    "quickstart",
    "bench",
)
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def make(*args: str) -> str:
    out = subprocess.run(
        ["make", "--no-print-directory", "-s", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout


def registered_markers() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    lines = config["tool"]["pytest"]["ini_options"]["markers"]
    return {line.split(":")[0] for line in lines}


def test_the_default_target_lists_every_target_with_what_it_does() -> None:
    listed = make()
    assert listed == make("help")
    shown = dict(re.findall(r"^  (\S+) +(.+)$", listed, re.M))
    missing = [t for t in TARGETS if t not in shown]
    assert not missing, f"make help does not list {missing}:\n{listed}"


def test_make_test_is_the_full_suite() -> None:
    assert make("-n", "test").strip() == "bash scripts/test.sh"


def test_the_lanes_are_those_of_the_test_script() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text()
    commands = make("-n", "lane-main", "lane-side")
    expressions = re.findall(r'-m "([^"]+)"', commands)
    assert len(expressions) == 3, commands
    for expression in expressions:
        assert f'-m "{expression}"' in script or f"-m {expression} " in script, expression


def test_the_fast_lane_leaves_out_every_marker_of_a_need() -> None:
    command = make("-n", "fast")
    assert "AIRFLOW_CONNECTORS_TEST_LANE=fast" in command
    [expression] = re.findall(r'-m "([^"]+)"', command)
    inner = re.fullmatch(r"not \((.+)\)", expression)
    assert inner is not None, expression
    left_out = set(inner.group(1).split(" or "))
    assert left_out == registered_markers()
