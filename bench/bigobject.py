#!/usr/bin/env python
"""Big-object benchmark: one large JSON-lines object (and the same object gzipped)
ingested with 1 GiB of Spark memory, reporting throughput and the peak resident memory
of Spark's Python workers (the processes that read, decompress, decode and write).

Generates ``--size-mib`` MiB of JSON lines into one file (reused when already generated
with the same size), optionally a gzip copy, then for each source (``file_input`` on the
local file, ``s3_input`` on the object uploaded to a moto S3 server on 127.0.0.1) runs
``EmbeddedRunner(...).run()`` into a fresh Parquet table with ``spark.driver.memory=1g``
(local mode: the driver JVM is the executor) while a sampler reads ``VmHWM`` (peak RSS)
of every ``pyspark`` Python worker from ``/proc``.

Prints rows, seconds, MiB/s and the peak worker RSS per run; target: the whole object
completes and the peak worker RSS stays below 1 GiB. A benchmark reports, it does not
judge: exit status 1 only when a row count is wrong.

Usage: ``.venv/bin/python bench/bigobject.py [--size-mib 2048] [--sources file,s3]
[--codecs none,gzip] [--max-object-mib 256]``
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

MIB = 1 << 20
COLUMNS = {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE", "note": "VARCHAR"}


def generate(path: Path, size_mib: int) -> int:
    """Write about ``size_mib`` MiB of JSON lines to ``path``; returns the row count.
    Reused when a previous run wrote the same size (its row count is in a side file)."""
    meta = path.with_suffix(".rows")
    if path.exists() and meta.exists() and path.stat().st_size >= size_mib * MIB:
        return int(meta.read_text())
    target = size_mib * MIB
    written = rows = 0
    pad = "x" * 40
    with open(path, "w", encoding="utf-8") as fh:
        while written < target:
            block = "".join(
                f'{{"id":{i},"name":"user-{i % 9973}","amount":{i * 0.25},"note":"{pad}"}}\n'
                for i in range(rows, rows + 100_000)
            )
            fh.write(block)
            written += len(block)
            rows += 100_000
    meta.write_text(str(rows))
    return rows


def gzipped(src: Path) -> Path:
    """A gzip copy of ``src`` (level 1), streamed."""
    out = src.with_suffix(src.suffix + ".gz")
    if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    with open(src, "rb") as fi, gzip.open(out, "wb", compresslevel=1) as fo:
        shutil.copyfileobj(fi, fo, 16 * MIB)
    return out


class WorkerRss:
    """Samples the peak RSS (``VmHWM``) of this benchmark's Spark Python worker
    processes (descendants of this process)."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _ours(pid: str) -> bool:
        """Whether ``pid`` descends from this process (our Spark's JVM starts the
        workers; other Spark applications on the machine do not count)."""
        me = os.getpid()
        for _ in range(8):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                return False
            pid = stat.rsplit(")", 1)[1].split()[1]  # the parent's pid
            if int(pid) == me:
                return True
            if int(pid) <= 1:
                return False
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                    if b"pyspark" not in cmd or (b"daemon" not in cmd and b"worker" not in cmd):
                        continue
                    if not self._ours(pid):
                        continue
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            kib = int(line.split()[1])
                            self.peak[int(pid)] = max(self.peak.get(int(pid), 0), kib * 1024)
                except OSError:
                    continue
            self._stop.wait(self.interval)

    def __enter__(self) -> WorkerRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def max_bytes(self) -> int:
        """The largest peak RSS of one worker process seen."""
        return max(self.peak.values(), default=0)


def pipeline(transport: dict[str, Any]) -> dict[str, Any]:
    """The benchmark's pipeline: one connector into a Parquet table."""
    return {
        "pipeline": "bigobject",
        "tables": {
            "events": {
                "columns": COLUMNS,
                "connectors": [
                    {
                        "name": "big",
                        "transport": transport,
                        "format": {
                            "name": "json",
                            "config": {"update_format": "raw", "lines": "single"},
                        },
                    }
                ],
            }
        },
    }


def run(doc: dict[str, Any], work: Path) -> dict[str, Any]:
    """One ingest of ``doc`` into a fresh store and warehouse, with 1 GiB of Spark memory."""
    from airflow_connectors.catalog import parse_pipeline
    from airflow_connectors.engine.runner import EmbeddedRunner
    from airflow_connectors.settings import Settings
    from airflow_connectors.state.store import StateStore

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    settings = Settings(
        state_store_url=f"sqlite:///{work}/state.db",
        warehouse=str(work / "wh"),
        spark_master="local[*]",
        spark_driver_memory="1g",
    )
    from airflow_connectors.engine.spark import spark_session

    session = spark_session(settings, "bigobject-bench")
    try:
        runner = EmbeddedRunner(
            parse_pipeline(doc),
            settings,
            store=StateStore(settings.state_store_url),
            spark=lambda: session,
        )
        with WorkerRss() as rss:
            t0 = time.perf_counter()
            report = runner.run()
            seconds = time.perf_counter() - t0
    finally:
        session.stop()
    (rep,) = report.connectors.values()
    return {
        "seconds": seconds,
        "records": rep.records,
        "batches": rep.batches,
        "rss": rss.max_bytes,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mib", type=int, default=2048)
    p.add_argument("--sources", default="file,s3")
    p.add_argument("--codecs", default="none,gzip")
    p.add_argument(
        "--max-object-mib",
        type=int,
        default=256,
        help="s3_input's max_object_bytes_per_batch (uncompressed objects are split)",
    )
    p.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "ac-bigobject"))
    args = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    data = Path(args.data_dir)
    data.mkdir(parents=True, exist_ok=True)
    print(f"generating {args.size_mib} MiB of JSON lines in {data} ...", flush=True)
    plain = data / "events.json"
    rows = generate(plain, args.size_mib)
    files = {"none": plain}
    if "gzip" in args.codecs.split(","):
        files["gzip"] = gzipped(plain)
    failed = False
    results: list[tuple[str, str, dict[str, Any]]] = []
    s3 = None
    try:
        for source in args.sources.split(","):
            for codec in args.codecs.split(","):
                path = files[codec]
                folder = data / f"only-{codec}"
                folder.mkdir(exist_ok=True)
                link = folder / path.name
                if not link.exists():
                    os.link(path, link)
                if source == "file":
                    transport = {
                        "name": "file_input",
                        "config": {"path": str(link), "min_file_age": 0},
                    }
                else:
                    if s3 is None:
                        from airflow_connectors.testing.s3server import S3Server

                        s3 = S3Server().start()
                        s3.create_bucket("bigobject")
                    print(f"uploading {path.name} to the S3 test server ...", flush=True)
                    s3.client().upload_file(str(path), "bigobject", f"{codec}/{path.name}")
                    transport = {
                        "name": "s3_input",
                        "config": s3.config(
                            "bigobject",
                            prefix=f"{codec}/",
                            max_object_bytes_per_batch=args.max_object_mib * MIB,
                        ),
                    }
                print(
                    f"ingesting {source} {codec} ({path.stat().st_size / MIB:.0f} MiB) ...",
                    flush=True,
                )
                r = run(pipeline(transport), data / "work")
                results.append((source, codec, r))
                ok = r["records"] == rows
                failed |= not ok
                print(
                    f"  {source:5} {codec:5} rows {r['records']:>11,} {'ok' if ok else f'WRONG (expected {rows:,})'}"
                    f"  {r['seconds']:7.1f} s  {plain.stat().st_size / MIB / r['seconds']:7.1f} MiB/s"
                    f"  batches {r['batches']}  peak worker RSS {r['rss'] / MIB:7.0f} MiB"
                    f" (target < 1024)",
                    flush=True,
                )
    finally:
        if s3 is not None:
            s3.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
