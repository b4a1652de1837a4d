"""``s3_input`` against moto's S3 server on 127.0.0.1 (the ``s3_server`` fixture): the
conformance kit, Aiven's watermark listing and the complete re-list, zero-byte objects,
byte ranges, resume mid-object after a SIGKILL, follow mode, refused credentials and
Airflow connections from the environment, and a pipeline run into a Parquet table."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import pyarrow as pa
import pytest
from helpers import read_table, run

from airflow_connectors.catalog import load_pipeline
from airflow_connectors.spec.redact import mask_config, secret_fields, secret_values
from airflow_connectors.testing import jobs
from airflow_connectors.testing.conformance import (
    Connector,
    Source,
    TransportConformance,
    assert_same_records,
)
from airflow_connectors.testing.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server
from airflow_connectors.transports import Cursor, KeyOffset, Limits, WorkItem, _s3
from airflow_connectors.transports.s3_input import S3InputConfig, S3InputTransport

COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"}
JSON = {"name": "json", "config": {"update_format": "raw"}}


def json_lines(ids: range) -> bytes:
    return "".join(
        json.dumps({"id": i, "name": f"n{i}", "amount": i / 4}) + "\n" for i in ids
    ).encode()


def rows(ids: range) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}", "amount": i / 4} for i in ids]


def put(s3: S3Server, bucket: str, key: str, body: bytes) -> None:
    s3.client().put_object(Bucket=bucket, Key=key, Body=body)


def source_of(s3: S3Server, bucket: str, records: range, **config: Any) -> Source:
    cfg = s3.config(bucket, **{"relist_margin_s": 0, **config})
    return Source(
        transport="s3_input",
        config=cfg,
        columns=COLUMNS,
        format=JSON,
        records=rows(records),
        key_column="id",
        unbounded_config={**cfg, "follow": True},
        invalid_configs={
            "relist_every": {**cfg, "relist_every": 0},
            "max_concurrent_fetches": {**cfg, "max_concurrent_fetches": 0},
            "bucket_name": {**cfg, "bucket_name": "Not_A_Bucket"},
            "compression": {**cfg, "compression": "lz4"},
            # prefix and key both, or neither; half a key pair; two ways to authenticate.
            "": {**cfg, "key": "x.json"},
        },
    )


def transport(s3: S3Server, bucket: str, **config: Any) -> S3InputTransport:
    cfg = S3InputConfig.model_validate(s3.config(bucket, **{"relist_margin_s": 0, **config}))
    return S3InputTransport(cfg, None)  # type: ignore[arg-type]


def listed(t: S3InputTransport, cursor: Cursor, **limits: Any) -> list[WorkItem]:
    return list(t.discover(cursor, Limits(now=time.time(), **limits)))


class TestS3Input(TransportConformance):
    """Three JSON-lines objects under a prefix (one in a 'folder'), plus an empty object
    and one outside the prefix that must not be read."""

    @pytest.fixture
    def source(self, s3_server: S3Server, s3_bucket: str) -> Source:
        put(s3_server, s3_bucket, "drop/2026/a.json", json_lines(range(0, 200)))
        put(s3_server, s3_bucket, "drop/2026/11/b.json", json_lines(range(200, 400)))
        put(s3_server, s3_bucket, "drop/c.json", json_lines(range(400, 600)))
        put(s3_server, s3_bucket, "drop/empty.json", b"")
        put(s3_server, s3_bucket, "elsewhere/d.json", json_lines(range(900, 910)))
        return source_of(s3_server, s3_bucket, range(600), prefix="drop/")


class TestS3InputByteRanges(TransportConformance):
    """One object read in byte ranges of 2 KiB (one range per discovery)."""

    @pytest.fixture
    def source(self, s3_server: S3Server, s3_bucket: str) -> Source:
        put(s3_server, s3_bucket, "big/all.json", json_lines(range(300)))
        return source_of(
            s3_server, s3_bucket, range(300), prefix="big/", max_object_bytes_per_batch=2048
        )


# --- listing: the watermark, the re-list, empty objects ------------------------------------


@pytest.fixture
def ten_keys(s3_server: S3Server, s3_bucket: str) -> list[str]:
    keys = [f"p/k{i:02d}.json" for i in range(10)]
    for i, key in enumerate(keys):
        put(s3_server, s3_bucket, key, json_lines(range(i * 10, i * 10 + 10)))
    return keys


def test_start_after_lists_only_keys_above_the_watermark(
    s3_server: S3Server, s3_bucket: str, ten_keys: list[str]
) -> None:
    t = transport(s3_server, s3_bucket, prefix="p/")
    # No offsets rows and late_after None: had the listing included keys <= the
    # watermark, they would be listed as late work. So only StartAfter explains this.
    items = listed(t, Cursor(watermark="p/k04.json", since_relist=0))
    assert [i.key for i in items] == ten_keys[5:]
    assert t.relisted_at is None, "a StartAfter listing is not a complete re-list"
    assert t.list_requests == 1
    log = s3_server.log.read_text() if s3_server.log else ""
    assert f"start-after={quote('p/k04.json', safe='')}" in log or "start-after=p" in log
    # The items carry the object's mtime (server clock) and ETag.
    head = s3_server.client().head_object(Bucket=s3_bucket, Key="p/k05.json")
    assert items[0].meta["mtime"] == head["LastModified"].timestamp()
    assert items[0].meta["etag"] == head["ETag"]
    assert (items[0].start, items[0].end, items[0].size, items[0].final) == (
        0,
        head["ContentLength"],
        head["ContentLength"],
        True,
    )


def test_relist_finds_late_keys_below_the_watermark_and_skips_collapsed_ones(
    s3_server: S3Server, s3_bucket: str, ten_keys: list[str]
) -> None:
    t = transport(s3_server, s3_bucket, prefix="p/", relist_every=3)
    mtime = s3_server.client().head_object(Bucket=s3_bucket, Key="p/k02.json")["LastModified"]
    mtime_s = mtime.timestamp()
    # Every key up to k04 committed; rows of k00, k01, k03, k04 collapsed; k02 never read.
    done = {k: KeyOffset(100, 10, True) for k in ten_keys[5:7]}
    due = {"watermark": "p/k04.json", "since_relist": 2, "offsets": done}

    # late_after None: nothing collapsed yet, so every key without a row is late work.
    items = listed(t, Cursor(**due))
    assert [i.key for i in items] == ten_keys[:5] + ten_keys[7:]
    assert t.relisted_at is not None and t.relisted_at >= mtime_s

    # late_after older than the objects: still late work (modified after it).
    items = listed(t, Cursor(**due, late_after=mtime_s - 10))
    assert [i.key for i in items] == ten_keys[:5] + ten_keys[7:]

    # late_after newer than the objects: below the watermark they are committed.
    items = listed(t, Cursor(**due, late_after=mtime_s + 10))
    assert [i.key for i in items] == ten_keys[7:]

    # A key written after late_after below the watermark is late work. LastModified
    # has whole seconds: write it in a later second than the ten keys.
    newest = max(
        o["LastModified"].timestamp()
        for o in s3_server.client().list_objects_v2(Bucket=s3_bucket)["Contents"]
    )
    time.sleep(max(0.0, newest + 1.05 - time.time()))
    put(s3_server, s3_bucket, "p/k02b.json", json_lines(range(1000, 1005)))
    new_mtime = s3_server.client().head_object(Bucket=s3_bucket, Key="p/k02b.json")["LastModified"]
    items = listed(t, Cursor(**due, late_after=new_mtime.timestamp()))
    assert [i.key for i in items] == ["p/k02b.json", *ten_keys[7:]]

    # Not due yet (since_relist < relist_every - 1): StartAfter only, late keys wait.
    items = listed(t, Cursor(watermark="p/k04.json", since_relist=1, offsets=done))
    assert [i.key for i in items] == ten_keys[7:]
    assert t.relisted_at is None


def test_relisted_at_only_for_a_listing_that_reached_the_end(
    s3_server: S3Server, s3_bucket: str, ten_keys: list[str]
) -> None:
    t = transport(s3_server, s3_bucket, prefix="p/", relist_margin_s=300)
    items = listed(t, Cursor(), max_items=4)
    assert len(items) == 4
    assert t.relisted_at is None, "a listing cut by max_items is not a complete re-list"
    items = listed(t, Cursor())
    assert len(items) == 10
    newest = max(i.meta["mtime"] for i in items)
    # The server's Date at the listing's start, minus the margin.
    assert t.relisted_at is not None
    assert newest - 300 - 1 <= t.relisted_at <= newest - 300 + 60


def test_zero_byte_objects_are_never_work(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    put(s3_server, s3_bucket, "z/a.json", b"")
    put(s3_server, s3_bucket, "z/b.json", json_lines(range(5)))
    put(s3_server, s3_bucket, "z/c.json", b"")
    t = transport(s3_server, s3_bucket, prefix="z/")
    assert [i.key for i in listed(t, Cursor())] == ["z/b.json"]
    c = Connector(source_of(s3_server, s3_bucket, range(5), prefix="z/"), tmp_path / "c")
    try:
        c.drain()
        assert_same_records(c.table(), c.expected(), "id", "table")
        assert c.finalize(), "end of input not reached with only empty objects left"
    finally:
        c.close()


def test_single_key_and_a_missing_one(s3_server: S3Server, s3_bucket: str) -> None:
    put(s3_server, s3_bucket, "one/x.json", json_lines(range(3)))
    put(s3_server, s3_bucket, "one/x.json.bak", json_lines(range(3)))
    t = transport(s3_server, s3_bucket, key="one/x.json")
    assert [i.key for i in listed(t, Cursor())] == ["one/x.json"]
    assert t.relisted_at is not None
    missing = transport(s3_server, s3_bucket, key="one/nope.json")
    assert listed(missing, Cursor()) == []
    assert missing.notices and "one/nope.json holds no object" in missing.notices[0][0]


def test_a_replaced_object_is_a_notice_not_new_work(s3_server: S3Server, s3_bucket: str) -> None:
    put(s3_server, s3_bucket, "r/a.json", json_lines(range(3)))
    t = transport(s3_server, s3_bucket, prefix="r/")
    [item] = listed(t, Cursor())
    done = KeyOffset(item.size or 0, 3, True, {"etag": item.meta["etag"]})
    assert listed(t, Cursor(offsets={"r/a.json": done})) == []
    put(s3_server, s3_bucket, "r/a.json", json_lines(range(10)))
    assert listed(t, Cursor(offsets={"r/a.json": done})) == []
    assert t.notices and "s3://" in t.notices[-1][0] and "replaced" in t.notices[-1][0]
    # Reading the planned version after it was replaced fails as an unreadable object.
    with pytest.raises(FileNotFoundError, match="replaced since it was planned"):
        b"".join(t.read(item))


def test_gone_at_read_names_the_object(s3_server: S3Server, s3_bucket: str) -> None:
    put(s3_server, s3_bucket, "g/a.json", json_lines(range(3)))
    t = transport(s3_server, s3_bucket, prefix="g/")
    [item] = listed(t, Cursor())
    s3_server.client().delete_object(Bucket=s3_bucket, Key="g/a.json")
    with pytest.raises(FileNotFoundError, match=f"s3://{s3_bucket}/g/a.json .*gone"):
        b"".join(t.read(item))


def test_engine_keeps_state_bounded_lists_after_the_watermark_and_finds_late_keys(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    for n in range(1, 31):
        put(s3_server, s3_bucket, f"w/{n:03d}.json", json_lines(range(n * 10, n * 10 + 10)))
    time.sleep(1.1)  # the listing's Date (whole seconds) is later than every mtime
    source = source_of(s3_server, s3_bucket, range(10, 310), prefix="w/", relist_every=3)
    c = Connector(source, tmp_path / "c")
    try:
        c.drain()
        assert_same_records(c.table(), c.expected(), "id", "table")
        mark = c.store.cursor(c.ref)
        assert mark.watermark == "w/030.json" and mark.late_after is not None
        rows_left = c.store.offsets(c.ref)
        assert len(rows_left) <= 1, f"completed keys below the watermark kept rows: {rows_left}"
        # A late key below the watermark: StartAfter listings miss it, the re-list finds it.
        put(s3_server, s3_bucket, "w/000-late.json", json_lines(range(0, 10)))
        put(s3_server, s3_bucket, "w/031.json", json_lines(range(310, 320)))
        log_before = len(s3_server.log.read_text().splitlines()) if s3_server.log else 0
        rounds = 0
        while c.table().num_rows < 320 and rounds < 5:
            found = c.discover()
            c.run(found.batch_ids)
            rounds += 1
        expected = pa.Table.from_pylist(rows(range(320)), schema=c.expected().schema)
        assert_same_records(c.table(), expected, "id", "table with the late key")
        assert rounds <= 3, f"the late key took {rounds} discoveries with relist_every 3"
        log = s3_server.log.read_text().splitlines()[log_before:] if s3_server.log else []
        lists = [ln for ln in log if f"/{s3_bucket}?list-type=2" in ln]
        assert any("start-after=" in ln for ln in lists), lists
        assert c.finalize()
        assert len(c.store.offsets(c.ref)) <= 2
    finally:
        c.close()


def test_the_probe_sees_a_late_key_at_once_and_its_run_reads_it(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    """Issue 22: a key below the watermark (UUID names, several writers) is seen by the
    new-data probe of ``on: new_data`` at its next poll, not at the next re-list, and
    the run it starts reads it; end of input is not claimed meanwhile."""
    from airflow_connectors.engine.discovery import new_data_fingerprint

    put(s3_server, s3_bucket, "p/b.json", json_lines(range(0, 5)))
    time.sleep(1.1)  # the listing's Date (whole seconds) is later than the mtime
    c = Connector(source_of(s3_server, s3_bucket, range(8), prefix="p/", relist_every=50), tmp_path)
    try:
        c.drain()
        assert c.finalize() and new_data_fingerprint(c.store, c.ctx) is None
        put(s3_server, s3_bucket, "p/a.json", json_lines(range(5, 8)))
        assert new_data_fingerprint(c.store, c.ctx) is not None
        found = c.discover()
        assert len(found.batch_ids) == 1
        c.run(found.batch_ids)
        assert_same_records(c.table(), c.expected(), "id", "table with the late key")
        assert c.finalize() and new_data_fingerprint(c.store, c.ctx) is None
        # The inline secret key is stored sealed in the plans, never in clear (issue 22).
        import sqlalchemy as sa

        with c.store.engine.connect() as conn:
            stored = "\n".join(
                str(p) for p in conn.execute(sa.text("SELECT plan FROM ac_batches")).scalars()
            )
        assert "sealed:v1:" in stored and SECRET_KEY not in stored
    finally:
        c.close()


# --- byte ranges, resume, follow -----------------------------------------------------------


def test_large_object_in_byte_ranges_lands_exactly_once(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    body = json_lines(range(1000))
    put(s3_server, s3_bucket, "L/big.json", body)
    put(s3_server, s3_bucket, "L/small.json", json_lines(range(1000, 1010)))
    source = source_of(
        s3_server, s3_bucket, range(1010), prefix="L/", max_object_bytes_per_batch=5000
    )
    c = Connector(source, tmp_path / "c")
    try:
        first = c.list_work(Cursor())
        big = [i for i in first if i.key == "L/big.json"]
        assert len(big) == 1, "one range of a key per discovery"
        assert (big[0].start, big[0].end, big[0].final) == (0, 5000, False)
        c.drain(rounds=len(body) // 5000 + 5)
        assert_same_records(c.table(), c.expected(), "id", "table")
        ranges = [
            b for b in c.store.batches(c.ref) if any(i.key == "L/big.json" for i in b.plan.items)
        ]
        assert len(ranges) >= len(body) // 5000, f"{len(ranges)} batches read L/big.json"
        assert c.status().total_records == 1010
        assert c.finalize()
    finally:
        c.close()


def test_resume_mid_object_after_sigkill_with_a_ranged_get(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    key = f"K/{uuid.uuid4().hex}.json"
    body = json_lines(range(2000))
    put(s3_server, s3_bucket, key, body)
    step = len(body) // 3
    source = source_of(
        s3_server, s3_bucket, range(2000), prefix="K/", max_object_bytes_per_batch=step
    )
    c = Connector(source, tmp_path / "c")
    try:
        first = c.discover()
        c.run(first.batch_ids)  # the first range commits: the key is read part way
        done = c.store.cursor(c.ref).get(key)
        assert done is not None and not done.completed and 0 < done.offset <= step
        found = c.discover()
        [batch] = [c.store.load_batch(b) for b in found.batch_ids]
        [item] = batch.plan.items
        assert (item.start, item.records_done) == (done.offset, done.records)
        marks = tmp_path / "marks"
        marks.mkdir()
        proc = jobs.start_job(found.batch_ids, c.store_url, marks, hang_at="after_sink_write")
        jobs.wait_for(marks / "after_sink_write", proc)
        jobs.kill(proc)
        assert c.store.cursor(c.ref).get(key) == done, "the killed batch moved the offset"
        jobs.finish(found.batch_ids, c.store_url, marks)
        c.drain()
        assert_same_records(c.table(), c.expected(), "id", "table after the crash")
        assert c.status().total_records == 2000
    finally:
        c.close()
    # The resumed reads were ranged GETs from the committed offset (HTTP 206).
    log = s3_server.log.read_text() if s3_server.log else ""
    ranged = [line for line in log.splitlines() if key in line and '" 206' in line]
    assert len(ranged) >= 3, f"expected ranged GETs of {key}, the server logged: {ranged}"


def test_follow_picks_up_new_objects(s3_server: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    put(s3_server, s3_bucket, "f/001.json", json_lines(range(0, 50)))
    source = source_of(s3_server, s3_bucket, range(100), prefix="f/", follow=True)
    c = Connector(source, tmp_path / "c", source.unbounded_config)
    try:
        c.drain()
        assert c.table().num_rows == 50
        assert not c.finalize(), "follow: true reached end of input"
        put(s3_server, s3_bucket, "f/002.json", json_lines(range(50, 100)))
        found = c.discover()
        items = [i for b in found.batch_ids for i in c.store.load_batch(b).plan.items]
        assert [i.key for i in items] == ["f/002.json"]
        c.run(found.batch_ids)
        assert_same_records(c.table(), c.expected(), "id", "table")
        assert not c.finalize()
    finally:
        c.close()


@pytest.mark.parametrize("ext", ["gz", "zst", "bz2"])
def test_compressed_objects_stream_whole_and_resume_by_decompressed_offset(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path, ext: str
) -> None:
    import bz2
    import gzip

    import zstandard

    plain = json_lines(range(500))
    packed = {
        "gz": gzip.compress,
        "zst": zstandard.ZstdCompressor().compress,
        "bz2": bz2.compress,
    }[ext](plain)
    put(s3_server, s3_bucket, f"z/a.json.{ext}", packed)
    put(s3_server, s3_bucket, "z/b.json", json_lines(range(500, 510)))
    # Never split, even with a range size: offsets count decompressed bytes.
    t = transport(s3_server, s3_bucket, prefix="z/", max_object_bytes_per_batch=100)
    items = listed(t, Cursor(), appendable=True)
    [item] = [i for i in items if i.key.endswith(ext)]
    assert (item.start, item.end, item.size, item.final) == (0, None, len(packed), True)
    assert b"".join(t.read(item)) == plain
    half = plain.index(b"\n", len(plain) // 2) + 1
    done = KeyOffset(half, plain[:half].count(b"\n"), False, {"etag": item.meta["etag"]})
    [resumed] = [i for i in listed(t, Cursor(offsets={item.key: done})) if i.key == item.key]
    assert (resumed.start, resumed.records_done) == (half, done.records)
    assert b"".join(t.read(resumed)) == plain[half:]
    # Through the engine: every record once.
    source = source_of(s3_server, s3_bucket, range(510), prefix="z/")
    c = Connector(source, tmp_path / "c")
    try:
        c.drain()
        assert_same_records(c.table(), c.expected(), "id", "table")
    finally:
        c.close()


def test_transient_faults_are_retried_and_a_reset_resumes_mid_body(
    s3_server: S3Server, s3_bucket: str
) -> None:
    from airflow_connectors.testing.faultproxy import Fault, FaultProxy
    from airflow_connectors.transports.retry import RetryPolicy

    body = json_lines(range(4000))
    put(s3_server, s3_bucket, "x/big.json", body)
    with FaultProxy(s3_server.endpoint_url) as proxy:
        t = transport(s3_server, s3_bucket, prefix="x/", endpoint_url=proxy.endpoint_url)
        t.retry = RetryPolicy(timeout_s=30, max_delay_s=0.05, base_delay_s=0.01)
        proxy.add(Fault.slow_down(), method="GET", path="list-type=2")
        [item] = listed(t, Cursor())
        proxy.add(Fault.error(500, "InternalError"), method="GET", path="x/big.json")
        proxy.add(Fault.reset_after(20_000), method="GET", path="x/big.json", times=2)
        assert b"".join(t.read(item)) == body  # no byte lost or repeated
        assert proxy.injected == {"slow_down": 1, "500 InternalError": 1, "reset": 2}
        ranged = [p for m, p in proxy.requests if m == "GET" and "x/big.json" in p]
        assert len(ranged) == 4
        # Refused: raised at once, never retried.
        proxy.add(Fault.error(403, "AccessDenied"), method="GET", path="x/big.json")
        with pytest.raises(PermissionError, match=f"s3://{s3_bucket}/x/big.json.*AccessDenied"):
            b"".join(t.read(item))
        assert len([p for m, p in proxy.requests if "x/big.json" in p]) == 5


# --- credentials ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A second moto server that checks credentials (IAM): an admin, and a user that may
    list the bucket but not read its objects."""
    log = tmp_path_factory.mktemp("auth-s3") / "moto.log"
    old = os.environ.get("INITIAL_NO_AUTH_ACTION_COUNT")
    # Moto checks signatures after this many requests: the start-up probe and the three
    # IAM calls that make the admin.
    os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "4"
    try:
        server = S3Server(log=log).start()
    finally:
        if old is None:
            os.environ.pop("INITIAL_NO_AUTH_ACTION_COUNT", None)
        else:
            os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = old
    try:
        keys = {}
        iam = boto3.client(
            "iam",
            endpoint_url=server.endpoint_url,
            region_name=REGION,
            aws_access_key_id="bootstrap",
            aws_secret_access_key="bootstrap",
        )
        for user, actions in (("admin", ["*"]), ("lister", ["s3:ListBucket"])):
            if user == "lister":
                iam = boto3.client(
                    "iam", endpoint_url=server.endpoint_url, region_name=REGION, **keys["admin"]
                )
            iam.create_user(UserName=user)
            k = iam.create_access_key(UserName=user)["AccessKey"]
            policy = {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
            }
            iam.put_user_policy(UserName=user, PolicyName="p", PolicyDocument=json.dumps(policy))
            keys[user] = {
                "aws_access_key_id": k["AccessKeyId"],
                "aws_secret_access_key": k["SecretAccessKey"],
            }
        admin = boto3.client(
            "s3", endpoint_url=server.endpoint_url, region_name=REGION, **keys["admin"]
        )
        admin.create_bucket(Bucket="locked")
        admin.put_object(Bucket="locked", Key="in/a.json", Body=json_lines(range(5)))
        yield {"server": server, "keys": keys}
    finally:
        server.stop()


def test_refused_read_fails_the_batch_naming_the_object_without_retry(
    auth_s3: dict[str, Any], tmp_path: Path
) -> None:
    server: S3Server = auth_s3["server"]
    lister = auth_s3["keys"]["lister"]
    config = {
        "bucket_name": "locked",
        "prefix": "in/",
        "endpoint_url": server.endpoint_url,
        "region": REGION,
        **lister,
    }
    source = Source("s3_input", config, COLUMNS, rows(range(5)), "id", JSON)
    c = Connector(source, tmp_path / "c")
    try:
        found = c.discover()  # listing is allowed
        assert found.batch_ids
        from airflow_connectors.engine.batch import BatchFailed, run_batch
        from airflow_connectors.testing.conformance import _InProcessTasks

        with pytest.raises(BatchFailed) as failed:
            run_batch(c.store, found.batch_ids[0], _InProcessTasks)
        message = str(failed.value)
        assert "s3://locked/in/a.json" in message and "AccessDenied" in message, message
        assert lister["aws_secret_access_key"] not in message
        assert "\n" not in message.strip()
        assert c.table().num_rows == 0
    finally:
        c.close()
    gets = [ln for ln in server.log.read_text().splitlines() if "GET /locked/in/a.json" in ln]  # type: ignore[union-attr]
    assert len(gets) == 1, f"a refused GET is not retried: {gets}"


def test_bad_secret_fails_the_listing_without_the_secret(auth_s3: dict[str, Any]) -> None:
    server: S3Server = auth_s3["server"]
    secret = "wrong-secret-never-shown-0042"
    cfg = S3InputConfig(
        bucket_name="locked",
        prefix="in/",
        endpoint_url=server.endpoint_url,
        region=REGION,
        aws_access_key_id=auth_s3["keys"]["lister"]["aws_access_key_id"],
        aws_secret_access_key=secret,
    )
    t = S3InputTransport(cfg, None)  # type: ignore[arg-type]
    with pytest.raises(PermissionError) as refused:
        listed(t, Cursor())
    message = str(refused.value)
    assert "s3://locked/in/" in message and "SignatureDoesNotMatch" in message, message
    assert secret not in message


def test_secret_access_key_is_masked(s3_server: S3Server) -> None:
    config = s3_server.config("bucket", prefix="")
    found = secret_values(config, secret_fields(S3InputConfig))
    assert SECRET_KEY in found
    masked = mask_config(config, secret_fields(S3InputConfig))
    assert SECRET_KEY not in json.dumps(masked)
    t = S3InputTransport(S3InputConfig.model_validate(config), None)  # type: ignore[arg-type]
    assert SECRET_KEY not in t.describe()


@pytest.mark.parametrize("form", ["json", "uri"])
def test_aws_conn_id_from_the_environment(
    s3_server: S3Server, s3_bucket: str, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    put(s3_server, s3_bucket, "c/a.json", json_lines(range(4)))
    extra = {"endpoint_url": s3_server.endpoint_url, "region_name": REGION}
    if form == "json":
        value = json.dumps(
            {"conn_type": "aws", "login": ACCESS_KEY, "password": SECRET_KEY, "extra": extra}
        )
    else:
        value = (
            f"aws://{quote(ACCESS_KEY, safe='')}:{quote(SECRET_KEY, safe='')}@/?"
            f"endpoint_url={quote(s3_server.endpoint_url, safe='')}&region_name={REGION}"
        )
    monkeypatch.setenv("AIRFLOW_CONN_MY_S3", value)
    cfg = S3InputConfig(bucket_name=s3_bucket, prefix="c/", aws_conn_id="my_s3")
    t = S3InputTransport(cfg, None)  # type: ignore[arg-type]
    [item] = listed(t, Cursor())
    assert b"".join(t.read(item)) == json_lines(range(4))
    creds = _s3.resolve_connection("my_s3")
    assert (creds.access_key, creds.secret_key, creds.endpoint_url, creds.region) == (
        ACCESS_KEY,
        SECRET_KEY,
        s3_server.endpoint_url,
        REGION,
    )


def test_aws_conn_id_from_an_installed_resolver_and_a_missing_one(
    s3_server: S3Server, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(s3_server, s3_bucket, "c/a.json", json_lines(range(4)))
    monkeypatch.delenv("AIRFLOW_CONN_NOWHERE", raising=False)
    cfg = S3InputConfig(bucket_name=s3_bucket, prefix="c/", aws_conn_id="nowhere")
    with pytest.raises(_s3.ConnectionNotFound) as missing:
        listed(S3InputTransport(cfg, None), Cursor())  # type: ignore[arg-type]
    message = str(missing.value)
    assert "aws_conn_id 'nowhere'" in message and "AIRFLOW_CONN_NOWHERE" in message
    asked: list[str] = []

    def resolver(conn_id: str) -> dict[str, Any] | None:
        asked.append(conn_id)
        return {
            "conn_type": "aws",
            "login": ACCESS_KEY,
            "password": SECRET_KEY,
            "extra": json.dumps({"endpoint_url": s3_server.endpoint_url, "region_name": REGION}),
        }

    _s3.set_connection_resolver(resolver)
    try:
        items = listed(S3InputTransport(cfg, None), Cursor())  # type: ignore[arg-type]
    finally:
        _s3.set_connection_resolver(None)
    assert [i.key for i in items] == ["c/a.json"] and asked == ["nowhere"]


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"bucket_name": "ok-bucket"}, "exactly one of prefix"),
        ({"bucket_name": "ok-bucket", "prefix": "", "key": "k"}, "exactly one of prefix"),
        ({"bucket_name": "s3://ok-bucket/x", "prefix": ""}, "not a URL"),
        ({"bucket_name": "192.168.1.1", "prefix": ""}, "not a valid bucket name"),
        ({"bucket_name": "ab", "prefix": ""}, "not a valid bucket name"),
        ({"bucket_name": "ok-bucket", "prefix": "", "aws_access_key_id": "a"}, "together"),
        (
            {"bucket_name": "ok-bucket", "prefix": "", "aws_conn_id": "c", "no_sign_request": True},
            "one way of authenticating",
        ),
    ],
)
def test_config_rules(config: dict[str, Any], says: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=says):
        S3InputConfig.model_validate(config)


# --- a pipeline run ----------------------------------------------------------------------


def test_pipeline_run_into_parquet(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path, spark: Any
) -> None:
    for n in range(3):
        put(
            s3_server,
            s3_bucket,
            f"orders/2026-11-{n + 1:02d}.json",
            json_lines(range(n * 100, n * 100 + 100)),
        )
    spec_file = tmp_path / "pipeline.yaml"
    spec_file.write_text(
        f"""
pipeline: s3demo
tables:
  orders:
    columns: {{id: BIGINT NOT NULL, name: VARCHAR, amount: DOUBLE}}
    connectors:
      - name: landing
        transport:
          name: s3_input
          config:
            bucket_name: {s3_bucket}
            prefix: orders/
            endpoint_url: {s3_server.endpoint_url}
            region: {REGION}
            aws_access_key_id: {ACCESS_KEY}
            aws_secret_access_key: {SECRET_KEY}
            relist_margin_s: 0
        format: {{name: json, config: {{update_format: raw}}}}
"""
    )
    spec = load_pipeline(spec_file)
    store_url = f"sqlite:///{tmp_path / 'state.db'}"
    warehouse = str(tmp_path / "warehouse")
    report = run(spec, store_url, warehouse, spark)
    assert report.connectors["orders.landing"].status == "finished", report
    table = read_table(warehouse, "s3demo", "orders")
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])
    expected = pa.Table.from_pylist(rows(range(300)), schema=schema)
    assert_same_records(table, expected, "id", "orders")
    # Again, and with one more object: only the new one is read, nothing twice.
    put(s3_server, s3_bucket, "orders/2026-11-04.json", json_lines(range(300, 350)))
    run(spec, store_url, warehouse, spark)
    expected = pa.Table.from_pylist(rows(range(350)), schema=schema)
    assert_same_records(read_table(warehouse, "s3demo", "orders"), expected, "id", "orders")


def test_small_objects_are_read_ahead_and_their_errors_stay_theirs(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path, spark: Any
) -> None:
    """A task of many small objects reads them several at a time (each GET waits 0.2 s
    at the proxy: more GETs are in flight than there are tasks), yet each object's failure is its
    own: a retried 500 costs nothing, an object gone since it was planned is skipped as
    unreadable under errors.tolerance: all, and every other object's rows land once."""
    from helpers import pipeline, status

    from airflow_connectors.testing.faultproxy import Fault, FaultProxy

    for n in range(24):
        put(s3_server, s3_bucket, f"many/{n:03d}.json", json_lines(range(n * 10, n * 10 + 10)))
    with FaultProxy(s3_server.endpoint_url) as proxy:
        cfg = s3_server.config(
            s3_bucket, prefix="many/", relist_margin_s=0, endpoint_url=proxy.endpoint_url
        )
        spec = pipeline(
            {
                "t": {
                    "columns": COLUMNS,
                    "connectors": [
                        {
                            "name": "c",
                            "transport": {"name": "s3_input", "config": cfg},
                            "format": JSON,
                            "errors": {"tolerance": "all"},
                            "max_partition_bytes": 64 << 20,  # a task per core, 12 each
                            "open_cost_bytes": 0,
                        }
                    ],
                }
            }
        )
        # The first rule that matches applies: the errors before the delays.
        proxy.add(Fault.error(500, "InternalError"), method="GET", path="many/007.json")
        proxy.add(Fault.error(404, "NoSuchKey"), method="GET", path="many/013.json", times=None)
        proxy.add(Fault.delay(0.2), method="GET", path="many/0", times=None)
        store = f"sqlite:///{tmp_path / 'state.db'}"
        run(spec, store, str(tmp_path / "wh"), spark)
        # Two tasks (one per core) read one object each at a time without read-ahead.
        assert proxy.most_in_flight > 2
        assert proxy.injected["500 InternalError"] == 1
    ids = sorted(read_table(str(tmp_path / "wh"), "p", "t").column("id").to_pylist())
    assert ids == [i for i in range(240) if i // 10 != 13]
    st = status(store, "p", "t", "c")
    # The skipped object, and the retried 500 (read in a read-ahead thread, counted as
    # the object's own retry).
    assert (st.total_records, st.num_transport_errors) == (230, 2)
    [error] = st.transport_errors
    assert error["tag"] == "many/013.json" and "skipped an unreadable object" in error["message"]


def test_describe(s3_server: S3Server) -> None:
    t = transport(s3_server, "bucket", prefix="in/", follow=True)
    assert re.fullmatch(r"s3_input: s3://bucket/in/ \(follow\)", t.describe())


def test_s3_input_as_a_spark_data_source(s3_server: S3Server, s3_bucket: str, spark: Any) -> None:
    put(s3_server, s3_bucket, "sds/a.json", json_lines(range(0, 30)))
    put(s3_server, s3_bucket, "sds/b.json", json_lines(range(30, 50)))
    reader = spark.read.format("s3_input").schema("id BIGINT, name STRING, amount DOUBLE")
    for name, value in s3_server.config(s3_bucket, prefix="sds/").items():
        reader = reader.option(name, str(value))
    df = reader.option("format", "json").option("format.update_format", "raw").load()
    assert sorted(r.id for r in df.collect()) == list(range(50))


def test_cli_run_with_aws_conn_id_from_the_environment(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    """``airflow-connectors run`` as users run it: the connection comes from
    ``AIRFLOW_CONN_<ID>`` (a URI here), in discovery and in the Spark workers."""
    from test_cli import cli

    for n in range(2):
        put(s3_server, s3_bucket, f"cli/{n}.json", json_lines(range(n * 20, n * 20 + 20)))
    spec = tmp_path / "s3.yaml"
    spec.write_text(
        json.dumps(
            {
                "pipeline": "s3cli",
                "tables": {
                    "orders": {
                        "columns": COLUMNS,
                        "connectors": [
                            {
                                "name": "landing",
                                "transport": {
                                    "name": "s3_input",
                                    "config": {
                                        "bucket_name": s3_bucket,
                                        "prefix": "cli/",
                                        "aws_conn_id": "landing_cli",
                                    },
                                },
                                "format": JSON,
                            }
                        ],
                    }
                },
            }
        )
    )
    warehouse = tmp_path / "wh"
    args = ["run", str(spec), "--warehouse", str(warehouse)]
    args += ["--state-store-url", f"sqlite:///{tmp_path / 'state.db'}"]
    missing = cli(*args, home=tmp_path / "home")
    assert missing.returncode == 1
    text = missing.stdout + missing.stderr
    assert "s3cli.orders.landing" in text and "aws_conn_id 'landing_cli'" in text, text
    assert "Traceback" not in text
    uri = (
        f"aws://{quote(ACCESS_KEY, safe='')}:{quote(SECRET_KEY, safe='')}@/?"
        f"endpoint_url={quote(s3_server.endpoint_url, safe='')}&region_name={REGION}"
    )
    os.environ["AIRFLOW_CONN_LANDING_CLI"] = uri
    try:
        ok = cli(*args, home=tmp_path / "home")
    finally:
        os.environ.pop("AIRFLOW_CONN_LANDING_CLI", None)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert SECRET_KEY not in ok.stdout + ok.stderr
    table = read_table(str(warehouse), "s3cli", "orders")
    expected = pa.Table.from_pylist(rows(range(40)), schema=table.schema)
    assert_same_records(table, expected, "id", "orders")
