"""Run the object-storage example: start an S3 server on 127.0.0.1, fill a landing
bucket, ingest it with ``airflow-connectors run`` into Delta tables on S3, print them.

Run through ``bash examples/object_storage/run.sh`` (which sets up ``.venv`` first).
The S3 server is moto's (a development dependency of this repository); any
S3-compatible endpoint works the same way with its own ``AIRFLOW_CONN_LANDING``.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def orders(first: int, n: int) -> bytes:
    """``n`` JSON-lines orders with ids from ``first``."""
    return "".join(
        json.dumps(
            {
                "id": i,
                "customer": f"customer-{i % 97}",
                "amount": f"{(i % 1000) / 10:.2f}",
                "ordered_at": f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:00:00",
            }
        )
        + "\n"
        for i in range(first, first + n)
    ).encode()


def fill(s3: object) -> tuple[int, int]:
    """Upload the landing objects; returns (orders, refunds) row counts."""
    client = s3.client()  # type: ignore[attr-defined]
    for bucket in ("landing", "warehouse"):
        s3.create_bucket(bucket)  # type: ignore[attr-defined]
    client.put_object(Bucket="landing", Key="orders/2026-11-01.json", Body=orders(1, 1000))
    client.put_object(Bucket="landing", Key="orders/2026-11-02.json", Body=orders(1001, 1000))
    client.put_object(
        Bucket="landing", Key="orders/2026-11-03.json.gz", Body=gzip.compress(orders(2001, 1000))
    )
    client.put_object(Bucket="landing", Key="orders/_empty.json", Body=b"")  # skipped
    refunds = "order_id,amount,reason\n" + "".join(
        f"{i},{(i % 50) / 10:.2f},{'damaged' if i % 2 else 'late'}\n" for i in range(1, 3001, 30)
    )
    client.put_object(Bucket="landing", Key="refunds/2026-11.csv", Body=refunds.encode())
    return 3000, 100


def main() -> int:
    from airflow_connectors.testing.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server

    work = Path(tempfile.mkdtemp(prefix="ac-object-storage-"))
    with S3Server(log=work / "s3.log") as s3:
        print(f"S3 test server on {s3.endpoint_url}; landing bucket filled", flush=True)
        expected = fill(s3)
        connection = {
            "conn_type": "aws",
            "login": ACCESS_KEY,
            "password": SECRET_KEY,
            "extra": {"endpoint_url": s3.endpoint_url, "region_name": REGION},
        }
        env = {
            **os.environ,
            **s3.env(),  # the warehouse's S3 (pyarrow, delta-rs and the Spark workers)
            "AIRFLOW_CONN_LANDING": json.dumps(connection),
            "AIRFLOW_HOME": str(work / "airflow"),
        }
        cmd = [
            str(Path(sys.executable).parent / "airflow-connectors"),
            "run",
            str(HERE / "pipeline.yaml"),
            "--state-store-url",
            f"sqlite:///{work}/state.db",
            "--warehouse",
            "s3://warehouse/tables",
        ]
        for attempt in ("first run", "second run (nothing new)"):
            print(f"\n== {attempt}: {' '.join(cmd[1:])}", flush=True)
            rc = subprocess.call(cmd, env=env)
            if rc:
                return rc
        os.environ.update(s3.env())
        from deltalake import DeltaTable

        from airflow_connectors.sinks.delta import storage_options

        print()
        for (table, rows), want in zip(
            (("orders", "id"), ("refunds", "order_id")), expected, strict=True
        ):
            uri = f"s3://warehouse/tables/object_storage/{table}"
            dt = DeltaTable(uri, storage_options=storage_options(uri))
            data = dt.to_pyarrow_table()
            ids = data.column(rows).to_pylist()
            print(
                f"{table}: {data.num_rows} rows in Delta version {dt.version()} at {uri} "
                f"(expected {want}, distinct ids {len(set(ids))})"
            )
            if data.num_rows != want or len(set(ids)) != want:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
