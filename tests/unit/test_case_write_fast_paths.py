"""The fast paths of writing a case give what the plain paths give.

A span text's parse is kept, a case's spans are computed once for its source,
a request's decision is written without ``dataclasses.asdict`` and by one kept
encoder, a summary's words are read with its patterns run once over the whole
summary and its lines' words kept, and a record's rules are one validator: each
is compared here with the plain computation.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, replace
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from tests.unit.test_case_fidelity import request, wide_session
from vdoctor.lines import ReadingSpan, _find_spans
from vdoctor.memory.request import _DECISION_FIELDS, SummaryRequest, request_to_json
from vdoctor.memory.summary import render_source
from vdoctor.records import MemoryRecord, RecordKind
from vdoctor.retrieval.text import _ADDRESS_RE, _LEFT_BEHIND, _NUMBER_RE, _TIME_RE, summary_words

pytestmark = pytest.mark.unit


def test_a_span_texts_parse_is_kept_and_each_caller_gets_its_own_list() -> None:
    for text in ["soc_pct=80→78↓76↑81%", "readings: a_b=1→23 pack_temp_c=41.5°C x", "no spans here"]:
        _find_spans.cache_clear()
        first = ReadingSpan.find_all(text)
        plain = list(_find_spans.__wrapped__(text))
        assert first == plain
        first.append(ReadingSpan("x", "1", "1", "1", "1"))
        assert ReadingSpan.find_all(text) == plain  # the kept parse is not the caller's list


# Readings as spans write them: equal as numbers but not as text (5, 5.0), signs, exponents.
SPAN_VALUES = ["5", "5.0", "-5", "0", "-0", "0.5", "12", "187", "62", "1e-05", "-3.25", "nan"]


def _plain_render(span: ReadingSpan) -> str:
    """``ReadingSpan.render`` as it was: the first and latest reading sorted as numbers."""
    lo, hi = sorted((span.first, span.latest), key=float)
    out = f"{span.name}={span.first}"
    out += f"→{span.latest}" if span.latest != span.first else ""
    out += f"↓{span.lowest}" if span.lowest != lo else ""
    return out + (f"↑{span.highest}" if span.highest != hi else "") + span.unit


def test_a_spans_readings_rendering_and_parse_are_those_of_the_sorting_forms() -> None:
    rng = random.Random("spans")
    for _ in range(5000):
        first, latest, lowest, highest = (rng.choice(SPAN_VALUES) for _ in range(4))
        span = ReadingSpan("soc_pct", first, latest, lowest, highest, rng.choice(["", "%", "mV"]))
        assert span.values() == list(dict.fromkeys([first, lowest, highest, latest]))
        text = span.render()
        assert text == _plain_render(span)
        assert span.bare == (text == f"soc_pct={first}")
        if "nan" not in text:  # a span's text holds numbers only
            assert _find_spans.__wrapped__(text) == (span,), text


def test_a_cases_source_from_its_spans_is_the_source_from_the_session() -> None:
    for extra in (0, 3):
        session = wide_session(extra)
        assert render_source(session, session.spans()) == render_source(session)


def test_a_requests_decision_is_written_as_asdict_writes_it() -> None:
    req = request(omitted=["soc_pct=80→78↓76↑81%"])
    assert req.decision is not None
    body = json.loads(request_to_json(req))
    assert json.dumps(body["decision"], ensure_ascii=False) == json.dumps(asdict(req.decision), ensure_ascii=False)
    assert json.loads(request_to_json(replace(req, decision=None)))["decision"] is None


def _plain_request_json(r: SummaryRequest) -> str:
    d = r.decision
    body = {
        "kind": r.kind,
        "source": r.source,
        "required": r.required,
        "events": [[e.ts, e.event, e.conclusion, e.evidence] for e in r.events],
        "max_chars": r.max_chars,
        "keep_first": list(r.keep_first),
        "carried": r.carried,
        "readings": r.readings,
        "omitted": r.omitted,
        "decision": {name: getattr(d, name) for name in _DECISION_FIELDS} if d else None,
    }
    return json.dumps(body, ensure_ascii=False)


def test_a_request_is_written_as_json_dumps_writes_it() -> None:
    req = request(omitted=["soc_pct=80→78↓76↑81%"])
    for r in (req, replace(req, decision=None), replace(req, source='电池 "quoted"\n\ttab \u2028 \x00')):
        assert request_to_json(r) == _plain_request_json(r)


def _plain_summary_words(summary: str) -> str:
    # The per-line form: each line's addresses, times and numbers taken out, then its words.
    lines = []
    for line in summary.splitlines():
        bare = _NUMBER_RE.sub(" ", _TIME_RE.sub(" ", _ADDRESS_RE.sub(" ", line)))
        words = [w.strip(_LEFT_BEHIND) for w in bare.split() if any(ch.isalpha() for ch in w)]
        if words:
            lines.append(" ".join(words))
    return "\n".join(lines)


# Pieces of summary lines, the awkward ones included: every line break str.splitlines knows,
# numbers and times next to them, addresses, units, CJK and punctuation left behind.
_PIECES = [
    "readings:",
    "soc_pct=36%",
    "pack_temp_c=41.5→38°C",
    "2026-09-02 07:00",
    "2026-09-02T07:00:01Z",
    "|",
    "concluded P0A7F",
    "P2 conf 0.80;",
    "confirmed cell_voltage_diff_mv=187>=100",
    "signal://LRW/soc_pct@2026-09-02T07:00:00Z",
    "dtc://U0111",
    "case://V/V-20260901T000000",
    "-12.5",
    "+3",
    "1,234.5",
    "v2",
    "pm2_5",
    "电池压差",
    "≥",
    "→",
    " ",
    "\n",
    "\r\n",
    "\r",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x1d",
    "\x1e",
    "\x85",
    "\u2028",
    "\u2029",
    "\t",
    ".",
    "x.",
    "12",
    "²",
    "Ⅻ",
    "İ",
    "K",
    "(",
    ")",
    "=",
]


def test_a_summarys_words_are_its_lines_words_read_one_line_at_a_time() -> None:
    rng = random.Random(7)
    cases = ["", "\n", "readings: soc_pct=36%\n2026-09-02 07:00 | concluded P0A7F | P2 conf 0.80 | dtc://P0A7F"]
    cases += [
        "".join(rng.choice(_PIECES) + rng.choice(["", " ", ""]) for _ in range(rng.randint(1, 30))) for _ in range(3000)
    ]
    for summary in cases:
        assert summary_words(summary) == _plain_summary_words(summary), repr(summary)
        assert summary_words(summary) == _plain_summary_words(summary)  # the kept lines give the same


def _record(**changes: object) -> MemoryRecord:
    at = datetime(2026, 9, 1, 8, 0, tzinfo=UTC)
    fields: dict[str, object] = dict(
        vin="V",
        session_id="V-1",
        series="S",
        concluded_at=at,
        summary="s",
        summary_vec=[1.0],
        root_cause="c",
        fix_action="f",
        priority="P1",
        prompt_version="p",
    )
    return MemoryRecord(**(fields | changes))


def test_a_records_rules_hold_as_before_in_one_validator() -> None:
    at = datetime(2026, 9, 1, 8, 0, tzinfo=UTC)
    assert _record(recheck_ok=True).verified_ts == at
    assert _record(valid=False).invalid_ts == at
    assert _record(priority=None, kind=RecordKind.MILESTONE).priority is None
    with pytest.raises(ValidationError, match="a final record needs a priority"):
        _record(priority=None)
    with pytest.raises(ValidationError, match="verified_ts is set but recheck_ok is None"):
        _record(verified_ts=at, priority=None)  # the times' rule is read first, as it was
    with pytest.raises(ValidationError, match="invalid_ts is set on a valid record"):
        _record(invalid_ts=at)
