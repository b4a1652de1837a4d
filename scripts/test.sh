#!/usr/bin/env bash
# The full test suite: set up .venv, lint and type-check, then every test against real
# Spark (local), SQLite, PostgreSQL, Redis and NATS on 127.0.0.1 (scripts/services.sh),
# and Apache Kafka from Maven Central jars (a pytest fixture).
# Fails when pytest runs no test (its exit code 5 is not success).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p test-artifacts
bash scripts/bootstrap.sh
# PostgreSQL, Redis and NATS on 127.0.0.1 (installed from Debian's packages when missing;
# servers already running are used). See scripts/services.sh for pointing the suite at
# servers of your own.
bash scripts/services.sh up
# docker-compose.yaml is validated with `docker-compose config` (no engine needed).
if ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "test: installing docker-compose (Debian package) to validate docker-compose.yaml"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose; } \
            >>test-artifacts/apt.log 2>&1 || { echo "test: apt-get failed; see test-artifacts/apt.log" >&2; exit 1; }
    fi
fi
# The Connectors page is tested in headless Chromium (Debian's chromium and chromedriver).
if ! command -v chromedriver >/dev/null || ! command -v chromium >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "test: installing chromium and chromium-driver (Debian packages) for the browser test"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; } \
            >>test-artifacts/apt.log 2>&1 || { echo "test: apt-get failed; see test-artifacts/apt.log" >&2; exit 1; }
    fi
fi
# The Java side and the other Sparks, fetched while the linters run: Kafka and Spark's
# packages from Maven Central (deploy/maven/), the pysparks that read Delta and Iceberg
# (tests/sinks/test_spark_reads.py). Caches outside the repository; the tests wait for a
# fetch under way (file locks) and report its failure themselves.
prefetch_log=test-artifacts/prefetch.log
if [ "$#" -eq 0 ]; then
    .venv/bin/python -m airflow_connectors.testing.spark_packages --prefetch >"$prefetch_log" 2>&1 &
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# Keep the developer's Airflow settings and home out of the tests.
unset AIRFLOW__CONNECTORS__STATE_STORE_URL AIRFLOW__CONNECTORS__WAREHOUSE
export SPARK_LOCAL_IP=127.0.0.1
status=0
if [ "$#" -gt 0 ]; then
    .venv/bin/python -m pytest "$@" || status=$?
    if [ "$status" -eq 5 ]; then
        echo "test: pytest collected no tests; that is a failure" >&2
    fi
    exit "$status"
fi
# The whole suite in two lanes, so its wall time is the longer lane's, not the sum:
# - beside: the cluster tests (marked `cluster`: a Spark standalone cluster and Airflow
#   with Celery workers, mostly waiting on heartbeats, schedulers and polls), then the
#   database, stream and table-format sources, Kafka and the Spark readers of our tables
#   (marked `sources`), the Airflow-native features' end-to-end modules (marked
#   `airflow_server`: a real Airflow, this lane's own) and the README's main command run
#   from a copy of the repository (marked `side`), in one pytest; each part's output goes
#   to test-artifacts/ and follows the rest's;
# - every test's time of each lane in test-artifacts/{main,cluster,sources}-tests.xml
#   (JUnit XML), for finding where the suite's time goes;
# - the rest (none of these markers) in this shell.
cluster_log=test-artifacts/cluster-tests.log
sources_log=test-artifacts/sources-tests.log
rm -f test-artifacts/cluster-tests.status test-artifacts/sources-tests.status
started=$SECONDS
(
    code=0
    .venv/bin/python -m pytest -m cluster -p no:cacheprovider \
        --junitxml=test-artifacts/cluster-tests.xml >"$cluster_log" 2>&1 || code=$?
    echo "$code" >test-artifacts/cluster-tests.status
    code=0
    .venv/bin/python -m pytest -m "(sources or airflow_server or side) and not cluster" -p no:cacheprovider \
        --junitxml=test-artifacts/sources-tests.xml >"$sources_log" 2>&1 || code=$?
    echo "$code" >test-artifacts/sources-tests.status
    echo "$((SECONDS - started))" >test-artifacts/side-lane.seconds
) &
beside_pid=$!
trap 'kill "$beside_pid" 2>/dev/null || true' EXIT
.venv/bin/python -m pytest -m "not cluster and not sources and not airflow_server and not side" \
    --junitxml=test-artifacts/main-tests.xml || status=$?
main_seconds=$((SECONDS - started))
wait "$beside_pid" || true
trap - EXIT
echo "=================== the cluster tests (pytest -m cluster) ==================="
cat "$cluster_log"
echo "===== the sources, airflow_server and side tests (pytest -m 'sources or airflow_server or side') ====="
cat "$sources_log"
echo "================ prefetch (Maven jars, pysparks for the readers) ================"
cat "$prefetch_log" 2>/dev/null || true
side_seconds=$(cat test-artifacts/side-lane.seconds 2>/dev/null || echo "?")
echo "test: main lane ${main_seconds} s, side lane (cluster, then sources/airflow_server/side) ${side_seconds} s"
cluster_status=$(cat test-artifacts/cluster-tests.status 2>/dev/null || echo 1)
sources_status=$(cat test-artifacts/sources-tests.status 2>/dev/null || echo 1)
final=0
for part in "not cluster and not sources and not airflow_server and not side:$status" "cluster:$cluster_status" "(sources or airflow_server or side) and not cluster:$sources_status"; do
    code=${part##*:}
    if [ "$code" -eq 5 ]; then
        echo "test: pytest -m '${part%:*}' collected no tests; that is a failure" >&2
    fi
    if [ "$code" -ne 0 ] && [ "$final" -eq 0 ]; then
        final=$code
    fi
done
exit "$final"
