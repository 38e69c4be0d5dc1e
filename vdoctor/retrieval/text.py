"""What a long-term case is found by: one text, indexed by both channels and embedded as a passage.

A later session describes a symptom, often in other words and often in
Chinese. The summary alone (``concluded P0A7F | P2 conf 0.80; confirmed
cell_voltage_diff_mv=187>=100 | signal://...``) holds codes, signal names and
numbers, never the symptom: on our vehicle retrieval set no method found a
symptom told in words from the summary alone (hybrid R@5 0.43). The text
below adds the symptom as reported (the opening alert's text), the codes, the
root cause and the fix: hybrid R@5 0.84. The alert text carries the words a
later symptom shares; the cause and fix carry the mechanism a multilingual
model matches across languages.

BM25 indexes the whole text (it matches a signal name or a code in the
summary lines), but the vector embeds the summary's words only
(``dense_text``): its readings, times and evidence addresses (``soc_pct=36%``,
``2026-09-02 07:00``, ``signal://<vin>/...``) mean nothing to a sentence
model (USE-m3's own package notes that numbers throw it off), and a model's
cost grows with the tokens it reads. With use-m3 a case text's embedding
went from 10.29 to 7.04 ms of CPU (``bench/embed_batching.py``) and the
vehicle set's hybrid R@5 stayed 0.830 (dense alone 0.612 -> 0.599); with
e5-small hybrid R@5 fell from 0.844 to 0.823 (``bench/vehicle_retrieval.py``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from itertools import chain

from vdoctor.records import MemoryRecord
from vdoctor.retrieval.tokens import tokens

# What a summary line holds beside words: evidence addresses (``signal://...``, ``dtc://...``),
# timestamps, and numbers standing alone (a reading's value, a threshold, a confidence: never
# the digits inside a trouble code or a signal name such as ``P0A7F`` or ``pm2_5``).
_ADDRESS_RE = re.compile(r"\b[a-z][a-z0-9+.-]*://\S*", re.IGNORECASE)
# The time is \b\d{4}-\d{2}-\d{2}..., the number (?<![\w.])[-+]?\d+(?:[.,]\d+)*, both written to
# start with their first character, then to look behind it (as ``facts.CODE_RE``): the re
# compiler skips ahead to a pattern's first character only when the pattern starts with a
# class; one that starts with \b or a lookbehind is tried at every place of the text.
_TIME_RE = re.compile(r"\d(?<!\w\d)\d{3}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?")
_NUMBER_RE = re.compile(r"[-+\d](?<![\w.][-+\d])(?:(?<=[-+])\d+|(?<=\d)\d*)(?:[.,]\d+)*")
_LEFT_BEHIND = "=<>|;:,()[]→≥≤"


def case_text(alert_text: str, codes: Sequence[str], root_cause: str, fix_action: str, summary: str) -> str:
    """The indexed text of a case: one part per line, empty parts left out."""
    parts = [alert_text, " ".join(codes), root_cause, fix_action, summary]
    return "\n".join(p for p in (part.strip() for part in parts) if p)


def record_text(record: MemoryRecord) -> str:
    """The indexed text of a stored record."""
    return case_text(record.alert_text, record.dtc_codes, record.root_cause, record.fix_action, record.summary)


def search_tokens(alert_text: str, codes: Sequence[str], root_cause: str, fix_action: str, summary: str) -> str:
    """What a store's ``search_tokens`` column holds for a case: its indexed text's tokens, space-joined.

    The same as ``token_text(case_text(...))``: no token spans a line break, so the text's tokens are its
    parts' tokens in turn. Every part but the summary recurs across a fleet's cases (its alert
    catalogue, causes and fixes; on a fleet replay 507 distinct parts of 3,320), so their tokens are
    kept (``_part_tokens``): ~35 to ~20 us of CPU a stored case.
    """
    heads = [_part_tokens(part) for part in (alert_text, " ".join(codes), root_cause, fix_action)]
    return " ".join(chain(*heads, tokens(summary)))


@lru_cache(maxsize=4096)
def _part_tokens(part: str) -> tuple[str, ...]:
    return tuple(tokens(part))


def summary_words(summary: str) -> str:
    """The summary lines without addresses, timestamps, numbers and bare punctuation.

    Signal names, units and trouble codes stay (``soc_pct``, ``°C``, ``P0A7F``).
    """
    # No match of the three patterns holds a line break nor reads across one (a break is
    # neither a word character nor a ``.``), so they run once over the whole summary.
    bare = _NUMBER_RE.sub(" ", _TIME_RE.sub(" ", _ADDRESS_RE.sub(" ", summary)))
    return "\n".join(filter(None, map(_line_words, bare.splitlines())))


@lru_cache(maxsize=4096)
def _line_words(bare: str) -> str:
    """A summary line's words, its addresses, times and numbers gone ("" when none is left).

    What a value leaves behind ("soc_pct=", ">=", "|") is punctuation: only words with a
    letter stay. The lines left recur across cases (``readings: soc_pct= %``): kept by text.
    """
    return " ".join([w.strip(_LEFT_BEHIND) for w in bare.split() if any(ch.isalpha() for ch in w)])


def dense_text(alert_text: str, codes: Sequence[str], root_cause: str, fix_action: str, summary: str) -> str:
    """What a case's vector embeds: ``case_text`` with the summary's words only (see the module doc)."""
    return case_text(alert_text, codes, root_cause, fix_action, summary_words(summary))


def record_dense_text(record: MemoryRecord) -> str:
    """What a stored record's vector embeds."""
    return dense_text(record.alert_text, record.dtc_codes, record.root_cause, record.fix_action, record.summary)
