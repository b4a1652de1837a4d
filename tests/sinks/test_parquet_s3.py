"""Tables on object storage: the Parquet sink with the warehouse at ``s3://bucket/wh`` on
the moto S3 server (127.0.0.1). Executors write through pyarrow's S3 filesystem; parts
are staged under their final staged names and published by server-side copy to
deterministic names, so a re-run or a repeated publish overwrites, never duplicates.

The sink conformance kit SIGKILLs the ingest job (driver, JVM and Python workers) at
every fail point, in the middle of the publish too; the next run (on the session's
Spark, whose workers get the AWS variables with each job) leaves the table equal to the
source. The variables never appear on a command line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers import assert_parquet_landed

from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.settings import Settings
from airflow_connectors.sinks import _fs
from airflow_connectors.sinks.base import SinkUnwritable
from airflow_connectors.sinks.parquet import ParquetSink, ParquetSinkConfig
from airflow_connectors.testing.conformance import table_checksum
from airflow_connectors.testing.s3server import ACCESS_KEY, SECRET_KEY
from airflow_connectors.testing.sink_kit import S3Warehouse, SinkCase, SinkConformance

FILES = 3
ROWS = 1_000  # per file
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"}


@dataclass
class Source:
    folder: Path
    rows: pa.Table


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    folder = tmp_path_factory.mktemp("source")
    records = []
    for f in range(FILES):
        lines = []
        for i in range(f * ROWS, (f + 1) * ROWS):
            records.append({"id": i, "name": f"name-{i}-{'x' * (i % 13)}", "amount": i / 4})
            lines.append(json.dumps(records[-1]))
        (folder / f"part-{f:03d}.json").write_text("\n".join(lines) + "\n")
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])
    return Source(folder, pa.Table.from_pylist(records, schema=schema))


@pytest.fixture
def aws_env(s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process (and the jobs it starts) pointed at the test server, as users point
    theirs at S3 or MinIO: the standard AWS variables."""
    env = s3_server.env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return dict(env)


def spec_doc(folder: Path, **connector: Any) -> dict[str, Any]:
    return {
        "pipeline": "p",
        "tables": {
            "events": {
                "columns": COLUMNS,
                "connectors": [
                    {
                        "name": "files",
                        "tasks_max": 1,
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(folder), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                        **connector,
                    }
                ],
            }
        },
    }


def keys(s3: Any, bucket: str, prefix: str) -> dict[str, str]:
    """Object key -> ETag under ``prefix`` (folder markers, keys ending in '/', left out)."""
    found: dict[str, str] = {}
    for page in s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            if not obj["Key"].endswith("/"):
                found[obj["Key"]] = obj["ETag"]
    return found


def read(url: str) -> pa.Table:
    dataset = _fs.parquet_dataset(url)
    return pa.table({}) if dataset is None else dataset.to_table()


def assert_equals_source(url: str, source: Source) -> None:
    data = read(url).select(["id", "name", "amount"])
    assert data.num_rows == source.rows.num_rows
    assert len(set(data.column("id").to_pylist())) == source.rows.num_rows  # no duplicates
    assert table_checksum(data, "id") == table_checksum(source.rows, "id")


# --- the filesystem layer ----------------------------------------------------------


def test_filesystem_of_paths_and_urls(aws_env: dict[str, str], tmp_path: Path) -> None:
    fs, path = _fs.filesystem(str(tmp_path / "wh"))
    assert fs.type_name == "local" and path == str(tmp_path / "wh")
    fs, path = _fs.filesystem("s3://lake/wh/p/")
    assert _fs.is_s3(fs) and path == "lake/wh/p"
    assert _fs.join("s3://lake/wh/", "p", "t") == "s3://lake/wh/p/t"
    assert _fs.join("/data/wh", "p", "t") == "/data/wh/p/t"
    assert _fs.bucket_of("s3://lake/wh") == "lake" and _fs.bucket_of("/data") == ""
    with pytest.raises(ValueError, match="unsupported URL scheme 'hdfs'"):
        _fs.filesystem("hdfs://lake/wh")
    with pytest.raises(ValueError, match="needs a bucket"):
        _fs.filesystem("s3:///wh")
    assert _fs.aws_environment()["AWS_ENDPOINT_URL"] == aws_env["AWS_ENDPOINT_URL"]


def test_settings_keep_a_warehouse_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__CONNECTORS__WAREHOUSE", "s3://lake/wh/")
    assert Settings.load().warehouse == "s3://lake/wh"
    assert Settings.load(warehouse=f"file://{tmp_path}/wh").warehouse == f"{tmp_path}/wh"


# --- the sink on S3 ------------------------------------------------------------------


def sink(warehouse: str) -> ParquetSink:
    spec = parse_pipeline(spec_doc(Path("/nonexistent")))
    return ParquetSink(ParquetSinkConfig(), pipeline="p", table=spec.tables[0], warehouse=warehouse)


def stage(s: ParquetSink, batch_id: int, attempt: str, tables: list[pa.Table]) -> None:
    s.prepare(batch_id, attempt)
    for part, table in enumerate(tables):
        w = s.writer(batch_id, attempt, part, "rows")
        w.write(table)
        assert w.close() == table.num_rows


def test_publish_again_overwrites_the_same_objects(
    aws_env: dict[str, str], s3_server: Any, s3_bucket: str, source: Source
) -> None:
    """Parts are uploaded to their staged names and copied to part-<batch>-<part>; a
    second publish of the batch (a roll-forward beside a zombie) writes the same keys."""
    s = sink(f"s3://{s3_bucket}/wh")
    assert s.location() == f"s3://{s3_bucket}/wh/p/events" and s.on_object_store
    halves = [source.rows.slice(0, 1500), source.rows.slice(1500)]
    stage(s, 7, "1-a", halves)
    staged = keys(s3_server, s3_bucket, "wh/p/_staging/")
    assert sorted(k.rsplit("/", 1)[1] for k in staged) == [
        "_probe",
        "part-0000000007-00000.parquet",
        "part-0000000007-00001.parquet",
    ]
    assert not [k for k in staged if ".tmp" in k]  # no temporary names on S3
    s.publish(7, "1-a")
    table = keys(s3_server, s3_bucket, "wh/p/events/")
    assert sorted(table) == [
        "wh/p/events/part-0000000007-00000.parquet",
        "wh/p/events/part-0000000007-00001.parquet",
    ]
    assert keys(s3_server, s3_bucket, "wh/p/_staging/") == {}
    s.publish(7, "1-a")  # again: nothing staged any more, nothing changes
    assert keys(s3_server, s3_bucket, "wh/p/events/") == table

    stage(s, 7, "1-a", halves)  # the same attempt staged and published once more
    s.publish(7, "1-a")
    assert keys(s3_server, s3_bucket, "wh/p/events/") == table  # same keys, same bytes
    assert_equals_source(s.location(), source)
    assert keys(s3_server, s3_bucket, "wh/p/_staging/") == {}

    # A discarded attempt leaves the table alone.
    stage(s, 8, "1-b", [source.rows.slice(0, 10)])
    s.discard(8)
    assert keys(s3_server, s3_bucket, "wh/p/_staging/") == {}
    assert keys(s3_server, s3_bucket, "wh/p/events/") == table


def test_missing_bucket_or_endpoint_is_one_line(
    aws_env: dict[str, str], s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SinkUnwritable) as missing:
        sink("s3://no-such-bucket-h3/wh").prepare(1, "1-a")
    message = str(missing.value)
    assert message == (
        "table events: cannot write s3://no-such-bucket-h3/wh/p/events: bucket "
        "no-such-bucket-h3 does not exist; create it, or point the warehouse "
        "(--warehouse, [connectors] warehouse) or the table's sink path at an existing "
        "bucket"
    )

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(SinkUnwritable) as unreachable:
        sink(f"s3://{s3_bucket}/wh").prepare(1, "1-a")
    message = str(unreachable.value)
    assert "\n" not in message and SECRET_KEY not in message
    assert message.startswith(f"table events: cannot write s3://{s3_bucket}/wh/p/")
    assert "the S3 endpoint http://127.0.0.1:9 cannot be reached; check AWS_ENDPOINT_URL" in (
        message
    )


# --- the CLI, end to end ------------------------------------------------------------


def cli(*args: str, env: dict[str, str], home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_connectors.cli", *args],
        env={**os.environ, **env, "AIRFLOW_HOME": str(home), "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_run_into_an_s3_warehouse(
    aws_env: dict[str, str], s3_server: Any, s3_bucket: str, source: Source, tmp_path: Path
) -> None:
    """``airflow-connectors run`` with the warehouse on S3 (AIRFLOW__CONNECTORS__WAREHOUSE):
    rows and dead letters land as deterministic objects, readable from S3; a second run
    adds nothing; no secret is printed."""
    folder = tmp_path / "in"
    folder.mkdir()
    for f in source.folder.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    (folder / "zz-bad.json").write_text('{"id": 99999, "name": "bad", "amount": "x"}\n')
    spec = tmp_path / "p.json"
    spec.write_text(json.dumps(spec_doc(folder, errors={"tolerance": "all"})))
    env = {
        **aws_env,
        "AIRFLOW__CONNECTORS__WAREHOUSE": f"s3://{s3_bucket}/wh",
        "AIRFLOW__CONNECTORS__STATE_STORE_URL": f"sqlite:///{tmp_path / 'state.db'}",
        "AIRFLOW__CONNECTORS__SPARK_MASTER": "local[1]",
    }
    out = cli("run", str(spec), env=env, home=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert f"warehouse s3://{s3_bucket}/wh" in out.stdout
    assert f"table events: {FILES * ROWS} rows at s3://{s3_bucket}/wh/p/events" in out.stdout
    assert f"table events__errors: 1 rows at s3://{s3_bucket}/wh/p/events__errors" in out.stdout
    for secret in (SECRET_KEY, ACCESS_KEY):
        assert secret not in out.stdout + out.stderr

    assert_equals_source(f"s3://{s3_bucket}/wh/p/events", source)
    [dead] = read(f"s3://{s3_bucket}/wh/p/events__errors").to_pylist()
    assert dead["source_key"].endswith("zz-bad.json") and dead["record_number"] == 1
    table = keys(s3_server, s3_bucket, "wh/p/events/")
    names = [k.rsplit("/", 1)[1] for k in table]
    assert names and all(re.fullmatch(r"part-\d{10}-\d{5}\.parquet", n) for n in names), names
    assert keys(s3_server, s3_bucket, "wh/p/_staging/") == {}

    again = cli("run", str(spec), env=env, home=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 batch(es) committed" in again.stdout
    assert keys(s3_server, s3_bucket, "wh/p/events/") == table


def test_run_into_a_missing_bucket_fails_in_one_line(
    aws_env: dict[str, str], source: Source, tmp_path: Path
) -> None:
    spec = tmp_path / "p.json"
    spec.write_text(json.dumps(spec_doc(source.folder)))
    out = cli(
        "run",
        str(spec),
        "--warehouse",
        "s3://no-such-bucket-h3/wh",
        "--state-store-url",
        f"sqlite:///{tmp_path / 'state.db'}",
        env=aws_env,
        home=tmp_path,
    )
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and SECRET_KEY not in out.stdout + out.stderr
    assert (
        "events.files: connector p.events.files: table events: cannot write "
        "s3://no-such-bucket-h3/wh/p/events: bucket no-such-bucket-h3 does not exist; "
        "create it" in out.stderr
    ), out.stderr


# --- the sink conformance kit on S3 ----------------------------------------------------


class TestParquetSinkOnS3(S3Warehouse, SinkConformance):
    """Crashes at every fail point (``mid_publish``: one part copied into the table, the
    kill before the next), concurrent publishers, a polling reader, an added column, with
    the warehouse on the moto S3 server. Publish copies parts one by one, so a reader may
    see part of a batch while it runs (``atomic_publish = False``)."""

    sink_name = "parquet"
    sink_fail_points = ("mid_publish",)
    atomic_publish = False

    def check_landed(self, case: SinkCase) -> None:
        assert_parquet_landed(case)

    def test_aws_variables_never_on_a_command_line(self, killed: dict[str, SinkCase]) -> None:
        """The AWS variables reached the killed jobs (Spark Connect clients: the storage
        kits run there, see OtherStorage) and their tasks on the server through their
        environment, never a command line."""
        lines = [line for case in killed.values() for line in case.command_lines]
        assert [line for line in lines if "python" in line.split(" ", 1)[0]], lines
        assert not [line for line in lines if SECRET_KEY in line or ACCESS_KEY in line]
