"""Flags -> settings -> Flink configuration, for both jobs, and output keys: pure Python, no JVM, no broker."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import pytest

from jobs import job_settings as js
from jobs import kafka_job
from jobs.flink_env import flink_configuration
from jobs.kafka_replay import vin_key
from vdoctor.errors import ConfigError

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"


def _parser() -> argparse.ArgumentParser:
    """The flags both jobs take, as `vdoctor run` and `kafka_job.py` add them."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--kafka")
    parser.add_argument("--alerts")
    parser.add_argument("--out")
    parser.add_argument("--rate", type=float)
    js.add_diagnosis_arguments(parser)
    js.add_flink_arguments(parser)
    js.add_kafka_arguments(parser)
    return parser


def _kafka_args(tmp_path: Path, *argv: str) -> argparse.Namespace:
    jar = tmp_path / js.CONNECTOR_JAR_NAME
    jar.write_bytes(b"PK")
    return _parser().parse_args(["--kafka", "127.0.0.1:9092", "--connector-jar", str(jar), *argv])


def _replay_args(tmp_path: Path, *argv: str) -> argparse.Namespace:
    alerts = tmp_path / "a.jsonl"
    alerts.write_text("")
    return _parser().parse_args(["--alerts", str(alerts), "--out", str(tmp_path / "out"), *argv])


def _checkpoint(root: Path, job: str, n: int) -> Path:
    chk = root / job / f"chk-{n}"
    chk.mkdir(parents=True)
    (chk / "_metadata").write_bytes(b"x")
    return chk


def test_kafka_defaults_read_one_topic_and_checkpoint_every_10_s_on_rocksdb(tmp_path: Path) -> None:
    job = js.kafka_settings(_kafka_args(tmp_path), env={})
    assert job.input_topics() == ["vdoctor.alerts"]
    conf = flink_configuration(job.flink)
    assert conf["state.backend.type"] == "rocksdb"
    assert conf["execution.checkpointing.incremental"] == "true"
    assert conf["execution.checkpointing.interval"] == "10000ms"
    assert conf["execution.checkpointing.dir"] == (Path(".vdoctor") / "checkpoints").resolve().as_uri()
    assert conf["execution.checkpointing.externalized-checkpoint-retention"] == "RETAIN_ON_CANCELLATION"
    assert conf["python.execution-mode"] == "thread"
    assert conf["pipeline.jars"].endswith(js.CONNECTOR_JAR_NAME)
    # Counted over a window, not over the job's life: a job running for months is not ended by its tenth
    # broker restart, while a fault that persists still ends it within minutes.
    assert conf["restart-strategy.type"] == "failure-rate"
    assert conf["restart-strategy.failure-rate.max-failures-per-interval"] == "10"
    assert conf["restart-strategy.failure-rate.failure-rate-interval"] == "30min"
    assert conf["restart-strategy.failure-rate.delay"] == "10s"
    assert "execution.state-recovery.path" not in conf


def test_replay_defaults_have_no_checkpoints_no_restarts_and_a_contained_tmp_dir(tmp_path: Path) -> None:
    replay = js.replay_settings(_replay_args(tmp_path))
    conf = flink_configuration(replay.flink)
    assert conf["state.backend.type"] == "hashmap"
    assert conf["restart-strategy.type"] == "none"
    assert conf["io.tmp.dirs"] == str((tmp_path / "out" / ".flink-tmp").resolve())
    assert conf["python.execution-mode"] == "thread"
    assert not {k for k in conf if k.startswith("execution.checkpointing.")}
    assert "pipeline.jars" not in conf


def test_one_checkpoint_flag_in_milliseconds_for_both_jobs(tmp_path: Path) -> None:
    kafka = js.kafka_settings(_kafka_args(tmp_path, "--checkpoint-interval-ms", "2500"), env={})
    replay = js.replay_settings(
        _replay_args(tmp_path, "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-interval-ms", "300")
    )
    assert flink_configuration(kafka.flink)["execution.checkpointing.interval"] == "2500ms"
    assert flink_configuration(replay.flink)["execution.checkpointing.interval"] == "300ms"
    assert flink_configuration(replay.flink)["execution.checkpointing.dir"] == (tmp_path / "ck").resolve().as_uri()


def test_old_seconds_flag_still_works_with_a_warning_but_not_beside_the_new_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        job = js.kafka_settings(_kafka_args(tmp_path, "--checkpoint-interval", "2.5"), env={})
    assert job.flink.checkpoint_interval_ms == 2500
    assert "--checkpoint-interval-ms 2500" in caplog.text
    with pytest.raises(ConfigError, match="give --checkpoint-interval-ms only"):
        js.kafka_settings(
            _kafka_args(tmp_path, "--checkpoint-interval", "2", "--checkpoint-interval-ms", "2000"), env={}
        )


def test_restore_latest_picks_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    _checkpoint(ck, "job1", 3)
    newest = _checkpoint(ck, "job1", 4)
    (ck / "job1" / "chk-5").mkdir()  # being written when the job died: no _metadata
    replay = js.replay_settings(_replay_args(tmp_path, "--checkpoint-dir", str(ck), "--restore", "latest"))
    conf = flink_configuration(replay.flink)
    assert conf["execution.state-recovery.path"] == newest.resolve().as_uri()
    # A restored replay gets a new collect sink, whose old state is dropped on purpose.
    assert conf["execution.state-recovery.ignore-unclaimed-state"] == "true"


def test_a_local_kafka_run_resumes_from_its_newest_checkpoint_unless_told_otherwise(tmp_path: Path) -> None:
    ck = tmp_path / "ck"

    def resumed(*argv: str) -> tuple[Path | None, str | None]:
        args = _kafka_args(tmp_path, "--checkpoint-dir", str(ck), *argv)
        found = js.resume_by_default(args, js.kafka_job_identity(js.kafka_settings(args, env={})))
        return found, js.kafka_settings(args, env={}).flink.restore_from

    assert resumed() == (None, None)  # a first run starts afresh, and marks the folder as its own
    _checkpoint(ck, "job1", 3)
    newest = _checkpoint(ck, "job1", 4)
    (ck / "job1" / "chk-5").mkdir()  # being written when the job died: no _metadata
    assert resumed() == (newest, newest.resolve().as_uri())
    # Told otherwise: afresh, or from what is named.
    assert resumed("--restore", "none") == (None, None)
    older = ck / "job1" / "chk-3"
    assert resumed("--restore", str(older)) == (None, older.resolve().as_uri())
    # Another job's checkpoints in the same folder (another consumer group): never taken.
    assert resumed("--group-id", "other-fleet") == (None, None)
    # ... and the folder is that job's now: the first one started again does not take them either.
    assert resumed() == (None, None)


def test_checkpoints_without_a_job_marker_are_not_resumed_by_default(tmp_path: Path) -> None:
    """Checkpoints of a release before the marker: whose they are is not known, so only --restore takes them."""
    ck = tmp_path / "ck"
    _checkpoint(ck, "job1", 3)
    args = _kafka_args(tmp_path, "--checkpoint-dir", str(ck))
    assert js.resume_by_default(args, js.kafka_job_identity(js.kafka_settings(args, env={}))) is None
    assert (ck / js.JOB_MARKER).is_file()


def test_kafka_job_resumes_from_a_savepoint_and_keeps_unclaimed_state_an_error(tmp_path: Path) -> None:
    savepoint = tmp_path / "sp"
    savepoint.mkdir()
    (savepoint / "_metadata").write_bytes(b"x")
    for flag in ("--from-savepoint", "--restore"):
        job = js.kafka_settings(_kafka_args(tmp_path, flag, str(savepoint)), env={})
        conf = flink_configuration(job.flink)
        assert conf["execution.state-recovery.path"] == savepoint.resolve().as_uri()
        assert "execution.state-recovery.ignore-unclaimed-state" not in conf
    # `flink stop` prints savepoint paths as file:/... URIs; remote ones are passed on unchecked.
    job = js.kafka_settings(_kafka_args(tmp_path, "--restore", f"file:{savepoint}"), env={})
    assert job.flink.restore_from == f"file:{savepoint}"
    job = js.kafka_settings(_kafka_args(tmp_path, "--restore", "s3://bucket/sp-1"), env={})
    assert job.flink.restore_from == "s3://bucket/sp-1"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # A file replay has no checkpoint folder unless given one: the message said none was found "under
        # --checkpoint-dir", a flag the user had not given.
        (("--restore", "latest"), "^--restore latest looks under --checkpoint-dir, and a file replay has none"),
        (("--restore", "latest", "--checkpoint-dir", "empty-ck"), "no complete checkpoint under --checkpoint-dir"),
        (("--restore", "nowhere"), "no _metadata"),
        (("--rate", "0"), "^--rate must be a finite number of lines per second above 0, got 0$"),
        # inf was taken, and paced nothing while the run said it replayed at a rate.
        (("--rate", "inf"), "^--rate must be a finite number of lines per second above 0, got inf$"),
        (("--flink-conf", "rest.port"), "--flink-conf takes KEY=VALUE"),
        (("--checkpoint-interval-ms", "0"), "^invalid Flink settings: --checkpoint-interval-ms: Input should"),
        (("--parallelism", "0"), "^invalid Flink settings: --parallelism: Input should be greater"),
        (("--rate", "nan"), "^--rate must be a finite number of lines per second above 0, got nan$"),
    ],
)
def test_bad_replay_flags_are_refused_with_the_flag_named(tmp_path: Path, argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        js.replay_settings(_replay_args(tmp_path, *argv))


def test_flink_conf_is_applied_last(tmp_path: Path) -> None:
    replay = js.replay_settings(
        _replay_args(tmp_path, "--flink-conf", "rest.port=8081", "--flink-conf", "state.backend.type = rocksdb")
    )
    conf = flink_configuration(replay.flink)
    assert conf["rest.port"] == "8081" and conf["state.backend.type"] == "rocksdb"


def test_domain_settings_pin_relative_sqlite_paths_and_take_overrides(tmp_path: Path) -> None:
    args = _replay_args(tmp_path, "--memory", "sqlite:///rel/memory.db", "--concurrency", "3")
    settings = js.domain_settings(args, env={"VDOCTOR_KNOWLEDGE_URL": "memory://"})
    assert settings.memory.url == "sqlite:///" + str(Path("rel/memory.db").resolve())
    assert settings.memory.knowledge_url == "memory://" and settings.runtime.concurrency == 3
    assert settings.runtime.extra_runs is None and settings.runtime.runs_in_flight() == 3
    extra = js.domain_settings(_replay_args(tmp_path, "--concurrency", "8", "--extra-runs", "5"), env={})
    assert extra.runtime.runs_in_flight() == 13
    off = js.domain_settings(args, env={}, memory_enabled=False)
    assert off.memory.enabled is False and off.memory.url == settings.memory.url
    # The store's option stays after the pinned path.
    full = js.domain_settings(_replay_args(tmp_path, "--memory", "sqlite:///rel/memory.db?synchronous=full"), env={})
    assert full.memory.url == "sqlite:///" + str(Path("rel/memory.db").resolve()) + "?synchronous=full"


def test_the_zone_of_naive_event_times_is_a_flag_of_both_jobs(tmp_path: Path) -> None:
    replay = js.domain_settings(_replay_args(tmp_path, "--naive-ts-zone", "Asia/Shanghai"), env={})
    kafka = js.domain_settings(_kafka_args(tmp_path), env={"VDOCTOR_NAIVE_TS_ZONE": "+08:00"})
    assert (replay.runtime.naive_ts_zone, kafka.runtime.naive_ts_zone) == ("Asia/Shanghai", "+08:00")


def test_how_numbers_use_a_comma_is_a_flag_of_both_jobs(tmp_path: Path) -> None:
    replay = js.domain_settings(_replay_args(tmp_path, "--number-comma", "Thousands"), env={})
    kafka = js.domain_settings(_kafka_args(tmp_path), env={"VDOCTOR_NUMBER_COMMA": "decimal"})
    assert (replay.runtime.number_comma, kafka.runtime.number_comma) == ("thousands", "decimal")
    assert js.domain_settings(_kafka_args(tmp_path), env={}).runtime.number_comma is None
    with pytest.raises(SystemExit):
        _replay_args(tmp_path, "--number-comma", "european")


def test_how_codes_are_sent_as_numbers_is_a_flag_of_both_jobs(tmp_path: Path) -> None:
    replay = js.domain_settings(_replay_args(tmp_path, "--dtc-numbers", "OBD"), env={})
    kafka = js.domain_settings(_kafka_args(tmp_path), env={"VDOCTOR_DTC_NUMBERS": "obd"})
    assert (replay.runtime.dtc_numbers, kafka.runtime.dtc_numbers) == ("obd", "obd")
    assert js.domain_settings(_kafka_args(tmp_path), env={}).runtime.dtc_numbers == "uds"
    with pytest.raises(SystemExit):
        _replay_args(tmp_path, "--dtc-numbers", "hex")


@pytest.mark.parametrize(
    ("url", "pinned"),
    [
        ("mem0:///rel/mem0", "mem0:///" + str(Path("rel/mem0").resolve())),
        ("mem0:////abs/mem0", "mem0:////abs/mem0"),  # absolute already
        ("mysql://u:p@host:3306/db", "mysql://u:p@host:3306/db"),  # a server: nothing to pin
    ],
)
def test_domain_settings_pin_relative_mem0_folders_too(tmp_path: Path, url: str, pinned: str) -> None:
    # Flink workers may run in another directory: a relative folder would be a different store there.
    settings = js.domain_settings(_replay_args(tmp_path, "--memory", url), env={})
    assert settings.memory.url == pinned


def test_several_input_topics_are_read_once_each(tmp_path: Path) -> None:
    job = js.kafka_settings(
        _kafka_args(tmp_path, "--alerts-topic", "a", "--rechecks-topic", "r", "--lifecycle-topic", "a"), env={}
    )
    assert job.input_topics() == ["a", "r"]


def test_exactly_once_sinks_get_their_own_transactional_ids_within_the_broker_timeout(tmp_path: Path) -> None:
    job = js.kafka_settings(
        _kafka_args(tmp_path, "--delivery", "exactly-once", "--transactional-id-prefix", "fleet1"), env={}
    )
    diag = kafka_job._sink_options(job, "d", "diagnoses")
    dead = kafka_job._sink_options(job, "x", "dead_letters")
    assert diag["sink.delivery-guarantee"] == "exactly-once"
    assert diag["sink.transactional-id-prefix"] == "fleet1-diagnoses"
    assert dead["sink.transactional-id-prefix"] == "fleet1-dead_letters"
    assert diag["properties.transaction.timeout.ms"] == "900000"  # the broker's default maximum, 15 min
    assert diag["key.fields"] == "vin" and diag["value.fields-include"] == "EXCEPT_KEY"


def test_at_least_once_sinks_have_no_transactions(tmp_path: Path) -> None:
    job = js.kafka_settings(_kafka_args(tmp_path), env={})
    options = kafka_job._sink_options(job, "d", "diagnoses")
    assert options["sink.delivery-guarantee"] == "at-least-once"
    assert "sink.transactional-id-prefix" not in options


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # Named by their flags, not by the settings' field names (alerts_topic, transaction_timeout_s).
        (("--diagnoses-topic", "a topic"), "^invalid Kafka job settings: --diagnoses-topic: topic names use letters"),
        (("--alerts-topic", "a topic"), "^invalid Kafka job settings: --alerts-topic: topic names use letters"),
        (("--checkpoint-interval-ms", "0"), "^invalid Flink settings: --checkpoint-interval-ms: Input should be"),
        (("--transaction-timeout", "1"), "^invalid Kafka job settings: --transaction-timeout: Input should be"),
        (("--restart-attempts", "-1"), "^invalid Flink settings: --restart-attempts: Input should be"),
    ],
)
def test_bad_kafka_values_are_refused_with_the_setting_named(
    tmp_path: Path, argv: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        js.kafka_settings(_kafka_args(tmp_path, *argv), env={})


def test_every_field_named_by_its_flag_is_a_field_of_the_job_settings() -> None:
    models = (js.FlinkSettings, js.ReplaySettings, js.KafkaJobSettings, js.ServeSettings)
    # Unique (but the replay's and the Kafka job's own Flink settings), so that a field's name finds its flag.
    fields = [name for model in models for name in model.model_fields if name != "flink"]
    assert len(fields) == len(set(fields))
    assert set(js._FIELD_FLAGS) <= set(fields)


def test_bad_bootstrap_and_missing_jar(tmp_path: Path) -> None:
    args = _kafka_args(tmp_path)
    args.kafka = "localhost"
    with pytest.raises(ConfigError, match="^invalid Kafka job settings: --kafka: bootstrap servers must be HOST:PORT"):
        js.kafka_settings(args, env={})
    args = _kafka_args(tmp_path)
    args.connector_jar = None
    with pytest.raises(ConfigError, match="scripts/install/flink-kafka.sh"):
        js.kafka_settings(args, env={js.CONNECTOR_JAR_ENV: str(tmp_path / "nope.jar")})


def test_rate_with_kafka_is_refused_not_ignored(tmp_path: Path) -> None:
    # The Kafka job reads its topics as events arrive: --rate 5 was accepted and did nothing.
    with pytest.raises(ConfigError, match=r"^--rate paces a file replay; .* vdoctor replay --rate"):
        js.kafka_settings(_kafka_args(tmp_path, "--rate", "5"), env={})


def test_replay_checks_its_bootstrap_servers_as_run_kafka_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jobs import cli

    alerts = tmp_path / "a.jsonl"
    alerts.write_text('{"vin": "LSVAU2180N2183294"}\n', encoding="utf-8")
    # Not checked before: the producer spent its 30 s connection timeout on it.
    for bad in ("notahostport", "127.0.0.1:9092,broker", ""):
        assert cli.main(["replay", "--alerts", str(alerts), "--bootstrap", bad, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err == f"vdoctor: --bootstrap: bootstrap servers must be HOST:PORT[,HOST:PORT...], got {bad!r}\n"
    assert js.bootstrap_servers(" b1:9092, b2:9093") == "b1:9092,b2:9093"


def test_kafka_job_entry_point_takes_the_same_flags(tmp_path: Path) -> None:
    """`flink run -py jobs/kafka_job.py` and `vdoctor run --kafka` parse one set of flags."""
    jar = tmp_path / js.CONNECTOR_JAR_NAME
    jar.write_bytes(b"PK")
    args = kafka_job._parse_args(
        [
            "--kafka",
            "k:9092",
            "--connector-jar",
            str(jar),
            "--model",
            "openai",
            "--checkpoint-interval-ms",
            "700",
            "--flink-conf",
            "rest.port=0",
            "--concurrency",
            "8",
        ]  # fmt: skip
    )
    job = js.kafka_settings(args, env={})
    assert job.flink.checkpoint_interval_ms == 700 and job.flink.extra_conf == {"rest.port": "0"}
    settings = js.domain_settings(args, env={})
    assert settings.model.chat == "openai" and settings.runtime.concurrency == 8


def test_output_records_are_keyed_by_vin_when_one_can_be_read() -> None:
    assert kafka_job.record_key("D", json.dumps({"vin": VIN, "phase": "CONCLUDED"})) == VIN
    process_letter = {"raw": json.dumps({"type": "recheck", "vin": VIN}), "error": "x", "stage": "process"}
    assert kafka_job.record_key("X", json.dumps(process_letter)) == VIN
    parse_letter = {"raw": "{not json", "error": "not valid JSON", "stage": "parse"}
    assert kafka_job.record_key("X", json.dumps(parse_letter)) is None
    # A producer that spells the field its own way: its dead letters are keyed by its VIN as well.
    spelled = {"raw": json.dumps({"Type": "alert", "VIN": VIN}), "error": "x", "stage": "validate"}
    assert kafka_job.record_key("X", json.dumps(spelled)) == VIN


def test_replay_keys_lines_by_vin() -> None:
    assert vin_key(json.dumps({"type": "alert", "vin": VIN})) == VIN.encode()
    assert vin_key("{not json") is None
    assert vin_key(json.dumps([1, 2])) is None
    assert vin_key(json.dumps({"vin": 17})) is None
    # The key the job gives the vehicle's outputs; nothing a producer sends makes it fail.
    assert vin_key(json.dumps({"vin": VIN.lower()})) == VIN.encode()
    assert vin_key(json.dumps({"eventId": "e-1", "Vin": VIN})) == VIN.encode()
    assert vin_key("[" * 100_000) is None
    assert vin_key('{"vin": "\\ud800"}') is None


def test_an_output_key_is_never_an_error_whatever_the_dead_letter_holds() -> None:
    # A dead letter's raw input is whatever was sent: nested past the parser's depth, or a lone surrogate.
    deep = {"raw": "[" * 100_000, "error": "not valid JSON", "stage": "parse"}
    assert kafka_job.record_key("X", json.dumps(deep)) is None
    assert kafka_job.record_key("X", json.dumps({"raw": '{"vin": "\\ud800"}', "stage": "validate"})) is None
    assert kafka_job.record_key("X", json.dumps({"raw": json.dumps({"vin": VIN.lower()}), "stage": "validate"})) == VIN
