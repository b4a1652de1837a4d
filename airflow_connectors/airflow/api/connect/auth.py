"""Who may call the connector API: Airflow's own authentication and authorization.

A caller logs in as for Airflow's REST API (a token from ``/auth/token`` or the UI's
cookie) or, as Kafka Connect deployments and their tools expect, with HTTP Basic
credentials, checked by Airflow's simple auth manager exactly as its ``/auth/token``
checks them; either way the user then has the same permissions. For a connector, the
access Airflow's own DAG endpoints need on its DAG is needed: DAG read access to read,
DAG edit access for any change (pause, stop, restart, offsets)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import Depends, Request
from fastapi.security import HTTPBasic, HTTPBasicCredentials

from airflow_connectors.airflow.api.connect import catalog
from airflow_connectors.airflow.api.connect.errors import ApiError

BASIC_CHALLENGE = {"WWW-Authenticate": 'Basic realm="airflow-connectors"'}

basic_scheme = HTTPBasic(
    auto_error=False,
    realm="airflow-connectors",
    description="An Airflow user's name and password (Airflow's simple auth manager)",
)


async def basic_user(credentials: HTTPBasicCredentials) -> Any:
    """The Airflow user of HTTP Basic credentials, checked by the simple auth manager's
    login service (what ``/auth/token`` runs) and read back from the token it issues, so
    the user is the one a token would carry."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.datamodels.login import LoginBody
    from airflow.api_fastapi.auth.managers.simple.services.login import SimpleAuthManagerLogin
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from fastapi import HTTPException

    manager = get_auth_manager()
    if not isinstance(manager, SimpleAuthManager):
        raise ApiError(
            401,
            "HTTP Basic credentials are checked with Airflow's simple auth manager, but this "
            f"Airflow uses {type(manager).__name__}; send a token from its /auth/token as "
            "'Authorization: Bearer <token>' instead",
            BASIC_CHALLENGE,
        )
    try:
        token = SimpleAuthManagerLogin.create_token(
            LoginBody(username=credentials.username, password=credentials.password),
            expiration_time_in_seconds=60,
        )
    except HTTPException as e:
        raise ApiError(
            401,
            f"Airflow refused the HTTP Basic credentials of user {credentials.username!r} "
            f"({e.detail}); give an Airflow user's name and password",
            BASIC_CHALLENGE,
        ) from e
    return await manager.get_user_from_token(token)


def dependencies() -> list[Any]:
    """The app-wide dependency: every route needs a logged-in user and, for a connector,
    DAG access (see the module docstring); listings, plugins and the page need a login
    only."""
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user, oauth2_scheme

    async def connect_user(
        request: Request,
        token: str | None = Depends(oauth2_scheme),
        bearer: Any = Depends(bearer_scheme),  # noqa: B008
        basic: HTTPBasicCredentials | None = Depends(basic_scheme),  # noqa: B008
    ) -> Any:
        if basic is not None:
            return await basic_user(basic)
        return await get_user(request, token, bearer)

    async def authorize(request: Request, user: Any = Depends(connect_user)) -> None:  # noqa: B008
        request.state.connect_user = user
        try:
            dag_ids = dag_ids_of(request.path_params)
        except ApiError as e:
            # Kafka Connect's create-or-update of a connector that does not exist: the
            # route answers why connectors are not created through the API (409).
            if not (
                e.status == 404 and request.method == "PUT" and request.url.path.endswith("/config")
            ):
                raise
            return
        if not dag_ids or request.url.path.endswith("/config/validate"):
            return
        method: Literal["GET", "PUT"] = "GET" if request.method in ("GET", "HEAD") else "PUT"
        denied = [d for d in dag_ids if not may(user, method, d)]
        if denied:
            what = "read" if method == "GET" else "change"
            raise ApiError(
                403,
                f"user {user.get_name()!r} may not {what} connector(s) {', '.join(denied)}: "
                f"that needs DAG {'read' if method == 'GET' else 'edit'} access to their "
                "DAG(s) in Airflow; ask an admin for a role that has it",
            )

    return [Depends(authorize)]


def dag_ids_of(params: dict[str, Any]) -> list[str]:
    """The connector DAGs a request acts on, from its path parameters."""
    if "name" in params:
        return [catalog.connector_name(catalog.ref_by_name(params["name"]))]
    if "connector" in params:
        ref = catalog.ref_by_feldera_path(params["pipeline"], params["table"], params["connector"])
        return [catalog.connector_name(ref)]
    if "pipeline" in params:
        return [catalog.connector_name(r) for r in catalog.known_connectors(params["pipeline"])]
    return []


def may(user: Any, method: Literal["GET", "PUT"], dag_id: str) -> bool:
    """Whether Airflow's auth manager lets ``user`` read (GET) or change (PUT) a DAG."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
    from airflow.models.dag import DagModel

    team = DagModel.get_team_name(dag_id)
    details = DagDetails(id=dag_id, team_name=team) if team else DagDetails(id=dag_id)
    return bool(get_auth_manager().is_authorized_dag(method=method, details=details, user=user))


def connection_testing_enabled() -> bool:
    """Whether Airflow lets connections be tested (``[core] test_connection``, which
    Airflow disables by default, as its ``/connections/test`` and ``connections test``
    honour)."""
    from airflow.configuration import conf

    return str(conf.get("core", "test_connection", fallback="Disabled")).strip().lower() == (
        "enabled"
    )


def may_test_connection(user: Any, conn_id: str) -> bool:
    """Whether ``user`` may test the stored connection ``conn_id``: what Airflow's
    ``POST /connections/test`` asks (connection create access) plus read access to that
    connection, decided before the connection is looked up, so the answer tells nothing
    about whether it exists."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails

    manager = get_auth_manager()
    return bool(
        manager.is_authorized_connection(method="POST", user=user)
        and manager.is_authorized_connection(
            method="GET", details=ConnectionDetails(conn_id=conn_id), user=user
        )
    )


def require_connection_tests(request: Request, conn_ids: list[str]) -> None:
    """403 unless the caller may test every connection in ``conn_ids`` (see
    :func:`may_test_connection`). Without a logged-in user on the request (the router
    mounted without :func:`dependencies`, as in-process tests do) nothing is checked."""
    user = getattr(request.state, "connect_user", None)
    if user is None or not conn_ids:
        return
    denied = sorted({c for c in conn_ids if not may_test_connection(user, c)})
    if denied:
        raise ApiError(
            403,
            f"user {user.get_name()!r} may not test Airflow connection(s) "
            f"{', '.join(repr(c) for c in denied)}: validating a config that names "
            "connections tests them with their credentials, which needs the access "
            "Airflow asks for testing connections (connection create access, and read "
            "access to each connection); ask an admin for such a role, or validate the "
            "config without its *_conn_id fields",
        )


def require_config_edit(request: Request) -> None:
    """403 unless the caller may change Airflow's configuration (what setting a logger's
    level through ``/admin/loggers`` asks)."""
    from airflow.api_fastapi.app import get_auth_manager

    user = getattr(request.state, "connect_user", None)
    if user is None:
        return
    if not get_auth_manager().is_authorized_configuration(method="PUT", user=user):
        raise ApiError(
            403,
            f"user {user.get_name()!r} may not set log levels: that needs Airflow's "
            "configuration edit access; ask an admin for a role that has it",
        )
