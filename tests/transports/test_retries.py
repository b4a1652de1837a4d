"""Retries of transient transport errors (transports.retry): what is transient, backoff
under a time budget, counting, and streams resumed at the byte already delivered."""

from __future__ import annotations

import errno
import logging
import math
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    IncompleteReadError,
    NoCredentialsError,
    ReadTimeoutError,
    ResponseStreamingError,
    SSLError,
)

from airflow_connectors.spec.models import ErrorsSpec
from airflow_connectors.transports.retry import (
    TOTAL,
    RetryPolicy,
    RetryStats,
    TransientError,
    counting,
    is_transient,
    retrying,
    retrying_stream,
)

FAST = RetryPolicy(timeout_s=30.0, max_delay_s=0.01, base_delay_s=0.001)


def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "GetObject",
    )


def http_status_error(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "http://127.0.0.1/x")
    return httpx.HTTPStatusError(
        "answer", request=request, response=httpx.Response(status, request=request)
    )


TRANSIENT = [
    client_error("SlowDown", 503),
    client_error("RequestTimeout", 400),
    client_error("InternalError", 500),
    client_error("ServiceUnavailable", 503),
    client_error("Whatever", 502),
    client_error("TooManyRequests", 429),
    EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
    ConnectTimeoutError(endpoint_url="http://127.0.0.1:1"),
    ReadTimeoutError(endpoint_url="http://127.0.0.1:1"),
    IncompleteReadError(actual_bytes=1, expected_bytes=2),
    ResponseStreamingError(error="reset"),
    httpx.ConnectError("refused"),
    httpx.ReadTimeout("slow"),
    httpx.RemoteProtocolError("peer closed connection without sending complete message body"),
    http_status_error(503),
    http_status_error(429),
    ConnectionResetError(errno.ECONNRESET, "reset"),
    BrokenPipeError(errno.EPIPE, "pipe"),
    TimeoutError("timed out"),
    OSError(errno.EIO, "Input/output error"),
    OSError(errno.ESTALE, "Stale file handle"),
    OSError(errno.ETIMEDOUT, "timed out"),
    TransientError("short body"),
]
PERMANENT = [
    client_error("AccessDenied", 403),
    client_error("NoSuchKey", 404),
    client_error("404", 404),
    client_error("InvalidAccessKeyId", 403),
    client_error("SignatureDoesNotMatch", 403),
    client_error("InvalidRange", 416),
    client_error("NotImplemented", 501),
    client_error("BadRequest", 400),
    NoCredentialsError(),
    SSLError(endpoint_url="https://127.0.0.1:1", error="certificate verify failed"),
    http_status_error(403),
    http_status_error(404),
    httpx.UnsupportedProtocol("ftp://"),
    FileNotFoundError(errno.ENOENT, "No such file"),
    PermissionError(errno.EACCES, "denied"),
    OSError(errno.ENOSPC, "No space left"),
    ValueError("bad json"),
    KeyError("x"),
]


@pytest.mark.parametrize("exc", TRANSIENT, ids=lambda e: f"{type(e).__name__}-{e}"[:60])
def test_transient(exc: BaseException) -> None:
    assert is_transient(exc)


@pytest.mark.parametrize("exc", PERMANENT, ids=lambda e: f"{type(e).__name__}-{e}"[:60])
def test_permanent(exc: BaseException) -> None:
    assert not is_transient(exc)


def test_policy_from_errors_spec() -> None:
    default = RetryPolicy.from_errors(ErrorsSpec())
    assert default.timeout_s == 60.0
    assert default.max_delay_s == 10.0
    spec = ErrorsSpec.model_validate({"retry.timeout": 5000, "retry.delay.max.ms": 250})
    assert RetryPolicy.from_errors(spec) == RetryPolicy(5.0, 0.25, 0.1)
    assert RetryPolicy.from_errors(ErrorsSpec.model_validate({"retry.timeout": -1})).timeout_s == (
        math.inf
    )
    assert RetryPolicy.from_errors(ErrorsSpec.model_validate({"retry.timeout": 0})).timeout_s == 0


def test_delay_is_capped_and_jittered() -> None:
    p = RetryPolicy(timeout_s=60, max_delay_s=2.0, base_delay_s=0.1)
    for attempt in range(1, 80):
        cap = min(2.0, 0.1 * 2 ** (attempt - 1))
        assert all(0 <= p.delay(attempt) <= cap for _ in range(20))
    assert len({p.delay(10) for _ in range(20)}) > 1  # jitter


class Flaky:
    """A call that fails with the given errors, then answers."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_retrying_retries_transient_errors_and_counts_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fn = Flaky(client_error("SlowDown", 503), ConnectionResetError("reset"), TimeoutError())
    seen: list[tuple[str, int]] = []
    before = TOTAL.count
    with caplog.at_level(logging.WARNING), counting() as stats:
        out = retrying(
            FAST, "s3://b/key.json", fn, on_retry=lambda e, n, d: seen.append((type(e).__name__, n))
        )
    assert out == "ok"
    assert fn.calls == 4
    assert seen == [("ClientError", 1), ("ConnectionResetError", 2), ("TimeoutError", 3)]
    assert stats.count == 3
    assert TOTAL.count - before >= 3
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 3
    assert "s3://b/key.json: transient error, retry 1 in" in lines[0]
    assert "SlowDown" in lines[0]


def test_permanent_error_is_raised_at_once() -> None:
    fn = Flaky(client_error("AccessDenied", 403))
    with counting() as stats, pytest.raises(ClientError, match="AccessDenied"):
        retrying(FAST, "k", fn)
    assert fn.calls == 1
    assert stats.count == 0


def test_no_retry_when_timeout_is_zero() -> None:
    fn = Flaky(ConnectionResetError("reset"))
    with pytest.raises(ConnectionResetError):
        retrying(RetryPolicy.from_ms(0, 1000), "k", fn)
    assert fn.calls == 1


def test_gives_up_with_the_last_error_once_the_budget_is_spent() -> None:
    calls = 0

    def always() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionResetError(f"reset {calls}")

    policy = RetryPolicy(timeout_s=0.2, max_delay_s=0.02, base_delay_s=0.005)
    with pytest.raises(ConnectionResetError) as info:
        retrying(policy, "k", always)
    assert calls > 1
    assert str(info.value) == f"reset {calls}"


def test_secrets_in_errors_are_masked_in_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    fn = Flaky(ConnectionResetError("GET http://user:hunter2secret@127.0.0.1/x reset"))
    with caplog.at_level(logging.WARNING):
        retrying(FAST, "http://127.0.0.1/x", fn)
    assert "hunter2secret" not in caplog.text
    assert "reset" in caplog.text


def test_counting_is_per_thread_and_explicit_stats_cross_threads() -> None:
    with counting() as mine:
        shared = RetryStats()

        def worker() -> None:
            retrying(FAST, "k", Flaky(TimeoutError()))  # no stats in this thread
            retrying(FAST, "k", Flaky(TimeoutError()), stats=shared)

        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert mine.count == 0
        assert shared.count == 1
        retrying(FAST, "k", Flaky(TimeoutError()))
        assert mine.count == 1


DATA = bytes(range(256)) * 40  # 10,240 bytes


class Source:
    """Bytes served from an offset in chunks of 100, failing once at each of ``fail_at``
    (bytes delivered before the failure) with ``error``; records every open."""

    def __init__(self, fail_at: list[int], error: type[BaseException] = ConnectionResetError):
        self.fail_at = sorted(fail_at)
        self.error = error
        self.opens: list[int] = []
        self.closed = 0

    def open_at(self, offset: int) -> Iterator[bytes]:
        self.opens.append(offset)
        if self.fail_at and self.fail_at[0] == -1:
            self.fail_at.pop(0)
            raise self.error("refused before answering")
        try:
            pos = offset
            while pos < len(DATA):
                if self.fail_at and pos >= self.fail_at[0]:
                    self.fail_at.pop(0)
                    raise self.error(f"reset at {pos}")
                end = min(pos + 100, len(DATA))
                if self.fail_at:
                    end = min(end, max(self.fail_at[0], pos + 1))
                yield DATA[pos:end]
                pos = end
        finally:
            self.closed += 1


def test_stream_resumes_at_the_byte_delivered() -> None:
    src = Source([-1, 50, 51, 3333, 10_000])
    with counting() as stats:
        out = b"".join(retrying_stream(FAST, "obj", src.open_at))
    assert out == DATA
    assert src.opens == [0, 0, 50, 51, 3333, 10_000]
    assert stats.count == 5


def test_stream_permanent_error_mid_body_is_raised() -> None:
    src = Source([500], error=PermissionError)
    got = bytearray()
    with pytest.raises(PermissionError):
        for chunk in retrying_stream(FAST, "obj", src.open_at):
            got += chunk
    assert bytes(got) == DATA[:500]
    assert src.opens == [0]


def test_stream_budget_restarts_after_progress() -> None:
    # Many resets, each after progress: the stream completes although the resets
    # together would exceed a budget that allows about one retry.
    src = Source(list(range(100, 10_000, 100)))
    policy = RetryPolicy(timeout_s=5.0, max_delay_s=0.001, base_delay_s=0.001)
    assert b"".join(retrying_stream(policy, "obj", src.open_at)) == DATA
    assert len(src.opens) == 100


def test_stream_closed_early_closes_the_source() -> None:
    src = Source([])
    stream = retrying_stream(FAST, "obj", src.open_at)
    assert next(stream) == DATA[:100]
    stream.close()  # type: ignore[attr-defined]
    assert src.closed == 1


# --- file_input: transient OSErrors of a network mount ---------------------------------


def _file_transport(path: object, **errors: object) -> object:
    from airflow_connectors.catalog import parse_pipeline, transport_of

    spec = parse_pipeline(
        {
            "pipeline": "p",
            "tables": {
                "t": {
                    "columns": {"id": "BIGINT"},
                    "connectors": [
                        {
                            "name": "files",
                            "transport": {
                                "name": "file_input",
                                "config": {"path": str(path), "buffer_size_bytes": 1000},
                            },
                            "format": {"name": "json"},
                            "errors": errors,
                        }
                    ],
                }
            },
        }
    )
    table = spec.tables[0]
    return transport_of(table.connectors[0], table)


def test_file_input_retries_transient_os_errors_mid_read(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip
    from pathlib import Path

    from airflow_connectors.transports import file_input
    from airflow_connectors.transports.base import WorkItem

    data = b"".join(b'{"id": %d}\n' % i for i in range(3000))
    plain = Path(str(tmp_path)) / "a.json"
    plain.write_bytes(data)
    packed = Path(str(tmp_path)) / "b.json.gz"
    packed.write_bytes(gzip.compress(data))
    real = file_input._read_range
    faults = {"EIO": errno.EIO, "ESTALE": errno.ESTALE, "ETIMEDOUT": errno.ETIMEDOUT}
    opened: list[tuple[str, int]] = []

    def flaky(path: str, start: int, end: int | None, chunk: int) -> Iterator[bytes]:
        # A network mount that fails once on open and once after 2,500 bytes.
        opened.append((path, start))
        if len(opened) == 1 and "ESTALE" in faults:
            raise OSError(faults.pop("ESTALE"), "Stale file handle", path)
        got = 0
        for part in real(path, start, end, chunk):
            yield part
            got += len(part)
            if got >= 2500 and "EIO" in faults:
                raise OSError(faults.pop("EIO"), "Input/output error", path)

    monkeypatch.setattr(file_input, "_read_range", flaky)
    transport = _file_transport(tmp_path, **{"retry.delay.max.ms": 10})
    with counting() as stats:
        whole = b"".join(transport.read(WorkItem(str(plain), 0, len(data))))  # type: ignore[attr-defined]
    assert whole == data
    assert opened == [(str(plain), 0), (str(plain), 0), (str(plain), 3000)]
    assert stats.count == 2

    # a compressed file re-opened mid-body continues with the compressed byte reached
    opened.clear()
    faults.update(EIO=errno.EIO)
    out = b"".join(transport.read(WorkItem(str(packed), 100, None)))  # type: ignore[attr-defined]
    assert out == data[100:]
    assert [s for _, s in opened] == [0, 3000]

    # a missing file is permanent: no retry
    with counting() as stats, pytest.raises(FileNotFoundError, match="listed for this batch"):
        b"".join(transport.read(WorkItem(str(plain) + ".gone", 0, None)))  # type: ignore[attr-defined]
    assert stats.count == 0

    # retry.timeout: 0 turns retries off
    faults.update(EIO=errno.EIO)
    strict = _file_transport(tmp_path, **{"retry.timeout": 0})
    with pytest.raises(OSError, match="Input/output error"):
        b"".join(strict.read(WorkItem(str(plain), 0, len(data))))  # type: ignore[attr-defined]


# --- boto3 through the fault-injecting proxy, in front of the S3 test server -----------


@pytest.fixture
def proxy(s3_server: Any) -> Iterator[Any]:
    from airflow_connectors.testing.faultproxy import FaultProxy

    with FaultProxy(s3_server.endpoint_url) as p:
        yield p


def proxied_client(proxy: Any) -> Any:
    import boto3
    from botocore.config import Config

    from airflow_connectors.testing.s3server import ACCESS_KEY, REGION, SECRET_KEY

    # botocore's own retries off: what is retried here is ours.
    return boto3.client(
        "s3",
        endpoint_url=proxy.endpoint_url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )


def test_boto3_503_slow_down_and_a_dropped_connection_are_retried(
    proxy: Any, s3_server: Any, s3_bucket: str
) -> None:
    from airflow_connectors.testing.faultproxy import Fault

    body = b"".join(b'{"id": %d}\n' % i for i in range(1000))
    s3_server.client().put_object(Bucket=s3_bucket, Key="in/a.json", Body=body)
    client = proxied_client(proxy)
    proxy.add(Fault.slow_down(), method="GET", path="in/a.json")
    proxy.add(Fault.drop(), method="GET", path="in/a.json")
    seen: list[str] = []
    with counting() as stats:
        got = retrying(
            FAST,
            f"s3://{s3_bucket}/in/a.json",
            lambda: client.get_object(Bucket=s3_bucket, Key="in/a.json")["Body"].read(),
            on_retry=lambda e, n, d: seen.append(type(e).__name__),
        )
    assert got == body
    assert seen == ["ClientError", "ConnectionClosedError"]
    assert stats.count == 2
    assert proxy.injected == {"slow_down": 1, "drop": 1}
    assert proxy.served == 1  # the GET that answered


def test_boto3_permanent_403_is_not_retried(proxy: Any, s3_server: Any, s3_bucket: str) -> None:
    from airflow_connectors.testing.faultproxy import Fault

    s3_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"x")
    client = proxied_client(proxy)
    proxy.add(Fault.error(403, "AccessDenied", "Access Denied"), times=None)
    with counting() as stats, pytest.raises(ClientError, match="AccessDenied"):
        retrying(FAST, "k", lambda: client.get_object(Bucket=s3_bucket, Key="k"))
    assert stats.count == 0
    assert proxy.injected["403 AccessDenied"] == 1


def test_boto3_reset_mid_body_resumes_with_a_ranged_get(
    proxy: Any, s3_server: Any, s3_bucket: str
) -> None:
    from airflow_connectors.testing.faultproxy import Fault

    body = bytes(range(256)) * 1024  # 256 KiB
    s3_server.client().put_object(Bucket=s3_bucket, Key="big.bin", Body=body)
    client = proxied_client(proxy)
    ranges: list[str] = []

    def open_at(offset: int) -> Iterator[bytes]:
        ranges.append(f"bytes={offset}-")
        answer = client.get_object(Bucket=s3_bucket, Key="big.bin", Range=f"bytes={offset}-")
        return iter(answer["Body"].iter_chunks(8192))

    # Resets after 1,000 and 70,001 bytes of two bodies, a 503 on a re-open, a delay.
    proxy.add(Fault.reset_after(1000), path="big.bin")
    proxy.add(Fault.reset_after(70_001), path="big.bin")
    proxy.add(Fault.slow_down(), path="big.bin")
    proxy.add(Fault.delay(0.05), path="big.bin")
    with counting() as stats:
        got = b"".join(retrying_stream(FAST, f"s3://{s3_bucket}/big.bin", open_at))
    assert len(got) == len(body) and got == body  # nothing lost, nothing repeated
    # Each re-open asks for the byte after the last one delivered (how many bytes before
    # a reset reach the caller depends on the client's buffering).
    offsets = [int(r.removeprefix("bytes=").rstrip("-")) for r in ranges]
    assert len(offsets) == 4 and offsets[0] == 0
    assert offsets == sorted(offsets) and offsets[1] <= 1000 <= offsets[1] + 70_001
    assert offsets[2] <= offsets[1] + 70_001
    assert offsets[3] == offsets[2]  # the 503 came before any byte of that answer
    assert stats.count == 3
    assert proxy.injected == {"reset": 2, "slow_down": 1, "delay": 1}


# --- s3_input end to end through the fault proxy ---------------------------------------


def _s3_pipeline(bucket: str, endpoint: str, **errors: object) -> Any:
    from helpers import pipeline

    from airflow_connectors.testing.s3server import ACCESS_KEY, REGION, SECRET_KEY

    return pipeline(
        {
            "t": {
                "columns": {"id": "BIGINT NOT NULL", "pad": "VARCHAR"},
                "connectors": [
                    {
                        "name": "s3",
                        "transport": {
                            "name": "s3_input",
                            "config": {
                                "bucket_name": bucket,
                                "prefix": "in/",
                                "endpoint_url": endpoint,
                                "region": REGION,
                                "aws_access_key_id": ACCESS_KEY,
                                "aws_secret_access_key": SECRET_KEY,
                            },
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                        "errors": {"retry.delay.max.ms": 20, **errors},
                    }
                ],
            }
        }
    )


def _put_objects(s3_server: Any, bucket: str) -> list[int]:
    """Six objects of 400 rows (~25 KB each), two of them gzip; returns the ids."""
    import gzip

    client = s3_server.client()
    for n in range(6):
        lines = b"".join(
            b'{"id": %d, "pad": "%s"}\n' % (n * 400 + i, b"x" * 40) for i in range(400)
        )
        key, body = (
            (f"in/{n}.json.gz", gzip.compress(lines)) if n % 3 == 2 else (f"in/{n}.json", lines)
        )
        client.put_object(Bucket=bucket, Key=key, Body=body)
    return list(range(2400))


def test_s3_input_through_faults_ingests_exactly_the_source_rows(
    spark: Any, proxy: Any, s3_server: Any, s3_bucket: str, sqlite_url: str, tmp_path: Any
) -> None:
    from helpers import read_table, run, status

    from airflow_connectors.testing.faultproxy import Fault

    expected = _put_objects(s3_server, s3_bucket)
    object_get = {"method": "GET", "path": "/in/"}  # object GETs, not the listing
    proxy.add(Fault.slow_down(), path="/in/1.json", method="GET")
    proxy.add(Fault.drop(), path="/in/3.json", method="GET")
    proxy.add(Fault.reset_after(3000), path="/in/4.json", method="GET")
    proxy.add(Fault.reset_after(500), path="/in/2.json.gz", method="GET")  # compressed
    proxy.add(Fault.error(500, "InternalError"), **object_get, times=2)
    # The listing is retried too (on the driver; logged, not counted in the stats).
    proxy.add(Fault.slow_down(), when=lambda m, p, h: "list-type=2" in p)
    wh = str(tmp_path / "wh")
    run(_s3_pipeline(s3_bucket, proxy.endpoint_url), sqlite_url, wh, spark)
    got = read_table(wh, "p", "t").column("id").to_pylist()
    assert sorted(got) == expected  # every row once: nothing lost, nothing doubled
    assert proxy.pending() == 0  # every fault was injected
    st = status(sqlite_url, "p", "t", "s3")
    assert st.total_records == 2400 and st.end_of_input
    assert proxy.injected == {"slow_down": 2, "drop": 1, "reset": 2, "500 InternalError": 2}
    object_faults = sum(proxy.injected.values()) - 1  # all but the listing's 503
    assert st.num_transport_errors == object_faults == 6
    assert st.fatal_error is None


def test_s3_input_permanent_403_fails_the_batch_naming_the_object(
    spark: Any, proxy: Any, s3_server: Any, s3_bucket: str, sqlite_url: str, tmp_path: Any
) -> None:
    from helpers import read_table, run, status

    from airflow_connectors.testing.faultproxy import Fault
    from airflow_connectors.testing.s3server import SECRET_KEY

    _put_objects(s3_server, s3_bucket)
    proxy.add(Fault.error(403, "AccessDenied", "Access Denied"), path="/in/4.json", times=None)
    wh = str(tmp_path / "wh")
    run(_s3_pipeline(s3_bucket, proxy.endpoint_url), sqlite_url, wh, spark, raise_on_failure=False)
    st = status(sqlite_url, "p", "t", "s3")
    assert st.state == "FAILED"
    message = st.fatal_error or ""
    assert f"s3://{s3_bucket}/in/4.json" in message and "AccessDenied" in message, message
    assert SECRET_KEY not in message
    assert proxy.injected["403 AccessDenied"] == 1  # refused once: never retried
    assert read_table(wh, "p", "t").num_rows == 0  # the batch did not land


def test_retry_settings_validate_with_kafka_connect_names_and_paths() -> None:
    from airflow_connectors.catalog import parse_pipeline, validate_pipeline

    def doc(errors: dict[str, Any]) -> dict[str, Any]:
        return {
            "pipeline": "p",
            "tables": {
                "t": {
                    "columns": {"id": "BIGINT"},
                    "connectors": [
                        {
                            "name": "c",
                            "transport": {"name": "file_input", "config": {"path": "/x"}},
                            "format": {"name": "json"},
                            "errors": errors,
                        }
                    ],
                }
            },
        }

    def problems(errors: dict[str, Any]) -> list[tuple[str, str]]:
        return [(e.path, e.message) for e in validate_pipeline(doc(errors))]

    at = "tables.t.connectors[0].errors"
    ok = {"tolerance": "all", "retry.timeout": 60000, "retry.delay.max.ms": 5000}
    assert problems(ok) == []
    assert problems({"retry_timeout": -1, "retry_delay_max_ms": 0}) == []
    spec = parse_pipeline(doc(ok))
    errors = spec.tables[0].connectors[0].errors
    assert (errors.retry_timeout, errors.retry_delay_max_ms) == (60000, 5000)
    assert problems({"retry.timout": 5}) == [
        (
            f"{at}.retry.timout",
            "unknown field 'retry.timout' (did you mean 'retry.timeout'?); allowed fields: "
            "tolerance, retry.timeout, retry.delay.max.ms",
        )
    ]
    assert problems({"retry.timeout": -2}) == [
        (f"{at}.retry.timeout", "input should be greater than or equal to -1 (got -2)")
    ]
    [(path, message)] = problems({"retry.delay.max.ms": "soon"})
    assert path == f"{at}.retry.delay.max.ms" and "valid integer" in message


def test_an_error_with_a_transient_attribute_decides_for_itself() -> None:
    class Busy(OSError):
        transient = True

    class Gone(ConnectionResetError):  # a reset, but its transport knows better
        transient = False

    assert is_transient(Busy("server busy"))
    assert not is_transient(Gone("replaced since planned"))
    fn = Flaky(Busy("busy"), Busy("busy"))
    assert retrying(FAST, "k", fn) == "ok" and fn.calls == 3
