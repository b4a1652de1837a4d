"""A private PostgreSQL cluster for tests that need logical replication
(``postgres_cdc_input``, Debezium): ``wal_level=logical`` on a free port of 127.0.0.1, in
a temporary directory, from the server binaries Debian installs under
``/usr/lib/postgresql/<version>/bin`` (``bash scripts/services.sh up postgres`` installs
them). The suite's server on 5432 is left as it is: changing its ``wal_level`` needs a
restart that every other test would see.

    with PgCluster(tmp_path / "pg") as pg:
        psycopg.connect(pg.dsn)          # host=127.0.0.1 port=... user=postgres dbname=postgres
        pg.url("test")                   # postgresql://postgres@127.0.0.1:PORT/test
        pg.create_database("test")

Trust authentication for user ``postgres`` on 127.0.0.1 and the cluster's own unix socket
(in the work dir, so it never collides with the system's ``/var/run/postgresql``). As
root, initdb refuses to run, so the programs run as user ``postgres`` (as
``scripts/services.sh`` does) and the work dir is handed to it. ``stop`` is
``pg_ctl stop -m fast``; the data is removed with the work dir when the object made it.
A work dir given as root must sit where user ``postgres`` can reach it (pytest's
``tmp_path`` is private to root: leave ``workdir`` None for a directory under the
system's temp dir).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from airflow_connectors.testing.standalone import file_tail, free_port

BIN_ROOT = Path("/usr/lib/postgresql")

# Enough slots and senders for a test session's connectors and a Debezium worker; a
# small, undurable test server (a crash of the machine loses only test data).
SETTINGS: dict[str, str] = {
    "wal_level": "logical",
    "max_replication_slots": "32",
    "max_wal_senders": "16",
    "max_connections": "100",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "64MB",
}


def bindir() -> Path:
    """The newest server's ``bin`` directory under ``/usr/lib/postgresql``."""
    found = []
    for entry in BIN_ROOT.glob("*/bin"):
        with contextlib.suppress(ValueError):
            found.append((int(entry.parent.name.split(".")[0]), entry))
    found = [(v, d) for v, d in found if (d / "postgres").is_file()]
    if not found:
        raise RuntimeError(
            f"no PostgreSQL server binaries under {BIN_ROOT}/<version>/bin; install them "
            "with `bash scripts/services.sh up postgres` (Debian's postgresql package)"
        )
    return max(found)[1]


def _as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


class PgCluster:
    """A PostgreSQL cluster with ``wal_level=logical`` on 127.0.0.1 (see the module doc).

    ``workdir`` None: a temporary directory, removed at :meth:`stop`. ``settings`` add to or
    override :data:`SETTINGS`."""

    def __init__(
        self,
        workdir: Path | str | None = None,
        *,
        port: int | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        self._own_dir = workdir is None
        self.workdir = (
            Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="pg-"))
        )
        self.data = self.workdir / "data"
        self.log = self.workdir / "server.log"
        self.port = port or free_port()
        self.settings = {**SETTINGS, **(settings or {})}
        self.bin = bindir()
        self._running = False

    # --- addresses -----------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """A libpq keyword DSN of database ``postgres``."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def url(self, db: str = "postgres") -> str:
        """``postgresql://postgres@127.0.0.1:PORT/<db>``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def dsn_for(self, db: str) -> str:
        """A libpq keyword DSN of database ``db``."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={db}"

    # --- lifecycle -----------------------------------------------------------------------

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if _as_root():
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd="/"
        )

    def _initdb(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(exist_ok=True)
        if _as_root():
            shutil.chown(self.workdir, "postgres", "postgres")
            shutil.chown(self.data, "postgres", "postgres")
        self.data.chmod(0o700)
        done = self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb of {self.data} failed: {done.stderr.strip()[-2000:]}")
        # Trust for 127.0.0.1 (and replication connections, which Debezium opens).
        with (self.data / "pg_hba.conf").open("a") as f:
            f.write("\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n")

    def start(self, timeout: float = 60) -> PgCluster:
        """initdb (first time), then ``pg_ctl start -w``; returns self."""
        if self._running:
            return self
        if not (self.data / "PG_VERSION").is_file():
            self._initdb()
        options = [
            "-c listen_addresses=127.0.0.1",
            f"-p {self.port}",
            f"-c unix_socket_directories={self.workdir}",
            *(f"-c {k}={v}" for k, v in self.settings.items()),
        ]
        done = self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            str(int(timeout)),
            "-o",
            " ".join(options),
            "start",
            timeout=timeout + 30,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"PostgreSQL in {self.data} did not start on port {self.port}: "
                f"{done.stderr.strip()[-500:]}\n{file_tail(self.log)}"
            )
        self._running = True
        return self

    def stop(self) -> None:
        """``pg_ctl stop -m fast``; removes the work dir when it was a temporary one."""
        if self._running or (self.data / "postmaster.pid").is_file():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
            self._running = False
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> PgCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- conveniences --------------------------------------------------------------------

    def connect(self, db: str = "postgres", **kwargs: Any) -> Any:
        """A psycopg connection (autocommit unless told)."""
        import psycopg

        kwargs.setdefault("autocommit", True)
        return psycopg.connect(self.dsn_for(db), **kwargs)

    def create_database(self, name: str) -> str:
        """Creates database ``name`` (when missing); returns its URL."""
        with self.connect() as conn:
            exists = conn.execute("select 1 from pg_database where datname = %s", (name,))
            if exists.fetchone() is None:
                conn.execute(f'create database "{name}"')
        return self.url(name)
