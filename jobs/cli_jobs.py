"""``vdoctor run``, ``vdoctor replay`` and ``vdoctor eval``: the commands that run the job or feed it."""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path
from typing import Any

from jobs.job_settings import (
    CONNECTOR_JAR_ENV,
    DEFAULT_CONNECTOR_JAR,
    add_diagnosis_arguments,
    add_flink_arguments,
    add_kafka_arguments,
    check_output_folder,
    domain_settings,
    kafka_job_identity,
    kafka_settings,
    replay_settings,
    resume_by_default,
)
from vdoctor.url_credentials import url_scheme


def _jvm_answers() -> bool:
    """Whether the local Flink JVM still answers a call (after a py4j error that is no Java exception)."""
    from pyflink.java_gateway import get_gateway

    try:
        get_gateway().jvm.java.lang.System.currentTimeMillis()
    except Exception:
        return False
    return True


def _cmd_run(args: argparse.Namespace) -> int:
    """``vdoctor run``: a file replay or ``--kafka``; a local Flink JVM that dies ends it with one line."""
    from py4j.protocol import Py4JError, Py4JJavaError

    try:
        return _run_kafka(args) if args.kafka else _run_file(args)
    except Py4JJavaError:
        raise  # the job failed: Flink's own exception says why
    except Py4JError as e:
        if _jvm_answers():
            raise  # py4j's own error with the JVM alive (a misused call): its traceback is the report
        from jobs.flink_env import local_log_dir

        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(
            f"vdoctor run: the local Flink JVM stopped during the run ({first}); "
            f"why is in its log, flink-*-python-*.log in {local_log_dir()}",
            file=sys.stderr,
        )
        return 1


# How long ``run --kafka`` waits for a TCP answer from each broker it is given before it warns.
BROKER_PROBE_S = 3.0


def brokers_of(bootstrap: str) -> list[str]:
    """The brokers of a bootstrap list (``host:port,...``), blanks around them left out."""
    return [a.strip() for a in bootstrap.split(",") if a.strip()]


def silent_brokers(bootstrap: str, timeout_s: float = BROKER_PROBE_S) -> list[str]:
    """The brokers of ``bootstrap`` (``brokers_of``) that do not take a TCP connection within ``timeout_s``: all
    of them for a mistyped address. Only a hint: the job's Kafka source waits for a broker that comes later."""
    import socket

    silent = []
    for address in brokers_of(bootstrap):
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host.strip("[]") or address, int(port or 9092)), timeout=timeout_s).close()
        except (OSError, ValueError):
            silent.append(address)
    return silent


def _run_kafka(args: argparse.Namespace) -> int:
    from jobs import kafka_job  # imports pyflink: only for `run --kafka`

    if args.alerts or args.out:
        print("vdoctor run: --kafka reads topics; --alerts/--out are for file replays", file=sys.stderr)
        return 2
    job = kafka_settings(args)
    resumed = resume_by_default(args, kafka_job_identity(job))
    if resumed is not None:
        job = kafka_settings(args)  # now restoring from it
    settings = domain_settings(args)
    scheme = url_scheme(settings.memory.url)
    if resumed is not None:
        print(f"vdoctor run: resuming from {resumed} (--restore none starts afresh)", file=sys.stderr)
    print(
        f"vdoctor run: kafka {job.bootstrap} {','.join(job.input_topics())} -> {job.diagnoses_topic}, "
        f"{job.dead_letters_topic} (memory: {scheme}, model: {settings.model.chat}, "
        f"parallelism {job.flink.parallelism}, {job.delivery}, checkpoints every {job.flink.checkpoint_interval_ms} ms "
        f"in {job.flink.checkpoint_dir}); Ctrl-C stops",
        file=sys.stderr,
    )
    try:
        brokers = brokers_of(job.bootstrap)
        if brokers and len(silent := silent_brokers(job.bootstrap)) == len(brokers):
            # (The job itself waited in silence, writing checkpoints, for a broker that a typo had named: an audit.)
            print(
                f"vdoctor run: warning: no broker answers at {', '.join(silent)} (within {BROKER_PROBE_S:.0f} s); "
                "the job starts and waits for one",
                file=sys.stderr,
            )
        kafka_job.run(job, settings, local=True)
    except KeyboardInterrupt:
        # Offsets and state are as of the last checkpoint; the same command resumes from it.
        print(
            f"vdoctor run: stopped; checkpoints are kept in {job.flink.checkpoint_dir} (the same command resumes)",
            file=sys.stderr,
        )
        return 130
    return 0


def _run_file(args: argparse.Namespace) -> int:
    from jobs.replay import run_file  # imports pyflink: only for `run`

    replay = replay_settings(args)
    settings = domain_settings(args)
    if settings.needs_api_key() and settings.endpoint.api_key is None and not settings.endpoint.api_key_file:
        print(
            "vdoctor run: an openai model or embedder needs OPENAI_API_KEY or VDOCTOR_OPENAI_API_KEY_FILE "
            "(and OPENAI_BASE_URL for other endpoints)",
            file=sys.stderr,
        )
        return 2
    if replay.flink.restore_from is not None:
        print(f"vdoctor run: restoring from {replay.flink.restore_from}", file=sys.stderr)
    scheme = url_scheme(settings.memory.url)
    print(
        f"vdoctor run: {replay.alerts} -> {replay.out} (memory: {scheme}, model: {settings.model.chat}, "
        f"parallelism {replay.flink.parallelism}, concurrency {settings.runtime.concurrency})",
        file=sys.stderr,
    )
    report = run_file(replay, settings)
    print(report.render())
    print(f"  outputs            {replay.out / 'diagnoses.jsonl'}, {replay.out / 'dead_letters.jsonl'}")
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from jobs.kafka_replay import replay_file

    alerts = Path(args.alerts)
    if not alerts.is_file():
        print(f"vdoctor replay: no such alerts file: {alerts}", file=sys.stderr)
        return 2
    progress = None if args.quiet else sys.stderr
    report = replay_file(alerts, args.bootstrap, args.topic, rate=args.rate, progress=progress)
    print(report.render())
    return 0


def _cmd_package(args: argparse.Namespace) -> int:
    from jobs.package import package, python_tag

    jar = args.connector_jar or os.environ.get(CONNECTOR_JAR_ENV) or str(DEFAULT_CONNECTOR_JAR)
    bundle = package(Path(args.out), Path(jar))
    size_mb = bundle.archive.stat().st_size / 1e6
    print(f"wrote {bundle.archive} ({size_mb:.1f} MB): vdoctor, operators, jobs and what they need beyond")
    print(f"      apache-flink, for Python {python_tag()}: {', '.join(bundle.dependencies)}")
    print(f"wrote {bundle.connector_jar}")
    print("submit it (README, 'Submitting to a cluster'):")
    print(bundle.submit_command())
    return 0


def _cmd_eval_ab(args: argparse.Namespace) -> int:
    out = Path(args.out)
    check_output_folder(out)  # before pyflink is imported
    from jobs.eval_ab import run_ab  # imports pyflink: only for `eval`

    run_ab(args)
    print((out / "ab_report.md").read_text(encoding="utf-8"))
    print(f"report: {out / 'ab_report.md'}, chart: {out / 'ab_report.png'}")
    return 0


def stdin_lines() -> io.TextIOWrapper:
    """Standard input as a file of lines is read: UTF-8, a byte that is not read as U+FFFD (under a strict locale
    one such byte raised and lost the whole report), the line ends kept as they are."""
    return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline="")


def _cmd_check_events(args: argparse.Namespace) -> int:
    """``vdoctor check-events``: how the job reads a feed; exit 1 when any line would be a dead letter."""
    import json

    from vdoctor.events import (
        DEFAULT_DTC_NUMBERS,
        DTC_NUMBERS_ENV,
        NAIVE_TS_ZONE_ENV,
        NUMBER_COMMA_ENV,
        SIGNAL_MAP_ENV,
        dtc_numbers,
        number_comma,
        time_zone,
    )
    from vdoctor.feed_check import check_feed, render
    from vdoctor.signal_map import SignalRenames, read_signal_map

    # Each setting from its flag, else the job's environment variable; a bad one exits 2, named as the other
    # commands name it: by its flag and variable when the flag gave it, else by its variable.
    def given(flag: str, value: str | None, var: str) -> tuple[str | None, str]:
        if value:
            return value, f"{flag} ({var})"
        return os.environ.get(var) or None, var

    zone_name, zone_named = given("--naive-ts-zone", args.naive_ts_zone, NAIVE_TS_ZONE_ENV)
    map_path, map_named = given("--signal-names", args.signal_names, SIGNAL_MAP_ENV)
    comma_given, comma_named = given("--number-comma", args.number_comma, NUMBER_COMMA_ENV)
    numbers_given, numbers_named = given("--dtc-numbers", args.dtc_numbers, DTC_NUMBERS_ENV)
    try:
        named = zone_named
        zone = time_zone(zone_name) if zone_name else None
        named = map_named
        rename = SignalRenames(read_signal_map(map_path)) if map_path else None
        named = comma_named
        comma = number_comma(comma_given) if comma_given else None
        named = numbers_named
        numbers = dtc_numbers(numbers_given) if numbers_given else DEFAULT_DTC_NUMBERS
    except ValueError as e:
        print(f"vdoctor check-events: {named}: {e}", file=sys.stderr)
        return 2

    def progress(lines: int) -> None:
        print(f"  ... {lines:,} lines", file=sys.stderr, flush=True)

    if args.alerts == "-":
        report = check_feed(stdin_lines(), zone, progress, rename, comma, dtc_numbers=numbers)
    else:
        path = Path(args.alerts)
        if not path.is_file():
            print(f"vdoctor check-events: no such file: {path}", file=sys.stderr)
            return 2
        try:
            with path.open(encoding="utf-8", errors="replace", newline="") as lines:
                report = check_feed(lines, zone, progress, rename, comma, dtc_numbers=numbers)
        except OSError as e:
            print(f"vdoctor check-events: cannot read {path}: {e.strerror}", file=sys.stderr)
            return 2
    print(json.dumps(report.as_json(), ensure_ascii=False) if args.json else render(report, zone_name, comma, numbers))
    return 1 if report.dead_letters else 0


def add_commands(sub: Any) -> None:
    """Add ``run``, ``replay`` and ``eval`` to the ``vdoctor`` parser's sub-commands."""
    run = sub.add_parser(
        "run", help="run the PyFlink job on the local MiniCluster: over a JSONL file, or on Kafka topics (--kafka)"
    )
    run.add_argument("--alerts", help="JSONL file of alert/recheck/lifecycle events")
    run.add_argument("--out", help="folder for diagnoses.jsonl and dead_letters.jsonl")
    run.add_argument("--kafka", metavar="HOST:PORT", help="run unbounded on Kafka topics instead of a file")
    run.add_argument("--rate", type=float, help="replay at most this many lines per second (like a live stream)")
    run.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve the job's Flink metrics for Prometheus at http://localhost:PORT/metrics",
    )
    add_diagnosis_arguments(run)
    add_flink_arguments(run)
    add_kafka_arguments(run)
    run.set_defaults(func=_cmd_run)

    check = sub.add_parser(
        "check-events",
        help="how the job reads a feed's events, before running it: events and dead letters by field, and every "
        "form the feed writes that the job reads as another (a field's spelling, a signal name, a code, a time)",
    )
    check.add_argument("--alerts", required=True, help="JSONL file of events ('-' reads stdin)")
    check.add_argument("--naive-ts-zone", default=None, metavar="ZONE",
                       help="the zone of event times written without one, as the job's flag (default: "
                            "VDOCTOR_NAIVE_TS_ZONE)")  # fmt: skip
    check.add_argument("--signal-names", default=None, metavar="FILE",
                       help="the fleet's signal map, as the job's flag (default: VDOCTOR_SIGNAL_NAMES)")  # fmt: skip
    check.add_argument("--number-comma", default=None, metavar="decimal|thousands",
                       help="how the fleet's numbers use a comma, as the job's flag (default: "
                            "VDOCTOR_NUMBER_COMMA)")  # fmt: skip
    check.add_argument("--dtc-numbers", default=None, metavar="uds|obd",
                       help="how the fleet sends a trouble code as a number, as the job's flag (default: "
                            "VDOCTOR_DTC_NUMBERS, else uds)")  # fmt: skip
    check.add_argument("--json", action="store_true", help="the report as one JSON object")
    check.set_defaults(func=_cmd_check_events)
    replay = sub.add_parser("replay", help="produce a JSONL file of events to a Kafka topic, keyed by VIN")
    replay.add_argument("--alerts", required=True, help="JSONL file of alert/recheck/lifecycle events")
    replay.add_argument("--bootstrap", required=True, metavar="HOST:PORT", help="Kafka bootstrap servers")
    replay.add_argument("--topic", default="vdoctor.alerts", help="topic to produce to (default vdoctor.alerts)")
    replay.add_argument("--rate", type=float, help="events per second (default: as fast as the broker takes them)")
    replay.add_argument("--quiet", action="store_true", help="no progress bar")
    replay.set_defaults(func=_cmd_replay)

    pack = sub.add_parser(
        "package", help="build what `flink run` needs to run the Kafka job on a cluster that has nothing of ours"
    )
    pack.add_argument("--out", default="dist/flink-job", help="folder to write to (default dist/flink-job)")
    pack.add_argument("--connector-jar", help=f"the Flink Kafka connector jar to ship (default ${CONNECTOR_JAR_ENV})")
    pack.set_defaults(func=_cmd_package)

    evaluation = sub.add_parser("eval", help="experiments over a replay file").add_subparsers(
        dest="eval_command", required=True
    )
    ab = evaluation.add_parser("ab", help="memory off vs memory on, as a markdown report and a PNG chart")
    ab.add_argument("--alerts", required=True)
    ab.add_argument("--out", required=True)
    ab.add_argument("--knowledge")
    ab.add_argument("--parallelism", type=int, default=1)
    ab.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="vehicles in flight per subtask (default 1: file order across vehicles, so both arms see the same order)",
    )
    ab.set_defaults(func=_cmd_eval_ab)
