"""The Flink environment of both vdoctor jobs (file replay and Kafka), built from ``FlinkSettings``.

``flink_configuration`` is plain Python (checked without a JVM); ``make_env``
imports pyflink and starts the environment.
"""

from __future__ import annotations

import site
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.job_settings import FlinkSettings

if TYPE_CHECKING:
    from pyflink.datastream import StreamExecutionEnvironment

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Between restarts of a failed job: long enough for a broker or a store to come back.
RESTART_DELAY_S = 10


def python_path() -> str:
    """The project root, then site-packages, for thread-mode workers (NOTES.md: pemja needs it).

    The root comes first so that workers import this checkout's code even
    where another checkout is installed in editable mode.
    """
    paths = [str(PROJECT_ROOT), *site.getsitepackages()]
    return ":".join(dict.fromkeys(paths))


def flink_configuration(flink: FlinkSettings) -> dict[str, str]:
    """Every Flink option the job sets: thread-mode Python, state and checkpoints, restarts, jars, extras."""
    conf = {
        # Thread mode: state, TTL and timers work there, and it is ~10x faster than process mode (NOTES.md).
        "python.execution-mode": "thread",
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        "python.pythonpath": python_path(),
        "state.backend.type": flink.state_backend,
        "restart-strategy.type": "fixed-delay" if flink.restart_attempts else "none",
    }
    if flink.restart_attempts:
        conf["restart-strategy.fixed-delay.attempts"] = str(flink.restart_attempts)
        conf["restart-strategy.fixed-delay.delay"] = f"{RESTART_DELAY_S}s"
    if flink.jars:
        conf["pipeline.jars"] = ";".join(Path(j).as_uri() for j in flink.jars)
    if flink.checkpoint_dir is not None:
        conf["execution.checkpointing.dir"] = flink.checkpoint_dir
        conf["execution.checkpointing.interval"] = f"{flink.checkpoint_interval_ms}ms"
        conf["execution.checkpointing.mode"] = "EXACTLY_ONCE"
        conf["execution.checkpointing.savepoint-dir"] = flink.checkpoint_dir.rstrip("/") + "/savepoints"
        if flink.state_backend == "rocksdb":
            conf["execution.checkpointing.incremental"] = "true"
        if flink.retain_checkpoints_on_cancel:
            conf["execution.checkpointing.externalized-checkpoint-retention"] = "RETAIN_ON_CANCELLATION"
    if flink.restore_from is not None:
        conf["execution.state-recovery.path"] = flink.restore_from
        if flink.allow_non_restored_state:
            conf["execution.state-recovery.ignore-unclaimed-state"] = "true"
    if flink.tmp_dir is not None:
        conf["io.tmp.dirs"] = flink.tmp_dir
    conf.update(flink.extra_conf)
    return conf


def make_env(flink: FlinkSettings) -> StreamExecutionEnvironment:
    """A fresh execution environment with ``flink_configuration(flink)`` and the parallelism."""
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    if flink.tmp_dir is not None:
        Path(flink.tmp_dir).mkdir(parents=True, exist_ok=True)
    conf = Configuration()
    for key, value in flink_configuration(flink).items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(flink.parallelism)
    return env
