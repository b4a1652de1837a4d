"""The Spark session the engine runs batches in (imported only when a batch runs)."""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_connectors.settings import Settings
    from airflow_connectors.spec.models import ConnectorSpec, TableSpec

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
#: JVM options of the driver of an ingest job. The driver only schedules one task per
#: work item and collects receipts (Python workers decode and write), so the C2 JIT and
#: the parallel collector cost start-up time and buy nothing: ~2 s less per spark-submit.
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def ingest_submit_conf(
    master: str, conf: Mapping[str, Any] | None = None, *, cds: bool = True
) -> dict[str, str]:
    """The ``--conf`` settings every ingest ``spark-submit`` gets on ``master`` (the
    ingest operator adds the user's ``spark_conf``, ``conf``, on top): what makes a small
    batch start fast. Values here never carry secrets (they reach the command line).

    With ``cds`` (and ``[connectors] driver_cds``, default true) the driver JVM maps a
    class-data-sharing archive of Spark's classes, recorded once by an earlier job
    (:mod:`airflow_connectors.engine.jvm`), where the driver runs on this machine
    (``local`` and standalone ``spark://`` masters, client deploy mode)."""
    java_options = DRIVER_JAVA_OPTIONS
    if cds and master.startswith(("local", "spark://")):
        from airflow_connectors.engine.jvm import driver_cds_options

        extra = driver_cds_options(conf)
        if extra:
            java_options = f"{java_options} {extra}"
    return {"spark.driver.extraJavaOptions": java_options}


def spark_session(settings: Settings, app_name: str = "airflow-connectors") -> SparkSession:
    """A Spark session for ingest on ``settings.spark_master``, with the transports
    registered as Spark data sources (``spark.read.format("file_input")``)."""
    # Executors' Python workers must import airflow_connectors: use this interpreter,
    # or the workers' own Python ([connectors] executor_python; the package is shipped).
    if settings.executor_python:
        os.environ["PYSPARK_PYTHON"] = settings.executor_python
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    local = settings.spark_master.startswith("local")
    if local:
        # Local Spark talks to itself only: bind the driver to loopback instead of the
        # address the hostname resolves to (Spark's default, with a warning).
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    from pyspark.sql import SparkSession

    from airflow_connectors.engine.datasource import register

    java_options = DRIVER_JAVA_OPTIONS
    if local:
        # The driver JVM is started here as spark-submit starts an ingest job's: map the
        # class-data-sharing archive a spark-submit recorded (~2 s less per start), but
        # never record one from a session (engine/jvm.py).
        from airflow_connectors.engine.jvm import driver_cds_options

        extra = driver_cds_options(record=False)
        if extra:
            java_options = f"{java_options} {extra}"
    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", settings.spark_driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", java_options)
    )
    if local:
        builder = builder.config("spark.driver.host", LOOPBACK).config(
            "spark.driver.bindAddress", LOOPBACK
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if java_options != DRIVER_JAVA_OPTIONS:
        _check_archive(spark)
    if settings.ships_package():
        # A cluster's executors get this package with the session, as --py-files would.
        from airflow_connectors.engine.package import package_zip

        spark.sparkContext.addPyFile(str(package_zip()))
    register(spark)
    return spark


def _check_archive(spark: Any) -> None:
    """Logs at DEBUG whether the driver JVM maps its class-data-sharing archive. Unlike
    an ingest job's check it never drops the archive: a session only uses what
    spark-submit recorded, and an archive it could not map costs it the time saved."""
    from airflow_connectors.engine.jvm import archive_option, mapped

    try:
        options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "")
        found = archive_option(options or "")
        if found is not None:
            pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
            log.debug(
                "driver JVM maps its class-data-sharing archive %s: %s",
                found[1].name,
                mapped(pid, found[1]),
            )
    except Exception:  # only a log line: never a reason to fail
        return


def stop_session(session: Any) -> None:
    """Stops ``session`` and closes its py4j gateway now. Left to the interpreter's exit,
    the gateway is closed by py4j's finalizer while native threads are being torn down,
    and the process sometimes aborts after its work is done ("terminate called without an
    active exception", exit code 134)."""
    from pyspark import SparkContext

    session.stop()
    gateway = SparkContext._gateway
    if gateway is not None:
        gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None


def share_aws_environment(session: Any) -> None:
    """Give the session's Python workers this process's ``AWS_*`` and ``AZURE_STORAGE_*``
    variables (endpoint, region, credentials: what a warehouse on ``s3://`` or ``az://`` is
    written with), exactly as they are now. They travel with each job's tasks
    (``SparkContext.environment``), so executors on other machines get them too, and they
    never appear on a command line or in Spark's configuration; variables unset since an
    earlier job are removed."""
    from airflow_connectors.sinks._fs import STORAGE_VARIABLES, storage_environment

    if is_connect(session):  # no SparkContext: the tasks carry them (task_environment)
        return
    env = getattr(getattr(session, "sparkContext", None), "environment", None)
    if not isinstance(env, dict):  # a stand-in running the tasks in this process
        return
    for key in STORAGE_VARIABLES:
        env.pop(key, None)
    env.update(storage_environment())


def is_connect(session: Any) -> bool:
    """Whether ``session`` is a Spark Connect client session (``pyspark.sql.connect``),
    which has no SparkContext, rather than a classic one (spark-submit, a local session,
    a standalone cluster) or an in-process stand-in. Imports nothing."""
    return any(c.__module__.startswith("pyspark.sql.connect") for c in type(session).__mro__)


def connection_variables(plugins_and_configs: Iterable[tuple[Any, Mapping[str, Any]]]) -> list[str]:
    """The ``AIRFLOW_CONN_<ID>`` variable of every connection the configs name, each
    through its plugin's ``connection_fields`` (a transport or sink class)."""
    from airflow_connectors.connections.base import env_var

    names: list[str] = []
    for plugin, config in plugins_and_configs:
        for field in getattr(plugin, "connection_fields", None) or {}:
            conn_id = config.get(field)
            if isinstance(conn_id, str) and conn_id and env_var(conn_id) not in names:
                names.append(env_var(conn_id))
    return names


def task_environment(
    session: Any, connector: ConnectorSpec, table: TableSpec
) -> dict[str, str | None]:
    """The variables a batch's tasks set in their Python worker's environment while they
    run (see ``engine/batch.py``): the ``AIRFLOW_CONN_<ID>`` of every connection the
    connector's transport and the table's sink name that this process has (the ingest
    operator exports them), on a Spark Connect session also the storage variables,
    exactly as they are here (None: unset for the task; :func:`share_aws_environment`
    gives them to a classic session's workers)."""
    from airflow_connectors.sinks import SINKS
    from airflow_connectors.sinks._fs import STORAGE_VARIABLES, storage_environment
    from airflow_connectors.transports import TRANSPORTS

    configs = [
        (TRANSPORTS.get(connector.transport.name), connector.transport.config),
        (SINKS.get(table.sink.name), table.sink.config),
    ]
    env: dict[str, str | None] = {
        k: os.environ[k] for k in connection_variables(configs) if os.environ.get(k)
    }
    if is_connect(session):
        env.update(dict.fromkeys(STORAGE_VARIABLES))
        env.update(storage_environment())
    return env


def default_parallelism(session: Any) -> int:
    """The tasks a session runs at once, what :func:`~.batch.pack` spreads large inputs
    over. Classic: ``SparkContext.defaultParallelism`` (1 for a stand-in without one).
    Spark Connect has no SparkContext: the server's ``spark.default.parallelism`` when
    set, else the N of a ``local[N]`` master (this machine's cores for ``local[*]``: a
    local server runs here), else 2 (a cluster whose size the client cannot see: larger
    inputs are still cut at ``max_partition_bytes``)."""
    if not is_connect(session):
        sc = getattr(session, "sparkContext", None)  # stand-ins in this process have none
        return max(1, int(getattr(sc, "defaultParallelism", 1)))
    value = session.conf.get("spark.default.parallelism", None)
    if value:
        return max(1, int(value))
    master = session.conf.get("spark.master", None) or ""
    found = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master.strip())
    if found:
        return int(found[1]) if found[1] != "*" else os.cpu_count() or 2
    return 1 if master == "local" else 2
