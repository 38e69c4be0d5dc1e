"""The case write path's patterns, rewritten to start with their first character, find what the plain ones find.

A pattern that starts with a repeat, ``\\b`` or a lookbehind is tried at every
place of a text; one that starts with a character class is tried only where
that character is. The summary's words and Chinese (``meaning``), and the
times and numbers taken out of the text a case is embedded by
(``retrieval.text``), are matched that way: each is compared here with its
plain form on many texts, adversarial ones included.
"""

from __future__ import annotations

import random
import re

import pytest

from vdoctor.memory import meaning
from vdoctor.retrieval import text

pytestmark = pytest.mark.unit

PLAIN = {
    "meaning words": (meaning._WORD_RE, re.compile(r"[A-Za-z]+")),
    "meaning Chinese": (meaning.CJK_RUN_RE, re.compile(r"[\u3400-\u9fff]+")),
    "text times": (
        text._TIME_RE,
        re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"),
    ),
    "text numbers": (text._NUMBER_RE, re.compile(r"(?<![\w.])[-+]?\d+(?:[.,]\d+)*")),
}

# Pieces of summaries, and characters at the patterns' edges: signs, points, commas, word
# characters that are no ASCII letter or digit (é, _, CJK, Arabic-Indic and full-width digits,
# the superscript two), the letters IGNORECASE folds, line breaks.
PIECES = [
    "2026-11-01", " 10:15", "T10:15:30Z", ":30", ".5", "+08:00", "-0800", "Z", "2026", "-09", "12", "1", "0",
    "187", "0.80", "1,5", "12.63", "-", "+", ".", ",", " ", "  ", "\n", "=", "|", "→", "↓", "°C", "%", "mV",
    "soc_pct", "_", "x", "P0A7F", "pm2_5", "readings:", "concluded", "conf", "signal://V1/soc_pct@", "é", "İ",
    "\u212a", "松动", "压差", "报", "\u3400", "\u9fff", "\u33ff", "\ua000", "٣", "５", "²", "abc", "ABC",
]  # fmt: skip

SUMMARIES = [
    "readings: soc_pct=73→42% pack_temp_c=30.9°C odometer_km=12101→12110km hvil_loop_v=4.55V\n"
    "2026-10-30 10:18 | concluded P0A0D | P1 conf 0.90; confirmed hvil_loop_v=4.55>=4.5 | "
    "signal://LRWE2B3D3P1032369/hvil_loop_v@2026-10-30T10:18:21Z",
    "2026-09-01 09:21 | alert U0111 battery_voltage_v=14.04 | investigating | -\n"
    "2026-09-01 12:59 | concluded U0111 (also P1A9A) | P1 conf 0.70; confirmed repeat 2 | dtc://U0111",
    "2026-11-01 10:15 | 确诊 P0A7F | 压差187mV，线束松动已排除 | -",
    "",
]


def _same(new: re.Pattern[str], plain: re.Pattern[str], s: str) -> None:
    assert [m.span() for m in new.finditer(s)] == [m.span() for m in plain.finditer(s)], (new.pattern, s)
    assert new.findall(s) == plain.findall(s), (new.pattern, s)
    assert new.sub(" ", s) == plain.sub(" ", s), (new.pattern, s)


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_a_pattern_finds_what_its_plain_form_finds(name: str) -> None:
    new, plain = PLAIN[name]
    rng = random.Random(name)
    for s in SUMMARIES:
        _same(new, plain, s)
    for _ in range(20000):
        _same(new, plain, "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12))))


def test_a_summarys_words_for_embedding_are_those_of_the_plain_patterns() -> None:
    """``summary_words`` as a whole, against the same steps with the plain patterns."""
    rng = random.Random("summary words")
    address = text._ADDRESS_RE
    plain_time, plain_number = PLAIN["text times"][1], PLAIN["text numbers"][1]
    for _ in range(5000):
        s = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 16)))
        bare = plain_number.sub(" ", plain_time.sub(" ", address.sub(" ", s)))
        expected = "\n".join(filter(None, map(text._line_words, bare.splitlines())))
        assert text.summary_words(s) == expected, s
