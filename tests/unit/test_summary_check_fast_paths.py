"""The fidelity check's fast paths give what the plain scans give.

The concluding lines are searched for their mark only where one can be, the
priority and code patterns start with their first character or are kept
compiled, confidences are matched only where "conf" is, and a summary's words
are read without taking out names it has none of: each is compared here with
the plain computation on many texts, adversarial ones included.
"""

from __future__ import annotations

import random
import re

import pytest

from vdoctor.memory import meaning
from vdoctor.memory.facts import CODE_RE
from vdoctor.memory.meaning import (
    _CONCLUDED_MARK,
    _CONF_RE,
    _FORMAT_CJK_PAIRS,
    _FORMAT_UNIT_FUNCTION_WORDS,
    _PRIORITY_RE,
    _SNAKE_RE,
    _SPAN_OR_ASSIGN,
    _TIME_RE,
    CaseFindings,
    _cjk_pairs,
    _code_word,
    _concluding_lines,
    _confidences,
    _words,
)

pytestmark = pytest.mark.unit


def _random_text(rng: random.Random, pieces: list[str], most: int) -> str:
    return "".join(rng.choice(pieces) for _ in range(rng.randint(0, most)))


CONCLUSION_PIECES = [
    "concluded", "CONCLUDED", "Concluded", "conclude", "xconcluded", "concluded_", "结论", "确诊", "conf", "CONF",
    "Confidence", "confirmed", " ", "  ", "=", ":", ": ", "0.80", "0.8", "1", "0", ".5", "P1", "P2", "P3", "P4",
    "xP1", "P12", "_P2", "P0A7F", "|", "\n", "\u212a", "İ", "ı", "é", "→", "_", "-",
]  # fmt: skip
_PLAIN_PRIORITY_RE = re.compile(r"\bP[123]\b")


def test_concluding_lines_priorities_codes_and_confidences_are_those_of_the_plain_scans() -> None:
    rng = random.Random("conclusion")
    for _ in range(20000):
        text = _random_text(rng, CONCLUSION_PIECES, 16)
        assert _concluding_lines(text) == [line for line in text.splitlines() if _CONCLUDED_MARK.search(line)], text
        assert _confidences(text) == _CONF_RE.findall(text), text
        assert _PRIORITY_RE.findall(text) == _PLAIN_PRIORITY_RE.findall(text), text
        for code in ("P0A7F", "P1", "U0111"):
            assert bool(_code_word(code).search(text)) == bool(re.search(rf"\b{re.escape(code)}\b", text)), text


def _plain_check_words(summary: str, stripped: str, source: str) -> CaseFindings:
    """``meaning._check_words`` as it was: the names taken out of every summary before its words are read."""
    out = CaseFindings()
    plain = _TIME_RE.sub(" ", stripped)
    plain = _SPAN_OR_ASSIGN.sub(" ", plain)
    stray = _words(CODE_RE.sub(" ", _SNAKE_RE.sub(" ", plain))) - _FORMAT_UNIT_FUNCTION_WORDS
    if stray:
        stray -= _words(source)
    if stray:
        out.invented.append("words not in the source: " + ", ".join(sorted(stray)[:8]))
    names = set(_SNAKE_RE.findall(plain))
    if names:
        names -= set(_SNAKE_RE.findall(source))
    out.invented += [f"name {s}" for s in sorted(names)]
    pairs = _cjk_pairs(summary) - _FORMAT_CJK_PAIRS
    if pairs:
        pairs -= _cjk_pairs(source)
    if pairs:
        out.invented.append("Chinese not in the source: " + ", ".join(sorted(pairs)[:8]))
    return out


WORD_PIECES = [
    "soc_pct", "pack_temp_c", "=", "62", "%", " ", "\n", "harness", "loose", "P0A7F", "concluded", "fan_duty",
    "2026-11-01 10:15", "readings:", "x_1", "_", "a", "松动", "|", "cell", "mV", "=87→187mV",
]  # fmt: skip
SOURCE = "readings: soc_pct=62% pack_temp_c=41.5°C\nthe harness was loose 松动\n2026-11-01 10:15 | concluded P0A7F"


def test_a_summarys_words_and_names_are_found_as_by_the_plain_check() -> None:
    rng = random.Random("words")
    for _ in range(5000):
        summary = _random_text(rng, WORD_PIECES, 14)
        for source in (SOURCE, "", summary):
            out = CaseFindings()
            meaning._check_words(summary, summary, source, out)
            assert out == _plain_check_words(summary, summary, source), (summary, source)
