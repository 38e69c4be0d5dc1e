"""The offline token estimate by byte classes against its definition, the matches of its pattern."""

from __future__ import annotations

import random
import sys

import pytest

from vdoctor.tokens.estimate import _WIDE_SPACE_LEADS, _WIDE_SPACE_RE, _estimate, _estimate_by_pattern

pytestmark = pytest.mark.unit

# Every whitespace character (the ideographic space is a token), letters and digits in runs around the
# 4- and 3-character steps, CJK, full-width marks, marks outside ASCII that share their first UTF-8 bytes with
# wide whitespace (dashes, curly quotes, ℃), letters outside ASCII, emoji, control characters and a lone
# surrogate.
WHITESPACE = "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace())
ALPHABET = WHITESPACE + "aZq09_电池，（。.:/-é😀\x00\x7f\u2013\u2019\u201c\u2103\u2026\u205e\ud800\udfff"


def _texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    out = ["", " ", "\u3000", "aaaa", "aaaaa", "ddd", "1234567", "P0A7F", "压差187mV"]
    for _ in range(n):
        chunks = []
        for _ in range(rng.randint(0, 12)):
            kind = rng.random()
            if kind < 0.3:
                chunks.append("".join(rng.choices("abcXYZ", k=rng.randint(1, 13))))
            elif kind < 0.5:
                chunks.append("".join(rng.choices("0123456789", k=rng.randint(1, 10))))
            else:
                chunks.append("".join(rng.choices(ALPHABET, k=rng.randint(1, 6))))
        out.append("".join(chunks))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_the_byte_count_is_the_pattern_count(seed: int) -> None:
    for text in _texts(seed, 3000):
        assert _estimate(text) == _estimate_by_pattern(text), repr(text)


def test_ascii_only_text_takes_the_byte_count_and_agrees() -> None:
    rng = random.Random(5)
    printable = "".join(map(chr, range(128)))
    for _ in range(3000):
        text = "".join(rng.choices(printable, k=rng.randint(0, 60)))
        assert _estimate(text) == _estimate_by_pattern(text), repr(text)


def test_real_texts_agree() -> None:
    from tests.conftest import REPO_ROOT

    lines = (REPO_ROOT / "data" / "demo" / "alerts.jsonl").read_text("utf-8").splitlines()
    assert len(lines) > 800
    for line in lines:
        assert _estimate(line) == _estimate_by_pattern(line)
    whole = "\n".join(lines)
    assert _estimate(whole) == _estimate_by_pattern(whole)


def test_the_written_out_leads_are_those_of_every_wide_whitespace_character() -> None:
    every = "".join(map(chr, range(0x80, sys.maxunicode + 1)))
    wide = _WIDE_SPACE_RE.findall(every)
    assert "\u3000" not in wide and "\xa0" in wide
    assert set(_WIDE_SPACE_LEADS) == {char.encode("utf-8", "surrogatepass")[:2] for char in wide}
