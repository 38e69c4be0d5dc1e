"""Retrieval quality of long-term memory recall on LoCoMo, in the product's configuration, against BM25 baselines.

Data: ../shared/data/locomo/locomo10.json beside the checkout (LoCoMo, CC BY-NC
4.0: read where it lies, never copied). Each conversation's turns are stored
as records of one series in a real SqliteStore (its vector index and its
lexical index); each question of categories 1-4 (multi-hop, temporal,
open-domain, single-hop) is a query. A query hits at k when any gold evidence
turn is among the first k results (any-hit recall@k).

A record is a turn as the store indexes a case: its text is the session's date,
the turn, and the turn before it in the same session ("[8 May 2023] B: reply
A: question"); the turn is what is returned and scored. Methods, all over the
same turns and questions, in one run:
- bm25: plain Okapi BM25 (k1 1.2, b 0.75) over lower-cased word tokens of each
  turn alone: the published baseline;
- bm25+context: the same plain BM25 over the same context-joined text the
  store indexes;
- lexical: the store's lexical channel alone (BM25 in ``retrieval.tokens``);
- dense: the store's vector search alone with the embedder (``--embedder``);
- hybrid: the product's similar-case pipeline (``retrieval.cases``: both
  channels, ``LEXICAL_CANDIDATES`` + ``DENSE_CANDIDATES`` candidates, fused with
  ``W_LEXICAL``/``W_DENSE``) then the product's reranker (trouble-code
  overlap: zero here, LoCoMo has no codes), so hybrid is what recall runs;
- hybrid+rerank: hybrid, then a LoCoMo-structure rerank that exists only in
  this bench: ``neighbour`` (the best fused score of the adjacent turns of
  the same session: evidence clusters) and ``speaker`` (the question names
  the turn's speaker). Its two weights are tuned on conversations 1-5 in this
  run. Cases have no analogue of either (they are independent records).

Tuning protocol: anything tuned is tuned on conversations 1-5 and reported on
6-10 (held out) and on all ten. ``--tune`` also prints the fusion grid (weights
and candidates per channel) on 1-5: the product's constants in
``retrieval.hybrid`` were chosen from it. ``--fusions`` compares other ways of
scaling the two channels' scores before the weighted sum (z-score, max, rank,
min-max over the lexical hits only): each one's weight chosen on 1-5, then
scored on 6-10.

Usage: .venv/bin/python bench/locomo.py [--embedder use-m3] [--tune] [--fusions] [--cache out/bench/embeddings]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
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

from vdoctor.embedders import DEFAULT_EMBEDDER, EMBEDDERS, Embedder, EmbedderConfig, embedder_id, open_embedder  # noqa: E402
from vdoctor.memory.recall import SIMILAR_TOP, OverlapReranker  # noqa: E402
from vdoctor.records import MAX_ALERT_TEXT_CHARS, MemoryRecord  # noqa: E402
from vdoctor.retrieval.cases import case_candidates  # noqa: E402
from vdoctor.retrieval.hybrid import (  # noqa: E402
    DENSE_CANDIDATES,
    LEXICAL_CANDIDATES,
    W_DENSE,
    W_LEXICAL,
    ChannelScores,
    fuse,
    minmax,
)
from vdoctor.stores import SimilarQuery  # noqa: E402
from vdoctor.stores.sqlite import SqliteStore  # noqa: E402

DATA = REPO_ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
CATEGORIES = (1, 2, 3, 4)
KS = (5, 10, 20)
TUNE, HELD = range(0, 5), range(5, 10)
PARTS = {"1-5 (tune)": TUNE, "6-10 (held out)": HELD, "all 10": range(10)}
PUBLISHED_BM25 = {5: 0.491, 10: 0.575, 20: 0.654}
GRID = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5)
_EVIDENCE_RE = re.compile(r"D:?(\d+):(\d+)")
_WORD_RE = re.compile(r"[a-z0-9]+")
QUERY_VIN = "QUERY"
AT = datetime(2023, 1, 1, tzinfo=UTC)


@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str
    session: int
    date: str


@dataclass
class Question:
    text: str
    evidence: set[str]
    category: int


def normalise_id(raw: str) -> list[str]:
    """Evidence ids as D<session>:<turn>; repairs the file's few malformed ones ("D8:6; D9:17", "D30:05")."""
    return [f"D{int(s)}:{int(t)}" for s, t in _EVIDENCE_RE.findall(raw)]


def short_date(date: str) -> str:
    """'1:56 pm on 8 May, 2023' -> '8 May 2023' (the day is what a question asks about)."""
    m = re.search(r"on (\d{1,2} \w+),? (\d{4})", date)
    return f"{m.group(1)} {m.group(2)}" if m else date


def load(path: Path) -> list[tuple[str, list[Turn], list[Question], int]]:
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
                date = str(c.get(f"{key}_date_time", ""))
                turns.append(Turn(normalise_id(t["dia_id"])[0], t["speaker"], text, int(key.split("_")[1]), date))
        questions, skipped = [], 0
        for qa in conv["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            ids = {i for e in qa.get("evidence", []) for i in normalise_id(str(e))}
            if not ids:
                skipped += 1
                continue
            questions.append(Question(str(qa["question"]), ids, int(qa["category"])))
        out.append((str(conv["sample_id"]), turns, questions, skipped))
    return out


def indexed_texts(turns: list[Turn]) -> list[str]:
    """What the store indexes per turn: the session's date, the turn, the turn before it in the same session."""
    out = []
    for i, t in enumerate(turns):
        before = turns[i - 1].text if i > 0 and turns[i - 1].session == t.session else ""
        out.append(f"[{short_date(t.date)}] {t.text}" + (f" {before}" if before else ""))
    return out


def as_record(sample: str, turn: Turn, text: str, vector: list[float], embedder: str) -> MemoryRecord:
    """A turn stored as a case whose indexed text (``retrieval.text.record_text``) is ``text``."""
    cut = text.rfind(" ", 0, MAX_ALERT_TEXT_CHARS) if len(text) > MAX_ALERT_TEXT_CHARS else len(text)
    return MemoryRecord(
        vin=f"{sample}:{turn.dia_id}",
        session_id=turn.dia_id,
        series=sample,
        concluded_at=AT,
        summary="",
        summary_vec=vector,
        root_cause=text[cut:].strip(),
        fix_action="",
        priority="P3",
        recheck_ok=True,
        prompt_version="locomo-turn",
        alert_text=text[:cut],
        embedder=embedder,
    )


class PlainBM25:
    """The published baseline's BM25: lower-cased alphanumeric words, no stopwords, no stemming."""

    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75) -> None:
        tfs = [Counter(_WORD_RE.findall(d.lower())) for d in docs]
        lens = np.array([sum(tf.values()) for tf in tfs], dtype=np.float64)
        norm = k1 * (1 - b + b * lens / (float(lens.mean()) or 1.0))
        df: Counter[str] = Counter()
        for tf in tfs:
            df.update(tf.keys())
        n = len(docs)
        self.post: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        rows: dict[str, list[tuple[int, float]]] = {}
        for i, tf in enumerate(tfs):
            for w, f in tf.items():
                rows.setdefault(w, []).append((i, f * (k1 + 1) / (f + norm[i])))
        for w, hits in rows.items():
            idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
            self.post[w] = (np.array([i for i, _ in hits]), np.array([v for _, v in hits]) * idf)
        self.n = n

    def rank(self, query: str, k: int) -> list[int]:
        scores = np.zeros(self.n)
        for w in set(_WORD_RE.findall(query.lower())):
            hit = self.post.get(w)
            if hit is not None:
                scores[hit[0]] += hit[1]
        return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]


def embed_cached(embedder: Embedder, texts: list[str], query: bool, cache: Path | None) -> np.ndarray:
    """Vectors of texts, batched; with ``--cache``, kept on disk by embedder, side and text (a rerun re-reads them)."""
    path = None
    if cache is not None:
        key = hashlib.sha256("\x00".join([embedder_id(embedder), str(query), *texts]).encode()).hexdigest()[:24]
        path = cache / f"{key}.npy"
        if path.is_file():
            return np.load(path)
    out = (
        np.concatenate(
            [(embedder.embed_queries if query else embedder.embed)(texts[i : i + 64]) for i in range(0, len(texts), 64)]
        )
        if texts
        else np.zeros((0, embedder.dim), dtype=np.float32)
    )
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, out)
    return out


@dataclass
class Asked:
    """One question's results: the ranked turn ids of every method, and what the tuning needs."""

    conv: int
    gold: set[str]
    ranked: dict[str, list[str]]
    # For the fusion grid and the structure rerank: each channel's top-100 (id -> score), dense of every turn.
    lexical: dict[str, float]
    dense_all: dict[str, float]
    speakers: set[str]


def any_hit(ranked: list[str], gold: set[str]) -> dict[int, bool]:
    return {k: bool(gold & set(ranked[:k])) for k in KS}


def table(asked: list[Asked], method: str, part: range) -> dict[int, float]:
    rows = [any_hit(a.ranked[method], a.gold) for a in asked if a.conv in part]
    return {k: sum(r[k] for r in rows) / max(1, len(rows)) for k in KS}


def channel_tops(a: Asked, n: int) -> tuple[list[str], list[str]]:
    """Each channel's top n turns (dense, lexical), from the cached channels."""
    return sorted(a.dense_all, key=lambda t: -a.dense_all[t])[:n], sorted(a.lexical, key=lambda t: -a.lexical[t])[:n]


def fused_ranking(a: Asked, w_lex: float, n: int) -> dict[str, float]:
    """The product's fusion (``retrieval.hybrid.fuse``) over n candidates per channel, from the cached channels."""
    dense_top, lex_top = channel_tops(a, n)
    union = dict.fromkeys([*dense_top, *lex_top])
    scores = {t: ChannelScores(a.lexical.get(t) if t in lex_top else None, a.dense_all[t]) for t in union}
    return fuse(scores, w_lex, 1.0 - w_lex)


def _scaled(kind: str, values: dict[str, float]) -> dict[str, float]:
    """One channel's scores over the candidates, put on a common scale (``--fusions``)."""
    v = np.array(list(values.values()), dtype=np.float64)
    if kind == "z-score":
        return dict(zip(values, ((v - v.mean()) / (v.std() or 1.0)).tolist(), strict=True))
    if kind == "max":
        return dict(zip(values, (v / (v.max() or 1.0)).tolist(), strict=True))
    if kind == "rank":
        order = sorted(values, key=lambda t: -values[t])
        return {t: 1.0 - i / len(order) for i, t in enumerate(order)}
    return minmax(values)  # min-max over the lexical hits: the dense side as the product scales it


# Ways of putting the two channels on one scale before the weighted sum; "min-max" is the product's.
FUSIONS = ("min-max", "min-max over lexical hits", "z-score", "max", "rank")


def fused_by(a: Asked, kind: str, w_lex: float, n: int) -> list[str]:
    """The union of both channels' top n, ranked by the weighted sum of their scores scaled by ``kind``."""
    if kind == "min-max":  # the product's own fusion
        fused = fused_ranking(a, w_lex, n)
        return sorted(fused, key=lambda t: (-fused[t], t))
    dense_top, lex_top = channel_tops(a, n)
    union = list(dict.fromkeys([*dense_top, *lex_top]))
    if kind == "min-max over lexical hits":
        hits = minmax({t: a.lexical[t] for t in lex_top})
        lexical = {t: hits.get(t, 0.0) for t in union}
        kind = "min-max"
    else:
        lexical = _scaled(kind, {t: a.lexical[t] if t in lex_top else 0.0 for t in union})
    dense = _scaled(kind, {t: a.dense_all[t] for t in union})
    score = {t: w_lex * lexical[t] + (1.0 - w_lex) * dense[t] for t in union}
    return sorted(union, key=lambda t: (-score[t], t))


def structure_rerank(a: Asked, fused: dict[str, float], turns: dict[str, Turn], w_nb: float, w_sp: float) -> list[str]:
    """Fused score + w_nb * the best fused score of an adjacent turn of the same session + w_sp * speaker named."""

    def neighbours(dia: str) -> list[str]:
        s, t = dia[1:].split(":")
        return [f"D{s}:{int(t) - 1}", f"D{s}:{int(t) + 1}"]

    score = {
        t: f
        + w_nb * max((fused.get(n, 0.0) for n in neighbours(t)), default=0.0)
        + w_sp * (turns[t].speaker in a.speakers)
        for t, f in fused.items()
    }
    return sorted(score, key=lambda t: (-score[t], t))


def mean_recall(rankings: list[tuple[Asked, list[str]]]) -> float:
    hits = [any_hit(r, a.gold) for a, r in rankings]
    return float(np.mean([[h[k] for k in KS] for h in hits])) if hits else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--embedder", choices=EMBEDDERS, default=DEFAULT_EMBEDDER)
    parser.add_argument("--dim", type=int, default=256, help="dimension of the hashing embedder")
    parser.add_argument("--tune", action="store_true", help="also print the fusion grid on conversations 1-5")
    parser.add_argument("--fusions", action="store_true", help="also compare score normalisations (1-5, 6-10)")
    parser.add_argument("--cache", type=Path, help="keep embeddings here between runs (e.g. out/bench/embeddings)")
    parser.add_argument("--json", type=Path, help="write the tables as JSON here")
    args = parser.parse_args(argv)

    convs = load(args.data)
    embedder = open_embedder(args.embedder, EmbedderConfig(dim=args.dim))
    reranker = OverlapReranker()
    asked: list[Asked] = []
    turn_of: list[dict[str, Turn]] = []
    started = time.monotonic()
    cpu_started = time.process_time()
    embed_s = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(str(Path(tmp) / "locomo.db"))
        for n, (sample, turns, questions, _) in enumerate(convs):
            docs = indexed_texts(turns)
            t0 = time.process_time()
            vectors = embed_cached(embedder, docs, False, args.cache)
            qvectors = embed_cached(embedder, [q.text for q in questions], True, args.cache)
            embed_s += time.process_time() - t0
            made_by = embedder_id(embedder)
            store.upsert_many(
                [as_record(sample, t, d, v.tolist(), made_by) for t, d, v in zip(turns, docs, vectors, strict=True)]
            )
            ids = [t.dia_id for t in turns]
            turn_of.append(dict(zip(ids, turns, strict=True)))
            plain = PlainBM25([t.text for t in turns])
            plain_ctx = PlainBM25(docs)
            speakers_in = {t.speaker for t in turns}
            for q, qv in zip(questions, qvectors, strict=True):
                query = SimilarQuery(QUERY_VIN, sample, qv, DENSE_CANDIDATES, AT, text=q.text,
                                     embedder=embedder_id(embedder))  # fmt: skip
                lexical = store.lexical(SimilarQuery(QUERY_VIN, sample, qv, 100, AT, text=q.text))
                dense = store.similar(SimilarQuery(QUERY_VIN, sample, qv, max(KS), AT))
                hybrid = reranker.rerank(q.text, [], case_candidates(store, query), max(KS))
                asked.append(
                    Asked(
                        conv=n,
                        gold=q.evidence,
                        ranked={
                            "bm25": [ids[i] for i in plain.rank(q.text, max(KS))],
                            "bm25+context": [ids[i] for i in plain_ctx.rank(q.text, max(KS))],
                            "lexical": [s.record.session_id for s in lexical[: max(KS)]],
                            "dense": [s.record.session_id for s in dense],
                            "hybrid": [s.record.session_id for s in hybrid],
                        },
                        lexical={s.record.session_id: s.score for s in lexical},
                        dense_all=dict(zip(ids, (vectors @ qv).tolist(), strict=True)),
                        speakers={s for s in speakers_in if re.search(rf"\b{re.escape(s)}\b", q.text)},
                    )
                )
            print(f"[locomo] {n + 1}/{len(convs)} conversations, {len(asked)} questions, "
                  f"{time.monotonic() - started:.0f}s", file=sys.stderr)  # fmt: skip
        store.close()

    # The structure rerank's two weights: tuned on conversations 1-5, over the product's fusion.
    fused = [fused_ranking(a, W_LEXICAL, max(LEXICAL_CANDIDATES, DENSE_CANDIDATES)) for a in asked]
    best = (-1.0, 0.0, 0.0)
    for w_nb, w_sp in itertools.product(GRID, GRID):
        rows = [
            (a, structure_rerank(a, f, turn_of[a.conv], w_nb, w_sp))
            for a, f in zip(asked, fused, strict=True)
            if a.conv in TUNE
        ]
        best = max(best, (mean_recall(rows), w_nb, w_sp))
    _, w_nb, w_sp = best
    for a, f in zip(asked, fused, strict=True):
        a.ranked["hybrid+rerank"] = structure_rerank(a, f, turn_of[a.conv], w_nb, w_sp)[: max(KS)]

    methods = ["bm25", "bm25+context", "lexical", "dense", "hybrid", "hybrid+rerank"]
    turns_n = sum(len(t) for _, t, _, _ in convs)
    skipped = sum(s for *_, s in convs)
    print(f"LoCoMo any-hit recall of gold evidence turns, categories 1-4: {len(asked)} questions "
          f"({skipped} without evidence left out), {turns_n} turns")  # fmt: skip
    header = f"{'method':<16}" + "".join(f"{name:>24}" for name in PARTS)
    print(header)
    print(f"{'':<16}" + "".join(f"{' / '.join(f'R@{k}' for k in KS):>24}" for _ in PARTS))
    results = {m: {name: table(asked, m, part) for name, part in PARTS.items()} for m in methods}
    for m in methods:
        print(f"{m:<16}" + "".join(f"{' / '.join(f'{results[m][name][k]:.3f}' for k in KS):>24}" for name in PARTS))
    print(f"{'bm25 (published)':<16}{' / '.join(f'{PUBLISHED_BM25[k]:.3f}' for k in KS):>72}")
    print(
        f"settings: embedder {args.embedder} ({embedder_id(embedder)}); hybrid = the product's pipeline: "
        f"{LEXICAL_CANDIDATES} lexical + {DENSE_CANDIDATES} dense candidates, weights {W_LEXICAL}/{W_DENSE} "
        f"(min-max fused), product reranker (code overlap; no codes here; recall keeps its top {SIMILAR_TOP}, "
        f"R@k scores its top 20); hybrid+rerank weights neighbour {w_nb}, speaker {w_sp} (tuned on 1-5)"
    )
    wall = time.monotonic() - started
    print(f"run: {wall:.0f} s wall, {time.process_time() - cpu_started:.0f} s CPU ({embed_s:.0f} s CPU embedding); "
          f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    if args.tune:
        print("fusion grid on conversations 1-5 (mean of R@5/10/20; the product's constants are in retrieval.hybrid):")
        for n_cands in (20, 30, 50, 100):
            cells = []
            for w_lex in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
                rows = []
                for a in asked:
                    if a.conv in TUNE:
                        f = fused_ranking(a, w_lex, n_cands)
                        rows.append((a, sorted(f, key=lambda t: (-f[t], t))))
                cells.append(f"w_lex {w_lex}: {mean_recall(rows):.3f}")
            print(f"  {n_cands:>3} per channel  " + "  ".join(cells))
    if args.fusions:
        n = max(LEXICAL_CANDIDATES, DENSE_CANDIDATES)
        print(f"fusion normalisations at {n} per channel: the weight chosen on conversations 1-5 (mean of "
              "R@5/10/20), then R@5 / R@10 / R@20 held out (6-10) at that weight")  # fmt: skip
        for kind in FUSIONS:
            best_w, best_tune = 0.0, -1.0
            for w_lex in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
                tune = mean_recall([(a, fused_by(a, kind, w_lex, n)) for a in asked if a.conv in TUNE])
                if tune > best_tune:
                    best_w, best_tune = w_lex, tune
            held = [any_hit(fused_by(a, kind, best_w, n), a.gold) for a in asked if a.conv in HELD]
            cells = " / ".join(f"{sum(h[k] for h in held) / len(held):.3f}" for k in KS)
            print(f"  {kind:<26} w_lex {best_w}: 1-5 {best_tune:.3f}   6-10 {cells}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"embedder": args.embedder, "results": results, "rerank": [w_nb, w_sp]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
