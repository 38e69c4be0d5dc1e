#!/usr/bin/env bash
# Set up, then run the whole test suite: unit, contract, e2e (PyFlink MiniCluster),
# integration (a real Kafka broker and a standalone Flink cluster, started by the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m ruff check vdoctor operators jobs devtools inspector
# Strict typing of the domain package (pyproject.toml [tool.mypy]).
.venv/bin/python -m mypy
.venv/bin/python -m pytest "$@"
