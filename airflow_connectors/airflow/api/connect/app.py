"""The FastAPI app the plugin mounts at ``/connect``: the Kafka Connect and Feldera
routers behind Airflow's login (:mod:`.auth`), the one error shape (:mod:`.errors`), the
OpenAPI document and its docs page, and the Connectors page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_connectors import __version__
from airflow_connectors.airflow.api.connect import auth, feldera, kafka_connect, ui_data
from airflow_connectors.airflow.api.connect.errors import (
    ApiError,
    error_responses,
    feldera_body,
    kafka_connect_body,
)

UI_PAGE = Path(__file__).parent.parent / "ui.html"


def create_app() -> FastAPI:
    """The ``/connect`` app: every route behind Airflow's login, errors as
    ``{"error_code", "message"}`` (an invalid request is 400, not 422), and the OpenAPI
    document at ``/connect/openapi.json``."""
    from fastapi.openapi.docs import get_swagger_ui_html

    app = FastAPI(
        title="airflow-connectors",
        description="Manage connectors: Kafka Connect and Feldera shapes.",
        version=__version__,
        dependencies=auth.dependencies(),
        # Any route may refuse a caller that is not logged in, or a malformed request.
        responses=error_responses(400, 401, 403),
        # Served below, behind the same login as every other route.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.include_router(kafka_connect.router)
    app.include_router(feldera.router)
    # What the Connectors page reads (read-only).
    app.include_router(ui_data.router)

    @app.get("/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, Any]:
        return _without_422(app.openapi())

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="openapi.json", title="airflow-connectors API")

    @app.get("/ui", response_class=HTMLResponse, include_in_schema=False)
    def ui() -> HTMLResponse:
        """The Connectors page (shown in Airflow's navigation by the plugin)."""
        return HTMLResponse(UI_PAGE.read_text())

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error(request, exc.status, exc.message, exc.headers, exc.code, exc.details)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = getattr(exc, "headers", None)
        return _error(request, exc.status_code, str(exc.detail), headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        return _error(request, 400, f"invalid request: {problems}")

    return app


def is_feldera_route(request: Request) -> bool:
    """Whether ``request`` asked a Feldera route (``/v0/...`` below the app's mount)."""
    path = str(request.scope.get("path", ""))
    root = str(request.scope.get("root_path", ""))
    if root and path.startswith(root):
        path = path[len(root) :]
    return _feldera_path(path)


def _feldera_path(path: str) -> bool:
    """Whether ``path`` (below the app's mount) is one of the Feldera routes."""
    return path.startswith("/v0/")


def _error(
    request: Request,
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    code: str | None = None,
    details: dict[str, Any] | None = None,
) -> JSONResponse:
    """An error answer in the shape of the route asked: Feldera's ``ErrorResponse`` on
    the Feldera routes, Kafka Connect's ``ErrorMessage`` elsewhere."""
    body = (
        feldera_body(status, message, code, details)
        if is_feldera_route(request)
        else kafka_connect_body(status, message)
    )
    return JSONResponse(body, status, headers=headers)


class BaseUrlWithoutSlash:
    """A root middleware of Airflow's API server: ``GET /connect`` is the API's base URL
    without its slash, where Kafka Connect clients ask for the cluster info (a Kafka
    Connect URL has no path); Airflow's UI would answer it with its page, so it is sent
    to ``/connect/``."""

    def __init__(self, app: Any, prefix: str = "/connect") -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Rewrites ``/connect`` to ``/connect/``; answers a path under it with a line break
        404 in the API's error shape; passes everything else on."""
        if scope["type"] == "http" and scope["path"] == self.prefix:
            path = f"{self.prefix}/"
            scope = {**scope, "path": path, "raw_path": path.encode()}
        elif scope["type"] == "http" and _has_line_break(scope["path"], self.prefix):
            # The mount's pattern does not match a line break, so Airflow would answer in
            # its own shape; no route or name here has one.
            message = "Not Found: no path here has a line break"
            feldera = _feldera_path(scope["path"][len(self.prefix) :])
            body = feldera_body(404, message) if feldera else kafka_connect_body(404, message)
            await JSONResponse(body, 404)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _has_line_break(path: str, prefix: str) -> bool:
    return path.startswith(f"{prefix}/") and ("\n" in path or "\r" in path)


def _without_422(document: dict[str, Any]) -> dict[str, Any]:
    """The document without FastAPI's 422 answers: invalid requests answer 400 here, in
    the error shape (as Kafka Connect does)."""
    for path in document.get("paths", {}).values():
        for operation in path.values():
            operation.get("responses", {}).pop("422", None)
    schemas = document.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    return document
