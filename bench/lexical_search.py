"""The embedded store's lexical search (BM25 per series): one pass over a query's postings against term by term.

``vdoctor/stores/lexindex.py`` scores a query's postings in one pass (every
term's postings in one array, a few numpy calls) up to ``ONE_PASS_POSTINGS``
postings, and term by term (a few numpy calls per term) beyond that, where
one pass would hold several arrays of that length at once. The two give the
same scores to the last bit (``tests/unit/test_sqlite_lexical_index.py``).

This bench builds one series' index per size from the vehicle retrieval
set's cases (``bench/vehicle_retrieval.py``, 3 per fault: alert text, code,
root cause, fix and summary, indexed as the job indexes a stored case,
``retrieval.text.record_text``), repeated over as many vehicles as the size
needs, a fifth of them rewritten once so the index holds dead documents, and
asks it the set's symptom queries (Chinese and English, as a session opening
describes a fault), k = 20 as the job's recall does, each vehicle asking in
turn (its own documents masked). Both ways answer every query, alternating
query by query, so a slow spell of the machine falls on both; printed per
size: microseconds per query each way and their ratio, the postings a query
touches, and which way the index takes at that size.

    .venv/bin/python bench/lexical_search.py                       # 200 to 200,000 versions, ~30 s
    .venv/bin/python bench/lexical_search.py --sizes 1000 --rounds 20

Writes out/bench/lexical_search.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from vehicle_retrieval import build as vehicle_set  # noqa: E402

from vdoctor.retrieval.text import record_text  # noqa: E402
from vdoctor.retrieval.tokens import query_terms, token_text  # noqa: E402
from vdoctor.stores import lexindex  # noqa: E402
from vdoctor.stores.lexindex import SeriesLexicalIndex  # noqa: E402
from vdoctor.stores.vecindex import OPEN_END  # noqa: E402

K = 20  # the job's lexical candidates per recall (retrieval.cases)
TERM_BY_TERM = 0  # ONE_PASS_POSTINGS that sends every query term by term
ONE_PASS = 1 << 62  # ... and one that sends every query in one pass


def build(size: int, texts: list[str]) -> SeriesLexicalIndex:
    """``size`` live versions of one series, one vehicle each, cycling through the texts; a fifth rewritten."""
    index = SeriesLexicalIndex()
    for i in range(size):
        index.apply(i, "S", f"V{i}", (0, OPEN_END), texts[i % len(texts)])
    for i in range(0, size, 5):
        index.apply(i, "S", f"V{i}", (0, OPEN_END), texts[(i + 1) % len(texts)])  # the old version dies
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 2_000, 20_000, 200_000])
    parser.add_argument("--rounds", type=int, default=0, help="passes over the queries (default: by size)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench")
    args = parser.parse_args(argv)

    cases, asked = vehicle_set(per_fault=3, seed=7)
    texts = [token_text(record_text(r)) for r in cases]
    queries = [query_terms(q.text) for q in asked]
    print(f"{len(texts)} case texts, {len(queries)} queries ({sum(map(len, queries)) / len(queries):.1f} terms "
          f"on average), k = {K}; ONE_PASS_POSTINGS = {lexindex.ONE_PASS_POSTINGS:,}")  # fmt: skip
    head = f"{'versions':>9} {'postings/query':>15} {'term by term us':>16} {'one pass us':>12} {'ratio':>6}"
    print(f"{head}  index takes")
    rows = []
    default_limit = lexindex.ONE_PASS_POSTINGS
    try:
        for size in args.sizes:
            index = build(size, texts)
            part = index._parts["S"]
            postings = [sum(len(part.docs[part.terms[t]]) for t in q if t in part.terms) for q in queries]
            rounds = args.rounds or max(2, min(50, 400_000 // size))
            spent = {TERM_BY_TERM: 0, ONE_PASS: 0}
            results: dict[int, list[object]] = {TERM_BY_TERM: [], ONE_PASS: []}
            for r in range(rounds):
                for j, terms in enumerate(queries):
                    asker = f"V{(j * 7919 + r) % size}"
                    for limit in (TERM_BY_TERM, ONE_PASS) if (r + j) % 2 else (ONE_PASS, TERM_BY_TERM):
                        lexindex.ONE_PASS_POSTINGS = limit
                        started = time.perf_counter_ns()
                        found = index.search("S", asker, terms, K, at=1)
                        spent[limit] += time.perf_counter_ns() - started
                        if r == 0:
                            results[limit].append(found)
            if results[TERM_BY_TERM] != results[ONE_PASS]:
                raise SystemExit(f"the two ways ranked differently at {size} versions")
            asked = rounds * len(queries)
            per_term, one_pass = spent[TERM_BY_TERM] / asked / 1000, spent[ONE_PASS] / asked / 1000
            mean_postings = sum(postings) / len(postings)
            if max(postings) <= default_limit:
                takes = "one pass"
            else:
                takes = "term by term" if min(postings) > default_limit else "both (by query)"
            ratio = one_pass / per_term
            print(f"{size:>9,} {mean_postings:>15,.0f} {per_term:>16.1f} {one_pass:>12.1f} {ratio:>6.2f}  {takes}",
                  flush=True)  # fmt: skip
            rows.append({"versions": size, "postings_per_query": mean_postings, "term_by_term_us": per_term,
                         "one_pass_us": one_pass, "ratio": ratio, "rounds": rounds, "index_takes": takes})  # fmt: skip
    finally:
        lexindex.ONE_PASS_POSTINGS = default_limit
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lexical_search.json").write_text(json.dumps({"k": K, "queries": len(queries), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
