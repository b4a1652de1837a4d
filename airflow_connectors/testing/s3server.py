"""An S3-compatible server on 127.0.0.1 for tests, examples and benchmarks: moto's
standalone server (``moto[server]``, a development dependency) in a process of its own,
so Spark workers, ``spark-submit`` jobs and Airflow tasks reach it over HTTP like a real
endpoint.

    with S3Server() as s3:
        s3.create_bucket("landing")
        s3.client().put_object(Bucket="landing", Key="a.json", Body=b"...")
        # s3.endpoint_url, s3.env() for processes that read AWS_* variables

moto accepts any credentials; :data:`ACCESS_KEY`/:data:`SECRET_KEY` are what the tests
use so that secrets masking can be checked against known values.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from airflow_connectors.testing.standalone import free_port

ACCESS_KEY = "AKIATESTFIXTURE0001"
SECRET_KEY = "fixture-secret-key-do-not-log-0001"
REGION = "us-east-1"


class S3Server:
    """moto's S3 server as a subprocess on ``127.0.0.1:<port>``."""

    def __init__(self, port: int | None = None, *, log: Path | None = None) -> None:
        self.port = port or free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> S3Server:
        """Start the server and wait until it answers."""
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        env = {**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"the S3 test server (moto) exited with code {self._proc.returncode} "
                    f"before answering on {self.endpoint_url}"
                )
            try:
                httpx.get(self.endpoint_url, timeout=2)
                return self
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the S3 test server did not answer on {self.endpoint_url}")

    def stop(self) -> None:
        """Stop the server."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        self._proc = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self) -> None:
        """Forget every bucket and object (moto's reset endpoint)."""
        httpx.post(f"{self.endpoint_url}/moto-api/reset", timeout=30)

    def client(self) -> Any:
        """A boto3 S3 client for this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (no error when it exists); returns its name."""
        c = self.client()
        with contextlib.suppress(c.exceptions.BucketAlreadyOwnedByYou):
            c.create_bucket(Bucket=name)
        return name

    def env(self) -> dict[str, str]:
        """``AWS_*`` variables pointing SDKs (boto3, pyarrow, delta-rs) at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def config(self, bucket: str, **extra: Any) -> dict[str, Any]:
        """An ``s3_input`` transport config for ``bucket`` on this server."""
        return {
            "bucket_name": bucket,
            "endpoint_url": self.endpoint_url,
            "region": REGION,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            **extra,
        }
