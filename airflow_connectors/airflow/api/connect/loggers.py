"""Kafka Connect's ``/admin/loggers`` (KIP-495) mapped onto this package's Python
loggers in the API server's process: ``root`` and every ``airflow_connectors`` logger,
with effective levels named as Kafka names them (``WARN`` for Python's ``WARNING``)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from airflow_connectors.airflow.api.connect.errors import ApiError

#: The package's loggers; ``root`` is listed as Kafka Connect lists it.
PACKAGE = "airflow_connectors"
ROOT = "root"

#: Kafka's level names and Python's.
_TO_PYTHON = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "CRITICAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}
_NAMES = {logging.WARNING: "WARN", logging.CRITICAL: "FATAL", logging.CRITICAL + 10: "OFF"}

#: When a logger's level was last set here (epoch milliseconds).
_MODIFIED: dict[str, int] = {}
_LOCK = threading.Lock()


def _python_name(name: str) -> str:
    return "" if name == ROOT else name


def _level_name(level: int) -> str:
    return _NAMES.get(level) or logging.getLevelName(level)


def _known(name: str) -> bool:
    return name in (ROOT, PACKAGE) or (
        (name == PACKAGE or name.startswith(PACKAGE + "."))
        and name in logging.Logger.manager.loggerDict
    )


def _names() -> list[str]:
    loggers = logging.Logger.manager.loggerDict
    ours = (
        n
        for n, lg in loggers.items()
        if (n == PACKAGE or n.startswith(PACKAGE + ".")) and isinstance(lg, logging.Logger)
    )
    # The package's own logger is listed whether or not a module asked for it yet.
    return [ROOT, *sorted({PACKAGE, *ours})]


def _entry(name: str) -> dict[str, Any]:
    logger = logging.getLogger(_python_name(name))
    return {"level": _level_name(logger.getEffectiveLevel()), "last_modified": _MODIFIED.get(name)}


def levels() -> dict[str, Any]:
    """Every logger of the package (and ``root``) with its effective level."""
    return {n: _entry(n) for n in _names()}


def level(name: str) -> dict[str, Any]:
    """One logger's level; 404 for one that is not the package's or ``root``."""
    if not _known(name):
        raise ApiError(
            404,
            f"Logger {name} not found: the loggers are root and those of the "
            f"{PACKAGE} package (GET /admin/loggers lists them)",
        )
    return _entry(name)


def set_level(name: str, level_name: str) -> list[str]:
    """Set ``name``'s level (and its descendants', as Kafka Connect does); answers the
    loggers set. A name of the package that no module has asked for yet is made."""
    level = _TO_PYTHON.get(level_name.strip().upper())
    if level is None:  # Kafka Connect answers 404 for a level log4j does not know
        raise ApiError(
            404,
            f"invalid log level {level_name!r}: the levels are "
            f"{', '.join(k for k in _TO_PYTHON if k not in ('WARNING', 'CRITICAL'))}",
        )
    if name != ROOT and name != PACKAGE and not name.startswith(PACKAGE + "."):
        raise ApiError(
            400,
            f"Logger {name} is not one of this package's: set root, {PACKAGE} or a "
            f"logger below it ({PACKAGE}.engine, ...)",
        )
    now = int(time.time() * 1000)
    with _LOCK:
        changed = [name] + [
            n for n in _names() if n != name and (name == ROOT or n.startswith(name + "."))
        ]
        for n in changed:
            logging.getLogger(_python_name(n)).setLevel(level)
            _MODIFIED[n] = now
    return changed
