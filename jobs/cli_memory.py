"""``vdoctor memory`` and ``vdoctor knowledge``: inspect and manage long-term memory and the knowledge base."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jobs.job_settings import MEMORY_ENV_NOTE, MEMORY_FLAG_HELP, domain_settings
from vdoctor import assembly
from vdoctor.errors import ConfigError, StaleSchema, StoreError
from vdoctor.events import given_codes, given_time, given_vin
from vdoctor.memory.explain import recall_json, vehicle_series
from vdoctor.stores import MemoryStore, missing_file, open_store
from vdoctor.url_credentials import url_scheme

# What ``memory health`` writes its plot to, by default and inside a folder given as --plot (a folder that
# exists, or a name ending in "/"), and the forms it writes (by the file's extension).
DEFAULT_PLOT = "memory_health.png"
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def _event_time(text: str | None) -> datetime:
    """An ``--as-of`` / ``--at`` value (``events.given_time``: ISO-8601 with a timezone, second precision, UTC,
    between the years the job reads an event's time in); default now."""
    if text is None:
        return datetime.now(UTC).replace(microsecond=0)
    try:
        return given_time(text)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _vin(text: str) -> str:
    """A ``--vin`` as the job reads an event's (``events.given_vin``); anything but a VIN is a ``ConfigError``,
    where it found no record and said so with exit 0."""
    try:
        return given_vin(text)
    except ValueError as e:
        raise ConfigError(f"--vin {e}") from None


def _codes(given: list[str] | None) -> list[str]:
    """``--codes`` as the job reads an alert's (``events.given_codes``); anything but a code is a
    ``ConfigError``, where it was recalled with as written."""
    try:
        return given_codes(given or [])
    except ValueError as e:
        raise ConfigError(f"--codes {e}") from None


def _reading(url: str) -> MemoryStore:
    """The store for a command that only reads it, opened read-only (``open_store``): SQLite opens the file
    for reads only and leaves its index folders as they are, a MySQL/MariaDB session is READ ONLY. These
    commands opened it read-write, so they wrote to it (the indexes caught up and saved) and a reader
    without write access could not run them. A sqlite file an older release wrote is migrated first, by a
    read-write open, as the job or any command would on its first open; the command says so."""
    try:
        return open_store(url, read_only=True, existing=True)
    except StaleSchema as e:
        print(f"vdoctor: {e}; migrating it first", file=sys.stderr)
    open_store(url, existing=True).close()
    return open_store(url, read_only=True, existing=True)


def _when(value: datetime | None) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M}"


def _cmd_history(args: argparse.Namespace) -> int:
    vin = _vin(args.vin)
    store = _reading(domain_settings(args).memory.url)
    try:
        records = store.history(vin)
    finally:
        store.close()
    if args.json:
        print(json.dumps([r.public_dict() for r in records], ensure_ascii=False, indent=2))
        return 0
    if not records:
        print(f"no long-term memory for {vin}")
    for r in records:
        recheck = {True: "ok", False: "failed", None: "pending"}[r.recheck_ok]
        if r.recheck_ok is not None:
            recheck += f" {_when(r.verified_ts)}"
        state = "valid" if r.valid else f"deleted {_when(r.invalid_ts)}"
        omitted = f"\n  omitted from the summary: {'; '.join(r.omitted)}" if r.omitted else ""
        print(
            f"{r.session_id}  {r.concluded_at:%Y-%m-%d %H:%M}  {r.priority or 'no priority yet'}  recheck {recheck}  "
            f"{state}  {r.kind.value}  {','.join(r.dtc_codes)}\n  opened {_when(r.opened_ts)}, concluded "
            f"{_when(r.concluded_at)}\n  cause: {r.root_cause}\n  fix:   {r.fix_action}\n  "
            + r.summary.replace("\n", "\n  ")
            + omitted
        )
    return 0


def _cmd_recall(args: argparse.Namespace) -> int:
    settings = assembly.reading_only(domain_settings(args))
    at, vin, codes = _event_time(args.as_of), _vin(args.vin), _codes(args.codes)
    store = _reading(settings.memory.url)
    try:
        series = vehicle_series(store, vin, args.series)
        # The job's own recall: the alert text with its codes' definitions, the configured budget,
        # as a session opening at event time --as-of would get it.
        recall = assembly.session_recall(settings, store)
        found = recall.for_alert(vin, series, args.symptom, codes, at)
    finally:
        store.close()
    out = recall_json(vin, at, found)
    if found.similar_skipped:
        print(f"vdoctor: similar cases left out: {found.similar_skipped}", file=sys.stderr)
    print(json.dumps(out, ensure_ascii=False, indent=2) if args.json else (found.text or "nothing recalled"))
    return 0


def _cmd_check_summary(args: argparse.Namespace) -> int:
    """Exit 0: faithful; 1: findings; 2 (from main): no such record, or no source to check against."""
    from vdoctor.memory.check import check_stored, report_dict

    vin = _vin(args.vin)
    summary = sys.stdin.read() if args.summary == "-" else args.summary
    store = _reading(domain_settings(args).memory.url)
    try:
        record, report = check_stored(store, vin, args.session_id.strip(), summary)
    finally:
        store.close()
    out = report_dict(record, report)
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=2))
    else:
        print(f"{record.session_id}: {'faithful' if report.ok else 'NOT faithful'} ({report.describe()})")
    return 0 if report.ok else 1


def _cmd_forget(args: argparse.Namespace) -> int:
    at, vin = _event_time(args.at), _vin(args.vin)
    store = open_store(domain_settings(args).memory.url, existing=True)
    try:
        n = store.soft_delete(vin, at)
    finally:
        store.close()
    print(
        f"{vin}: {n} records marked invalid ({args.change}) from {at:%Y-%m-%dT%H:%M:%SZ}; "
        "kept for audit, never recalled by a session opening from then on"
    )
    return 0


def _cmd_write_waiting(args: argparse.Namespace) -> int:
    """``vdoctor memory write-waiting``: the cases waiting in the dead letters' sessions, written; exit 1 when one
    that could still be written is not (long-term memory or a model down, a session to mend)."""
    from jobs.cli_jobs import stdin_lines
    from vdoctor.memory.waiting import WaitingReport, write_waiting

    path = Path(args.letters)
    if args.letters != "-" and not path.is_file():
        raise ConfigError(f"--letters {path}: no such file")
    settings = domain_settings(args, concurrency=1)
    assembly.long_term_store(settings, existing=True).close()  # (a mistyped path: no new, empty store)
    engine = assembly.build_engine(settings)

    shown = False

    def progress(report: WaitingReport, written: int | None = None, to_write: int = 0) -> None:
        nonlocal shown
        shown = True
        done = f"; {written}/{to_write} cases tried" if written is not None else ""
        print(
            f"\r  {report.letters} letters, {len(report.sessions)} sessions{done}", end="", file=sys.stderr, flush=True
        )

    try:
        if args.letters == "-":
            report = write_waiting(stdin_lines(), engine, progress)
        else:
            with path.open(encoding="utf-8", errors="replace") as lines:
                report = write_waiting(lines, engine, progress)
    finally:
        engine.close()
    if shown:
        print(file=sys.stderr)
    print(json.dumps(report.as_json(), ensure_ascii=False) if args.json else report.render())
    return 1 if report.unfinished else 0


def _cmd_knowledge_load(args: argparse.Namespace) -> int:
    from vdoctor.knowledge.chunks import rows_from_csv

    base = assembly.knowledge_base(domain_settings(args))
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
    settings = domain_settings(args)
    if (path := missing_file(settings.memory.knowledge_url)) is not None:
        # (A mistyped path made an empty database there and printed nothing, exit 0: an audit.)
        raise StoreError(f"no knowledge base to search: no such file: {path} (vdoctor knowledge load fills one)")
    base = assembly.knowledge_base(settings)
    try:
        hits = base.search(args.query, scope=args.scope, version=args.version)
        held = base.store.count() if not hits else 0
    finally:
        base.close()
    if not hits:
        print(f"vdoctor knowledge search: no chunk matches ({held} chunks in the knowledge base)", file=sys.stderr)
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


def _cmd_knowledge_signals(args: argparse.Namespace) -> int:
    """``vdoctor knowledge signals``: the signal names the pack's rules test, for a fleet's signal map."""
    from vdoctor.knowledge import load_pack
    from vdoctor.units import unit_of

    signals = load_pack().rule_signals()
    if args.json:
        listed = [
            {"signal": name, "unit": unit_of(name),
             "rules": [{"code": e.code, "rule": e.confirm.describe() if e.confirm else "",
                        "definition_en": e.definition_en, "definition_zh": e.definition_zh} for e in entries]}
            for name, entries in signals.items()
        ]  # fmt: skip
        print(json.dumps(listed, ensure_ascii=False, indent=2))
        return 0
    width = max((len(name) for name in signals), default=0)
    for name, entries in signals.items():
        print(f"{name:<{width}}  {unit_of(name) or '-'}")
        for e in entries:
            rule = e.confirm.describe() if e.confirm else ""
            print(f"  {e.code} {rule}: {e.definition_zh or e.definition_en}")
    return 0


def _at_least(least: int, flag: str, given: int | None) -> None:
    """A count flag's value, checked before any work: argparse takes any integer."""
    if given is not None and given < least:
        raise ConfigError(f"{flag} must be at least {least}, got {given}")


def _plot_file(given: str) -> Path:
    """The file ``--plot`` writes: a folder that exists gets ``DEFAULT_PLOT`` inside it, and a name without
    an extension gets ``.png`` (as matplotlib adds it); a folder above it that is a file is a ``ConfigError``,
    checked before any work."""
    out = Path(given)
    if out.is_dir() or given.endswith(("/", os.sep)):
        out = out / DEFAULT_PLOT
    elif not out.suffix:
        out = out.with_name(out.name + ".png")
    if out.suffix.lower() not in PLOT_SUFFIXES:
        raise ConfigError(f"--plot {given}: a plot is written as {', '.join(PLOT_SUFFIXES)}, not {out.suffix}")
    for folder in out.parents:
        if folder.exists():
            if not folder.is_dir():
                raise ConfigError(f"--plot {given}: {folder} is a file, not a folder")
            break
    return out


def _cmd_health(args: argparse.Namespace) -> int:
    from vdoctor.evaluation.health import assess, plot

    _at_least(1, "--sample", args.sample)
    out = _plot_file(args.plot)
    store = _reading(domain_settings(args).memory.url)
    try:
        report = assess(Path(args.diagnoses), store, sample=args.sample)
    finally:
        store.close()
    print(report.render())
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        plot(report, out)
    except OSError as e:
        raise ConfigError(f"--plot {out}: cannot write it: {e.strerror or e}") from None
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
    settings = domain_settings(args)
    store = assembly.long_term_store(settings, existing=True)

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


def _cmd_reembed(args: argparse.Namespace) -> int:
    from vdoctor.memory.reembed import ReembedReport, reembed

    _at_least(1, "--batch", args.batch)
    _at_least(1, "--limit", args.limit)
    settings = domain_settings(args)
    store = assembly.long_term_store(settings, retrying=False, existing=True)

    def progress(report: ReembedReport) -> None:
        rate = report.rewritten / max(report.seconds, 1e-9)
        print(
            f"\r  {report.rewritten}/{report.stale_at_start} re-embedded ({rate:.1f}/s)",
            end="",
            file=sys.stderr,
            flush=True,
        )

    try:
        report = reembed(store, assembly.embedder(settings), batch=args.batch, limit=args.limit, progress=progress)
    finally:
        store.close()
    print(file=sys.stderr)
    print(report.render())
    return 0


def _cmd_retokenize(args: argparse.Namespace) -> int:
    from vdoctor.retrieval.tokens import TOKENIZER

    _at_least(1, "--batch", args.batch)
    url = domain_settings(args).memory.url
    # sqlite: opening a file retokenises it when its tokeniser is another
    store = open_store(url, existing=True)
    try:
        retokenize = getattr(store, "retokenize", None)
        if retokenize is None:
            print(f"the {url_scheme(url)}:// store keeps its tokens current itself (sqlite when a file opens, "
                  "memory:// and mem0:// when they search): nothing to rewrite")  # fmt: skip
            return 0

        def progress(checked: int, rewritten: int) -> None:
            print(f"\r  {checked} versions checked, {rewritten} rewritten", end="", file=sys.stderr, flush=True)

        checked, rewritten = retokenize(batch=args.batch, progress=progress)
    finally:
        store.close()
    print(file=sys.stderr)
    print(f"tokeniser {TOKENIZER}: {checked} record versions checked, {rewritten} rewritten")
    return 0


def _cmd_init(args: argparse.Namespace) -> int:
    settings = domain_settings(args)
    url = settings.memory.url
    store = open_store(url)
    try:
        init = getattr(store, "init_schema", None)
        if init is None:
            print(f"{url_scheme(url)} memory creates its schema when opened; nothing to apply")
            return 0
        # Vector indexes are sized for the configured embedder (Doris's ANN "dim"), without loading it.
        dim = assembly.embedder_dimension(settings)
        applied = init(dim)
        where = getattr(getattr(store, "info", None), "redacted", url_scheme(url))
    finally:
        store.close()
    embedder = settings.embedding.kind
    print(f"applied {', '.join(applied)} to {where} (vectors of {dim} dimensions: embedder {embedder})")
    return 0


def add_commands(sub: Any) -> None:
    """Add ``memory`` and ``knowledge`` to the ``vdoctor`` parser's sub-commands."""
    memory = sub.add_parser("memory", help="inspect and manage long-term memory").add_subparsers(
        dest="memory_command", required=True
    )
    hist = memory.add_parser("history", help="a vehicle's long-term records, newest first")
    hist.add_argument("--vin", required=True)
    hist.add_argument("--json", action="store_true")
    hist.add_argument("--memory", help=MEMORY_FLAG_HELP)
    hist.set_defaults(func=_cmd_history)

    rec = memory.add_parser("recall", help="what a new session of this vehicle would recall")
    rec.add_argument("--vin", required=True)
    rec.add_argument("--symptom", required=True)
    rec.add_argument("--series", help="vehicle series (default: from the vehicle's history)")
    rec.add_argument("--codes", nargs="*", help="trouble codes of the alert")
    rec.add_argument(
        "--as-of",
        help="event time the session opens at, ISO-8601 with a timezone (default now): only what was "
        "true then is recalled",
    )
    rec.add_argument("--json", action="store_true")
    rec.add_argument("--memory", help=MEMORY_FLAG_HELP)
    rec.set_defaults(func=_cmd_recall)

    check = memory.add_parser(
        "check-summary", help="check a summary text against a record's stored source (exit 0 faithful, 1 findings)"
    )
    check.add_argument("--vin", required=True)
    check.add_argument("--session-id", required=True, help="the session (or a session merged into the record)")
    check.add_argument("--summary", required=True, help="the summary text to check; - reads it from stdin")
    check.add_argument("--json", action="store_true")
    check.add_argument("--memory", help=MEMORY_FLAG_HELP)
    check.set_defaults(func=_cmd_check_summary)

    forget = memory.add_parser("forget", help="soft-delete a vehicle's records (scrapped or transferred)")
    forget.add_argument("--vin", required=True)
    forget.add_argument("--change", required=True, choices=["scrapped", "transferred"])
    forget.add_argument("--at", help="event time of the change, ISO-8601 with a timezone (default now)")
    forget.add_argument("--memory", help=MEMORY_FLAG_HELP)
    forget.set_defaults(func=_cmd_forget)

    waiting = memory.add_parser(
        "write-waiting",
        help="write the concluded cases waiting in the sessions of dead letters (tries stopped at 7 days, sessions "
        "set aside) to long-term memory, as the job's retry does; what is there already is left alone",
    )
    waiting.add_argument(
        "--letters", required=True, help="the job's dead_letters.jsonl (or a topic's dump); - for stdin"
    )
    waiting.add_argument("--json", action="store_true")
    waiting.add_argument("--memory", help=MEMORY_FLAG_HELP)
    waiting.set_defaults(func=_cmd_write_waiting)

    knowledge = sub.add_parser("knowledge", help="the knowledge base the agent's search_knowledge tool reads")
    ksub = knowledge.add_subparsers(dest="knowledge_command", required=True)
    load = ksub.add_parser("load", help="load a code table (CSV: code, description[, manufacturer]) as chunks")
    load.add_argument("--csv", required=True)
    load.add_argument("--scope", help="scope of every row (default dtc:generic or dtc:<MANUFACTURER>)")
    load.add_argument("--version", default="1", help="version label stored with the chunks")
    load.add_argument("--knowledge", help="knowledge URL (default sqlite:///.vdoctor/knowledge.db)")
    load.set_defaults(func=_cmd_knowledge_load)
    search = ksub.add_parser("search", help="hybrid search: BM25 and vector top-50 each, fused with code hits, top-5")
    search.add_argument("--query", required=True)
    search.add_argument("--scope")
    search.add_argument("--version")
    search.add_argument("--json", action="store_true")
    search.add_argument("--knowledge")
    search.set_defaults(func=_cmd_knowledge_search)
    rule_signals = ksub.add_parser(
        "signals",
        help="the signal names the knowledge pack's rules test, with their units and codes (for a "
        "fleet's signal map, VDOCTOR_SIGNAL_NAMES)",
    )
    rule_signals.add_argument("--json", action="store_true")
    rule_signals.set_defaults(func=_cmd_knowledge_signals)

    rex = memory.add_parser("reextract", help="re-summarize records written with older summary-prompt versions")
    rex.add_argument("--prompt-version", required=True, help="the version this build writes (resumable)")
    rex.add_argument("--summarizer", choices=["offline", "openai"])
    rex.add_argument("--memory", help=MEMORY_FLAG_HELP)
    rex.set_defaults(func=_cmd_reextract)

    reem = memory.add_parser(
        "reembed", help="re-embed records another embedder made with the configured one (resumable, with progress)"
    )
    reem.add_argument("--embedder", help="the embedder to re-embed with (default: configured)")
    reem.add_argument("--batch", type=int, default=64, help="record versions per embedder batch and store write")
    reem.add_argument("--limit", type=int, help="stop after this many versions (run again to go on)")
    reem.add_argument("--memory", help=MEMORY_FLAG_HELP)
    reem.set_defaults(func=_cmd_reembed)

    retok = memory.add_parser(
        "retokenize",
        help="rewrite the lexical tokens of every record version in a Doris or MySQL store with this build's "
        "tokeniser (after an upgrade that changed it; resumable, with progress)",
    )
    retok.add_argument("--batch", type=int, default=500, help="record versions per read")
    retok.add_argument("--memory", help=MEMORY_FLAG_HELP)
    retok.set_defaults(func=_cmd_retokenize)

    health = memory.add_parser("health", help="score how relevant recalled memories were to the final diagnoses")
    health.add_argument("--diagnoses", required=True, help="the job's diagnoses.jsonl (the recall log)")
    health.add_argument("--sample", type=int, default=500, help="concluded sessions with memory to sample")
    health.add_argument(
        "--plot",
        default=DEFAULT_PLOT,
        help=f"where to write the PNG plot (default {DEFAULT_PLOT}; a folder: {DEFAULT_PLOT} in it)",
    )
    health.add_argument("--memory", help=MEMORY_FLAG_HELP)
    health.set_defaults(func=_cmd_health)

    init = memory.add_parser("init", help="apply the versioned DDL in sql/ to a Doris or MySQL database")
    init.add_argument(
        "--memory",
        help=f"doris://user:password@host:9030/db or mysql://user:password@host:3306/db; {MEMORY_ENV_NOTE}",
    )
    init.add_argument("--embedder", help="the embedder whose dimension vector indexes get (default: configured)")
    init.set_defaults(func=_cmd_init)
