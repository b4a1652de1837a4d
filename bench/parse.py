#!/usr/bin/env python
"""DAG parse benchmark: how long Airflow's DagBag takes to parse one DAG file that renders
a pipeline of N connectors (one DAG per connector), as the dag-processor does every few
seconds.

For each N (default 200, 2,000 and 10,000 connectors, spread over tables of 50), writes
a spec and a DAG file into a temporary folder, then parses it ``--rounds`` times, each in
a fresh interpreter (as the dag-processor's parse processes are), timing only the DagBag
call (with a DAG file import timeout of 30 minutes unless
``AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT`` says else: Airflow's default, 30 s, is what a
dag-processor gives one file). Prints, per N, the minimum and median time, the
milliseconds per DAG (of the median) and the median CPU time of the parse (less
sensitive than the wall time to other work on the machine), and checks that the DagBag
has exactly N DAGs, no import errors and did not import pyspark.

Exit status: 0 (a benchmark reports, it does not judge) unless a correctness check fails.

Usage: ``.venv/bin/python bench/parse.py [--connectors 200 2000 10000] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE = """
import json, sys, time
from airflow.dag_processing.dagbag import DagBag
t0, c0 = time.perf_counter(), time.process_time()
bag = DagBag(dag_folder=sys.argv[1])
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({
    "seconds": seconds,
    "cpu": cpu,
    "dags": len(bag.dags),
    "errors": {k: str(v)[:500] for k, v in bag.import_errors.items()},
    "pyspark": any(m == "pyspark" or m.startswith("pyspark.") for m in sys.modules),
}))
"""


def spec(connectors: int, per_table: int = 50) -> dict[str, object]:
    tables: dict[str, object] = {}
    for t in range((connectors + per_table - 1) // per_table):
        count = min(per_table, connectors - t * per_table)
        tables[f"t{t}"] = {
            "columns": {"id": "BIGINT NOT NULL", "name": "VARCHAR"},
            "connectors": [
                {
                    "name": f"c{i}",
                    "transport": {"name": "file_input", "config": {"path": f"/data/t{t}/c{i}"}},
                    "format": {"name": "json"},
                    **({"trigger": {"schedule": "@hourly"}} if i % 2 else {}),
                }
                for i in range(count)
            ],
        }
    return {"pipeline": "bench", "tables": tables}


def parse_once(folder: Path, env: dict[str, str]) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise SystemExit(f"parse failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connectors", type=int, nargs="+", default=[200, 2000, 10000])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import os

    ok = True
    with tempfile.TemporaryDirectory(prefix="ac-parse-") as tmp:
        home = Path(tmp) / "airflow"
        home.mkdir()
        env = {
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "1800",  # Airflow's default: 30 s
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        }
        print(f"{'connectors':>10} {'min s':>8} {'median s':>9} {'ms/DAG':>8} {'cpu s':>8}")
        for n in args.connectors:
            folder = Path(tmp) / f"dags{n}"
            folder.mkdir()
            (folder / "bench.yaml").write_text(json.dumps(spec(n)))
            (folder / "bench_dags.py").write_text(
                "from airflow_connectors.airflow import ConnectorPipeline\n"
                "ConnectorPipeline.from_file('bench.yaml').dags()\n"
            )
            times, cpu = [], []
            for _ in range(args.rounds):
                out = parse_once(folder, env)
                if out["dags"] != n or out["errors"] or out["pyspark"]:
                    print(f"  check failed for {n}: {out}", file=sys.stderr)
                    ok = False
                times.append(float(out["seconds"]))  # type: ignore[arg-type]
                cpu.append(float(out["cpu"]))  # type: ignore[arg-type]
            median = statistics.median(times)
            print(
                f"{n:>10} {min(times):>8.2f} {median:>9.2f} {median * 1000 / n:>8.2f} "
                f"{statistics.median(cpu):>8.2f}",
                flush=True,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
