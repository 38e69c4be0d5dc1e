"""The windowed decision scan finds exactly what the plain regex finds."""

from __future__ import annotations

import random

import pytest

from vdoctor.memory.working import _DECISION_RE, decision_matches

pytestmark = pytest.mark.unit

PIECES = [
    "confidence", "confidence 0.8", "confidence=1.0", "confidence: 0", "confidence\n0.75", "Confidence 0.9",
    "nonconfidence 0.5", "\n", "\n\n", " ", "  \t", "0.93", "1.000", "x" * 130, "压差187mV", "conf ",
    '{"phase": "CONCLUDED", "confidence": 0.8}', "confidence=", "1", ".", "P0A7F", "置信度 confidence 0.6",
]  # fmt: skip


def test_same_matches_as_the_plain_regex_on_random_texts() -> None:
    rng = random.Random(5)
    for _ in range(3000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 14)))
        assert decision_matches(text) == _DECISION_RE.findall(text), repr(text)


def test_examples_worked_by_hand() -> None:
    assert decision_matches("") == []
    assert decision_matches("decided P0A7F, confidence 0.8; next") == [("decided P0A7F, confidence 0.8", "0.8")]
    assert decision_matches("a\nconfidence\n\n0.5 b") == [("confidence\n\n0.5", "0.5")]
    assert decision_matches("x" * 130 + " confidence 1.0")[0][0] == "x" * 119 + " confidence 1.0"
