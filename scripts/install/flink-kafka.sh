#!/usr/bin/env bash
# Fetch the Flink Kafka connector (shaded, includes kafka-clients) from Maven Central
# into .services/flink/lib. `vdoctor run --kafka` loads it from there, or from
# VDOCTOR_KAFKA_CONNECTOR_JAR. There is no -2.3 build; the -2.2 build runs on Flink 2.3.
set -euo pipefail
cd "$(dirname "$0")/../.."
ARTIFACT="org.apache.flink:flink-sql-connector-kafka:5.0.0-2.2"
dest=.services/flink/lib
jar="$dest/flink-sql-connector-kafka-5.0.0-2.2.jar"
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
