"""Fusing the lexical and the dense channel: the one place their counts and weights live.

Each channel returns its own top candidates (``LEXICAL_CANDIDATES`` by BM25,
``DENSE_CANDIDATES`` by inner product). Over the union, each channel's score is
min-max scaled to [0, 1] and the two are summed with ``W_LEXICAL`` and
``W_DENSE``. A candidate found only by the dense channel gets its real dense
score and a lexical score of 0 (BM25 was not computed for it: it ranked
below the lexical channel's top ``LEXICAL_CANDIDATES`` or shared no term);
one found only by the lexical channel gets its real dense score too, which
the caller computes from the record's vector. On LoCoMo conversations 1-5
this "0 for the missing BM25" matched fusing true BM25 scores of every
candidate to within 0.003 R@k, and it lets every backend run its lexical
channel its own way (our index, BM25 in the client, Doris's inverted index).

Weights and counts were chosen on LoCoMo conversations 1-5 only
(``bench/locomo.py --tune``); conversations 6-10 and our vehicle set are
reported, never tuned on. Weighted score fusion beat reciprocal rank fusion
there for every embedder (the weaker the dense channel, the more rank fusion
hurt).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

# Candidates per channel before fusion. Tuned on LoCoMo conversations 1-5 (50 and 100 tied; 50 is cheaper).
LEXICAL_CANDIDATES = 50
DENSE_CANDIDATES = 50
# Fusion weights over min-max scaled channel scores. Tuned on LoCoMo conversations 1-5 only.
W_LEXICAL = 0.6
W_DENSE = 0.4

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class ChannelScores:
    """What each channel said about one candidate: BM25 (None: not among the lexical hits) and dense score."""

    lexical: float | None
    dense: float


def minmax(values: Mapping[K, float]) -> dict[K, float]:
    """Scale to [0, 1] over the given values; all equal -> all 1 (no channel evidence either way)."""
    if not values:
        return {}
    lo, hi = min(values.values()), max(values.values())
    if hi <= lo:
        return dict.fromkeys(values, 1.0)
    return {key: (v - lo) / (hi - lo) for key, v in values.items()}


def fuse(scores: Mapping[K, ChannelScores], w_lexical: float = W_LEXICAL, w_dense: float = W_DENSE) -> dict[K, float]:
    """The fused score of every candidate of the union (higher is better)."""
    lexical = minmax({key: s.lexical or 0.0 for key, s in scores.items()})
    dense = minmax({key: s.dense for key, s in scores.items()})
    return {key: w_lexical * lexical[key] + w_dense * dense[key] for key in scores}


def fuse_columns(
    lexical: Sequence[float | None], dense: Sequence[float], w_lexical: float = W_LEXICAL, w_dense: float = W_DENSE
) -> list[float]:
    """``fuse`` over candidates given as columns (candidate i: ``lexical[i]``, ``dense[i]``): the same scores, in
    that order, without a mapping and a ``ChannelScores`` per candidate (every session's recall fuses its own)."""
    return [
        w_lexical * lex + w_dense * den
        for lex, den in zip(_scaled([v or 0.0 for v in lexical]), _scaled(dense), strict=True)
    ]


def _scaled(values: Sequence[float]) -> list[float]:
    """``minmax`` of a column: the same arithmetic, value by value."""
    if not values:
        return []
    lo, hi = min(values), max(values)
    if hi <= lo:
        return [1.0] * len(values)
    span = hi - lo
    return [(v - lo) / span for v in values]


T = TypeVar("T")


@dataclass(frozen=True)
class Ranked(Generic[T]):
    """A candidate after fusion (and any rerank term): its final score and what each channel gave it."""

    item: T
    score: float
    lexical: float | None
    dense: float
