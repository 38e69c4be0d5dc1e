"""Session-open recall latency of the embedded (sqlite) store at 10k, 100k and 1M records, beside an exact scan.

For each size, a fleet of records is bulk-loaded into a fresh SQLite file
(vehicles with several cases each, --series series, about half verified;
--history of them also have an earlier, archived version that a merge
replaced, verified while it held). Each record is a case as the product
stores it: an alert text as reported, a code, the knowledge pack's root cause
and fix, summary lines (``bench/vehicle_faults.py``'s faults, drawn at
random), with the tokens its lexical index reads; its vector is a random
unit row of the embedder's dimension (a scan's cost does not depend on the
values, and embedding 1M case texts would take hours). Then, in the same run,
for random vehicles and the vehicle set's symptom queries (Chinese and
English, as a session describes them):

- recall: the whole session-open path (``vdoctor.memory.recall.recall``): own
  history, the query's embedding by the real embedder (``--embedder``), both
  retrieval channels (the dense one through the store's per-series vector
  index, the lexical one through its per-series BM25 index, 50 candidates
  each), fusion, rerank, rendering within the budget; as of now;
- recall in the past: the same as of a random time within the fleet's span;
- its stages, timed apart: the query embedding, the dense channel, the
  lexical channel;
- exact scan (the baseline): the same query embedding, then an exact scan of
  every vector in the table in one float32 matrix, with the filters (series,
  verified, valid, other vehicle) as masks and a top-50 partition, i.e. what a
  store without the per-series index would do for its dense channel;
- for recall, the CPU time of each query as well (process time: the
  store's scan threads included; it leaves out the time a query waits for a
  core on a shared machine).

Also: index build time (first search on a fresh file builds both indexes) and
reopen time with the saved indexes.

Usage: .venv/bin/python bench/recall_latency.py [--sizes 10000 100000 1000000] [--queries 300] [--embedder use-m3]
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
from threadpoolctl import ThreadpoolController

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

sys.path.insert(0, str(REPO_ROOT / "bench"))

from vehicle_retrieval import build as vehicle_set  # noqa: E402

from vdoctor.embedders import (  # noqa: E402
    DEFAULT_EMBEDDER,
    EMBEDDERS,
    Embedder,
    EmbedderConfig,
    embedder_id,
    open_embedder,  # noqa: E402
)
from vdoctor.embedders.cache import QueryCache  # noqa: E402
from vdoctor.memory.recall import recall  # noqa: E402
from vdoctor.records import utc_now  # noqa: E402
from vdoctor.retrieval.hybrid import DENSE_CANDIDATES, LEXICAL_CANDIDATES  # noqa: E402
from vdoctor.retrieval.tokens import token_text  # noqa: E402
from vdoctor.stores import SimilarQuery  # noqa: E402
from vdoctor.stores.sqlite import SqliteStore  # noqa: E402
from vdoctor.stores.vecindex import vin_hash  # noqa: E402

CASES_PER_VEHICLE = 5
CHUNK = 50_000
DAY = 86_400
# An archived version held for this long before the merge that replaced it.
ARCHIVED_SPAN_S = 10 * DAY
# Case texts (alert text, code, cause, fix, a summary line) of the vehicle set's faults, and its symptom queries.
_CASES, _QUERIES = vehicle_set(per_fault=3, seed=7)
TEXTS = [(r.alert_text, r.dtc_codes[0], r.root_cause, r.fix_action, r.summary.splitlines()[-1]) for r in _CASES]
SYMPTOMS = [q.text for q in _QUERIES]


def progress(msg: str) -> None:
    print(f"[recall-latency] {msg}", file=sys.stderr, flush=True)


def load(
    path: Path, n: int, series: int, dim: int, made_by: str, seed: int, history: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Bulk-load n records (and their archived versions); returns what the numpy baseline scans."""
    SqliteStore(str(path)).close()  # creates the schema
    rng = np.random.default_rng(seed)
    vehicles = max(1, n // CASES_PER_VEHICLE)
    vins = [f"LBENCH{i:011d}" for i in range(vehicles)]
    all_vecs = np.empty((n, dim), dtype=np.float32)
    series_ids = np.empty(n, dtype=np.int32)
    eligible = np.empty(n, dtype=bool)
    row_vins = np.empty(n, dtype=np.int64)
    now = int(utc_now().timestamp())
    # A case's tokens are its fault's text's tokens and its own number's ("case <i>" ends its summary).
    base_tokens = [token_text(record_text_of(t)) for t in TEXTS]
    conn = sqlite3.connect(str(path))
    conn.execute("BEGIN")
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        vecs = rng.standard_normal((m, dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        ok = rng.random(m) < 0.5
        merged = rng.random(m) < history
        which = rng.integers(len(TEXTS), size=m)
        old_vecs = rng.standard_normal((m, dim)).astype(np.float32)
        old_vecs /= np.linalg.norm(old_vecs, axis=1, keepdims=True)
        rows, archived = [], []
        for j in range(m):
            i = start + j
            v = i % vehicles
            s = v % series
            all_vecs[i], series_ids[i], eligible[i] = vecs[j], s, ok[j]
            row_vins[i] = vin_hash(vins[v])
            at = now - DAY * (i // vehicles) - v
            alert, code, cause, fix, line = TEXTS[which[j]]
            rows.append(
                (
                    vins[v], f"{vins[v]}-{i}", f"S{s}", at, f"{line} | case {i}", vecs[j].tobytes(), cause, fix,
                    "P2", f'["{code}"]', int(ok[j]), "case-summary-v1", 1, at, 1, at - 3600, at if ok[j] else None,
                    at, alert, made_by, f"{base_tokens[which[j]]} case {i}",
                )
            )  # fmt: skip
            if merged[j]:  # verified from its conclusion until the merge at `at`
                first = at - ARCHIVED_SPAN_S
                archived.append(
                    (
                        vins[v], f"{vins[v]}-{i}", f"S{s}", first, f"{line} | case {i}", old_vecs[j].tobytes(), cause,
                        fix, "P2", f'["{code}"]', 1, "case-summary-v1", 1, first, first - 3600, first, first, at, 1,
                        alert, made_by, f"{base_tokens[which[j]]} case {i}",
                    )
                )  # fmt: skip
        conn.executemany(
            "INSERT INTO case_memory (vin, session_id, series, concluded_at, summary, summary_vec, root_cause, "
            "fix_action, priority, dtc_codes, recheck_ok, prompt_version, valid, updated_at, seq, opened_ts, "
            "verified_ts, version_from, alert_text, embedder, search_tokens) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.executemany(
            "INSERT INTO case_history (vin, session_id, series, concluded_at, summary, summary_vec, root_cause, "
            "fix_action, priority, dtc_codes, recheck_ok, prompt_version, valid, updated_at, opened_ts, "
            "verified_ts, version_from, version_to, seq, alert_text, embedder, search_tokens) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            archived,
        )
        progress(f"  loaded {start + m:,}/{n:,} records")
    conn.execute("UPDATE vd_meta SET value = '1' WHERE key = 'seq'")
    conn.commit()
    conn.close()
    return all_vecs, series_ids, eligible, row_vins, vins


def record_text_of(text: tuple[str, str, str, str, str]) -> str:
    """The indexed text of a bench case without its number (``retrieval.text.case_text``)."""
    alert, code, cause, fix, line = text
    return "\n".join([alert, code, cause, fix, line])


def pct(values: list[float]) -> tuple[float, float]:
    return float(np.percentile(values, 50)), float(np.percentile(values, 95))


def bench_size(n: int, args: argparse.Namespace, embedder: Embedder, tmp: Path) -> dict[str, float]:
    path = tmp / f"bench-{n}.db"
    progress(f"{n:,} records: loading")
    made_by = embedder_id(embedder)
    vecs, series_ids, eligible, row_vins, vins = load(
        path, n, args.series, embedder.dim, made_by, args.seed, args.history
    )
    rng = np.random.default_rng(args.seed + 1)
    out: dict[str, float] = {"n": n}

    store = SqliteStore(str(path))
    now = utc_now()
    warm = embedder.embed_queries(["warm-up"])[0]
    t = time.perf_counter()
    store.similar(SimilarQuery("nobody", "S0", warm, 1, now))
    store.lexical(SimilarQuery("nobody", "S0", warm, 1, now, text="电池"))
    out["build_s"] = time.perf_counter() - t
    store.close()  # saves the indexes
    t = time.perf_counter()
    store = SqliteStore(str(path))
    store.similar(SimilarQuery("nobody", "S0", warm, 1, now))
    store.lexical(SimilarQuery("nobody", "S0", warm, 1, now, text="电池"))
    out["reopen_s"] = time.perf_counter() - t

    blas = ThreadpoolController()
    span_s = DAY * CASES_PER_VEHICLE + ARCHIVED_SPAN_S  # the fleet's records and archived versions
    past_rng = np.random.default_rng(args.seed + 2)  # its own stream: the vehicles asked stay the same
    timed: dict[str, list[float]] = {
        k: [] for k in ("recall", "recall_cpu", "past", "embed", "dense", "lexical", "scan", "tokens")
    }
    for q in range(args.queries):
        v = int(rng.integers(len(vins)))
        vin, series = vins[v], f"S{v % args.series}"
        symptom = SYMPTOMS[q % len(SYMPTOMS)]
        t, c = time.perf_counter(), time.process_time()
        got = recall(store, embedder, vin, series, symptom, [], now)
        timed["recall"].append((time.perf_counter() - t) * 1000)
        timed["recall_cpu"].append((time.process_time() - c) * 1000)
        timed["tokens"].append(got.tokens)
        past = now - timedelta(seconds=int(past_rng.integers(span_s)))
        t = time.perf_counter()
        recall(store, embedder, vin, series, symptom, [], past)
        timed["past"].append((time.perf_counter() - t) * 1000)
        # The stages apart: the query's embedding, each channel of the store.
        t = time.perf_counter()
        qv = embedder.embed_queries([symptom])[0]
        embed_ms = (time.perf_counter() - t) * 1000
        timed["embed"].append(embed_ms)
        t = time.perf_counter()
        store.similar(SimilarQuery(vin, series, qv, DENSE_CANDIDATES, now, embedder=made_by))
        timed["dense"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        store.lexical(SimilarQuery(vin, series, qv, LEXICAL_CANDIDATES, now, text=symptom))
        timed["lexical"].append((time.perf_counter() - t) * 1000)
        # The baseline: the same query embedding, then an exact scan of the whole table, filters as masks.
        t = time.perf_counter()
        with blas.limit(limits=1, user_api="blas"):  # same BLAS setting as the store's index
            scores = vecs @ qv
        mask = (series_ids == v % args.series) & eligible & (row_vins != vin_hash(vin))
        scores = np.where(mask, scores, -np.inf)
        top = np.argpartition(-scores, DENSE_CANDIDATES)[:DENSE_CANDIDATES]
        top[np.argsort(-scores[top])]
        timed["scan"].append(embed_ms + (time.perf_counter() - t) * 1000)
        if (q + 1) % max(1, args.queries // 4) == 0:
            progress(f"  {q + 1}/{args.queries} queries")
    store.close()
    for key, values in timed.items():
        if key != "tokens":
            out[f"{key}_p50"], out[f"{key}_p95"] = pct(values)
    out["tokens_p95"] = float(np.percentile(timed["tokens"], 95))
    out["db_mb"] = path.stat().st_size / 1e6
    path.unlink()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--embedder", choices=EMBEDDERS, default=DEFAULT_EMBEDDER)
    parser.add_argument("--series", type=int, default=8, help="vehicle series in the fleet")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--history", type=float, default=0.1, help="share of records with an earlier, archived (merged) version"
    )
    parser.add_argument("--tmp", type=Path, default=None, help="folder for the database files (default: system temp)")
    parser.add_argument("--plot", type=Path, default=REPO_ROOT / "out" / "bench" / "recall_latency.png")
    args = parser.parse_args(argv)

    embedder = open_embedder(args.embedder, EmbedderConfig())
    if isinstance(embedder, QueryCache):
        # Every query goes to the model, as a phrasing the fleet has not sent before would: the job's
        # cache of query vectors (embedders/cache.py) would take this bench's repeated symptoms from memory.
        embedder = embedder.model
    rows = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for n in args.sizes:
            rows.append(bench_size(n, args, embedder, Path(tmp)))
    print(f"sqlite session-open recall latency (ms), {args.queries} queries per size, {args.series} series, "
          f"embedder {args.embedder} ({embedder_id(embedder)}, query embedding included), {LEXICAL_CANDIDATES} "
          f"lexical + {DENSE_CANDIDATES} dense candidates, {args.history:.0%} of records with an archived version; "
          f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")  # fmt: skip
    head = ("records", "recall p50", "recall p95", "past p50", "past p95", "embed p95", "dense p95", "lexical p95",
            "scan p50", "scan p95", "scan/rec p95", "build s", "reopen s", "tokens p95")  # fmt: skip
    print("  ".join(f"{h:>12}" for h in head))
    for r in rows:
        cells = [f"{int(r['n']):,}", *(f"{r[k]:.2f}" for k in ("recall_p50", "recall_p95", "past_p50", "past_p95",
                 "embed_p95", "dense_p95", "lexical_p95", "scan_p50", "scan_p95")),
                 f"{r['scan_p95'] / r['recall_p95']:.1f}x", f"{r['build_s']:.1f}", f"{r['reopen_s']:.2f}",
                 f"{r['tokens_p95']:.0f}"]  # fmt: skip
        print("  ".join(f"{c:>12}" for c in cells))
    for r in rows:
        print(f"{int(r['n']):,} records, recall CPU time per query (process time, scan threads included): "
              f"p50 {r['recall_cpu_p50']:.2f} / p95 {r['recall_cpu_p95']:.2f} ms; stages p50: embed "
              f"{r['embed_p50']:.2f}, dense {r['dense_p50']:.2f}, lexical {r['lexical_p50']:.2f} ms")  # fmt: skip
    print("scan = the same query embedding + an exact numpy scan of every vector of the table, filters as masks")
    plot(rows, args.plot)
    print(f"plot: {args.plot}")
    return 0


def plot(rows: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ns = [r["n"] for r in rows]
    for key, label, style in (
        ("recall", "recall (whole path)", "o-"),
        ("dense", "dense channel (store index)", "s-"),
        ("lexical", "lexical channel (store index)", "d-"),
        ("scan", "embedding + exact numpy scan, whole table", "^--"),
    ):
        ax.plot(ns, [r[f"{key}_p95"] for r in rows], style, label=f"{label} p95")
        ax.plot(ns, [r[f"{key}_p50"] for r in rows], style, alpha=0.35, label=f"{label} p50")
    ax.axhline(50, color="grey", linestyle=":", linewidth=1, label="target p95 50 ms")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("records in the store")
    ax.set_ylabel("latency (ms)")
    ax.set_title("L3 recall latency, embedded sqlite store")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
