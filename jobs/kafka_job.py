"""The diagnosis job on Kafka: topics in, topics out, checkpointed on RocksDB, restartable.

Run it on the local MiniCluster with ``vdoctor run --kafka HOST:PORT ...``, or
submit it to a Flink cluster with the same flags, packed by ``vdoctor package``
(README, "Submitting to a cluster")::

    $FLINK_HOME/bin/flink run -d -pyfs dist/flink-job/vdoctor-job.zip -pym jobs.kafka_job \
        --connector-jar dist/flink-job/flink-sql-connector-kafka-5.0.0-2.2.jar --kafka HOST:PORT ...

Submitted that way its workers run on the cluster's own Python
(``python.executable``, ``python.pythonpath`` of the cluster's configuration).

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
import signal
import sys
from collections.abc import Mapping
from typing import Any

from jobs.job_settings import (
    KafkaJobSettings,
    add_diagnosis_arguments,
    add_flink_arguments,
    add_kafka_arguments,
    domain_settings,
    kafka_settings,
    warn_passwords_in_arguments,
)
from vdoctor.errors import ConfigError
from vdoctor.events import key_vin, raw_vin
from vdoctor.settings import Settings


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
    """The Kafka key of an output record: the VIN, when one can be read (a dead letter's raw input is
    anything a producer sent: whatever cannot give a key gives none, and the record still goes out)."""
    try:
        data = json.loads(payload)
        vin = raw_vin(data)
        if vin is None and kind != "D" and isinstance(data, dict) and isinstance(data.get("raw"), str):
            vin = raw_vin(json.loads(data["raw"]))  # (a producer's own spelling of the field too: VIN, Vin)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read
        return None
    return key_vin(vin)


def build_job(job: KafkaJobSettings, settings: Settings) -> Any:
    """Wire source -> pipeline -> sinks on a fresh environment; return the environment to execute."""
    from pyflink.common import Row, Types, WatermarkStrategy
    from pyflink.datastream.connectors.kafka import (
        KafkaOffsetResetStrategy,
        KafkaOffsetsInitializer,
        KafkaSource,
    )
    from pyflink.table import DataTypes, Schema, StreamTableEnvironment, TableDescriptor
    from pyflink.table.expressions import col

    from jobs import pipeline
    from jobs.flink_env import make_env
    from operators.parse import DEAD_LETTER, DIAGNOSIS

    env = make_env(job.flink)

    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(job.bootstrap)
        .set_topics(*job.input_topics())
        .set_group_id(job.group_id)
        .set_starting_offsets(KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.EARLIEST))
        .set_property("isolation.level", "read_committed")
    )
    _read_values_as_text(source)
    source = source.build()
    raw = env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka: " + ",".join(job.input_topics()))
    results = pipeline.build(raw, settings, withhold_passwords=job.flink.python_env == "cluster")
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


# Kafka's StringDeserializer: relocated in the SQL connector's jar (the one the job ships), as is in the plain one.
KAFKA_STRING_DESERIALIZERS = (
    "org.apache.flink.kafka.shaded.org.apache.kafka.common.serialization.StringDeserializer",
    "org.apache.kafka.common.serialization.StringDeserializer",
)


def _read_values_as_text(builder: Any) -> None:
    """Each record's value as UTF-8 text, and None for a record without one (a tombstone), which the
    parse stage makes a dead letter. PyFlink's ``set_value_only_deserializer(SimpleStringSchema())``
    fails the job on such a record (a NullPointerException in ``SimpleStringSchema``), and every
    restart reads it again; Kafka's own ``StringDeserializer`` reads a null value as null. PyFlink
    does not wrap ``KafkaRecordDeserializationSchema.valueOnly(Class)``, so it is set on the Java builder.
    """
    from pyflink.java_gateway import get_gateway
    from pyflink.util.java_utils import load_java_class

    text = None
    for name in KAFKA_STRING_DESERIALIZERS:
        try:
            text = load_java_class(name)
            break
        except Exception:  # noqa: BLE001 - py4j's error for a class this connector jar does not hold
            continue
    if text is None:
        raise ConfigError(f"the Kafka connector on the classpath has none of {', '.join(KAFKA_STRING_DESERIALIZERS)}")
    schemas = get_gateway().jvm.org.apache.flink.connector.kafka.source.reader.deserializer
    builder._j_builder.setDeserializer(schemas.KafkaRecordDeserializationSchema.valueOnly(text))


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(job: KafkaJobSettings, settings: Settings, detached: bool = False, local: bool = False) -> None:
    """Build and execute; blocks until the job ends (an unbounded job runs until cancelled).

    Submitted by ``flink run`` (``local=False``), the CLI decides about
    detaching (``-d``). On the local MiniCluster (``local=True``), Ctrl-C or
    SIGTERM cancels the job before returning (its last checkpoint is kept), so
    that no Flink JVM is left running the job without its driver.
    """
    env = build_job(job, settings)
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


def submitted_settings(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> KafkaJobSettings:
    """The job as ``flink run`` submits it: its workers run on the cluster's own Python (python.* of the
    cluster's configuration), and its code comes with it (``-pyfs``, README: "Submitting to a cluster")."""
    return kafka_settings(args, env, python_env="cluster")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kafka_job.py", description=__doc__)
    parser.add_argument("--kafka", required=True, metavar="HOST:PORT", help="Kafka bootstrap servers")
    parser.add_argument("--detached", action="store_true", help="return once the job is submitted")
    add_diagnosis_arguments(parser)
    add_flink_arguments(parser)
    add_kafka_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    warn_passwords_in_arguments(args)
    try:
        job = submitted_settings(args)
        settings = domain_settings(args)
    except ConfigError as e:
        print(f"vdoctor: {e}", file=sys.stderr)
        return 2
    run(job, settings, detached=args.detached)
    return 0


if __name__ == "__main__":
    sys.exit(main())
