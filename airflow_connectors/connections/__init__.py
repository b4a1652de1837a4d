"""One Airflow-free connection layer: connection ids of transport and sink configs
(``aws_conn_id``, ``postgres_conn_id``, ``http_conn_id``, ...) resolved from
``AIRFLOW_CONN_<ID>`` or the resolver the Airflow integration installs, one error type
(:class:`~.base.ConnectionProblem`), and per kind the settings a client library needs
(:mod:`.aws`, :mod:`.postgres`, :mod:`.http`). Below transports and sinks: it imports
none of them.
"""

from airflow_connectors.connections.base import (
    AirflowConnection,
    ConnectionProblem,
    ConnectionResolver,
    env_var,
    lookup,
    parse,
    set_connection_resolver,
)

__all__ = [
    "AirflowConnection",
    "ConnectionProblem",
    "ConnectionResolver",
    "env_var",
    "lookup",
    "parse",
    "set_connection_resolver",
]
