# The developer loop. `make` (or `make help`) lists the targets.
#
# `make test` is the full suite, exactly what CI runs (scripts/test.sh: set-up, services,
# lint, type checks, every test in two lanes). `make fast` is the lane of tests that need
# no Spark, no Airflow and no server (under a minute on 2 cores): the markers of what a
# test needs are registered in pyproject.toml and applied in tests/conftest.py.

.DEFAULT_GOAL := help
SHELL := /bin/bash

PY := .venv/bin/python
RUFF := .venv/bin/ruff

# What a test needs (pyproject.toml's markers), and the lanes scripts/test.sh runs apart.
NEEDS := spark or airflow or postgres or s3 or gcs or azure or kafka or nats or redis or browser
FAST_LANE := not ($(NEEDS) or slow or cluster or sources or airflow_server or side)
# scripts/test.sh's lanes (tests/test_makefile.py checks they are the same).
MAIN_LANE := not cluster and not sources and not airflow_server and not side
CLUSTER_LANE := cluster
SOURCES_LANE := (sources or airflow_server or side) and not cluster

# Extra pytest arguments: `make fast ARGS="-k url_input -x"`.
ARGS ?=

.PHONY: help setup services test fast lane-main lane-cluster lane-sources lane-side test-m \
	lint format hooks docs quickstart bench

help: ## List the targets
	@echo "make <target> (the default lists them):"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  %-13s %s\n", $$1, $$2}' \
		$(MAKEFILE_LIST)

setup: ## Create .venv from requirements.lock and install the package (scripts/bootstrap.sh)
	bash scripts/bootstrap.sh

services: ## Start PostgreSQL, Redis and NATS on 127.0.0.1 (scripts/services.sh up)
	bash scripts/services.sh up

test: ## The full suite, as CI runs it (scripts/test.sh; ~45 min on 2 cores)
	bash scripts/test.sh

# PYTHONDONTWRITEBYTECODE emptied: pytest keeps the test modules it rewrote in
# __pycache__, which halves collection from the second run on.
fast: ## The fast lane: no Spark, no Airflow, no server, nothing slow (~40 s on 2 cores)
	AIRFLOW_CONNECTORS_TEST_LANE=fast PYTHONDONTWRITEBYTECODE= \
		$(PY) -m pytest -m "$(FAST_LANE)" $(ARGS)

lane-main: ## scripts/test.sh's main lane alone (set-up, services and lint first)
	bash scripts/test.sh -m "$(MAIN_LANE)" $(ARGS)

lane-cluster: ## The cluster tests alone (the scale-out deployment)
	bash scripts/test.sh -m "$(CLUSTER_LANE)" -p no:cacheprovider $(ARGS)

lane-sources: ## The sources, airflow_server and side tests (the side lane after the cluster)
	bash scripts/test.sh -m "$(SOURCES_LANE)" -p no:cacheprovider $(ARGS)

lane-side: lane-cluster lane-sources ## scripts/test.sh's side lane alone: cluster, then sources

test-m: ## The tests of a marker expression: make test-m M="postgres and not spark"
	@if [ -z "$(M)" ]; then echo 'test-m: give a marker expression, M="..."' >&2; exit 2; fi
	bash scripts/test.sh -m "$(M)" $(ARGS)

lint: ## ruff check, ruff format --check and mypy, as scripts/test.sh runs them
	$(RUFF) check .
	$(RUFF) format --check .
	.venv/bin/mypy

format: ## Format the code and apply ruff's fixes
	$(RUFF) format .
	$(RUFF) check --fix .

hooks: ## Install the git hooks of .pre-commit-config.yaml (ruff, ruff format)
	.venv/bin/pre-commit install

docs: ## Build the documentation site into docs/_build/html (warnings are errors)
	$(PY) -m sphinx -W -n --keep-going -b html docs docs/_build/html

quickstart: ## The README's main command: the example pipeline under Airflow and Spark
	bash scripts/quickstart.sh

bench: ## The ingest benchmark's quick check (bench/ingest.py, 64 MiB per format)
	$(PY) bench/ingest.py --size-mib 64 --files 8 --rounds 2
