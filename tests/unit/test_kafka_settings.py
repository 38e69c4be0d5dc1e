"""Kafka job settings, Flink configuration and output keys: pure Python, no JVM, no broker."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from jobs import kafka_job
from jobs.kafka_replay import vin_key
from vdoctor.errors import ConfigError

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"


def _args(tmp_path: Path, *argv: str) -> argparse.Namespace:
    jar = tmp_path / kafka_job.CONNECTOR_JAR_NAME
    jar.write_bytes(b"PK")
    parser = argparse.ArgumentParser()
    parser.add_argument("--kafka")
    parser.add_argument("--parallelism", type=int, default=1)
    kafka_job.add_arguments(parser)
    return parser.parse_args(["--kafka", "127.0.0.1:9092", "--connector-jar", str(jar), *argv])


def test_defaults_read_one_topic_and_checkpoint_every_10_s(tmp_path: Path) -> None:
    job = kafka_job.settings_from_args(_args(tmp_path), env={})
    assert job.input_topics() == ["vdoctor.alerts"]
    conf = kafka_job.flink_configuration(job)
    assert conf["state.backend.type"] == "rocksdb"
    assert conf["execution.checkpointing.interval"] == "10000ms"
    assert conf["execution.checkpointing.dir"].startswith("file:///")
    assert conf["python.execution-mode"] == "thread"
    assert conf["pipeline.jars"].endswith(kafka_job.CONNECTOR_JAR_NAME)
    assert "execution.state-recovery.path" not in conf


def test_several_input_topics_are_read_once_each(tmp_path: Path) -> None:
    job = kafka_job.settings_from_args(
        _args(tmp_path, "--alerts-topic", "a", "--rechecks-topic", "r", "--lifecycle-topic", "a"), env={}
    )
    assert job.input_topics() == ["a", "r"]


def test_exactly_once_sinks_get_their_own_transactional_ids_within_the_broker_timeout(tmp_path: Path) -> None:
    job = kafka_job.settings_from_args(
        _args(tmp_path, "--delivery", "exactly-once", "--transactional-id-prefix", "fleet1",
              "--checkpoint-interval", "2.5", "--from-savepoint", str(tmp_path / "sp")),
        env={},
    )
    diag = kafka_job._sink_options(job, "d", "diagnoses")
    dead = kafka_job._sink_options(job, "x", "dead_letters")
    assert diag["sink.delivery-guarantee"] == "exactly-once"
    assert diag["sink.transactional-id-prefix"] == "fleet1-diagnoses"
    assert dead["sink.transactional-id-prefix"] == "fleet1-dead_letters"
    assert diag["properties.transaction.timeout.ms"] == "900000"  # the broker's default maximum, 15 min
    assert diag["key.fields"] == "vin" and diag["value.fields-include"] == "EXCEPT_KEY"
    conf = kafka_job.flink_configuration(job)
    assert conf["execution.checkpointing.interval"] == "2500ms"
    assert conf["execution.state-recovery.path"] == (tmp_path / "sp").resolve().as_uri()


def test_at_least_once_sinks_have_no_transactions(tmp_path: Path) -> None:
    job = kafka_job.settings_from_args(_args(tmp_path), env={})
    options = kafka_job._sink_options(job, "d", "diagnoses")
    assert options["sink.delivery-guarantee"] == "at-least-once"
    assert "sink.transactional-id-prefix" not in options


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--diagnoses-topic", "a topic"), "topic names use letters"),
        (("--checkpoint-interval", "0"), "checkpoint_interval_s"),
        (("--transaction-timeout", "1"), "transaction_timeout_s"),
    ],
)
def test_bad_values_are_refused_with_the_setting_named(tmp_path: Path, argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        kafka_job.settings_from_args(_args(tmp_path, *argv), env={})


def test_bad_bootstrap_and_missing_jar(tmp_path: Path) -> None:
    args = _args(tmp_path)
    args.kafka = "localhost"
    with pytest.raises(ConfigError, match="HOST:PORT"):
        kafka_job.settings_from_args(args, env={})
    args = _args(tmp_path)
    args.connector_jar = None
    with pytest.raises(ConfigError, match="scripts/install/flink-kafka.sh"):
        kafka_job.settings_from_args(args, env={kafka_job.CONNECTOR_JAR_ENV: str(tmp_path / "nope.jar")})


def test_output_records_are_keyed_by_vin_when_one_can_be_read() -> None:
    assert kafka_job.record_key("D", json.dumps({"vin": VIN, "phase": "CONCLUDED"})) == VIN
    process_letter = {"raw": json.dumps({"type": "recheck", "vin": VIN}), "error": "x", "stage": "process"}
    assert kafka_job.record_key("X", json.dumps(process_letter)) == VIN
    parse_letter = {"raw": "{not json", "error": "not valid JSON", "stage": "parse"}
    assert kafka_job.record_key("X", json.dumps(parse_letter)) is None


def test_replay_keys_lines_by_vin() -> None:
    assert vin_key(json.dumps({"type": "alert", "vin": VIN})) == VIN.encode()
    assert vin_key("{not json") is None
    assert vin_key(json.dumps([1, 2])) is None
    assert vin_key(json.dumps({"vin": 17})) is None
