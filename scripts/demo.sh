#!/usr/bin/env bash
# Set up, then replay the demo fleet through the PyFlink job on embedded memory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=out/demo
rm -rf "$out"
.venv/bin/vdoctor run --alerts data/demo/alerts.jsonl --out "$out" --memory "sqlite:///$out/memory.db"
