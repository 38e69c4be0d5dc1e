"""Recall latency of the L3 stores side by side (sqlite, mem0) at 10k, 100k and 1M records, with an exact numpy scan.

The session-open latency of the product's configuration (the real embedder,
both retrieval channels) is ``bench/recall_latency.py``; this bench compares
backends with the hashing embedder (every record's vector and tokens say it
made them).

For each size, a fleet of records is bulk-loaded into a fresh SQLite file
(vehicles with several cases each, --series series, about half verified,
random normalised 256-d vectors; --history of them also have an earlier,
archived version that a merge replaced, verified while it held); with
``--backends sqlite mem0`` the same records, and the same earlier versions,
also go into a fresh ``mem0://`` folder (through the store's ``upsert_many``:
Mem0 has no bulk load; an earlier version is written first and archived by
the merge that follows it). Then, in the same run, for every backend and the
same query sequence:

- recall: the whole session-open path (``vdoctor.memory.recall.recall``: own
  history, query embedding, similar-case search, reranking, rendering within
  800 tokens) for random vehicles as of now (sqlite: through its persisted
  per-series index, which masks every version by its event-time span; mem0:
  one filtered ``Memory.search``);
- recall in the past: the same as of a random time within the fleet's span
  (current and archived versions both in play);
- similar: the store's similar-case search alone;
- for both, the CPU time of each query as well (thread time): on a shared machine it
  leaves out the time a query waits for a core;
- numpy scan: an exact scan of every vector in the table in one float32
  matrix, with the filters (series, verified, valid, other vehicle) as masks
  and a top-20 partition, i.e. what a store without the per-series index would do.

Also: load time, index build time (sqlite: the first similar search on a
fresh file; mem0: opening the folder, which rebuilds the key index from one
``get_all``, and a first search), and reopen time. Figures are printed with
the settings and the machine's load average, and plotted.

Usage: .venv/bin/python bench/store_latency.py [--sizes 10000 100000 1000000] [--queries 300] [--history 0.1]
       [--backends sqlite mem0]
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from threadpoolctl import ThreadpoolController

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from vdoctor.embedders import DEFAULT_DIM, embedder_id  # noqa: E402
from vdoctor.embedders.hashing import HashingEmbedder  # noqa: E402
from vdoctor.memory.recall import recall  # noqa: E402
from vdoctor.records import MemoryRecord, utc_now  # noqa: E402
from vdoctor.retrieval.hybrid import DENSE_CANDIDATES as SIMILAR_CANDIDATES  # noqa: E402
from vdoctor.retrieval.text import search_tokens  # noqa: E402
from vdoctor.stores import MemoryStore, SimilarQuery, open_store  # noqa: E402
from vdoctor.stores.sqlite import SqliteStore  # noqa: E402
from vdoctor.stores.vecindex import vin_hash  # noqa: E402

# Every record says the hashing embedder made its vector (recall refuses another embedder's).
MADE_BY = embedder_id(HashingEmbedder())
CASES_PER_VEHICLE = 5
CHUNK = 50_000
# Records per upsert_many call when loading a mem0 folder.
MEM0_CHUNK = 2_000
BACKENDS = ("sqlite", "mem0")
DAY = 86_400
# An archived version held for this long before the merge that replaced it.
ARCHIVED_SPAN_S = 10 * DAY
SYMPTOMS = ["电池包单体压差过大", "coolant pump stall", "lost communication with ECM", "insulation fault"]
CAUSE, FIX, CODES, PROMPT = "weak cell group", "balance the pack", '["P0A7F"]', "case-summary-v1"


def progress(msg: str) -> None:
    print(f"[recall-latency] {msg}", file=sys.stderr, flush=True)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def mem0_versions(
    vin: str, sid: str, series: str, at: int, summary: str, vec: np.ndarray, ok: bool, old: np.ndarray | None
) -> list[MemoryRecord]:
    """The records the sqlite rows of one case stand for, in write order: the earlier version first, if any."""

    def record(concluded: int, text: str, vector: np.ndarray, verified: bool) -> MemoryRecord:
        when = datetime.fromtimestamp(concluded, UTC)
        return MemoryRecord(
            vin=vin, session_id=sid, series=series, concluded_at=when, summary=text, summary_vec=vector.tolist(),
            root_cause=CAUSE, fix_action=FIX, priority="P2", dtc_codes=["P0A7F"], recheck_ok=verified,
            prompt_version=PROMPT, updated_at=when, opened_ts=when - timedelta(hours=1), embedder=MADE_BY,
        )  # fmt: skip

    first = at - ARCHIVED_SPAN_S
    earlier = [] if old is None else [record(first, f"2026-10-20 | P0A7F | earlier case {sid}", old, True)]
    return [*earlier, record(at, summary, vec, ok)]


def load(
    path: Path, n: int, args: argparse.Namespace, mem0: MemoryStore | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str], dict[str, float]]:
    """Bulk-load n records (and their archived versions); returns what the numpy baseline scans, and load times."""
    SqliteStore(str(path)).close()  # creates the schema
    rng = np.random.default_rng(args.seed)
    vehicles = max(1, n // CASES_PER_VEHICLE)
    vins = [f"LBENCH{i:011d}" for i in range(vehicles)]
    all_vecs = np.empty((n, DEFAULT_DIM), dtype=np.float32)
    series_ids = np.empty(n, dtype=np.int32)
    eligible = np.empty(n, dtype=bool)
    row_vins = np.empty(n, dtype=np.int64)
    now = int(utc_now().timestamp())
    seconds = {"sqlite": 0.0, "mem0": 0.0}
    conn = sqlite3.connect(str(path))
    conn.execute("BEGIN")
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        vecs = rng.standard_normal((m, DEFAULT_DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        ok = rng.random(m) < 0.5
        merged = rng.random(m) < args.history
        old_vecs = rng.standard_normal((m, DEFAULT_DIM)).astype(np.float32)
        old_vecs /= np.linalg.norm(old_vecs, axis=1, keepdims=True)
        rows, archived, records = [], [], []
        for j in range(m):
            i = start + j
            v = i % vehicles
            s = v % args.series
            all_vecs[i], series_ids[i], eligible[i] = vecs[j], s, ok[j]
            row_vins[i] = vin_hash(vins[v])
            at = now - DAY * (i // vehicles) - v
            vin, sid, series = vins[v], f"{vins[v]}-{i}", f"S{s}"
            summary = f"2026-11-01 | P0A7F | cell_voltage_diff_mv={100 + i % 90} | case {i}"
            rows.append(
                (
                    vin, sid, series, at, summary, vecs[j].tobytes(), CAUSE, FIX, "P2", CODES,
                    int(ok[j]), PROMPT, 1, at, 1, at - 3600, at if ok[j] else None, at, MADE_BY,
                    search_tokens("", ["P0A7F"], CAUSE, FIX, summary),
                )
            )  # fmt: skip
            if merged[j]:  # verified from its conclusion until the merge at `at`
                first = at - ARCHIVED_SPAN_S
                archived.append(
                    (
                        vin, sid, series, first, f"2026-10-20 | P0A7F | earlier case {sid}",
                        old_vecs[j].tobytes(), CAUSE, FIX, "P2", CODES, 1,
                        PROMPT, 1, first, first - 3600, first, first, at, 1, MADE_BY,
                        search_tokens("", ["P0A7F"], CAUSE, FIX, f"2026-10-20 | P0A7F | earlier case {sid}"),
                    )
                )  # fmt: skip
            if mem0 is not None:
                records += mem0_versions(vin, sid, series, at, summary, vecs[j], bool(ok[j]),
                                         old_vecs[j] if merged[j] else None)  # fmt: skip
        t = time.perf_counter()
        conn.executemany(
            "INSERT INTO case_memory (vin, session_id, series, concluded_at, summary, summary_vec, root_cause, "
            "fix_action, priority, dtc_codes, recheck_ok, prompt_version, valid, updated_at, seq, opened_ts, "
            "verified_ts, version_from, embedder, search_tokens) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.executemany(
            "INSERT INTO case_history (vin, session_id, series, concluded_at, summary, summary_vec, root_cause, "
            "fix_action, priority, dtc_codes, recheck_ok, prompt_version, valid, updated_at, opened_ts, "
            "verified_ts, version_from, version_to, seq, embedder, search_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            archived,
        )
        seconds["sqlite"] += time.perf_counter() - t
        progress(f"  sqlite: loaded {start + m:,}/{n:,} records")
        if mem0 is not None:
            t = time.perf_counter()
            for k in range(0, len(records), MEM0_CHUNK):
                mem0.upsert_many(records[k : k + MEM0_CHUNK])
            seconds["mem0"] += time.perf_counter() - t
            progress(f"  mem0: loaded {start + m:,}/{n:,} records ({len(records):,} versions)")
    t = time.perf_counter()
    conn.execute("UPDATE vd_meta SET value = '1' WHERE key = 'seq'")
    conn.commit()
    conn.close()
    seconds["sqlite"] += time.perf_counter() - t
    return all_vecs, series_ids, eligible, row_vins, vins, seconds


def pct(values: list[float]) -> tuple[float, float]:
    return float(np.percentile(values, 50)), float(np.percentile(values, 95))


def open_backend(backend: str, n: int, tmp: Path) -> MemoryStore:
    if backend == "sqlite":
        return SqliteStore(str(tmp / f"bench-{n}.db"))
    return open_store(f"mem0:///{tmp / f'bench-{n}.mem0'}")


def bench_size(n: int, args: argparse.Namespace, tmp: Path) -> list[dict[str, float | str]]:
    path = tmp / f"bench-{n}.db"
    progress(f"{n:,} records: loading")
    mem0 = open_backend("mem0", n, tmp) if "mem0" in args.backends else None
    try:
        vecs, series_ids, eligible, row_vins, vins, load_s = load(path, n, args, mem0)
    finally:
        if mem0 is not None:
            mem0.close()
    embedder = HashingEmbedder()
    now = utc_now()
    # One query sequence for every backend: (vehicle, symptom, a past time within the fleet's span).
    rng = np.random.default_rng(args.seed + 1)
    past_rng = np.random.default_rng(args.seed + 2)  # its own stream: the vehicles asked stay the same
    span_s = DAY * CASES_PER_VEHICLE + ARCHIVED_SPAN_S  # the fleet's records and archived versions
    queries = []
    for q in range(args.queries):
        v = int(rng.integers(len(vins)))
        queries.append((v, SYMPTOMS[q % len(SYMPTOMS)], now - timedelta(seconds=int(past_rng.integers(span_s)))))

    blas = ThreadpoolController()
    scan_ms = []
    for v, symptom, _ in queries:
        qv = embedder.embed([symptom])[0]
        # The exact numpy scan over the whole table, filters as masks.
        t = time.perf_counter()
        with blas.limit(limits=1, user_api="blas"):  # same BLAS setting as the store's index
            scores = vecs @ qv
        mask = (series_ids == v % args.series) & eligible & (row_vins != vin_hash(vins[v]))
        scores = np.where(mask, scores, -np.inf)
        top = np.argpartition(-scores, SIMILAR_CANDIDATES)[:SIMILAR_CANDIDATES]
        top[np.argsort(-scores[top])]
        scan_ms.append((time.perf_counter() - t) * 1000)

    rows: list[dict[str, float | str]] = []
    for backend in args.backends:
        progress(f"{n:,} records: {backend} queries")
        out: dict[str, float | str] = {"backend": backend, "n": n, "load_s": load_s[backend]}
        warm_up = SimilarQuery("nobody", "S0", embedder.embed(["warm-up"])[0], 1, now)
        t = time.perf_counter()
        store = open_backend(backend, n, tmp)
        store.similar(warm_up)
        out["build_s"] = time.perf_counter() - t
        store.close()  # sqlite saves its index
        t = time.perf_counter()
        store = open_backend(backend, n, tmp)
        store.similar(warm_up)
        out["reopen_s"] = time.perf_counter() - t
        recall_ms, recall_cpu, past_ms, similar_ms, similar_cpu, tokens = [], [], [], [], [], []
        for q, (v, symptom, past) in enumerate(queries):
            vin, series = vins[v], f"S{v % args.series}"
            t, c = time.perf_counter(), time.thread_time()
            got = recall(store, embedder, vin, series, symptom, ["P0A7F"], now)
            recall_ms.append((time.perf_counter() - t) * 1000)
            recall_cpu.append((time.thread_time() - c) * 1000)
            tokens.append(got.tokens)
            t = time.perf_counter()
            recall(store, embedder, vin, series, symptom, ["P0A7F"], past)
            past_ms.append((time.perf_counter() - t) * 1000)
            qv = embedder.embed([symptom])[0]
            t, c = time.perf_counter(), time.thread_time()
            store.similar(SimilarQuery(vin, series, qv, SIMILAR_CANDIDATES, now))
            similar_ms.append((time.perf_counter() - t) * 1000)
            similar_cpu.append((time.thread_time() - c) * 1000)
            if (q + 1) % max(1, args.queries // 4) == 0:
                progress(f"  {backend}: {q + 1}/{args.queries} queries")
        store.close()
        out["recall_p50"], out["recall_p95"] = pct(recall_ms)
        out["recall_cpu_p50"], out["recall_cpu_p95"] = pct(recall_cpu)
        out["past_p50"], out["past_p95"] = pct(past_ms)
        out["similar_p50"], out["similar_p95"] = pct(similar_ms)
        out["similar_cpu_p50"], out["similar_cpu_p95"] = pct(similar_cpu)
        out["scan_p50"], out["scan_p95"] = pct(scan_ms)
        out["tokens_p95"] = float(np.percentile(tokens, 95))
        rows.append(out)
    path.unlink()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--series", type=int, default=8, help="vehicle series in the fleet")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--history", type=float, default=0.1, help="share of records with an earlier, archived (merged) version"
    )
    parser.add_argument(
        "--backends", nargs="+", choices=BACKENDS, default=["sqlite"], help="stores to measure side by side"
    )
    parser.add_argument("--tmp", type=Path, default=None, help="folder for the store files (default: system temp)")
    parser.add_argument("--plot", type=Path, default=REPO_ROOT / "out" / "bench" / "store_latency.png")
    args = parser.parse_args(argv)

    load_before = loadavg()
    rows: list[dict[str, float | str]] = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for n in args.sizes:
            rows.extend(bench_size(n, args, Path(tmp)))
    print(f"L3 recall latency (ms): backends {' '.join(args.backends)}; {args.queries} queries per size and "
          f"backend (the same sequence for each); {args.series} series; ~half verified; dim {DEFAULT_DIM}; "
          f"top-{SIMILAR_CANDIDATES} then rerank; HashingEmbedder; {CASES_PER_VEHICLE} cases per vehicle; "
          f"{args.history:.0%} of records with an archived version")  # fmt: skip
    print(f"load average (1/5/15 min): {load_before} at start, {loadavg()} at end")
    head = ("backend", "records", "recall p50", "recall p95", "past p50", "past p95", "similar p50", "similar p95",
            "scan p50", "scan p95", "scan/sim p95", "load s", "build s", "reopen s", "tokens p95")  # fmt: skip
    print("  ".join(f"{h:>12}" for h in head))
    for r in rows:
        cells = [str(r["backend"]), f"{int(r['n']):,}", *(f"{float(r[k]):.2f}" for k in ("recall_p50", "recall_p95",
                 "past_p50", "past_p95", "similar_p50", "similar_p95", "scan_p50", "scan_p95")),
                 f"{float(r['scan_p95']) / float(r['similar_p95']):.2f}x", f"{float(r['load_s']):.1f}",
                 f"{float(r['build_s']):.1f}", f"{float(r['reopen_s']):.2f}",
                 f"{float(r['tokens_p95']):.0f}"]  # fmt: skip
        print("  ".join(f"{c:>12}" for c in cells))
    for r in rows:
        print(f"{r['backend']}, {int(r['n']):,} records, CPU time per query (thread time: leaves out waiting for a "
              f"core): recall p50 {float(r['recall_cpu_p50']):.2f} / p95 {float(r['recall_cpu_p95']):.2f} ms, "
              f"similar p50 {float(r['similar_cpu_p50']):.2f} / p95 {float(r['similar_cpu_p95']):.2f} ms")  # fmt: skip
    if len(args.backends) > 1 and "sqlite" in args.backends:
        for n in args.sizes:
            by = {r["backend"]: r for r in rows if r["n"] == n}
            for b in args.backends:
                if b != "sqlite":
                    ratio = float(by[b]["recall_p95"]) / float(by["sqlite"]["recall_p95"])
                    print(f"  {n:,} records: {b} / sqlite recall p95 {ratio:.1f}x")
    plot(rows, args.plot)
    print(f"plot: {args.plot}")
    return 0


def plot(rows: list[dict[str, float | str]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    backends = list(dict.fromkeys(str(r["backend"]) for r in rows))
    for backend in backends:
        mine = [r for r in rows if r["backend"] == backend]
        ns = [float(r["n"]) for r in mine]
        for key, label, style in (
            ("recall", "recall (whole path)", "o-"),
            ("similar", "similar search", "s-"),
        ):
            ax.plot(ns, [float(r[f"{key}_p95"]) for r in mine], style, label=f"{backend}: {label} p95")
            ax.plot(ns, [float(r[f"{key}_p50"]) for r in mine], style, alpha=0.35, label=f"{backend}: {label} p50")
    first = [r for r in rows if r["backend"] == backends[0]]
    ax.plot([float(r["n"]) for r in first], [float(r["scan_p95"]) for r in first], "^--",
            label="exact numpy scan, whole table p95")  # fmt: skip
    ax.axhline(20, color="grey", linestyle=":", linewidth=1, label="target p95 20 ms")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("records in the store")
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"L3 recall latency: {', '.join(backends)}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
