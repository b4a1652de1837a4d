#!/usr/bin/env bash
# Creates .venv in the repository from the pinned lock file (requirements.lock) and
# installs airflow-connectors into it in editable mode. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.9
PYTHON=${PYTHON:-python3}

if ! command -v java >/dev/null 2>&1; then
    echo "bootstrap: Java 17+ is required by Spark but 'java' is not on PATH; install a JDK (for example openjdk-17-jdk-headless) and run again" >&2
    exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
    echo "bootstrap: Python 3.11+ is required, $("$PYTHON" --version 2>&1) found; set PYTHON=/path/to/python3.11" >&2
    exit 1
fi
if ! command -v uv >/dev/null 2>&1 || [ "$(uv --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    "$PYTHON" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi
UV="$PYTHON -m uv"

# Up to date already (same lock, pyproject, package version and repository path, and the
# package imports from this checkout): change nothing. A sync removes the editable install
# for a moment before putting it back, and Airflow or Spark processes started from this
# .venv in that moment (a test suite, a running deployment) could not import
# airflow_connectors.
STAMP=.venv/.bootstrap-stamp
repo=$(pwd)
# The version is __version__ in the package (pyproject.toml's dynamic version): the
# editable install's metadata carries it, so a new version installs again.
version=$(grep -m1 '^__version__' airflow_connectors/__init__.py)
want="$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1) $repo $version"
if [ -x .venv/bin/python ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ] \
    && (cd / && "$repo/.venv/bin/python" -c 'import sys, airflow_connectors as a; sys.exit(0 if a.__file__.startswith(sys.argv[1]) else 1)' "$repo/") 2>/dev/null; then
    echo "bootstrap: .venv up to date"
    exit 0
fi

[ -d .venv ] || $UV venv --quiet --python "$PYTHON" .venv
# sync = install exactly the lock file's packages, removing anything else.
# Byte-compile at install: environments that set PYTHONDONTWRITEBYTECODE (CI images
# often do) would otherwise recompile Airflow and PySpark from source in every task,
# Spark worker and DAG parse.
$UV pip sync --quiet --compile-bytecode --python .venv/bin/python requirements.lock
$UV pip install --quiet --python .venv/bin/python --no-deps -e .
echo "$want" > "$STAMP"
echo "bootstrap: .venv ready ($(.venv/bin/python -c 'import pyspark, airflow; print("pyspark", pyspark.__version__, "airflow", airflow.__version__)'))"
