"""Key facts' cheaper paths give what the plain ones gave: a reading's group and value, and dedupe."""

from __future__ import annotations

import random
import re

import pytest

from vdoctor.lines import FactKind, KeyFact
from vdoctor.memory.facts import dedupe

pytestmark = pytest.mark.unit

# ``KeyFact.reading_text`` as it was: the pattern matched on every call.
_PLAIN_READING_RE = re.compile(r"^(?:([a-z][a-z0-9_]*)=)?(-?\d+(?:\.\d+)?)([^\s@]*)")
PIECES = [
    "cell_voltage_diff_mv", "soc_pct", "x", "_", "=", "187", "-3.5", "0.8", ".", "-", "mV", "℃", "%", " ", "@",
    "T1", "P0A7F", "Ab", "96 sense lines",
]  # fmt: skip


def _plain_reading_text(fact: KeyFact) -> tuple[str, str] | None:
    if fact.kind is not FactKind.READING:
        return None
    m = _PLAIN_READING_RE.match(fact.text)
    if m is None:
        return None
    return m.group(1) or m.group(3), m.group(2)


def _random_texts(seed: str, n: int = 3000) -> list[str]:
    """Texts shaped like readings (``name=value unit``, ``value unit``), and some not."""
    rng = random.Random(seed)
    heads = ["", "soc_pct=", "cell_voltage_diff_mv=", "x=", "_=", "Ab=", "soc_pct", " "]
    numbers = ["187", "-3.5", "0.8", "12.", "-", ""]
    return [
        rng.choice(heads) + rng.choice(numbers) + "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 4)))
        for _ in range(n)
    ]


def test_a_readings_group_and_value_are_those_of_the_plain_match() -> None:
    texts = _random_texts("reading")
    facts = [KeyFact(kind, text) for text in texts for kind in (FactKind.READING, FactKind.COUNT)]
    assert sum(_plain_reading_text(f) is not None for f in facts) > len(texts) // 5
    for _ in range(2):  # the second time from the cache
        for fact in facts:
            plain = _plain_reading_text(fact)
            assert fact.reading_text() == plain, fact
            assert fact.reading() == (None if plain is None else (plain[0], float(plain[1]))), fact


def _plain_dedupe(facts: list[KeyFact]) -> list[KeyFact]:
    """``dedupe`` as it was: a set of the facts seen, tested and added one by one."""
    richest: dict[str, str] = {}
    for f in facts:
        if f.kind is FactKind.CODE and len(f.note) > len(richest.get(f.text, "")):
            richest[f.text] = f.note
    out: list[KeyFact] = []
    seen: set[KeyFact] = set()
    for fact in facts:
        if fact.kind is FactKind.CODE and fact.note != richest.get(fact.text, ""):
            continue
        if fact not in seen:
            seen.add(fact)
            out.append(fact)
    return out


def test_dedupe_keeps_what_the_plain_loop_kept() -> None:
    rng = random.Random("dedupe")
    pool = [
        KeyFact(kind, text, note, at)
        for kind in (FactKind.CODE, FactKind.READING, FactKind.ID, FactKind.EXCLUDED)
        for text in ("P0A7F", "soc_pct=44", "X12")
        for note in ("", "definition", "definition; priority P2")
        for at in ("", "T1", "T2")
    ]
    for _ in range(2000):
        facts = [rng.choice(pool) for _ in range(rng.randint(0, 30))]
        kept = dedupe(facts)
        assert kept == _plain_dedupe(facts), facts
        # The very objects, first of their equals: state holds what was first read.
        assert all(a is b for a, b in zip(kept, _plain_dedupe(facts), strict=True))
