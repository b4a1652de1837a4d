"""Azurite, Microsoft's Azure Storage emulator, on 127.0.0.1 for tests, examples and
benchmarks: its Blob service (``azurite-blob``) run with the machine's Node.js in a
process of its own, so Spark workers and ``spark-submit`` jobs reach it over HTTP like
the real service.

    with Azurite() as azure:
        azure.create_container("landing")
        azure.service().get_blob_client("landing", "a.json").upload_blob(b"...")
        # azure.account_url, azure.connection_string, azure.config("landing") for
        # azure_blob_input, azure.storage_options() for delta-rs

The npm package ``azurite`` (version :data:`VERSION`, the last one that runs on Node.js
20) is installed on first use into a cache outside the repository,
``$AIRFLOW_CONNECTORS_AZURITE_CACHE``, else ``/var/tmp/airflow-connectors/azurite``; a
file lock makes concurrent first uses install it once. Nothing is kept on disk: the
server runs with ``--inMemoryPersistence`` (every start is empty), on a free port,
with ``--skipApiVersionCheck`` (the Python SDK may speak a newer REST API version than
this Azurite knows) and with its telemetry off.

The account is Azurite's published development account (:data:`ACCOUNT`, :data:`KEY`):
well known, never a real secret, but the tests check that it is masked like one.

    python -m airflow_connectors.testing.azurite     # install, print the server's path
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from airflow_connectors.testing.standalone import file_tail, free_port

VERSION = "3.35.0"
#: Azurite's development account and its key, published in Azurite's README.
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
STAMP = ".complete"


class AzuriteError(RuntimeError):
    """Azurite could not be installed or started (the message says why and what to do)."""


def cache_root() -> Path:
    """Where Azurite's npm install lives (outside the repository)."""
    explicit = os.environ.get("AIRFLOW_CONNECTORS_AZURITE_CACHE")
    return Path(explicit or "/var/tmp/airflow-connectors/azurite")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise AzuriteError(
            f"the Azurite test server needs Node.js 18 or later, but {name!r} is not on "
            "PATH; install Node.js (Debian: apt-get install nodejs npm)"
        )
    return found


def install(*, timeout: float = 600.0) -> Path:
    """The ``azurite-blob`` script of Azurite :data:`VERSION`, installed with npm into
    :func:`cache_root` on first use. Safe from several processes at once: one installs,
    the others wait for it."""
    target = cache_root() / f"azurite-{VERSION}"
    script = target / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"
    if not (target / STAMP).exists():
        with _locked(target.with_name(target.name + ".lock")):
            if not (target / STAMP).exists():
                _npm_install(target, timeout)
    if not script.is_file():
        raise AzuriteError(
            f"Azurite {VERSION} in {target} has no {script.name} (a damaged install); "
            f"remove {target} and run again"
        )
    return script


def _npm_install(target: Path, timeout: float) -> None:
    npm = _tool("npm")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".azurite-", dir=target.parent))
    cmd = [npm, "install", "--prefix", str(staging), "--omit=dev", "--no-audit", "--no-fund"]
    cmd += ["--no-save", "--loglevel=error", f"azurite@{VERSION}"]
    print(f"azurite: installing azurite@{VERSION} into {target}", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise AzuriteError(
            f"npm install azurite@{VERSION} did not finish in {timeout:.0f} s; is the npm "
            "registry reachable (npm config get registry)?"
        ) from e
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise AzuriteError(
            f"npm install azurite@{VERSION} failed (exit {done.returncode}); is the npm "
            f"registry reachable (npm config get registry)?\n{tail}"
        )
    (staging / STAMP).write_text(" ".join(cmd[1:]) + "\n")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)


class Azurite:
    """Azurite's Blob service as a subprocess on ``127.0.0.1:<port>``, in memory."""

    def __init__(self, port: int | None = None, *, log: Path | None = None) -> None:
        self.port = port or free_port()
        #: The account's Blob endpoint (path-style, as Azurite serves it).
        self.account_url = f"http://127.0.0.1:{self.port}/{ACCOUNT}"
        self.connection_string = (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint={self.account_url};"
        )
        self.log = log
        self._proc: subprocess.Popen[bytes] | None = None
        self._cwd: str | None = None

    def start(self, timeout: float = 60.0) -> Azurite:
        """Install Azurite if needed, start it and wait until it answers."""
        node = _tool("node")
        script = install()
        # Azurite writes nothing with --inMemoryPersistence, but give it a folder of its
        # own as working directory anyway (it would put its metadata files there).
        self._cwd = tempfile.mkdtemp(prefix="azurite-")
        log = self.log or Path(self._cwd) / "azurite.log"
        out = open(log, "ab")  # noqa: SIM115 (the child holds it for its life)
        cmd = [node, str(script), "--blobHost", "127.0.0.1", "--blobPort", str(self.port)]
        cmd += ["--inMemoryPersistence", "--skipApiVersionCheck", "--disableTelemetry"]
        self._proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=self._cwd,
            start_new_session=True,
        )
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code, tail = self._proc.returncode, file_tail(log)
                self.stop()
                raise AzuriteError(
                    f"Azurite exited with code {code} before answering on "
                    f"{self.account_url}; its output:\n{tail}"
                )
            try:
                # Any HTTP answer (an unauthenticated request is refused) means it serves.
                httpx.get(f"{self.account_url}?comp=list", timeout=2)
                return self
            except httpx.HTTPError:
                time.sleep(0.2)
        tail = file_tail(log)
        self.stop()
        raise AzuriteError(
            f"Azurite did not answer on {self.account_url} within {timeout:.0f} s; its "
            f"output:\n{tail}"
        )

    def stop(self) -> None:
        """Stop the server (everything it held is gone)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        self._proc = None
        if self._cwd is not None:
            shutil.rmtree(self._cwd, ignore_errors=True)
        self._cwd = None

    def __enter__(self) -> Azurite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def service(self) -> Any:
        """An ``azure.storage.blob.BlobServiceClient`` for this server."""
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string)

    def create_container(self, name: str) -> str:
        """Create container ``name`` (no error when it exists); returns its name."""
        from azure.core.exceptions import ResourceExistsError

        with contextlib.suppress(ResourceExistsError):
            self.service().create_container(name)
        return name

    def put(self, container: str, name: str, data: bytes) -> None:
        """Upload blob ``name`` (replacing one of that name)."""
        blob = self.service().get_blob_client(container, name)
        blob.upload_blob(data, overwrite=True)

    def config(self, container: str, **extra: Any) -> dict[str, Any]:
        """An ``azure_blob_input`` transport config for ``container`` on this server."""
        return {
            "container": container,
            "account_url": self.account_url,
            "account_name": ACCOUNT,
            "account_key": KEY,
            **extra,
        }

    def env(self) -> dict[str, str]:
        """``AZURE_STORAGE_*`` variables pointing this package (a warehouse on
        ``az://<container>/...``, its Spark workers) at this server."""
        return {
            "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": KEY,
            "AZURE_STORAGE_ENDPOINT": self.account_url,
        }

    def storage_options(self) -> dict[str, str]:
        """delta-rs / object_store options for ``az://<container>/...`` on this server."""
        from airflow_connectors.connections.azure import AzureSettings

        return AzureSettings(ACCOUNT, KEY, account_url=self.account_url).storage_options()


def main() -> int:
    """Install Azurite (when not yet cached) and print its server script."""
    try:
        print(install())
    except AzuriteError as e:
        print(f"azurite: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
