#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft: broker and controller in one JVM) on
# 127.0.0.1 for development, from Maven Central's jars (deploy/maven/kafka/pom.xml,
# resolved once into ~/.cache/airflow-connectors/maven; needs Java 17+ and Maven).
#   bash scripts/kafka.sh up [--port N]   start it detached (port 9092 when free); prints
#                                         its bootstrap servers and PID
#   bash scripts/kafka.sh status          one line; non-zero when it is down
#   bash scripts/kafka.sh down            stop it (its topics and offsets are kept)
# Data, server.properties and logs are in $AIRFLOW_CONNECTORS_KAFKA_HOME (default
# /var/tmp/airflow-connectors/kafka, outside the repository), or --dir DIR.
# The test suite starts a broker of its own unless AIRFLOW_CONNECTORS_TEST_KAFKA names
# the bootstrap servers of one already running (e.g. 127.0.0.1:9092 after `up`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh >&2
exec .venv/bin/python -m airflow_connectors.testing.kafka "$@"
