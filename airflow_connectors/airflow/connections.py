"""Airflow connections named in transport and sink configs (``aws_conn_id`` of
``s3_input`` and ``delta_table_input``, ``postgres_conn_id`` of ``postgres_input`` and the
``postgres`` sink).

Transports resolve a connection id without Airflow: from ``AIRFLOW_CONN_<ID>``, then
from a resolver a higher layer installs (:func:`airflow_connectors.transports._s3.
set_connection_resolver`). In Airflow's tasks, :func:`install_resolver` makes that
resolver ask Airflow (``BaseHook.get_connection``: the metadata database, secrets
backends, environment), so the discover and finalize tasks list with the connection's
credentials. The ingest task's Spark job cannot ask Airflow: :func:`export_connections`
puts each connection its batch plan names into the task's environment as
``AIRFLOW_CONN_<ID>`` (JSON), which spark-submit and its executors inherit. Never on a
command line, in a ``--conf``, a template field or XCom; the secrets are registered with
Airflow's masker first.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk.log import mask_secret

from airflow_connectors.transports import _s3

#: Transport and sink config fields that name an Airflow connection, with the kind of
#: connection to create (as the Airflow UI names it).
CONN_ID_FIELDS = {"aws_conn_id": "Amazon Web Services", "postgres_conn_id": "Postgres"}


def airflow_connection(conn_id: str) -> dict[str, Any] | None:
    """Connection ``conn_id`` as Airflow's JSON form, or None when Airflow does not know it."""
    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    if conn.password:
        mask_secret(conn.password)  # the extra's secrets are masked by extra_dejson
    data: dict[str, Any] = conn.to_dict(prune_empty=True, validate=False)
    data.pop("conn_id", None)
    return data


def install_resolver() -> None:
    """Make transports resolve connection ids through Airflow in this process."""
    _s3.set_connection_resolver(airflow_connection)


def conn_ids(config: Mapping[str, Any] | None) -> list[str]:
    """The connection ids a transport or sink config names."""
    return [conn_id for _, conn_id in _named(config)]


def _named(config: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(field, connection id)`` of every connection field set in ``config``."""
    config = config or {}
    return [
        (f, str(config[f])) for f in CONN_ID_FIELDS if isinstance(config.get(f), str) and config[f]
    ]


def export_connections(config: Mapping[str, Any] | None, connector: str) -> list[str]:
    """Put every connection a transport or sink ``config`` names into this process's
    environment as ``AIRFLOW_CONN_<ID>`` (children such as spark-submit inherit it);
    returns the variable names. A connection that is already in the environment is left
    as it is. Raises ``LookupError`` in one line, naming ``connector``, for a connection
    nobody knows."""
    names = []
    for field, conn_id in _named(config):
        var = _s3.conn_env_var(conn_id)
        names.append(var)
        if os.environ.get(var):
            continue
        data = airflow_connection(conn_id)
        if data is None:
            raise LookupError(
                f"connector {connector}: {field} {conn_id!r} is not an Airflow connection; "
                f"create a {CONN_ID_FIELDS[field]} connection {conn_id!r} (Admin > Connections, "
                f"or `airflow connections add`), or set {var}"
            )
        os.environ[var] = json.dumps(data)
    return names
