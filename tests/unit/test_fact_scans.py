"""Fact extraction's fast scans find exactly what the plain patterns find.

Some patterns are written to start with their first character (see
``facts.CODE_RE``), and some are run only when a cheap gate pattern finds
what every match contains. These hold each rewritten pattern to its plain
form, and each gate to being necessary, on random text built from the pieces
that matter; and one hand-worked text through ``extract_text_facts``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

import pytest

from vdoctor.lines import FactKind, KeyFact
from vdoctor.memory import facts

pytestmark = pytest.mark.unit

UNIT = r"(?:mV|V|A|kPa|rpm|km|ms|s|%|℃|°C)"
# Each fast pattern and the plain form it must match exactly.
PLAIN_FORMS = {
    "reading": (
        facts._READING_RE,
        re.compile(
            rf"(?<![\w.])(-?\d+(?:\.\d+)?)\s?(mV|V|A|kPa|rpm|km|ms|s|%|℃|°C|kΩ|Ω)(?![A-Za-z])(?!(?<=V){facts._RATED})",
            re.ASCII,
        ),
    ),
    "part": (
        facts._PART_RE,
        re.compile(r"(?<![A-Za-z0-9_\-./:@])[A-Z][A-Z0-9]*\d[A-Z0-9]*(?:-[A-Z0-9]+)*(?![A-Za-z0-9_])", re.ASCII),
    ),
    "count": (facts._COUNT_RE, re.compile(r"(?<![\w.])(\d{1,6}) ((?:[a-z]{2,} )?[a-z]{2,}s)\b", re.ASCII)),
    "count-zh": (
        facts._COUNT_ZH_RE,
        re.compile(r"(?<![A-Za-z0-9_.])(\d{1,6}) ?([个条根节次处颗路块片组][\u4e00-\u9fff]{0,4})"),
    ),
    "from-to": (
        facts._FROM_TO_RE,
        re.compile(
            rf"\bfrom (-?\d+(?:\.\d+)?) ?{UNIT}? to (-?\d+(?:\.\d+)?) ?({UNIT})"
            rf"|从(-?\d+(?:\.\d+)?)\S{{0,3}}?(?:升至|降至|升到|降到|增至|减至|到|至)(-?\d+(?:\.\d+)?) ?({UNIT})"
        ),
    ),
}
# Each gate and the scan it stands before: no gate match, no match of the scan.
GATES: dict[str, tuple[Callable[[str], object], Callable[[str], list[Any]]]] = {
    "signal": (facts._SIGNAL_GATE.search, facts._SIGNAL_RE.findall),
    "decision": (facts._DECISION_GATE.search, facts._DECISION_RE.findall),
    "id": (facts._ID_GATE.search, facts._ID_RE.findall),
    "item": (facts._ITEM_GATE.search, facts._ITEM_RE.findall),
    "count-zh": (lambda text: not text.isascii() and facts._COUNT_ZH_GATE.search(text), facts._COUNT_ZH_RE.findall),
    "from-to": (lambda text: "from " in text or "从" in text, facts._FROM_TO_RE.findall),
}
PIECES = [
    "187", "-3.5", "0.8", "1.0", "12", "1234567", ".", "-", "_", "#", ":", "=", " ", "  ", "\n", "\t", ",",
    "mV", "V", "kΩ", "℃", "°C", "%", "s", "ms", "x", "a", "from", "from ", " to ", "afrom", "从", "升至", "到",
    "根", "条采样线", "sense lines", "cells", "96 sense lines", "3 cells", "3根采样线", "from 62 to 187 mV",
    "62 to 187mV", "从62升至187mV", "X12", "CSC3", "K2-4", "P0A7F", "LSVAU2180N2183294", "/", "@",
    "cell_voltage_diff_mv", "soc_pct", "_raw", "confidence", "confidence ", "confidence: ", "\"confidence\": ",
    "WO", "WO-", "TK#", "RO ", "TICK", "ORD:", "工单", "xWO", "压差", "电池", "٣", "Ｘ",
    "cell", "cell 37", "pin #3", "step-4", "module", "the", " #", "#", "Cell",
    "battery", " battery", " system", "-bus", "平台", "蓄电池",
]  # fmt: skip


def random_texts(seed: str, n: int = 3000) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 30))) for _ in range(n)]


@pytest.mark.parametrize("name", sorted(PLAIN_FORMS))
def test_a_pattern_written_from_its_first_character_matches_its_plain_form(name: str) -> None:
    fast, plain = PLAIN_FORMS[name]
    for text in random_texts(name):
        assert fast.findall(text) == plain.findall(text), text


@pytest.mark.parametrize("name", sorted(GATES))
def test_a_gate_finds_every_text_its_scan_finds_something_in(name: str) -> None:
    gate, findall = GATES[name]
    texts = random_texts(name)
    assert any(findall(text) for text in texts)  # the pieces do make matches
    for text in texts:
        assert gate(text) or not findall(text), text


def test_every_fact_of_a_text_is_found_through_the_fast_scans() -> None:
    text = (
        "ticket WO-12345: cell_voltage_diff_mv=187 from 62 to 187 mV at X12, 96 sense lines, 3根采样线, "
        "confidence 0.8 evidence signal://LSVAU2180N2183294/cell_voltage_diff_mv@2026-11-01T08:15:30Z "
        "case://LSVAU2180N2183294/step-4"  # numbered items are not read inside a URI
    )
    when = "2026-11-01T08:15:30Z"
    assert facts.extract_text_facts(text, when) == [
        KeyFact(FactKind.READING, "cell_voltage_diff_mv=187", at=when),
        KeyFact(FactKind.READING, "187mV", at=when),
        KeyFact(FactKind.EVIDENCE, "signal://LSVAU2180N2183294/cell_voltage_diff_mv@2026-11-01T08:15:30Z"),
        KeyFact(FactKind.EVIDENCE, "case://LSVAU2180N2183294/step-4"),
        KeyFact(
            FactKind.DECISION,
            "ticket WO-12345: cell_voltage_diff_mv=187 from 62 to 187 mV at X12, 96 sense "
            "lines, 3根采样线, confidence 0.8",
            at=when,
        ),  # fmt: skip
        KeyFact(FactKind.ID, "WO-12345"),
        KeyFact(FactKind.ID, "X12"),
        KeyFact(FactKind.COUNT, "96 sense lines"),
        KeyFact(FactKind.COUNT, "3根采样线"),
        KeyFact(FactKind.READING, "62mV", at=when),
        KeyFact(FactKind.READING, "187mV", at=when),
    ]


def _plain_items_and_counts(plain: str, when: str) -> list[KeyFact]:
    """``facts._items_and_counts`` with every scan run, no gate: what the gated one must equal."""
    found: list[KeyFact] = []
    for ident in facts._PART_RE.findall(plain):
        if len(ident) >= facts.MIN_PART_ID and len(ident) != facts.VIN_LENGTH and not facts.CODE_RE.fullmatch(ident):
            found.append(KeyFact(FactKind.ID, ident))
    numbered: set[int] = set()
    for m in facts._ITEM_RE.finditer(plain):
        if m.group(1).lower() not in facts._NOT_ITEMS:
            found.append(KeyFact(FactKind.ID, m.group(0).lower()))
            numbered.add(m.start(2))
    for m in [*facts._COUNT_RE.finditer(plain), *facts._COUNT_ZH_RE.finditer(plain)]:
        if m.start(1) not in numbered:
            found.append(KeyFact(FactKind.COUNT, m.group(0)))
    for m in facts._FROM_TO_RE.finditer(plain):
        low, high, unit = (m.group(1), m.group(2), m.group(3)) if m.group(1) else (m.group(4), m.group(5), m.group(6))
        found += [KeyFact(FactKind.READING, f"{value}{unit}", at=when) for value in (low, high)]
    return found


def test_items_and_counts_behind_their_gates_are_those_of_every_scan() -> None:
    texts = random_texts("items")
    assert sum(bool(_plain_items_and_counts(text, "T1")) for text in texts) > len(texts) // 2
    for text in texts:
        assert facts._items_and_counts(text, "T1") == _plain_items_and_counts(text, "T1"), text
