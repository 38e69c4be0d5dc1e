"""Recall latency of the L3 stores at 10k, 100k and 1M records, with an exact numpy scan beside it.

For each size, a fleet of records is bulk-loaded into a fresh SQLite file
(vehicles with several cases each, --series series, about half verified,
random normalised 256-d vectors); with ``--backends sqlite mem0`` the same
records also go into a fresh ``mem0://`` folder (through the store's
``upsert_many``: Mem0 has no bulk load). Then, in the same run, for every
backend and the same query sequence:

- recall: the whole session-open path (``vdoctor.memory.recall.recall``: own
  history, query embedding, similar-case search, reranking, rendering within
  800 tokens) for random vehicles, through the store's persisted per-series index;
- similar: the store's similar-case search alone (index scan + SQL fetch of the top 20);
- numpy scan: an exact scan of every vector in the table in one float32
  matrix, with the filters (series, verified, valid, other vehicle) as masks
  and a top-20 partition, i.e. what a store without the per-series index would do.

Also: load time, index build time (sqlite: the first similar search on a
fresh file; mem0: opening the folder, which rebuilds the key index from one
``get_all``), and reopen time. Figures are printed with the settings and the
machine's load average, and plotted.

Usage: .venv/bin/python bench/recall_latency.py [--sizes 10000 100000 1000000] [--queries 300]
       [--backends sqlite mem0]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import ThreadpoolController

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from vdoctor.embedders import DEFAULT_DIM  # noqa: E402
from vdoctor.embedders.hashing import HashingEmbedder  # noqa: E402
from vdoctor.memory.recall import SIMILAR_CANDIDATES, recall  # noqa: E402
from vdoctor.records import MemoryRecord, utc_now  # noqa: E402
from vdoctor.stores import MemoryStore, SimilarQuery, open_store  # noqa: E402
from vdoctor.stores.sqlite import SqliteStore  # noqa: E402
from vdoctor.stores.vecindex import vin_hash  # noqa: E402

CASES_PER_VEHICLE = 5
CHUNK = 50_000
# Records per upsert_many call when loading a mem0 folder.
MEM0_CHUNK = 2_000
BACKENDS = ("sqlite", "mem0")
SYMPTOMS = ["电池包单体压差过大", "coolant pump stall", "lost communication with ECM", "insulation fault"]


def progress(msg: str) -> None:
    print(f"[recall-latency] {msg}", file=sys.stderr, flush=True)


def case_fields(i: int, vins: list[str], series: int, now: int) -> tuple[str, str, str, int, str]:
    """(vin, session_id, series, concluded epoch, summary) of record i: the same for every backend."""
    vehicles = len(vins)
    v = i % vehicles
    at = now - 86_400 * (i // vehicles) - v
    summary = f"2026-11-01 | P0A7F | cell_voltage_diff_mv={100 + i % 90} | case {i}"
    return vins[v], f"{vins[v]}-{i}", f"S{v % series}", at, summary


def load(
    path: Path, n: int, series: int, dim: int, seed: int, now: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Bulk-load n records; returns (vectors, series ids, eligible mask, vins) for the numpy baseline."""
    SqliteStore(str(path)).close()  # creates the schema
    rng = np.random.default_rng(seed)
    vehicles = max(1, n // CASES_PER_VEHICLE)
    vins = [f"LBENCH{i:011d}" for i in range(vehicles)]
    all_vecs = np.empty((n, dim), dtype=np.float32)
    series_ids = np.empty(n, dtype=np.int32)
    eligible = np.empty(n, dtype=bool)
    row_vins = np.empty(n, dtype=np.int64)
    conn = sqlite3.connect(str(path))
    conn.execute("BEGIN")
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        vecs = rng.standard_normal((m, dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        ok = rng.random(m) < 0.5
        rows = []
        for j in range(m):
            i = start + j
            vin, sid, series_name, at, summary = case_fields(i, vins, series, now)
            all_vecs[i], series_ids[i], eligible[i] = vecs[j], (i % vehicles) % series, ok[j]
            row_vins[i] = vin_hash(vin)
            rows.append(
                (
                    vin, sid, series_name, at, summary,
                    vecs[j].tobytes(), "weak cell group", "balance the pack", "P2", '["P0A7F"]',
                    int(ok[j]), "case-summary-v1", 1, at, 1,
                )
            )  # fmt: skip
        conn.executemany(
            "INSERT INTO case_memory (vin, session_id, series, concluded_at, summary, summary_vec, root_cause, "
            "fix_action, priority, dtc_codes, recheck_ok, prompt_version, valid, updated_at, seq) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        progress(f"  sqlite: loaded {start + m:,}/{n:,} records")
    conn.execute("UPDATE vd_meta SET value = '1' WHERE key = 'seq'")
    conn.commit()
    conn.close()
    return all_vecs, series_ids, eligible, row_vins, vins


def load_mem0(url: str, vecs: np.ndarray, eligible: np.ndarray, vins: list[str], series: int, now: int) -> None:
    """The same records into a fresh mem0:// folder, through the store (one Mem0 add per record)."""
    store = open_store(url)
    try:
        n = len(vecs)
        for start in range(0, n, MEM0_CHUNK):
            batch = []
            for i in range(start, min(n, start + MEM0_CHUNK)):
                vin, sid, series_name, at, summary = case_fields(i, vins, series, now)
                batch.append(
                    MemoryRecord(
                        vin=vin, session_id=sid, series=series_name, concluded_at=at, summary=summary,
                        summary_vec=vecs[i].tolist(), root_cause="weak cell group", fix_action="balance the pack",
                        priority="P2", dtc_codes=["P0A7F"], recheck_ok=bool(eligible[i]),
                        prompt_version="case-summary-v1", updated_at=at,
                    )
                )  # fmt: skip
            store.upsert_many(batch)
            progress(f"  mem0: loaded {start + len(batch):,}/{n:,} records")
    finally:
        store.close()


def pct(values: list[float]) -> tuple[float, float]:
    return float(np.percentile(values, 50)), float(np.percentile(values, 95))


def open_backend(backend: str, n: int, tmp: Path) -> tuple[MemoryStore, str]:
    if backend == "sqlite":
        return SqliteStore(str(tmp / f"bench-{n}.db")), ""
    url = f"mem0:///{tmp / f'bench-{n}.mem0'}"
    return open_store(url), url


def bench_size(n: int, args: argparse.Namespace, tmp: Path) -> list[dict[str, float | str]]:
    path = tmp / f"bench-{n}.db"
    now = int(utc_now().timestamp())
    progress(f"{n:,} records: loading")
    t = time.perf_counter()
    vecs, series_ids, eligible, row_vins, vins = load(path, n, args.series, DEFAULT_DIM, args.seed, now)
    load_s = {"sqlite": time.perf_counter() - t}
    if "mem0" in args.backends:
        t = time.perf_counter()
        load_mem0(f"mem0:///{tmp / f'bench-{n}.mem0'}", vecs, eligible, vins, args.series, now)
        load_s["mem0"] = time.perf_counter() - t
    embedder = HashingEmbedder()
    rng = np.random.default_rng(args.seed + 1)
    # One query sequence, run against every backend.
    queries = [(int(rng.integers(len(vins))), SYMPTOMS[q % len(SYMPTOMS)]) for q in range(args.queries)]
    blas = ThreadpoolController()
    scan_ms = []
    for v, symptom in queries:
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
        # Build: sqlite's first similar search builds its vector index; mem0's open rebuilds its key index.
        t = time.perf_counter()
        store, _ = open_backend(backend, n, tmp)
        store.similar(SimilarQuery("nobody", "S0", embedder.embed(["warm-up"])[0], 1))
        out["build_s"] = time.perf_counter() - t
        store.close()  # sqlite saves its index
        t = time.perf_counter()
        store, _ = open_backend(backend, n, tmp)
        store.similar(SimilarQuery("nobody", "S0", embedder.embed(["warm-up"])[0], 1))
        out["reopen_s"] = time.perf_counter() - t
        now_dt = utc_now()
        recall_ms, similar_ms, tokens = [], [], []
        for q, (v, symptom) in enumerate(queries):
            vin, series = vins[v], f"S{v % args.series}"
            t = time.perf_counter()
            got = recall(store, embedder, vin, series, symptom, ["P0A7F"], now_dt)
            recall_ms.append((time.perf_counter() - t) * 1000)
            tokens.append(got.tokens)
            qv = embedder.embed([symptom])[0]
            t = time.perf_counter()
            store.similar(SimilarQuery(vin, series, qv, SIMILAR_CANDIDATES))
            similar_ms.append((time.perf_counter() - t) * 1000)
            if (q + 1) % max(1, args.queries // 4) == 0:
                progress(f"  {backend}: {q + 1}/{args.queries} queries")
        store.close()
        out["recall_p50"], out["recall_p95"] = pct(recall_ms)
        out["similar_p50"], out["similar_p95"] = pct(similar_ms)
        out["scan_p50"], out["scan_p95"] = pct(scan_ms)
        out["tokens_p95"] = float(np.percentile(tokens, 95))
        rows.append(out)
    path.unlink()
    return rows


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--series", type=int, default=8, help="vehicle series in the fleet")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--backends", nargs="+", choices=BACKENDS, default=["sqlite"], help="stores to measure side by side"
    )
    parser.add_argument("--tmp", type=Path, default=None, help="folder for the database files (default: system temp)")
    parser.add_argument("--plot", type=Path, default=REPO_ROOT / "out" / "bench" / "recall_latency.png")
    args = parser.parse_args(argv)

    load_before = loadavg()
    rows: list[dict[str, float | str]] = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for n in args.sizes:
            rows.extend(bench_size(n, args, Path(tmp)))
    print(f"L3 recall latency (ms): backends {' '.join(args.backends)}; {args.queries} queries per size and backend "
          f"(the same sequence for each); {args.series} series; ~half verified; dim {DEFAULT_DIM}; "
          f"top-{SIMILAR_CANDIDATES} then rerank; HashingEmbedder; {CASES_PER_VEHICLE} cases per vehicle")  # fmt: skip
    print(f"load average (1/5/15 min): {load_before} at start, {loadavg()} at end; {os.cpu_count()} cores")
    head = ("backend", "records", "recall p50", "recall p95", "similar p50", "similar p95", "scan p50", "scan p95",
            "scan/sim p95", "load s", "build s", "reopen s", "tokens p95")  # fmt: skip
    print("  ".join(f"{h:>12}" for h in head))
    for r in rows:
        cells = [str(r["backend"]), f"{int(r['n']):,}", *(f"{float(r[k]):.2f}" for k in ("recall_p50", "recall_p95",
                 "similar_p50", "similar_p95", "scan_p50", "scan_p95")),
                 f"{float(r['scan_p95']) / float(r['similar_p95']):.2f}x", f"{float(r['load_s']):.1f}",
                 f"{float(r['build_s']):.1f}", f"{float(r['reopen_s']):.2f}",
                 f"{float(r['tokens_p95']):.0f}"]  # fmt: skip
        print("  ".join(f"{c:>12}" for c in cells))
    if len(args.backends) > 1:
        for n in args.sizes:
            by = {r["backend"]: r for r in rows if r["n"] == n}
            ratios = ", ".join(
                f"{b} / sqlite recall p95 {float(by[b]['recall_p95']) / float(by['sqlite']['recall_p95']):.1f}x"
                for b in args.backends
                if b != "sqlite" and "sqlite" in by
            )
            if ratios:
                print(f"  {n:,} records: {ratios}")
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
