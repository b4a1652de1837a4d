"""The error shapes of the connector API. The Kafka Connect routes answer as Kafka Connect
does, ``{"error_code": <http status>, "message": "..."}`` (its ``ErrorMessage``); the
Feldera routes (``/v0/...``) as Feldera does, ``{"message": "...", "error_code":
"<CamelCase>", "details": {...}}`` (its ``ErrorResponse``). Routers raise
:class:`ApiError`; the app turns it, FastAPI's own HTTP errors and request validation
errors into the shape of the route asked.

Feldera's codes: ``UnknownPipelineName`` (details ``pipeline_name``),
``UnknownInputEndpoint`` (``endpoint_name``: ``<table>.<connector>``),
``InvalidConnectorAction`` (``action``), ``UnsupportedPipelineAction`` (``action``), as
Feldera answers them; where Feldera has no code for what happened here, one named after
the status (:data:`FELDERA_CODES`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

#: Feldera ``error_code`` of an error whose raiser named none, by HTTP status.
FELDERA_CODES = {
    400: "InvalidRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    500: "InternalError",
}


class ApiError(Exception):
    """An error answer: its HTTP status and the message users read. ``code`` and
    ``details``: Feldera's ``error_code`` and ``details`` on the Feldera routes (default:
    :data:`FELDERA_CODES` and ``{}``)."""

    def __init__(
        self,
        status: int,
        message: str,
        headers: dict[str, str] | None = None,
        *,
        code: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers
        self.code = code
        self.details = details


class ErrorBody(BaseModel):
    """Kafka Connect's error body."""

    error_code: int
    message: str


class FelderaErrorBody(BaseModel):
    """Feldera's ``ErrorResponse``."""

    message: str
    error_code: str = Field(description="What went wrong, in Feldera's CamelCase codes")
    details: dict[str, Any]


def kafka_connect_body(status: int, message: str) -> dict[str, Any]:
    """Kafka Connect's ``ErrorMessage``."""
    return {"error_code": status, "message": message}


def feldera_body(
    status: int, message: str, code: str | None = None, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Feldera's ``ErrorResponse``."""
    return {
        "message": message,
        "error_code": code or FELDERA_CODES.get(status, FELDERA_CODES[500]),
        "details": details or {},
    }


_WHAT = {
    400: "Invalid request: a parameter or body that does not fit",
    401: "Not logged in: no token, cookie or HTTP Basic credentials, or wrong ones",
    403: "The user may not read or change this connector",
    404: "No such connector, task, pipeline, table or plugin",
    409: "Not possible in the connector's state",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the error statuses a Kafka Connect route may
    answer."""
    return {s: {"model": ErrorBody, "description": _WHAT[s]} for s in statuses}


def feldera_error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The same for a Feldera route: Feldera's ``ErrorResponse``."""
    return {s: {"model": FelderaErrorBody, "description": _WHAT[s]} for s in statuses}
