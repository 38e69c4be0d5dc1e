"""The Flink environment of both vdoctor jobs (file replay and Kafka), built from ``FlinkSettings``.

``flink_configuration`` is plain Python (checked without a JVM); ``make_env``
imports pyflink and starts the environment.
"""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.job_settings import FlinkSettings
from vdoctor.errors import ConfigError

if TYPE_CHECKING:
    from pyflink.datastream import StreamExecutionEnvironment

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Between restarts of a failed job: long enough for a broker or a store to come back.
RESTART_DELAY_S = 10
# Restarts are counted over this window (Flink's failure-rate strategy): a fault that persists uses up the
# attempts within minutes and ends the job, while transient ones (a broker restart a week) never add up.
# A fixed number of attempts over the job's life would end a job that ran for months after its tenth.
RESTART_WINDOW_MIN = 30
PROMETHEUS_REPORTER = "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"
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


def local_log_dir() -> Path:
    """Where the local Flink JVM of ``vdoctor run`` writes its log (``flink-*-python-*.log``): ``$FLINK_LOG_DIR``,
    else the ``log`` folder of the installed pyflink (PyFlink's gateway script reads the same variable)."""
    import pyflink

    found = os.environ.get("FLINK_LOG_DIR")
    return Path(found) if found else Path(pyflink.__file__).resolve().parent / "log"


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
        "state.backend.type": flink.state_backend,
        "restart-strategy.type": "failure-rate" if flink.restart_attempts else "none",
    }
    if flink.python_env == "this-process":
        conf["python.executable"] = sys.executable
        conf["python.client.executable"] = sys.executable
        conf["python.pythonpath"] = python_path()
        conf["taskmanager.memory.managed.size"] = LOCAL_MANAGED_MEMORY
    if flink.metrics_port is not None:
        # The reporter ships with Flink (plugins/metrics-prometheus); make_env() puts it where the MiniCluster looks.
        conf["metrics.reporter.prom.factory.class"] = PROMETHEUS_REPORTER
        conf["metrics.reporter.prom.port"] = str(flink.metrics_port)
    if flink.restart_attempts:
        conf["restart-strategy.failure-rate.max-failures-per-interval"] = str(flink.restart_attempts)
        conf["restart-strategy.failure-rate.failure-rate-interval"] = f"{RESTART_WINDOW_MIN}min"
        conf["restart-strategy.failure-rate.delay"] = f"{RESTART_DELAY_S}s"
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


def prometheus_reporter_jar() -> Path:
    """Flink's Prometheus reporter: the one scripts/install/flink-metrics.sh fetched from Maven Central, else
    the same artifact from the plugins/ folder of the Flink distribution inside the apache-flink wheel."""
    import pyflink
    from pyflink.version import __version__ as version

    fetched = PROJECT_ROOT / ".services" / "flink" / "lib" / f"flink-metrics-prometheus-{version}.jar"
    if fetched.is_file():
        return fetched
    bundled = Path(pyflink.__file__).resolve().parent / "plugins" / "metrics-prometheus"
    found = sorted(bundled.glob(f"flink-metrics-prometheus-{version}.jar"))
    if not found:
        raise ConfigError(
            f"Flink's Prometheus reporter is neither in {fetched.parent} nor in {bundled}: "
            "run `bash scripts/install/flink-metrics.sh`"
        )
    return found[0]


def _reporter_on_the_local_classpath() -> None:
    """Put the Prometheus reporter on the classpath of the JVM that runs the local MiniCluster.

    The MiniCluster loads reporters from its classpath only (Flink's LocalExecutor gives it no plugin
    manager, so plugins/ is not read), and PyFlink starts that JVM with lib/*.jar plus HADOOP_CLASSPATH.
    """
    import pyflink.java_gateway

    jar = str(prometheus_reporter_jar())
    extra = os.environ.get("HADOOP_CLASSPATH", "")
    if jar in extra.split(os.pathsep):
        return
    if pyflink.java_gateway._gateway is not None:
        raise ConfigError("the Flink gateway of this process started before --metrics-port could add its reporter")
    os.environ["HADOOP_CLASSPATH"] = os.pathsep.join(p for p in (jar, extra) if p)


def make_env(flink: FlinkSettings) -> StreamExecutionEnvironment:
    """A fresh execution environment with ``flink_configuration(flink)`` and the parallelism."""
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    if flink.python_env == "this-process":
        local_jvm_environment()  # before the first Java object: that starts the JVM
        if flink.metrics_port is not None:
            _reporter_on_the_local_classpath()
    if flink.tmp_dir is not None:
        Path(flink.tmp_dir).mkdir(parents=True, exist_ok=True)
    conf = Configuration()
    for key, value in flink_configuration(flink).items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(flink.parallelism)
    return env
