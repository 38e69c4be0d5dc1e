"""The ``vdoctor`` command line: run the job, and inspect long-term memory.

Configuration: flags, then VDOCTOR_* environment variables (vdoctor.settings).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from vdoctor import assembly
from vdoctor.errors import VDoctorError
from vdoctor.settings import Settings, load_settings, with_overrides
from vdoctor.stores import open_store


def _absolute_local_url(url: str) -> str:
    """Flink workers may run in another directory: pin a relative sqlite file or mem0 folder to this one."""
    for scheme in ("sqlite", "mem0"):
        prefix = f"{scheme}:///"
        if url.startswith(prefix) and not url.startswith(prefix + "/") and url != prefix:
            return prefix + str(Path(url[len(prefix) :]).resolve())
    return url


# Checkpoint every 10 s by default when a checkpoint folder is given.
DEFAULT_CHECKPOINT_INTERVAL_MS = 10_000


def _settings(args: argparse.Namespace) -> Settings:
    settings = load_settings(
        os.environ,
        memory_url=getattr(args, "memory", None),
        knowledge_url=getattr(args, "knowledge", None),
        model=getattr(args, "model", None),
        summarizer=getattr(args, "summarizer", None),
        concurrency=getattr(args, "concurrency", None),
    )
    return with_overrides(
        settings,
        memory_url=_absolute_local_url(settings.memory.url),
        knowledge_url=_absolute_local_url(settings.memory.knowledge_url),
    )


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
    scheme = urlsplit(settings.memory.url).scheme
    print(
        f"vdoctor run: kafka {job.bootstrap} {','.join(job.input_topics())} -> {job.diagnoses_topic}, "
        f"{job.dead_letters_topic} (memory: {scheme}, model: {settings.model.chat}, parallelism {job.parallelism}, "
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
    from jobs.flink_env import latest_checkpoint  # imports pyflink: only for `run`
    from jobs.replay import run_file  # imports pyflink: only for `run`

    if not args.alerts or not args.out:
        print("vdoctor run: give --alerts FILE --out DIR (file replay) or --kafka HOST:PORT", file=sys.stderr)
        return 2
    settings = _settings(args)
    alerts = Path(args.alerts)
    if not alerts.is_file():
        print(f"vdoctor run: no such alerts file: {alerts}", file=sys.stderr)
        return 2
    if settings.needs_api_key() and settings.endpoint.api_key is None and not settings.endpoint.api_key_file:
        print(
            "vdoctor run: an openai model or embedder needs OPENAI_API_KEY or VDOCTOR_OPENAI_API_KEY_FILE "
            "(and OPENAI_BASE_URL for other endpoints)",
            file=sys.stderr,
        )
        return 2
    if args.rate is not None and args.rate <= 0:
        print(f"vdoctor run: --rate must be positive, got {args.rate:g}", file=sys.stderr)
        return 2
    flink_conf: dict[str, str] = {}
    for item in args.flink_conf or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"vdoctor run: --flink-conf takes KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        flink_conf[key.strip()] = value.strip()
    checkpoint_dir = Path(args.checkpoint_dir) if args.checkpoint_dir else None
    restore_from = None
    if args.restore == "latest":
        restore_from = latest_checkpoint(checkpoint_dir) if checkpoint_dir else None
        if restore_from is None:
            print("vdoctor run: --restore latest found no complete checkpoint under --checkpoint-dir", file=sys.stderr)
            return 2
    elif args.restore:
        restore_from = Path(args.restore)
        if not (restore_from / "_metadata").is_file():
            print(f"vdoctor run: {restore_from} is not a complete checkpoint (no _metadata)", file=sys.stderr)
            return 2
    if restore_from is not None:
        print(f"vdoctor run: restoring from {restore_from}", file=sys.stderr)
    scheme = urlsplit(settings.memory.url).scheme
    print(
        f"vdoctor run: {alerts} -> {args.out} (memory: {scheme}, model: {settings.model.chat}, "
        f"parallelism {args.parallelism}, concurrency {settings.runtime.concurrency})",
        file=sys.stderr,
    )
    report = run_file(
        alerts,
        Path(args.out),
        settings,
        parallelism=args.parallelism,
        checkpoint_dir=checkpoint_dir,
        checkpoint_interval_ms=args.checkpoint_interval_ms if checkpoint_dir else 0,
        restore_from=restore_from,
        rate=args.rate,
        flink_conf=flink_conf,
    )
    print(report.render())
    print(f"  outputs            {Path(args.out) / 'diagnoses.jsonl'}, {Path(args.out) / 'dead_letters.jsonl'}")
    return 0


def _cmd_history(args: argparse.Namespace) -> int:
    store = open_store(_settings(args).memory.url)
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
    settings = _settings(args)
    store = open_store(settings.memory.url)
    try:
        series = args.series
        if series is None:
            own = store.history(args.vin)
            series = own[0].series if own else ""
        # The job's own recall: the alert text with its codes' definitions, the configured budget.
        recall = assembly.session_recall(settings, store)
        found = recall.for_alert(args.vin, series, args.symptom, args.codes or [], datetime.now(UTC))
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
    store = open_store(_settings(args).memory.url)
    try:
        n = store.soft_delete(args.vin)
    finally:
        store.close()
    print(f"{args.vin}: {n} records marked invalid ({args.change}); kept for audit, never recalled")
    return 0


def _cmd_knowledge_load(args: argparse.Namespace) -> int:
    from vdoctor.knowledge.chunks import rows_from_csv

    base = assembly.knowledge_base(_settings(args))
    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        print(f"\r  embedded {done}/{total} chunks", end="", file=sys.stderr, flush=True)

    try:
        written = base.load(rows_from_csv(Path(args.csv), scope=args.scope), args.version, progress)
        total = base.store.count()
    finally:
        base.close()
    print(file=sys.stderr)
    print(
        f"loaded {args.csv}: {written} chunks (version {args.version}) in {time.monotonic() - started:.1f} s; "
        f"{total} chunks in the knowledge base"
    )
    return 0


def _cmd_knowledge_search(args: argparse.Namespace) -> int:
    base = assembly.knowledge_base(_settings(args))
    try:
        hits = base.search(args.query, scope=args.scope, version=args.version)
    finally:
        base.close()
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "chunk_id": h.chunk.chunk_id,
                        "scope": h.chunk.scope,
                        "version": h.chunk.version,
                        "score": round(h.score, 4),
                        "codes": h.chunk.codes,
                        "text": h.chunk.text,
                    }
                    for h in hits
                ],
                ensure_ascii=False,
                indent=2,
            )
        )
    else:
        for h in hits:
            print(f"{h.score:.3f}  {h.chunk.chunk_id}\n  " + h.chunk.text[:300].replace("\n", "\n  "))
    return 0


def _cmd_health(args: argparse.Namespace) -> int:
    from vdoctor.evaluation.health import assess, plot

    store = open_store(_settings(args).memory.url)
    try:
        report = assess(Path(args.diagnoses), store, sample=args.sample)
    finally:
        store.close()
    print(report.render())
    out = Path(args.plot)
    out.parent.mkdir(parents=True, exist_ok=True)
    plot(report, out)
    print(f"  plot                             {out}")
    return 0


def _cmd_reextract(args: argparse.Namespace) -> int:
    from vdoctor.memory.reextract import ReextractReport, reextract
    from vdoctor.memory.summary import SUMMARY_PROMPT_VERSION

    if args.prompt_version != SUMMARY_PROMPT_VERSION:
        print(
            f"vdoctor memory reextract: this build writes summaries with prompt version {SUMMARY_PROMPT_VERSION}; "
            f"--prompt-version {args.prompt_version} would label them wrongly",
            file=sys.stderr,
        )
        return 2
    settings = _settings(args)
    store = assembly.long_term_store(settings)

    def progress(report: ReextractReport) -> None:
        print(f"\r  {report.seen} seen, {report.rewritten} rewritten", end="", file=sys.stderr, flush=True)

    try:
        report = reextract(
            store, assembly.summarizer(settings), assembly.embedder(settings), args.prompt_version, progress
        )
    finally:
        store.close()
    print(file=sys.stderr)
    print(report.render())
    return 0


def _cmd_eval_ab(args: argparse.Namespace) -> int:
    from jobs.eval_ab import run_ab  # imports pyflink: only for `eval`

    out = Path(args.out)
    run_ab(Path(args.alerts), out, _settings(args), parallelism=args.parallelism)
    print((out / "ab_report.md").read_text(encoding="utf-8"))
    print(f"report: {out / 'ab_report.md'}, chart: {out / 'ab_report.png'}")
    return 0


def _cmd_init(args: argparse.Namespace) -> int:
    url = _settings(args).memory.url
    store = open_store(url)
    try:
        init = getattr(store, "init_schema", None)
        if init is None:
            print(f"{urlsplit(url).scheme} memory creates its schema when opened; nothing to apply")
            return 0
        applied = init()
        where = getattr(getattr(store, "info", None), "redacted", urlsplit(url).scheme)
    finally:
        store.close()
    print(f"applied {', '.join(applied)} to {where}")
    return 0


def _add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    from jobs.kafka_job import add_arguments  # no pyflink import at module level

    add_arguments(parser, checkpoint_dir=False)


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
    run.add_argument("--knowledge", help="knowledge URL (default sqlite:///.vdoctor/knowledge.db)")
    run.add_argument(
        "--model",
        choices=["offline", "openai"],
        help="chat model (default offline); openai uses OPENAI_BASE_URL, OPENAI_API_KEY, VDOCTOR_CHAT_MODEL",
    )
    run.add_argument(
        "--summarizer",
        choices=["offline", "openai"],
        help="who writes summaries (default offline); openai uses VDOCTOR_SUMMARY_MODEL at OPENAI_BASE_URL",
    )
    run.add_argument("--parallelism", type=int, default=1)
    run.add_argument("--concurrency", type=int, help="vehicles diagnosed at once per subtask (default 64)")
    run.add_argument("--checkpoint-dir", help="folder for checkpoints of the job's state (enables checkpointing)")
    run.add_argument("--checkpoint-interval-ms", type=int, default=DEFAULT_CHECKPOINT_INTERVAL_MS)
    run.add_argument("--rate", type=float, help="replay at most this many lines per second (like a live stream)")
    run.add_argument(
        "--flink-conf",
        action="append",
        metavar="KEY=VALUE",
        help="any Flink option, e.g. rest.port=8081 to watch the job's metrics (repeatable)",
    )
    run.add_argument("--restore", help="a chk-N folder to start from, or 'latest' (under --checkpoint-dir)")
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

    knowledge = sub.add_parser("knowledge", help="the knowledge base the agent's search_knowledge tool reads")
    ksub = knowledge.add_subparsers(dest="knowledge_command", required=True)
    load = ksub.add_parser("load", help="load a code table (CSV: code, description[, manufacturer]) as chunks")
    load.add_argument("--csv", required=True)
    load.add_argument("--scope", help="scope of every row (default dtc:generic or dtc:<MANUFACTURER>)")
    load.add_argument("--version", default="1", help="version label stored with the chunks")
    load.add_argument("--knowledge", help="knowledge URL (default sqlite:///.vdoctor/knowledge.db)")
    load.set_defaults(func=_cmd_knowledge_load)
    search = ksub.add_parser("search", help="two-stage search: top-20 by vector, reranked to top-5")
    search.add_argument("--query", required=True)
    search.add_argument("--scope")
    search.add_argument("--version")
    search.add_argument("--json", action="store_true")
    search.add_argument("--knowledge")
    search.set_defaults(func=_cmd_knowledge_search)

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
    rex = memory.add_parser("reextract", help="re-summarize records written with older summary-prompt versions")
    rex.add_argument("--prompt-version", required=True, help="the version this build writes (resumable)")
    rex.add_argument("--summarizer", choices=["offline", "openai"])
    rex.add_argument("--memory")
    rex.set_defaults(func=_cmd_reextract)

    health = memory.add_parser("health", help="score how relevant recalled memories were to the final diagnoses")
    health.add_argument("--diagnoses", required=True, help="the job's diagnoses.jsonl (the recall log)")
    health.add_argument("--sample", type=int, default=500, help="concluded sessions with memory to sample")
    health.add_argument("--plot", default="memory_health.png", help="where to write the PNG plot")
    health.add_argument("--memory")
    health.set_defaults(func=_cmd_health)

    init = memory.add_parser("init", help="apply the versioned DDL in sql/ to a Doris or MySQL database")
    init.add_argument("--memory", help="doris://user:password@host:9030/db or mysql://user:password@host:3306/db")
    init.set_defaults(func=_cmd_init)
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
