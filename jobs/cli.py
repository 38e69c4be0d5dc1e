"""The ``vdoctor`` command line: run the job, and inspect long-term memory.

Configuration: flags, then VDOCTOR_* environment variables (vdoctor.settings).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from vdoctor.embed import HashingEmbedder
from vdoctor.errors import VDoctorError
from vdoctor.memory.recall import recall
from vdoctor.settings import Settings, load_settings
from vdoctor.stores import open_store


def _absolute_memory_url(url: str) -> str:
    """Flink workers may run in another directory: pin a relative sqlite path to this one."""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(url[len("sqlite:///") :]).resolve())
    return url


def _settings(args: argparse.Namespace) -> Settings:
    settings = load_settings(os.environ, memory_url=args.memory, model=getattr(args, "model", None))
    return settings.model_copy(update={"memory_url": _absolute_memory_url(settings.memory_url)})


def worker_settings(args: argparse.Namespace) -> dict[str, object]:
    """The diagnosis settings from flags and environment, as shipped to Flink workers."""
    return _settings(args).for_workers()


def _cmd_run_kafka(args: argparse.Namespace) -> int:
    from jobs import kafka_job  # imports pyflink: only for `run --kafka`

    if args.alerts or args.out:
        print("vdoctor run: --kafka reads topics; --alerts/--out are for file replays", file=sys.stderr)
        return 2
    job = kafka_job.settings_from_args(args)
    settings = _settings(args)
    scheme = urlsplit(settings.memory_url).scheme
    print(
        f"vdoctor run: kafka {job.bootstrap} {','.join(job.input_topics())} -> {job.diagnoses_topic}, "
        f"{job.dead_letters_topic} (memory: {scheme}, model: {settings.model}, parallelism {job.parallelism}, "
        f"{job.delivery}, checkpoints every {job.checkpoint_interval_s:g} s in {job.checkpoint_dir}); Ctrl-C stops",
        file=sys.stderr,
    )
    try:
        kafka_job.run(job, settings.for_workers(), local=True)
    except KeyboardInterrupt:
        # Offsets and state are as of the last checkpoint; resume with --from-savepoint <its chk-N folder>.
        print(f"vdoctor run: stopped; checkpoints are kept in {job.checkpoint_dir}", file=sys.stderr)
        return 130
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    if args.kafka:
        return _cmd_run_kafka(args)
    from jobs.replay import run_file  # imports pyflink: only for `run`

    if not args.alerts or not args.out:
        print("vdoctor run: give --alerts FILE --out DIR (file replay) or --kafka HOST:PORT", file=sys.stderr)
        return 2
    settings = _settings(args)
    alerts = Path(args.alerts)
    if not alerts.is_file():
        print(f"vdoctor run: no such alerts file: {alerts}", file=sys.stderr)
        return 2
    scheme = urlsplit(settings.memory_url).scheme
    print(
        f"vdoctor run: {alerts} -> {args.out} (memory: {scheme}, model: {settings.model}, "
        f"parallelism {args.parallelism})",
        file=sys.stderr,
    )
    report = run_file(alerts, Path(args.out), settings, parallelism=args.parallelism)
    print(report.render())
    print(f"  outputs            {Path(args.out) / 'diagnoses.jsonl'}, {Path(args.out) / 'dead_letters.jsonl'}")
    return 0


def _cmd_history(args: argparse.Namespace) -> int:
    store = open_store(_settings(args).memory_url)
    try:
        records = store.history(args.vin)
    finally:
        store.close()
    if args.json:
        print(json.dumps([r.public_dict() for r in records], ensure_ascii=False, indent=2))
        return 0
    if not records:
        print(f"no long-term memory for {args.vin}")
    for r in records:
        recheck = {True: "ok", False: "failed", None: "pending"}[r.recheck_ok]
        state = "valid" if r.valid else "deleted"
        print(
            f"{r.session_id}  {r.concluded_at:%Y-%m-%d %H:%M}  {r.priority}  recheck {recheck}  {state}  "
            f"{','.join(r.dtc_codes)}\n  cause: {r.root_cause}\n  fix:   {r.fix_action}\n  "
            + r.summary.replace("\n", "\n  ")
        )
    return 0


def _cmd_recall(args: argparse.Namespace) -> int:
    store = open_store(_settings(args).memory_url)
    try:
        series = args.series
        if series is None:
            own = store.history(args.vin)
            series = own[0].series if own else ""
        found = recall(store, HashingEmbedder(), args.vin, series, args.symptom, args.codes or [], datetime.now(UTC))
    finally:
        store.close()
    out = {
        "vin": args.vin,
        "tokens": found.tokens,
        "own": [r.model_dump() for r in found.own_refs],
        "similar": [r.model_dump() for r in found.similar_refs],
        "text": found.text,
    }
    print(json.dumps(out, ensure_ascii=False, indent=2) if args.json else (found.text or "nothing recalled"))
    return 0


def _cmd_forget(args: argparse.Namespace) -> int:
    store = open_store(_settings(args).memory_url)
    try:
        n = store.soft_delete(args.vin)
    finally:
        store.close()
    print(f"{args.vin}: {n} records marked invalid ({args.change}); kept for audit, never recalled")
    return 0


def _add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    from jobs.kafka_job import add_arguments  # no pyflink import at module level

    add_arguments(parser)


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


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vdoctor", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run", help="run the PyFlink job on the local MiniCluster: over a JSONL file, or on Kafka topics (--kafka)"
    )
    run.add_argument("--alerts", help="JSONL file of alert/recheck/lifecycle events")
    run.add_argument("--out", help="folder for diagnoses.jsonl and dead_letters.jsonl")
    run.add_argument("--kafka", metavar="HOST:PORT", help="run unbounded on Kafka topics instead of a file")
    run.add_argument("--memory", help="long-term memory URL (default sqlite:///.vdoctor/memory.db)")
    run.add_argument("--model", choices=["offline"], help="chat model (default offline)")
    run.add_argument("--parallelism", type=int, default=1)
    run.set_defaults(func=_cmd_run)
    _add_kafka_arguments(run)

    replay = sub.add_parser("replay", help="produce a JSONL file of events to a Kafka topic, keyed by VIN")
    replay.add_argument("--alerts", required=True, help="JSONL file of alert/recheck/lifecycle events")
    replay.add_argument("--bootstrap", required=True, metavar="HOST:PORT", help="Kafka bootstrap servers")
    replay.add_argument("--topic", default="vdoctor.alerts", help="topic to produce to (default vdoctor.alerts)")
    replay.add_argument("--rate", type=float, help="events per second (default: as fast as the broker takes them)")
    replay.add_argument("--quiet", action="store_true", help="no progress bar")
    replay.set_defaults(func=_cmd_replay)

    memory = sub.add_parser("memory", help="inspect and manage long-term memory").add_subparsers(
        dest="memory_command", required=True
    )
    hist = memory.add_parser("history", help="a vehicle's long-term records, newest first")
    hist.add_argument("--vin", required=True)
    hist.add_argument("--json", action="store_true")
    hist.add_argument("--memory")
    hist.set_defaults(func=_cmd_history)

    rec = memory.add_parser("recall", help="what a new session of this vehicle would recall")
    rec.add_argument("--vin", required=True)
    rec.add_argument("--symptom", required=True)
    rec.add_argument("--series", help="vehicle series (default: from the vehicle's history)")
    rec.add_argument("--codes", nargs="*", help="trouble codes of the alert")
    rec.add_argument("--json", action="store_true")
    rec.add_argument("--memory")
    rec.set_defaults(func=_cmd_recall)

    forget = memory.add_parser("forget", help="soft-delete a vehicle's records (scrapped or transferred)")
    forget.add_argument("--vin", required=True)
    forget.add_argument("--change", required=True, choices=["scrapped", "transferred"])
    forget.add_argument("--memory")
    forget.set_defaults(func=_cmd_forget)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except VDoctorError as e:
        print(f"vdoctor: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
