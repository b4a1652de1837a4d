"""``delta_table_input`` on Delta tables the tests write with ``deltalake``, in a local
folder and on moto's S3 server (the ``s3_server`` fixture): the conformance kit, then
snapshots at a version and at a time, following appended versions exactly once,
``end_version``, ``filter``, versions that remove or compact files, and a bad URI."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_connectors.testing.conformance import (
    Connector,
    Source,
    TransportConformance,
    assert_same_records,
)
from airflow_connectors.testing.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server
from airflow_connectors.transports import Cursor, Limits
from airflow_connectors.transports.delta_table_input import key_version

pytestmark = pytest.mark.sources

COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE", "part": "VARCHAR"}
SCHEMA = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64()), ("part", pa.string())]
)


def rows(ids: range) -> pa.Table:
    """Rows ``ids`` of the test table: partition ``a`` for even ids, ``b`` for odd."""
    return pa.table(
        {
            "id": list(ids),
            "name": [f"n{i}" for i in ids],
            "amount": [i / 2 for i in ids],
            "part": ["a" if i % 2 == 0 else "b" for i in ids],
        },
        schema=SCHEMA,
    )


class Delta:
    """A Delta table the test writes: one version per ``append``."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.uri = uri
        self.options = storage_options

    def append(self, ids: range, *, partitioned: bool = True) -> None:
        from deltalake import write_deltalake

        write_deltalake(
            self.uri,
            rows(ids),
            mode="append",
            partition_by=["part"] if partitioned else None,
            storage_options=self.options,
        )

    def overwrite(self, ids: range) -> None:
        from deltalake import write_deltalake

        write_deltalake(
            self.uri,
            rows(ids),
            mode="overwrite",
            partition_by=["part"],
            storage_options=self.options,
        )

    def table(self) -> Any:
        from deltalake import DeltaTable

        return DeltaTable(self.uri, storage_options=self.options)


def local(tmp_path: Path) -> Delta:
    return Delta(str(tmp_path / f"delta-{uuid.uuid4().hex[:8]}"))


def source_of(delta: Delta, ids: range, config: dict[str, Any], **kw: Any) -> Source:
    return Source(
        transport="delta_table_input",
        config={"uri": delta.uri, **config},
        columns=COLUMNS,
        records=rows(ids),
        key_column="id",
        **kw,
    )


def connector(tmp_path: Path, delta: Delta, config: dict[str, Any], **kw: Any) -> Connector:
    """The engine and a state store over ``delta`` with ``config``."""
    name = uuid.uuid4().hex[:6]
    return Connector(source_of(delta, range(0), config, **kw), tmp_path / f"connector-{name}")


def landed(c: Connector, ids: range | list[int], what: str) -> None:
    expected = rows(range(0)) if not ids else pa.concat_tables([rows(range(i, i + 1)) for i in ids])
    assert_same_records(c.table(), expected, "id", what)


INVALID = {
    "": {"uri": "/x", "mode": "snapshot", "version": 1, "datetime": "2024-01-01T00:00:00Z"},
    "mode": {"uri": "/x", "mode": "cdc"},
    "filter": {"uri": "/x", "mode": "snapshot", "filter": "lower(name) = 'a'"},
    "uri": {"uri": "gs://bucket/t", "mode": "snapshot"},
}


class TestDeltaTableInput(TransportConformance):
    """The conformance kit on a local, partitioned table of three versions."""

    @pytest.fixture
    def source(self, tmp_path: Path) -> Source:
        delta = local(tmp_path)
        for part in (range(0, 7), range(7, 15), range(15, 24)):
            delta.append(part)
        return source_of(
            delta,
            range(24),
            {"mode": "snapshot"},
            unbounded_config={"uri": delta.uri, "mode": "snapshot_and_follow"},
            invalid_configs=INVALID,
        )


@pytest.fixture
def s3_delta(s3_server: S3Server, s3_bucket: str) -> Delta:
    options = {
        "AWS_ENDPOINT_URL": s3_server.endpoint_url,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": REGION,
        "AWS_ALLOW_HTTP": "true",
    }
    return Delta(f"s3://{s3_bucket}/tables/events", options)


def s3_config(s3_server: S3Server, **config: Any) -> dict[str, Any]:
    return {
        "endpoint_url": s3_server.endpoint_url,
        "region": REGION,
        "aws_access_key_id": ACCESS_KEY,
        "aws_secret_access_key": SECRET_KEY,
        **config,
    }


class TestDeltaTableInputOnS3(TransportConformance):
    """The conformance kit on the S3-compatible server (endpoint and keys in the config,
    so the crash check's ingest job reaches it too)."""

    @pytest.fixture
    def source(self, s3_server: S3Server, s3_delta: Delta) -> Source:
        s3_delta.append(range(0, 5))
        s3_delta.append(range(5, 12), partitioned=True)
        return source_of(
            s3_delta,
            range(12),
            s3_config(s3_server, mode="snapshot"),
            unbounded_config={"uri": s3_delta.uri, **s3_config(s3_server, mode="follow")},
        )


# --- snapshots -------------------------------------------------------------------------


def test_snapshot_at_a_version_reads_that_version_only(tmp_path: Path) -> None:
    delta = local(tmp_path)
    delta.append(range(0, 5))
    delta.append(range(5, 10))
    delta.append(range(10, 15))
    c = connector(tmp_path, delta, {"mode": "snapshot", "version": 1})
    c.drain()
    landed(c, range(10), "snapshot at version 1")
    assert c.finalize(), "a snapshot ends once its files are committed"
    keys = {key_version(k) for k in c.store.cursor(c.ref).offsets}
    assert keys == {1}, f"snapshot keys carry the snapshot's version: {keys}"


def test_snapshot_at_a_datetime_reads_the_version_current_then(tmp_path: Path) -> None:
    delta = local(tmp_path)
    delta.append(range(0, 5))
    time.sleep(0.01)  # distinct commit timestamps (milliseconds), not synchronisation
    delta.append(range(5, 10))
    time.sleep(0.01)
    delta.append(range(10, 15))
    commits = {h["version"]: h["timestamp"] for h in delta.table().history()}
    at = dt.datetime.fromtimestamp(commits[1] / 1000, dt.UTC).isoformat()
    c = connector(tmp_path, delta, {"mode": "snapshot", "datetime": at})
    c.drain()
    landed(c, range(10), f"snapshot at {at}")
    before = dt.datetime.fromtimestamp(commits[0] / 1000 - 3600, dt.UTC).isoformat()
    early = connector(tmp_path, delta, {"mode": "snapshot", "datetime": before})
    with pytest.raises(ValueError, match="has no version at datetime"):
        early.discover()


def test_snapshot_without_version_stays_at_the_first_runs_version(tmp_path: Path) -> None:
    delta = local(tmp_path)
    delta.append(range(0, 4))
    c = connector(tmp_path, delta, {"mode": "snapshot"})
    found = c.discover()
    delta.append(range(4, 8))  # after the first discovery: not part of the snapshot
    c.run(found.batch_ids)
    c.drain()
    landed(c, range(4), "snapshot of the first run's version")
    assert c.finalize()


# --- follow ----------------------------------------------------------------------------


def test_follow_reads_each_appended_version_exactly_once(tmp_path: Path) -> None:
    delta = local(tmp_path)
    delta.append(range(0, 5))  # version 0: before the connector starts, not read
    c = connector(tmp_path, delta, {"mode": "follow"})
    c.drain()  # plans the start marker at version 0
    landed(c, [], "follow before any new version")
    delta.append(range(5, 9))
    delta.append(range(9, 20))
    c.drain()
    landed(c, range(5, 20), "after versions 1 and 2")
    assert not c.finalize(), "follow without end_version never ends"
    delta.append(range(20, 23), partitioned=True)
    found = c.discover()
    assert found.batch_ids
    c.run(found.batch_ids)
    c.drain()
    landed(c, range(5, 23), "after version 3")
    assert c.status().total_records == 18
    assert not c.list_work(), "nothing new once every version is committed"


def test_follow_from_a_version_and_snapshot_and_follow(tmp_path: Path) -> None:
    delta = local(tmp_path)
    for part in (range(0, 3), range(3, 6), range(6, 9)):
        delta.append(part)
    follow = connector(tmp_path, delta, {"mode": "follow", "version": 1})
    both = connector(tmp_path, delta, {"mode": "snapshot_and_follow", "version": 1})
    follow.drain()
    both.drain()
    landed(follow, range(6, 9), "follow after version 1")
    landed(both, range(9), "snapshot at 1, then follow")
    delta.append(range(9, 12))
    follow.drain()
    both.drain()
    landed(follow, range(6, 12), "follow after version 3")
    landed(both, range(12), "snapshot_and_follow after version 3")


def test_end_version_ends_the_input_once_reached_and_committed(tmp_path: Path) -> None:
    delta = local(tmp_path)
    delta.append(range(0, 2))
    c = connector(tmp_path, delta, {"mode": "follow", "version": 0, "end_version": 2})
    assert c.transport().bounded
    c.drain()
    assert not c.finalize(), "end of input before the table reached end_version"
    delta.append(range(2, 5))  # version 1
    c.drain()
    assert not c.finalize(), "end of input at version 1 of end_version 2"
    delta.append(range(5, 7))  # version 2, the last one read
    delta.append(range(7, 9))  # version 3, after end_version
    c.drain()
    landed(c, range(2, 7), "versions 1 and 2")
    assert c.finalize(), "no end of input once end_version is committed"
    assert c.status().end_of_input


# --- filter ----------------------------------------------------------------------------


def test_filter_keeps_matching_rows_of_snapshot_and_followed_versions(tmp_path: Path) -> None:
    delta = local(tmp_path)
    delta.append(range(0, 10))
    # `part` is a partition column (from the log), `amount` and `name` are in the files.
    condition = "part = 'a' AND amount >= 2 AND name NOT IN ('n8')"
    c = connector(tmp_path, delta, {"mode": "snapshot_and_follow", "filter": condition})
    c.drain()
    landed(c, [4, 6], "filtered snapshot")
    delta.append(range(10, 16))
    c.drain()
    landed(c, [4, 6, 10, 12, 14], "filtered follow")
    assert c.status().total_records == 5


def test_filter_on_a_column_the_table_lacks_is_an_error(tmp_path: Path) -> None:
    delta = local(tmp_path)
    delta.append(range(0, 3))
    c = connector(tmp_path, delta, {"mode": "snapshot", "filter": "colour = 'red'"})
    with pytest.raises(ValueError, match="the filter names colour, which the table does not"):
        c.list_work()


# --- versions that remove or rewrite files --------------------------------------------


def test_compaction_is_passed_over_and_an_overwrite_stops_following(tmp_path: Path) -> None:
    delta = local(tmp_path)
    for part in (range(0, 3), range(3, 6), range(6, 9)):
        delta.append(part)
    c = connector(tmp_path, delta, {"mode": "snapshot_and_follow"})
    c.drain()
    landed(c, range(9), "snapshot")
    delta.table().optimize.compact()  # version 3: dataChange false, same rows
    delta.append(range(9, 11))  # version 4
    c.drain()
    landed(c, range(11), "after a compaction and an append")
    delta.overwrite(range(100, 104))  # version 5: removes every file
    with pytest.raises(ValueError, match=r"version 5 \(WRITE\) removes rows") as raised:
        c.discover()
    assert "\n" not in str(raised.value)
    assert "on_remove" in str(raised.value)
    landed(c, range(11), "nothing of the overwrite")


def test_on_remove_skip_version_reports_the_version_once_and_goes_on(tmp_path: Path) -> None:
    delta = local(tmp_path)
    delta.append(range(0, 3))
    c = connector(tmp_path, delta, {"mode": "follow", "version": 0, "on_remove": "skip_version"})
    delta.overwrite(range(100, 102))  # version 1: skipped
    c.drain()
    c.drain()  # the version's marker is committed: not reported again
    delta.append(range(3, 5))  # version 2
    c.drain()
    landed(c, range(3, 5), "the overwrite skipped")
    status = c.status()
    messages = [e.get("message", "") for e in status.transport_errors]
    assert status.num_transport_errors == 1, f"reported {status.num_transport_errors}: {messages}"
    assert "version 1 (WRITE) removes rows" in messages[0], messages


def test_max_records_bounds_a_discovery(tmp_path: Path) -> None:
    delta = local(tmp_path)
    for part in (range(0, 4), range(4, 8), range(8, 12)):
        delta.append(part, partitioned=False)
    transport = connector(tmp_path, delta, {"mode": "snapshot"}).transport()
    items = list(transport.discover(Cursor(), Limits(max_records=5)))
    assert [i.records for i in items] == [4, 4], "files are listed until 5 records are handed out"
    c = connector(tmp_path, delta, {"mode": "snapshot"}, connector={"max_batch_size": 4})
    found = c.discover()
    plans = [b.plan for b in c.store.pending_batches(c.ref)]
    assert [len(p.items) for p in plans] == [1, 1, 1], "one 4-record file per batch"
    c.run(found.batch_ids)
    landed(c, range(12), "batches of max_batch_size")


def test_on_remove_ingest_added_reads_the_overwrites_files(tmp_path: Path) -> None:
    delta = local(tmp_path)
    delta.append(range(0, 3))
    c = connector(tmp_path, delta, {"mode": "follow", "version": 0, "on_remove": "ingest_added"})
    delta.overwrite(range(100, 102))
    c.drain()
    landed(c, range(100, 102), "the overwrite's rows")


# --- errors ------------------------------------------------------------------------------


def test_a_bad_uri_fails_in_one_line(tmp_path: Path) -> None:
    c = connector(tmp_path, Delta(str(tmp_path / "nothing-here")), {"mode": "snapshot"})
    with pytest.raises(FileNotFoundError) as raised:
        c.discover()
    message = str(raised.value)
    assert "\n" not in message and "does not exist" in message and "nothing-here" in message


def test_a_version_after_the_latest_is_an_error(tmp_path: Path) -> None:
    delta = local(tmp_path)
    delta.append(range(0, 3))
    c = connector(tmp_path, delta, {"mode": "snapshot", "version": 7})
    with pytest.raises(ValueError, match="has no version 7 yet"):
        c.list_work()


# --- S3 ----------------------------------------------------------------------------------


def test_follow_on_s3_reads_appended_versions_exactly_once(
    tmp_path: Path, s3_server: S3Server, s3_delta: Delta
) -> None:
    s3_delta.append(range(0, 4))
    c = connector(
        tmp_path, s3_delta, s3_config(s3_server, mode="snapshot_and_follow", filter="id <> 2")
    )
    c.drain()
    landed(c, [0, 1, 3], "snapshot on S3")
    s3_delta.append(range(4, 8))
    s3_delta.append(range(8, 9))
    c.drain()
    landed(c, [0, 1, 3, 4, 5, 6, 7, 8], "follow on S3")


def test_partition_values_that_need_escaping_are_read(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    delta = local(tmp_path)
    odd = pa.table(
        {"id": [1, 2, 3], "name": ["x", "y", "z"], "part": ["a b", "c%d", "é/x"]},
    )
    write_deltalake(delta.uri, odd, partition_by=["part"])
    c = connector(tmp_path, delta, {"mode": "snapshot_and_follow", "filter": "part <> 'c%d'"})
    write_deltalake(delta.uri, odd.set_column(0, "id", pa.array([4, 5, 6])), mode="append")
    c.drain()
    got = c.table().sort_by("id")
    assert got.column("id").to_pylist() == [1, 3, 4, 6]
    assert got.column("part").to_pylist() == ["a b", "é/x", "a b", "é/x"]


def test_s3_credentials_from_an_airflow_connection(
    tmp_path: Path, s3_server: S3Server, s3_delta: Delta, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    s3_delta.append(range(0, 3))
    config = {"mode": "snapshot", "aws_conn_id": "delta_lake"}
    missing = connector(tmp_path, s3_delta, config)
    with pytest.raises(OSError, match="delta_table_input: aws_conn_id 'delta_lake' names no"):
        missing.list_work()
    extra = {"region_name": REGION, "endpoint_url": s3_server.endpoint_url}
    conn = {"conn_type": "aws", "login": ACCESS_KEY, "password": SECRET_KEY, "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_LAKE", json.dumps(conn))
    c = connector(tmp_path, s3_delta, config)
    c.drain()
    landed(c, range(3), "snapshot through the connection")


def test_filters_on_a_typed_partition_column_and_snapshot_filter(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    delta = local(tmp_path)

    def write(ids: list[int], years: list[int]) -> None:
        data = [{"id": i, "name": f"n{i}", "year": y} for i, y in zip(ids, years, strict=True)]
        write_deltalake(delta.uri, pa.Table.from_pylist(data), mode="append", partition_by=["year"])

    write([1, 2, 3, 4], [999, 2023, 2024, 10000])  # text order differs from number order
    # `year` is not a table column: compared as the Delta table's long, not as text.
    config = {"mode": "snapshot_and_follow", "version": 0, "filter": "year >= 2024"}
    c = connector(tmp_path, delta, {**config, "snapshot_filter": "id <> 4"})
    write([5, 6], [2025, 100])
    c.drain()
    got = sorted(c.table().column("id").to_pylist())
    assert got == [3, 5], f"year >= 2024 everywhere, id <> 4 in the snapshot only: {got}"
    with pytest.raises(ValueError, match="snapshot_filter applies to the snapshot modes"):
        connector(tmp_path, delta, {"mode": "follow", "snapshot_filter": "id > 1"})


def test_deletion_vectors_are_rejected_in_snapshot_and_follow(tmp_path: Path) -> None:
    import json

    delta = local(tmp_path)
    delta.append(range(0, 3))
    follow = connector(tmp_path, delta, {"mode": "follow", "version": 0})
    # Version 1 turns deletion vectors on, as Spark or Databricks do (delta-rs writes none).
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["deletionVectors"],
        "writerFeatures": ["deletionVectors"],
    }
    commit = Path(delta.uri) / "_delta_log" / f"{1:020d}.json"
    commit.write_text(
        json.dumps({"commitInfo": {"timestamp": 1, "operation": "SET TBLPROPERTIES"}})
        + "\n"
        + json.dumps({"protocol": protocol})
        + "\n"
    )
    snapshot = connector(tmp_path, delta, {"mode": "snapshot"})
    for c in (snapshot, follow):
        with pytest.raises(ValueError, match="uses deletion vectors") as raised:
            c.discover()
        assert "\n" not in str(raised.value)
    landed(follow, [], "nothing read past deletion vectors")


# --- the filter subset ---------------------------------------------------------------------

FILTER_ROWS = pa.table(
    {
        "id": [1, 2, 3, None],
        "s": ["a", "b", "o'k", None],
        "ts": pa.array([0, 400 * 86_400_000_000, None, 5], pa.timestamp("us", "UTC")),
        "flag": [True, False, None, True],
    }
)


@pytest.mark.parametrize(
    ("condition", "ids"),
    [
        ("id > 1", [2, 3]),
        ("1 < id", [2, 3]),
        ("id != 2 AND s IS NOT NULL", [1, 3]),
        ("s IN ('a', 'o''k')", [1, 3]),
        ("NOT (s IN ('a'))", [2, 3]),  # NULL IN (...) is NULL: dropped under NOT too
        ("NOT (id BETWEEN 2 AND 3)", [1]),
        ("ts >= TIMESTAMP '1971-01-01 00:00:00'", [2]),
        ("ts < '1970-01-01T01:00:00+01:00'", []),
        ("flag OR id = 2", [1, 2, None]),
        ('"id" <= 2.5', [1, 2]),
        ("s IS NULL", [None]),
    ],
)
def test_filter_subset_evaluates_as_sql(condition: str, ids: list[int | None]) -> None:
    from airflow_connectors.transports import _delta_filter

    tree = _delta_filter.parse(condition)
    got = FILTER_ROWS.filter(_delta_filter.expression(tree, FILTER_ROWS.schema))
    assert got.column("id").to_pylist() == ids


@pytest.mark.parametrize(
    ("condition", "says"),
    [
        ("lower(s) = 'a'", "function calls (lower(...)) are not supported"),
        ("id = NULL", "write IS NULL or IS NOT NULL"),
        ("id = s", "comparing two columns is not supported"),
        ("id + 1 > 2", "operator '+' (position 4) is not supported"),
        ("s LIKE 'a%'", "'LIKE' at position 3 is not supported"),
        ("id > 1 extra", "expected AND, OR or the end of the filter at position 8"),
    ],
)
def test_filter_outside_the_subset_is_rejected_in_one_line(condition: str, says: str) -> None:
    from airflow_connectors.transports._delta_filter import FilterError, parse

    with pytest.raises(FilterError) as raised:
        parse(condition)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_following_past_a_cleaned_up_commit_is_an_error(tmp_path: Path) -> None:
    delta = local(tmp_path)
    for part in (range(0, 2), range(2, 4), range(4, 6)):
        delta.append(part)
    c = connector(tmp_path, delta, {"mode": "follow", "version": 0})
    delta.table().create_checkpoint()  # at version 2; log cleanup may now drop 0 and 1
    (Path(delta.uri) / "_delta_log" / f"{1:020d}.json").unlink()
    with pytest.raises(FileNotFoundError, match="the commit of version 1 is gone") as raised:
        c.discover()
    assert "\n" not in str(raised.value)
    later = connector(tmp_path, delta, {"mode": "follow", "version": 1})
    later.drain()
    landed(later, range(4, 6), "following from after the cleaned-up commit")


def test_a_relative_uri_is_relative_to_the_spec_file(tmp_path: Path) -> None:
    from airflow_connectors.catalog import parse_pipeline

    delta = Delta(str(tmp_path / "tables" / "orders"))
    delta.append(range(0, 3))
    doc = source_of(delta, range(3), {"mode": "snapshot", "start_version": 0}).pipeline_doc()
    doc["tables"]["t"]["connectors"][0]["transport"]["config"]["uri"] = "tables/orders"
    spec = parse_pipeline(doc, base_dir=tmp_path)
    config = spec.tables[0].connectors[0].transport.config
    assert config["uri"] == str(tmp_path / "tables" / "orders") and config["version"] == 0


def test_s3_settings_from_the_aws_environment(
    tmp_path: Path, s3_server: S3Server, s3_delta: Delta, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3_delta.append(range(0, 3))
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    c = connector(tmp_path, s3_delta, {"mode": "snapshot_and_follow"})
    c.drain()
    s3_delta.append(range(3, 5))
    c.drain()
    landed(c, range(5), "snapshot and follow with the AWS_* environment")
