"""url_input resumes an interrupted transfer at the committed byte offset, exactly once.

Real HTTP servers on 127.0.0.1 (one that serves ranges, one that ignores ``Range``, one
that answers a wrong ``Content-Range``, one that drops the connection mid-body), real
local Spark through the engine, and a real SIGKILL of the ingest job's whole process group
while its worker is in the middle of a body. The servers record every request, so the
tests see the ``Range`` each read asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers import checksum, pipeline, read_table, run, status

from airflow_connectors.engine.batch import BatchFailed, run_batch
from airflow_connectors.engine.discovery import context, discover
from airflow_connectors.spec import TableSpec
from airflow_connectors.spec.redact import mask_url
from airflow_connectors.state.store import ConnectorRef, StateStore
from airflow_connectors.testing.jobs import kill
from airflow_connectors.transports import Cursor, KeyOffset, Limits, WorkItem
from airflow_connectors.transports.url_input import UrlInputConfig, UrlInputTransport

ROWS = 20_000
#: Bytes per planned range: the body (about 1 MB) is read in several batches.
RANGE = 200_000
REF = ConnectorRef("p", "events", "web")


# --- servers ------------------------------------------------------------------------


@dataclass
class Source:
    """What a server serves and what it was asked."""

    body: bytes = b""
    etag: str | None = None
    last_modified: str | None = None
    accept_ranges: str = "bytes"
    #: Every request: method, Range header, answered status.
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: The next GET sends this many body bytes, then hangs until ``release`` (a SIGKILL
    #: of the reader arrives meanwhile) and closes the connection.
    stall_after: int | None = None
    stalled: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    #: The next GET sends this many body bytes and closes the connection (the drop server).
    drop_after: int | None = None

    def gets(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == "GET"]


class _Ranged(BaseHTTPRequestHandler):
    """Serves one body with ``Range`` support (RFC 9110 single ranges), ETag and
    Last-Modified."""

    advertises_ranges = True

    @property
    def source(self) -> Source:
        return self.server.source  # type: ignore[attr-defined]

    def do_HEAD(self) -> None:
        src = self.source
        src.requests.append({"method": "HEAD", "range": None, "status": 200})
        self.send_response(200)
        self._validators(len(src.body))
        if self.advertises_ranges:
            self.send_header("Accept-Ranges", src.accept_ranges)
        self.end_headers()

    def do_GET(self) -> None:
        src = self.source
        status, part, extra = self.answer(src.body, self.headers.get("Range"))
        src.requests.append({"method": "GET", "range": self.headers.get("Range"), "status": status})
        self.send_response(status)
        self._validators(len(part))
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.send_body(part)

    def answer(self, body: bytes, rng: str | None) -> tuple[int, bytes, dict[str, str]]:
        if not rng:
            return 200, body, {}
        first, last = _parse_range(rng, len(body))
        if first >= len(body):
            return 416, b"", {"Content-Range": f"bytes */{len(body)}"}
        return 206, body[first : last + 1], {"Content-Range": f"bytes {first}-{last}/{len(body)}"}

    def send_body(self, part: bytes) -> None:
        src = self.source
        if src.stall_after is not None:
            cut, src.stall_after = src.stall_after, None
            self.wfile.write(part[:cut])
            self.wfile.flush()
            src.stalled.set()
            src.release.wait(300)
            self.close_connection = True
            return
        if src.drop_after is not None:
            cut, src.drop_after = src.drop_after, None
            self.wfile.write(part[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(part)

    def _validators(self, length: int) -> None:
        src = self.source
        self.send_header("Content-Length", str(length))
        if src.etag:
            self.send_header("ETag", src.etag)
        if src.last_modified:
            self.send_header("Last-Modified", src.last_modified)

    def log_message(self, *args: Any) -> None:
        pass


class _IgnoresRange(_Ranged):
    """Answers every GET with 200 and the whole body, whatever ``Range`` asks; says
    nothing about ranges in HEAD (as many servers)."""

    advertises_ranges = False

    def answer(self, body: bytes, rng: str | None) -> tuple[int, bytes, dict[str, str]]:
        return 200, body, {}


class _WrongContentRange(_Ranged):
    """Answers a range with 206 but always from the body's first byte (a broken proxy)."""

    def answer(self, body: bytes, rng: str | None) -> tuple[int, bytes, dict[str, str]]:
        if not rng:
            return 200, body, {}
        first, last = _parse_range(rng, len(body))
        n = last - first
        return 206, body[: n + 1], {"Content-Range": f"bytes 0-{n}/{len(body)}"}


class _DropsMidBody(_Ranged):
    """Serves ranges; with ``drop_after`` set, the next GET closes the connection after
    that many bytes of a body whose full Content-Length it announced."""


def _parse_range(rng: str, size: int) -> tuple[int, int]:
    first, _, last = rng.removeprefix("bytes=").partition("-")
    return int(first), min(int(last), size - 1) if last else size - 1


class Server:
    """One running server; ``source`` is what it serves now."""

    def __init__(self, handler: type[_Ranged]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.source = Source()
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def source(self) -> Source:
        return self.httpd.source  # type: ignore[attr-defined]

    @source.setter
    def source(self, source: Source) -> None:
        self.httpd.source = source  # type: ignore[attr-defined]

    def url(self, userinfo: str = "") -> str:
        return f"http://{userinfo}127.0.0.1:{self.httpd.server_address[1]}/rows.json"


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Server]]:
    """The four servers, started once for the module."""
    started = {
        "ranged": Server(_Ranged),
        "ignores": Server(_IgnoresRange),
        "wrong": Server(_WrongContentRange),
        "drops": Server(_DropsMidBody),
    }
    yield started
    for server in started.values():
        server.source.release.set()
        server.httpd.shutdown()
        server.httpd.server_close()


@pytest.fixture
def served(servers: dict[str, Server]) -> dict[str, Server]:
    """Every server with a fresh source holding the test body."""
    for server in servers.values():
        server.source = Source(body=BODY, etag='"v1"', last_modified=LAST_MODIFIED)
    return servers


# --- the data -----------------------------------------------------------------------


def _rows() -> tuple[bytes, pa.Table]:
    ids, names, amounts = [], [], []
    lines = []
    for i in range(ROWS):
        ids.append(i)
        names.append(f"name-{i}-{'x' * (i % 17)}")
        amounts.append(i / 8)
        lines.append(json.dumps({"id": i, "name": names[-1], "amount": amounts[-1]}))
    table = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array(names, pa.string()),
            "amount": pa.array(amounts, pa.float64()),
        }
    )
    return ("\n".join(lines) + "\n").encode(), table


BODY, SOURCE = _rows()
LAST_MODIFIED = "Tue, 24 Nov 2026 06:00:00 GMT"


def spec_for(url: str, fmt: str = "json") -> Any:
    return pipeline(
        {
            "events": {
                "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"},
                "connectors": [
                    {
                        "name": "web",
                        "transport": {
                            "name": "url_input",
                            "config": {"path": url, "timeout": 10, "range_bytes": RANGE},
                        },
                        "format": {"name": fmt, "config": {"update_format": "raw"}},
                    }
                ],
            }
        }
    )


def assert_exactly_once(warehouse: str) -> None:
    data = read_table(warehouse, "p", "events").select(["id", "name", "amount"])
    assert data.num_rows == ROWS
    assert len(set(data.column("id").to_pylist())) == ROWS  # no duplicates
    assert checksum(data, "id") == checksum(SOURCE, "id")


def lines_before(offset: int) -> int:
    return BODY.count(b"\n", 0, offset)


def planned_ranges(store_url: str) -> list[tuple[int, int | None]]:
    store = StateStore(store_url)
    try:
        return [(item.start, item.end) for b in store.batches(REF) for item in b.plan.items]
    finally:
        store.close()


def committed_offset(store_url: str, url: str) -> int:
    store = StateStore(store_url)
    try:
        # Keyed by the URL with its password masked: offsets never hold the secret.
        done = store.cursor(REF).get(mask_url(url))
        assert done is not None and "s3cret" not in repr(store.offsets(REF))
        return done.offset
    finally:
        store.close()


def transport(url: str, range_bytes: int = RANGE) -> UrlInputTransport:
    return UrlInputTransport(
        UrlInputConfig(path=url, timeout=10, range_bytes=range_bytes),
        TableSpec(name="t", columns=()),
    )


# --- reading a body in ranges ---------------------------------------------------------


def test_line_body_is_read_in_ranges_from_each_committed_offset(
    spark: Any, sqlite_url: str, tmp_path: Path, served: dict[str, Server]
) -> None:
    src, url = served["ranged"].source, served["ranged"].url()
    wh = str(tmp_path / "wh")
    report = run(spec_for(url), sqlite_url, wh, spark)
    assert_exactly_once(wh)
    ranges = planned_ranges(sqlite_url)
    assert report.connectors["events.web"].batches == len(ranges) >= len(BODY) // RANGE
    # Each range starts where the previous one committed: a record boundary.
    for (start, _), (_, end) in zip(ranges[1:], ranges, strict=False):
        assert end is not None and end - RANGE < start <= end and BODY[start - 1 : start] == b"\n"
    assert ranges[0][0] == 0 and ranges[-1][1] == len(BODY)
    assert [r["range"] for r in src.gets()] == [
        f"bytes={start}-{end - 1}"  # type: ignore[operator]
        for start, end in ranges
    ]
    st = status(sqlite_url, "p", "events", "web")
    assert st.end_of_input and st.finished and st.total_records == ROWS
    assert st.total_bytes == len(BODY)
    asked = len(src.requests)
    assert run(spec_for(url), sqlite_url, wh, spark).batches == 0
    assert len(src.requests) == asked  # finished: the server is not asked again


def test_job_killed_mid_transfer_resumes_at_the_committed_offset(
    spark: Any, sqlite_url: str, tmp_path: Path, served: dict[str, Server]
) -> None:
    src, url = served["ranged"].source, served["ranged"].url()
    wh = str(tmp_path / "wh")
    spec = spec_for(url)
    table = spec.tables[0]
    ctx = context(spec, table, table.connectors[0], wh)
    store = StateStore(sqlite_url)
    try:
        [first] = discover(store, ctx).batch_ids
        run_batch(store, first, lambda: spark)
        offset = committed_offset(sqlite_url, url)
        [second] = discover(store, ctx).batch_ids
    finally:
        store.close()
    assert 0 < offset <= RANGE and planned_ranges(sqlite_url)[1][0] == offset

    # The ingest job (what spark-submit runs) reads the second range; the server sends
    # part of it and hangs; the whole job (driver, JVM, Python workers) is SIGKILLed.
    src.stall_after = RANGE // 3
    job = start_job(second, sqlite_url)
    try:
        deadline = time.monotonic() + 240
        while not src.stalled.wait(0.2):
            if job.poll() is not None or time.monotonic() > deadline:
                out = job.stdout.read().decode() if job.stdout else ""
                pytest.fail(f"the job never reached the body ({job.returncode}):\n{out[-3000:]}")
    finally:
        kill(job)
        src.release.set()
    assert src.gets()[-1]["range"] == f"bytes={offset}-{offset + RANGE - 1}"
    # Nothing of the interrupted range landed; the batch is still planned.
    assert read_table(wh, "p", "events").num_rows == lines_before(offset)
    assert committed_offset(sqlite_url, url) == offset

    before = len(src.gets())
    run(spec, sqlite_url, wh, spark)
    resumed = src.gets()[before]
    assert resumed["range"] == f"bytes={offset}-{offset + RANGE - 1}"
    assert resumed["status"] == 206
    assert_exactly_once(wh)
    st = status(sqlite_url, "p", "events", "web")
    assert st.finished and st.total_records == ROWS and st.total_bytes == len(BODY)


def start_job(batch_id: int, store_url: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "airflow_connectors.engine.job", "--batch-id", str(batch_id)]
    args += ["--state-store-url", store_url, "--spark-master", "local[2]"]
    # A session of its own, so the kill reaches the JVM and the Python workers too.
    return subprocess.Popen(
        args,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def test_connection_dropped_mid_body_fails_then_resumes_at_the_committed_offset(
    spark: Any, sqlite_url: str, tmp_path: Path, served: dict[str, Server]
) -> None:
    src = served["drops"].source
    url = served["drops"].url("reader:s3cret@")
    wh = str(tmp_path / "wh")
    spec = spec_for(url)
    run(spec, sqlite_url, wh, spark, max_rounds=1)  # the first range
    offset = committed_offset(sqlite_url, url)
    assert 0 < offset <= RANGE

    src.drop_after = RANGE // 2  # the second range is cut off half-way
    report = run(spec, sqlite_url, wh, spark, raise_on_failure=False)
    error = report.failed["events.web"]
    masked = served["drops"].url("reader:***@")
    assert error.startswith(f"connector p.events.web: url_input: GET {masked} failed")
    assert "s3cret" not in error and "next run retries it" in error
    assert src.gets()[-1]["range"] == f"bytes={offset}-{offset + RANGE - 1}"
    assert read_table(wh, "p", "events").num_rows == lines_before(offset)
    st = status(sqlite_url, "p", "events", "web")
    assert st.state == "FAILED" and st.buffered_batches == 1 and not st.finished

    before = len(src.gets())
    run(spec, sqlite_url, wh, spark)
    assert src.gets()[before]["range"] == f"bytes={offset}-{offset + RANGE - 1}"
    assert_exactly_once(wh)
    assert status(sqlite_url, "p", "events", "web").finished


def test_server_that_ignores_range_is_skipped_to_the_offset_by_the_transport(
    spark: Any, sqlite_url: str, tmp_path: Path, served: dict[str, Server]
) -> None:
    src, url = served["ignores"].source, served["ignores"].url()
    wh = str(tmp_path / "wh")
    run(spec_for(url), sqlite_url, wh, spark)
    assert_exactly_once(wh)
    ranges = planned_ranges(sqlite_url)
    gets = src.gets()
    assert len(ranges) == len(gets) > 2
    for (start, end), get in zip(ranges, gets, strict=True):
        assert get["range"] == f"bytes={start}-{end - 1}"  # type: ignore[operator]
        assert get["status"] == 200  # and the whole body came back
    assert status(sqlite_url, "p", "events", "web").total_bytes == len(BODY)


def test_wrong_content_range_is_a_transport_error_naming_the_url(
    spark: Any, sqlite_url: str, tmp_path: Path, served: dict[str, Server]
) -> None:
    url = served["wrong"].url("reader:s3cret@")
    wh = str(tmp_path / "wh")
    report = run(spec_for(url), sqlite_url, wh, spark, raise_on_failure=False)
    error = report.failed["events.web"]
    masked = served["wrong"].url("reader:***@")
    assert error.startswith(f"connector p.events.web: url_input: GET {masked} with Range bytes=")
    assert "answered Content-Range 'bytes 0-" in error and "s3cret" not in error
    assert "does not start at the requested offset" in error
    # The first range (from byte 0) was right and landed; nothing of the second did.
    offset = committed_offset(sqlite_url, url)
    assert read_table(wh, "p", "events").num_rows == lines_before(offset) > 0
    st = status(sqlite_url, "p", "events", "web")
    assert st.state == "FAILED" and st.num_transport_errors == 1 and not st.finished


def test_wrong_content_range_past_the_offset_is_never_used(served: dict[str, Server]) -> None:
    t = transport(served["wrong"].url())
    item = WorkItem(key=t.config.path, start=10, end=50, size=len(BODY), final=False)
    with pytest.raises(OSError, match=r"does not start at the requested offset 10"):
        list(t.read(item))


# --- a body that changes --------------------------------------------------------------


def test_body_changed_since_planned_fails_the_batch(
    spark: Any, sqlite_url: str, tmp_path: Path, served: dict[str, Server]
) -> None:
    src, url = served["ranged"].source, served["ranged"].url("reader:s3cret@")
    wh = str(tmp_path / "wh")
    spec = spec_for(url)
    table = spec.tables[0]
    ctx = context(spec, table, table.connectors[0], wh)
    store = StateStore(sqlite_url)
    try:
        [batch] = discover(store, ctx).batch_ids
        src.body, src.etag = BODY.replace(b'"id": 7,', b'"id": 70000007,'), '"v2"'
        with pytest.raises(BatchFailed) as failed:
            run_batch(store, batch, lambda: spark)
        assert [b.batch_id for b in store.pending_batches(REF)] == [batch]
    finally:
        store.close()
    message = str(failed.value)
    assert f"url_input: {served['ranged'].url('reader:***@')} changed since" in message
    assert "ETag was '\"v1\"', now '\"v2\"'" in message and "s3cret" not in message
    assert "reset its offsets" in message
    assert read_table(wh, "p", "events").num_rows == 0


@pytest.mark.parametrize(
    ("change", "what"),
    [
        ({"etag": '"v2"'}, "ETag was '\"v1\"', now '\"v2\"'"),
        ({"last_modified": "Wed, 25 Nov 2026 06:00:00 GMT"}, "Last-Modified was"),
        ({"etag": None, "last_modified": None, "body": BODY + b'{"id": -1}\n'}, "Content-Length"),
    ],
)
def test_each_validator_catches_a_change_since_planned(
    served: dict[str, Server], change: dict[str, Any], what: str
) -> None:
    src = served["ranged"].source
    if "body" in change:  # a server without ETag and Last-Modified: the length tells
        src.etag = src.last_modified = None
    t = transport(served["ranged"].url())
    for start in (0, RANGE):  # a plain GET and a range
        [item] = t.discover(
            Cursor({t.config.path: KeyOffset(start, 0, False)} if start else {}),
            Limits(appendable=bool(start)),
        )
        for name, value in change.items():
            setattr(src, name, value)
        with pytest.raises(OSError, match="changed since") as e:
            list(t.read(item))
        assert what in str(e.value)
        src.body, src.etag, src.last_modified = BODY, '"v1"', LAST_MODIFIED
        if "body" in change:
            src.etag = src.last_modified = None


def test_body_shorter_than_what_was_read_is_an_error_at_discovery(
    served: dict[str, Server],
) -> None:
    t = transport(served["ranged"].url())
    served["ranged"].source.body = BODY[:1000]
    cursor = Cursor({t.config.path: KeyOffset(900, 20, False, {"seen": 1200})})
    with pytest.raises(OSError, match=r"changed after 900 bytes of it were committed") as e:
        list(t.discover(cursor, Limits(appendable=True)))
    assert "1000 bytes long now, and 1200 bytes of it were read" in str(e.value)


@pytest.mark.slow  # about 0.5 s or more: outside the fast lane
def test_validators_kept_with_the_offset_are_checked_at_discovery(
    served: dict[str, Server],
) -> None:
    t = transport(served["ranged"].url())
    cursor = Cursor({t.config.path: KeyOffset(900, 20, False, {"etag": '"v0"', "seen": 1200})})
    with pytest.raises(OSError, match="ETag was '\"v0\"' when its first bytes were planned"):
        list(t.discover(cursor, Limits(appendable=True)))


def test_body_changed_between_ranges_is_an_error(
    spark: Any, sqlite_url: str, tmp_path: Path, served: dict[str, Server]
) -> None:
    src, url = served["ranged"].source, served["ranged"].url()
    wh = str(tmp_path / "wh")
    spec = spec_for(url)
    run(spec, sqlite_url, wh, spark, max_rounds=1)
    src.body, src.etag = BODY.replace(b'"id": 19999,', b'"id": 70019999,'), '"v2"'
    report = run(spec, sqlite_url, wh, spark, raise_on_failure=False)
    assert "changed after" in report.failed.get("events.web", "")


# --- what discovery plans ---------------------------------------------------------------


@pytest.mark.slow
def test_discovery_plans_ranges_for_line_formats_only(served: dict[str, Server]) -> None:
    src = served["ranged"].source
    t = transport(served["ranged"].url())
    [item] = t.discover(Cursor(), Limits(appendable=True))
    assert (item.start, item.end, item.size, item.final) == (0, RANGE, len(BODY), False)
    assert dict(item.meta) == {"etag": '"v1"', "last_modified": LAST_MODIFIED, "length": len(BODY)}
    # Parquet or a JSON array: the whole body in one batch.
    [whole] = t.discover(Cursor(), Limits(appendable=False))
    assert (whole.start, whole.end, whole.final) == (0, len(BODY), True)
    # A server that says it takes no ranges: the rest of the body in one batch.
    src.accept_ranges = "none"
    [rest] = t.discover(Cursor({t.config.path: KeyOffset(500, 9, False)}), Limits(appendable=True))
    assert (rest.start, rest.end, rest.records_done, rest.final) == (500, len(BODY), 9, True)
    # A range ended inside a record longer than range_bytes: the next range reads past it.
    src.accept_ranges = "bytes"
    small = transport(served["ranged"].url(), range_bytes=100)
    [past] = small.discover(
        Cursor({t.config.path: KeyOffset(500, 9, False, {"seen": 600})}), Limits(appendable=True)
    )
    assert (past.start, past.end) == (500, 700)
    # Committed to the end: nothing more, and the input ended without asking the server.
    asked = len(src.requests)
    done = Cursor({t.config.path: KeyOffset(len(BODY), ROWS, True)})
    assert list(t.discover(done, Limits(appendable=True))) == []
    assert t.exhausted(done) is True and len(src.requests) == asked
    # A HEAD that says 0 bytes is not trusted to end the input unread: one plain GET.
    src.body = b""
    [empty] = t.discover(Cursor(), Limits(appendable=True))
    assert (empty.start, empty.end, empty.final) == (0, None, True)
    assert b"".join(t.read(empty)) == b"" and src.gets()[-1]["range"] is None


@pytest.mark.slow
def test_server_without_head_gets_one_plain_get(http_server: Any) -> None:
    # conftest's server answers HEAD with 501: the length is unknown, the body is one batch.
    http_server.files["/plain.json"] = b'{"id": 1}\n'
    t = transport(http_server.url("/plain.json"))
    [item] = t.discover(Cursor(), Limits(appendable=True))
    assert (item.start, item.end, item.final) == (0, None, True)
    assert b"".join(t.read(item)) == b'{"id": 1}\n'
    assert http_server.requests[-1]["range"] == ""
