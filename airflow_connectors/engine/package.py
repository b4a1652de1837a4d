"""Ship this package to Spark's executors with each ingest job, as on a real cluster.

On ``local[*]`` the executors are threads of the driver's JVM whose Python workers run
the driver's interpreter, which has airflow-connectors installed. On a cluster the
workers' Python has never seen it: the ingest job sends it along as a zip on
``--py-files`` (Spark puts the zip on the executors' ``PYTHONPATH``), built here from
the installed package (:func:`package_zip`), whether it is an editable checkout or a
wheel. ``[connectors] ship_package`` (``auto``, ``always``, ``never``) and
``[connectors] executor_python`` (``spark.pyspark.python``) decide what a job gets
(:func:`submit_options`).

What executors import is Python modules only: the package has no data files that
anything on the executor side reads (the one non-Python file, the REST API's UI page,
is served by Airflow's API server), so the zip holds the ``.py`` files and nothing else.

Imports neither pyspark nor Airflow.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import airflow_connectors
from airflow_connectors.settings import Settings, airflow_home

#: The name the zip's module tree starts with (``airflow_connectors/...``).
PACKAGE = "airflow_connectors"
#: A fixed timestamp for the zip's entries: the same sources make the same bytes.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def package_root() -> Path:
    """The folder of the installed ``airflow_connectors`` package (in a checkout or in
    site-packages, from a wheel)."""
    return Path(airflow_connectors.__file__).resolve().parent


def default_cache_dir() -> Path:
    """Where built zips are kept: ``$AIRFLOW_HOME/connectors/dist``."""
    return airflow_home() / "connectors" / "dist"


def _sources(root: Path) -> list[tuple[str, Path]]:
    """The package's modules as ``(name in the zip, path)``, sorted; no caches."""
    found = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts or any(p in ("tests", "test") for p in rel.parts[:-1]):
            continue
        found.append((f"{PACKAGE}/{rel.as_posix()}", path))
    return sorted(found)


def _digest(sources: list[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for name, data in sources:
        h.update(name.encode())
        h.update(b"\0")
        h.update(hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def package_zip(cache_dir: Path | str | None = None) -> Path:
    """A zip of the installed package's modules for ``--py-files``; returns its path.

    Built once per content: the name carries a hash of the sources
    (``airflow_connectors-<version>-<hash>.zip``), so an existing zip is reused and a
    changed package makes a new one. Written to a temporary name in ``cache_dir``
    (default :func:`default_cache_dir`, or the system's temporary folder when that
    cannot be created) and renamed into place: tasks building it at the same moment
    each write their own file and the last rename wins with the same bytes."""
    root = package_root()
    sources = [(name, path.read_bytes()) for name, path in _sources(root)]
    digest = _digest(sources)
    target_name = f"{PACKAGE}-{airflow_connectors.__version__}-{digest}.zip"
    folders = [Path(cache_dir)] if cache_dir is not None else [default_cache_dir()]
    if cache_dir is None:
        folders.append(Path(tempfile.gettempdir()) / f"airflow-connectors-dist-{os.getuid()}")
    error: OSError | None = None
    for folder in folders:
        target = folder / target_name
        if target.is_file():
            return target
        try:
            folder.mkdir(parents=True, exist_ok=True)
            _write_zip(target, sources)
        except OSError as e:
            error = e
            continue
        return target
    assert error is not None
    raise OSError(
        f"cannot build the airflow-connectors package for Spark's executors in "
        f"{folders[0]}: {error}; make the folder writable, or set [connectors] "
        "ship_package = never and install airflow-connectors on the workers"
    ) from error


def _write_zip(target: Path, sources: list[tuple[str, bytes]]) -> None:
    """Write the zip to a temporary file beside ``target``, then rename it into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in sources:
                info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class SubmitOptions:
    """What an ingest job on a master gets so its executors can run this package:
    ``py_files`` (spark-submit ``--py-files``; None: not shipped) and ``conf`` (``--conf``
    settings: the executors' Python, and the driver's, which must stay this one)."""

    py_files: str | None = None
    conf: dict[str, str] = field(default_factory=dict)


def submit_options(settings: Settings, master: str, driver_python: str) -> SubmitOptions:
    """The ``--py-files`` and ``--conf`` of an ingest job on ``master`` under
    ``settings``: the package zip when it ships (:meth:`Settings.ships_package`), and
    with ``executor_python`` set, ``spark.pyspark.python`` for the executors plus
    ``spark.pyspark.driver.python`` = ``driver_python`` (Spark would otherwise run the
    driver with the executors' Python too, which may lack Airflow and this package)."""
    conf: dict[str, str] = {}
    if settings.executor_python:
        conf["spark.pyspark.python"] = settings.executor_python
        conf["spark.pyspark.driver.python"] = driver_python
    py_files = str(package_zip()) if settings.ships_package(master) else None
    return SubmitOptions(py_files, conf)


def missing_package_message(where: str) -> str:
    """The one line for a job whose executors could not import this package (``where``:
    ``connector X: batch N``)."""
    return (
        f"{where} failed on the Spark executors: their Python cannot import "
        "airflow_connectors (ModuleNotFoundError). Ship the package with the job "
        "([connectors] ship_package = auto or always, which sends it as --py-files) or "
        "install airflow-connectors in the workers' Python ([connectors] executor_python)"
    )
