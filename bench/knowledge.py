"""Knowledge memory at the size of a real code table: load time and query latency.

Loads ../shared/data/dtc/dtc_codes.csv (18,805 rows; read where it lies, never
copied) into a fresh sqlite knowledge store as 200-400-token chunks, then runs
queries through the same two-stage search the agent's search_knowledge tool
uses (top-20 by vector, reranked to top-5): code lookups and free-text symptom
queries, with and without a scope filter. Prints load time, chunk count and
query p50/p95/max, and how often a code query's top hit holds that code.

Usage: .venv/bin/python bench/knowledge.py [--csv FILE] [--queries 500]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.knowledge.chunks import rows_from_csv
from vdoctor.knowledge.search import KnowledgeBase
from vdoctor.knowledge.stores import open_knowledge_store

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CSV = REPO_ROOT.parent / "shared" / "data" / "dtc" / "dtc_codes.csv"
SYMPTOMS = (
    "catalyst efficiency below threshold", "misfire detected cylinder", "fuel trim too lean",
    "hybrid battery pack deterioration", "wheel speed sensor circuit", "lost communication with ECM",
    "coolant temperature sensor", "battery voltage low", "turbocharger boost pressure", "evaporative system leak",
)  # fmt: skip


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args(argv)
    if not args.csv.is_file():
        print(f"no code table at {args.csv}", file=sys.stderr)
        return 2
    rows = list(rows_from_csv(args.csv))
    with tempfile.TemporaryDirectory() as tmp:
        base = KnowledgeBase(open_knowledge_store(f"sqlite:///{tmp}/knowledge.db"), HashingEmbedder())
        started = time.perf_counter()
        chunks = base.load(rows, "bench")
        load_s = time.perf_counter() - started
        rng = random.Random(1)
        generic = [r.code for r in rows if r.scope == "dtc:generic"]
        timings: dict[str, list[float]] = {"code": [], "code+scope": [], "symptom": []}
        code_hits = 0
        base.search("warm up")  # the first query reads the table into the cache
        for i in range(args.queries):
            code = rng.choice(generic)
            for kind, query, scope in (
                ("code", code, None),
                ("code+scope", code, "dtc:generic"),
                ("symptom", rng.choice(SYMPTOMS), None),
            ):
                t = time.perf_counter()
                hits = base.search(query, scope=scope)
                timings[kind].append((time.perf_counter() - t) * 1000)
                if kind == "code+scope" and hits and code in hits[0].chunk.codes:
                    code_hits += 1
            if (i + 1) % 100 == 0:
                print(f"  ... {i + 1}/{args.queries} query rounds", file=sys.stderr, flush=True)
        base.close()
    print(f"knowledge load: {len(rows)} rows -> {chunks} chunks in {load_s:.2f} s")
    for kind, values in timings.items():
        print(f"  query {kind:<11} p50 {_pct(values, 50):6.2f} ms  p95 {_pct(values, 95):6.2f} ms  "
              f"max {max(values):6.2f} ms  (n={len(values)})")  # fmt: skip
    print(f"  code query with scope: top hit holds the code in {code_hits}/{args.queries} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
