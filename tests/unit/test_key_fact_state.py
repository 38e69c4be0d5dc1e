"""A session state's key facts are written and read back as the per-fact calls wrote and read them.

The state's serializer is ``KeyFact.render`` itself and its validator parses a
line without going through ``KeyFact.parse``: compared here with the plain
per-fact form, on random facts, byte for byte and error for error.
"""

from __future__ import annotations

import random
from typing import Annotated

import pytest
from pydantic import BaseModel, Field, PlainSerializer, PlainValidator, ValidationError

from tests.unit.test_fact_scans import random_texts
from vdoctor.lines import FactKind, KeyFact
from vdoctor.memory.facts import extract_text_facts
from vdoctor.memory.working import WorkingState

pytestmark = pytest.mark.unit


def _plain_render(fact: KeyFact) -> str:
    """``KeyFact.render``, written out."""
    at = f" @{fact.at}" if fact.at else ""
    if fact.kind is FactKind.CODE:
        return f"code {fact.text}: {fact.note}" if fact.note else f"code {fact.text}"
    if fact.kind in (FactKind.DECISION, FactKind.VOID, FactKind.EXCLUDED):
        return f"{fact.kind.value}: {fact.text}{at}"
    if fact.kind is FactKind.READING:
        return f"reading {fact.text}{at}"
    return f"{fact.kind.value} {fact.text}"


def _facts() -> list[KeyFact]:
    rng = random.Random(5)
    out = [f for text in random_texts("lines-caches", 600) for f in extract_text_facts(text, rng.choice(["", "T1"]))]
    for kind in FactKind:
        for text, note, at in [("x", "", ""), ("P0A7F", "Hybrid battery: pack", "2026-11-01T10:15:30Z"), ("", "", "")]:
            out.append(KeyFact(kind, text, note, at))
    return out


def test_a_facts_rendering_is_its_plain_rendering() -> None:
    facts = _facts()
    assert len(facts) > 500
    for fact in facts:
        assert fact.render() == _plain_render(fact) == str(fact)


def _plain_as_fact(value: object) -> KeyFact:
    """The state's validator as it was."""
    if isinstance(value, KeyFact):
        return value
    if isinstance(value, str):
        return KeyFact.parse(value)
    raise ValueError(f"expected a key fact line, got {type(value).__name__}")


class _PlainState(BaseModel):
    """Key facts in state as they were serialised and read."""

    key_facts: list[
        Annotated[
            KeyFact,
            PlainValidator(_plain_as_fact),
            PlainSerializer(_plain_render, return_type=str),
        ]
    ] = Field(default_factory=list)


def test_a_states_facts_are_written_and_read_back_as_the_per_fact_form_does() -> None:
    facts = _facts()
    rng = random.Random(7)
    for _ in range(300):
        chosen = rng.sample(facts, rng.randrange(0, 20))
        state = WorkingState(key_facts=chosen)
        text = state.model_dump_json()
        plain = _PlainState(key_facts=chosen).model_dump_json()
        assert plain[1:-1] in text  # '"key_facts":[...]', byte for byte
        restored = WorkingState.model_validate_json(text)
        assert restored.key_facts == [KeyFact.parse(_plain_render(f)) for f in chosen]
        # Read back a second time: the same facts (now from the parse's cache).
        assert WorkingState.model_validate_json(text).model_dump_json() == restored.model_dump_json()


@pytest.mark.parametrize(
    "bad", ["[1]", "[null]", '[["code P0A7F"]]', '[{"kind": "code"}]', '["nonsense here"]', '["code"]']
)
def test_a_states_facts_are_read_as_strictly_as_before(bad: str) -> None:
    with pytest.raises(ValidationError):
        WorkingState.model_validate_json('{"key_facts": ' + bad + "}")
    with pytest.raises(ValidationError):
        _PlainState.model_validate_json('{"key_facts": ' + bad + "}")
