"""Retrieval quality of long-term memory recall on LoCoMo, against BM25 in the same run.

Data: ../shared/data/locomo/locomo10.json beside the checkout (LoCoMo, CC BY-NC
4.0: read where it lies, never copied). Each conversation's turns are indexed
as records of one series in a real SqliteStore; each question of categories
1-4 (multi-hop, temporal, open-domain, single-hop) is a query. A query hits at
k when any gold evidence turn is among the first k results (any-hit recall@k).

Methods, all over the same turns and questions:
- bm25: plain Okapi BM25 (k1 = 1.2, b = 0.75) over lower-cased word tokens
  of each turn alone: the published baseline;
- bm25+context: the same BM25 over the turns as our store indexes them;
- vector: the store's similar-case search with the offline embedder alone;
- vector+rerank: the store's top-N by vector, reordered by the offline
  reranker (the recall path's two stages; N = --candidates).

Our store indexes each turn together with the --context turns before it (a
reply is mostly about what it answers: "Yes, last Saturday!" names nothing),
so a record is the turn in context, as a case summary is the case in context.
The turn itself is what is returned and scored.

Usage: .venv/bin/python bench/locomo.py [--candidates 50] [--plot out/bench/locomo.png]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from vdoctor.embedders.hashing import HashingEmbedder  # noqa: E402
from vdoctor.memory.recall import OverlapReranker, Reranker  # noqa: E402
from vdoctor.records import MAX_SUMMARY_CHARS, MemoryRecord  # noqa: E402
from vdoctor.stores import SimilarQuery  # noqa: E402
from vdoctor.stores.sqlite import SqliteStore  # noqa: E402

DATA = REPO_ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
CATEGORIES = (1, 2, 3, 4)
KS = (5, 10, 20)
PUBLISHED_BM25 = {5: 0.491, 10: 0.575, 20: 0.654}
_EVIDENCE_RE = re.compile(r"D:?(\d+):(\d+)")
_WORD_RE = re.compile(r"[a-z0-9]+")
QUERY_VIN = "QUERY"


@dataclass
class Turn:
    dia_id: str
    text: str


@dataclass
class Question:
    text: str
    evidence: set[str]
    category: int


def normalise_id(raw: str) -> list[str]:
    """Evidence ids as D<session>:<turn>; repairs the file's few malformed ones ("D8:6; D9:17", "D30:05")."""
    return [f"D{int(s)}:{int(t)}" for s, t in _EVIDENCE_RE.findall(raw)]


def load(path: Path) -> list[tuple[str, list[Turn], list[Question]]]:
    if not path.is_file():
        raise SystemExit(f"LoCoMo not found at {path}: it is read from ../shared/data beside the checkout")
    out = []
    for conv in json.loads(path.read_text(encoding="utf-8")):
        turns = []
        c = conv["conversation"]
        for key in sorted((k for k in c if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1])):
            for t in c[key]:
                text = f"{t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    text += f" [shares an image: {t['blip_caption']}]"
                turns.append(Turn(normalise_id(t["dia_id"])[0], text))
        questions = []
        for qa in conv["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            ids = {i for e in qa.get("evidence", []) for i in normalise_id(str(e))}
            questions.append(Question(str(qa["question"]), ids, int(qa["category"])))
        out.append((str(conv["sample_id"]), turns, questions))
    return out


def words(text: str) -> list[str]:
    return _WORD_RE.findall(text.lower())


class BM25:
    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.tfs = [Counter(words(d)) for d in docs]
        self.lens = np.array([sum(tf.values()) for tf in self.tfs], dtype=np.float64)
        self.avg = float(self.lens.mean()) if len(docs) else 0.0
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(docs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}

    def rank(self, query: str, k: int) -> list[int]:
        scores = np.zeros(len(self.tfs))
        q = set(words(query))
        for i, tf in enumerate(self.tfs):
            s = 0.0
            for w in q:
                f = tf.get(w)
                if f:
                    norm = 1 - self.b + self.b * self.lens[i] / self.avg
                    s += self.idf[w] * f * (self.k1 + 1) / (f + self.k1 * norm)
            scores[i] = s
        return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]


def any_hit(ranked: list[str], gold: set[str]) -> dict[int, bool]:
    return {k: bool(gold & set(ranked[:k])) for k in KS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--candidates", type=int, default=200, help="stage-1 vector candidates before reranking")
    parser.add_argument("--context", type=int, default=1, help="preceding turns indexed with each turn")
    parser.add_argument("--dim", type=int, default=256, help="embedding dimension (the stores' default is 256)")
    parser.add_argument("--plot", type=Path, default=REPO_ROOT / "out" / "bench" / "locomo.png")
    args = parser.parse_args(argv)

    convs = load(args.data)
    embedder = HashingEmbedder(args.dim)
    reranker: Reranker = OverlapReranker()
    methods = ("bm25", "bm25+context", "vector", "vector+rerank")
    hits: dict[str, dict[int, int]] = {m: dict.fromkeys(KS, 0) for m in methods}
    asked = skipped = 0
    started = time.monotonic()
    at = datetime(2023, 1, 1, tzinfo=UTC)
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(str(Path(tmp) / "locomo.db"))
        for n, (sample, turns, questions) in enumerate(convs, 1):
            docs = [" ".join(t.text for t in turns[max(0, i - args.context) : i + 1][::-1]) for i in range(len(turns))]
            vectors = embedder.embed(docs)
            store.upsert_many(
                [
                    MemoryRecord(
                        vin=f"{sample}:{t.dia_id}",
                        session_id=t.dia_id,
                        series=sample,
                        concluded_at=at,
                        summary=docs[i][:MAX_SUMMARY_CHARS],
                        summary_vec=vectors[i].tolist(),
                        root_cause=docs[i][MAX_SUMMARY_CHARS:],
                        fix_action="",
                        priority="P3",
                        recheck_ok=True,
                        prompt_version="locomo-turn",
                    )
                    for i, t in enumerate(turns)
                ]
            )
            bm25 = BM25([t.text for t in turns])
            bm25_context = BM25(docs)
            for q in questions:
                if not q.evidence:
                    skipped += 1
                    continue
                asked += 1
                ranked = {
                    "bm25": [turns[i].dia_id for i in bm25.rank(q.text, max(KS))],
                    "bm25+context": [turns[i].dia_id for i in bm25_context.rank(q.text, max(KS))],
                }
                qv = embedder.embed([q.text])[0]
                cands = store.similar(SimilarQuery(QUERY_VIN, sample, qv, max(args.candidates, max(KS)), at))
                ranked["vector"] = [c.record.session_id for c in cands]
                reranked = reranker.rerank(q.text, [], cands[: args.candidates], max(KS))
                ranked["vector+rerank"] = [c.record.session_id for c in reranked]
                for method, ids in ranked.items():
                    for k, ok in any_hit(ids, q.evidence).items():
                        hits[method][k] += ok
            print(f"[locomo] {n}/{len(convs)} conversations, {asked} questions, {time.monotonic() - started:.0f}s",
                  file=sys.stderr)  # fmt: skip
        store.close()

    print(f"LoCoMo any-hit recall of gold evidence turns, categories 1-4: {asked} questions "
          f"({skipped} without evidence left out), {sum(len(t) for _, t, _ in convs)} turns")  # fmt: skip
    print(f"{'method':<16}" + "".join(f"{f'R@{k}':>8}" for k in KS))
    table = {m: {k: hits[m][k] / asked for k in KS} for m in hits}
    for method, row in table.items():
        print(f"{method:<16}" + "".join(f"{row[k]:>8.3f}" for k in KS))
    print(f"{'bm25 (published)':<16}" + "".join(f"{PUBLISHED_BM25[k]:>8.3f}" for k in KS))
    plot(table, args.plot)
    print(f"settings: offline embedder dim {args.dim}, {args.candidates} vector candidates, context {args.context}")
    print(f"plot: {args.plot}")
    return 0


def plot(table: dict[str, dict[int, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / (len(table) + 1)
    xs = np.arange(len(KS))
    for i, (method, row) in enumerate([*table.items(), ("bm25 (published)", PUBLISHED_BM25)]):
        ax.bar(xs + i * width, [row[k] for k in KS], width, label=method)
    ax.set_xticks(xs + width * len(table) / 2, [f"recall@{k}" for k in KS])
    ax.set_ylim(0, 1)
    ax.axhline(0.65, color="grey", linestyle=":", linewidth=1)
    ax.set_title("LoCoMo evidence retrieval (categories 1-4)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
