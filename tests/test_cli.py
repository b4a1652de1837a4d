"""The ``airflow-connectors`` command as users run it: a real process, real Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart" / "pipeline.yaml"
CLI = str(Path(sys.executable).parent / "airflow-connectors")


def cli(*args: str, home: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIRFLOW_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
    env.pop("AIRFLOW__CONNECTORS__STATE_STORE_URL", None)
    env.pop("AIRFLOW__CONNECTORS__WAREHOUSE", None)
    return subprocess.run(
        [CLI, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_validate_ok_prints_one_line_per_connector(tmp_path: Path) -> None:
    out = cli("validate", str(QUICKSTART), home=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "ok"
    assert [line.split(":")[0] for line in lines[1:]] == [
        "quickstart.customers.crm_export",
        "quickstart.orders.history",
        "quickstart.orders.live",
    ]
    assert "start_after=orders.backfill,customers.loaded" in lines[3]


def test_validate_reports_every_error_and_exits_1(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        "pipeline: bad\n"
        "tables:\n"
        "  t:\n"
        "    columns: {a: INT}\n"
        "    connectors:\n"
        "      - name: x\n"
        "        transprt: {name: datagen}\n"
        "      - name: 'not ok!'\n"
        "        start_after: nowhere\n"
        "        transport: {name: file_input, config: {path: /tmp/x.json}}\n"
    )
    out = cli("validate", str(spec), home=tmp_path)
    assert out.returncode == 1
    assert out.stdout == ""
    errors = out.stderr.strip().splitlines()
    assert all(line.startswith(f"{spec}: ") for line in errors), errors
    text = "\n".join(errors)
    assert "tables.t.connectors[0].transprt" in text and "did you mean 'transport'" in text
    assert "tables.t.connectors[1].name" in text
    assert "tables.t.connectors[1].start_after" in text and "'nowhere'" in text
    assert "tables.t.connectors[1].format" in text


def test_validate_sql_file_uses_stem_as_pipeline_name(tmp_path: Path) -> None:
    spec = tmp_path / "numbers.sql"
    spec.write_text(
        "CREATE TABLE numbers (num DOUBLE) WITH ('connectors' = '[{"
        '"name": "gen", "transport": {"name": "datagen", "config": {"plan": [{"limit": 5}]}}'
        "}]');\n"
    )
    out = cli("validate", str(spec), home=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1].startswith("numbers.numbers.gen: datagen")


@pytest.mark.spark  # the CLI's run starts local Spark
def test_run_quickstart_then_stats(tmp_path: Path) -> None:
    out = cli("run", str(QUICKSTART), "--show", "2", home=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "orders.live: finished, +10000 records" in out.stdout
    assert "orders.history: finished, +500 records" in out.stdout
    assert "customers.crm_export: finished, +10 records" in out.stdout
    assert "table orders: 10500 rows" in out.stdout
    assert (tmp_path / "connectors" / "state.db").is_file()  # embedded default store

    again = cli("run", str(QUICKSTART), home=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 batch(es) committed" in again.stdout
    assert "starting Spark" not in again.stderr  # nothing new: no Spark at all

    stats = cli("stats", "quickstart", "orders", "live", "--json", home=tmp_path)
    assert stats.returncode == 0, stats.stderr
    doc = json.loads(stats.stdout)
    assert doc["endpoint_name"] == "orders.live"
    assert doc["metrics"]["total_records"] == 10000
    assert doc["metrics"]["end_of_input"] is True
    assert doc["metrics"]["buffered_records"] == 0
    assert doc["paused"] is False and doc["fatal_error"] is None and doc["parse_errors"] == []


@pytest.mark.slow
def test_stats_of_unknown_connector_says_what_to_do(tmp_path: Path) -> None:
    out = cli("stats", "nope", "t", "c", home=tmp_path)
    assert out.returncode == 1
    assert "No connector named c found for table t in pipeline nope" in out.stderr
    assert "known connectors: (none). Check the names, or run the pipeline first." in out.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("connector", "message"),
    [
        ("orders.nope", "table 'orders' has no connector 'nope'; its connectors: history, live"),
        ("nope.live", "pipeline 'quickstart' has no table 'nope'; its tables: customers, orders"),
    ],
)
def test_run_unknown_connector_fails_clearly(tmp_path: Path, connector: str, message: str) -> None:
    out = cli("run", str(QUICKSTART), "--connector", connector, home=tmp_path)
    assert out.returncode == 1
    assert out.stderr.startswith(f"run failed: {message}"), out.stderr


@pytest.mark.slow
def test_pipeline_pause_resume_status(tmp_path: Path) -> None:
    paused = cli("pipeline", "shop", "pause", home=tmp_path)
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.splitlines() == ["pipeline shop: PAUSED", "  (no connector has run yet)"]
    status = cli("pipeline", "shop", "status", "--json", home=tmp_path)
    assert json.loads(status.stdout) == {"pipeline": "shop", "state": "PAUSED", "connectors": []}
    resumed = cli("pipeline", "shop", "resume", home=tmp_path)
    assert resumed.stdout.startswith("pipeline shop: RUNNING")
    bad = cli("pipeline", "shop", "stop", home=tmp_path)
    assert bad.returncode == 2 and "invalid choice: 'stop'" in bad.stderr


@pytest.mark.slow
def test_connector_commands_on_the_embedded_store(tmp_path: Path) -> None:
    from helpers import pipeline

    from airflow_connectors.state.store import BatchPlan, ConnectorRef, ItemReceipt, StateStore
    from airflow_connectors.transports import WorkItem

    (tmp_path / "connectors").mkdir()  # the embedded default store under AIRFLOW_HOME
    store = StateStore(f"sqlite:///{tmp_path / 'connectors' / 'state.db'}")
    ref = ConnectorRef("shop", "orders", "files")
    connector = {"name": "files", "transport": {"name": "datagen", "config": {}}}
    table = pipeline({"orders": {"columns": {"id": "BIGINT"}, "connectors": [connector]}}).tables[0]
    item = WorkItem("/in/a.json", start=0, end=9)
    plan = BatchPlan("shop", table, table.connectors[0], str(tmp_path / "wh"), (item,))
    [batch] = store.plan_batches(ref, [plan])
    store.commit_batch(batch, "a", [ItemReceipt("/in/a.json", 9, 3, 0, 9, True, 0)], [])
    store.close()
    args = ("connector", "shop", "orders", "files")

    offsets = cli(*args, "offsets", "--local", home=tmp_path)
    assert offsets.returncode == 0, offsets.stderr
    # Kafka Connect's KIP-875 shape, as the REST API answers.
    assert json.loads(offsets.stdout)["offsets"][0]["partition"] == {"key": "/in/a.json"}
    running = cli(*args, "offsets", "--reset", "--local", home=tmp_path)
    assert running.returncode == 1 and "is not stopped; stop it first" in running.stderr

    assert cli(*args, "stop", "--local", home=tmp_path).returncode == 0
    reset = cli(*args, "offsets", "--reset", "--local", home=tmp_path)
    assert reset.returncode == 0 and json.loads(reset.stdout) == {"offsets": []}
    # Entries set as the offsets show them (KIP-875); the watermark's is not edited.
    entry = {
        "partition": {"key": "/in/a.json"},
        "offset": {"offset": 4, "records": 1, "completed": False},
    }
    entries = tmp_path / "offsets.json"
    entries.write_text(json.dumps([entry]))
    edited = cli(*args, "offsets", "--set", str(entries), "--local", home=tmp_path)
    assert edited.returncode == 0, edited.stderr
    assert json.loads(edited.stdout)["offsets"] == [entry]
    mark = {"partition": {"watermark": "shop.orders.files"}, "offset": {"key": "/z"}}
    entries.write_text(json.dumps([mark]))
    refused = cli(*args, "offsets", "--set", str(entries), "--local", home=tmp_path)
    assert refused.returncode == 1 and "is not edited" in refused.stderr
    assert "Traceback" not in refused.stderr
    # Every surface says STOPPED (not PAUSED) for a stopped connector.
    stopped = json.loads(cli(*args, "stats", "--local", home=tmp_path).stdout)
    assert (stopped["state"], stopped["paused"]) == ("STOPPED", True)
    top = cli("stats", "shop", "orders", "files", home=tmp_path)
    assert "state: STOPPED  paused: True" in top.stdout, top.stdout
    pipeline = json.loads(cli("pipeline", "shop", "status", "--json", home=tmp_path).stdout)
    assert [c["state"] for c in pipeline["connectors"]] == ["STOPPED"]
    # Feldera's start does not undo a stop: only resume does (Kafka Connect).
    start = cli(*args, "start", "--local", home=tmp_path)
    assert start.returncode == 1 and "runs again only after resume" in start.stderr
    assert "Traceback" not in start.stderr
    assert cli(*args, "resume", "--local", home=tmp_path).returncode == 0
    stats = json.loads(cli(*args, "stats", "--local", home=tmp_path).stdout)
    assert stats["endpoint_name"] == "orders.files" and stats["paused"] is False
    assert stats["state"] == "RUNNING" and stats["metrics"]["total_records"] == 3
    assert cli(*args, "pause", "--local", home=tmp_path).returncode == 0
    paused = json.loads(cli(*args, "stats", "--local", home=tmp_path).stdout)
    assert (paused["state"], paused["paused"]) == ("PAUSED", True)

    restart = cli(*args, "restart", "--local", home=tmp_path)
    assert restart.returncode == 1 and "airflow-connectors run SPEC --connector" in restart.stderr
    unknown = cli("connector", "shop", "orders", "nope", "stats", "--local", home=tmp_path)
    assert unknown.returncode == 1 and "run the pipeline first" in unknown.stderr


def test_connector_without_a_target_refuses(tmp_path: Path) -> None:
    out = cli("connector", "shop", "orders", "files", "pause", home=tmp_path)
    assert out.returncode != 0 and out.stdout == ""
    assert "no Airflow to talk to: give --url" in out.stderr and "--local" in out.stderr
    assert not (tmp_path / "connectors").exists()  # no state store was created


@pytest.mark.slow
def test_run_skips_a_connector_another_run_is_planning(tmp_path: Path) -> None:
    from airflow_connectors.state.store import ConnectorRef, StateStore

    spec = tmp_path / "p.yaml"
    spec.write_text(
        "pipeline: p\n"
        "tables:\n"
        "  t:\n"
        "    columns: {id: BIGINT}\n"
        "    connectors:\n"
        "      - name: c\n"
        "        transport: {name: datagen, config: {plan: [{limit: 3}]}}\n"
    )
    (tmp_path / "connectors").mkdir()
    store = StateStore(f"sqlite:///{tmp_path / 'connectors' / 'state.db'}")
    assert store.acquire_lease(ConnectorRef("p", "t", "c"), "another-run")
    store.close()
    out = cli("run", str(spec), home=tmp_path)
    # Skipped is not done: exit 75 (issue 22, item 13), and one line saying what to do.
    assert out.returncode == 75, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    told = [line for line in out.stderr.splitlines() if "another run" in line]
    assert len(told) == 2 and "connector p.t.c is being planned by another run" in told[0]
    assert told[1].startswith(
        "run incomplete: connector p.t.c was skipped and ingested nothing: "
        "another run (another-run) is planning it; run again once that run ends"
    )
    assert "t.c: busy, +0 records" in out.stdout


@pytest.mark.slow
def test_validate_a_start_after_chain_of_1000_connectors(tmp_path: Path) -> None:
    spec = tmp_path / "chain.yaml"
    lines = ["pipeline: chain", "tables:", "  t:", "    columns: {a: INT}", "    connectors:"]
    for i in range(1000):
        after = f", start_after: l{i - 1}" if i else ""
        lines.append(
            f"      - {{name: c{i}, labels: l{i}{after}, "
            "transport: {name: datagen, config: {plan: [{limit: 1}]}}}"
        )
    spec.write_text("\n".join(lines) + "\n")
    out = cli("validate", str(spec), home=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(out.stdout.splitlines()) == 1001
    assert out.stdout.splitlines()[-1].endswith("labels=l999 start_after=l998")


def test_validate_a_spec_that_is_not_utf8_in_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "latin1.yaml"
    spec.write_bytes("pipeline: p\n# café\n".encode("latin-1"))
    out = cli("validate", str(spec), home=tmp_path)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"{spec}: the spec file must be UTF-8 text, but byte 0xe9 at byte offset 17 is not "
        "valid UTF-8; save the file as UTF-8"
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql+psycopg://postgres:sekret@127.0.0.1:1/x",
            "cannot connect to the state store 'postgresql+psycopg://postgres:***@127.0.0.1:1/x': ",
        ),
        ("notadb://x", "state store URL 'notadb://x' names the database 'notadb'"),
        ("FILE", "cannot open the state store 'sqlite:///"),
    ],
)
@pytest.mark.parametrize("command", ["stats", "pipeline", "run"])
def test_unusable_state_store_url_is_one_line(
    tmp_path: Path, url: str, shown: str, command: str
) -> None:
    if url == "FILE":  # a folder that cannot be made: its parent is a file
        (tmp_path / "file").write_text("")
        url = f"sqlite:///{tmp_path / 'file' / 'state.db'}"
    args = {
        "stats": ("stats", "p", "t", "c"),
        "pipeline": ("pipeline", "p", "status", "--local"),
        "run": ("run", str(QUICKSTART)),
    }[command]
    out = cli(*args, "--state-store-url", url, home=tmp_path)
    assert out.returncode == 1
    assert out.stderr.splitlines() == [out.stderr.strip()], out.stderr  # one line
    assert out.stderr.startswith(shown), out.stderr
    assert "sekret" not in out.stderr and "Traceback" not in out.stderr
    assert "--state-store-url or [connectors] state_store_url" in out.stderr


def test_empty_state_store_url_is_refused(tmp_path: Path) -> None:
    out = cli("stats", "p", "t", "c", "--state-store-url", "", home=tmp_path)
    assert out.returncode == 2
    assert "argument --state-store-url: is empty; give a SQLAlchemy URL" in out.stderr
    assert not (tmp_path / "connectors").exists()  # no fallback to the default store


@pytest.mark.slow
def test_a_run_right_after_files_are_written_says_they_wait_for_min_file_age(
    tmp_path: Path,
) -> None:
    """Issue 22: a one-shot run right after a file was written read nothing and said only
    `idle, +0 records`; it now says how many files wait for min_file_age, and until when."""
    drop = tmp_path / "drop"
    drop.mkdir()
    (drop / "a.json").write_text('{"id": 1}\n{"id": 2}\n')
    spec = tmp_path / "p.yaml"
    spec.write_text(
        "pipeline: p\n"
        "tables:\n"
        "  t:\n"
        "    columns: {id: BIGINT}\n"
        "    connectors:\n"
        "      - name: c\n"
        f"        transport: {{name: file_input, config: {{path: {drop}, min_file_age: 60}}}}\n"
        "        format: {name: json}\n"
    )
    out = cli("run", str(spec), home=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    [line] = [ln for ln in out.stdout.splitlines() if ln.strip().startswith("t.c:")]
    assert "+0 records" in line
    assert "1 file(s) seen but not read yet: modified within min_file_age, readable from" in line


@pytest.mark.parametrize(
    ("text", "status", "said"), [("pipeline: [", 1, "stderr"), (None, 0, "stdout")]
)
def test_the_command_leaves_with_mains_status_and_its_output_once_deltalake_is_loaded(
    tmp_path: Path, text: str | None, status: int, said: str
) -> None:
    """With deltalake loaded the installed command leaves without the interpreter's
    teardown (which aborted now and then after a Delta run): its status is still
    main's, and all it printed is there."""
    spec = tmp_path / "p.yaml"
    spec.write_text(
        text
        or "pipeline: p\ntables:\n  t:\n    columns: {id: BIGINT}\n    connectors:\n"
        "      - {name: c, transport: {name: datagen, config: {}}}\n"
    )
    code = (
        "import sys, deltalake\n"
        "sys.argv = ['airflow-connectors', 'validate', sys.argv[1]]\n"
        "from airflow_connectors.cli import console\n"
        "console()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(spec)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == status, proc.stderr
    out = proc.stderr if said == "stderr" else proc.stdout
    assert ("p.yaml" in out) if status else out.startswith("ok\np.t.c: datagen")
