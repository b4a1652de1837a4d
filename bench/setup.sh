#!/usr/bin/env bash
# Creates bench/.venv, the benchmark-only environment of bench/compare.py (DuckDB, Polars:
# bench/requirements.txt), apart from the project's .venv. Idempotent.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3.11}"
if [ ! -x "$here/.venv/bin/python" ]; then
    "$python" -m venv "$here/.venv"
fi
"$here/.venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "$here/requirements.txt"
"$here/.venv/bin/python" -c 'import duckdb, polars; print("bench/.venv: duckdb", duckdb.__version__, "polars", polars.__version__)'
