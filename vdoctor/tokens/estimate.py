"""The offline default token counter: a deterministic estimate shaped like a BPE vocabulary.

One token per CJK character, about four letters per token for words, three
digits per token for numbers, one per punctuation mark. On the demo data it
over-counts cl100k_base by about a quarter and never under-counts
(``bench/token_error.py``), so budgets enforced with it hold for real models.
"""

from __future__ import annotations

import re
from functools import lru_cache

# One match per token: up to four ASCII letters of a word (a run of n letters
# gives ceil(n / 4) matches), up to three digits of a number, one CJK or
# full-width character (the ideographic space included), any other
# non-space character. The same counts as reading each word, number and mark
# as a piece and dividing, without a Python loop over the pieces.
_TOKEN_RE = re.compile(
    r"[A-Za-z]{1,4}"
    r"|[0-9]{1,3}"
    r"|[\u3400-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]"
    r"|[^\sA-Za-z0-9]"
)
# (Four characters per token for English words and three per digit run: the
# averages of common BPE vocabularies, cl100k-like.)
# Texts counted again (the system prompt, tool schemas, a session's earlier
# rounds, recalled cases) come from here; long texts are too rare to repeat.
_CACHED = 4096
_CACHE_MAX_CHARS = 8192


def _estimate(text: str) -> int:
    return len(_TOKEN_RE.findall(text))


_cached_estimate = lru_cache(maxsize=_CACHED)(_estimate)


class EstimatingCounter:
    """The offline default: a close, deterministic estimate of BPE token counts.

    Additive: the count of texts joined by whitespace is the sum of their
    counts (no piece spans whitespace), so a budget can be kept part by part.
    Bounded by length: every token is at least one character, so a text never
    costs more tokens than it has characters, and a text shorter than a
    budget fits it without being counted.
    """

    name = "estimate"
    additive = True
    at_most_one_per_char = True

    def count(self, text: str) -> int:
        return _cached_estimate(text) if len(text) <= _CACHE_MAX_CHARS else _estimate(text)
