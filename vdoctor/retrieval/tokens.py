"""Tokens of the lexical channel, for Chinese and English text alike.

- English (and codes, numbers): lower-cased alphanumeric runs, function words
  dropped, stemmed by Snowball's English (Porter2) stemmer so "cells"/"cell",
  "charging"/"charge" and "batteries"/"battery" meet. It replaced a light
  stemmer of our own (plural, -ing, -ed: "hiking" became "hik" and "hike"
  stayed "hike"): on LoCoMo conversations 1-5 the lexical channel's R@10 went
  from 0.776 to 0.789 (``bench/locomo.py``), and Porter2 was the best there
  of the three stemmers tried (ours, ours dropping a final "e", Porter2);
- Chinese: every character and every pair of neighbouring characters. A
  symptom is often told in other words than the alert ("电芯电压差得很多" for
  "单体压差过大"): shared characters and pairs still match where a word
  segmenter (jieba) cuts the two differently. On our vehicle retrieval set
  unigrams + bigrams gave BM25 R@5 0.857 on Chinese queries, against 0.653
  for jieba's words, 0.776 for bigrams and 0.816 for unigrams alone.

The tokeniser is part of every lexical index's identity (``TOKENIZER``): an
index built with another one is rebuilt, like vectors of another embedder
are re-embedded.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

import snowballstemmer  # type: ignore[import-untyped]

# Names this tokeniser; stored with every persisted lexical index.
TOKENIZER = "zh-uni-bi+en-porter2-v2"
# Lower-cased ASCII alphanumeric runs, or runs of CJK unified ideographs (incl. extension A).
_RUN_RE = re.compile(r"[a-z0-9]+|[\u3400-\u9fff]+")
# A run of CJK unified ideographs, written as one character then the rest (the re compiler skips ahead
# only to a pattern that starts with a class). Shared with the case check (``memory.meaning``): compiling
# this character class costs ~4 ms, once per pattern.
CJK_RUN_RE = re.compile(r"[\u3400-\u9fff][\u3400-\u9fff]*")
# Byte by byte: [a-z0-9] stays, any other byte becomes a space (``_ascii_runs``).
_RUN_BYTES = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyz")
_SEPARATORS = bytes(b if b in _RUN_BYTES else ord(" ") for b in range(256))
# Function words carry no evidence.
STOPWORDS = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being am do does did "
    "have has had i me my we our you your he him his she her it its they them their this that these those "
    "what which who whom when where why how not no so too very can will just than then there here about into "
    "over after before up down out off again once all any both each few more most other some such own same only "
    "would could should s t".split()
)
# A fleet's vocabulary is small: the cache keeps each word's stem (Porter2 in pure Python costs ~35 us a word).
_STEMS_CACHED = 1 << 16
# Runs kept with their token (``_run_token``): several times a fleet's vocabulary, a few MB at most.
_RUNS_CACHED = 1 << 14
_ENGLISH = snowballstemmer.stemmer("english")
_STEM_LOCK = threading.Lock()
# Porter2 only rewrites letter suffixes and needs a vowel (or a "y") to rewrite one: a run of [a-z0-9] ending
# in a digit ("lsvau2a45n3245692", "03t01") or with neither ("30220km", "223mv") is its own stem. A fleet's
# readings, odometers and VINs are such runs, and they rarely repeat, so ``tokens`` keeps them off the
# stemmer and its cache, which they would miss every time. (Only for such runs: with an apostrophe, say,
# Porter2 rewrites a word without a vowel, so ``stem`` itself does not take this shortcut.)
_NEEDS_STEMMER_RE = re.compile(r"[aeiouy]")


def _own_stem(word: str) -> bool:
    """Whether a non-empty run of [a-z0-9] is its own Porter2 stem by the rule above."""
    return word[-1].isdigit() or not _NEEDS_STEMMER_RE.search(word)


@lru_cache(maxsize=_STEMS_CACHED)
def stem(word: str) -> str:
    """A word's Porter2 stem; numbers stay as they are."""
    if word.isdigit():
        return word
    with _STEM_LOCK:  # a stemmer object keeps its word while it works: one caller at a time
        return str(_ENGLISH.stemWord(word))


def tokens(text: str) -> list[str]:
    """The lexical tokens of a text, in order (repeats kept: BM25 counts them)."""
    low = text.lower()
    if low.isascii() or not CJK_RUN_RE.search(low):
        return [token for token in map(_run_token, _ascii_runs(low)) if token]
    out: list[str] = []
    for run in _RUN_RE.findall(low):
        if run[0] >= "\u3400":
            out.extend(run)
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
        elif token := _run_token(run):
            out.append(token)
    return out


def _ascii_runs(low: str) -> list[str]:
    """``_RUN_RE.findall(low)`` of a lower-cased text without a CJK character: its [a-z0-9] runs.

    Every other character separates them. Encoded with "replace", each non-ASCII character is one "?";
    the byte table turns every byte but [a-z0-9] into a space, and ``split`` cuts there: three passes in C
    over the text, where the regular expression's engine took ~230 instructions a character (a case
    summary's tokens cost ~133,000 instructions, ~40% of them finding the runs).
    """
    return low.encode("ascii", "replace").translate(_SEPARATORS).decode("ascii").split()


@lru_cache(maxsize=_RUNS_CACHED)
def _run_token(run: str) -> str:
    """The token of an [a-z0-9] run ("" for a function word).

    Kept by run: a fleet's texts are made of few distinct runs (a 600-vehicle replay's 44,655 runs are
    2,878 distinct ones), so each costs one lookup instead of three tests and a call of the stem cache.
    The runs that seldom come twice (readings, odometers, VINs) pass through, least recently used out
    first, and never reach the stemmer or its cache (``_own_stem``).
    """
    if run in STOPWORDS:
        return ""
    return run if _own_stem(run) else stem(run)


def token_text(text: str) -> str:
    """The tokens joined by single spaces: what a lexical index that splits on whitespace stores."""
    return " ".join(tokens(text))


def query_terms(text: str) -> list[str]:
    """The distinct tokens of a query, in first-seen order (a term counts once in a query)."""
    return list(_query_terms(text))


@lru_cache(maxsize=4096)
def _query_terms(text: str) -> tuple[str, ...]:
    # Kept by text: in an alert storm many sessions open on the same alert (half of the queries repeat on a
    # generated fleet, as for the query vectors' cache, ``embedders/cache.py``).
    return tuple(dict.fromkeys(tokens(text)))
