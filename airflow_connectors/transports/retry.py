"""Retries of transient transport errors: capped exponential backoff with full jitter.

Kafka Connect's ``errors.retry.timeout`` (the total time one operation may spend
retrying; 0: never retry, -1: retry forever) and ``errors.retry.delay.max.ms`` (the cap
of one delay) become a :class:`RetryPolicy`; :func:`retrying` runs a call under it and
:func:`retrying_stream` reads a byte stream under it, re-opening the stream at the byte
offset already delivered after a transient error mid-body (a ranged re-read), so a
connection reset neither loses nor repeats bytes.

:func:`is_transient` decides what is retried: throttling and server errors (HTTP 5xx,
429, S3 ``SlowDown``...), connection resets, timeouts and truncated bodies. Permanent
errors (403, 404, bad credentials, 400) are raised at once. botocore, urllib3 and httpx
errors are recognized by class name, so this module imports none of them.

Each retry is logged at WARNING and counted in the :class:`RetryStats` in effect (see
:func:`counting`), which the engine adds to a connector's ``num_transport_errors``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from airflow_connectors.spec.redact import mask_text

__all__ = [
    "RetryPolicy",
    "RetryStats",
    "TransientError",
    "counting",
    "current_stats",
    "is_transient",
    "retrying",
    "retrying_iter",
    "retrying_stream",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: ``on_retry(error, attempt, delay_s)``: called before sleeping ahead of retry ``attempt``
#: (1 for the first retry).
OnRetry = Callable[[BaseException, int, float], None]


class _ErrorsLike(Protocol):
    """What :meth:`RetryPolicy.from_errors` reads of a connector's ``errors`` spec."""

    @property
    def retry_timeout(self) -> int: ...  # pragma: no cover - protocol

    @property
    def retry_delay_max_ms(self) -> int: ...  # pragma: no cover - protocol


#: Defaults of ``errors.retry.timeout`` and ``errors.retry.delay.max.ms`` (milliseconds).
DEFAULT_RETRY_TIMEOUT_MS = 60_000
DEFAULT_RETRY_DELAY_MAX_MS = 10_000


@dataclass(frozen=True)
class RetryPolicy:
    """How long transient errors of one call are retried.

    ``timeout_s``: the total time budget of the retries of one call (``0``: no retry,
    ``math.inf``: retry forever); ``max_delay_s``: the cap of one backoff delay;
    ``base_delay_s``: the first delay's cap (each retry doubles it up to ``max_delay_s``;
    the delay itself is drawn uniformly below the cap: "full jitter").
    """

    timeout_s: float = DEFAULT_RETRY_TIMEOUT_MS / 1000
    max_delay_s: float = DEFAULT_RETRY_DELAY_MAX_MS / 1000
    base_delay_s: float = 0.1

    @classmethod
    def from_errors(cls, errors: _ErrorsLike | None) -> RetryPolicy:
        """The policy of a connector's ``errors`` spec (``retry_timeout`` and
        ``retry_delay_max_ms``, in milliseconds; a negative timeout retries forever)."""
        if errors is None:
            return cls()
        return cls.from_ms(errors.retry_timeout, errors.retry_delay_max_ms)

    @classmethod
    def from_ms(cls, timeout_ms: int, delay_max_ms: int) -> RetryPolicy:
        """The policy of Kafka Connect's two settings, in milliseconds."""
        timeout = math.inf if timeout_ms < 0 else timeout_ms / 1000
        max_delay = max(delay_max_ms, 0) / 1000
        return cls(timeout_s=timeout, max_delay_s=max_delay, base_delay_s=min(0.1, max_delay))

    @classmethod
    def none(cls) -> RetryPolicy:
        """A policy that never retries."""
        return cls(timeout_s=0.0, max_delay_s=0.0, base_delay_s=0.0)

    def delay(self, attempt: int) -> float:
        """A random delay before retry ``attempt`` (1-based): uniform in ``[0, cap]``
        where the cap doubles from ``base_delay_s`` up to ``max_delay_s``."""
        cap = min(self.max_delay_s, self.base_delay_s * 2 ** min(attempt - 1, 62))
        return random.uniform(0.0, cap) if cap > 0 else 0.0


# --- statistics -------------------------------------------------------------------------


class RetryStats:
    """A thread-safe count of retried transient errors."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    @property
    def count(self) -> int:
        """How many transient errors were retried."""
        return self._count

    def add(self, n: int = 1) -> None:
        """Count ``n`` more retried errors."""
        with self._lock:
            self._count += n


#: Every retry of this process, whatever the stats in effect.
TOTAL = RetryStats()
_local = threading.local()


def current_stats() -> RetryStats | None:
    """The stats :func:`counting` put in effect in this thread, if any. A transport that
    fetches in worker threads captures it in the calling thread and passes it on as
    ``stats=``."""
    stats: RetryStats | None = getattr(_local, "stats", None)
    return stats


@contextlib.contextmanager
def counting(stats: RetryStats | None = None) -> Iterator[RetryStats]:
    """Count the retries of this thread (and of calls given ``stats=``) in ``stats`` (a
    new one by default) while the block runs."""
    mine = stats if stats is not None else RetryStats()
    before = current_stats()
    _local.stats = mine
    try:
        yield mine
    finally:
        _local.stats = before


def _count(stats: RetryStats | None) -> None:
    TOTAL.add()
    target = stats if stats is not None else current_stats()
    if target is not None:
        target.add()


# --- what is transient ------------------------------------------------------------------


class TransientError(Exception):
    """Raised by a transport for a failure worth retrying that no library error says is
    transient (for instance a truncated body it noticed itself). An exception of any
    class with a boolean ``transient`` attribute (or property) decides for itself."""


#: S3 (and other AWS) error codes worth retrying.
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "BandwidthLimitExceeded",
        "EC2ThrottledException",
        "PriorRequestNotComplete",
        "TransactionInProgressException",
    }
)
#: HTTP statuses worth retrying besides 5xx (501 Not Implemented is not).
TRANSIENT_STATUSES = frozenset({408, 429})

#: Library exception classes (by module prefix and class name, anywhere in the MRO)
#: that are transient. SSL errors, although botocore derives them from its
#: ConnectionError, are not: a bad certificate does not heal.
_TRANSIENT_CLASSES: Mapping[str, frozenset[str]] = {
    "botocore": frozenset(
        {
            "ConnectionError",  # EndpointConnectionError, ConnectTimeoutError, proxy
            "HTTPClientError",  # ConnectionClosedError, ReadTimeoutError, streaming
            "IncompleteReadError",
            "ChecksumError",
        }
    ),
    "urllib3": frozenset({"ProtocolError", "TimeoutError", "IncompleteRead", "NewConnectionError"}),
    "httpx": frozenset({"TimeoutException", "NetworkError", "RemoteProtocolError"}),
    "httpcore": frozenset({"TimeoutException", "NetworkError", "RemoteProtocolError"}),
    "http.client": frozenset({"IncompleteRead", "RemoteDisconnected"}),
    "requests": frozenset({"ConnectionError", "Timeout", "ChunkedEncodingError"}),
}
_PERMANENT_CLASS_NAMES = frozenset({"SSLError", "CertificateError", "SSLCertVerificationError"})

#: ``OSError.errno`` values worth retrying: network mounts and sockets that hiccup.
TRANSIENT_ERRNOS = frozenset(
    {
        errno.EIO,
        errno.ETIMEDOUT,
        errno.ESTALE,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.ECONNREFUSED,
        errno.EPIPE,
        errno.EAGAIN,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.ENETRESET,
        errno.EINTR,
    }
)


def _class_transient(exc: BaseException) -> bool | None:
    """True/False when a library class in ``exc``'s MRO decides it, else None."""
    for cls in type(exc).__mro__:
        if cls.__name__ in _PERMANENT_CLASS_NAMES:
            return False
    for cls in type(exc).__mro__:
        module = cls.__module__
        for prefix, names in _TRANSIENT_CLASSES.items():
            if (module == prefix or module.startswith(prefix + ".")) and cls.__name__ in names:
                return True
    return None


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status an error carries: botocore's ``response`` dict, an httpx or
    requests ``response`` object, urllib's ``code`` or a ``status``/``status_code``."""
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        meta = response.get("ResponseMetadata")
        status = meta.get("HTTPStatusCode") if isinstance(meta, Mapping) else None
        return status if isinstance(status, int) else None
    for owner in (response, exc):
        if owner is None:
            continue
        for attr in ("status_code", "status", "code"):
            value = getattr(owner, attr, None)
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
                return value
    return None


def error_code(exc: BaseException) -> str | None:
    """The service's error code of a botocore ``ClientError`` (``SlowDown``,
    ``NoSuchKey``, ``AccessDenied``...), else None."""
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        err = response.get("Error")
        code = err.get("Code") if isinstance(err, Mapping) else None
        return str(code) if code is not None else None
    return None


def _status_transient(status: int) -> bool:
    return status in TRANSIENT_STATUSES or (500 <= status <= 599 and status != 501)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is worth retrying: throttling and server errors (HTTP 5xx but 501,
    408, 429, S3 ``SlowDown``/``RequestTimeout``/``InternalError``/``ServiceUnavailable``),
    connection failures, resets and timeouts, truncated bodies, and ``OSError``s of a
    network mount (EIO, ETIMEDOUT, ESTALE...). Permanent: 4xx answers (403, 404/
    ``NoSuchKey``, bad credentials, 400), a missing file, a bad certificate, anything
    else."""
    if isinstance(exc, TransientError):
        return True
    marked = getattr(exc, "transient", None)
    if isinstance(marked, bool):
        return marked  # the exception says (a transport's own error types)
    code = error_code(exc)
    if code is not None:
        if code in TRANSIENT_CODES:
            return True
        status = _status_of(exc)
        return status is not None and _status_transient(status)
    decided = _class_transient(exc)
    if decided is not None:
        return decided
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True  # resets, aborts, refusals, broken pipes, socket timeouts
    if isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS:
        return True
    status = _status_of(exc)
    return status is not None and _status_transient(status) and _is_http_error(exc)


def _is_http_error(exc: BaseException) -> bool:
    """Whether an error carrying a status is an HTTP answer (httpx's HTTPStatusError,
    urllib's HTTPError, requests' HTTPError) rather than an unrelated ``code``."""
    return any(c.__name__ in ("HTTPStatusError", "HTTPError") for c in type(exc).__mro__)


# --- retrying ---------------------------------------------------------------------------


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return mask_text(f"{type(exc).__name__}: {first}" if first else type(exc).__name__)


class _Backoff:
    """The retry state of one call: its deadline and attempt count."""

    def __init__(
        self,
        policy: RetryPolicy,
        what: str,
        on_retry: OnRetry | None,
        stats: RetryStats | None,
    ) -> None:
        self.policy = policy
        self.what = what
        self.on_retry = on_retry
        self.stats = stats
        self.restart()

    def restart(self) -> None:
        """Start the time budget afresh (the call made progress)."""
        self.started = time.monotonic()
        self.attempt = 0

    def wait_or_raise(self, exc: BaseException) -> None:
        """Sleep before the next attempt, or re-raise ``exc`` when it is permanent or
        the time budget is spent."""
        if not is_transient(exc):
            raise exc
        remaining = self.started + self.policy.timeout_s - time.monotonic()
        if remaining <= 0:
            if self.attempt:
                log.warning(
                    "%s: giving up after %d retries in %.1fs: %s",
                    self.what,
                    self.attempt,
                    time.monotonic() - self.started,
                    _describe(exc),
                )
            raise exc
        self.attempt += 1
        delay = min(self.policy.delay(self.attempt), remaining)
        log.warning(
            "%s: transient error, retry %d in %.2fs: %s",
            self.what,
            self.attempt,
            delay,
            _describe(exc),
        )
        _count(self.stats)
        if self.on_retry is not None:
            self.on_retry(exc, self.attempt, delay)
        if delay > 0:
            time.sleep(delay)


def retrying(
    policy: RetryPolicy,
    what: str,
    fn: Callable[[], T],
    *,
    on_retry: OnRetry | None = None,
    stats: RetryStats | None = None,
) -> T:
    """``fn()``, retried after transient errors with capped exponential backoff and full
    jitter until ``policy.timeout_s`` has passed; then the last error is raised.
    Permanent errors are raised at once. ``what`` names the call in log lines (mask
    secrets in it); each retry is counted in ``stats`` (default: the stats of
    :func:`counting`) and reported to ``on_retry``."""
    backoff = _Backoff(policy, what, on_retry, stats)
    while True:
        try:
            return fn()
        except Exception as e:
            backoff.wait_or_raise(e)


def retrying_iter(
    policy: RetryPolicy,
    what: str,
    open_next: Callable[[], Iterator[T]],
    *,
    on_retry: OnRetry | None = None,
    stats: RetryStats | None = None,
) -> Iterator[T]:
    """The items of ``open_next()``; after a transient error while opening or mid-way,
    ``open_next()`` is called again and must continue right after the last item it
    delivered (it keeps its position itself: a message offset, a page token). The time
    budget starts afresh once an item arrives after a failure."""
    backoff = _Backoff(policy, what, on_retry, stats)
    while True:
        stream: Iterator[T] | None = None
        try:
            stream = open_next()
            for item in stream:
                if backoff.attempt:
                    backoff.restart()
                yield item
            return
        except Exception as e:
            _close(stream)
            backoff.wait_or_raise(e)
        finally:
            _close(stream)


def retrying_stream(
    policy: RetryPolicy,
    what: str,
    open_at: Callable[[int], Iterator[bytes]],
    *,
    on_retry: OnRetry | None = None,
    stats: RetryStats | None = None,
) -> Iterator[bytes]:
    """The bytes of ``open_at(0)``; after a transient error while opening or mid-body,
    ``open_at(n)`` is called again with ``n`` the bytes already yielded, so the stream
    continues without a lost or repeated byte. ``open_at(n)`` must yield the stream from
    byte ``n`` of the same content (a ranged GET, a seek). The time budget starts afresh
    once bytes arrive after a failure: a long body read through several resets is not
    failed by the sum of its stalls."""
    backoff = _Backoff(policy, what, on_retry, stats)
    offset = 0
    while True:
        stream: Iterator[bytes] | None = None
        try:
            stream = open_at(offset)
            for chunk in stream:
                if not chunk:
                    continue
                if backoff.attempt:
                    backoff.restart()
                offset += len(chunk)
                yield chunk
            return
        except Exception as e:
            _close(stream)
            backoff.wait_or_raise(e)
        finally:
            _close(stream)


def _close(stream: Any) -> None:
    close = getattr(stream, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):
            close()
