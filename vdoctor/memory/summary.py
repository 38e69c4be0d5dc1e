"""The case summary written to long-term memory when a session concludes.

Format (seed 000 §8.2.3): one line per key event, ``time | event |
conclusion | evidence URI``, at most 300 characters, numbers verbatim. The
offline summarizer is deterministic; the fidelity checker runs on its output
like on any model's.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdoctor.knowledge import KnowledgePack, fmt_num
from vdoctor.memory.fidelity import FidelityReport, check_summary
from vdoctor.memory.session import Conclusion, SessionState, TimelineEntry
from vdoctor.records import MAX_SUMMARY_CHARS

# Bumped whenever the summary format or its rules change, so that records
# written by older versions can be found and re-extracted.
SUMMARY_PROMPT_VERSION = "case-summary-v1"


@dataclass
class CaseSummary:
    text: str
    required: list[str]
    source: str
    report: FidelityReport


def _line(entry: TimelineEntry) -> str:
    return f"{entry.ts:%Y-%m-%d %H:%M} | {entry.event} | {entry.conclusion} | {entry.evidence}"


def render_source(session: SessionState) -> str:
    """The full session as text: what the summary must be faithful to."""
    lines = [_line(e) for e in session.timeline]
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


def summarize_case(session: SessionState, pack: KnowledgePack) -> CaseSummary:
    """Summarise a concluded session and check the summary's fidelity."""
    conclusion = session.conclusion
    if conclusion is None:
        raise ValueError("only a CONCLUDED session is summarised; this one has no conclusion")
    phrase, numbers = confirm_phrase(conclusion, session, pack)
    evidence = next((u for u in conclusion.evidence if u.startswith("signal://")), "")
    evidence = evidence or (f"dtc://{conclusion.codes[0]}" if conclusion.codes else "")
    conf = f"{conclusion.confidence:.2f}"
    final = (
        f"{session.last_event_at:%Y-%m-%d %H:%M} | concluded {' '.join(conclusion.codes)} | "
        f"{conclusion.priority} conf {conf}; {phrase} | {evidence}"
    )
    required = [*conclusion.codes, *numbers, conclusion.priority, conf]
    lines = [final]
    if session.timeline and len(session.timeline) > 1:
        opening = _line(session.timeline[0])
        if len(opening) + 1 + len(final) <= MAX_SUMMARY_CHARS:
            lines.insert(0, opening)
    text = "\n".join(lines)[:MAX_SUMMARY_CHARS]
    rules = [f"rule {c}: {e.confirm.describe()}" for c in conclusion.codes if (e := pack.get(c)) and e.confirm]
    source = "\n".join([render_source(session), *rules])
    return CaseSummary(text=text, required=required, source=source, report=check_summary(text, required, source))
