#!/usr/bin/env python
"""Idle-run benchmark: how long an embedded run that finds nothing new takes in a fresh
interpreter, as every poll and every gate pays it.

Writes ``--files`` small JSON-lines files into a temporary folder and ingests them once
with ``EmbeddedRunner`` (local Spark, untimed: the setup), then runs the same pipeline
``--rounds`` times, each in a fresh interpreter with a Spark factory that raises, and
prints per round and as min and median: the wall time of the whole process (interpreter
start, imports, run), its CPU time (user + system; less sensitive than the wall time to
other work on the machine), the time from the first import of the package to the end of
the run, and ``run()`` alone (parsing the spec, opening the store, the run). Checks that
every idle run found nothing, started no Spark and did not import pyspark.

The fresh interpreters compile no module twice: they keep their bytecode in a temporary
``PYTHONPYCACHEPREFIX`` (as an installed package has its ``.pyc`` files), whatever
``PYTHONDONTWRITEBYTECODE`` says; ``--no-bytecode-cache`` runs them with the environment
as it is (with ``PYTHONDONTWRITEBYTECODE=1`` and a changed source tree, every run
compiles the package's modules again: a few hundred milliseconds of every round).

No timing asserts: exit status 0 unless a correctness check fails.

Usage: ``.venv/bin/python bench/idle.py [--rounds 7] [--files 64] [--work DIR]
[--no-bytecode-cache]``
(``--work``: keep the ingested folder and state store there, reused when it exists).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

IDLE = """
import json, sys, time
t0 = time.perf_counter()
from airflow_connectors.catalog import parse_pipeline
from airflow_connectors.engine.runner import EmbeddedRunner
from airflow_connectors.settings import Settings
from airflow_connectors.state.store import StateStore
args = json.loads(sys.argv[1])
def no_spark():
    raise RuntimeError("a run that finds nothing new started Spark")
t1 = time.perf_counter()
settings = Settings(**args["settings"])
report = EmbeddedRunner(
    parse_pipeline(args["doc"]), settings, store=StateStore(settings.state_store_url),
    spark=no_spark,
).run()
t2 = time.perf_counter()
print(json.dumps({
    "imports": t1 - t0, "run": t2 - t1, "batches": report.batches,
    "spark_started": report.spark_started,
    "pyspark": any(m == "pyspark" or m.startswith("pyspark.") for m in sys.modules),
}))
"""


def pipeline_doc(path: Path) -> dict[str, Any]:
    return {
        "pipeline": "idle",
        "tables": {
            "events": {
                "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR", "amount": "DOUBLE"},
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(path), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        },
    }


def settings_args(work: Path) -> dict[str, Any]:
    return {
        "state_store_url": f"sqlite:///{work}/state.db",
        "warehouse": str(work / "wh"),
        "spark_master": "local[1]",
    }


def setup(work: Path, files: int) -> dict[str, Any]:
    """The input folder, ingested once (Spark) unless ``work`` already holds it."""
    doc = pipeline_doc(work / "in")
    marker = work / "ingested.json"
    if marker.exists() and json.loads(marker.read_text()).get("files") == files:
        return doc
    shutil.rmtree(work, ignore_errors=True)
    (work / "in").mkdir(parents=True)
    for f in range(files):
        lines = (
            json.dumps({"id": f * 100 + i, "name": uuid.UUID(int=f * 100 + i).hex, "amount": i})
            for i in range(100)
        )
        (work / "in" / f"part-{f:04d}.json").write_text("\n".join(lines) + "\n")
    from airflow_connectors.catalog import parse_pipeline
    from airflow_connectors.engine.runner import EmbeddedRunner
    from airflow_connectors.settings import Settings
    from airflow_connectors.state.store import StateStore

    settings = Settings(**settings_args(work))
    t0 = time.perf_counter()
    runner = EmbeddedRunner(
        parse_pipeline(doc), settings, store=StateStore(settings.state_store_url)
    )
    try:
        report = runner.run()
    finally:
        runner.close()
    if report.failed or report.batches == 0:
        raise SystemExit(f"setup ingest failed: {report}")
    print(f"setup: ingested {files} files in {time.perf_counter() - t0:.1f} s (Spark)")
    marker.write_text(json.dumps({"files": files}))
    return doc


def idle_once(doc: dict[str, Any], work: Path, env: dict[str, str]) -> dict[str, Any]:
    payload = json.dumps({"doc": doc, "settings": settings_args(work)})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", IDLE, payload],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"idle run failed:\n{proc.stderr[-3000:]}")
    out = dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    out["wall"] = wall
    out["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--no-bytecode-cache", action="store_true")
    args = parser.parse_args()

    tmp = None if args.work else tempfile.TemporaryDirectory(prefix="ac-idle-")
    work = args.work.resolve() if args.work else Path(tmp.name)  # type: ignore[union-attr]
    ok = True
    try:
        doc = setup(work, args.files)
        env = dict(os.environ)
        if not args.no_bytecode_cache:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        idle_once(doc, work, env)  # untimed: compiles, warms the page cache
        rounds = []
        print(f"{'round':>5} {'wall s':>7} {'cpu s':>6} {'imports+run s':>14} {'run() ms':>9}")
        for r in range(args.rounds):
            out = idle_once(doc, work, env)
            if out["batches"] or out["spark_started"] or out["pyspark"]:
                print(f"  check failed: {out}", file=sys.stderr)
                ok = False
            rounds.append(out)
            print(
                f"{r + 1:>5} {out['wall']:>7.2f} {out['cpu']:>6.2f} "
                f"{out['imports'] + out['run']:>14.2f} "
                f"{out['run'] * 1000:>9.0f}",
                flush=True,
            )
        for label, values in (
            ("wall s", [o["wall"] for o in rounds]),
            ("cpu s", [o["cpu"] for o in rounds]),
            ("imports+run s", [o["imports"] + o["run"] for o in rounds]),
            ("run() ms", [o["run"] * 1000 for o in rounds]),
        ):
            digits = 0 if label.endswith("ms") else 2
            print(
                f"{label}: min {min(values):.{digits}f}, median "
                f"{statistics.median(values):.{digits}f}"
            )
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
