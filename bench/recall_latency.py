"""Recall latency of the embedded (sqlite) store at 10k, 100k and 1M records, with an exact numpy scan beside it.

For each size, a fleet of records is bulk-loaded into a fresh SQLite file
(vehicles with several cases each, --series series, about half verified,
random normalised 256-d vectors; --history of them also have an earlier,
archived version that a merge replaced, verified while it held). Then, in
the same run:

- recall: the whole session-open path (``vdoctor.memory.recall.recall``: own
  history, query embedding, similar-case search, reranking, rendering within
  800 tokens) for random vehicles as of now, through the store's persisted
  per-series index (which masks every version by its event-time span);
- recall in the past: the same as of a random time within the fleet's span
  (current and archived versions both in play);
- similar: the store's similar-case search alone (index scan + SQL fetch of the top 20);
- for both, the CPU time of each query as well (thread time): on a shared machine it
  leaves out the time a query waits for a core;
- numpy scan: an exact scan of every vector in the table in one float32
  matrix, with the filters (series, verified, valid, other vehicle) as masks
  and a top-20 partition, i.e. what a store without the per-series index would do.

Also: index build time (first similar search on a fresh file), and reopen
time with the saved index. Figures are printed and plotted.

Usage: .venv/bin/python bench/recall_latency.py [--sizes 10000 100000 1000000] [--queries 300] [--history 0.1]
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

from vdoctor.embedders import DEFAULT_DIM  # noqa: E402
from vdoctor.embedders.hashing import HashingEmbedder  # noqa: E402
from vdoctor.memory.recall import SIMILAR_CANDIDATES, recall  # noqa: E402
from vdoctor.records import utc_now  # noqa: E402
from vdoctor.stores import SimilarQuery  # noqa: E402
from vdoctor.stores.sqlite import SqliteStore  # noqa: E402
from vdoctor.stores.vecindex import vin_hash  # noqa: E402

CASES_PER_VEHICLE = 5
CHUNK = 50_000
DAY = 86_400
# An archived version held for this long before the merge that replaced it.
ARCHIVED_SPAN_S = 10 * DAY
SYMPTOMS = ["电池包单体压差过大", "coolant pump stall", "lost communication with ECM", "insulation fault"]


def progress(msg: str) -> None:
    print(f"[recall-latency] {msg}", file=sys.stderr, flush=True)


def load(
    path: Path, n: int, series: int, dim: int, seed: int, history: float
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
    conn = sqlite3.connect(str(path))
    conn.execute("BEGIN")
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        vecs = rng.standard_normal((m, dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        ok = rng.random(m) < 0.5
        merged = rng.random(m) < history
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
            rows.append(
                (
                    vins[v], f"{vins[v]}-{i}", f"S{s}", at,
                    f"2026-11-01 | P0A7F | cell_voltage_diff_mv={100 + i % 90} | case {i}",
                    vecs[j].tobytes(), "weak cell group", "balance the pack", "P2", '["P0A7F"]',
                    int(ok[j]), "case-summary-v1", 1, at, 1, at - 3600, at if ok[j] else None, at,
                )
            )  # fmt: skip
            if merged[j]:  # verified from its conclusion until the merge at `at`
                first = at - ARCHIVED_SPAN_S
                archived.append(
                    (
                        vins[v], f"{vins[v]}-{i}", f"S{s}", first, f"2026-10-20 | P0A7F | earlier case {i}",
                        old_vecs[j].tobytes(), "weak cell group", "balance the pack", "P2", '["P0A7F"]', 1,
                        "case-summary-v1", 1, first, first - 3600, first, first, at, 1,
                    )
                )  # fmt: skip
        conn.executemany(
            "INSERT INTO case_memory (vin, session_id, series, concluded_at, summary, summary_vec, root_cause, "
            "fix_action, priority, dtc_codes, recheck_ok, prompt_version, valid, updated_at, seq, opened_ts, "
            "verified_ts, version_from) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.executemany(
            "INSERT INTO case_history (vin, session_id, series, concluded_at, summary, summary_vec, root_cause, "
            "fix_action, priority, dtc_codes, recheck_ok, prompt_version, valid, updated_at, opened_ts, "
            "verified_ts, version_from, version_to, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?, ?)",
            archived,
        )
        progress(f"  loaded {start + m:,}/{n:,} records")
    conn.execute("UPDATE vd_meta SET value = '1' WHERE key = 'seq'")
    conn.commit()
    conn.close()
    return all_vecs, series_ids, eligible, row_vins, vins


def pct(values: list[float]) -> tuple[float, float]:
    return float(np.percentile(values, 50)), float(np.percentile(values, 95))


def bench_size(n: int, args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    path = tmp / f"bench-{n}.db"
    progress(f"{n:,} records: loading")
    vecs, series_ids, eligible, row_vins, vins = load(path, n, args.series, DEFAULT_DIM, args.seed, args.history)
    embedder = HashingEmbedder()
    rng = np.random.default_rng(args.seed + 1)
    out: dict[str, float] = {"n": n}

    store = SqliteStore(str(path))
    now = utc_now()
    t = time.perf_counter()
    store.similar(SimilarQuery("nobody", "S0", embedder.embed(["warm-up"])[0], 1, now))
    out["build_s"] = time.perf_counter() - t
    store.close()  # saves the index
    t = time.perf_counter()
    store = SqliteStore(str(path))
    store.similar(SimilarQuery("nobody", "S0", embedder.embed(["warm-up"])[0], 1, now))
    out["reopen_s"] = time.perf_counter() - t

    blas = ThreadpoolController()
    span_s = DAY * CASES_PER_VEHICLE + ARCHIVED_SPAN_S  # the fleet's records and archived versions
    past_rng = np.random.default_rng(args.seed + 2)  # its own stream: the vehicles asked stay the same
    recall_cpu, similar_cpu = [], []
    recall_ms, past_ms, similar_ms, scan_ms, tokens = [], [], [], [], []
    for q in range(args.queries):
        v = int(rng.integers(len(vins)))
        vin, series = vins[v], f"S{v % args.series}"
        symptom = SYMPTOMS[q % len(SYMPTOMS)]
        t, c = time.perf_counter(), time.thread_time()
        got = recall(store, embedder, vin, series, symptom, ["P0A7F"], now)
        recall_ms.append((time.perf_counter() - t) * 1000)
        recall_cpu.append((time.thread_time() - c) * 1000)
        tokens.append(got.tokens)
        past = now - timedelta(seconds=int(past_rng.integers(span_s)))
        t = time.perf_counter()
        recall(store, embedder, vin, series, symptom, ["P0A7F"], past)
        past_ms.append((time.perf_counter() - t) * 1000)
        qv = embedder.embed([symptom])[0]
        t, c = time.perf_counter(), time.thread_time()
        store.similar(SimilarQuery(vin, series, qv, SIMILAR_CANDIDATES, now))
        similar_ms.append((time.perf_counter() - t) * 1000)
        similar_cpu.append((time.thread_time() - c) * 1000)
        # The exact numpy scan over the whole table, filters as masks.
        t = time.perf_counter()
        with blas.limit(limits=1, user_api="blas"):  # same BLAS setting as the store's index
            scores = vecs @ qv
        mask = (series_ids == v % args.series) & eligible & (row_vins != vin_hash(vin))
        scores = np.where(mask, scores, -np.inf)
        top = np.argpartition(-scores, SIMILAR_CANDIDATES)[:SIMILAR_CANDIDATES]
        top[np.argsort(-scores[top])]
        scan_ms.append((time.perf_counter() - t) * 1000)
        if (q + 1) % max(1, args.queries // 4) == 0:
            progress(f"  {q + 1}/{args.queries} queries")
    store.close()
    out["recall_p50"], out["recall_p95"] = pct(recall_ms)
    out["recall_cpu_p50"], out["recall_cpu_p95"] = pct(recall_cpu)
    out["similar_cpu_p50"], out["similar_cpu_p95"] = pct(similar_cpu)
    out["past_p50"], out["past_p95"] = pct(past_ms)
    out["similar_p50"], out["similar_p95"] = pct(similar_ms)
    out["scan_p50"], out["scan_p95"] = pct(scan_ms)
    out["tokens_p95"] = float(np.percentile(tokens, 95))
    out["db_mb"] = path.stat().st_size / 1e6
    path.unlink()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--series", type=int, default=8, help="vehicle series in the fleet")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--history", type=float, default=0.1, help="share of records with an earlier, archived (merged) version"
    )
    parser.add_argument("--tmp", type=Path, default=None, help="folder for the database files (default: system temp)")
    parser.add_argument("--plot", type=Path, default=REPO_ROOT / "out" / "bench" / "recall_latency.png")
    args = parser.parse_args(argv)

    rows = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for n in args.sizes:
            rows.append(bench_size(n, args, Path(tmp)))
    print(f"sqlite recall latency (ms), {args.queries} queries per size, {args.series} series, "
          f"dim {DEFAULT_DIM}, top-{SIMILAR_CANDIDATES}, {args.history:.0%} of records with an archived version; "
          f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")  # fmt: skip
    head = ("records", "recall p50", "recall p95", "past p50", "past p95", "similar p50", "similar p95",
            "scan p50", "scan p95", "scan/sim p95", "build s", "reopen s", "tokens p95")  # fmt: skip
    print("  ".join(f"{h:>12}" for h in head))
    for r in rows:
        cells = [f"{int(r['n']):,}", *(f"{r[k]:.2f}" for k in ("recall_p50", "recall_p95", "past_p50", "past_p95",
                 "similar_p50", "similar_p95", "scan_p50", "scan_p95")), f"{r['scan_p95'] / r['similar_p95']:.1f}x",
                 f"{r['build_s']:.1f}", f"{r['reopen_s']:.2f}", f"{r['tokens_p95']:.0f}"]  # fmt: skip
        print("  ".join(f"{c:>12}" for c in cells))
    for r in rows:
        print(f"{int(r['n']):,} records, CPU time per query (thread time: leaves out waiting for a core): "
              f"recall p50 {r['recall_cpu_p50']:.2f} / p95 {r['recall_cpu_p95']:.2f} ms, "
              f"similar p50 {r['similar_cpu_p50']:.2f} / p95 {r['similar_cpu_p95']:.2f} ms")  # fmt: skip
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
        ("similar", "similar search (store index)", "s-"),
        ("scan", "exact numpy scan, whole table", "^--"),
    ):
        ax.plot(ns, [r[f"{key}_p95"] for r in rows], style, label=f"{label} p95")
        ax.plot(ns, [r[f"{key}_p50"] for r in rows], style, alpha=0.35, label=f"{label} p50")
    ax.axhline(20, color="grey", linestyle=":", linewidth=1, label="target p95 20 ms")
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
