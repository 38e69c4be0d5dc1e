#!/usr/bin/env bash
# Fetch an Apache Kafka 4.x broker (KRaft) from Maven Central into .services/kafka/lib.
# No Docker, no tarball: the kafka_2.13 jar and its runtime dependencies, which
# `java -cp 'lib/*' kafka.Kafka server.properties` runs as a plain process.
# Tests (tests/integration/conftest.py) format storage and start it on free ports.
set -euo pipefail
cd "$(dirname "$0")/../.."
KAFKA_VERSION="${VDOCTOR_KAFKA_VERSION:-4.2.0}"
dest=.services/kafka
stamp="$dest/lib/.kafka-$KAFKA_VERSION"
if [ -f "$stamp" ]; then
  exit 0
fi
command -v mvn >/dev/null 2>&1 || {
  if [ "$(id -u)" -eq 0 ]; then apt-get update -qq && apt-get install -y -qq maven >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq maven >/dev/null; fi
}
printf '[setup] fetching Apache Kafka %s (kafka_2.13 and its runtime dependencies) from Maven Central\n' "$KAFKA_VERSION" >&2
rm -rf "$dest/lib" && mkdir -p "$dest"
cat > "$dest/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.vdoctor</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <!-- routes the broker's slf4j logging to log4j2 (errors on stderr) instead of a no-op logger -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>2.25.3</version>
    </dependency>
  </dependencies>
</project>
POM
mvn -q -B -Dstyle.color=never -f "$dest/pom.xml" dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$PWD/$dest/lib"
touch "$stamp"
printf '[setup] Kafka %s: %s jars in %s\n' "$KAFKA_VERSION" "$(ls "$dest/lib" | wc -l)" "$dest/lib" >&2
