"""Settings from Airflow's config section ``[connectors]`` without importing Airflow.

Precedence (as in Airflow): environment ``AIRFLOW__CONNECTORS__<KEY>``, then
``$AIRFLOW_HOME/airflow.cfg`` section ``[connectors]``, then the embedded defaults under
``$AIRFLOW_HOME/connectors`` (``AIRFLOW_HOME`` defaults to ``~/airflow``, as in Airflow).
CLI flags override all of them.
"""

from __future__ import annotations

import configparser
import contextlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

SECTION = "connectors"

#: ``[connectors] ship_package``: whether ingest jobs send this package to Spark's
#: executors with the job (``--py-files`` of a zip of it). ``auto`` ships it on every
#: master except ``local...`` (whose executors run in the driver's machine and
#: interpreter); ``always`` on every master; ``never`` when the workers' Python has
#: airflow-connectors installed.
SHIP_PACKAGE = ("auto", "always", "never")


#: ``[connectors] spark_connect_conn_id``'s default: an Airflow connection of the Spark
#: provider's type ``spark_connect`` (host ``sc://127.0.0.1``, port 15002, password: the
#: server's token, if it has one).
DEFAULT_SPARK_CONNECT_CONN_ID = "connectors_spark_connect"
#: ``[connectors] spark_connect_session``'s values (see :attr:`Settings.spark_connect_session`).
SPARK_CONNECT_SESSIONS = ("shared", "per_task")


class SettingsError(RuntimeError):
    """A ``[connectors]`` option has a value this version does not accept; the message is
    one line naming the option, the value and the accepted ones."""


def airflow_home() -> Path:
    """``$AIRFLOW_HOME``, else ``~/airflow``: where ``airflow.cfg`` and the default state
    store and warehouse live."""
    return Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow").expanduser()


def _option(key: str) -> str | None:
    env = os.environ.get(f"AIRFLOW__{SECTION.upper()}__{key.upper()}")
    if env:
        return env
    cfg_path = Path(os.environ.get("AIRFLOW_CONFIG") or airflow_home() / "airflow.cfg")
    if cfg_path.is_file():
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(cfg_path)
        if parser.has_option(SECTION, key):
            return parser.get(SECTION, key) or None
    return None


@dataclass(frozen=True)
class Settings:
    """Where the engine keeps state and data and how it starts Spark: the ``[connectors]``
    section of Airflow's config (or ``AIRFLOW__CONNECTORS__*``), read by :meth:`load`."""

    state_store_url: str
    warehouse: str
    spark_master: str = "local[*]"
    spark_driver_memory: str = "2g"
    #: The Python Spark's executors run (``spark.pyspark.python``), a path on the worker
    #: machines; None: this interpreter (``PYSPARK_PYTHON``), as on ``local[*]``.
    executor_python: str | None = None
    #: ``auto`` | ``always`` | ``never``: see :data:`SHIP_PACKAGE`.
    ship_package: str = "auto"
    #: Where batches run unless a connector says (its ``execution``): ``spark_submit``
    #: (a Spark application per batch) or ``spark_connect`` (a Spark Connect server).
    execution: str = "spark_submit"
    #: The Airflow connection (type ``spark_connect``) of the Spark Connect server the
    #: ingest tasks of ``spark_connect`` connectors use.
    spark_connect_conn_id: str = DEFAULT_SPARK_CONNECT_CONN_ID
    #: The server's ``sc://host:port`` where there is no such Airflow connection (CLI and
    #: embedded runs; tasks when the connection does not exist). It may carry a token
    #: (``sc://host:port/;token=...``): then it is a secret, never logged.
    spark_connect_url: str | None = None
    #: ``shared`` (default): the ingest tasks attach to one server-side session of the
    #: Spark Connect server (its Python workers stay warm from batch to batch: ~0.2 s
    #: per small job instead of ~1.3 s for a new session's workers); ``per_task``: each
    #: task opens and releases a session of its own.
    spark_connect_session: str = "shared"

    def execution_of(self, connector_execution: str | None) -> str:
        """Where a connector's batches run: its own ``execution``, else :attr:`execution`."""
        return connector_execution or self.execution

    def ships_package(self, master: str | None = None) -> bool:
        """Whether a job on ``master`` (default: :attr:`spark_master`) sends this package
        to its executors: ``always``; ``auto`` on every master but ``local...``."""
        master = master or self.spark_master
        if self.ship_package == "auto":
            return not master.startswith("local")
        return self.ship_package == "always"

    @classmethod
    def load(
        cls,
        *,
        state_store_url: str | None = None,
        warehouse: str | None = None,
        spark_master: str | None = None,
    ) -> Settings:
        """The settings from Airflow's config; arguments that are given win. Defaults: a
        SQLite store and the warehouse under ``$AIRFLOW_HOME/connectors``, local Spark."""
        base = airflow_home() / "connectors"
        s = cls(
            state_store_url=_option("state_store_url") or f"sqlite:///{base / 'state.db'}",
            warehouse=_option("warehouse") or str(base / "warehouse"),
            spark_master=_option("spark_master") or "local[*]",
            spark_driver_memory=_option("spark_driver_memory") or "2g",
            executor_python=_option("executor_python"),
            ship_package=(_option("ship_package") or "auto").strip().lower(),
            execution=(_option("execution") or "spark_submit").strip().lower(),
            spark_connect_conn_id=(
                _option("spark_connect_conn_id") or DEFAULT_SPARK_CONNECT_CONN_ID
            ).strip(),
            spark_connect_url=(_option("spark_connect_url") or "").strip() or None,
            spark_connect_session=(_option("spark_connect_session") or "shared").strip().lower(),
        )
        if s.ship_package not in SHIP_PACKAGE:
            raise SettingsError(
                f"[connectors] ship_package (AIRFLOW__CONNECTORS__SHIP_PACKAGE) is "
                f"{s.ship_package!r}; expected one of {', '.join(SHIP_PACKAGE)}"
            )
        from airflow_connectors.spec.models import EXECUTIONS

        if s.execution not in EXECUTIONS:
            raise SettingsError(
                f"[connectors] execution (AIRFLOW__CONNECTORS__EXECUTION) is "
                f"{s.execution!r}; expected one of {', '.join(EXECUTIONS)}"
            )
        if s.spark_connect_session not in SPARK_CONNECT_SESSIONS:
            raise SettingsError(
                f"[connectors] spark_connect_session (AIRFLOW__CONNECTORS__SPARK_CONNECT_SESSION)"
                f" is {s.spark_connect_session!r}; expected one of "
                f"{', '.join(SPARK_CONNECT_SESSIONS)}"
            )
        if s.spark_connect_url is not None and not s.spark_connect_url.startswith("sc://"):
            # Not quoted: the value may hold the server's token.
            raise SettingsError(
                "[connectors] spark_connect_url (AIRFLOW__CONNECTORS__SPARK_CONNECT_URL) "
                "does not start with sc://; expected a Spark Connect URL sc://host:port "
                "(sc://host:port/;token=... when the server requires a token)"
            )
        s = replace(
            s,
            # An empty URL given on purpose is an error the state store reports, not a
            # silent fallback to the default store.
            state_store_url=s.state_store_url if state_store_url is None else state_store_url,
            warehouse=warehouse or s.warehouse,
            spark_master=spark_master or s.spark_master,
        )
        if s.state_store_url.startswith("sqlite:///"):
            # A folder that cannot be made is reported by the state store, in one line.
            with contextlib.suppress(OSError):
                Path(s.state_store_url.removeprefix("sqlite:///")).parent.mkdir(
                    parents=True, exist_ok=True
                )
        if s.warehouse.startswith("file://"):
            s = replace(s, warehouse=s.warehouse.removeprefix("file://"))
        elif "://" in s.warehouse:  # an object store URL (s3://bucket/prefix) as given
            return replace(s, warehouse=s.warehouse.rstrip("/"))
        return replace(s, warehouse=os.path.abspath(os.path.expanduser(s.warehouse)))
