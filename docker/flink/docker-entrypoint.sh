#!/usr/bin/env bash
# Entry point of the vdoctor Flink image, in the shape of the official Flink image's:
# `jobmanager` and `taskmanager` start that process in the foreground (docker-compose.yml);
# anything else runs as given: the Flink Kubernetes Operator (native mode) starts its pods
# with `/docker-entrypoint.sh bash -c "kubernetes-jobmanager.sh ..."`, which finds the
# script on PATH ($FLINK_HOME/bin), and its config map mounted on $FLINK_HOME/conf.
set -euo pipefail
case "${1:-}" in
  jobmanager) shift; exec "$FLINK_HOME/bin/jobmanager.sh" start-foreground "$@" ;;
  taskmanager) shift; exec "$FLINK_HOME/bin/taskmanager.sh" start-foreground "$@" ;;
  *) exec "$@" ;;
esac
