"""Every built-in transport runs the conformance kit (airflow_connectors.testing.conformance):
each class below gives a source of known records, the kit's tests do the rest."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from airflow_connectors.testing.conformance import Source, TransportConformance


class TestDatagen(TransportConformance):
    @pytest.fixture
    def source(self) -> Source:
        # Two plans (run in order), items of 250 rows: 0..599 cycling a/b/c, then 600..999.
        config = {
            "seed": 7,
            "plan": [
                {
                    "limit": 600,
                    "worker_chunk_size": 250,
                    "fields": {"tag": {"values": ["a", "b", "c"]}},
                },
                {
                    "limit": 400,
                    "worker_chunk_size": 250,
                    "fields": {"id": {"range": [600, 1_000_000]}, "tag": {"values": ["z"]}},
                },
            ],
        }
        records = [{"id": i, "tag": "abc"[i % 3]} for i in range(600)]
        records += [{"id": i, "tag": "z"} for i in range(600, 1000)]
        return Source(
            transport="datagen",
            config=config,
            columns={"id": "BIGINT NOT NULL", "tag": "VARCHAR"},
            records=records,
            key_column="id",
            # No limit: generated forever, 100 rows a second.
            unbounded_config={"plan": [{"rate": 100, "worker_chunk_size": 50}]},
            invalid_configs={
                "plan[0].limit": {"plan": [{"limit": -1}]},
                "plan[0].fields.tag.strategy": {
                    "plan": [{"limit": 5, "fields": {"tag": {"strategy": "gaussian"}}}]
                },
                # Checked against the table: the field is not a column.
                "": {"plan": [{"limit": 5, "fields": {"nope": {}}}]},
            },
        )


def json_lines(ids: range) -> str:
    return "".join(json.dumps({"id": i, "name": f"n{i}", "amount": i / 4}) + "\n" for i in ids)


def csv_lines(ids: range) -> str:
    return "".join(f'{i},"n,{i}",{i / 4}\n' for i in ids)


def rows(ids: range, name: str = "n{}") -> list[dict[str, Any]]:
    return [{"id": i, "name": name.format(i), "amount": i / 4} for i in ids]


COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"}


class TestFileInput(TransportConformance):
    @pytest.fixture
    def source(self, tmp_path: Path) -> Source:
        folder = tmp_path / "drop"
        (folder / "2026" / "11").mkdir(parents=True)
        (folder / "2026" / "a.json").write_text(json_lines(range(0, 200)))
        (folder / "2026" / "11" / "b.json").write_text(json_lines(range(200, 400)))
        (folder / "c.json").write_text(json_lines(range(400, 600)))
        config = {"path": str(folder), "min_file_age": 0}
        return Source(
            transport="file_input",
            config=config,
            columns=COLUMNS,
            format={"name": "json", "config": {"update_format": "raw"}},
            records=rows(range(600)),
            key_column="id",
            unbounded_config={**config, "follow": True},
            invalid_configs={
                "min_file_age": {**config, "min_file_age": -1},
                "buffer_size_bytes": {**config, "buffer_size_bytes": 0},
                "path": {"min_file_age": 0},
            },
        )


class _Ranged(BaseHTTPRequestHandler):
    """One body per path, with HEAD (length, ETag) and single byte ranges, as object
    stores and most static servers answer."""

    files: ClassVar[dict[str, bytes]] = {}

    def _head(self, status: int, body: bytes, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()[:16]}"')

    def do_HEAD(self) -> None:
        body = self.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self._head(200, body, len(body))
        self.end_headers()

    def do_GET(self) -> None:
        body = self.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        first, last = 0, len(body) - 1
        rng = self.headers.get("Range", "")
        if rng.startswith("bytes="):
            lo, _, hi = rng[6:].partition("-")
            first, last = int(lo), min(int(hi) if hi else last, last)
            if first >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.end_headers()
                return
        part = body[first : last + 1]
        self._head(206 if rng else 200, body, len(part))
        if rng:
            self.send_header("Content-Range", f"bytes {first}-{last}/{len(body)}")
        self.end_headers()
        self.wfile.write(part)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def ranged_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ranged)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def url_source(url: str, **config: Any) -> Source:
    config = {"path": url, "timeout": 30, **config}
    return Source(
        transport="url_input",
        config=config,
        columns=COLUMNS,
        format={"name": "csv", "config": {}},
        records=rows(range(500), "n,{}"),
        key_column="id",
        invalid_configs={
            "timeout": {**config, "timeout": 0},
            "range_bytes": {**config, "range_bytes": 0},
            "path": {"path": "ftp://127.0.0.1/x.csv"},
        },
    )


class TestUrlInput(TransportConformance):
    """A server that answers HEAD and ranges: the body (about 9 KB) is read in ranges of
    4 KB, one per discovery."""

    @pytest.fixture
    def source(self, ranged_server: ThreadingHTTPServer) -> Source:
        path = f"/conformance/{uuid.uuid4().hex}.csv"
        _Ranged.files[path] = csv_lines(range(500)).encode()
        port = ranged_server.server_address[1]
        return url_source(f"http://127.0.0.1:{port}{path}", range_bytes=4096)


class TestUrlInputWithoutHead(TransportConformance):
    """A server without HEAD (the body's length is unknown): the rest of the body is one
    work item, resumed with ``Range: bytes=<offset>-``."""

    @pytest.fixture
    def source(self, http_server: Any) -> Source:
        # http_server (tests/conftest.py) serves on 127.0.0.1 and honours open ranges.
        path = f"/conformance/{uuid.uuid4().hex}.csv"
        http_server.files[path] = csv_lines(range(500)).encode()
        return url_source(http_server.url(path))


def test_the_kit_is_not_loaded_by_the_package_nor_by_standalone() -> None:
    # Airflow's processes import testing.standalone (its SQLite connect args): it must
    # load neither pytest nor pyspark, and the package must not load the kit.
    code = (
        "import sys, airflow_connectors, airflow_connectors.testing.standalone\n"
        "print(sorted(m for m in ('pytest', 'pyspark', 'airflow_connectors.testing.conformance') "
        "if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
