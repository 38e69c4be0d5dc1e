"""Vehicle-domain retrieval: a symptom told in other words (Chinese or English, no codes) finds the verified cases.

The set is our own (``bench/vehicle_faults.py``): for each of the 41 faults of
the product's knowledge pack, alert texts as a vehicle or call centre reports
them and symptom descriptions in other words, without trouble codes. Two
series (EV-A: battery, charging, isolation, thermal, motor, network, chassis,
body, electrical; ICE-C: engine, fuel, emission, cooling, network, chassis,
body, electrical), ``--per-fault`` verified cases per fault and series, each
as the product stores it: the alert text as reported, the code, the pack's
root cause and fix, and summary lines in the product's format. A query
searches its series' verified cases (other vehicles, as of a time after all of
them); its gold is every case of its fault; every other case of the series is
a distractor, sibling faults included (three wheel-speed sensors, misfire and
cylinder-1 misfire, three coolant faults, four lost-communication faults).

Each embedder's cases go into a real SqliteStore (its vector and lexical
indexes); every method runs the product's code:
- lexical: the store's lexical channel alone (BM25, ``retrieval.tokens``);
- dense: the store's vector search alone;
- hybrid: the product's similar-case recall (``retrieval.cases.case_candidates``:
  both channels' top candidates, fused, then ``OverlapReranker``; the queries
  carry no codes, so its code term is zero), top ``SIMILAR_TOP``.
Two ways of indexing a case, side by side: ``full`` (alert text, codes, root
cause, fix, summary: what the product indexes) and ``summary`` (the summary
lines alone: what it embedded before).

Any-hit recall@k (any gold case among the first k), over all queries and by
language; MRR over the first 20. Nothing is tuned on this set (the fusion
weights come from LoCoMo conversations 1-5).

Usage: .venv/bin/python bench/vehicle_retrieval.py [--embedders hashing,use-m3,e5-small] [--per-fault 4]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from vehicle_faults import EV_FAMILIES, EV_NETWORK, FAULTS, ICE_FAMILIES, ICE_NETWORK  # noqa: E402

from vdoctor.embedders import EMBEDDERS, Embedder, EmbedderConfig, embedder_id, open_embedder  # noqa: E402
from vdoctor.memory.recall import SIMILAR_TOP, OverlapReranker  # noqa: E402
from vdoctor.records import MemoryRecord  # noqa: E402
from vdoctor.retrieval.cases import case_candidates  # noqa: E402
from vdoctor.retrieval.hybrid import DENSE_CANDIDATES, LEXICAL_CANDIDATES, W_DENSE, W_LEXICAL  # noqa: E402
from vdoctor.retrieval.text import record_dense_text  # noqa: E402
from vdoctor.stores import SimilarQuery  # noqa: E402
from vdoctor.stores.sqlite import SqliteStore  # noqa: E402

PACK = REPO_ROOT / "vdoctor" / "knowledge" / "dtc_pack.json"
VIN_CHARS = "ABCDEFGHJKLMNPRSTUVWXYZ0123456789"
SERIES = {"EV-A": ("LRWE1A7C", EV_FAMILIES, EV_NETWORK), "ICE-C": ("LSVAU2A4", ICE_FAMILIES, ICE_NETWORK)}
EXTRA_SIGNALS = {
    "EV-A": [("soc_pct", 15, 95, 0), ("pack_temp_c", 18, 40, 1), ("odometer_km", 3000, 90000, 0)],
    "ICE-C": [("coolant_temp_c", 80, 98, 1), ("odometer_km", 8000, 180000, 0), ("battery_voltage_v", 12.2, 14.4, 2)],
}
START = datetime(2026, 3, 1, tzinfo=UTC)
AS_OF = START + timedelta(days=300)
KS = (1, 5, 20)


@dataclass
class Query:
    series: str
    code: str
    lang: str
    text: str
    gold: set[str]


def _vin(rng: random.Random, prefix: str) -> str:
    return prefix + "".join(rng.choice(VIN_CHARS) for _ in range(17 - len(prefix)))


def _summary(rng: random.Random, vin: str, code: str, entry: dict[str, Any], ts: datetime, series: str) -> str:
    """Summary lines in the product's format (an earlier investigating line for some cases)."""
    conf = rng.choice([0.7, 0.8, 0.8, 0.9])
    extras = " ".join(f"{n}={round(rng.uniform(lo, hi), d):g}" for n, lo, hi, d in rng.sample(EXTRA_SIGNALS[series], 2))
    lines = []
    confirm = entry.get("confirm") or {}
    if "signal" in confirm:
        t = float(confirm["threshold"])
        span = max(abs(t) * 0.6, 5.0)
        value = t + rng.uniform(0.05, 1.0) * span if confirm["op"] == ">=" else t - rng.uniform(0.05, 1.0) * span
        value = round(value, 1) if abs(t) < 100 else round(value)
        sig, rule = confirm["signal"], f"{confirm['signal']}={value:g}{confirm['op']}{t:g}"
        if rng.random() < 0.4:
            t0 = ts - timedelta(hours=rng.randint(1, 20))
            lines.append(f"{t0:%Y-%m-%d %H:%M} | alert {code} {sig}={value:g} {extras} | investigating | dtc://{code}")
        lines.append(
            f"{ts:%Y-%m-%d %H:%M} | concluded {code} | {entry['priority']} conf {conf:.2f}; confirmed {rule} | "
            f"signal://{vin}/{sig}@{ts:%Y-%m-%dT%H:%M:%SZ}"
        )
    else:
        t0 = ts - timedelta(hours=rng.randint(1, 20))
        lines.append(f"{t0:%Y-%m-%d %H:%M} | alert {code} {extras} | investigating | dtc://{code}")
        lines.append(
            f"{ts:%Y-%m-%d %H:%M} | concluded {code} | {entry['priority']} conf {conf:.2f}; confirmed repeat 2 | "
            f"dtc://{code}"
        )
    return "\n".join(lines)[:300]


def build(per_fault: int, seed: int) -> tuple[list[MemoryRecord], list[Query]]:
    """The cases (without vectors) and the queries, deterministic for a seed."""
    rng = random.Random(seed)
    pack = {c["code"]: c for c in json.loads(PACK.read_text(encoding="utf-8"))["codes"]}
    cases: list[MemoryRecord] = []
    queries: list[Query] = []
    for series, (prefix, families, network) in SERIES.items():
        codes = [c for c, e in pack.items() if e["family"] in families and (e["family"] != "network" or c in network)]
        for code in sorted(codes):
            alerts, symptoms = FAULTS[code]
            entry = pack[code]
            ids = []
            for k in range(per_fault):
                vin = _vin(rng, prefix)
                ts = START + timedelta(minutes=rng.randint(0, 240 * 24 * 60))
                summary = _summary(rng, vin, code, entry, ts, series)
                opened = ts - timedelta(hours=rng.randint(0, 20))
                sid = f"{vin}-{opened:%Y%m%dT%H%M%S}"
                ids.append(sid)
                cases.append(
                    MemoryRecord(
                        vin=vin,
                        session_id=sid,
                        series=series,
                        opened_ts=opened,
                        concluded_at=ts,
                        summary=summary,
                        summary_vec=[0.0],  # set when an embedder stores it
                        root_cause=entry["root_cause"],
                        fix_action=entry["fix_action"],
                        priority=entry["priority"],
                        dtc_codes=[code],
                        recheck_ok=True,
                        verified_ts=ts + timedelta(days=1),
                        prompt_version="vehicle-set",
                        alert_text=alerts[k % len(alerts)] if k < len(alerts) else rng.choice(alerts),
                    )
                )
            for text in symptoms:
                assert not any(c in text for c in FAULTS), text  # no trouble code in a query
                lang = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in text) else "en"
                queries.append(Query(series, code, lang, text, set(ids)))
    return cases, queries


def summary_only(r: MemoryRecord) -> MemoryRecord:
    """The case indexed as before: its summary lines alone (codes kept for the record, not in the text)."""
    return r.model_copy(update={"alert_text": "", "root_cause": "", "fix_action": ""})


def run(embedder: Embedder, cases: list[MemoryRecord], queries: list[Query], tmp: Path) -> dict[str, list[list[str]]]:
    """Ranked session ids per method and query, the cases stored in a fresh SqliteStore."""
    texts = [record_dense_text(r) for r in cases]
    vectors = np.concatenate([embedder.embed(texts[i : i + 64]) for i in range(0, len(texts), 64)])
    made_by = embedder_id(embedder)
    store = SqliteStore(str(tmp / f"cases-{made_by.replace('/', '_')}-{len(list(tmp.iterdir()))}.db"))
    store.upsert_many(
        [
            r.model_copy(update={"summary_vec": v.tolist(), "embedder": made_by})
            for r, v in zip(cases, vectors, strict=True)
        ]
    )
    qvectors = embedder.embed_queries([q.text for q in queries])
    asker = {s: p + "0" * (17 - len(p)) for s, (p, _, _) in SERIES.items()}
    out: dict[str, list[list[str]]] = {"lexical": [], "dense": [], "hybrid": []}
    reranker = OverlapReranker()
    for q, qv in zip(queries, qvectors, strict=True):
        ask = SimilarQuery(asker[q.series], q.series, qv, DENSE_CANDIDATES, AS_OF, text=q.text, embedder=made_by)
        out["lexical"].append([s.record.session_id for s in store.lexical(SimilarQuery(
            ask.exclude_vin, q.series, qv, max(KS), AS_OF, text=q.text))])  # fmt: skip
        out["dense"].append([s.record.session_id for s in store.similar(SimilarQuery(
            ask.exclude_vin, q.series, qv, max(KS), AS_OF, embedder=made_by))])  # fmt: skip
        ranked = reranker.rerank(q.text, [], case_candidates(store, ask), max(KS))
        out["hybrid"].append([s.record.session_id for s in ranked])
    store.close()
    return out


def scores(queries: list[Query], ranked: list[list[str]]) -> dict[str, float]:
    row: dict[str, float] = {}
    for lang in ("all", "zh", "en"):
        pairs = [(q, r) for q, r in zip(queries, ranked, strict=True) if lang == "all" or q.lang == lang]
        for k in KS:
            if lang == "all" or k == 5:
                row[f"R@{k} {lang}"] = float(np.mean([bool(q.gold & set(r[:k])) for q, r in pairs]))
    rr = [
        next((1.0 / (i + 1) for i, s in enumerate(r) if s in q.gold), 0.0) for q, r in zip(queries, ranked, strict=True)
    ]
    row["MRR all"] = float(np.mean(rr))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedders", default="hashing,use-m3,e5-small", help=f"comma-separated, of {EMBEDDERS}")
    parser.add_argument("--per-fault", type=int, default=4, help="verified cases per fault and series")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="write the table as JSON here")
    args = parser.parse_args(argv)

    cases, queries = build(args.per_fault, args.seed)
    variants = {"full": cases, "summary": [summary_only(r) for r in cases]}
    table: dict[str, dict[str, float]] = {}
    timing = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.embedders.split(","):
            embedder = open_embedder(name, EmbedderConfig())
            started = time.process_time()
            for variant, records in variants.items():
                ranked = run(embedder, records, queries, Path(tmp))
                for method, rows in ranked.items():
                    label = "lexical (BM25)" if method == "lexical" else f"{method} {name}"
                    table[f"{label} | {variant}"] = scores(queries, rows)
            timing.append(f"{name} {time.process_time() - started:.0f} s CPU")
            print(f"[vehicle] {name} done", file=sys.stderr)
    series_n = {s: sum(r.series == s for r in cases) for s in SERIES}
    print(
        f"Vehicle-domain retrieval: {len(cases)} verified cases {series_n}, {len(queries)} symptom queries "
        f"({sum(q.lang == 'zh' for q in queries)} zh, {sum(q.lang == 'en' for q in queries)} en), "
        f"{args.per_fault} gold cases per query among its series' cases"
    )
    cols = ["R@1 all", "R@5 all", "R@5 zh", "R@5 en", "R@20 all", "MRR all"]
    print(f"{'method | indexed text':<34}" + "".join(f"{c:>10}" for c in cols))
    for label in sorted(table, key=lambda lab: (lab.split(" | ")[1] != "full", lab)):
        print(f"{label:<34}" + "".join(f"{table[label][c]:>10.3f}" for c in cols))
    print(
        f"settings: hybrid = the product's recall: {LEXICAL_CANDIDATES} lexical + {DENSE_CANDIDATES} dense "
        f"candidates, weights {W_LEXICAL}/{W_DENSE}, OverlapReranker, top {SIMILAR_TOP} (R@20 from its top 20); "
        f"seed {args.seed}; nothing tuned on this set; {', '.join(timing)}; load average {os.getloadavg()[0]:.2f}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
