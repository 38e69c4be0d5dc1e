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

from vdoctor.knowledge import KnowledgePack, fmt_num
from vdoctor.memory.fidelity import FidelityReport
from vdoctor.memory.session import Conclusion, SessionState, TimelineEntry
from vdoctor.memory.summarizer import (
    SUMMARY_PROMPT_VERSION,
    EventLine,
    FidelityMetrics,
    OfflineSummarizer,
    Summarizer,
    SummaryRequest,
    summarize_checked,
)
from vdoctor.memory.working import fact_payload
from vdoctor.records import MAX_SUMMARY_CHARS

__all__ = ["SUMMARY_PROMPT_VERSION", "CaseSummary", "summarize_case", "render_source", "confirm_phrase"]

# Time format of case summary lines (the source renders timeline times alike).
_TIME = "%Y-%m-%d %H:%M"


@dataclass
class CaseSummary:
    text: str
    required: list[str]
    source: str
    report: FidelityReport
    attempts: int = 1
    repaired: bool = False
    request: SummaryRequest | None = None


def _line(entry: TimelineEntry) -> str:
    return f"{entry.ts:{_TIME}} | {entry.event} | {entry.conclusion} | {entry.evidence}"


def _kept_facts(session: SessionState) -> list[tuple[str, str, str]]:
    """(kind, text, time) of the session's overturned conclusions and excluded hypotheses."""
    kept = []
    for fact in session.working.key_facts:
        kind = fact.split(":", 1)[0]
        if kind in ("void", "excluded"):
            text = fact_payload(fact)
            when = fact.rsplit(" @", 1)[1] if " @" in fact else ""
            kept.append((kind, text, when))
    return kept


def _short_time(when: str) -> str:
    # Key facts carry ISO times (2026-11-01T10:15:30Z); summary lines use 2026-11-01 10:15.
    return when[:16].replace("T", " ") if len(when) >= 16 else (when or "-")


def render_source(session: SessionState) -> str:
    """The full session as text: what the summary must be faithful to."""
    lines = [_line(e) for e in session.timeline]
    lines += [f"{_short_time(when)} | {kind} | {text}" for kind, text, when in _kept_facts(session)]
    lines += [f"reading {r.name}={fmt_num(r.value)} @{r.ts:%Y-%m-%dT%H:%M:%SZ} {r.uri}" for r in session.readings]
    if session.conclusion:
        lines.append(session.conclusion.model_dump_json())
    return "\n".join(lines)


def confirm_phrase(conclusion: Conclusion, session: SessionState, pack: KnowledgePack) -> tuple[str, list[str]]:
    """``confirmed <signal>=<value><op><threshold>`` (or ``confirmed repeat N``) and its key numbers."""
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
                        value = fmt_num(hit.value)
                        phrase = f"confirmed {rule.signal}={value}{rule.op}{fmt_num(rule.threshold)}"
                        return phrase, [f"{rule.signal}={value}"]
        elif rule.repeat:
            return f"confirmed repeat {rule.repeat}", []
    return "", []


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
    phrase, numbers = confirm_phrase(conclusion, session, pack)
    evidence = next((u for u in conclusion.evidence if u.startswith("signal://")), "")
    evidence = evidence or (f"dtc://{conclusion.codes[0]}" if conclusion.codes else "")
    conf = f"{conclusion.confidence:.2f}"
    final = EventLine(
        ts=f"{session.last_event_at:{_TIME}}",
        event=f"concluded {' '.join(conclusion.codes)}",
        conclusion=f"{conclusion.priority} conf {conf}; {phrase}",
        evidence=evidence,
    )
    kept = _kept_facts(session)
    required = [*conclusion.codes, *numbers, conclusion.priority, conf, *(text for _, text, _ in kept)]
    if evidence:
        required.append(evidence)
    opening: list[EventLine] = []
    if session.timeline and len(session.timeline) > 1:
        first = session.timeline[0]
        opening.append(EventLine(f"{first.ts:{_TIME}}", first.event, first.conclusion, first.evidence))
    events = [*opening, *(EventLine(_short_time(when), kind, text, "-") for kind, text, when in kept), final]
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
