"""A small client of the connector REST API (``/connect`` in the Airflow API server),
used by ``airflow-connectors connector|pipeline`` when they steer a running Airflow."""

from __future__ import annotations

import os
from typing import Any

import httpx

ENV_URL = "AIRFLOW_CONNECTORS_API_URL"
ENV_USER = "AIRFLOW_CONNECTORS_API_USER"
ENV_PASSWORD = "AIRFLOW_CONNECTORS_API_PASSWORD"


class ApiFailed(RuntimeError):
    """The API answered an error; the message is its own."""


class ConnectClient:
    """``url`` is Airflow's base URL (``http://127.0.0.1:8080``); the token comes from
    Airflow's ``/auth/token`` with ``username``/``password``."""

    def __init__(self, url: str, username: str, password: str, timeout: float = 30) -> None:
        self.http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout)
        try:
            resp = self.http.post("/auth/token", json={"username": username, "password": password})
        except httpx.HTTPError as e:
            raise ApiFailed(f"cannot reach Airflow at {url}: {e}") from e
        if resp.status_code >= 400:
            raise ApiFailed(
                f"Airflow at {url} refused the credentials of {username!r} (HTTP {resp.status_code})"
            )
        self.http.headers["Authorization"] = f"Bearer {resp.json()['access_token']}"

    @classmethod
    def from_env(
        cls, url: str | None, username: str | None, password: str | None
    ) -> ConnectClient | None:
        """A client for ``url`` or ``$AIRFLOW_CONNECTORS_API_URL`` (credentials likewise,
        default ``admin``/``admin``); ``None`` when no URL is set. Raises :class:`ApiFailed`
        when Airflow cannot be reached or refuses the login."""
        url = url or os.environ.get(ENV_URL)
        if not url:
            return None
        return cls(
            url,
            username or os.environ.get(ENV_USER, "admin"),
            password or os.environ.get(ENV_PASSWORD, "admin"),
        )

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """Call ``/connect<path>``; returns the decoded JSON answer (``None`` when empty).
        Raises :class:`ApiFailed` with the server's message on an HTTP error."""
        resp = self.http.request(method, f"/connect{path}", **kwargs)
        if resp.status_code >= 400:
            try:
                message = resp.json().get("message") or resp.text
            except ValueError:
                message = resp.text
            raise ApiFailed(f"{method} /connect{path}: HTTP {resp.status_code}: {message}")
        if not resp.content:
            return None
        return resp.json()
