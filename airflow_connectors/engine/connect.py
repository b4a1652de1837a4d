"""Spark Connect sessions: a batch run as a client of a warm Spark Connect server
(``execution: spark_connect``) instead of a Spark application of its own.

The server already runs Spark (its JVM, executors and pooled Python workers), so a batch
costs a connection (a fraction of a second) plus its job. What the server's executors
need of this package reaches them as an artifact of the client's session
(``addArtifacts(zip, pyfile=True)``: the zip of :func:`.package.package_zip` on their
``sys.path``), never installed on the server; artifacts belong to one server session, so
a process reuses its session (:func:`connect_session` keeps one per URL) and sends the
zip once per session.

A token (the Spark provider's ``spark_connect`` connection keeps it as the password and
writes ``sc://host:port/;token=...``) is a bearer token of gRPC's call credentials. The
pyspark client sends call credentials only over TLS, except to the host name
``localhost``; a server on a loopback address (``127.0.0.1``, ``::1``) without TLS is
reached here through gRPC's local credentials, which check that the peer is on this
machine. Whatever carries the token (the URL) is a secret: messages name the server as
:func:`server_address` shows it, ``sc://host:port`` without its parameters.

Sessions are shared (``[connectors] spark_connect_session = shared``, the default): every
process of one deployment (same state store and warehouse) and package version attaches
to the same server-side session (a ``session_id`` derived from them, :func:`shared_session_id`),
whose Python workers and artifact stay warm from task to task: a new server session
starts Python workers of its own for its first job (~1.3 s on local Spark), an attached
one reuses them (~0.2 s per small job). A process only closes its channel when done, it
never releases the shared session; the server drops it after its idle timeout
(``spark.connect.session.manager.defaultSessionTimeout``). The tasks' credentials never
live in the session: each task carries its own and restores the worker's environment
(:func:`.spark.task_environment`). ``per_task`` opens and releases a session per process.

Imports pyspark only inside :func:`connect_session`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession

    from airflow_connectors.settings import Settings

log = logging.getLogger(__name__)

#: Spark Connect's port when a URL names none.
DEFAULT_PORT = 15002
#: Seconds the first contact may take before the server counts as unreachable.
CONNECT_TIMEOUT = 10.0
#: Retries of a call that met an unavailable server (pyspark's default retries for ten
#: minutes): about 4 s in all (50 ms, then 4x each time), what a network blip takes. A
#: server that restarted has lost the session and its operations anyway, so waiting
#: for it gains nothing: the batch fails and the task's retries (or the next run) run it
#: again. The client's background releases and exit hooks wait as long, once.
MAX_RETRIES = 4
MAX_BACKOFF_MS = 10_000
_LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")
#: What gives the URL outside Airflow, named in messages' remedies.
SETTING = "[connectors] spark_connect_url"
#: Where a server comes from, for the message when none answers.
START_HINT = "start it (scripts/quickstart.sh --spark connect starts one)"

_sessions: dict[str, SparkSession] = {}
#: URLs whose session is shared: closed, never released, when this process is done.
_shared: set[str] = set()
_lock = threading.Lock()
#: The namespace of shared session ids.
_NAMESPACE = uuid.UUID("6f1c8a52-3d0e-4d3b-9a57-2b1f0c8e7d41")


class SparkConnectError(Exception):
    """A Spark Connect server could not be used; the message is one line naming the
    server (never its token), the cause and what to do."""


class SparkConnectUnreachable(SparkConnectError, ConnectionError):
    """No Spark Connect server answers at the URL (transient: it may be starting)."""


class SparkConnectRefused(SparkConnectError, PermissionError):
    """The server refused the client: a missing or wrong token (permanent)."""


class SparkConnectUrlError(SparkConnectError, ValueError):
    """A Spark Connect URL that is not ``sc://host[:port][/;param=value...]``, or none
    where one is needed."""


def _parts(url: str) -> tuple[str, int, dict[str, str]]:
    """``(host, port, parameters)`` of ``sc://host:port/;name=value;...``."""
    if not url.startswith("sc://"):
        raise SparkConnectUrlError(
            "a Spark Connect URL starts with sc:// (sc://host:port, with /;token=... when "
            "the server requires a token)"
        )
    rest = url.removeprefix("sc://")
    netloc, _, tail = rest.partition("/")
    params: dict[str, str] = {}
    for pair in tail.lstrip(";").split(";"):
        if pair:
            name, _, value = pair.partition("=")
            params[name] = unquote(value)
    host, port_text = netloc, ""
    if netloc.startswith("["):  # [::1]:15002
        host, _, after = netloc.partition("]")
        host += "]"
        port_text = after.removeprefix(":")
    elif netloc.count(":") == 1:
        host, port_text = netloc.split(":")
    if not host:
        raise SparkConnectUrlError("a Spark Connect URL names a host: sc://host:port")
    try:
        port = int(port_text) if port_text else DEFAULT_PORT
    except ValueError:
        raise SparkConnectUrlError(
            f"the port of Spark Connect server sc://{host} is not a number"
        ) from None
    return host, port, params


def server_address(url: str) -> str:
    """``sc://host:port`` of ``url``, without its parameters (the token among them): how
    a server is named in messages and logs."""
    host, port, _ = _parts(url)
    return f"sc://{host}:{port}"


def url_token(url: str) -> str | None:
    """The token ``url`` carries (``;token=...``), if any: a secret to mask."""
    return _parts(url)[2].get("token") or None


def connect_session(
    url: str, settings: Settings, *, data_sources: bool = True, where: str = SETTING
) -> SparkSession:
    """A Spark Connect client session of the server at ``url``, reused within this
    process (one per URL): the first call connects, sends this package to the server's
    executors (unless ``[connectors] ship_package = never``: the server's Python has it
    installed) and, with ``data_sources``, registers the transports as Python data
    sources of the session (``spark.read.format("file_input")``; a batch needs none).

    Raises :class:`SparkConnectUnreachable` in one line when no server answers and
    :class:`SparkConnectRefused` when it refuses the token; ``where`` names what gave
    the URL (an Airflow connection, or ``[connectors] spark_connect_url``), for the
    message's remedy."""
    with _lock:
        cached = _sessions.get(url)
        if cached is not None and not cached.is_stopped:
            return cached
        shared = settings.spark_connect_session == "shared" and "session_id" not in _parts(url)[2]
        session_id = shared_session_id(settings) if shared else None
        session = _connect(url, where, session_id)
        try:
            _prepare(session, settings, data_sources)
        except Exception as exc:
            _quietly_stop(session, release=not shared)
            _raise_one_line(url, exc, where)
            raise
        _sessions[url] = session
        if shared:
            _shared.add(url)
        else:
            _shared.discard(url)
        return session


def shared_session_id(settings: Settings) -> str:
    """The server-side session the processes of one deployment share: a UUID derived
    from its state store and warehouse (one-way: the id reveals neither) and this
    package's version (a new version gets a session of its own, with its own artifact
    and freshly started Python workers)."""
    version = _package_zip().name if settings.ship_package != "never" else "installed"
    key = hashlib.sha256(
        "\0".join((settings.state_store_url, settings.warehouse, version)).encode()
    ).hexdigest()
    return str(uuid.uuid5(_NAMESPACE, key))


def forget_session(url: str) -> None:
    """Stops and forgets this process's session of ``url`` (its server-side session and
    artifacts go with it); the next :func:`connect_session` connects again. Call it
    when a batch failed in a way the server may have caused (a restart loses its
    sessions), and when the process is done with the server."""
    with _lock:
        session = _sessions.pop(url, None)
        shared = url in _shared
        _shared.discard(url)
    if session is not None:
        _quietly_stop(session, release=not shared)


def close_sessions() -> None:
    """Stops every session this process opened (:func:`forget_session` for each)."""
    for url in list(_sessions):
        forget_session(url)


def _connect(url: str, where: str, session_id: str | None = None) -> SparkSession:
    host, port, params = _parts(url)
    address = f"sc://{host}:{port}"
    # A refused or unroutable port fails here at once, in one line: pyspark's client
    # would retry an unavailable server for minutes before it said so.
    t0 = time.monotonic()
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=CONNECT_TIMEOUT):
            pass
    except OSError as exc:
        raise SparkConnectUnreachable(_unreachable(url, exc, where)) from None
    from pyspark.sql.connect.client.retries import DefaultPolicy
    from pyspark.sql.connect.session import SparkSession

    def create(session_url: str) -> SparkSession:
        builder = SparkSession.builder
        if host in _LOOPBACK and params.get("use_ssl", "").lower() != "true":
            builder = builder.channelBuilder(_loopback_channel_builder(session_url))
        else:
            builder = builder.remote(session_url)
        # The engine's sessions run in UTC (as engine.spark's local sessions do).
        return builder.config("spark.sql.session.timeZone", "UTC").create()

    try:
        try:
            session = create(_with_session_id(url, session_id))
        except Exception as exc:
            if session_id is None or "SESSION_CLOSED" not in str(exc):
                raise
            # Someone released the shared session (the server refuses its id from
            # then on): a session of this process's own.
            log.info("Spark Connect: the shared session was closed; using a new one")
            session = create(url)
    except Exception as exc:  # the session's first call: the token is checked here
        _raise_one_line(url, exc, where)
        raise
    session.client.set_retry_policies(
        [DefaultPolicy(max_retries=MAX_RETRIES, max_backoff=MAX_BACKOFF_MS)]
    )
    log.info("Spark Connect: connected to %s in %.2f s", address, time.monotonic() - t0)
    return session


@functools.cache
def _package_zip() -> Path:
    """This package's zip (:func:`.package.package_zip`), built or found once per
    process: the shared session's id and the artifact both name it."""
    from airflow_connectors.engine.package import package_zip

    return package_zip()


def _with_session_id(url: str, session_id: str | None) -> str:
    """``url`` with the parameter ``session_id`` (pyspark's client attaches to it)."""
    if session_id is None:
        return url
    base, sep, params = url.partition("/;")
    return (
        f"{base.rstrip('/')}/;{params};session_id={session_id}"
        if sep and params
        else (f"{base.rstrip('/')}/;session_id={session_id}")
    )


def _prepare(session: Any, settings: Settings, data_sources: bool) -> None:
    """What a new server session gets once: this package for its executors (as an
    artifact, on their ``sys.path``) and, if asked, the transports as data sources.
    A shared session that has the artifact already (the same zip: its name is in the
    session id) keeps it."""
    t0 = time.monotonic()
    if settings.ship_package != "never":
        _add_package(session)
    if data_sources:
        from airflow_connectors.engine.datasource import register

        register(session)
    log.debug("Spark Connect: session prepared in %.2f s", time.monotonic() - t0)


def _add_package(session: Any, attempts: int = 5) -> None:
    """This package's zip as an artifact of ``session``. Another process attaching to
    the same shared session may be adding the same zip at this moment: the server then
    answers ``ALREADY_EXISTS``, or, when both writes meet, ``INTERNAL`` naming the zip's
    path (its file move failed because the other write landed first); that one is
    asked again a moment later, when the zip is there."""
    zip_path = str(_package_zip())
    name = zip_path.rsplit("/", 1)[-1]
    for attempt in range(attempts):
        try:
            session.addArtifacts(zip_path, pyfile=True)
            return
        except Exception as exc:
            text = str(exc)
            if "ALREADY_EXISTS" in text.upper():
                log.debug("Spark Connect: the session has this package already")
                return
            if attempt + 1 >= attempts or "INTERNAL" not in text or name not in text:
                raise
            log.debug("Spark Connect: adding the package met another process's add; again")
            time.sleep(0.2 * (attempt + 1))


def _loopback_channel_builder(url: str) -> Any:
    """A channel builder for a server on this machine: with a token and no TLS, gRPC's
    local credentials carry it (pyspark's own builder would ask for TLS on any host
    but ``localhost``); without a token, pyspark's plain channel."""
    import grpc
    from pyspark.sql.connect.client import DefaultChannelBuilder

    class LoopbackChannelBuilder(DefaultChannelBuilder):
        def toChannel(self) -> grpc.Channel:
            if self.token is None or self.use_ssl:
                return super().toChannel()
            creds = grpc.composite_channel_credentials(
                grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP),
                grpc.access_token_call_credentials(self.token),
            )
            return self._secure_channel(self.endpoint, creds)

    return LoopbackChannelBuilder(url)


def _raise_one_line(url: str, exc: BaseException, where: str) -> None:
    """Raises the one-line error for a server that is gone or refuses the client;
    returns for any other error (the caller re-raises it)."""
    text = str(exc)
    if "StatusCode.UNAVAILABLE" in text or "failed to connect to all addresses" in text:
        raise SparkConnectUnreachable(_unreachable(url, exc, where)) from None
    if "StatusCode.UNAUTHENTICATED" in text or "StatusCode.PERMISSION_DENIED" in text:
        raise SparkConnectRefused(
            f"Spark Connect server {server_address(url)} refused the client "
            f"({_masked_cause(url, exc)}); give {where} the token the server expects "
            "(its spark.connect.authenticate.token, or SPARK_CONNECT_AUTHENTICATE_TOKEN in "
            "its environment)"
        ) from None


def _unreachable(url: str, exc: BaseException, where: str) -> str:
    """The one line for a server that does not answer (``exc``: why)."""
    return (
        f"Spark Connect server {server_address(url)} is not reachable "
        f"({_masked_cause(url, exc)}); {START_HINT} or point {where} at a running server"
    )


def _masked_cause(url: str, exc: BaseException) -> str:
    cause = _cause(exc)
    token = url_token(url)
    return cause.replace(token, "***") if token else cause


def _cause(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    for line in str(exc).splitlines():
        line = line.strip()
        if line.startswith("details ="):
            return line.removeprefix("details =").strip().strip('"')
    first = str(exc).strip().splitlines()
    return first[0] if first else type(exc).__name__


def _quietly_stop(session: Any, *, release: bool = True) -> None:
    """Releases the server-side session (``release``; else only closes this process's
    channel: a shared session stays for the others), without retrying: a server that
    does not answer at once has lost it already (or keeps it until its idle timeout)."""
    try:
        from pyspark.sql.connect.client.retries import DefaultPolicy

        session.client.set_retry_policies([DefaultPolicy(max_retries=0)])
        if release:
            session.stop()
        else:
            session.client.close()
    except Exception:  # the server may be gone: nothing to release
        log.debug("Spark Connect: stopping a session failed", exc_info=True)
