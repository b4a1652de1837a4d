"""Java artifacts from Maven Central in a cache outside the repository, for tests,
examples and benchmarks: the Apache Kafka broker and Spark's optional packages (Kafka,
Delta, Iceberg).

Each set of jars is named by a small ``pom.xml`` under version control,
``deploy/maven/<name>/pom.xml``, which pins every version. :func:`resolve` runs the
machine's ``mvn`` (``dependency:copy-dependencies``) once per version of that file and
returns the jars; later calls return the cached folder without starting Maven. The jars
are never committed.

    jars = resolve("kafka")          # [Path(".../kafka-1a2b3c4d5e6f/lib/kafka_2.13-....jar"), ...]

The cache is ``$AIRFLOW_CONNECTORS_MAVEN_CACHE``, else ``$XDG_CACHE_HOME/airflow-connectors/maven``
(``~/.cache/airflow-connectors/maven``). Maven's own local repository (``~/.m2``) keeps
the downloads, so a second cache folder costs no second download.

    python -m airflow_connectors.testing.maven kafka spark-delta   # resolve, print the folders
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

POMS = Path(__file__).resolve().parents[2] / "deploy" / "maven"
STAMP = ".complete"


class MavenError(RuntimeError):
    """Maven could not resolve a set of jars (the message says which and why)."""


def cache_root() -> Path:
    """Where resolved jar sets live (outside the repository)."""
    explicit = os.environ.get("AIRFLOW_CONNECTORS_MAVEN_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "airflow-connectors" / "maven"


def pom(name: str) -> Path:
    """``deploy/maven/<name>/pom.xml``; an unknown name lists the known ones."""
    path = POMS / name / "pom.xml"
    if not path.is_file():
        known = sorted(p.parent.name for p in POMS.glob("*/pom.xml"))
        raise MavenError(f"no jar set named {name!r} (known: {', '.join(known)})")
    return path


def folder(name: str) -> Path:
    """The cache folder of jar set ``name`` at its pom's current content."""
    digest = hashlib.sha256(pom(name).read_bytes()).hexdigest()[:12]
    return cache_root() / f"{name}-{digest}"


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on the file ``path`` (made if missing) across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def resolve(name: str, *, timeout: float = 900.0) -> list[Path]:
    """The jars of set ``name`` (its pom's dependencies with theirs, runtime scope),
    resolved into the cache on first use. Safe to call from several processes at once:
    one resolves, the others wait for it."""
    target = folder(name)
    if not (target / STAMP).exists():
        with locked(target.with_name(target.name + ".lock")):
            if not (target / STAMP).exists():
                _copy_dependencies(name, target, timeout)
    return sorted((target / "lib").glob("*.jar"))


def _copy_dependencies(name: str, target: Path, timeout: float) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError(
            f"jar set {name!r}: Maven ('mvn') is not on PATH; install it (Debian: "
            "apt-get install maven) or point AIRFLOW_CONNECTORS_MAVEN_CACHE at a cache "
            "that already holds this set"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    cmd = [
        mvn,
        "--batch-mode",
        "--quiet",
        "--file",
        str(pom(name)),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging / 'lib'}",
        "-DincludeScope=runtime",
    ]
    print(f"maven: resolving jar set {name!r} into {target}", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise MavenError(f"jar set {name!r}: Maven did not finish in {timeout:.0f} s") from e
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        # Maven's console library writes colour resets even in batch mode.
        text = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)
        tail = "\n".join(text.strip().splitlines()[-15:])
        raise MavenError(
            f"jar set {name!r}: mvn dependency:copy-dependencies failed "
            f"(exit {done.returncode}); is Maven Central reachable?\n{tail}"
        )
    (staging / STAMP).write_text(" ".join(cmd[1:]) + "\n")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    count = len(list((target / "lib").glob("*.jar")))
    print(f"maven: jar set {name!r} ready ({count} jars)", file=sys.stderr, flush=True)


def classpath(name: str) -> str:
    """The jars of set ``name`` joined for ``java -cp`` or ``spark.jars`` (``:``/``,``
    are the caller's to choose: this returns ``os.pathsep``-joined paths)."""
    return os.pathsep.join(str(p) for p in resolve(name))


def main(argv: list[str] | None = None) -> int:
    """Resolve the named jar sets (all when none is named) and print their folders."""
    names = (argv if argv is not None else sys.argv[1:]) or sorted(
        p.parent.name for p in POMS.glob("*/pom.xml")
    )
    for name in names:
        try:
            jars = resolve(name)
        except MavenError as e:
            print(f"maven: {e}", file=sys.stderr)
            return 1
        print(f"{name}: {len(jars)} jars in {folder(name) / 'lib'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
