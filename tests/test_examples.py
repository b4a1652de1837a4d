"""The examples under examples/ run as documented and land what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# examples/object_storage/run.py starts moto's S3 server and runs its batches on local Spark.
pytestmark = [pytest.mark.spark, pytest.mark.s3]

ROOT = Path(__file__).resolve().parents[1]


def test_object_storage_example_lands_every_row_once_in_delta_tables_on_s3() -> None:
    """examples/object_storage/run.py: S3 test server, landing bucket (plain and gzipped
    JSON lines, an empty object, CSV), aws_conn_id from AIRFLOW_CONN_LANDING, Delta
    tables on s3://; run twice (the second finds nothing new)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples/object_storage/run.py")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    # orders: the batch's commit and one protocol-only commit that lists the `invariants`
    # writer feature (a NOT NULL id beside a TIMESTAMP column; Spark needs it listed).
    # Neither table gains a commit from the second run.
    assert "orders: 3000 rows in Delta version 1" in out, out[-4000:]
    assert "refunds: 100 rows in Delta version 0" in out, out[-4000:]
    assert "+0 records (0 batches" in out
    # The connection's secret never reaches the output.
    from airflow_connectors.testing.s3server import SECRET_KEY

    assert SECRET_KEY not in out
