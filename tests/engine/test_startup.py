"""Start-up of an ingest job: the driver JVM's class-data-sharing archive.

The cache's rules (one recording at a time, promotion of a finished recording only, a
truncated archive never given to a JVM, the class paths a recording JVM would refuse)
on files laid out as the JVM leaves them; then spark-submit for real: the first job
records the archive as its JVM exits, the next one maps it, and an archive the JVM
rejects (recorded for another class path) is logged and dropped while the batch still
commits.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_connectors.engine import jvm
from airflow_connectors.engine.spark import DRIVER_JAVA_OPTIONS, ingest_submit_conf

REPO = Path(__file__).resolve().parents[2]
APPLICATION = REPO / "airflow_connectors" / "engine" / "submit" / "ingest_batch.py"
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"


@pytest.fixture
def cds_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A CDS cache of the test's own (``[connectors] cds_dir``)."""
    folder = tmp_path / "cds"
    monkeypatch.setenv("AIRFLOW__CONNECTORS__CDS_DIR", str(folder))
    monkeypatch.delenv("AIRFLOW__CONNECTORS__DRIVER_CDS", raising=False)
    for var in ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH"):
        monkeypatch.delenv(var, raising=False)
    return folder


def java_options(master: str = "local[*]", **conf: str) -> str:
    return ingest_submit_conf(master, conf)["spark.driver.extraJavaOptions"]


def option_path(options: str, name: str) -> Path | None:
    m = re.search(rf"-XX:{name}=(\S+)", options)
    return Path(m.group(1)) if m else None


def finish_recording(rec: Path, size: int = 4096) -> None:
    """What a JVM leaves at exit: the archive, its header (magic first) written last."""
    rec.write_bytes(jvm.DYNAMIC_MAGIC + b"\0" * (size - 4))


def test_one_recording_at_a_time_then_the_archive_for_every_job(cds_dir: Path) -> None:
    first = java_options()
    assert first.startswith(DRIVER_JAVA_OPTIONS)
    rec = option_path(first, "ArchiveClassesAtExit")
    assert rec is not None and rec.parent == cds_dir
    assert "-Xlog:cds=off" in first  # the JVM's CDS chatter stays out of the job's output
    # While the first job runs (its JVM has not written the archive), others start plain.
    assert java_options() == DRIVER_JAVA_OPTIONS
    rec.write_bytes(b"\0" * 4096)  # being written: the header still zero
    assert java_options() == DRIVER_JAVA_OPTIONS
    assert rec.exists()

    finish_recording(rec)
    used = java_options()
    archive = option_path(used, "SharedArchiveFile")
    assert archive is not None and archive.is_file() and archive.suffix == ".jsa"
    assert not rec.exists()
    assert not list(cds_dir.glob("*.lock"))
    assert json.loads(archive.with_suffix(".json").read_text())["size"] == 4096
    assert java_options() == used
    # Standalone masters (client mode: the driver runs here) get it too; YARN does not.
    assert option_path(java_options("spark://127.0.0.1:7077"), "SharedArchiveFile") == archive
    assert java_options("yarn") == DRIVER_JAVA_OPTIONS
    assert ingest_submit_conf("local[*]", cds=False) == {
        "spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS
    }


def test_an_embedded_session_maps_a_finished_archive_and_never_records(cds_dir: Path) -> None:
    """``spark_session`` (the CLI's run, a job started without spark-submit) asks with
    ``record=False``: nothing while no archive is finished, no lock, no recording; the
    archive once a spark-submit recorded it."""
    assert jvm.driver_cds_options(record=False) == ""
    assert not list(cds_dir.glob("*.lock")) and not list(cds_dir.glob("*.rec"))
    rec = option_path(java_options(), "ArchiveClassesAtExit")  # a spark-submit records
    assert rec is not None
    assert jvm.driver_cds_options(record=False) == ""  # still being written
    finish_recording(rec)
    used = jvm.driver_cds_options(record=False)
    archive = option_path(used, "SharedArchiveFile")
    assert archive is not None and archive.is_file() and "-Xlog:cds=off" in used
    assert option_path(java_options(), "SharedArchiveFile") == archive


def test_a_truncated_archive_is_never_given_to_a_jvm(cds_dir: Path) -> None:
    rec = option_path(java_options(), "ArchiveClassesAtExit")
    assert rec is not None
    finish_recording(rec, 8192)
    archive = option_path(java_options(), "SharedArchiveFile")
    assert archive is not None
    # A JVM maps regions past the end of a truncated archive and dies of SIGBUS.
    with archive.open("r+b") as fh:
        fh.truncate(4096)
    options = java_options()
    assert option_path(options, "SharedArchiveFile") is None
    assert option_path(options, "ArchiveClassesAtExit") is not None  # recorded anew


def test_a_stale_recording_lock_is_taken_over_and_attempts_are_capped(
    cds_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for attempt in range(jvm.MAX_ATTEMPTS):
        rec = option_path(java_options(), "ArchiveClassesAtExit")
        assert rec is not None, f"attempt {attempt + 1}"
        assert java_options() == DRIVER_JAVA_OPTIONS
        # The job died before its JVM wrote the archive: its lock grows stale.
        (lock,) = cds_dir.glob("*.lock")
        old = time.time() - jvm.LOCK_STALE_SECONDS - 1
        os.utime(lock, (old, old))
    assert java_options() == DRIVER_JAVA_OPTIONS
    (off,) = cds_dir.glob("*.off")
    assert "did not produce an archive" in off.read_text()
    assert "class-data sharing is off" in caplog.text
    assert java_options() == DRIVER_JAVA_OPTIONS


def test_the_lock_of_a_job_that_is_gone_is_taken_over(cds_dir: Path) -> None:
    first = option_path(java_options(), "ArchiveClassesAtExit")
    assert first is not None
    (lock,) = cds_dir.glob("*.lock")
    assert java_options() == DRIVER_JAVA_OPTIONS  # its job (this process) still runs
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    host = lock.read_text().split()[1]
    lock.write_text(f"{gone.stdout.strip()} {host}\n")  # the job exited, its JVM wrote nothing
    second = option_path(java_options(), "ArchiveClassesAtExit")
    assert second is not None and second != first


def test_class_paths_a_recording_jvm_would_refuse_get_no_cds(
    cds_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A JVM recording an archive stops at start-up on a non-empty folder in its class path.
    assert java_options(**{"spark.driver.extraClassPath": "/opt/extra"}) == DRIVER_JAVA_OPTIONS
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.app.name x\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    assert java_options() == DRIVER_JAVA_OPTIONS
    monkeypatch.delenv("SPARK_CONF_DIR")
    monkeypatch.setenv("AIRFLOW__CONNECTORS__DRIVER_CDS", "false")
    assert java_options() == DRIVER_JAVA_OPTIONS
    monkeypatch.delenv("AIRFLOW__CONNECTORS__DRIVER_CDS")
    assert "ArchiveClassesAtExit" in java_options()


def test_the_key_follows_the_jars(tmp_path: Path) -> None:
    java, spark = jvm.java_home(), jvm.spark_home()
    assert java is not None and spark is not None
    fake = tmp_path / "spark"
    (fake / "jars").mkdir(parents=True)
    (fake / "jars" / "a.jar").write_bytes(b"a")
    key = jvm.archive_key(java, fake)
    assert key == jvm.archive_key(java, fake)
    (fake / "jars" / "b.jar").write_bytes(b"b")
    assert jvm.archive_key(java, fake) != key
    assert jvm.archive_key(java, spark).startswith("jdk")


# --- spark-submit, for real -------------------------------------------------------------


def submit(batch_id: int, store_url: str, tmp_path: Path) -> tuple[str, str]:
    """spark-submit of the ingest job as the operator runs it; returns its output and
    the driver's JVM options."""
    master = "local[1]"
    conf = {
        "spark.ui.enabled": "false",
        "spark.log.level": "WARN",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        **ingest_submit_conf(master),
    }
    cmd = [str(SPARK_SUBMIT), "--master", master]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd += [str(APPLICATION), "--batch-id", str(batch_id)]
    env = {
        **os.environ,
        "PATH": f"{SPARK_SUBMIT.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "AIRFLOW__CONNECTORS__STATE_STORE_URL": store_url,
    }
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert f"batch {batch_id} committed" in out, out[-4000:]
    # The job's timing lines: the session started with the job, what the batch waited.
    assert "Spark session ready in" in out
    assert re.search(r"the batch waited \d+\.\d s for the Spark session", out)
    assert "[cds" not in out  # the JVM's CDS messages are silenced
    return out, conf["spark.driver.extraJavaOptions"]


def other_class_path_archive(java: Path, spark: Path, target: Path) -> None:
    """A real dynamic archive of classes from another class path (Spark's launcher jar
    alone): valid, but not for spark-submit's class path."""
    jar = next((spark / "jars").glob("spark-launcher_*.jar"))
    subprocess.run(
        [
            str(java / "bin" / "java"),
            f"-XX:ArchiveClassesAtExit={target}",
            "-Xlog:cds=off",
            "-Xlog:cds+dynamic=off",
            "-cp",
            str(jar),
            "org.apache.spark.launcher.Main",  # no arguments: usage, exit status 1
        ],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert target.read_bytes()[:4] == jvm.DYNAMIC_MAGIC


@pytest.mark.spark
def test_spark_submit_records_maps_and_survives_a_rejected_archive(
    cds_dir: Path, tmp_path: Path
) -> None:
    from airflow_connectors.catalog import parse_pipeline
    from airflow_connectors.engine.discovery import context, discover
    from airflow_connectors.state.store import StateStore

    folder = tmp_path / "drop"
    folder.mkdir()
    spec = parse_pipeline(
        {
            "pipeline": "p",
            "tables": {
                "t": {
                    "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR"},
                    "connectors": [
                        {
                            "name": "files",
                            "transport": {
                                "name": "file_input",
                                "config": {"path": str(folder), "min_file_age": 0},
                            },
                            "format": {"name": "json", "config": {"update_format": "raw"}},
                        }
                    ],
                }
            },
        }
    )
    table = spec.table("t")
    ctx = context(spec, table, table.connectors[0], str(tmp_path / "wh"))
    store_url = f"sqlite:///{tmp_path / 'state.db'}"
    store = StateStore(store_url)

    def plan(n: int) -> int:
        (folder / f"f{n}.json").write_text(
            "".join(json.dumps({"id": n * 10 + i, "name": f"n{i}"}) + "\n" for i in range(10))
        )
        (batch_id,) = discover(store, ctx).batch_ids
        return batch_id

    try:
        # 1. The first job records the archive as its JVM exits.
        _out, options = submit(plan(1), store_url, tmp_path)
        rec = option_path(options, "ArchiveClassesAtExit")
        assert rec is not None
        assert rec.is_file() and rec.read_bytes()[:4] == jvm.DYNAMIC_MAGIC

        # 2. The next job's conf promotes it; its JVM maps it.
        out, options = submit(plan(2), store_url, tmp_path)
        archive = option_path(options, "SharedArchiveFile")
        assert archive is not None and archive.is_file() and not rec.exists()
        assert f"driver JVM maps its class-data-sharing archive {archive.name}" in out, out

        # 3. An archive the JVM rejects: logged, dropped, the batch commits all the same.
        java, spark = jvm.java_home(), jvm.spark_home()
        assert java is not None and spark is not None
        other = tmp_path / "other.jsa"
        other_class_path_archive(java, spark, other)
        shutil.copyfile(other, archive)
        meta = archive.with_suffix(".json")
        meta.write_text(json.dumps({"size": archive.stat().st_size}))
        out, options = submit(plan(3), store_url, tmp_path)
        assert option_path(options, "SharedArchiveFile") == archive
        assert "did not use its class-data-sharing archive" in out, out[-3000:]
        assert not archive.exists()
        st = store.status(ctx.ref)
        assert st is not None and st.total_records == 30
    finally:
        store.close()
