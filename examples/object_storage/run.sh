#!/usr/bin/env bash
# The object-storage example: an S3 server on 127.0.0.1, a landing bucket, Delta tables
# in a warehouse on S3. Sets up .venv like the quickstart, then runs run.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/bootstrap.sh
exec .venv/bin/python examples/object_storage/run.py "$@"
