"""The Flink execution environment for vdoctor jobs: runtime mode, Python workers, temp dirs."""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path

from pyflink.common import Configuration
from pyflink.datastream import StreamExecutionEnvironment

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# Managed memory of a local run's MiniCluster (RocksDB's block cache and
# write buffers live in it). RocksDB fills its share lazily, so with Flink's
# local default (128 MB) a Kafka job's resident memory climbed for the first
# half hour of a soak (+60 MB from minute 5 to minute 20 at 12 events/s);
# 48 MB is full within minutes and the growth after minute 5 fell to ~1 MB a
# minute. A cluster's TaskManagers size theirs in the cluster's configuration.
LOCAL_MANAGED_MEMORY = "48m"
# glibc gives every thread that allocates its own malloc arena (up to 8 per
# core), and the operator's worker threads keep theirs: capping them lowered
# the job's resident memory by ~50 MB in the same soak, and with the 48 MB
# above halved the growth that was left. A value already set is kept.
MALLOC_ARENA_MAX = "2"


def local_jvm_environment() -> None:
    """Call before the local Flink JVM starts: it inherits this process's environment."""
    os.environ.setdefault("MALLOC_ARENA_MAX", MALLOC_ARENA_MAX)


def python_path() -> str:
    """The project root, then site-packages, for thread-mode workers (NOTES.md: pemja needs it).

    The root comes first so that workers import this checkout's code even
    where another checkout is installed in editable mode.
    """
    paths = [str(PROJECT_ROOT), *site.getsitepackages()]
    return ":".join(dict.fromkeys(paths))


def latest_checkpoint(checkpoint_dir: Path) -> Path | None:
    """The newest complete checkpoint (a ``chk-N`` folder with ``_metadata``) under ``checkpoint_dir``.

    The newest folder may be incomplete after a crash (NOTES.md), hence the check.
    """
    found = [p.parent for p in checkpoint_dir.glob("*/chk-*/_metadata")]
    return max(found, key=lambda p: (p.stat().st_mtime, int(p.name.split("-")[1]))) if found else None


def make_env(
    parallelism: int,
    tmp_dir: Path,
    checkpoint_dir: Path | None = None,
    checkpoint_interval_ms: int = 0,
    restore_from: Path | None = None,
    extra_conf: dict[str, str] | None = None,
) -> StreamExecutionEnvironment:
    """A local environment in thread mode (state, TTL and timers work there, and it is ~10x faster).

    With ``checkpoint_dir`` and an interval the job checkpoints its state
    (sessions, dedup ids and the events whose runs are in flight);
    ``restore_from`` (a ``chk-N`` folder) starts it from one. ``extra_conf``
    sets any other Flink option (e.g. ``rest.port`` to read the job's metrics).
    """
    local_jvm_environment()  # before the first Java object: that starts the JVM
    conf = Configuration()
    if checkpoint_dir is not None and checkpoint_interval_ms > 0:
        conf.set_string("execution.checkpointing.dir", checkpoint_dir.resolve().as_uri())
        conf.set_string("execution.checkpointing.interval", f"{checkpoint_interval_ms} ms")
        conf.set_string("state.backend.type", "hashmap")
    if restore_from is not None:
        conf.set_string("execution.state-recovery.path", restore_from.resolve().as_uri())
        conf.set_string("execution.state-recovery.ignore-unclaimed-state", "true")
    conf.set_string("taskmanager.memory.managed.size", LOCAL_MANAGED_MEMORY)
    conf.set_string("python.execution-mode", "thread")
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    conf.set_string("python.pythonpath", python_path())
    tmp_dir.mkdir(parents=True, exist_ok=True)
    conf.set_string("io.tmp.dirs", str(tmp_dir))
    # A bounded replay that fails must fail, not restart forever (NOTES.md).
    conf.set_string("restart-strategy.type", "none")
    for key, value in (extra_conf or {}).items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    return env
