#!/usr/bin/env bash
# Set up everything vdoctor needs on a fresh Debian/Ubuntu machine (idempotent):
# Java 17 for Flink, a Python 3.11/3.12 virtual environment in .venv, and the
# project installed into it with its test tools.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if ! java -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])'; then
  log "installing Java 17 (Flink 2.3 needs Java 11+; 17 is tested)"
  as_root apt-get update -qq
  as_root apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

PY=""
for candidate in python3.11 python3.12 python3; do
  if command -v "$candidate" >/dev/null 2>&1 &&
     "$candidate" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] <= (3, 12) else 1)'; then
    PY="$candidate"; break
  fi
done
if [ -z "$PY" ]; then
  log "installing Python 3.11 (apache-flink 2.3 has wheels for 3.11 and 3.12 only)"
  as_root apt-get update -qq
  as_root apt-get install -y -qq python3.11 python3.11-venv >/dev/null
  PY=python3.11
fi

if [ ! -x .venv/bin/python ]; then
  log "creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.vdoctor-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  log "installing vehicle-doctor and its dependencies into .venv (apache-flink is ~0.9 GB; first time takes a few minutes)"
  .venv/bin/python -m pip install --quiet --upgrade pip
  # The mem0 extra too: the contract suite runs over mem0:// (mem0ai, qdrant-client and 10 small
  # dependencies: ~54 MB installed, a few seconds from the pip cache).
  .venv/bin/python -m pip install --quiet -e '.[test,mem0]'
  touch "$stamp"
fi
# A real MariaDB for the mysql store's tests, unpacked into .services/ (no system change).
bash scripts/install/mariadb.sh
# Real services for the integration tests and `vdoctor run --kafka` (Maven Central jars into .services/).
bash scripts/install/kafka.sh
bash scripts/install/flink-kafka.sh
bash scripts/install/flink-metrics.sh
# A Python environment with only apache-flink, for the test that submits the job to a cluster
# that has nothing of ours (tests/integration/test_clean_cluster.py); ~1 GB, a few minutes the first time.
bash scripts/install/clean-flink.sh
# Debian's Chromium for the memory inspector's browser tests (Playwright drives the system executable).
bash scripts/install/chromium.sh
log "ready: $(.venv/bin/python --version), $(java -version 2>&1 | head -1)"
