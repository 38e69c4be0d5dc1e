"""Engine CPU per alert, by stage: where a diagnosis run's Python time goes, model time shown apart.

The engine runs in this process over a generated fleet (`scripts/gen_demo.py
--vins N`, seeded), one event at a time in file order, as the diagnosis
operator runs it: the event parsed from JSON, the vehicle's session and dedup
read from the JSON its last event stored, ``DiagnosisEngine.on_event``, the new
session, dedup and diagnoses written as JSON, and the operator's pending list
read and written. The long-term store is a fresh SQLite file, the knowledge
store in memory.

The operator reads a vehicle's session from its keyed state whenever the
vehicle has no chain of runs in its run pool, which is every alert of a fleet
whose vehicles report minutes apart: a chain ends once its runs are done. With
``--chained`` each vehicle's session is carried from one event to the next as
live objects instead, as for a vehicle whose alerts follow each other within
one chain; earlier releases measured that way only.

Every stage's functions are wrapped with a clock (thread CPU time, each
stage's own time: a nested stage's time is its own, not its caller's):

- model: the chat model's ``chat`` (opaque: what it calls inside is the
  model's). ``--model offline`` (default): the offline model's decision,
  shown apart. ``--model openai``: the ``openai`` client over HTTP against the
  local model server answering at once in its own process, so its time here is
  the HTTP client and the reply's parsing.
- prompt assembly (build_window, WorkingMemory.fit, the window before each later call), token counting
  (the counter's ``count``), fact extraction (the key-fact readers), working
  memory upkeep (adding and folding rounds), recall (query, ranking,
  rendering), embedding, store I/O (every public method of the store), case
  summary and fidelity check, tools, knowledge search, state
  (de)serialisation, pending-list bookkeeping, and the rest of the engine.

A target that no longer exists (renamed in a refactor) is reported and
skipped; its time then shows under "engine, other".

    .venv/bin/python bench/engine_cpu.py                     # 600 vehicles, offline model (~1 minute)
    .venv/bin/python bench/engine_cpu.py --model openai --vins 300
    .venv/bin/python bench/engine_cpu.py --workload concurrency --vins 300   # bench/concurrency.py's alerts
    .venv/bin/python bench/engine_cpu.py --embed-child       # the embedding model in its child process, as in the job
    .venv/bin/python bench/engine_cpu.py --dedup-ids 2048    # busy vehicles: each one's dedup state already full

By default the embedding model runs in this process, so its CPU is in the
"embedding" stage. With ``--embed-child`` it runs in its child process, as
the job runs it: the stage is then the interpreter's side of each call
(the shared calls, the query cache, the pipe), and the child's CPU over the
same events is printed apart.

``--pin same`` runs this process and the embedding child on core 0, ``--pin apart`` this process on core 0
and the child on core 1 (each run without clocks too); by default they run where the scheduler puts them, as
the job's do. The interpreter waits for the child at every embedding call, so where the child runs changes
what the interpreter finds in the core's caches when it goes on (README, below `bench/core_neighbour.py`).

    .venv/bin/python bench/engine_cpu.py --embed-child --pin same

The cyclic garbage collector is set as the job's diagnosis operator sets it
once its engine is built (``vdoctor.runs.tune_gc_for_runs``: what is loaded
is frozen out of collections, young collections every 20,000 objects);
``--default-gc`` keeps Python's defaults.

The same run goes first without any clock, ``--repeat`` times (3), each in a
fresh process: the median of their process CPU per alert, each less its own
model's time (one clock, around the model's ``chat``), is the engine's total
without the clocks' own cost (printed below the table, with the range). One
run is not enough: on the
2-core development machine the same run's figure moved by a quarter from one
run to the next, a minute apart, with the machine otherwise idle, while a
fixed cache-sized Python workload (``bench/machine_speed.py``, printed
before and after) stayed within a few per cent.

The interpreter and its configure flags are printed with the figure: a
CPython configured with ``--enable-optimizations`` (profile-guided) and
``--with-lto``, as the official ``python`` images are (this project's Flink
image is ``python:3.11-slim-bookworm``), runs the reference workload about a
quarter faster than one without, as pyenv builds by default, but the engine
only ~5% faster (README, *Engine CPU per alert*). ``--python PATH`` (again
for more) runs the same runs without clocks under other interpreters too,
alternating with this one's, each with this project installed
(``scripts/install/python-release.sh`` makes such a venv); each one's median
is printed on a line of its own.

    .venv/bin/python bench/engine_cpu.py --embed-child --python .venv-release/bin/python

Every event the generated fleet holds is valid, so none may fail in the
engine: a run where one goes to the dead letters did less work than the
fleet asks, and the bench stops (exit 2) with the count and the first error
instead of giving a figure.

Prints the table and writes out/bench/engine_cpu.json. Not a model of
throughput under Flink: the operator's own per-run cost (timer callbacks,
state access) is measured by bench/concurrency.py.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.machine_speed import reference_ms  # noqa: E402
from bench.procstat import children_cpu_s, pin_tree, process_children  # noqa: E402

MODEL = "model"
OTHER = "engine, other"
SERDE = "state (de)serialisation"
PENDING = "pending-list bookkeeping"
STORE = "store I/O"


class StageClock:
    """Thread CPU time per stage, each stage counting only its own time (not its nested stages')."""

    def __init__(self) -> None:
        self.own: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self._stack: list[list[Any]] = []  # [stage, started, time of nested stages, opaque]

    def enter(self, stage: str, opaque: bool = False) -> None:
        self._stack.append([stage, time.thread_time(), 0.0, opaque])

    def leave(self) -> None:
        stage, started, nested, _ = self._stack.pop()
        elapsed = time.thread_time() - started
        self.own[stage] += elapsed - nested
        self.calls[stage] += 1
        if self._stack:
            self._stack[-1][2] += elapsed

    def inside_opaque(self) -> bool:
        return bool(self._stack) and self._stack[-1][3]

    def wrap(self, fn: Callable[..., Any], stage: str, opaque: bool = False) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.inside_opaque():
                return fn(*args, **kwargs)
            self.enter(stage, opaque)
            try:
                return fn(*args, **kwargs)
            finally:
                self.leave()

        timed.__wrapped_by_stage__ = stage  # type: ignore[attr-defined]
        return timed


class NoClock(StageClock):
    """The loop's own stages, not timed (``--no-stages``)."""

    def enter(self, stage: str, opaque: bool = False) -> None:
        pass

    def leave(self) -> None:
        pass


@dataclass(frozen=True)
class PlainRun:
    """One run without stage clocks: its process CPU and its model's own time per alert, and the interpreter's."""

    process_ms: float
    model_ms: float
    interpreter: str
    reference_ms: float

    @property
    def engine_ms(self) -> float:
        return self.process_ms - self.model_ms


def without_stages(argv: list[str], store: Path | None = None, run: int = 0, python: str | None = None) -> PlainRun:
    """The same run in a fresh interpreter with no stage clocks (with ``--store``, on a file of its own beside
    the one named: ``PATH.plainK`` for the K-th of these runs, which the same run of a process sharing the
    store shares too). ``python``: another interpreter to run it (one with this project installed)."""
    if store is not None:
        argv = [*argv, "--store", f"{store}.plain{run}"]  # the last --store given is the one taken
    command = [python or sys.executable, __file__, *argv, "--no-stages"]
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise SystemExit(f"a run without stage clocks failed (exit {done.returncode}): {said[-1] if said else ''}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return PlainRun(
        float(found["process_ms_per_alert"]), float(found.get("model_ms_per_alert", 0.0)),
        str(found.get("interpreter", "")), float(found.get("reference_ms", 0.0)),
    )  # fmt: skip


def spread(values: list[float], unit: str = "", label: str = "") -> str:
    """Runs' figures as their median and range: ``1.742 ms/alert (1.665-1.762)`` (``unit`` after the median,
    ``label`` before the range)."""
    return f"{statistics.median(values):.3f}{unit} ({label}{min(values):.3f}-{max(values):.3f})"


def cores(pid: int) -> str:
    """The cores a process may run on, as read back (``--pin``): ``0``, ``0,1``."""
    return ",".join(str(core) for core in sorted(os.sched_getaffinity(pid)))


def strip_python_args(argv: list[str]) -> list[str]:
    """``argv`` without its ``--python PATH`` (or ``--python=PATH``): what a run without clocks is given."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--python":
            skip = True
        elif not arg.startswith("--python="):
            kept.append(arg)
    return kept


def model_timer(chat: Callable[..., Any], total: list[float]) -> Callable[..., Any]:
    """``chat`` adding its thread CPU time to ``total[0]``: the model's own time, in a run without stage clocks."""

    @functools.wraps(chat)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return chat(*args, **kwargs)
        finally:
            total[0] += time.thread_time() - started

    return timed


def interpreter() -> str:
    """This interpreter, and the build flags that change its speed (from its configure arguments).

    A CPython configured with ``--enable-optimizations`` (profile-guided) and ``--with-lto`` runs plain
    Python faster than one without: the official ``python`` images (this project's Flink image is
    ``python:3.11-slim-bookworm``) are built so, a pyenv build by default is not. A distribution's
    interpreter may be optimised by its own build rules without these arguments (Debian's is).
    """
    configured = str(sysconfig.get_config_var("CONFIG_ARGS") or "")
    flags = [flag for flag in ("--enable-optimizations", "--with-lto", "--enable-shared") if flag in configured]
    return (
        f"{platform.python_implementation()} {platform.python_version()} at {sys.executable}, configured with "
        f"{' '.join(flags) if flags else 'none of --enable-optimizations, --with-lto, --enable-shared'}"
    )


def _resolve(path: str) -> tuple[Any, str, Any] | None:
    """``pkg.module:Class.attr`` or ``pkg.module:func`` -> (owner, attribute name, value), or None."""
    module_name, _, qual = path.partition(":")
    try:
        owner: Any = importlib.import_module(module_name)
    except ImportError:
        return None
    *parents, name = qual.split(".")
    for part in parents:
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    value = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    return None if value is None else (owner, name, value)


def instrument(clock: StageClock, targets: dict[str, list[str]]) -> list[str]:
    """Wrap every target where it is defined and wherever a vdoctor module imported it by name."""
    missing = []
    for stage, paths in targets.items():
        for path in paths:
            found = _resolve(path)
            if found is None:
                missing.append(f"{stage}: {path}")
                continue
            owner, name, value = found
            timed = clock.wrap(value, stage)
            setattr(owner, name, timed)
            if not isinstance(owner, type):
                for module in list(sys.modules.values()):
                    if getattr(module, "__name__", "").startswith("vdoctor") and module.__dict__.get(name) is value:
                        setattr(module, name, timed)
    return missing


# Stage -> functions, by where they are defined (module:qualified name).
TARGETS: dict[str, list[str]] = {
    "prompt assembly": [
        "vdoctor.agent.prompt:build_window", "vdoctor.memory.working:WorkingMemory.fit",
        "vdoctor.agent.window:ContextWindow.before_call",
    ],
    "fact extraction": [
        "vdoctor.memory.facts:extract_text_facts", "vdoctor.memory.facts:extract_tool_facts",
        "vdoctor.memory.facts:extract_answer_facts", "vdoctor.memory.facts:dedupe",
        "vdoctor.memory.working:extract_key_facts", "vdoctor.memory.working:_text_facts",
    ],
    "working memory upkeep": [
        "vdoctor.memory.working:WorkingMemory.add_round", "vdoctor.memory.working:WorkingMemory.add_facts",
        "vdoctor.memory.working:WorkingMemory.compress_oldest_half", "vdoctor.memory.working:WorkingMemory.end_stage",
        "vdoctor.memory.working:WorkingMemory.close_session", "vdoctor.memory.working:WorkingMemory._fold",
    ],
    "recall (query, ranking, rendering)": ["vdoctor.memory.recall:SessionRecall.for_alert"],
    "case summary + fidelity check": [
        "vdoctor.memory.summary:summarize_case", "vdoctor.memory.summary:milestone_summary",
        "vdoctor.memory.fidelity:check_summary",
    ],
    "tools": ["vdoctor.agent.tools:Toolbox.call"],
    # The stored session, read by the engine when its alert continues it (the operator hands it over unread).
    # The stored dedup ids, checked and extended as text (parsed only for an id or text of another shape).
    SERDE: ["vdoctor.memory.session:StoredSession.load", "vdoctor.memory.session:StoredSession.accepts_alert_at",
            "vdoctor.memory.session:StoredDedup.check_and_add", "vdoctor.memory.session:StoredDedup.load"],
    "knowledge search": ["vdoctor.knowledge.search:KnowledgeBase.search"],
}  # fmt: skip


def parse_part(text: str) -> tuple[int, int]:
    """``K/N`` as (K, N), 0 <= K < N."""
    k, _, n = text.partition("/")
    try:
        part = int(k), int(n)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected K/N (e.g. 0/2), got {text!r}") from None
    if not 0 <= part[0] < part[1]:
        raise argparse.ArgumentTypeError(f"expected 0 <= K < N, got {text!r}")
    return part


def in_part(lines: list[str], k: int, n: int) -> list[str]:
    """The lines of the vehicles of part ``k`` of ``n`` (crc32 of the VIN); a line with no VIN read is in part 0."""
    if n == 1:
        return lines
    kept = []
    for line in lines:
        try:
            vin = json.loads(line).get("vin")
        except (ValueError, AttributeError):
            vin = None
        if (part_of(vin, n) if isinstance(vin, str) else 0) == k:
            kept.append(line)
    return kept


def split_misses(queries: list[tuple[str, str]], parts: int) -> int:
    """How many of ``queries`` (vin, text) a model embeds when the vehicles are split over ``parts`` processes by
    VIN, as a keyed stream splits them, each process with a query cache of its own that never evicts: the distinct
    texts of each part, summed."""
    return sum(len({t for v, t in queries if part_of(v, parts) == k}) for k in range(parts))


def part_of(vin: str, parts: int) -> int:
    """Which of ``parts`` parts a vehicle is in: crc32 of its VIN (stable across runs, as Flink's key groups are)."""
    return zlib.crc32(vin.encode()) % parts


def earlier_ids(lines: list[str], n: int) -> dict[str, str]:
    """Each vehicle's dedup state (its JSON) holding ``n`` ids of events before the fleet's, a minute apart.

    The ids are shaped like the fleet's (``e-`` and digits) but one digit longer, so none is a fleet event's.
    """
    from vdoctor.memory.session import DedupState

    if n <= 0:
        return {}
    vins: set[str] = set()
    for line in lines:
        try:
            vins.add(json.loads(line)["vin"])
        except (ValueError, KeyError, TypeError):
            continue  # a line the parse stage rejects
    start = int(datetime(2026, 8, 1, tzinfo=UTC).timestamp())
    return {
        vin: DedupState(seen={f"e-{(v * n + k) % 10**7:07d}": start + 60 * k for k in range(n)}).model_dump_json()
        for v, vin in enumerate(sorted(vins))
    }


def instrument_parts(clock: StageClock, engine: Any, model_stage: str) -> None:
    """The engine's own parts: its model (opaque), counter, embedder and store, by their classes or instance."""
    engine.model.chat = clock.wrap(engine.model.chat, model_stage, opaque=True)
    counter_cls = type(engine.counter)
    counter_cls.count = clock.wrap(counter_cls.count, "token counting")
    embedder_cls = type(engine.embedder)
    embedder_cls.embed = clock.wrap(embedder_cls.embed, "embedding")
    embedder_cls.embed_queries = clock.wrap(embedder_cls.embed_queries, "embedding")
    store = engine.store  # the outermost store: what the engine calls (a retrying wrapper calls its inner one)
    for name in dir(type(store)):
        if not name.startswith("_") and callable(getattr(type(store), name, None)):
            setattr(store, name, clock.wrap(getattr(store, name), f"{STORE}: {name}"))


def build(model: str, db: Path, base_url: str | None, embedder: str, embed_child: bool = False) -> Any:
    from vdoctor.assembly import build_engine
    from vdoctor.settings import load_settings

    env = {"VDOCTOR_MEMORY_URL": f"sqlite:///{db}", "VDOCTOR_KNOWLEDGE_URL": "memory://", "VDOCTOR_MODEL": model,
           # By default the embedding model runs in this process (not in the job's child process), so
           # that its CPU (this bench) and its memory (bench/engine_memory.py) are counted here.
           "VDOCTOR_EMBED_CHILD_PROCESS": "true" if embed_child else "false"}  # fmt: skip
    if embedder:
        env["VDOCTOR_EMBEDDER"] = embedder
    if base_url:
        env |= {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "bench-key-not-secret"}
    return build_engine(load_settings(env))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vins", type=int, default=600, help="fleet size")
    parser.add_argument("--workload", choices=["fleet", "concurrency"], default="fleet",
                        help="fleet: scripts/gen_demo.py's generated fleet; concurrency: bench/concurrency.py's "
                             "alerts (4 per vehicle, one code, 2 model calls per run)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--model", choices=["offline", "openai"], default="offline")
    parser.add_argument("--embedder", default="", help="VDOCTOR_EMBEDDER for the engine (default: the product's)")
    parser.add_argument("--embed-child", action="store_true",
                        help="the embedding model in its child process, as the job runs it: the engine's figures "
                             "are then this interpreter's, and the child's CPU is printed apart")  # fmt: skip
    parser.add_argument("--chained", action="store_true",
                        help="carry each vehicle's session and dedup from one event to the next as live objects "
                             "(no state read), as earlier releases measured")  # fmt: skip
    parser.add_argument("--dedup-ids", type=int, default=0, metavar="N",
                        help="each vehicle's stored dedup state holds N earlier event ids at its first event (a busy "
                             "vehicle: the state keeps up to MAX_DEDUP_IDS = 2048)")  # fmt: skip
    parser.add_argument("--default-gc", action="store_true",
                        help="Python's default cyclic GC settings instead of the job's (tune_gc_for_runs)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench")
    parser.add_argument("--no-stages", action="store_true",
                        help="no stage clocks: print only the process CPU per alert as JSON (the main run does this "
                             "first, in a fresh interpreter, for the total without the clocks' own cost)")  # fmt: skip
    parser.add_argument("--part", type=parse_part, default=(0, 1), metavar="K/N",
                        help="only the vehicles of part K of N (by crc32 of the VIN, as a keyed stream splits a "
                             "fleet over N subtasks; lines without one go to part 0): run N of these at once, with "
                             "--store, to measure N TaskManagers sharing one store without Flink")  # fmt: skip
    parser.add_argument("--store", type=Path, default=None, metavar="PATH",
                        help="the SQLite file of the long-term store (default: a fresh one of this run); another "
                             "run given the same file shares it")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3, metavar="N",
                        help="how many times the run without stage clocks goes, each in a fresh process (its "
                             "median is the figure, with the range): the same run's CPU per alert varies by a "
                             "quarter from one run to the next on a shared machine")  # fmt: skip
    parser.add_argument("--pin", choices=["same", "apart"], default=None,
                        help="pin this process to core 0 and the embedding child (--embed-child) to core 0 as well "
                             "(same) or to core 1 (apart); default: where the scheduler puts them, as the job "
                             "runs")  # fmt: skip
    parser.add_argument("--python", action="append", default=[], metavar="PATH",
                        help="also run the runs without stage clocks under this interpreter (a Python with this "
                             "project installed, e.g. another venv's bin/python), alternating with this one's: the "
                             "same engine on another build of Python, side by side; may be given again")  # fmt: skip
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.pin is not None:
        if (os.cpu_count() or 1) < 2:
            parser.error("--pin needs cores 0 and 1")
        pin_tree(os.getpid(), {0})  # (its children, the embedding child among them, start there too)
    speed_before = 0.0 if args.no_stages else reference_ms()
    pythons: list[str | None] = [None, *args.python]
    runs_of: dict[str | None, list[PlainRun]] = {python: [] for python in pythons}
    forwarded = strip_python_args(sys.argv[1:] if argv is None else argv)
    for run in range(0 if args.no_stages else args.repeat):
        for i, python in enumerate(pythons):
            print(f"run {run + 1} of {args.repeat} without the stage clocks{f' ({python})' if python else ''} ...",
                  file=sys.stderr, flush=True)  # fmt: skip
            runs_of[python].append(without_stages(forwarded, args.store, run * len(pythons) + i, python))
    plain_runs = runs_of[None]
    plain_ms = statistics.median(r.process_ms for r in plain_runs) if plain_runs else 0.0

    from vdoctor.errors import EventError
    from vdoctor.events import EVENT_ADAPTER, AlertEvent, parse_event
    from vdoctor.memory.session import DedupState, StoredDedup, StoredSession
    from vdoctor.runs import tune_gc_for_runs

    clock = NoClock() if args.no_stages else StageClock()
    model_stage = "HTTP client + reply parsing" if args.model == "openai" else f"{MODEL} (offline decision)"
    server = None
    with tempfile.TemporaryDirectory(prefix="vdoctor-engine-cpu-") as tmp:
        work = Path(tmp)
        fleet = work / "fleet.jsonl"
        if args.workload == "concurrency":
            from bench.concurrency import write_alerts

            write_alerts(fleet, args.vins)
        else:
            subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gen_demo.py"), "--out", str(fleet), "--vins",
                            str(args.vins), "--seed", str(args.seed)], check=True, capture_output=True)  # fmt: skip
        base_url = None
        if args.model == "openai":
            server = subprocess.Popen([sys.executable, "-m", "devtools.model_server", "--latency-ms", "0"],
                                      cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)  # fmt: skip
            base_url = (server.stdout.readline() if server.stdout else "").split()[-1]
        try:
            engine = build(args.model, args.store or work / "memory.db", base_url, args.embedder, args.embed_child)
            if not args.default_gc:
                tune_gc_for_runs()  # as the job's operator does once its engine is built (runs in flight)
            not_embedding = {server.pid} if server is not None else set()
            placed = ""
            if args.pin is not None:
                embedding = [pid for pid in process_children().get(os.getpid(), []) if pid not in not_embedding]
                for pid in embedding if args.pin == "apart" else []:
                    pin_tree(pid, {1})
                placed = ", this process on core " + cores(os.getpid()) + ", the embedding child on core " + (
                    " and ".join(cores(pid) for pid in embedding) or "(none)"
                )
            missing: list[str] = []
            if not args.no_stages:
                missing = instrument(clock, TARGETS)
                instrument_parts(clock, engine, model_stage)
            lines = in_part(fleet.read_text(encoding="utf-8").splitlines(), *args.part)
            carries: dict[str, tuple[Any, Any]] = {}  # --chained: live objects
            stored: dict[str, tuple[str | None, str | None]] = {}  # otherwise: what the state holds, as JSON
            pending: dict[str, list[str]] = {}
            for vin, dedup_json in earlier_ids(lines, args.dedup_ids).items():
                stored[vin] = (None, dedup_json)
                carries[vin] = (None, DedupState.model_validate_json(dedup_json))
            # Every query text the query cache is asked for, with the vehicle asking (the split below).
            queries: list[tuple[str, str]] = []
            vin_now = [""]
            if hasattr(engine.embedder, "hits"):
                asked = engine.embedder.embed_queries

                def recording(texts: list[str]) -> Any:
                    queries.extend((vin_now[0], t) for t in texts)
                    return asked(texts)

                engine.embedder.embed_queries = recording
            model_own = [0.0]  # without the stage clocks, the model's own time still comes off the engine's
            if args.no_stages:
                engine.model.chat = model_timer(engine.model.chat, model_own)
            alerts = events = 0
            failures: list[str] = []  # the engine's dead letters: events whose work the run did not do
            cpu0, wall0 = time.process_time(), time.perf_counter()
            child0 = children_cpu_s(os.getpid(), exclude=not_embedding)
            for line in lines:
                try:
                    event = parse_event(line)
                except EventError:
                    continue  # a dead letter of the parse stage: not the engine's work
                events += 1
                alerts += isinstance(event, AlertEvent)
                event_json = event.model_dump_json()
                clock.enter(PENDING)  # the operator appends the event to the vehicle's pending list...
                entries = [*pending.get(event.vin, []), json.dumps([event_json, line], ensure_ascii=False)]
                pending[event.vin] = entries
                _ = "[" + ",".join(entries) + "]"  # the state's value (operators/diagnosis.py)
                clock.leave()
                clock.enter(OTHER)
                clock.enter(SERDE)
                parsed = EVENT_ADAPTER.validate_json(event_json)
                if args.chained:
                    session, dedup = carries.get(event.vin, (None, DedupState()))
                else:  # the operator's _carry_from_state
                    session_json, dedup_json = stored.get(event.vin, (None, None))
                    session = StoredSession(session_json) if session_json else None
                    dedup = StoredDedup(dedup_json) if dedup_json else DedupState()
                clock.leave()
                vin_now[0] = event.vin
                result = engine.on_event(session, dedup, parsed, line)
                if result.dead_letters:
                    failures += [x.error for x in result.dead_letters]
                clock.enter(SERDE)
                session_json = result.session.model_dump_json() if result.session is not None else None
                dedup_json = result.dedup.model_dump_json()
                _ = [d.model_dump_json() for d in result.diagnoses] + [x.model_dump_json() for x in result.dead_letters]
                clock.leave()
                clock.leave()
                if args.chained:
                    carries[event.vin] = (result.session, result.dedup)
                else:
                    stored[event.vin] = (session_json, dedup_json)
                clock.enter(PENDING)  # ... and drops it when the result is applied
                rest = pending[event.vin][1:]
                pending[event.vin] = rest
                _ = "[" + ",".join(rest) + "]" if rest else None
                clock.leave()
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            child = children_cpu_s(os.getpid(), exclude=not_embedding) - child0
            engine.close()
        finally:
            if server is not None:
                server.terminate()
                server.communicate()

    if failures:
        # An event that fails costs less than one diagnosed: a run with failures would report a lower figure for
        # less work (a build whose engine raised on half the alerts once looked a third faster).
        print(f"{len(failures)} of {events} events failed in the engine and went to the dead letters (the first: "
              f"{failures[0]}); a run that skips their work gives no figure", file=sys.stderr)  # fmt: skip
        return 2
    speed_after = 0.0 if args.no_stages else reference_ms()
    if args.no_stages:
        print(json.dumps({"process_ms_per_alert": cpu / alerts * 1000, "child_ms_per_alert": child / alerts * 1000,
                          "model_ms_per_alert": model_own[0] / alerts * 1000, "alerts": alerts,
                          "interpreter": interpreter(), "reference_ms": reference_ms()}))  # fmt: skip
        return 0
    model_s = sum(v for k, v in clock.own.items() if k == model_stage)
    engine_s = sum(v for k, v in clock.own.items() if k != model_stage)
    own: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for k, v in clock.own.items():
        if k != model_stage:
            own[k.split(":")[0]] += v
            calls[k.split(":")[0]] += clock.calls[k]
    store_rows = sorted(((k, v) for k, v in clock.own.items() if k.startswith(f"{STORE}:")), key=lambda kv: -kv[1])
    print(f"\nengine CPU per alert by stage: {args.workload} workload, {args.vins} vehicles, {events} events "
          f"({alerts} alerts), model "
          f"{args.model}, embedder {engine.embedder.name}, one thread, "
          f"{'sessions carried live (--chained)' if args.chained else 'sessions read from their stored JSON'}"
          f"{placed}; "
          f"{os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{'stage':<36} {'ms/alert':>9} {'share':>6} {'calls/alert':>11}")
    for stage, seconds in own.most_common():
        print(f"{stage:<36} {seconds / alerts * 1000:>9.3f} {seconds / engine_s:>6.1%} {calls[stage] / alerts:>11.1f}")
        if stage == STORE:
            for name, sub in store_rows[:6]:
                print(f"{'  ' + name.split(': ')[1]:<36} {sub / alerts * 1000:>9.3f} {sub / engine_s:>6.1%} "
                      f"{clock.calls[name] / alerts:>11.1f}")  # fmt: skip
    print(f"{'engine total (model excluded)':<36} {engine_s / alerts * 1000:>9.3f}")
    print(f"{model_stage:<36} {model_s / alerts * 1000:>9.3f}   (shown apart)")
    print(f"process CPU {cpu / alerts * 1000:.3f} ms/alert (clock overhead included), wall {wall:.1f} s")
    plain_engine = [r.engine_ms for r in plain_runs]
    plain_engine_ms = statistics.median(plain_engine)
    process = spread([r.process_ms for r in plain_runs], " ms/alert", "median; ")
    print(f"without the stage clocks (the same run, {len(plain_runs)} times first, each in a fresh process): process "
          f"CPU {process}, engine {spread(plain_engine)} with each run's own model time taken off "
          f"({1000 / plain_engine_ms:.0f} alerts/s per core)")  # fmt: skip
    print(f"interpreter: {interpreter()}")
    if len(pythons) > 1:
        print(
            f"the same runs under each interpreter, alternating, {args.repeat} each (median and range; engine is "
            f"process CPU less the run's own model time; reference: bench/machine_speed.py in the same process):"
        )
        for python in pythons:
            runs = runs_of[python]
            engine_runs = [r.engine_ms for r in runs]
            model_ms = statistics.median(r.model_ms for r in runs)
            reference = statistics.median(r.reference_ms for r in runs)
            per_core = 1000 / statistics.median(engine_runs)
            print(f"  engine {spread(engine_runs, ' ms/alert')}, {per_core:.0f} alerts/s per core; model "
                  f"{model_ms:.3f}; reference {reference:.1f} ms; {runs[0].interpreter}")  # fmt: skip
    print(f"alerts/s per core: {alerts / engine_s:.0f} engine only, {alerts / (engine_s + model_s):.0f} with the model")
    print(f"this core's speed at a fixed Python workload (bench/machine_speed.py, lower is faster): "
          f"{speed_before:.1f} ms before the runs, {speed_after:.1f} ms after")  # fmt: skip
    if args.embed_child:
        print(f"the embedding child process (not in the figures above): {child / alerts * 1000:.3f} ms CPU per alert")
    cache = engine.embedder
    if hasattr(cache, "hits") and hasattr(cache, "misses") and cache.hits + cache.misses:
        share = cache.hits / (cache.hits + cache.misses)
        print(f"query vectors from the cache (embedders/cache.py): {cache.hits} of {cache.hits + cache.misses} "
              f"queries ({share:.0%}); the others embedded by the model")  # fmt: skip
    if getattr(cache, "shared", None) is not None:
        print(f"query vectors from the query vector file (embedders/query_file.py): {cache.shared_hits} of the "
              f"{cache.misses} this process had not kept")  # fmt: skip
    if queries:
        print(f"the same queries, the fleet split by VIN (crc32) over N processes (TaskManagers) with a query cache "
              f"each: the model embeds {split_misses(queries, 1)} (N=1), {split_misses(queries, 2)} (N=2), "
              f"{split_misses(queries, 4)} (N=4), without evictions")  # fmt: skip
    for m in missing:
        print(f"note: not found (renamed?), its time is in '{OTHER}': {m}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "engine_cpu.json").write_text(json.dumps({
        "workload": args.workload, "vins": args.vins, "events": events, "alerts": alerts, "model": args.model,
        "ms_per_alert": {k: v / alerts * 1000 for k, v in own.items()},
        "store_ms_per_alert": {k: v / alerts * 1000 for k, v in store_rows},
        "calls_per_alert": {k: v / alerts for k, v in clock.calls.items()},
        "engine_ms_per_alert": engine_s / alerts * 1000, "model_ms_per_alert": model_s / alerts * 1000,
        "alerts_per_s_per_core": alerts / engine_s, "missing": missing,
        "without_stage_clocks": {"process_ms_per_alert": plain_ms, "engine_ms_per_alert": plain_engine_ms,
                                 "process_ms_per_alert_runs": [r.process_ms for r in plain_runs],
                                 "engine_ms_per_alert_runs": plain_engine},
        "interpreters": [{"interpreter": runs[0].interpreter, "python": python or sys.executable,
                          "engine_ms_per_alert_runs": [r.engine_ms for r in runs],
                          "model_ms_per_alert_runs": [r.model_ms for r in runs],
                          "reference_ms_runs": [r.reference_ms for r in runs]}
                         for python, runs in runs_of.items()],
        "embed_child": args.embed_child, "child_ms_per_alert": child / alerts * 1000, "chained": args.chained,
        "reference_ms": {"before": speed_before, "after": speed_after},
    }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
