"""Key facts' cheaper paths give what the plain ones gave: a reading's group and value, dedupe, a fold's facts."""

from __future__ import annotations

import random
import re

import pytest

from tests.unit.test_fact_scans import random_texts
from vdoctor import lines
from vdoctor.lines import FactKind, KeyFact
from vdoctor.memory import working
from vdoctor.memory.facts import dedupe, extract_text_facts
from vdoctor.memory.request import SummaryRequest
from vdoctor.memory.working import Round, WorkingMemory, WorkingState

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


class _Capturing:
    """A summarizer that keeps each request and writes its event lines."""

    name = "capturing"

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    def summarize(self, request: SummaryRequest, feedback: str = "") -> str:
        self.requests.append(request)
        return "\n".join(e.render() for e in request.events)


ROUND_PIECES = [
    "P0A7F", "U0111 ", "cell_voltage_diff_mv=187", " soc_pct=44", " 46.5℃", " from 62 to 187 mV", " X12", " cell 37",
    " 96 sense lines", " WO-12345", " confidence 0.8", " suspected the harness, ruled out", ". ", "\n",
    " signal://V1/soc_pct@2026-11-01T10:15:30Z", " dtc://P0A7F", " voided step 4", " 压差187mV", " 3根采样线",
]  # fmt: skip


def test_a_folds_required_facts_are_those_of_the_deduped_facts_of_each_round() -> None:
    rng = random.Random("fold")
    for _ in range(300):
        rounds = [
            Round(
                ts=f"2026-11-01T0{i}:00:00Z",
                user="".join(rng.choice(ROUND_PIECES) for _ in range(rng.randint(0, 8))),
                assistant="".join(rng.choice(ROUND_PIECES) for _ in range(rng.randint(0, 8))),
            )
            for i in range(rng.randint(1, 4))
        ]
        texts = [(r.user, r.ts) for r in rounds] + [(r.assistant, r.ts) for r in rounds]
        read = [f for text, when in texts for f in extract_text_facts(text, when)]
        # What lets the fold go without dedupe: no fact read from text carries a code definition.
        assert all(f.note == "" for f in read if f.kind is FactKind.CODE)
        state = WorkingState(rounds=rounds, key_facts=rng.sample(read, k=len(read) // 2))
        kept = set(state.key_facts)
        plain = [
            fact.payload
            for r in rounds
            for fact in dedupe([*extract_text_facts(r.user, r.ts), *extract_text_facts(r.assistant, r.ts)])
            if fact.kind is not FactKind.READING or fact in kept
        ]
        summarizer = _Capturing()
        WorkingMemory(state, summarizer=summarizer).end_stage()
        # A fold too long for one 300-character summary is written in several, consecutive rounds each.
        required = [fact for request in summarizer.requests for fact in request.required]
        assert list(dict.fromkeys(required)) == list(dict.fromkeys(plain)), rounds


def test_each_kind_under_its_plain_name_is_the_kind_itself() -> None:
    # The per-fact paths compare kinds by identity with these names: each must be its member, no copy.
    named = {name: getattr(lines, name) for name in dir(lines) if name.endswith("_FACT")}
    assert set(named) == {f"{kind.name}_FACT" for kind in FactKind if kind is not FactKind.TREND}
    for name, kind in named.items():
        assert kind is FactKind[name.removesuffix("_FACT")]


def test_a_text_read_once_gives_each_time_the_facts_a_reading_at_that_time_gives() -> None:
    # ``working._text_facts`` reads a text once whatever its time and gives its facts that time.
    texts = random_texts("by text", 1500)
    texts += ["confidence 0.8; ruled out the harness; void: step 4 voided; 62 to 187mV", "cell_voltage_diff_mv=187"]
    rng = random.Random("by text")
    working._text_facts.cache_clear()
    working._facts_by_text.cache_clear()
    timed = 0
    for text in [*texts, *texts]:  # each text twice, at other times
        when = rng.choice(["", "T1", "2026-11-01T08:15:30Z", "2026-11-01T08:16:00Z"])
        read = working._text_facts(text, when)
        assert list(read) == extract_text_facts(text, when), (text, when)
        timed += any(f.at for f in read)
    assert timed > 300
