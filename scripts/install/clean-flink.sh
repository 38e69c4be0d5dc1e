#!/usr/bin/env bash
# A Python environment with nothing but apache-flink (the version pyproject.toml pins), in
# .services/clean-flink/venv: the clean-cluster submission test starts a standalone Flink
# cluster from it, a cluster that has none of this project's code or dependencies.
set -euo pipefail
cd "$(dirname "$0")/../.."
version="$(sed -n 's/.*"apache-flink==\([0-9.]*\)".*/\1/p' pyproject.toml | head -1)"
dest=.services/clean-flink
stamp="$dest/.apache-flink-$version"
if [ -f "$stamp" ]; then
  exit 0
fi
# The same interpreter as the project's .venv: the job's archive carries compiled extensions for it.
py="$(.venv/bin/python -c 'import sys; print(sys._base_executable)')"
printf '[setup] creating a clean Python environment with only apache-flink==%s in %s\n' "$version" "$dest/venv" >&2
rm -rf "$dest" && mkdir -p "$dest"
"$py" -m venv "$dest/venv"
"$dest/venv/bin/python" -m pip install --quiet --disable-pip-version-check "apache-flink==$version"
touch "$stamp"
