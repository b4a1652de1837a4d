"""Class-data sharing (CDS) for the driver JVM of ingest jobs.

An ingest job's driver JVM loads some ten thousand classes (Spark, Scala, Netty, Hadoop)
from pyspark's ~280 jars before its SparkContext is ready; parsing and verifying them is
most of the seconds a small batch spends in ``spark-submit``. JDK 13+ can keep the
loaded classes in an archive that later JVMs map instead (a dynamic AppCDS archive):

1. a first job runs with ``-XX:ArchiveClassesAtExit=<cache>/<key>.<id>.rec``, and its
   JVM writes the archive when it exits (after the batch committed);
2. the next job that asks (:func:`driver_cds_options`) finds the finished recording,
   checks it and renames it to ``<cache>/<key>.jsa``; every later job runs with
   ``-XX:SharedArchiveFile=<cache>/<key>.jsa``.

The archive is only valid for the exact JVM build and the exact class path, so ``key``
hashes both (the JVM's ``release`` file, ``libjvm.so`` and its base archive, and the
jar folder's entries in the order the ``java`` launcher expands ``jars/*``); a new
JVM or Spark simply records a new archive. The cache is :func:`cache_dir`
(``~/.cache/airflow-connectors/cds``; ``[connectors] cds_dir`` elsewhere).

Nothing here may fail a job: every problem means "no CDS for this job" (logged at
DEBUG, or WARNING once where a user should know). The JVM maps the archive with
``-Xshare:auto``, so an archive it rejects (another class path, another JVM) costs
only the time saved; the job then logs it (:func:`check_driver_archive`) and drops it,
so a later job records it again (at most :data:`MAX_ATTEMPTS` times per key, then CDS
stays off for that key: ``<key>.off`` says why). Recording is skipped where the JVM itself would
stop: a non-empty folder on the class path (``SPARK_CONF_DIR``, ``HADOOP_CONF_DIR``...)
or ``spark.driver.extraClassPath``; the JVM's own CDS messages are silenced
(``-Xlog:cds=off``).

``[connectors] driver_cds = false`` (``AIRFLOW__CONNECTORS__DRIVER_CDS``) turns it off.
Imports neither pyspark nor Airflow.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_connectors.settings import _option

log = logging.getLogger(__name__)

#: The first four bytes of a finished dynamic archive (``CDS_DYNAMIC_ARCHIVE_MAGIC``,
#: little-endian). The JVM writes the header last: a recording still being written
#: starts with zeros.
DYNAMIC_MAGIC = (0xF00BABA8).to_bytes(4, "little")
#: The JVM's own CDS messages (a recording warns about every class it skips) stay out
#: of the job's output; this module logs what matters.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: A recording lock older than this (or whose process is gone) belongs to a job that
#: died before its JVM wrote the archive; another job may record then.
LOCK_STALE_SECONDS = 30 * 60
#: Recordings tried per key before giving up on CDS for it (each costs its job a few
#: seconds at exit).
MAX_ATTEMPTS = 3
#: Free space a recording needs in the cache (the archive is ~120 MB; a JVM that cannot
#: write it at exit exits with status 1).
MIN_FREE_BYTES = 1 << 30
#: ``spark.driver.*`` settings that change the driver's class path.
_CLASSPATH_CONF = ("spark.driver.extraClassPath", "spark.driver.userClassPathFirst")


def cache_dir() -> Path:
    """Where archives are kept: ``[connectors] cds_dir``, else
    ``$XDG_CACHE_HOME/airflow-connectors/cds`` (``~/.cache/...``): one cache per
    machine and user, shared by every Airflow home (the key tells archives apart)."""
    configured = _option("cds_dir")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "airflow-connectors" / "cds"


def enabled() -> bool:
    """``[connectors] driver_cds`` (default true)."""
    value = (_option("driver_cds") or "true").strip().lower()
    return value not in ("false", "0", "no", "off")


def java_home() -> Path | None:
    """The JDK spark-submit starts (``$JAVA_HOME/bin/java``, else ``java`` on ``PATH``,
    as ``spark-class`` does), resolved through links."""
    env = os.environ.get("JAVA_HOME")
    java = Path(env) / "bin" / "java" if env else None
    if java is None or not java.is_file():
        found = shutil.which("java")
        java = Path(found) if found else None
    if java is None:
        return None
    return java.resolve().parent.parent


def spark_home() -> Path | None:
    """The Spark distribution spark-submit runs: ``$SPARK_HOME``, else pyspark's folder
    (found without importing pyspark)."""
    env = os.environ.get("SPARK_HOME")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _java_feature(home: Path) -> int:
    """The JDK's feature version from its ``release`` file (0 when unknown)."""
    with contextlib.suppress(OSError):
        for line in (home / "release").read_text().splitlines():
            if line.startswith("JAVA_VERSION="):
                m = re.match(r'"?(?:1\.)?(\d+)', line.split("=", 1)[1])
                return int(m.group(1)) if m else 0
    return 0


def _stat(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return f"{path.name}:-"
    return f"{path.name}:{st.st_size}:{st.st_mtime_ns}"


def _nonempty_dir(path: str | Path) -> bool:
    with contextlib.suppress(OSError):
        return Path(path).is_dir() and any(os.scandir(path))
    return False


def archive_key(java: Path, spark: Path) -> str:
    """A digest of what a driver archive is only valid for: the JVM build (``release``,
    ``libjvm.so`` and the JDK's base archive) and the class path spark-submit gives it
    (the conf folder and the jars, in the order the launcher expands ``jars/*``)."""
    digest = hashlib.sha256()
    digest.update(str(java).encode())
    with contextlib.suppress(OSError):
        digest.update((java / "release").read_bytes())
    for part in ("lib/server/libjvm.so", "lib/server/classes.jsa"):
        digest.update(_stat(java / part).encode())
    digest.update(str(spark.resolve()).encode())
    with os.scandir(spark / "jars") as entries:  # directory order, as the launcher's
        for entry in entries:
            st = entry.stat()
            digest.update(f"{entry.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    for var in ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH"):
        digest.update(f"{var}={os.environ.get(var, '')}\n".encode())
    return f"jdk{_java_feature(java)}-{digest.hexdigest()[:16]}"


def _classpath_blocker(spark: Path, conf: Mapping[str, Any]) -> str | None:
    """Why a recording JVM would refuse this class path (it stops at start-up on a
    non-empty folder), or why an archive could not match it; None when fine."""
    for key in _CLASSPATH_CONF:
        if conf.get(key):
            return f"{key} is set"
    conf_dir = os.environ.get("SPARK_CONF_DIR") or str(spark / "conf")
    for where in (conf_dir, os.environ.get("HADOOP_CONF_DIR"), os.environ.get("YARN_CONF_DIR")):
        if where and _nonempty_dir(where):
            return f"the class path holds the non-empty folder {where}"
    if os.environ.get("SPARK_DIST_CLASSPATH"):
        return "SPARK_DIST_CLASSPATH is set"
    return None


class ArchiveCache:
    """The archives of one cache folder for one ``key`` (see the module's text)."""

    def __init__(self, folder: Path, key: str) -> None:
        self.folder = folder
        self.key = key
        self.archive = folder / f"{key}.jsa"
        self.meta = folder / f"{key}.json"
        self.lock = folder / f"{key}.lock"
        self.off = folder / f"{key}.off"
        self.attempts = folder / f"{key}.attempts"

    def ready(self) -> bool:
        """Whether the promoted archive is there, whole (its size as recorded)."""
        try:
            size = json.loads(self.meta.read_text())["size"]
            return bool(self.archive.stat().st_size == size)
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def recordings(self) -> list[Path]:
        """Recordings of this key (finished or not)."""
        return sorted(self.folder.glob(f"{self.key}.*.rec"))

    def promote(self) -> bool:
        """Rename a finished recording to the archive (its size in ``<key>.json``,
        written first); drops recordings that can no longer finish. True when the
        archive is ready."""
        now = time.time()
        for rec in self.recordings():
            try:
                with rec.open("rb") as fh:
                    magic = fh.read(4)
                st = rec.stat()
            except OSError:
                continue
            if magic != DYNAMIC_MAGIC:
                if now - st.st_mtime > LOCK_STALE_SECONDS:
                    with contextlib.suppress(OSError):
                        rec.unlink()
                continue
            meta = {"size": st.st_size, "recorded": st.st_mtime, "key": self.key}
            tmp = self.meta.with_suffix(f".{uuid.uuid4().hex[:8]}.tmp")
            tmp.write_text(json.dumps(meta))
            os.replace(tmp, self.meta)
            with contextlib.suppress(FileNotFoundError):  # another job promoted it
                os.replace(rec, self.archive)
            with contextlib.suppress(OSError):
                self.lock.unlink()
            log.info("driver class-data-sharing archive ready: %s", self.archive)
        return self.ready()

    def start_recording(self) -> Path | None:
        """Takes the recording lock (one recording at a time per key); returns the
        path the JVM is to write, or None (another job records, or no room)."""
        if shutil.disk_usage(self.folder).free < MIN_FREE_BYTES:
            log.debug("CDS: less than 1 GiB free in %s; not recording", self.folder)
            return None
        if self.lock.exists():
            if not self._lock_stale():
                return None  # another job is recording
            self.lock.unlink(missing_ok=True)  # that job died before its JVM wrote it
        attempts = self._attempts() + 1
        if attempts > MAX_ATTEMPTS:
            self.disable(f"{MAX_ATTEMPTS} recordings did not produce an archive")
            return None
        try:
            fd = os.open(self.lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return None
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{os.getpid()} {socket.gethostname()}\n")
        self.attempts.write_text(str(attempts))
        return self.folder / f"{self.key}.{uuid.uuid4().hex[:12]}.rec"

    def _lock_stale(self) -> bool:
        """Whether the recording lock's job is gone: its process (the one that asked
        for the options, which waits for spark-submit) exited on this host, or the lock
        is older than :data:`LOCK_STALE_SECONDS`."""
        try:
            age = time.time() - self.lock.stat().st_mtime
            pid, _, host = self.lock.read_text().strip().partition(" ")
        except OSError:
            return True
        if age > LOCK_STALE_SECONDS:
            return True
        if host == socket.gethostname() and pid.isdigit():
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                return True
            except OSError:  # alive, another user's
                return False
        return False

    def _attempts(self) -> int:
        try:
            return int(self.attempts.read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def reject(self) -> None:
        """Drop an archive the JVM would not use; after :data:`MAX_ATTEMPTS` recordings
        of this key, CDS stays off for it."""
        for path in (self.meta, self.archive):
            with contextlib.suppress(OSError):
                path.unlink()
        if self._attempts() >= MAX_ATTEMPTS:
            self.disable(f"the driver JVM rejected {MAX_ATTEMPTS} recorded archives")

    def disable(self, reason: str) -> None:
        """No CDS for this key any more (``<key>.off`` holds why); logged once."""
        with contextlib.suppress(OSError):
            self.off.write_text(reason + "\n")
        log.warning(
            "driver class-data sharing is off for this JVM and Spark (%s); ingest jobs "
            "start without it. Delete %s to try again.",
            reason,
            self.off,
        )


def driver_cds_options(
    conf: Mapping[str, Any] | None = None, *, folder: Path | None = None, record: bool = True
) -> str:
    """The driver JVM options for class-data sharing on this machine: use the archive,
    record it (once), or nothing. ``conf``: the job's other ``--conf`` settings (a
    driver class path of their own turns CDS off). ``record=False``: use a finished
    archive only, never record one (an embedded session, whose process may be killed
    or live on for hours, is no recorder: the archive is written when the JVM exits).
    Never raises."""
    try:
        return _driver_cds_options(conf or {}, folder, record)
    except Exception as exc:  # CDS is an optimisation: never a reason to fail a job
        log.debug("CDS: not used (%s: %s)", type(exc).__name__, exc)
        return ""


def _driver_cds_options(conf: Mapping[str, Any], folder: Path | None, record: bool) -> str:
    if not enabled():
        return ""
    java, spark = java_home(), spark_home()
    if java is None or spark is None or _java_feature(java) < 13:
        log.debug("CDS: no JDK 13+ or Spark found; not used")
        return ""
    blocker = _classpath_blocker(spark, conf)
    if blocker:
        log.debug("CDS: not used (%s)", blocker)
        return ""
    folder = folder or cache_dir()
    if re.search(r"[\s\"'\\]", str(folder)):
        log.debug("CDS: the cache folder %s has spaces or quotes; not used", folder)
        return ""
    folder.mkdir(parents=True, exist_ok=True)
    cache = ArchiveCache(folder, archive_key(java, spark))
    if cache.off.exists():
        return ""
    if cache.ready() or cache.promote():
        return f"-XX:SharedArchiveFile={cache.archive} {QUIET}"
    if not record:
        return ""
    rec = cache.start_recording()
    if rec is None:
        return ""
    log.info("driver class-data sharing: this job's JVM records %s as it exits (once)", rec.name)
    return f"-XX:ArchiveClassesAtExit={rec} {QUIET}"


def archive_option(java_options: str) -> tuple[str, Path] | None:
    """``("use" | "record", path)`` from a driver's JVM options, else None."""
    m = re.search(r"-XX:(SharedArchiveFile|ArchiveClassesAtExit)=(\S+)", java_options)
    if not m:
        return None
    return ("use" if m.group(1) == "SharedArchiveFile" else "record", Path(m.group(2)))


def mapped(pid: int, path: Path) -> bool | None:
    """Whether process ``pid`` maps ``path`` (None: cannot tell on this system)."""
    try:
        with open(f"/proc/{pid}/maps") as fh:
            target = str(path)
            return any(line.rstrip("\n").endswith(target) for line in fh)
    except OSError:
        return None


def check_driver_archive(java_options: str, jvm_pid: int | None) -> bool | None:
    """After the driver started: whether its JVM uses the archive its options name
    (None: it had none, or this cannot be told). An archive the JVM rejected is logged
    and its key turned off (the JVM started without it, no harm done)."""
    try:
        found = archive_option(java_options)
        if found is None or found[0] != "use" or jvm_pid is None:
            return None
        archive = found[1]
        used = mapped(jvm_pid, archive)
        if used is False:
            log.warning(
                "the driver JVM did not use its class-data-sharing archive %s (it does not "
                "match this JVM or class path); this job started without it, a later one "
                "records a new archive",
                archive,
            )
            ArchiveCache(archive.parent, archive.name.removesuffix(".jsa")).reject()
        elif used:
            log.info("driver JVM maps its class-data-sharing archive %s", archive.name)
        return used
    except Exception as exc:  # never fail a job over CDS
        log.debug("CDS: could not check the archive (%s: %s)", type(exc).__name__, exc)
        return None
