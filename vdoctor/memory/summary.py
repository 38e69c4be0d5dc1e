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

import json
import re
from dataclasses import dataclass, field
from datetime import datetime

from vdoctor.knowledge import KnowledgePack
from vdoctor.lines import (
    EXCLUDED_FACT,
    ID_FACT,
    NUM,
    READING_FACT,
    READINGS_PREFIX,
    VOID_FACT,
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
from vdoctor.memory.facts import is_ticket_id
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
from vdoctor.memory.working import CLIP_MARK, clip_line
from vdoctor.records import MAX_SUMMARY_CHARS
from vdoctor.units import SIGNAL_NAME

__all__ = [
    "GIVE_WAY",
    "SUMMARY_PROMPT_VERSION",
    "CaseSummary",
    "confirmation",
    "milestone_summary",
    "render_source",
    "summarize_case",
    "upgrade_case_request",
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
    return [(f.kind.value, f.payload, f.at) for f in session.working.key_facts if f.kind in (VOID_FACT, EXCLUDED_FACT)]


def render_source(session: SessionState, spans: list[ReadingSpan] | None = None) -> str:
    """The full session as text: what the summary must be faithful to.

    ``spans``: ``session.spans()`` when the caller has them already.
    """
    lines = [e.line().render() for e in session.timeline]
    lines += [f"{short_time(when)} | {kind} | {text}" for kind, text, when in _kept_facts(session)]
    if session.codes:
        lines.append(render_codes_seen(session.codes))
    if session.signals:
        lines.append(READINGS_PREFIX + " ".join(s.render() for s in (session.spans() if spans is None else spans)))
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
    hypothesis = session.hypothesis
    head = _milestone_line(session, number, at, hypothesis)
    omitted: list[str] = []
    if len(head) > MAX_SUMMARY_CHARS and hypothesis:
        # A model's hypothesis may be longer than a summary holds: the line carries its start, and the record
        # says it carries less (``omitted``: the whole hypothesis), rather than no milestone being written.
        keep = max(0, len(hypothesis) - (len(head) - MAX_SUMMARY_CHARS) - len(CLIP_MARK))
        # Never cut inside a number, code or URI (a cut 1873 would read as an invented 18).
        head = _milestone_line(session, number, at, clip_line(hypothesis, keep))
        omitted.append(f"leading: {hypothesis}")
    elif len(head) > MAX_SUMMARY_CHARS and session.suspected:
        # No hypothesis but many suspected codes (a full scan's): the line names those that fit, in order, and
        # the record keeps them all in ``omitted``. Before, such a milestone was no valid record, and each later
        # alert of the session failed to write it.
        codes = list(session.suspected)
        while codes and len(head) > MAX_SUMMARY_CHARS:
            codes.pop()
            head = _milestone_line(session, number, at, None, codes)
        omitted.append("suspected: " + " ".join(session.suspected))
    clipped = len(omitted)  # spans are shown in order until the first that does not fit
    used = len(head)
    shown: list[ReadingSpan] = []
    for span in session.spans():
        cost = len(span.render()) + (1 if shown else len(READINGS_PREFIX) + 1)
        if used + cost <= MAX_SUMMARY_CHARS and len(omitted) == clipped:
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


def _milestone_line(
    session: SessionState, number: int, at: datetime, hypothesis: str | None, suspected: list[str] | None = None
) -> str:
    """The milestone's own line; ``suspected``: the suspected codes it names (default: all of the session's)."""
    codes = session.suspected if suspected is None else suspected
    conclusion = milestone_conclusion(session.priority, hypothesis, codes, session.hypothesis_confidence)
    return SummaryLine(summary_time(at), f"milestone {number}", conclusion, "-").render()


@dataclass
class _Plan:
    """What the case summary carries: parts give way from here in GIVE_WAY order until it fits."""

    final: SummaryLine  # the concluding line, before "(also <codes seen but not concluded>)"
    opening: SummaryLine | None
    spans: list[ReadingSpan]
    other_codes: list[str]
    clauses: list[tuple[str, str, str]]  # (excluded | void, text, time)
    omitted: list[str] = field(default_factory=list)

    def events(self) -> list[SummaryLine]:
        also = f" (also {' '.join(self.other_codes)})" if self.other_codes else ""
        final = SummaryLine(self.final.ts, self.final.event + also, self.final.conclusion, self.final.evidence)
        clauses = [SummaryLine(short_time(when), kind, text, "-") for kind, text, when in self.clauses]
        return [*([self.opening] if self.opening else []), *clauses, final]

    def length(self) -> int:
        lines = [e.render() for e in self.events()]
        if self.spans:
            lines.append(READINGS_PREFIX + " ".join(s.render() for s in self.spans))
        return len("\n".join(lines))

    def fit(self, confirming: str | None, named: set[str]) -> None:
        """Let parts give way, in GIVE_WAY order, until the summary fits."""
        order: list[tuple[str, object]] = [("opening", self.opening)] if self.opening else []
        for rule_named in (False, True):
            order += [
                ("span", s) for s in reversed(self.spans) if s.name != confirming and (s.name in named) == rule_named
            ]
        order += [("code", c) for c in reversed(self.other_codes)]
        for kind in ("excluded", "void"):
            order += [("clause", c) for c in reversed(self.clauses) if c[0] == kind]
        for kind, part in order:
            if self.length() <= MAX_SUMMARY_CHARS:
                return
            self._drop(kind, part)

    def _drop(self, kind: str, part: object) -> None:
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


def _request(plan: _Plan, decision: CaseDecision, source: str, named: set[str]) -> SummaryRequest:
    """The case request of a plan, fitted to 300 characters (see GIVE_WAY)."""
    confirmed = Confirmation.find(decision.confirmation)
    plan.fit(confirmed.signal if confirmed else None, named)
    events = plan.events()
    required = [
        *decision.codes,
        *plan.other_codes,
        *([decision.confirmation] if decision.confirmation else []),
        decision.priority,
        decision.confidence,
        *(text for _, text, _ in plan.clauses),
        *([decision.evidence] if decision.evidence else []),
    ]
    opening = 1 if plan.opening else 0
    return SummaryRequest(
        kind="case",
        source=source,
        required=list(dict.fromkeys(required)),
        events=events,
        max_chars=MAX_SUMMARY_CHARS,
        keep_first=(len(events) - 1, *range(opening, len(events) - 1), *range(opening)),
        readings=[s.render() for s in plan.spans],
        omitted=plan.omitted,
        decision=decision,
    )


def summarize_case(
    session: SessionState,
    pack: KnowledgePack,
    summarizer: Summarizer | None = None,
    metrics: FidelityMetrics | None = None,
) -> CaseSummary:
    """Summarise a concluded session with ``summarizer`` and check the summary's fidelity."""
    c = session.conclusion
    if c is None:
        raise ValueError("only a CONCLUDED session is summarised; this one has no conclusion")
    confirmed = confirmation(c, session, pack)
    phrase = confirmed.render() if confirmed else ""
    evidence = next((u for u in c.evidence if u.startswith("signal://")), "")
    evidence = evidence or (f"dtc://{c.codes[0]}" if c.codes else "")
    conf = f"{c.confidence:.2f}"
    kept = _kept_facts(session)
    spans = session.spans()
    final = SummaryLine(
        summary_time(session.last_event_at),
        f"concluded {' '.join(c.codes)}",
        f"{c.priority} conf {conf}" + (f"; {phrase}" if phrase else ""),
        evidence,
    )
    other_codes = [code for code in session.codes if code not in c.codes]
    plan = _Plan(
        final=final,
        opening=session.timeline[0].line() if len(session.timeline) > 1 else None,
        spans=list(spans),
        other_codes=list(other_codes),
        clauses=list(kept),
    )
    if session.signals_untracked:
        plan.omitted.append(f"{session.signals_untracked} readings of signals beyond the tracked ones")
    # Key facts that working memory let go (readings beyond its bound; the alerts' readings are in the
    # spans, so only those read from text are listed), and how many more than it recorded.
    working = session.working
    plan.omitted += [line for line in working.dropped_facts if not line.startswith(f"{READING_FACT} ")]
    if working.dropped_fact_count > len(working.dropped_facts):
        plan.omitted.append(f"{working.dropped_fact_count - len(working.dropped_facts)} more key facts gave way")
    named = {e.confirm.signal for code in session.codes if (e := pack.get(code)) and e.confirm and e.confirm.signal}
    rules = [f"rule {code}: {e.confirm.describe()}" for code in c.codes if (e := pack.get(code)) and e.confirm]
    definitions = [KeyFact.code(code, e.definition_en).render() for code in session.codes if (e := pack.get(code))]
    decision = CaseDecision(
        root_cause=c.root_cause,
        fix_action=c.fix_action,
        priority=c.priority,
        confidence=conf,
        codes=list(c.codes),
        other_codes=other_codes,
        confirmation=phrase,
        evidence=evidence,
        void=[text for kind, text, _ in kept if kind == FactKind.VOID.value],
        excluded=[text for kind, text, _ in kept if kind == FactKind.EXCLUDED.value],
        spans=[s.render() for s in spans],
    )
    request = _request(plan, decision, "\n".join([render_source(session, spans), *definitions, *rules]), named)
    checked = summarize_checked(summarizer or OfflineSummarizer(), request, metrics)
    # A work order or ticket the session named is what the case is found by in the workshop: one the summary
    # does not carry is listed whole.
    tickets = [f for f in working.key_facts if f.kind is ID_FACT and is_ticket_id(f.text)]
    tickets = [f for f in tickets if f.text not in checked.text]
    omitted = [*plan.omitted, *dict.fromkeys(f.render() for f in tickets)]
    return CaseSummary(
        text=checked.text,
        required=request.required,
        source=request.source,
        report=checked.report,
        attempts=checked.attempts,
        repaired=checked.repaired,
        request=request,
        omitted=omitted,
    )


# -- requests stored before readings and decisions were kept -----------------------------------

_SOURCE_READING_RE = re.compile(rf"^reading ({SIGNAL_NAME})=({NUM}) @(\S+)", re.M)
_SOURCE_RULE_RE = re.compile(rf"^rule [A-Z0-9]+: ({SIGNAL_NAME})(?:>=|<=)", re.M)


def upgrade_case_request(old: SummaryRequest) -> SummaryRequest:
    """A case request stored before readings and decision records were kept, rebuilt from its source.

    The spans come from the source's reading lines (the session's readings as
    they were stored, at most 256), the decision from its conclusion record,
    exclusions and void conclusions from its event lines; then parts give way
    as for a new case. Used by re-extraction, so older records gain every
    reading when they are rewritten.
    """
    if old.kind != "case" or old.decision is not None or not old.events:
        return old
    conclusion = next(
        (json.loads(line) for line in reversed(old.source.splitlines()) if line.startswith('{"root_cause"')), None
    )
    if not isinstance(conclusion, dict):
        return old
    series: dict[str, list[tuple[str, float]]] = {}
    for name, value, at in _SOURCE_READING_RE.findall(old.source):
        series.setdefault(name, []).append((at, float(value)))
    spans = [ReadingSpan.of(name, [v for _, v in sorted(points)]) for name, points in series.items()]
    final, *rest = [*old.events[-1:], *old.events[:-1]]
    codes = [str(code) for code in conclusion.get("codes", [])]
    seen = [code for e in old.events if e.event.startswith("alert") for code in e.event.split()[1:] if "=" not in code]
    other_codes = [code for code in dict.fromkeys(seen) if code not in codes]
    clauses = [(e.event, e.conclusion, e.ts) for e in rest if e.event in ("excluded", "void")]
    opening = next((e for e in rest if e.event.startswith("alert")), None)
    confirmed = Confirmation.find(final.conclusion)
    conf = f"{float(conclusion.get('confidence', 0)):.2f}"
    decision = CaseDecision(
        root_cause=str(conclusion.get("root_cause", "")),
        fix_action=str(conclusion.get("fix_action", "")),
        priority=str(conclusion.get("priority", "")),
        confidence=conf,
        codes=codes,
        other_codes=other_codes,
        confirmation=confirmed.render() if confirmed else "",
        evidence=final.evidence if final.evidence != "-" else "",
        void=[text for kind, text, _ in clauses if kind == "void"],
        excluded=[text for kind, text, _ in clauses if kind == "excluded"],
        spans=[s.render() for s in spans],
    )
    plan = _Plan(final=final, opening=opening, spans=spans, other_codes=other_codes, clauses=clauses)
    source = old.source
    if spans:  # the readings line the summary now states, so the source holds it as written
        source += "\n" + READINGS_PREFIX + " ".join(s.render() for s in spans)
    return _request(plan, decision, source, set(_SOURCE_RULE_RE.findall(old.source)))
