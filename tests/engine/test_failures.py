"""Errors that are not about one record: a corrupt or empty Parquet object, a source
that cannot be reached, a vanished file, an unwritable warehouse. Each fails only its own
connector with one line naming the connector and the object (no Java or Python trace),
``errors.tolerance: all`` skips an unreadable object as a counted transport error, and
the rest of the pipeline still lands its data exactly once. Real local Spark, real files,
real sockets on 127.0.0.1, the real CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import pipeline, read_table, run, status

from airflow_connectors.engine.batch import BatchFailed, _failure, run_batch
from airflow_connectors.engine.context import BatchContext
from airflow_connectors.engine.discovery import discover
from airflow_connectors.engine.reader import ItemFailed, ingest_item
from airflow_connectors.engine.runner import RunFailed
from airflow_connectors.state.store import ConnectorRef, StateStore
from airflow_connectors.transports import WorkItem

CLI = str(Path(sys.executable).parent / "airflow-connectors")


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_ids(path: Path, ids: range) -> None:
    pq.write_table(pa.table({"id": list(ids), "name": [f"n{i}" for i in ids]}), path)


def file_connector(name: str, path: Path, tolerance: str) -> dict[str, Any]:
    return {
        "name": name,
        "transport": {"name": "file_input", "config": {"path": str(path), "min_file_age": 0}},
        "format": {"name": "parquet"},
        "errors": {"tolerance": tolerance},
    }


def url_connector(name: str, url: str, tolerance: str) -> dict[str, Any]:
    return {
        "name": name,
        "transport": {"name": "url_input", "config": {"path": url, "timeout": 5}},
        "format": {"name": "json", "config": {"update_format": "raw"}},
        "errors": {"tolerance": tolerance},
    }


def sources(root: Path) -> dict[str, Path]:
    """good: 10 rows; mixed: a corrupt x.parquet (random bytes) beside 5 good rows;
    empty: one 0-byte Parquet file."""
    dirs = {name: root / name for name in ("good", "mixed", "empty")}
    for d in dirs.values():
        d.mkdir(parents=True)
    write_ids(dirs["good"] / "a.parquet", range(0, 10))
    write_ids(dirs["mixed"] / "a.parquet", range(100, 105))
    (dirs["mixed"] / "x.parquet").write_bytes(os.urandom(4096))
    (dirs["empty"] / "e.parquet").write_bytes(b"")
    return dirs


def spec_file(root: Path, tolerance: str, url: str) -> Path:
    dirs = sources(root / "data")
    spec = {
        "pipeline": "p",
        "tables": {
            "t": {
                "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR"},
                "connectors": [
                    file_connector("good", dirs["good"], tolerance),
                    file_connector("mixed", dirs["mixed"], tolerance),
                    file_connector("empty", dirs["empty"], tolerance),
                    url_connector("web", url, tolerance),
                ],
            }
        },
    }
    path = root / "pipeline.json"
    path.write_text(json.dumps(spec))
    return path


def cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIRFLOW_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
    env.pop("AIRFLOW__CONNECTORS__STATE_STORE_URL", None)
    env.pop("AIRFLOW__CONNECTORS__WAREHOUSE", None)
    return subprocess.run(
        [CLI, *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )


def assert_no_traces(out: subprocess.CompletedProcess[str]) -> None:
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text[-5000:]
    assert "py4j" not in text.lower(), text[-5000:]
    assert not [line for line in text.splitlines() if "java." in line], text[-5000:]
    assert "An exception was thrown from the Python worker" not in text


def stats(home: Path, connector: str) -> dict[str, Any]:
    out = cli("stats", "p", "t", connector, "--json", home=home)
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def landed(home: Path) -> list[int]:
    return sorted(
        read_table(str(home / "connectors" / "warehouse"), "p", "t").column("id").to_pylist()
    )


def failure_summary(out: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """``table.connector`` -> its line in the CLI's closing summary of failed connectors."""
    lines = out.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("run failed: "))
    return dict(line.strip().split(": ", 1) for line in lines[start + 1 :])  # type: ignore[misc]


class _Body(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"id": 1000, "name": "web"}\n{"id": 1001, "name": "web"}\n'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.spark  # the CLI's run starts local Spark
def test_tolerance_none_fails_each_bad_connector_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    port = closed_port()
    url = f"http://127.0.0.1:{port}/rows.json"
    spec = spec_file(tmp_path, "none", url)
    mixed, empty = tmp_path / "data" / "mixed", tmp_path / "data" / "empty"

    out = cli("run", str(spec), home=home)
    assert out.returncode == 1, out.stderr[-3000:]
    assert_no_traces(out)
    assert "t.good: finished, +10 records" in out.stdout
    assert landed(home) == list(range(10))  # the good connector landed, nothing else
    failed = failure_summary(out)
    assert set(failed) == {"t.mixed", "t.empty", "t.web"}
    assert out.stderr.count("run failed: 3 connector(s) of pipeline p failed") == 1
    # One line each: the connector, the object, the cause, what to do.
    assert failed["t.mixed"].startswith(f"connector p.t.mixed: cannot decode {mixed / 'x.parquet'}")
    assert "Parquet magic bytes not found" in failed["t.mixed"]
    assert "errors.tolerance: all" in failed["t.mixed"] and "stop and resume" in failed["t.mixed"]
    assert failed["t.empty"].startswith(f"connector p.t.empty: cannot decode {empty / 'e.parquet'}")
    assert "Parquet file size is 0 bytes" in failed["t.empty"]
    assert failed["t.web"].startswith(f"connector p.t.web: url_input: cannot connect to {url}")
    assert "Connection refused" in failed["t.web"] and "next run retries it" in failed["t.web"]

    for name in ("mixed", "empty", "web"):
        doc = stats(home, name)
        assert doc["state"] == "FAILED", doc
        assert doc["fatal_error"] == failed[f"t.{name}"]
        assert doc["metrics"]["total_records"] == 0 and doc["metrics"]["buffered_records"] >= 1
        assert doc["metrics"]["num_transport_errors"] == 1
    top = cli("stats", "p", "t", "mixed", home=home)
    assert "state: FAILED" in top.stdout and f"fatal_error: {failed['t.mixed']}" in top.stdout
    assert stats(home, "good")["state"] == "RUNNING"

    # A later run is not blocked: the failed batches fail again in one line each and
    # nothing lands twice.
    again = cli("run", str(spec), home=home)
    assert again.returncode == 1
    assert_no_traces(again)
    assert set(failure_summary(again)) == {"t.mixed", "t.empty", "t.web"}
    assert landed(home) == list(range(10))

    # Fixed objects, re-planned as the message says (a plan keeps each file's size); the
    # reachable server is read by the same planned batch. All of it lands exactly once.
    write_ids(mixed / "x.parquet", range(200, 203))
    write_ids(empty / "e.parquet", range(300, 302))
    for name in ("mixed", "empty"):
        for action in ("stop", "resume"):
            done = cli("connector", "p", "t", name, action, "--local", home=home)
            assert done.returncode == 0, done.stderr
    server = ThreadingHTTPServer(("127.0.0.1", port), _Body)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        fixed = cli("run", str(spec), home=home)
    finally:
        server.shutdown()
        server.server_close()
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert "run failed" not in fixed.stderr
    assert landed(home) == [*range(10), *range(100, 105), *range(200, 203), 300, 301, 1000, 1001]
    for name in ("mixed", "empty", "web"):
        doc = stats(home, name)
        assert (doc["state"], doc["fatal_error"]) == ("RUNNING", None)
        assert doc["metrics"]["end_of_input"] is True


@pytest.mark.spark  # the CLI's run starts local Spark
def test_tolerance_all_skips_unreadable_objects_as_transport_errors(tmp_path: Path) -> None:
    home = tmp_path / "home"
    url = f"http://127.0.0.1:{closed_port()}/rows.json"
    spec = spec_file(tmp_path, "all", url)
    mixed, empty = tmp_path / "data" / "mixed", tmp_path / "data" / "empty"

    out = cli("run", str(spec), home=home)
    assert_no_traces(out)
    # Every object that can be read landed, the corrupt and the empty one were skipped.
    assert landed(home) == [*range(10), *range(100, 105)]
    assert (
        "t.mixed: finished, +5 records (1 batches, 0 parse errors, 1 unreadable object(s) skipped)"
        in out.stdout
    )
    assert "t.empty: finished, +0 records" in out.stdout
    for name, key, cause in (
        ("mixed", mixed / "x.parquet", "Parquet magic bytes not found"),
        ("empty", empty / "e.parquet", "Parquet file size is 0 bytes"),
    ):
        doc = stats(home, name)
        assert doc["state"] == "RUNNING" and doc["fatal_error"] is None
        m = doc["metrics"]
        assert (m["num_transport_errors"], m["buffered_records"], m["end_of_input"]) == (1, 0, True)
        [error] = doc["transport_errors"]
        assert error["tag"] == str(key)
        assert error["message"].startswith(f"connector p.t.{name}: skipped an unreadable object")
        assert str(key) in error["message"] and cause in error["message"]
    # errors.tolerance is about bad data: an unreachable source is not skipped, it fails
    # its connector (the batch stays planned for the next run).
    assert out.returncode == 1
    failed = failure_summary(out)
    assert list(failed) == ["t.web"] and "cannot connect to" in failed["t.web"]
    assert stats(home, "web")["state"] == "FAILED"
    assert "the others ran" in out.stderr

    # The skipped objects are completed: the next run does not read them again.
    again = cli("run", str(spec), home=home)
    assert_no_traces(again)
    assert "t.mixed: finished, +0 records" in again.stdout
    assert stats(home, "mixed")["metrics"]["num_transport_errors"] == 1
    assert landed(home) == [*range(10), *range(100, 105)]


def test_unwritable_table_fails_its_connectors_in_one_line(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_ids(data / "a.parquet", range(5))
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the table's folder should go")
    spec = pipeline(
        {
            "ok": {
                "columns": {"id": "BIGINT"},
                "connectors": [file_connector("files", data, "all")],
            },
            "blocked": {
                "columns": {"id": "BIGINT"},
                "sink": {"name": "parquet", "config": {"path": str(blocker / "blocked")}},
                "connectors": [file_connector("files", data, "all")],
            },
        }
    )
    wh = str(tmp_path / "wh")
    with pytest.raises(RunFailed) as exc:
        run(spec, sqlite_url, wh, spark)
    report = exc.value.report
    assert report.connectors["ok.files"].records == 5
    assert read_table(wh, "p", "ok").num_rows == 5
    message = report.failed["blocked.files"]
    assert str(exc.value) == message and "\n" not in message
    assert message.startswith(
        f"connector p.blocked.files: table blocked: cannot write {blocker / 'blocked'}: "
        f"{blocker} is a file, not a folder"
    )
    assert "--warehouse" in message
    st = status(sqlite_url, "p", "blocked", "files")
    assert st.state == "FAILED" and st.fatal_error == message and st.buffered_records == 1

    # A whole warehouse under a file: every connector says so, naming the path.
    with pytest.raises(RunFailed) as exc:
        run(
            pipeline(
                {
                    "ok": {
                        "columns": {"id": "BIGINT"},
                        "connectors": [file_connector("files", data, "none")],
                    }
                }
            ),
            f"sqlite:///{tmp_path / 'other.db'}",
            str(blocker / "wh"),
            spark,
        )
    assert f"cannot write {blocker / 'wh' / 'p' / 'ok'}: {blocker} is a file" in str(exc.value)


def test_part_writer_failure_in_the_worker_is_a_sink_failure(tmp_path: Path) -> None:
    """Executors on other machines meet an unwritable table only when they write: the
    worker classifies it (no Spark needed: the worker's code on real files)."""
    data = tmp_path / "a.parquet"
    write_ids(data, range(3))
    blocker = tmp_path / "wh"
    blocker.write_text("a file")
    spec = pipeline(
        {"t": {"columns": {"id": "BIGINT"}, "connectors": [file_connector("c", data, "all")]}}
    )
    table, connector = spec.connectors()[0]
    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    ctx = BatchContext("p", table, connector, str(blocker))
    [batch_id] = discover(store, ctx).batch_ids
    store.close()
    ctx.items = [WorkItem(key=str(data), end=data.stat().st_size)]
    ctx.batch_id, ctx.attempt = batch_id, "1-x"
    with pytest.raises(ItemFailed) as exc:
        ingest_item(ctx, 0, ctx.items[0])
    failure = exc.value.failure
    assert failure.stage == "sink"  # never skipped, whatever the tolerance
    assert failure.message.startswith(f"connector p.t.c: cannot write {blocker}/p/_staging/t/")
    assert f"{blocker} is a file, not a folder" in failure.message
    assert "Traceback" in failure.trace  # kept for DEBUG logs only


@pytest.mark.parametrize("tolerance", ["none", "all"])
def test_file_gone_since_planning(
    spark: Any, sqlite_url: str, tmp_path: Path, tolerance: str
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    write_ids(src / "a.parquet", range(3))
    write_ids(src / "b.parquet", range(3, 7))
    spec = pipeline(
        {"t": {"columns": {"id": "BIGINT"}, "connectors": [file_connector("c", src, tolerance)]}}
    )
    table, connector = spec.connectors()[0]
    wh = str(tmp_path / "wh")
    store = StateStore(sqlite_url)
    [batch_id] = discover(store, BatchContext("p", table, connector, wh)).batch_ids
    (src / "a.parquet").unlink()  # deleted between planning and reading
    if tolerance == "none":
        with pytest.raises(BatchFailed) as exc:
            run_batch(store, batch_id, lambda: spark)
        assert str(exc.value).startswith(
            f"connector p.t.c: file_input: {src / 'a.parquet'} was listed for this batch but is gone"
        )
        assert read_table(wh, "p", "t").num_rows == 0
    else:
        result = run_batch(store, batch_id, lambda: spark)
        assert (result.committed, result.records, result.skipped) == (True, 4, 1)
        assert sorted(read_table(wh, "p", "t").column("id").to_pylist()) == [3, 4, 5, 6]
        st = store.status(ConnectorRef("p", "t", "c"))
        assert st is not None and st.num_transport_errors == 1
        assert "was listed for this batch but is gone" in st.transport_errors[-1]["message"]
    store.close()


def test_spark_errors_become_one_line(spark: Any, tmp_path: Path) -> None:
    """What the driver shows when Spark itself raises (a Py4J error carrying Java and
    Python traces): the Python cause, in one line."""
    spec = pipeline(
        {"t": {"columns": {"id": "BIGINT"}, "connectors": [file_connector("c", tmp_path, "none")]}}
    )
    table, connector = spec.connectors()[0]
    ctx = BatchContext("p", table, connector, str(tmp_path))

    def boom(_: Any) -> Any:
        raise ZeroDivisionError("division by zero in a worker")

    with pytest.raises(Exception) as exc:
        spark.sparkContext.parallelize([1], 1).map(boom).collect()
    assert "Traceback" in str(exc.value)  # what users saw before
    message, kind = _failure(exc.value, ctx, 7)
    assert message == (
        "connector p.t.c: batch 7 failed in Spark: ZeroDivisionError: division by zero in a worker"
    )
    assert kind == "transport"
