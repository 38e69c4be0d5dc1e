"""What a summary is asked for, and the session's decision records it must agree with.

A ``SummaryRequest`` carries the source text, the facts that must appear
verbatim, the events as structured lines, and for a case summary also the
readings (``ReadingSpan``s) the summary must state, the facts that gave way
because they did not fit (``omitted``), and the session's ``CaseDecision``:
root cause, fix, priority, confidence, confirming evidence, codes, voided
conclusions and excluded hypotheses. The request is stored with the L3
record (as JSON), so any later summary of the case can be checked against it
(``vdoctor memory check-summary``) or re-extracted from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from vdoctor.lines import SummaryLine
from vdoctor.records import MAX_SUMMARY_CHARS

SummaryKind = Literal["rolling", "case"]


@dataclass(frozen=True)
class CaseDecision:
    """The session's own decision records: what a case summary says must agree with these.

    ``confidence`` is written as the summary writes it (``0.80``);
    ``confirmation`` is the rendered ``Confirmation`` phrase (empty when the
    conclusion has none); ``spans`` are every signal's rendered key readings,
    the ones that gave way included.
    """

    root_cause: str
    fix_action: str
    priority: str
    confidence: str
    codes: list[str]
    other_codes: list[str] = field(default_factory=list)
    confirmation: str = ""
    evidence: str = ""
    void: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)
    spans: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SummaryRequest:
    kind: SummaryKind
    source: str
    required: list[str]
    events: list[SummaryLine]
    max_chars: int = MAX_SUMMARY_CHARS
    # Lines the offline summarizer keeps first when space runs out (indexes into events).
    keep_first: tuple[int, ...] = ()
    # Text kept verbatim beside the summary (the key-facts region of the
    # working context): a required fact found there is not lost.
    carried: str = ""
    # Case summaries: the rendered reading spans the summary must state (one
    # ``readings:`` line), the facts that gave way to fit (kept on the record
    # as ``omitted``), and the decision records the summary must agree with.
    readings: list[str] = field(default_factory=list)
    omitted: list[str] = field(default_factory=list)
    decision: CaseDecision | None = None


# A decision's fields in order: its JSON object is read straight off them, as
# dataclasses.asdict writes it but without its recursive deep copy (nearly half
# the time of writing a request; the fields are strings and lists of strings).
_DECISION_FIELDS = tuple(f.name for f in fields(CaseDecision))
# ``json.dumps(body, ensure_ascii=False)`` without building an encoder per call.
_REQUEST_JSON = json.JSONEncoder(ensure_ascii=False).encode


def request_to_json(request: SummaryRequest) -> str:
    """The request as JSON: stored with an L3 record so it can be checked or re-extracted later."""
    body: dict[str, Any] = {
        "kind": request.kind,
        "source": request.source,
        "required": request.required,
        "events": [[e.ts, e.event, e.conclusion, e.evidence] for e in request.events],
        "max_chars": request.max_chars,
        "keep_first": list(request.keep_first),
        "carried": request.carried,
        "readings": request.readings,
        "omitted": request.omitted,
        "decision": {name: getattr(d, name) for name in _DECISION_FIELDS} if (d := request.decision) else None,
    }
    return _REQUEST_JSON(body)


def request_from_json(text: str) -> SummaryRequest:
    """A stored request; one written before readings and decisions were kept has neither."""
    data = json.loads(text)
    decision = data.get("decision")
    return SummaryRequest(
        kind=data["kind"],
        source=data["source"],
        required=list(data["required"]),
        events=[SummaryLine(*e) for e in data["events"]],
        max_chars=int(data["max_chars"]),
        keep_first=tuple(data["keep_first"]),
        carried=data.get("carried", ""),
        readings=list(data.get("readings", [])),
        omitted=list(data.get("omitted", [])),
        decision=CaseDecision(**decision) if decision else None,
    )
