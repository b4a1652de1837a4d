#!/usr/bin/env bash
# The scale-out deployment on this machine, on 127.0.0.1 without Docker: Spark standalone
# (master + 2 workers), Airflow with the CeleryExecutor (API server, scheduler,
# dag-processor, triggerer, 2 Celery workers; Redis broker, PostgreSQL metadata DB), the
# state store in PostgreSQL and the warehouse on an S3-compatible server, serving dags/.
#   bash scripts/cluster.sh up       start it all detached; prints the URLs
#   bash scripts/cluster.sh up --spark connect   also a Spark Connect server on the master,
#                                    which then runs every batch (no spark-submit)
#   bash scripts/cluster.sh status   what runs
#   bash scripts/cluster.sh down     stop what up started, drop its databases
# State, PIDs, ports and logs are in .cluster/ (--root DIR elsewhere). Needs Redis on
# 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432 (user postgres): `up` starts them first
# with scripts/services.sh (installing them from Debian's packages when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
if [ "${1:-}" = up ]; then
    bash scripts/services.sh up postgres redis
fi
exec .venv/bin/python scripts/cluster.py "$@"
