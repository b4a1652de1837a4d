#!/usr/bin/env bash
# The full test suite: set up .venv, lint and type-check, then every test against real
# Spark (local), SQLite and the PostgreSQL server on 127.0.0.1:5432.
# Fails when pytest runs no test (its exit code 5 is not success).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
if command -v pg_isready >/dev/null && ! pg_isready -q -h 127.0.0.1 -p 5432; then
    if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
        echo "test: starting the local PostgreSQL cluster"
        pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start
    fi
fi
# docker-compose.yaml is validated with `docker-compose config` (no engine needed).
if ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "test: installing docker-compose (Debian package) to validate docker-compose.yaml"
        apt-get update -qq && apt-get install -y -qq docker-compose >/dev/null
    fi
fi
# The Connectors page is tested in headless Chromium (Debian's chromium and chromedriver).
if ! command -v chromedriver >/dev/null || ! command -v chromium >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "test: installing chromium and chromium-driver (Debian packages) for the browser test"
        apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null
    fi
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# Keep the developer's Airflow settings and home out of the tests.
unset AIRFLOW__CONNECTORS__STATE_STORE_URL AIRFLOW__CONNECTORS__WAREHOUSE
export SPARK_LOCAL_IP=127.0.0.1
status=0
.venv/bin/python -m pytest "$@" || status=$?
if [ "$status" -eq 5 ]; then
    echo "test: pytest collected no tests; that is a failure" >&2
fi
exit "$status"
