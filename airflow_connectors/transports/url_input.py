"""``url_input``: one HTTP(S) GET. Resumes from a byte offset with a Range request; the
input ends once the whole body is committed."""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import Field, field_validator

from airflow_connectors.spec.redact import mask_url
from airflow_connectors.transports.base import Cursor, Limits, StrictConfig, Transport, WorkItem


class UrlInputConfig(StrictConfig):
    path: str = Field(min_length=1)
    #: Seconds to wait for the server (connect and each read).
    timeout: float = Field(default=30.0, gt=0)
    #: Accepted for Feldera compatibility: a batch reads to the end, it never pauses.
    pause_timeout: int = 60

    @field_validator("path")
    @classmethod
    def _http_only(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL, got {mask_url(v)!r}")
        return v


class UrlInputTransport(Transport):
    name = "url_input"
    Config = UrlInputConfig
    config: UrlInputConfig
    description = "one HTTP(S) GET"

    def discover(self, cursor: Cursor, limits: Limits) -> Iterator[WorkItem]:
        key = self.config.path
        done = cursor.get(key)
        if key in cursor.in_flight or (done is not None and done.completed):
            return
        start = done.offset if done else 0
        yield WorkItem(key=key, start=start, records_done=done.records if done else 0, final=True)

    def read(self, item: WorkItem) -> Iterator[bytes]:
        import httpx

        try:
            yield from self._get(item)
        except httpx.TimeoutException as e:
            # OSError subclasses: the engine reports an unreachable source in one line
            # and leaves the batch planned for the next run.
            raise TimeoutError(
                f"url_input: GET {mask_url(item.key)} got no answer within "
                f"{self.config.timeout:g} s ({type(e).__name__}); check that the server is "
                "up, or raise timeout"
            ) from e
        except httpx.ConnectError as e:
            raise ConnectionError(
                f"url_input: cannot connect to {mask_url(item.key)} ({_reason(e)}); check "
                "that the server is up and the URL is right"
            ) from e
        except httpx.HTTPError as e:
            raise OSError(f"url_input: GET {mask_url(item.key)} failed: {_reason(e)}") from e

    def _get(self, item: WorkItem) -> Iterator[bytes]:
        import httpx

        headers = {"Range": f"bytes={item.start}-"} if item.start else {}
        with (
            httpx.Client(timeout=self.config.timeout, follow_redirects=False) as client,
            client.stream("GET", item.key, headers=headers) as resp,
        ):
            if resp.status_code == 416:  # nothing left past the offset
                return
            if not 200 <= resp.status_code < 300:
                raise OSError(
                    f"url_input: GET {mask_url(item.key)} answered HTTP {resp.status_code}; expected 2xx"
                )
            skip = 0
            if item.start:
                if resp.status_code == 206:
                    first = _range_start(resp.headers.get("content-range", ""))
                    if first > item.start:
                        raise OSError(
                            f"url_input: GET {mask_url(item.key)} returned bytes from {first}, past the requested offset {item.start}"
                        )
                    skip = item.start - first
                else:  # 200: the server ignored Range; drop what was already read
                    skip = item.start
            for chunk in resp.iter_bytes(1 << 20):
                if skip:
                    cut = min(skip, len(chunk))
                    chunk = chunk[cut:]
                    skip -= cut
                if chunk:
                    yield chunk

    def describe(self) -> str:
        return f"url_input: {mask_url(self.config.path)}"


def _reason(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _range_start(content_range: str) -> int:
    # "bytes 100-199/200"
    try:
        return int(content_range.split()[1].split("-")[0])
    except (IndexError, ValueError):
        return 0
