"""Spark's optional packages (Delta, Iceberg, Kafka) for tests that let Spark itself read
what the product wrote: the jars of ``deploy/maven/spark-<name>/pom.xml`` (resolved by
:mod:`.maven` into a cache outside the repository), the session conf that loads them, and
the Python whose pyspark runs them.

Which versions pair with which Spark, and why. No Delta or Iceberg artifact is built for
Spark 4.3, the product's pyspark, and the closest ones do not run on it (pyspark 4.3.0):

- ``io.delta:delta-spark_2.13:4.4.0`` (its pom builds against Spark 4.2.0) reads a table's
  schema, but its first scan fails with ``NoSuchMethodError: 'void
  org.apache.spark.sql.execution.LogicalRDD.<init>(...)'`` (Delta's StateCache calls a
  constructor that Spark 4.3 changed). In pyspark 4.2.1 it reads tables and their history:
  Delta is read by pyspark 4.2.1.
- ``org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0`` (none is built for Spark
  4.2 or 4.3) fails on loading a table, in pyspark 4.3.0 and in 4.2.1 alike, with
  ``IncompatibleClassChangeError: class org.apache.iceberg.spark.source.SparkView can not
  implement org.apache.spark.sql.connector.catalog.View, because it is not an interface``
  (View became a class in Spark 4.2). Iceberg is read by pyspark 4.1.4, the Spark it is
  built for, with the SQLite and PostgreSQL JDBC drivers so that Iceberg's JdbcCatalog
  opens the catalog tables pyiceberg keeps (:func:`iceberg_jdbc_catalog`).
- ``org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0`` (none is published for 4.3) runs
  in the product's own pyspark 4.3.0: batch and streaming (``availableNow``) reads of a
  Kafka 4.4 broker return every message. Its client is kafka-clients 3.9.2.

A pyspark other than the product's lives in a throwaway virtualenv outside the repository
(:func:`python`: only pyspark and py4j, from the package index, made on first use).

Each pom excludes what pyspark already ships (Scala, Hadoop, Parquet, Jackson, logging,
compression codecs, spark-tags): two versions of one library on a classpath clash.
:func:`clashes` lists any that slipped through.

    conf = spark_conf("spark-delta")   # {"spark.jars": "...", "spark.sql.extensions": ...}
    exe = python("spark-delta")        # a Python whose pyspark runs those jars
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from urllib.parse import unquote

from airflow_connectors.testing import maven

#: The pyspark that runs each set (see the module docstring); None: the product's own.
DELTA_PYSPARK = "4.2.1"
ICEBERG_PYSPARK = "4.1.4"
STAMP = ".complete"


@dataclass(frozen=True)
class PackageSet:
    """A jar set, the pyspark that runs it (None: the product's own) and its session conf."""

    name: str
    pyspark: str | None
    conf: dict[str, str] = field(default_factory=dict)
    extensions: tuple[str, ...] = ()


SETS = {
    "spark-delta": PackageSet(
        "spark-delta",
        DELTA_PYSPARK,
        {"spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog"},
        ("io.delta.sql.DeltaSparkSessionExtension",),
    ),
    "spark-iceberg": PackageSet(
        "spark-iceberg",
        ICEBERG_PYSPARK,
        {},
        ("org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",),
    ),
    "spark-kafka": PackageSet("spark-kafka", None),
}


def package_set(name: str) -> PackageSet:
    """The known set ``name``; an unknown name lists the known ones."""
    try:
        return SETS[name]
    except KeyError:
        raise maven.MavenError(
            f"no Spark package set named {name!r} (known: {', '.join(sorted(SETS))})"
        ) from None


def pyspark_version(*names: str) -> str | None:
    """The pyspark version that runs all of ``names`` (None: the product's own); sets
    built for different Spark versions cannot share a session."""
    versions = {package_set(n).pyspark for n in names}
    if len(versions) > 1:
        raise ValueError(f"Spark package sets {names} need different pyspark versions")
    return versions.pop() if versions else None


def spark_conf(*names: str) -> dict[str, str]:
    """The Spark conf that loads the package sets ``names``: ``spark.jars`` (resolved with
    Maven on first use), the session extensions and the catalogs reading needs."""
    jars: list[str] = []
    extensions: list[str] = []
    conf: dict[str, str] = {}
    for name in names:
        pkg = package_set(name)
        jars += [str(p) for p in maven.resolve(name)]
        extensions += pkg.extensions
        conf.update(pkg.conf)
    if not jars:
        raise maven.MavenError(f"Spark package sets {names}: Maven resolved no jars")
    conf["spark.jars"] = ",".join(jars)
    if extensions:
        conf["spark.sql.extensions"] = ",".join(extensions)
    return conf


def iceberg_jdbc_catalog(name: str, url: str, warehouse: str) -> dict[str, str]:
    """Spark conf of an Iceberg catalog ``name`` (Iceberg's JdbcCatalog) on the SQL catalog
    database ``url`` (the SQLAlchemy URL the iceberg sink uses: ``sqlite:///...`` or
    ``postgresql+psycopg://...``, a ``search_path`` in ``options`` kept). ``name`` must be
    the sink's ``catalog_name``: JdbcCatalog selects its rows by the catalog's name. The
    reader neither creates nor migrates the catalog tables (``jdbc.schema-version`` V1 is
    what pyiceberg creates: with the ``iceberg_type`` column)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    prefix = f"spark.sql.catalog.{name}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.warehouse": warehouse,
        f"{prefix}.jdbc.schema-version": "V1",
        f"{prefix}.jdbc.init-catalog-tables": "false",
    }
    if parsed.get_backend_name() == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise ValueError("an in-memory SQLite catalog cannot be shared with Spark")
        conf[f"{prefix}.uri"] = f"jdbc:sqlite:{parsed.database}"
    elif parsed.get_backend_name() == "postgresql":
        host = parsed.host or "127.0.0.1"
        port = parsed.port or 5432
        conf[f"{prefix}.uri"] = f"jdbc:postgresql://{host}:{port}/{parsed.database or ''}"
        if parsed.username:
            conf[f"{prefix}.jdbc.user"] = parsed.username
        if parsed.password:
            conf[f"{prefix}.jdbc.password"] = str(parsed.password)
        options = parsed.query.get("options")
        if options:
            text = options if isinstance(options, str) else options[-1]
            conf[f"{prefix}.jdbc.options"] = unquote(text)
    else:
        raise ValueError(f"no JDBC driver among the spark-iceberg jars for {parsed.drivername}")
    return conf


def clashes(*names: str) -> list[str]:
    """Jars of ``names`` whose artifact pyspark of the pairing already ships (by file name,
    versions stripped): each is a second copy of a library on the classpath."""
    shipped = {_artifact(p.name) for p in _pyspark_jars(pyspark_version(*names))}
    return sorted(p.name for n in names for p in maven.resolve(n) if _artifact(p.name) in shipped)


def _artifact(jar: str) -> str:
    """``jackson-core-2.21.2.jar`` -> ``jackson-core``."""
    return re.sub(r"-\d[\w.\-]*\.jar$", "", jar)


def _pyspark_jars(version: str | None) -> list[Path]:
    exe = python_for(version)
    out = subprocess.run(
        [exe, "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return sorted((Path(out.stdout.strip()) / "jars").glob("*.jar"))


# --- the Python that runs a package set ------------------------------------------------


def venv_root() -> Path:
    """Where the throwaway virtualenvs of other pyspark versions live (outside the
    repository): ``$AIRFLOW_CONNECTORS_PYSPARK_CACHE``, else
    ``$XDG_CACHE_HOME/airflow-connectors/pyspark``."""
    explicit = os.environ.get("AIRFLOW_CONNECTORS_PYSPARK_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "airflow-connectors" / "pyspark"


def python(*names: str, timeout: float = 900.0) -> str:
    """A Python interpreter whose pyspark runs the package sets ``names``: this one when
    they pair with the product's Spark, else a virtualenv with only that pyspark (and
    py4j), made on first use."""
    return python_for(pyspark_version(*names), timeout=timeout)


def python_for(version: str | None, *, timeout: float = 900.0) -> str:
    """This interpreter (``version`` None), or a cached virtualenv's with ``pyspark==version``."""
    if version is None:
        return sys.executable
    minor = f"py{sys.version_info.major}{sys.version_info.minor}"
    target = venv_root() / f"pyspark-{version}-{minor}"
    exe = target / "bin" / "python"
    if not (target / STAMP).exists():
        with maven.locked(target.with_name(target.name + ".lock")):
            if not (target / STAMP).exists():
                _make_venv(target, version, timeout)
    return str(exe)


def _uv() -> list[str] | None:
    found = shutil.which("uv")
    if found:
        return [found]
    if importlib.util.find_spec("uv") is not None:
        return [sys.executable, "-m", "uv"]
    return None


def _make_venv(target: Path, version: str, timeout: float) -> None:
    """A virtualenv at ``target`` (made in place: virtualenvs do not move) with
    ``pyspark==version`` from the package index, by uv when found, else venv and pip."""
    shutil.rmtree(target, ignore_errors=True)  # an earlier attempt that did not finish
    uv = _uv()
    exe = str(target / "bin" / "python")
    if uv is not None:
        steps = [
            [*uv, "venv", "--quiet", "--python", sys.executable, str(target)],
            [*uv, "pip", "install", "--quiet", "--python", exe, f"pyspark=={version}"],
        ]
    else:
        steps = [
            [sys.executable, "-m", "venv", str(target)],
            [exe, "-m", "pip", "install", "--quiet", f"pyspark=={version}"],
        ]
    print(f"spark_packages: installing pyspark {version} into {target}", file=sys.stderr)
    for cmd in steps:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            shutil.rmtree(target, ignore_errors=True)
            raise RuntimeError(
                f"pyspark {version}: {cmd[0]} did not finish in {timeout:.0f} s"
            ) from e
        if done.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise RuntimeError(
                f"pyspark {version}: {' '.join(cmd)} failed (exit {done.returncode}); is "
                f"the package index reachable?\n{tail}"
            )
    (target / STAMP).write_text(f"pyspark=={version}\n")


def prefetch() -> int:
    """Resolve every jar set (the Kafka broker's and Spark's packages) and make the
    pysparks that run them; print one line each with its time. Returns an exit code."""
    import time

    code = 0
    steps: list[tuple[str, Callable[[], object]]] = [
        (f"jars {name}", partial(maven.resolve, name))
        for name in ("kafka", "kafka-connect-debezium", *SETS)
    ]
    steps += [(f"python for {name}", partial(python, name)) for name in SETS]
    for label, step in steps:
        began = time.monotonic()
        try:
            step()
        except (maven.MavenError, RuntimeError) as e:
            print(f"prefetch: {label}: FAILED: {e}", flush=True)
            code = 1
            continue
        print(f"prefetch: {label}: ready in {time.monotonic() - began:.1f} s", flush=True)
    return code


if __name__ == "__main__":
    if sys.argv[1:] != ["--prefetch"]:
        print(
            "usage: python -m airflow_connectors.testing.spark_packages --prefetch", file=sys.stderr
        )
        raise SystemExit(2)
    raise SystemExit(prefetch())
