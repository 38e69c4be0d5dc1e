#!/usr/bin/env bash
# Fetch Flink's Prometheus metrics reporter (the version of apache-flink pyproject.toml pins) from
# Maven Central into .services/flink/lib. `vdoctor run --metrics-port PORT` puts it on the local
# MiniCluster's classpath (the MiniCluster reads no plugins/ folder). Flink clusters, the compose
# image and Kubernetes pods use the same artifact from their distribution's plugins/metrics-prometheus.
set -euo pipefail
cd "$(dirname "$0")/../.."
version="$(sed -n 's/.*"apache-flink==\([0-9.]*\)".*/\1/p' pyproject.toml | head -1)"
ARTIFACT="org.apache.flink:flink-metrics-prometheus:$version"
dest=.services/flink/lib
jar="$dest/flink-metrics-prometheus-$version.jar"
if [ -f "$jar" ]; then
  exit 0
fi
command -v mvn >/dev/null 2>&1 || {
  if [ "$(id -u)" -eq 0 ]; then apt-get update -qq && apt-get install -y -qq maven >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq maven >/dev/null; fi
}
printf '[setup] fetching %s from Maven Central\n' "$ARTIFACT" >&2
mkdir -p "$dest"
mvn -q -B -Dstyle.color=never dependency:copy -Dartifact="$ARTIFACT" -DoutputDirectory="$PWD/$dest"
test -f "$jar"
