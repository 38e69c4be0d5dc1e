"""The fast paths of writing a case give what the plain paths give.

A span text's parse is kept, a case's spans are computed once for its source,
and a request's decision is written without ``dataclasses.asdict``: each is
compared here with the plain computation.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest

from tests.unit.test_case_fidelity import request, wide_session
from vdoctor.lines import ReadingSpan, _find_spans
from vdoctor.memory.request import request_to_json
from vdoctor.memory.summary import render_source

pytestmark = pytest.mark.unit


def test_a_span_texts_parse_is_kept_and_each_caller_gets_its_own_list() -> None:
    for text in ["soc_pct=80→78↓76↑81%", "readings: a_b=1→23 pack_temp_c=41.5°C x", "no spans here"]:
        _find_spans.cache_clear()
        first = ReadingSpan.find_all(text)
        plain = list(_find_spans.__wrapped__(text))
        assert first == plain
        first.append(ReadingSpan("x", "1", "1", "1", "1"))
        assert ReadingSpan.find_all(text) == plain  # the kept parse is not the caller's list


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
