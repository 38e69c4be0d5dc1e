"""Okapi BM25: the lexical channel's score, the same formula in every backend.

score(d, q) = sum over the query's distinct terms t of
    idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl)),
    idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

(Lucene's and Doris's form: idf is never negative.) N, df and avgdl are taken
over the corpus the channel searches (one series' verified cases, a
knowledge scope, one LoCoMo conversation).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

# The usual defaults: on LoCoMo conversations 1-5 the best of 96 (k1, b)
# settings was within 0.01 R@10 of these.
BM25_K1 = 1.2
BM25_B = 0.75


def idf(n: int, df: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


class Bm25Corpus:
    """Exact BM25 over a fixed list of tokenised documents (postings, scored with numpy)."""

    def __init__(self, docs: Sequence[Sequence[str]], k1: float = BM25_K1, b: float = BM25_B) -> None:
        self.n = len(docs)
        bags = [Counter(d) for d in docs]
        lengths = np.fromiter((len(d) for d in docs), dtype=np.float64, count=self.n)
        avg = float(lengths.mean()) if self.n else 1.0
        norm = k1 * (1.0 - b + b * lengths / (avg or 1.0))
        ids: dict[str, list[int]] = {}
        tfs: dict[str, list[int]] = {}
        for i, bag in enumerate(bags):
            for term, tf in bag.items():
                ids.setdefault(term, []).append(i)
                tfs.setdefault(term, []).append(tf)
        self._postings: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = {}
        for term, rows in ids.items():
            at = np.asarray(rows, dtype=np.int64)
            freq = np.asarray(tfs[term], dtype=np.float64)
            weight = idf(self.n, len(rows)) * freq * (k1 + 1.0) / (freq + norm[at])
            self._postings[term] = (at, weight)

    def scores(self, terms: Iterable[str]) -> npt.NDArray[np.float64]:
        """BM25 of every document for the query terms (each distinct term counted once)."""
        out = np.zeros(self.n, dtype=np.float64)
        for term in dict.fromkeys(terms):
            hit = self._postings.get(term)
            if hit is not None:
                out[hit[0]] += hit[1]
        return out


def top_scored(scores: npt.NDArray[np.float64], k: int) -> list[tuple[int, float]]:
    """The k best (index, score) with a score above zero, best first, ties by index."""
    if k <= 0:
        return []
    # Every row tied with the k-th best score stays until the sort: which of them make the cut is decided
    # by index, not by where a partition happened to leave them.
    hits = contenders(scores, np.flatnonzero(scores > 0), k)
    order = np.lexsort((hits, -scores[hits]))[:k]
    return [(int(hits[i]), float(scores[hits[i]])) for i in order]


def contenders(scores: npt.NDArray[np.float64], hits: npt.NDArray[np.intp], k: int) -> npt.NDArray[np.intp]:
    """The hits scoring at least the k-th best of them (all of them when k or fewer), in their order: what a
    top-k sort needs to see, every row tied with the k-th included (a full sort of a common term's matches
    costs most of a search)."""
    if len(hits) <= k:
        return hits
    hit_scores = scores[hits]
    kth = float(np.partition(hit_scores, len(hits) - k)[len(hits) - k])
    kept: npt.NDArray[np.intp] = hits[hit_scores >= kth]
    return kept
