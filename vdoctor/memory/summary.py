"""The case summary written to long-term memory when a session concludes.

Format (seed 000 §8.2.2): one line per key event, ``time | event |
conclusion | evidence URI``, and one ``readings:`` line with every signal's
first, lowest, highest and latest reading verbatim with its unit
(``ReadingSpan``); at most 300 characters. The conclusion, every overturned
conclusion and every excluded hypothesis of the session are kept, and every
code it saw. The request goes to the configured summarizer (offline by
default) and its answer through the fidelity check, repair and retry of
``summarizer.summarize_checked``.

When a session has more than fits in 300 characters, parts give way in this
order (``GIVE_WAY``), each whole, until the summary fits:

1. the opening alert line (its codes and readings are on the other lines);
2. readings of signals that no code of the session names in its confirm
   rule, the signal seen last first;
3. readings of signals another code's rule names, the signal seen last first;
4. codes seen in the session but not concluded, the last seen first;
5. excluded hypotheses, the latest first;
6. overturned (void) conclusions, the latest first.

The concluding line (codes, priority, confidence, the confirming reading and
its evidence URI) and the confirming signal's readings never give way. What
gave way is listed verbatim in the record's ``omitted`` field (the record is
flagged by it being non-empty), and the fidelity check counts it as declared,
not lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from vdoctor.knowledge import KnowledgePack
from vdoctor.lines import (
    READINGS_PREFIX,
    Confirmation,
    FactKind,
    KeyFact,
    ReadingSpan,
    SummaryLine,
    fmt_num,
    iso,
    milestone_conclusion,
    render_codes_seen,
    short_time,
    summary_time,
)
from vdoctor.memory.fidelity import FidelityReport
from vdoctor.memory.session import Conclusion, SessionState
from vdoctor.memory.summarizer import (
    SUMMARY_PROMPT_VERSION,
    CaseDecision,
    FidelityMetrics,
    OfflineSummarizer,
    Summarizer,
    SummaryRequest,
    summarize_checked,
)
from vdoctor.records import MAX_SUMMARY_CHARS

__all__ = [
    "GIVE_WAY",
    "SUMMARY_PROMPT_VERSION",
    "CaseSummary",
    "confirmation",
    "milestone_summary",
    "render_source",
    "summarize_case",
]

GIVE_WAY = (
    "opening alert line",
    "readings of signals no code of the session names",
    "readings of signals another code's rule names",
    "codes seen but not concluded",
    "excluded hypotheses",
    "voided conclusions",
)


@dataclass
class CaseSummary:
    text: str
    required: list[str]
    source: str
    report: FidelityReport
    attempts: int = 1
    repaired: bool = False
    request: SummaryRequest | None = None
    # Key facts that gave way to fit (see GIVE_WAY), verbatim.
    omitted: list[str] = field(default_factory=list)


def _kept_facts(session: SessionState) -> list[tuple[str, str, str]]:
    """(kind, text, time) of the session's overturned conclusions and excluded hypotheses."""
    return [
        (f.kind.value, f.payload, f.at)
        for f in session.working.key_facts
        if f.kind in (FactKind.VOID, FactKind.EXCLUDED)
    ]


def render_source(session: SessionState) -> str:
    """The full session as text: what the summary must be faithful to."""
    lines = [e.line().render() for e in session.timeline]
    lines += [f"{short_time(when)} | {kind} | {text}" for kind, text, when in _kept_facts(session)]
    if session.codes:
        lines.append(render_codes_seen(session.codes))
    if session.signals:
        lines.append(READINGS_PREFIX + " ".join(s.render() for s in session.spans()))
    lines += [f"reading {r.name}={fmt_num(r.value)} @{iso(r.ts)} {r.uri}" for r in session.readings]
    if session.conclusion:
        lines.append(session.conclusion.model_dump_json())
    return "\n".join(lines)


def confirmation(conclusion: Conclusion, session: SessionState, pack: KnowledgePack) -> Confirmation | None:
    """What the conclusion was confirmed by: the cited reading that met the pack's rule, or the repeat count."""
    for code in conclusion.codes:
        entry = pack.get(code)
        if entry is None or entry.confirm is None:
            continue
        rule = entry.confirm
        if rule.signal:
            for uri in conclusion.evidence:
                if uri.startswith("signal://") and f"/{rule.signal}@" in uri:
                    hit = next((r for r in session.readings if r.uri == uri), None)
                    if hit is not None:
                        return Confirmation(
                            signal=rule.signal, value=fmt_num(hit.value), op=rule.op, threshold=fmt_num(rule.threshold)
                        )
        elif rule.repeat:
            return Confirmation(repeat=rule.repeat)
    return None


def milestone_summary(session: SessionState, number: int, at: datetime) -> tuple[str, list[str]]:
    """A long open session's progress: what it knew at ``at`` (priority, leading hypothesis, or none),
    its readings and its newest timeline lines, within the limit. Returns the text and what did not fit.

    The milestone line (last) is never dropped; then the readings line, whole
    spans in order of first appearance; then timeline lines, newest first.
    """
    head = SummaryLine(
        summary_time(at),
        f"milestone {number}",
        milestone_conclusion(session.priority, session.hypothesis, session.hypothesis_confidence),
        "-",
    ).render()
    used = len(head)
    shown: list[ReadingSpan] = []
    omitted: list[str] = []
    for span in session.spans():
        cost = len(span.render()) + (1 if shown else len(READINGS_PREFIX) + 1)
        if used + cost <= MAX_SUMMARY_CHARS and not omitted:
            shown.append(span)
            used += cost
        else:
            omitted.append(span.render())
    readings = [READINGS_PREFIX + " ".join(s.render() for s in shown)] if shown else []
    kept: list[str] = []
    for line in reversed([e.line().render() for e in session.timeline]):  # newest first, whole lines only
        if used + len(line) + 1 > MAX_SUMMARY_CHARS:
            break
        kept.insert(0, line)
        used += len(line) + 1
    return "\n".join([*kept, *readings, head]), omitted


@dataclass
class _Plan:
    """What the case summary carries: the parts that give way are removed from here, in GIVE_WAY order."""

    opening: SummaryLine | None
    spans: list[ReadingSpan]
    other_codes: list[str]
    clauses: list[tuple[str, str, str]]
    omitted: list[str] = field(default_factory=list)

    def give_way_order(self, confirming: str | None, named: set[str]) -> list[tuple[str, object]]:
        order: list[tuple[str, object]] = [("opening", self.opening)] if self.opening else []
        for rule_named in (False, True):
            order += [
                ("span", s) for s in reversed(self.spans) if s.name != confirming and (s.name in named) == rule_named
            ]
        order += [("code", c) for c in reversed(self.other_codes)]
        for kind in ("excluded", "void"):
            order += [("clause", c) for c in reversed(self.clauses) if c[0] == kind]
        return order

    def drop(self, kind: str, part: object) -> None:
        if kind == "opening":
            self.opening = None
        elif kind == "span" and isinstance(part, ReadingSpan):
            self.spans.remove(part)
            self.omitted.append(part.render())
        elif kind == "code" and isinstance(part, str):
            self.other_codes.remove(part)
            self.omitted.append(KeyFact.code(part).render())
        elif kind == "clause" and isinstance(part, tuple):
            self.clauses.remove(part)
            self.omitted.append(KeyFact(FactKind(part[0]), part[1], at=part[2]).render())


def _final_line(session: SessionState, plan: _Plan, phrase: str, evidence: str) -> SummaryLine:
    c = session.conclusion
    if c is None:
        raise ValueError("only a CONCLUDED session is summarised; this one has no conclusion")
    also = f" (also {' '.join(plan.other_codes)})" if plan.other_codes else ""
    conclusion = f"{c.priority} conf {c.confidence:.2f}" + (f"; {phrase}" if phrase else "")
    return SummaryLine(
        summary_time(session.last_event_at), f"concluded {' '.join(c.codes)}{also}", conclusion, evidence
    )


def _events(session: SessionState, plan: _Plan, phrase: str, evidence: str) -> list[SummaryLine]:
    clauses = [SummaryLine(short_time(when), kind, text, "-") for kind, text, when in plan.clauses]
    return [*([plan.opening] if plan.opening else []), *clauses, _final_line(session, plan, phrase, evidence)]


def _length(events: list[SummaryLine], spans: list[ReadingSpan]) -> int:
    lines = [e.render() for e in events]
    if spans:
        lines.append(READINGS_PREFIX + " ".join(s.render() for s in spans))
    return len("\n".join(lines))


def summarize_case(
    session: SessionState,
    pack: KnowledgePack,
    summarizer: Summarizer | None = None,
    metrics: FidelityMetrics | None = None,
) -> CaseSummary:
    """Summarise a concluded session with ``summarizer`` and check the summary's fidelity."""
    conclusion = session.conclusion
    if conclusion is None:
        raise ValueError("only a CONCLUDED session is summarised; this one has no conclusion")
    confirmed = confirmation(conclusion, session, pack)
    phrase = confirmed.render() if confirmed else ""
    evidence = next((u for u in conclusion.evidence if u.startswith("signal://")), "")
    evidence = evidence or (f"dtc://{conclusion.codes[0]}" if conclusion.codes else "")
    conf = f"{conclusion.confidence:.2f}"
    kept = _kept_facts(session)
    spans = session.spans()
    plan = _Plan(
        opening=session.timeline[0].line() if len(session.timeline) > 1 else None,
        spans=list(spans),
        other_codes=[c for c in session.codes if c not in conclusion.codes],
        clauses=list(kept),
    )
    if session.signals_untracked:
        plan.omitted.append(f"{session.signals_untracked} readings of signals beyond the tracked ones")
    named = {e.confirm.signal for c in session.codes if (e := pack.get(c)) and e.confirm and e.confirm.signal}
    for kind, part in plan.give_way_order(confirmed.signal if confirmed else None, named):
        if _length(_events(session, plan, phrase, evidence), plan.spans) <= MAX_SUMMARY_CHARS:
            break
        plan.drop(kind, part)
    events = _events(session, plan, phrase, evidence)
    required = [
        *conclusion.codes,
        *plan.other_codes,
        *([phrase] if phrase else []),
        conclusion.priority,
        conf,
        *(text for _, text, _ in plan.clauses),
        *([evidence] if evidence else []),
    ]
    opening = 1 if plan.opening else 0
    keep_first = (len(events) - 1, *range(opening, len(events) - 1), *range(opening))
    rules = [f"rule {c}: {e.confirm.describe()}" for c in conclusion.codes if (e := pack.get(c)) and e.confirm]
    definitions = [KeyFact.code(c, e.definition_en).render() for c in session.codes if (e := pack.get(c))]
    source = "\n".join([render_source(session), *definitions, *rules])
    decision = CaseDecision(
        root_cause=conclusion.root_cause,
        fix_action=conclusion.fix_action,
        priority=conclusion.priority,
        confidence=conf,
        codes=list(conclusion.codes),
        other_codes=[c for c in session.codes if c not in conclusion.codes],
        confirmation=phrase,
        evidence=evidence,
        void=[text for kind, text, _ in kept if kind == FactKind.VOID.value],
        excluded=[text for kind, text, _ in kept if kind == FactKind.EXCLUDED.value],
        spans=[s.render() for s in spans],
    )
    request = SummaryRequest(
        kind="case",
        source=source,
        required=list(dict.fromkeys(required)),
        events=events,
        max_chars=MAX_SUMMARY_CHARS,
        keep_first=keep_first,
        readings=[s.render() for s in plan.spans],
        omitted=plan.omitted,
        decision=decision,
    )
    checked = summarize_checked(summarizer or OfflineSummarizer(), request, metrics)
    return CaseSummary(
        text=checked.text,
        required=request.required,
        source=source,
        report=checked.report,
        attempts=checked.attempts,
        repaired=checked.repaired,
        request=request,
        omitted=plan.omitted,
    )
