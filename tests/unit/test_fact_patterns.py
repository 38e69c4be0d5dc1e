"""The clause patterns (excluded, void, decision) give exactly what a plain ``re.findall`` gives.

They skip start positions that cannot reach a keyword, for speed; these tests
hold them to the plain scan on random text built from the pieces that matter
(keywords, clause ends, numbers, Chinese and English words) and on the demo's
alert texts.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from vdoctor.memory import facts

pytestmark = pytest.mark.unit

PATTERNS = {"excluded": facts._EXCLUDED_RE, "void": facts._VOID_RE, "decision": facts._DECISION_RE}
PIECES = [
    "ruled out", "Excluded", "not the cause", "排除", "已排除", "不是原因", "void", "voided", "VOIDED", "avoid",
    "overturned", "revoked", "withdrawn", "作废", "推翻", "撤销", "confidence", "confidence 0.8", "confidence=1.0",
    "confidence: 0", "confidence 0.85x",
    "voıd", "VOİD", "not the cauſe", "REVOKED", "排 除",
    "not ", "Not yet ", "never been ", "cannot be ", "n't ", "未", "不", "没有", "无法",
    "1", "0.", ".", ";", "。", "；", "\n", ", ", " ", "，", "the harness",
    "怀疑线束松动", "conclusion of step 4", "cell imbalance", "P0A7F", "x" * 30, "电池" * 20, "a" * 90,
]  # fmt: skip
DEMO = Path(__file__).resolve().parents[2] / "data" / "demo" / "alerts.jsonl"


def _random_text(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 40)))


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_clause_pattern_matches_the_plain_scan_on_random_text(name: str) -> None:
    pattern = PATTERNS[name]
    rng = random.Random(name)
    for _ in range(3000):
        text = _random_text(rng)
        assert pattern.findall(text) == pattern.pattern.findall(text), text


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_clause_pattern_matches_the_plain_scan_on_demo_alerts(name: str) -> None:
    pattern = PATTERNS[name]
    texts = []
    for line in DEMO.read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            texts.append(str(event.get("alert_text") or event.get("text") or line))
    assert texts
    for text in texts:
        assert pattern.findall(text) == pattern.pattern.findall(text), text


def test_a_long_clause_keeps_the_last_keyword_in_reach() -> None:
    text = "suspected relay, ruled out, then the fuse, excluded too; moving on"
    assert facts._EXCLUDED_RE.findall(text) == ["suspected relay, ruled out, then the fuse, excluded too"]


@pytest.mark.parametrize(
    ("text", "kind", "found"),
    [
        # A negation before the state word keeps the hypothesis open, the conclusion valid: no fact.
        ("未排除线束松动", "excluded", []),
        ("不排除冷却泵故障", "excluded", []),
        ("harness not ruled out yet", "excluded", []),
        ("Cooling pump cannot be excluded", "excluded", []),
        ("the relay hasn't been ruled out", "excluded", []),
        ("the earlier conclusion is not void", "void", []),
        ("上次结论没有作废", "void", []),
        ("We haven't yet ruled out the pump", "excluded", []),
        ("the pump has not yet been ruled out", "excluded", []),
        ("the relay cannot yet be excluded", "excluded", []),
        ("the harness is not fully ruled out", "excluded", []),
        ("线束松动未被排除", "excluded", []),
        ("冷却泵故障不能完全排除", "excluded", []),
        # Without one, as before.
        ("怀疑线束松动，已排除", "excluded", ["怀疑线束松动，已排除"]),
        ("pump failure is not the cause", "excluded", ["pump failure is not the cause"]),
        ("earlier conclusion voided", "void", ["earlier conclusion voided"]),
    ],
)
def test_a_negated_state_word_is_no_exclusion_or_void(text: str, kind: str, found: list[str]) -> None:
    """A workshop's "未排除线束松动" (harness looseness not ruled out) became an excluded key fact, pinned for the
    session's life and written into its case: the opposite of what it says."""
    assert [f.text for f in facts.extract_text_facts(text) if f.kind.value == kind] == found
