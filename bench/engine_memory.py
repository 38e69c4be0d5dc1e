"""Where the engine's memory goes over a long run: resident memory, malloc, sqlite and Python, by event.

The engine in this process behind the operator's own run pool
(``vdoctor.runs.KeyedRunPool``, ``--threads`` workers, 64 like the job's
default concurrency) over a generated fleet (`scripts/gen_demo.py`), the
embedded store and the offline model. Each vehicle's memory is kept between
its runs as JSON, as the state backend keeps it, so the objects that stay in
this process are the engine's and the store's own. Every ``--every`` events
it prints:

- resident memory of the process;
- malloc in use (glibc ``mallinfo2``: what native code and Python's large
  objects hold);
- sqlite's own memory (``sqlite3_memory_used``: page caches, schemas and the
  prepared statements each read connection keeps);
- the keyed state as JSON (what the state backend would hold, outside this
  process in the job);
- the embedded store's read connections (as many as statements ran at once).

With ``--tracemalloc`` it also prints the Python allocations that grew most
between the first and the last sample, by line (slow: ~4x the run time).
With ``--trim`` it gives malloc's free pages back to the system at each sample
(``malloc_trim``) and measures resident memory again: what of it was free room.
The job's diagnosis operator trims once a minute (``vdoctor.malloc_trim``,
``VDOCTOR_MALLOC_TRIM_S``); this bench trims only with ``--trim``.

Run it with the job's malloc setting, ``MALLOC_ARENA_MAX=2``, which glibc
reads when the process starts (``jobs/flink_env.py`` sets it for the Flink
JVM the same way):

    MALLOC_ARENA_MAX=2 .venv/bin/python bench/engine_memory.py [--vins 4000] [--embedder use-m3]

Writes out/bench/engine_memory.json and, with ``--plot``, a PNG.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.engine_cpu import build  # noqa: E402
from bench.procstat import tree_rss_mb  # noqa: E402
from vdoctor.errors import EventError  # noqa: E402
from vdoctor.events import EVENT_ADAPTER, parse_event  # noqa: E402
from vdoctor.memory.session import DedupState, SessionState  # noqa: E402
from vdoctor.runs import KeyedRunPool  # noqa: E402

# Items waiting in the pool before the feeder waits: enough to keep every worker busy.
MAX_QUEUED = 300


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


def _native() -> tuple[Any, Any]:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.mallinfo2.restype = _Mallinfo2
    sqlite = ctypes.CDLL(ctypes.util.find_library("sqlite3"))
    sqlite.sqlite3_memory_used.restype = ctypes.c_int64
    return libc, sqlite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vins", type=int, default=4000, help="fleet size for scripts/gen_demo.py")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--threads", type=int, default=64, help="run-pool workers (the job's concurrency)")
    parser.add_argument("--embedder", default="", help="VDOCTOR_EMBEDDER (default: the product's)")
    parser.add_argument("--every", type=int, default=1000, help="sample every this many events")
    parser.add_argument("--tracemalloc", action="store_true", help="also print the Python lines that grew most")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench")
    parser.add_argument("--plot", type=Path, help="write a PNG of the samples here")
    parser.add_argument("--trim", action="store_true",
                        help="at each sample also give glibc's free pages back (malloc_trim) and measure "
                             "again: what of the resident memory is malloc's free room")  # fmt: skip
    args = parser.parse_args(argv)

    libc, sqlite = _native()
    if os.environ.get("MALLOC_ARENA_MAX") != "2":
        print("[engine_memory] note: MALLOC_ARENA_MAX is not 2 here, unlike the job", file=sys.stderr)
    samples: list[dict[str, float]] = []
    carries: dict[str, tuple[str | None, str]] = {}

    with tempfile.TemporaryDirectory(prefix="vdoctor-engine-memory-") as tmp:
        work = Path(tmp)
        fleet = work / "fleet.jsonl"
        subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gen_demo.py"), "--out", str(fleet), "--vins",
                        str(args.vins), "--seed", str(args.seed)], check=True, capture_output=True)  # fmt: skip
        engine = build("offline", work / "memory.db", None, args.embedder)

        def step(vin: str, carry: tuple[str | None, str] | None, item: tuple[str, str]) -> tuple[Any, None]:
            session_json, dedup_json = carry or (None, "")
            session = SessionState.model_validate_json(session_json) if session_json else None
            dedup = DedupState.model_validate_json(dedup_json) if dedup_json else DedupState()
            result = engine.on_event(session, dedup, EVENT_ADAPTER.validate_json(item[0]), item[1])
            kept = (result.session.model_dump_json() if result.session else None, result.dedup.model_dump_json())
            carries[vin] = kept
            return kept, None

        def sample(events: int, started: float) -> None:
            m = libc.mallinfo2()
            row = {
                "events": events,
                "s": round(time.monotonic() - started, 1),
                "rss_mb": round(tree_rss_mb(os.getpid()), 1),
                "malloc_in_use_mb": round((m.uordblks + m.hblkhd) / 2**20, 1),
                "sqlite_mb": round(sqlite.sqlite3_memory_used() / 2**20, 1),
                "state_json_mb": round(sum(len(s or "") + len(d) for s, d in list(carries.values())) / 2**20, 1),
                "read_connections": getattr(getattr(engine.store, "inner", engine.store), "read_connections", 0),
            }
            if args.trim:
                libc.malloc_trim(0)
                row["rss_trimmed_mb"] = round(tree_rss_mb(os.getpid()), 1)
            samples.append(row)
            print(f"[engine_memory] {events:>6} events {row['s']:>6.0f}s  rss {row['rss_mb']:>6.0f} MB  "
                  f"malloc in use {row['malloc_in_use_mb']:>5.0f}  sqlite {row['sqlite_mb']:>4.0f}  "
                  f"state (JSON) {row['state_json_mb']:>3.0f}  read connections {row['read_connections']}"
                  + (f"  trimmed {row['rss_trimmed_mb']:>6.0f}" if args.trim else ""),
                  file=sys.stderr, flush=True)  # fmt: skip

        pool: KeyedRunPool[tuple[str, str], None] = KeyedRunPool(args.threads, step, name="memory")
        lines = fleet.read_text(encoding="utf-8").splitlines()
        if args.tracemalloc:
            tracemalloc.start()
        first: tracemalloc.Snapshot | None = None
        # Growth is reported from the first sample past a quarter of the fleet (caches warm, store filling).
        warm = len(lines) // 4
        started = time.monotonic()
        events = 0
        sample(0, started)
        for line in lines:
            try:
                event = parse_event(line)
            except EventError:
                continue
            item = (event.model_dump_json(), line)
            if pool.knows(event.vin):
                pool.add(event.vin, item)
            else:
                pool.start(event.vin, carries.get(event.vin), [item])
            events += 1
            pool.drain()
            while pool.queued > MAX_QUEUED:
                pool.wait_finished(0.05)
                pool.drain()
            if events % args.every == 0:
                sample(events, started)
                if args.tracemalloc and first is None and events >= warm:
                    gc.collect()
                    first = tracemalloc.take_snapshot()
        while not pool.idle:
            pool.wait_finished(0.05)
            pool.drain()
        sample(events, started)
        grew = []
        if args.tracemalloc and first is not None:
            gc.collect()
            for stat in tracemalloc.take_snapshot().compare_to(first, "lineno")[:15]:
                grew.append(str(stat))
        pool.close()
        engine.close()

    base = next((s for s in samples if s["events"] >= warm), samples[0])
    last = samples[-1]
    print(f"engine memory: {events} events of {args.vins} vehicles, {args.threads} worker threads, embedder "
          f"{args.embedder or 'default'}, offline model, embedded store; MALLOC_ARENA_MAX="
          f"{os.environ.get('MALLOC_ARENA_MAX', 'unset')}")  # fmt: skip
    span = f"from event {base['events']} to {last['events']}"
    print(f"{span:<28}{'start':>10}{'end':>10}{'growth':>10}")
    for key in ("rss_mb", "rss_trimmed_mb", "malloc_in_use_mb", "sqlite_mb", "state_json_mb"):
        if key not in last:
            continue
        print(f"{key:<28}{base[key]:>10.1f}{last[key]:>10.1f}{last[key] - base[key]:>+10.1f}")
    if grew:
        print("Python lines that grew most over the same span (tracemalloc):")
        for g in grew:
            print(f"  {g}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "engine_memory.json").write_text(json.dumps({"samples": samples, "tracemalloc": grew}, indent=1))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4))
        for key in ("rss_mb", "malloc_in_use_mb", "sqlite_mb", "state_json_mb"):
            ax.plot([s["events"] for s in samples], [s[key] for s in samples], label=key)
        ax.set_xlabel("events")
        ax.set_ylabel("MB")
        ax.legend()
        ax.set_title(f"engine memory, {args.threads} threads, {args.vins} vehicles")
        fig.tight_layout()
        fig.savefig(args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
