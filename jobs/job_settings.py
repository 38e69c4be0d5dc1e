"""Command-line flags -> settings, for both jobs: the file replay and the Kafka job.

Both jobs take the same flags for what they share (long-term memory, model,
concurrency, parallelism, checkpoints, any Flink option) and are described by
frozen models built here, at the edge:

- the diagnosis settings (``vdoctor.settings.Settings``), built only by
  ``domain_settings`` through ``load_settings(env, **flags)``; jobs/pipeline.py
  ships them to the workers;
- ``FlinkSettings``: how a job runs on Flink (jobs/flink_env.py turns it into
  the Flink configuration, the same way for both jobs);
- ``ReplaySettings`` and ``KafkaJobSettings``: where each job reads and writes;
- ``ServeSettings``: where the memory inspector (``vdoctor serve``) listens, and its token.

No pyflink import: flags are checked before a JVM starts. A bad value raises
``ConfigError`` naming it.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import math
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from vdoctor.errors import ConfigError
from vdoctor.events import DTC_NUMBER_FORMS, NUMBER_COMMAS, describe_validation_error
from vdoctor.settings import DEFAULT_MEMORY_URL, ENV_VARS, Settings, load_settings, with_overrides
from vdoctor.url_credentials import split_url

log = logging.getLogger(__name__)

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
DEFAULT_CHECKPOINT_INTERVAL_MS = 10_000
# The Kafka job always checkpoints; a file replay only when given a folder.
DEFAULT_KAFKA_CHECKPOINT_DIR = Path(".vdoctor") / "checkpoints"
# Kafka brokers refuse producer transactions longer than transaction.max.timeout.ms
# (15 min by default); the connector's own default (1 h) would be refused.
DEFAULT_TRANSACTION_TIMEOUT_S = 900
# A streaming job restarts after a failure (a broker that went away, a bad
# deploy); at most this many times within a window (flink_env.RESTART_WINDOW_MIN),
# so that a permanent fault ends the job instead of looping.
# A bounded replay that fails must fail, not restart forever (NOTES.md).
DEFAULT_KAFKA_RESTART_ATTEMPTS = 10
DEFAULT_REPLAY_RESTART_ATTEMPTS = 0

# The memory inspector's token, when not given as --token (which other users can see in `ps`).
SERVE_TOKEN_ENV = "VDOCTOR_SERVE_TOKEN"
# A token shorter than this is refused: it stands between the fleet's memory and anyone on the network.
MIN_TOKEN_CHARS = 16
# It travels in a header, a cookie and (once) a query string: URL- and cookie-safe characters only.
_TOKEN_RE = re.compile(r"^[A-Za-z0-9._~+/=-]+$")
DEFAULT_SERVE_HOST = "127.0.0.1"
DEFAULT_SERVE_PORT = 8080

# What every --memory flag's help says: a program argument is in `ps`, and Flink's client logs a
# submitted job's arguments, where the environment variable is in neither.
MEMORY_ENV_NOTE = (
    f"a URL with a password is better given as {ENV_VARS['memory_url']}, which neither `ps` nor Flink's client "
    "log shows"
)
MEMORY_FLAG_HELP = f"long-term memory URL (default {DEFAULT_MEMORY_URL}); {MEMORY_ENV_NOTE}"

# Kafka's legal topic characters; the broker caps names at 249.
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_HOST_PORT_RE = re.compile(r"^[A-Za-z0-9.\-]+:\d{1,5}$")

# Flag -> flat name of vdoctor.settings (FIELDS), for the flags the diagnosis settings take.
_DOMAIN_FLAGS = {
    "memory": "memory_url",
    "knowledge": "knowledge_url",
    "model": "model",
    "summarizer": "summarizer",
    "concurrency": "concurrency",
    "extra_runs": "extra_runs",
    "embedder": "embedder",
    "deterministic": "deterministic",
    "naive_ts_zone": "naive_ts_zone",
    "number_comma": "number_comma",
    "dtc_numbers": "dtc_numbers",
    "signal_names": "signal_names",
}


# Field of the job settings below -> the flag that gives it, for the message of an invalid value (the field
# names are unique across the four models, but their own Flink settings). A field that no flag gives
# (state_backend, job_name, ...) is set here, in code, and keeps its name.
_FIELD_FLAGS = {
    "parallelism": "--parallelism",
    "checkpoint_dir": "--checkpoint-dir",
    "checkpoint_interval_ms": "--checkpoint-interval-ms",
    "restore_from": "--restore",
    "restart_attempts": "--restart-attempts",
    "jars": "--connector-jar",
    "metrics_port": "--metrics-port",
    "extra_conf": "--flink-conf",
    "alerts": "--alerts",
    "out": "--out",
    "rate": "--rate",
    "bootstrap": "--kafka",
    "alerts_topic": "--alerts-topic",
    "rechecks_topic": "--rechecks-topic",
    "lifecycle_topic": "--lifecycle-topic",
    "diagnoses_topic": "--diagnoses-topic",
    "dead_letters_topic": "--dead-letters-topic",
    "group_id": "--group-id",
    "delivery": "--delivery",
    "transactional_id_prefix": "--transactional-id-prefix",
    "transaction_timeout_s": "--transaction-timeout",
    "host": "--host",
    "port": "--port",
    "token": f"--token ({SERVE_TOKEN_ENV})",
    "diagnoses": "--diagnoses",
}


def _invalid(what: str, error: ValidationError) -> ConfigError:
    """A ``ConfigError`` for invalid job settings, each value named by the flag that gives it."""

    def named(loc: tuple[int | str, ...]) -> str | None:
        parts = [str(p) for p in loc]
        if parts[:1] == ["flink"]:  # the Kafka job's own Flink settings
            parts = parts[1:]
        flag = _FIELD_FLAGS.get(parts[0]) if parts else None
        return " ".join([flag, *parts[1:]]) if flag else None

    return ConfigError(f"invalid {what}: {describe_validation_error(error, named)}")


class FlinkSettings(BaseModel):
    """How a job runs on Flink: parallelism, state and checkpoints, restarts, jars, extra options."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parallelism: int = Field(default=1, ge=1)
    state_backend: Literal["hashmap", "rocksdb"] = "hashmap"
    # A folder URI; None: no checkpoints.
    checkpoint_dir: str | None = None
    checkpoint_interval_ms: int = Field(default=DEFAULT_CHECKPOINT_INTERVAL_MS, gt=0)
    # Keep the last checkpoint when the job is cancelled, so that it can be resumed.
    retain_checkpoints_on_cancel: bool = False
    # A checkpoint or savepoint URI to start from.
    restore_from: str | None = None
    # A restored file replay gets a new collect sink: the old one's state is dropped (jobs/replay.py).
    allow_non_restored_state: bool = False
    restart_attempts: int = Field(default=DEFAULT_REPLAY_RESTART_ATTEMPTS, ge=0)
    # Absolute paths of jars the job needs on its classpath (pipeline.jars).
    jars: tuple[str, ...] = ()
    # Folder for Flink's temporary files (io.tmp.dirs); None: Flink's default.
    tmp_dir: str | None = None
    # Whose Python runs the workers: this process's interpreter and paths (the local MiniCluster, or a
    # cluster sharing this machine's environment), or the cluster's own python.* configuration (a job
    # submitted with `flink run` to a cluster that has nothing of ours: the code comes with -pyfs).
    python_env: Literal["this-process", "cluster"] = "this-process"
    # Serve the job's metrics for Prometheus on this port (local runs; a cluster configures its reporter).
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    # Any other Flink option, applied last (--flink-conf KEY=VALUE).
    extra_conf: dict[str, str] = Field(default_factory=dict)


class ReplaySettings(BaseModel):
    """A bounded replay of a JSONL file on the local MiniCluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    alerts: Path
    out: Path
    # Lines per second (a file that arrives like a stream); None: as fast as the job takes them.
    rate: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    flink: FlinkSettings


class KafkaJobSettings(BaseModel):
    """Where the Kafka job reads and writes, and how it runs on Flink."""

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
    job_name: str = "vdoctor-kafka"
    flink: FlinkSettings

    @field_validator("bootstrap")
    @classmethod
    def _check_bootstrap(cls, v: str) -> str:
        return bootstrap_servers(v)

    @field_validator("alerts_topic", "rechecks_topic", "lifecycle_topic", "diagnoses_topic", "dead_letters_topic")
    @classmethod
    def _check_topic(cls, v: str | None) -> str | None:
        if v is not None and (problem := topic_problem(v)):
            raise ValueError(problem)
        return v

    def input_topics(self) -> list[str]:
        """Alerts, rechecks and lifecycle topics, each once (they may all be one topic)."""
        topics = [self.alerts_topic, self.rechecks_topic, self.lifecycle_topic]
        return list(dict.fromkeys(t for t in topics if t))


def topic_problem(name: str) -> str | None:
    """Why Kafka would refuse ``name`` as a topic, or None when it is a legal name."""
    if not _TOPIC_RE.match(name) or name in (".", ".."):
        return f"topic names use letters, digits, '.', '_' and '-' (at most 249, not '.' or '..'), got {name!r}"
    return None


def check_rate(rate: float | None, unit: str) -> float | None:
    """``--rate``: None (no pacing) or a finite number of ``unit`` per second above zero.

    An infinite rate would pace nothing while saying it does, and a NaN would pace every line at once.
    """
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise ConfigError(f"--rate must be a finite number of {unit} per second above 0, got {rate:g}")
    return rate


def bootstrap_servers(given: str) -> str:
    """Kafka bootstrap servers (``run --kafka``, ``replay --bootstrap``), checked as HOST:PORT[,HOST:PORT...]
    before any connection is tried (a broker client would spend its whole timeout on a bad one); a ValueError
    says what is expected."""
    hosts = [h.strip() for h in given.split(",")]
    if not all(_HOST_PORT_RE.match(h) for h in hosts):
        raise ValueError(f"bootstrap servers must be HOST:PORT[,HOST:PORT...], got {given!r}")
    return ",".join(hosts)


class ServeSettings(BaseModel):
    """The memory inspector: where it listens, its token, and the job output it shows."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = DEFAULT_SERVE_HOST
    port: int = Field(default=DEFAULT_SERVE_PORT, ge=1, le=65535)
    # Required on any address but loopback; when set, every request must carry it.
    token: SecretStr | None = None
    # The job's output folder or its diagnoses.jsonl (dead_letters.jsonl beside it).
    diagnoses: Path | None = None

    @property
    def local(self) -> bool:
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    """True for addresses only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


# -- flags ------------------------------------------------------------------------


def add_diagnosis_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the diagnosis settings (both jobs)."""
    parser.add_argument("--memory", help=MEMORY_FLAG_HELP)
    parser.add_argument("--knowledge", help="knowledge URL (default sqlite:///.vdoctor/knowledge.db)")
    parser.add_argument(
        "--model",
        choices=["offline", "openai"],
        help="chat model (default offline); openai uses OPENAI_BASE_URL, OPENAI_API_KEY, VDOCTOR_CHAT_MODEL",
    )
    parser.add_argument(
        "--summarizer",
        choices=["offline", "openai"],
        help="who writes summaries (default offline); openai uses VDOCTOR_SUMMARY_MODEL at OPENAI_BASE_URL",
    )
    parser.add_argument("--concurrency", type=int, help="model calls in flight per subtask (default 64)")
    parser.add_argument(
        "--extra-runs",
        type=int,
        help="vehicles diagnosed at once per subtask beyond --concurrency, doing their memory work while the "
        "others hold every model slot (default: a quarter of --concurrency)",
    )
    parser.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        help="order the runs in flight so that results do not depend on --concurrency (parallelism 1; "
        "README: Deterministic replays)",
    )
    parser.add_argument(
        "--naive-ts-zone",
        metavar="ZONE",
        help="the zone of event times written without one, e.g. Asia/Shanghai or +08:00 (default: such an "
        "event is a dead letter)",
    )
    parser.add_argument(
        "--number-comma",
        choices=NUMBER_COMMAS,
        type=str.lower,
        help="how the fleet's numbers use a comma where a reading could be read either way: decimal (12,345 is "
        "12.345, and 1.234.567 is 1234567) or thousands (12345) (default: such a reading is set aside, its dead letter "
        "naming both)",
    )
    parser.add_argument(
        "--dtc-numbers",
        choices=DTC_NUMBER_FORMS,
        type=str.lower,
        help="how the fleet sends a trouble code as a number: uds, three bytes as a UDS gateway reports them "
        "(687899 is P0A7F), or obd, two bytes as an OBD dongle reports Mode 03's (768 is P0300) (default: uds)",
    )
    parser.add_argument(
        "--signal-names",
        metavar="FILE",
        help="the fleet's signal map: a JSON object or CSV (columns sent,name) of the signal names it sends -> "
        "the names to read them as, e.g. 电池温度 -> pack_temp_c (README: Signal maps)",
    )


def add_flink_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of how a job runs on Flink (both jobs)."""
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument(
        "--checkpoint-dir",
        help="folder or URI for checkpoints of the job's state (a file replay checkpoints only when given one; "
        f"the Kafka job defaults to {DEFAULT_KAFKA_CHECKPOINT_DIR})",
    )
    parser.add_argument(
        "--checkpoint-interval-ms",
        type=int,
        metavar="MS",
        help=f"milliseconds between checkpoints (default {DEFAULT_CHECKPOINT_INTERVAL_MS})",
    )
    # Deprecated: the Kafka job's old flag, in seconds. Kept so that existing submit scripts run.
    parser.add_argument("--checkpoint-interval", type=float, metavar="SECONDS", help=argparse.SUPPRESS)
    parser.add_argument(
        "--restore",
        metavar="latest|none|PATH",
        help="start from a checkpoint (chk-N folder) or savepoint; 'latest': the newest complete one under "
        "--checkpoint-dir; 'none': afresh. `vdoctor run --kafka` resumes from 'latest' when there is one",
    )
    parser.add_argument(
        "--restart-attempts",
        type=int,
        help=f"restarts after a failure, at most N within any 30 minutes, 10 s apart (default "
        f"{DEFAULT_KAFKA_RESTART_ATTEMPTS} for --kafka, {DEFAULT_REPLAY_RESTART_ATTEMPTS} for a file replay)",
    )
    parser.add_argument(
        "--flink-conf",
        action="append",
        metavar="KEY=VALUE",
        help="any Flink option, e.g. rest.port=8081 to watch the job's metrics (repeatable)",
    )


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the Kafka job's topics and delivery (``--kafka`` itself is the caller's)."""
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
    g.add_argument("--from-savepoint", dest="restore", metavar="PATH", help="same as --restore PATH")
    g.add_argument(
        "--connector-jar",
        help=f"Flink Kafka connector jar (default ${CONNECTOR_JAR_ENV} or {DEFAULT_CONNECTOR_JAR.name})",
    )


# -- settings ---------------------------------------------------------------------


def _absolute_local_url(url: str) -> str:
    """Flink workers may run in another directory: pin a relative sqlite file or mem0 folder to this one."""
    for scheme in ("sqlite", "mem0"):
        prefix = f"{scheme}:///"
        if url.startswith(prefix) and not url.startswith(prefix + "/") and url != prefix:
            return prefix + str(Path(url[len(prefix) :]).resolve())
    return url


def domain_settings(args: argparse.Namespace, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """The diagnosis settings: flags (and ``overrides``), then the environment. The only place jobs/ builds them."""
    env = os.environ if env is None else env
    flags = {field: getattr(args, flag, None) for flag, field in _DOMAIN_FLAGS.items()}
    # An invalid value is named by the flag that gave it (and its variable); ``overrides`` are no flags.
    given_as = {
        field: "--" + flag.replace("_", "-")
        for flag, field in _DOMAIN_FLAGS.items()
        if flags[field] is not None and field not in overrides
    }
    flags.update(overrides)
    settings = load_settings(env, given_as=given_as, **flags)
    return with_overrides(
        settings,
        memory_url=_absolute_local_url(settings.memory.url),
        knowledge_url=_absolute_local_url(settings.memory.knowledge_url),
    )


def warn_passwords_in_arguments(args: argparse.Namespace) -> None:
    """Say on stderr that a URL flag's password is visible to every user of the machine (``ps``), and to
    Flink's client log for a submitted job, and name the variable that keeps it out of both. The command
    still runs: as a client warns for a password on its command line, it does not refuse it."""
    for flag, field in (("memory", "memory_url"), ("knowledge", "knowledge_url")):
        given = getattr(args, flag, None)
        parts = split_url(given) if isinstance(given, str) else None
        if parts is not None and parts.password:
            print(
                f"vdoctor: warning: the password in --{flag} is visible to every user of this machine (ps) and, "
                f"for a submitted job, in Flink's client log; give the URL as {ENV_VARS[field]} instead",
                file=sys.stderr,
            )


def memory_url_as_given(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> str:
    """The memory URL as the user gave it (flag, then environment), relative paths kept: for display."""
    return load_settings(os.environ if env is None else env, memory_url=getattr(args, "memory", None)).memory.url


def _uri(path_or_uri: str) -> str:
    """A URI as it is (``file:``, ``s3://`` ...); a plain path made absolute, as a ``file:`` URI."""
    if len(urlsplit(path_or_uri).scheme) > 1:  # not a Windows drive letter
        return path_or_uri
    return Path(path_or_uri).resolve().as_uri()


def _local_path(uri: str) -> Path | None:
    """The local folder of a ``file:`` URI or a plain path; None for other file systems."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return Path(parts.path)
    return Path(uri) if len(parts.scheme) <= 1 else None


RESTORE_LATEST = "latest"
RESTORE_NONE = "none"


# Beside a local Kafka run's checkpoints: which job wrote them (``resume_by_default``).
JOB_MARKER = "vdoctor-job.json"


def kafka_job_identity(job: KafkaJobSettings) -> dict[str, Any]:
    """What makes a Kafka job's checkpoints its own: the broker, the topics it reads and its consumer group."""
    return {"bootstrap": job.bootstrap, "topics": list(job.input_topics()), "group_id": job.group_id}


def resume_by_default(args: argparse.Namespace, identity: Mapping[str, Any]) -> Path | None:
    """``vdoctor run --kafka`` without ``--restore``: resume from the newest complete checkpoint under
    ``--checkpoint-dir`` when that folder's checkpoints are this job's (``args.restore`` becomes "latest");
    returns the checkpoint, or None. The folder is marked as this job's either way (``JOB_MARKER``).

    A Kafka job started again after a stop or a crash must carry on with its sessions, its dedup ids and
    the events whose runs were in flight at its last checkpoint: its committed offsets alone would skip
    those events (they were read before the checkpoint) and start every vehicle afresh. Checkpoints of
    another job (another broker, topics or consumer group, in the same default folder) are never taken:
    that job's sessions and offsets are not this one's. Only for a local run: a job submitted to a
    cluster is restored by ``flink run -s``.
    """
    folder = Path(getattr(args, "checkpoint_dir", None) or DEFAULT_KAFKA_CHECKPOINT_DIR)
    local = _local_path(str(folder))
    if local is None:
        return None
    marker = local / JOB_MARKER
    try:
        ours = json.loads(marker.read_text(encoding="utf-8")) == dict(identity)
    except (OSError, ValueError):
        ours = False
    found = None
    if not getattr(args, "restore", None) and ours and local.is_dir():
        found = latest_checkpoint(local)
        if found is not None:
            args.restore = RESTORE_LATEST
    local.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(dict(identity), sort_keys=True), encoding="utf-8")
    return found


def latest_checkpoint(checkpoint_dir: Path) -> Path | None:
    """The newest complete checkpoint (a ``chk-N`` folder with ``_metadata``) under ``checkpoint_dir``.

    The newest folder may be incomplete after a crash (NOTES.md), hence the check.
    """
    found = [p.parent for p in checkpoint_dir.glob("*/chk-*/_metadata")]
    return max(found, key=lambda p: (p.stat().st_mtime, int(p.name.split("-")[1]))) if found else None


def _checkpoint_interval_ms(args: argparse.Namespace) -> int:
    ms = getattr(args, "checkpoint_interval_ms", None)
    seconds = getattr(args, "checkpoint_interval", None)
    if seconds is not None:
        if ms is not None:
            raise ConfigError("give --checkpoint-interval-ms only (--checkpoint-interval SECONDS is its old name)")
        log.warning("--checkpoint-interval SECONDS is deprecated: use --checkpoint-interval-ms %d", seconds * 1000)
        return int(seconds * 1000)
    return DEFAULT_CHECKPOINT_INTERVAL_MS if ms is None else int(ms)


def _restore_from(args: argparse.Namespace, checkpoint_dir: str | None) -> str | None:
    restore = getattr(args, "restore", None)
    if not restore or restore == RESTORE_NONE:
        return None
    if restore == RESTORE_LATEST:
        # Only a file replay can have none: the Kafka job has a default folder.
        if not checkpoint_dir:
            raise ConfigError(
                "--restore latest looks under --checkpoint-dir, and a file replay has none unless given one: "
                "give the --checkpoint-dir its earlier run checkpointed to, or --restore PATH"
            )
        folder = _local_path(checkpoint_dir)
        found = latest_checkpoint(folder) if folder is not None else None
        if found is None:
            raise ConfigError("--restore latest found no complete checkpoint under --checkpoint-dir")
        return found.resolve().as_uri()
    local = _local_path(restore)
    if local is not None and not (local / "_metadata").is_file():
        raise ConfigError(f"{restore} is not a complete checkpoint or savepoint (no _metadata)")
    return _uri(restore)


def _flink_conf(items: list[str] | None) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--flink-conf takes KEY=VALUE, got {item!r}")
        conf[key.strip()] = value.strip()
    return conf


def flink_settings(args: argparse.Namespace, kafka: bool, **fixed: Any) -> FlinkSettings:
    """How the job runs on Flink: shared flags, with the Kafka job's or the replay's defaults."""
    checkpoint_dir = getattr(args, "checkpoint_dir", None)
    if checkpoint_dir is None and kafka:
        checkpoint_dir = str(DEFAULT_KAFKA_CHECKPOINT_DIR)
    checkpoint_uri = _uri(checkpoint_dir) if checkpoint_dir else None
    attempts = getattr(args, "restart_attempts", None)
    default_attempts = DEFAULT_KAFKA_RESTART_ATTEMPTS if kafka else DEFAULT_REPLAY_RESTART_ATTEMPTS
    values: dict[str, Any] = {
        "parallelism": getattr(args, "parallelism", 1),
        # The Kafka job's state grows with the fleet (RocksDB, incremental checkpoints); a replay's does not.
        "state_backend": "rocksdb" if kafka else "hashmap",
        "checkpoint_dir": checkpoint_uri,
        "checkpoint_interval_ms": _checkpoint_interval_ms(args),
        "retain_checkpoints_on_cancel": kafka,
        "restore_from": _restore_from(args, checkpoint_uri),
        "allow_non_restored_state": not kafka,
        "restart_attempts": default_attempts if attempts is None else attempts,
        "metrics_port": getattr(args, "metrics_port", None),
        "extra_conf": _flink_conf(getattr(args, "flink_conf", None)),
        **fixed,
    }
    try:
        return FlinkSettings.model_validate(values)
    except ValidationError as e:
        raise _invalid("Flink settings", e) from e


def check_output_folder(out: Path, flag: str = "--out") -> None:
    """A ``ConfigError`` when the folder ``out`` cannot be made because it, or a folder above it, is a file
    (``mkdir`` would raise FileExistsError or NotADirectoryError); checked before the command starts work."""
    for folder in (out, *out.parents):
        if folder.exists():
            if not folder.is_dir():
                raise ConfigError(f"{flag} {out}: {folder} is a file, not a folder")
            return


def replay_settings(args: argparse.Namespace, **overrides: Any) -> ReplaySettings:
    """A file replay from ``--alerts``, ``--out``, ``--rate`` and the Flink flags."""
    values: dict[str, Any] = {"alerts": getattr(args, "alerts", None), "out": getattr(args, "out", None)}
    values.update(overrides)
    if not values["alerts"] or not values["out"]:
        raise ConfigError("give --alerts FILE --out DIR (file replay) or --kafka HOST:PORT")
    alerts, out = Path(values["alerts"]), Path(values["out"])
    if not alerts.is_file():
        raise ConfigError(f"no such alerts file: {alerts}")
    check_output_folder(out)
    rate = check_rate(getattr(args, "rate", None), "lines")
    flink = flink_settings(args, kafka=False, tmp_dir=str((out / ".flink-tmp").resolve()))
    try:
        return ReplaySettings(alerts=alerts, out=out, rate=rate, flink=flink)
    except ValidationError as e:
        raise _invalid("replay settings", e) from e


def kafka_settings(
    args: argparse.Namespace, env: Mapping[str, str] | None = None, python_env: str = "this-process"
) -> KafkaJobSettings:
    """The Kafka job from ``--kafka``, the Kafka flags and the Flink flags.

    ``python_env="cluster"`` for a job submitted to a cluster (``flink run``): its workers then use the
    cluster's Python, not this machine's.
    """
    env = os.environ if env is None else env
    # The job reads the topics as events arrive: nothing paces them, and a --rate would be ignored.
    if getattr(args, "rate", None) is not None:
        raise ConfigError(
            "--rate paces a file replay; the Kafka job reads its topics as events arrive "
            "(pace the producer instead: vdoctor replay --rate)"
        )
    jar = getattr(args, "connector_jar", None) or env.get(CONNECTOR_JAR_ENV) or str(DEFAULT_CONNECTOR_JAR)
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
        "flink": flink_settings(args, kafka=True, jars=(str(Path(jar).resolve()),), python_env=python_env),
    }
    try:
        return KafkaJobSettings.model_validate(values)
    except ValidationError as e:
        raise _invalid("Kafka job settings", e) from e


def serve_settings(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> ServeSettings:
    """The inspector's settings from ``--host``, ``--port``, ``--token`` (or VDOCTOR_SERVE_TOKEN), ``--diagnoses``.

    Bound to anything but loopback it refuses to start without a token.
    """
    env = os.environ if env is None else env
    token = getattr(args, "token", None) or env.get(SERVE_TOKEN_ENV) or None
    host = getattr(args, "host", None) or DEFAULT_SERVE_HOST
    if token is not None and (len(token) < MIN_TOKEN_CHARS or not _TOKEN_RE.match(token)):
        raise ConfigError(
            f"the inspector's token must have at least {MIN_TOKEN_CHARS} characters, letters, digits and . _ ~ + / = - "
            "only (e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))')"
        )
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"vdoctor serve bound to {host} (not this machine alone) needs a token: --token or {SERVE_TOKEN_ENV}"
        )
    port = getattr(args, "port", None)
    port = DEFAULT_SERVE_PORT if port is None else port
    # 0 is refused, not taken for the default nor for "any free port": the inspector logs the address to
    # open as it was given, and a user given port 0 would not know where it is.
    if not 1 <= port <= 65535:
        raise ConfigError(f"--port must be 1 to 65535, got {port}")
    diagnoses = getattr(args, "diagnoses", None)
    if diagnoses is not None and not Path(diagnoses).exists():
        raise ConfigError(f"--diagnoses: no such file or folder: {diagnoses}")
    try:
        return ServeSettings(
            host=host,
            port=port,
            token=SecretStr(token) if token else None,
            diagnoses=Path(diagnoses) if diagnoses else None,
        )
    except ValidationError as e:
        raise _invalid("inspector settings", e) from e
