"""The diagnosis job on Kafka: topics in, topics out, checkpointed on RocksDB, restartable.

Run it on the local MiniCluster with ``vdoctor run --kafka HOST:PORT ...``, or
submit it to a Flink cluster with the same flags::

    $FLINK_HOME/bin/flink run -d -py jobs/kafka_job.py --kafka HOST:PORT ...

Inputs: one topic or several (alerts, rechecks, lifecycle), read with a
KafkaSource from the committed offsets of the consumer group (earliest when
there are none). Outputs: diagnoses and dead letters on their own topics, each
record keyed by VIN (dead letters whose VIN cannot be read have no key),
written by the Kafka SQL connector so that the key can be a field of the row.
Delivery is at-least-once by default; ``--delivery exactly-once`` writes in
Kafka transactions committed on each checkpoint (consumers then read with
``isolation.level=read_committed`` and see diagnoses one checkpoint later).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from vdoctor.errors import ConfigError
from vdoctor.events import describe_validation_error

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONNECTOR_JAR_NAME = "flink-sql-connector-kafka-5.0.0-2.2.jar"
# scripts/install/flink-kafka.sh puts the connector here.
DEFAULT_CONNECTOR_JAR = PROJECT_ROOT / ".services" / "flink" / "lib" / CONNECTOR_JAR_NAME
CONNECTOR_JAR_ENV = "VDOCTOR_KAFKA_CONNECTOR_JAR"

DEFAULT_ALERTS_TOPIC = "vdoctor.alerts"
DEFAULT_DIAGNOSES_TOPIC = "vdoctor.diagnoses"
DEFAULT_DEAD_LETTERS_TOPIC = "vdoctor.dead-letters"
DEFAULT_GROUP_ID = "vdoctor"
# A checkpoint every 10 s bounds what a restart replays (at-least-once) and how
# late exactly-once diagnoses become visible to read_committed consumers.
DEFAULT_CHECKPOINT_INTERVAL_S = 10.0
# Kafka brokers refuse producer transactions longer than transaction.max.timeout.ms
# (15 min by default); the connector's own default (1 h) would be refused.
DEFAULT_TRANSACTION_TIMEOUT_S = 900
# A streaming job restarts after a failure (a broker that went away, a bad
# deploy); bounded so that a permanent fault ends the job instead of looping.
DEFAULT_RESTART_ATTEMPTS = 10
RESTART_DELAY_S = 10

# Kafka's legal topic characters; the broker caps names at 249.
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_HOST_PORT_RE = re.compile(r"^[A-Za-z0-9.\-]+:\d{1,5}$")


class KafkaJobSettings(BaseModel):
    """Where the job reads and writes, and how it checkpoints. Built from flags at the edge."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap: str
    alerts_topic: str = DEFAULT_ALERTS_TOPIC
    rechecks_topic: str | None = None
    lifecycle_topic: str | None = None
    diagnoses_topic: str = DEFAULT_DIAGNOSES_TOPIC
    dead_letters_topic: str = DEFAULT_DEAD_LETTERS_TOPIC
    group_id: str = DEFAULT_GROUP_ID
    delivery: Literal["at-least-once", "exactly-once"] = "at-least-once"
    transactional_id_prefix: str = "vdoctor"
    transaction_timeout_s: int = Field(default=DEFAULT_TRANSACTION_TIMEOUT_S, ge=10)
    checkpoint_interval_s: float = Field(default=DEFAULT_CHECKPOINT_INTERVAL_S, gt=0)
    checkpoint_dir: str
    from_savepoint: str | None = None
    parallelism: int = Field(default=1, ge=1)
    restart_attempts: int = Field(default=DEFAULT_RESTART_ATTEMPTS, ge=0)
    connector_jar: str
    job_name: str = "vdoctor-kafka"

    @field_validator("bootstrap")
    @classmethod
    def _check_bootstrap(cls, v: str) -> str:
        hosts = [h.strip() for h in v.split(",")]
        bad = [h for h in hosts if not _HOST_PORT_RE.match(h)]
        if bad or not hosts:
            raise ValueError(f"bootstrap servers must be HOST:PORT[,HOST:PORT...], got {v!r}")
        return ",".join(hosts)

    @field_validator("alerts_topic", "rechecks_topic", "lifecycle_topic", "diagnoses_topic", "dead_letters_topic")
    @classmethod
    def _check_topic(cls, v: str | None) -> str | None:
        if v is not None and not _TOPIC_RE.match(v):
            raise ValueError(f"topic names use letters, digits, '.', '_' and '-' (at most 249), got {v!r}")
        return v

    def input_topics(self) -> list[str]:
        """Alerts, rechecks and lifecycle topics, each once (they may all be one topic)."""
        topics = [self.alerts_topic, self.rechecks_topic, self.lifecycle_topic]
        return list(dict.fromkeys(t for t in topics if t))


def add_arguments(parser: argparse.ArgumentParser, checkpoint_dir: bool = True) -> None:
    """The Kafka job's flags, shared by ``vdoctor run --kafka`` and ``flink run -py jobs/kafka_job.py``.

    ``vdoctor run`` has its own ``--checkpoint-dir`` (file replays checkpoint too): it passes
    ``checkpoint_dir=False`` and the one flag serves both modes.
    """
    g = parser.add_argument_group("Kafka job (with --kafka)")
    g.add_argument("--alerts-topic", default=DEFAULT_ALERTS_TOPIC, help=f"input topic (default {DEFAULT_ALERTS_TOPIC})")
    g.add_argument("--rechecks-topic", help="extra input topic for recheck events (default: the alerts topic)")
    g.add_argument("--lifecycle-topic", help="extra input topic for lifecycle events (default: the alerts topic)")
    g.add_argument("--diagnoses-topic", default=DEFAULT_DIAGNOSES_TOPIC, help=f"default {DEFAULT_DIAGNOSES_TOPIC}")
    g.add_argument(
        "--dead-letters-topic", default=DEFAULT_DEAD_LETTERS_TOPIC, help=f"default {DEFAULT_DEAD_LETTERS_TOPIC}"
    )
    g.add_argument("--group-id", default=DEFAULT_GROUP_ID, help="consumer group of the source")
    g.add_argument("--delivery", choices=["at-least-once", "exactly-once"], default="at-least-once")
    g.add_argument(
        "--transactional-id-prefix", default="vdoctor", help="exactly-once: unique per job on one Kafka cluster"
    )
    g.add_argument("--transaction-timeout", type=int, default=DEFAULT_TRANSACTION_TIMEOUT_S, metavar="SECONDS")
    g.add_argument("--checkpoint-interval", type=float, default=DEFAULT_CHECKPOINT_INTERVAL_S, metavar="SECONDS")
    if checkpoint_dir:
        g.add_argument("--checkpoint-dir", help="folder or URI for RocksDB checkpoints (default .vdoctor/checkpoints)")
    g.add_argument("--from-savepoint", help="savepoint or retained checkpoint to resume from (local runs)")
    g.add_argument("--restart-attempts", type=int, default=DEFAULT_RESTART_ATTEMPTS)
    g.add_argument(
        "--connector-jar",
        help=f"Flink Kafka connector jar (default ${CONNECTOR_JAR_ENV} or {DEFAULT_CONNECTOR_JAR.name})",
    )


def _uri(path_or_uri: str) -> str:
    if "://" in path_or_uri:
        return path_or_uri
    return Path(path_or_uri).resolve().as_uri()


def settings_from_args(args: argparse.Namespace, env: dict[str, str] | None = None) -> KafkaJobSettings:
    """Validate the flags into settings; a bad value raises ConfigError naming it."""
    env = dict(os.environ) if env is None else env
    jar = args.connector_jar or env.get(CONNECTOR_JAR_ENV) or str(DEFAULT_CONNECTOR_JAR)
    if not Path(jar).is_file():
        raise ConfigError(
            f"Flink Kafka connector jar not found: {jar}. Fetch it with `bash scripts/install/flink-kafka.sh`, "
            f"or point --connector-jar / {CONNECTOR_JAR_ENV} at {CONNECTOR_JAR_NAME}"
        )
    values: dict[str, Any] = {
        "bootstrap": args.kafka,
        "alerts_topic": args.alerts_topic,
        "rechecks_topic": args.rechecks_topic,
        "lifecycle_topic": args.lifecycle_topic,
        "diagnoses_topic": args.diagnoses_topic,
        "dead_letters_topic": args.dead_letters_topic,
        "group_id": args.group_id,
        "delivery": args.delivery,
        "transactional_id_prefix": args.transactional_id_prefix,
        "transaction_timeout_s": args.transaction_timeout,
        "checkpoint_interval_s": args.checkpoint_interval,
        "checkpoint_dir": _uri(args.checkpoint_dir or str(Path(".vdoctor") / "checkpoints")),
        "from_savepoint": _uri(args.from_savepoint) if args.from_savepoint else None,
        "parallelism": args.parallelism,
        "restart_attempts": args.restart_attempts,
        "connector_jar": str(Path(jar).resolve()),
    }
    try:
        return KafkaJobSettings.model_validate(values)
    except ValidationError as e:
        raise ConfigError(f"invalid Kafka job settings: {describe_validation_error(e)}") from e


def flink_configuration(job: KafkaJobSettings) -> dict[str, str]:
    """The job-level Flink configuration: thread-mode Python, RocksDB checkpoints, restarts, the connector."""
    from jobs.flink_env import python_path

    conf = {
        "python.execution-mode": "thread",
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        "python.pythonpath": python_path(),
        "pipeline.jars": Path(job.connector_jar).as_uri(),
        "state.backend.type": "rocksdb",
        "execution.checkpointing.incremental": "true",
        "execution.checkpointing.interval": f"{int(job.checkpoint_interval_s * 1000)}ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.dir": job.checkpoint_dir,
        "execution.checkpointing.savepoint-dir": job.checkpoint_dir.rstrip("/") + "/savepoints",
        # Keep the last checkpoint when the job is cancelled, so it can be resumed.
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "restart-strategy.type": "fixed-delay" if job.restart_attempts else "none",
        "restart-strategy.fixed-delay.attempts": str(job.restart_attempts),
        "restart-strategy.fixed-delay.delay": f"{RESTART_DELAY_S}s",
    }
    if job.from_savepoint:
        conf["execution.state-recovery.path"] = job.from_savepoint
    return conf


def _sink_options(job: KafkaJobSettings, topic: str, suffix: str) -> dict[str, str]:
    options = {
        "topic": topic,
        "properties.bootstrap.servers": job.bootstrap,
        "key.format": "raw",
        "key.fields": "vin",
        "value.format": "raw",
        "value.fields-include": "EXCEPT_KEY",
        "sink.delivery-guarantee": job.delivery,
    }
    if job.delivery == "exactly-once":
        # Each sink needs its own prefix, stable across restarts, so that
        # lingering transactions of a previous attempt are aborted.
        options["sink.transactional-id-prefix"] = f"{job.transactional_id_prefix}-{suffix}"
        options["properties.transaction.timeout.ms"] = str(job.transaction_timeout_s * 1000)
    return options


def record_key(kind: str, payload: str) -> str | None:
    """The Kafka key of an output record: the VIN, when one can be read."""
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    vin = data.get("vin") if isinstance(data, dict) else None
    if vin is None and kind != "D" and isinstance(data, dict) and isinstance(data.get("raw"), str):
        try:
            raw = json.loads(data["raw"])
        except ValueError:
            return None
        vin = raw.get("vin") if isinstance(raw, dict) else None
    return vin if isinstance(vin, str) and vin else None


def build_job(job: KafkaJobSettings, worker_settings: dict[str, Any], local: bool = False) -> Any:
    """Wire source -> pipeline -> sinks on a fresh environment; return the environment to execute.

    ``local``: the environment is the local MiniCluster, which takes its
    memory sizes from this configuration (``jobs.flink_env``).
    """
    from pyflink.common import Configuration, Row, Types, WatermarkStrategy
    from pyflink.common.serialization import SimpleStringSchema
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.datastream.connectors.kafka import (
        KafkaOffsetResetStrategy,
        KafkaOffsetsInitializer,
        KafkaSource,
    )
    from pyflink.table import DataTypes, Schema, StreamTableEnvironment, TableDescriptor
    from pyflink.table.expressions import col

    from jobs import pipeline
    from operators.parse import DEAD_LETTER, DIAGNOSIS

    if local:
        from jobs.flink_env import local_jvm_environment

        local_jvm_environment()  # before the first Java object: that starts the JVM
    conf = Configuration()
    for key, value in flink_configuration(job).items():
        conf.set_string(key, value)
    if local:
        from jobs.flink_env import LOCAL_MANAGED_MEMORY

        conf.set_string("taskmanager.memory.managed.size", LOCAL_MANAGED_MEMORY)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(job.parallelism)

    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(job.bootstrap)
        .set_topics(*job.input_topics())
        .set_group_id(job.group_id)
        .set_starting_offsets(KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.EARLIEST))
        .set_value_only_deserializer(SimpleStringSchema())
        .set_property("isolation.level", "read_committed")
        .build()
    )
    raw = env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka: " + ",".join(job.input_topics()))
    results = pipeline.build(raw, worker_settings)
    row_type = Types.ROW_NAMED(["kind", "vin", "payload"], [Types.STRING(), Types.STRING(), Types.STRING()])
    keyed = results.map(lambda t: Row(t[0], record_key(t[0], t[1]), t[1]), output_type=row_type).name("key by vin")

    t_env = StreamTableEnvironment.create(env)
    table = t_env.from_data_stream(keyed)
    sink_schema = Schema.new_builder().column("vin", DataTypes.STRING()).column("payload", DataTypes.STRING()).build()
    statements = t_env.create_statement_set()
    for name, topic, kind in (
        ("diagnoses", job.diagnoses_topic, DIAGNOSIS),
        ("dead_letters", job.dead_letters_topic, DEAD_LETTER),
    ):
        builder = TableDescriptor.for_connector("kafka").schema(sink_schema)
        for key, value in _sink_options(job, topic, name).items():
            builder = builder.option(key, value)
        t_env.create_temporary_table(f"{name}_sink", builder.build())
        statements.add_insert(f"{name}_sink", table.filter(col("kind") == kind).select(col("vin"), col("payload")))
    statements.attach_as_datastream()
    return env


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(job: KafkaJobSettings, worker_settings: dict[str, Any], detached: bool = False, local: bool = False) -> None:
    """Build and execute; blocks until the job ends (an unbounded job runs until cancelled).

    Submitted by ``flink run`` (``local=False``), the CLI decides about
    detaching (``-d``). On the local MiniCluster (``local=True``), Ctrl-C or
    SIGTERM cancels the job before returning (its last checkpoint is kept), so
    that no Flink JVM is left running the job without its driver.
    """
    env = build_job(job, worker_settings, local=local)
    if not local and not detached:
        env.execute(job.job_name)
        return
    client = env.execute_async(job.job_name)
    if detached:
        print(f"vdoctor: submitted {job.job_name} as job {client.get_job_id()}", file=sys.stderr)
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        client.get_job_execution_result().result()
    except KeyboardInterrupt:
        client.cancel().result()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kafka_job.py", description=__doc__)
    parser.add_argument("--kafka", required=True, metavar="HOST:PORT", help="Kafka bootstrap servers")
    parser.add_argument("--memory", help="long-term memory URL (default sqlite:///.vdoctor/memory.db)")
    parser.add_argument("--model", choices=["offline"], help="chat model (default offline)")
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--detached", action="store_true", help="return once the job is submitted")
    add_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from jobs.cli import worker_settings

    args = _parse_args(argv)
    try:
        job = settings_from_args(args)
        settings = worker_settings(args)
    except ConfigError as e:
        print(f"vdoctor: {e}", file=sys.stderr)
        return 2
    run(job, settings, detached=args.detached)
    return 0


if __name__ == "__main__":
    sys.exit(main())
