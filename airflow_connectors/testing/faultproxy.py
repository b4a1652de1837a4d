"""A fault-injecting HTTP proxy on 127.0.0.1, for retry tests in front of an HTTP
server such as the S3 test server (:mod:`airflow_connectors.testing.s3server`).

Clients use the proxy's URL as their endpoint (an S3 client signs for the proxy's
``host:port``); the proxy forwards each request to the upstream with its method, path,
headers and body unchanged, so signatures stay valid, and streams the answer back. Faults
are injected by a schedule set from tests:

    with FaultProxy(s3_server.endpoint_url) as proxy:
        proxy.add(Fault.slow_down(), method="GET")          # one 503 SlowDown
        proxy.add(Fault.reset_after(1000), path="big.json")  # RST after 1,000 body bytes
        proxy.add(Fault.drop(), times=2)                     # close before answering
        client = boto3.client("s3", endpoint_url=proxy.endpoint_url, ...)
        ...
        assert proxy.injected["slow_down"] == 1

A rule applies to the next requests it matches (method, a substring of the path, and an
optional predicate), ``times`` times; rules are tried in the order they were added.
:attr:`FaultProxy.injected` counts the faults injected by kind (a reset only once it
cut a body short; one whose body ended first counts as ``reset after the body``) and
:attr:`FaultProxy.served` the requests answered without a fault.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Fault", "FaultProxy", "Rule"]

#: Headers of one hop that are not forwarded.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_COPY_CHUNK = 64 << 10


@dataclass(frozen=True)
class Fault:
    """One fault. ``kind``: ``drop`` (close the connection before answering), ``status``
    (answer ``status`` with an S3 XML error ``code`` instead of forwarding), ``reset``
    (forward, then reset the connection after ``after_bytes`` bytes of the body) or
    ``delay`` (wait ``delay_s`` seconds, then forward)."""

    kind: str
    status: int = 503
    code: str = "SlowDown"
    message: str = "Please reduce your request rate."
    after_bytes: int = 0
    delay_s: float = 0.0
    name: str = ""

    @property
    def label(self) -> str:
        """The name the fault is counted under in :attr:`FaultProxy.injected`."""
        return self.name or self.kind

    @classmethod
    def drop(cls) -> Fault:
        """Close the connection after reading the request, without an answer."""
        return cls("drop")

    @classmethod
    def slow_down(cls) -> Fault:
        """S3's ``503 SlowDown``."""
        return cls("status", 503, "SlowDown", "Please reduce your request rate.", name="slow_down")

    @classmethod
    def error(cls, status: int, code: str, message: str = "injected") -> Fault:
        """An S3 error answer (``500 InternalError``, ``403 AccessDenied``...)."""
        return cls("status", status, code, message, name=f"{status} {code}")

    @classmethod
    def reset_after(cls, n: int) -> Fault:
        """Forward, send the answer's headers and ``n`` bytes of its body, then reset
        the connection (TCP RST)."""
        return cls("reset", after_bytes=n)

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Wait ``seconds`` before forwarding (a slow server, or a client timeout)."""
        return cls("delay", delay_s=seconds)


@dataclass
class Rule:
    """When a fault applies: requests with ``method`` (None: any) whose path contains
    ``path`` and that ``when`` accepts, ``times`` times (None: always)."""

    fault: Fault
    method: str | None = None
    path: str = ""
    times: int | None = 1
    when: Callable[[str, str, dict[str, str]], bool] | None = None

    def matches(self, method: str, path: str, headers: dict[str, str]) -> bool:
        """Whether the rule applies to this request (and has uses left)."""
        if self.times is not None and self.times <= 0:
            return False
        if self.method is not None and self.method.upper() != method:
            return False
        if self.path not in path:
            return False
        return self.when is None or self.when(method, path, headers)


class FaultProxy:
    """The proxy: :meth:`start` (or ``with``) serves on ``127.0.0.1:<port>``."""

    def __init__(self, upstream: str, port: int = 0) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the fault proxy forwards to an http:// URL, got {upstream!r}")
        self.upstream_host = parts.hostname
        self.upstream_port = parts.port or 80
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        #: Faults injected, by :attr:`Fault.label`.
        self.injected: Counter[str] = Counter()
        #: Requests forwarded and answered in full (no fault, or a delay).
        self.served = 0
        #: Every request seen, as ``(method, path)``.
        self.requests: list[tuple[str, str]] = []
        #: Requests being handled now, and the most there ever were at once.
        self.in_flight = 0
        self.most_in_flight = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port the proxy listens on."""
        return int(self._server.server_address[1])

    @property
    def endpoint_url(self) -> str:
        """The URL clients use instead of the upstream's."""
        return f"http://127.0.0.1:{self.port}"

    def add(
        self,
        fault: Fault,
        *,
        method: str | None = None,
        path: str = "",
        times: int | None = 1,
        when: Callable[[str, str, dict[str, str]], bool] | None = None,
    ) -> Rule:
        """Inject ``fault`` into the next ``times`` requests that match."""
        rule = Rule(fault, method, path, times, when)
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        """Forget the rules not used up yet."""
        with self._lock:
            self._rules.clear()

    def pending(self) -> int:
        """How many rules still have uses left."""
        with self._lock:
            return sum(1 for r in self._rules if r.times is None or r.times > 0)

    def take(self, method: str, path: str, headers: dict[str, str]) -> Fault | None:
        """The fault for this request, if a rule matches (using one of its times)."""
        with self._lock:
            self.requests.append((method, path))
            for rule in self._rules:
                if rule.matches(method, path, headers):
                    if rule.times is not None:
                        rule.times -= 1
                    if rule.fault.kind != "reset":  # counted once it cut a body
                        self.injected[rule.fault.label] += 1
                    return rule.fault
        return None

    def _count(self, label: str) -> None:
        with self._lock:
            self.injected[label] += 1

    def _served(self) -> None:
        with self._lock:
            self.served += 1

    def start(self) -> FaultProxy:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fault-proxy", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(10)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _s3_error(fault: Fault, path: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{fault.code}</Code><Message>{fault.message}</Message>"
        f"<Resource>{path}</Resource><RequestId>faultproxy</RequestId></Error>"
    ).encode()


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(_ProxyHandler):
        owner = proxy

    return Handler


class _ProxyHandler(BaseHTTPRequestHandler):
    """Forwards one request, or injects its fault."""

    protocol_version = "HTTP/1.1"
    owner: FaultProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        """The request body (Content-Length or chunked), read whole."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        owner = self.owner
        with owner._lock:
            owner.in_flight += 1
            owner.most_in_flight = max(owner.most_in_flight, owner.in_flight)
        try:
            self._handle_one()
        finally:
            with owner._lock:
                owner.in_flight -= 1

    def _handle_one(self) -> None:
        method = self.command
        headers = {k: v for k, v in self.headers.items()}
        body = self._body()
        fault = self.owner.take(method, self.path, headers)
        if fault is not None and fault.kind == "drop":
            self._reset(graceful=True)
            return
        if fault is not None and fault.kind == "status":
            data = _s3_error(fault, self.path)
            self.send_response(fault.status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(data)
            return
        if fault is not None and fault.kind == "delay":
            time.sleep(fault.delay_s)
        self._forward(method, headers, body, fault)

    def _forward(
        self, method: str, headers: dict[str, str], body: bytes, fault: Fault | None
    ) -> None:
        up = http.client.HTTPConnection(
            self.owner.upstream_host, self.owner.upstream_port, timeout=60
        )
        try:
            out = {k: v for k, v in headers.items() if k.lower() not in _HOP}
            if body or method in ("PUT", "POST"):
                out = {k: v for k, v in out.items() if k.lower() != "content-length"}
                out["Content-Length"] = str(len(body))
            up.request(method, self.path, body=body or None, headers=out)
            resp = up.getresponse()
            self._relay(method, resp, fault)
        finally:
            up.close()

    def _relay(self, method: str, resp: http.client.HTTPResponse, fault: Fault | None) -> None:
        length = resp.getheader("Content-Length")
        data: bytes | None = None
        if length is None and method != "HEAD":
            data = resp.read()  # chunked or to-close upstream answer: send its length
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP and not (data is not None and k.lower() == "content-length"):
                self.send_header(k, v)
        if data is not None:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if method == "HEAD":
            self.owner._served()
            return
        limit = fault.after_bytes if fault is not None and fault.kind == "reset" else None
        if limit is None:
            # Counted before the body goes out: a client that has read the whole answer
            # must find it counted (counting after the last write raced with it).
            self.owner._served()
        sent = 0
        while True:
            chunk = data if data is not None else resp.read(_COPY_CHUNK)
            data = b"" if data is not None else None
            if not chunk:
                break
            if limit is not None and sent + len(chunk) > limit:
                self.wfile.write(chunk[: limit - sent])
                self.owner._count(fault.label if fault is not None else "reset")
                self._reset(graceful=False)
                return
            self.wfile.write(chunk)
            sent += len(chunk)
        if limit is not None:  # the body ended before the reset point: sent whole
            self.owner._count("reset after the body")
            self._reset(graceful=False)
            return

    def _reset(self, *, graceful: bool) -> None:
        """Close the client's connection: with FIN (``graceful``) or RST."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.flush()
            if not graceful:
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
            else:
                self.connection.shutdown(socket.SHUT_RDWR)
            # The socket closes (and RST goes out) once the reader made of it is closed.
            self.rfile.close()
            self.connection.close()

    def handle_one_request(self) -> None:
        """One request, whatever its method; a client that went away ends quietly."""
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():
                return
            self._handle()
            with contextlib.suppress(OSError, ValueError):
                self.wfile.flush()
        except (ConnectionError, TimeoutError, ValueError, OSError):
            self.close_connection = True

    def finish(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            super().finish()
