#!/usr/bin/env bash
# The main job on embedded defaults: set up .venv, then run the example pipeline
# (pipelines/demo.yaml) through a real Airflow scheduler (airflow standalone: SQLite,
# LocalExecutor) with every batch a spark-submit on local Spark, and print the results.
# `bash scripts/quickstart.sh --keep-running` leaves the UI up on http://127.0.0.1:8080
# (admin / admin). `--spark connect` runs every batch on a Spark Connect server (local
# Spark) that it starts and stops, instead of a spark-submit per batch.
# It needs no server (SQLite and local Spark), so it starts none (but its own Spark Connect
# server with --spark connect): scripts/services.sh is
# for the test suite and the scale-out deployment. Java 17+ and Python 3.11+ are all.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python scripts/quickstart.py "$@"
