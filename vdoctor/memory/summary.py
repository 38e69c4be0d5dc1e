"""The case summary written to long-term memory when a session concludes.

Format (seed 000 §8.2.2): one line per key event, ``time | event |
conclusion | evidence URI``, at most 300 characters, numbers verbatim; the
conclusion, every overturned conclusion and every excluded hypothesis of the
session are kept. The request goes to the configured summarizer (offline by
default) and its answer through the fidelity check, repair and retry of
``summarizer.summarize_checked``.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdoctor.knowledge import KnowledgePack
from vdoctor.lines import Confirmation, FactKind, SummaryLine, fmt_num, iso, short_time, summary_time
from vdoctor.memory.fidelity import FidelityReport
from vdoctor.memory.session import Conclusion, SessionState
from vdoctor.memory.summarizer import (
    SUMMARY_PROMPT_VERSION,
    FidelityMetrics,
    OfflineSummarizer,
    Summarizer,
    SummaryRequest,
    summarize_checked,
)
from vdoctor.records import MAX_SUMMARY_CHARS

__all__ = [
    "SUMMARY_PROMPT_VERSION",
    "CaseSummary",
    "confirmation",
    "milestone_summary",
    "render_source",
    "summarize_case",
]


@dataclass
class CaseSummary:
    text: str
    required: list[str]
    source: str
    report: FidelityReport
    attempts: int = 1
    repaired: bool = False
    request: SummaryRequest | None = None


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


def milestone_summary(session: SessionState) -> str:
    """A long open session's progress for a milestone record: its newest timeline lines, whole, within the limit."""
    kept: list[str] = []
    for line in reversed([e.line().render() for e in session.timeline]):  # newest first, whole lines only
        if sum(len(k) + 1 for k in kept) + len(line) > MAX_SUMMARY_CHARS:
            break
        kept.insert(0, line)
    return "\n".join(kept)


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
    phrase, numbers = (confirmed.render(), confirmed.numbers) if confirmed else ("", [])
    evidence = next((u for u in conclusion.evidence if u.startswith("signal://")), "")
    evidence = evidence or (f"dtc://{conclusion.codes[0]}" if conclusion.codes else "")
    conf = f"{conclusion.confidence:.2f}"
    final = SummaryLine(
        ts=summary_time(session.last_event_at),
        event=f"concluded {' '.join(conclusion.codes)}",
        conclusion=f"{conclusion.priority} conf {conf}; {phrase}",
        evidence=evidence,
    )
    kept = _kept_facts(session)
    required = [*conclusion.codes, *numbers, conclusion.priority, conf, *(text for _, text, _ in kept)]
    if evidence:
        required.append(evidence)
    opening: list[SummaryLine] = []
    if session.timeline and len(session.timeline) > 1:
        opening.append(session.timeline[0].line())
    events = [*opening, *(SummaryLine(short_time(when), kind, text, "-") for kind, text, when in kept), final]
    # Space goes to the conclusion first, then overturned conclusions and
    # exclusions, then the opening alert.
    kept_at = range(len(opening), len(opening) + len(kept))
    keep_first = (len(events) - 1, *kept_at, *range(len(opening)))
    rules = [f"rule {c}: {e.confirm.describe()}" for c in conclusion.codes if (e := pack.get(c)) and e.confirm]
    source = "\n".join([render_source(session), *rules])
    request = SummaryRequest(
        kind="case",
        source=source,
        required=list(dict.fromkeys(required)),
        events=events,
        max_chars=MAX_SUMMARY_CHARS,
        keep_first=keep_first,
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
    )
