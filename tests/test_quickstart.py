"""The README's main command, end to end, in a copy of the repository as a fresh clone
has it (tracked and new files; no .venv, no .airflow): scripts/quickstart.sh sets up,
runs the example pipeline through a real Airflow scheduler and local Spark, prints the
results, exits 0, twice in a row (the second keeps the first's data and ingests
nothing again). With ``--no-demo`` (Airflow kept up, no run triggered) it moves off a
busy port, and SIGTERM stops Airflow and everything it started."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from airflow_connectors.testing.standalone import port_free, processes_of

# scripts/quickstart.sh: bootstrap, a real Airflow scheduler and local Spark.
pytestmark = [pytest.mark.side, pytest.mark.spark, pytest.mark.airflow]

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = (
    "demo.price.live: asset-triggered run success",
    "connector DAG demo.numbers.live: paused",
    "numbers.backfill: RUNNING, 100000 records, end_of_input=True",
    "numbers.live: PAUSED, 0 records",  # the paused connector that never ran is listed
    "table numbers: 100000 rows",
    "table price: 1010 rows",
)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's files as a clone of this working tree would have them."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    dest = tmp_path_factory.mktemp("clone") / "airflow-connectors"
    for name in filter(None, (f.decode() for f in files)):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    assert not (dest / ".venv").exists() and not (dest / ".airflow").exists()
    return dest


def quickstart_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("AIRFLOW_HOME", "AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW_CONNECTORS_QUICKSTART_HOME"):
        env.pop(key, None)
    return env


def test_main_command_passes_twice_in_a_row(clone: Path) -> None:
    """A fresh run, then one that reuses its Airflow home and state: the same counts
    both times (nothing lands twice). A third run (it used to be three) repeats the
    second's path and cost two minutes of the suite's 45."""
    home = clone / ".airflow"
    for attempt in range(1, 3):
        proc = subprocess.run(
            ["bash", "scripts/quickstart.sh"],  # the README's main command, as written
            cwd=clone,
            env=quickstart_env(),
            capture_output=True,
            text=True,
            timeout=900,
        )
        out = proc.stdout
        assert proc.returncode == 0, f"run {attempt}: " + (out + proc.stderr)[-4000:]
        for line in EXPECTED:  # the same counts every time: nothing lands twice
            assert line in out, f"run {attempt}: {line!r} missing from:\n{out[-4000:]}"
        # Results only: no HTTP client or Airflow INFO lines among them.
        assert "HTTP Request:" not in out and " INFO " not in out, out[-4000:]
        if attempt > 1:
            assert "reusing" in out and "--fresh starts over" in out
        assert not processes_of(home.resolve()), f"run {attempt} left Airflow processes"


def test_no_demo_keeps_running_moves_off_a_busy_port_and_stops_on_sigterm(clone: Path) -> None:
    """``--no-demo`` (Airflow up on the example's DAGs, no run triggered; it implies
    ``--keep-running``, whose path after the demo's runs is the main command's plus the
    wait) with ``--fresh``, a taken port and a viewer: the UI moves to a free port, the
    viewer reads and may not pause, SIGTERM stops everything."""
    home = clone / ".airflow"
    home.mkdir(exist_ok=True)
    (home / "old-marker").write_text("from an earlier run")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        proc = subprocess.Popen(
            [
                "bash",
                "scripts/quickstart.sh",
                "--no-demo",
                "--fresh",
                "--port",
                str(taken),
                "--user",
                "alice:viewer:alice-pw",
            ],
            cwd=clone,
            env=quickstart_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines: list[str] = []
        try:
            assert proc.stdout is not None
            deadline = time.monotonic() + 900
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
                if line.startswith("Airflow UI: "):
                    break
            out = "".join(lines)
            assert any(line.startswith("Airflow UI: ") for line in lines), out[-4000:]
            assert f"port {taken} is in use" in out
            assert not (home / "old-marker").exists()  # --fresh removed the old home
            assert "--no-demo: no demo run was triggered" in out, out[-4000:]
            assert "run success" not in out, out[-4000:]
            url = out.split("Airflow UI: ", 1)[1].split()[0]
            port = int(url.rsplit(":", 1)[1])
            assert port != taken and not port_free(port)
            assert processes_of(home.resolve())  # Airflow is up
            # --user added a viewer: she logs in, reads, and may not pause a connector.
            import httpx

            token = httpx.post(
                f"{url}/auth/token", json={"username": "alice", "password": "alice-pw"}
            )
            assert token.status_code in (200, 201), token.text
            headers = {"Authorization": f"Bearer {token.json()['access_token']}"}
            assert httpx.get(f"{url}/connect/connectors", headers=headers).status_code == 200
            refused = httpx.put(f"{url}/connect/connectors/demo.price.live/pause", headers=headers)
            assert refused.status_code == 403, refused.text
            proc.send_signal(signal.SIGTERM)  # to bash, which exec'd the quickstart
            rest, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, rest[-3000:]
        assert "SIGTERM: stopping Airflow" in rest
        assert port_free(port)
        assert not processes_of(home.resolve()), "SIGTERM left Airflow processes behind"
