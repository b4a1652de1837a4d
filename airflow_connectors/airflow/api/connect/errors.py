"""The one error shape of the connector API: ``{"error_code": <http status>, "message":
"..."}``, as Kafka Connect answers. Routers raise :class:`ApiError`; the app turns it,
FastAPI's own HTTP errors and request validation errors into that shape."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ApiError(Exception):
    """An error answer: its HTTP status and the message users read."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


class ErrorBody(BaseModel):
    """Kafka Connect's error body."""

    error_code: int
    message: str


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the error statuses a route may answer."""
    what = {
        400: "Invalid request: a parameter or body that does not fit",
        401: "Not logged in: no token, cookie or HTTP Basic credentials, or wrong ones",
        403: "The user may not read or change this connector",
        404: "No such connector, task, pipeline, table or plugin",
        409: "Not possible in the connector's state",
    }
    return {s: {"model": ErrorBody, "description": what[s]} for s in statuses}
