"""The summarizer behind every summary: rolling (L1) and case (L3) alike.

A summary is asked for with a ``SummaryRequest``: the source text it must be
faithful to, the facts it must carry verbatim, and the events it covers as
structured ``time | event | conclusion | evidence URI`` lines. Two
summarizers answer it:

- ``OfflineSummarizer`` (the default): deterministic, no network. It writes
  the event lines itself, dropping chit-chat by construction (it only ever
  uses the structured parts).
- ``ModelSummarizer``: any ``ChatModel`` (a cheaper model than the agent's,
  seed 000 §8.2 / seed 003) prompted with ``SUMMARY_PROMPT``.

``summarize_checked`` runs the fidelity checker on every summary. A summary
that only lacks facts is repaired (the missing facts are appended as
structured lines); one that invents facts, does not compress or does not fit
is retried once with the checker's findings; a summary that still fails is
returned flagged and counted in ``FidelityMetrics``, never kept silently.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from vdoctor.events import canonical_codes
from vdoctor.lines import ReadingsLine, ReadingSpan
from vdoctor.memory.fidelity import FidelityReport, check_request
from vdoctor.memory.request import (
    CaseDecision,
    SummaryKind,
    SummaryRequest,
    request_from_json,
    request_to_json,
)
from vdoctor.models.base import ChatModel, Message

__all__ = [
    "SUMMARY_PROMPT",
    "SUMMARY_PROMPT_VERSION",
    "CaseDecision",
    "CheckedSummary",
    "FidelityMetrics",
    "ModelSummarizer",
    "OfflineSummarizer",
    "Summarizer",
    "SummaryKind",
    "SummaryRequest",
    "readings_line",
    "repair",
    "request_from_json",
    "request_to_json",
    "summarize_checked",
]

log = logging.getLogger(__name__)

# Bumped whenever the summary format, its rules or this prompt change, so that
# L3 records written by older versions can be found and re-extracted.
# v3: every signal's key readings on a ``readings:`` line; meaning-level rules.
SUMMARY_PROMPT_VERSION = "case-summary-v3"

# The fidelity rules of seed 000 §8.2.2, as the summary model reads them.
SUMMARY_PROMPT = """You compress a vehicle diagnosis session into a faithful case record.

Rules:
1. Keep: trouble codes and their definitions, key numbers exactly as written
   (187mV stays 187mV, never "high"), times, decisions with their confidence,
   open questions, and every excluded hypothesis, marked as excluded
   ("suspected the harness, ruled out").
2. Keep a conclusion that was later overturned, marked as void. Drop the
   reasoning that led to it, guesses that were overturned, chit-chat and
   repeated confirmations.
3. Never write a number, code, time, URI or word that is not in the source.
   Do not state a cause or fix other than the session's own conclusion; never
   present an excluded hypothesis or a voided conclusion as the cause.
4. Format: one line per event, `time | event | conclusion | evidence URI`,
   times and URIs copied from the source, plus the readings line below
   copied as it is (each signal: first→latest, ↓lowest and ↑highest where they
   differ, then the unit).
5. At most {max_chars} characters in all.

Facts that must appear verbatim:
{required}

Answer with the summary lines only."""

READINGS_NOTE = "\n\nThe readings line to copy as it is:\n{line}"
RETRY_NOTE = "\n\nYour previous summary was rejected by the fidelity check: {problems}. Write it again."


def readings_line(request: SummaryRequest) -> str:
    """The ``readings:`` line of a case request's spans; empty when it has none."""
    if not request.readings:
        return ""
    return ReadingsLine(tuple(s for text in request.readings for s in ReadingSpan.find_all(text))).render()


class Summarizer(Protocol):
    """Anything that writes a summary for a request (checked by ``summarize_checked``)."""

    name: str

    def summarize(self, request: SummaryRequest, feedback: str = "") -> str: ...


class OfflineSummarizer:
    """Deterministic: the request's event lines, most important first, within the limit.

    A case request's readings line goes just before its last (concluding) line.
    """

    name = "offline-summary-v2"

    def summarize(self, request: SummaryRequest, feedback: str = "") -> str:
        lines = [e.render() for e in request.events]
        readings = readings_line(request)
        order = list(dict.fromkeys([*request.keep_first, *range(len(lines) - 1, -1, -1)]))
        chosen: set[int] = set()
        used = len(readings)
        for i in order:
            if i >= len(lines):
                continue
            cost = len(lines[i]) + (1 if chosen or readings else 0)
            if used + cost <= request.max_chars:
                chosen.add(i)
                used += cost
        out = [lines[i] for i in sorted(chosen)]
        if readings:
            last = len(lines) - 1 in chosen
            out.insert(len(out) - 1 if last else len(out), readings)
        return "\n".join(out)


class ModelSummarizer:
    """A ``ChatModel`` (any OpenAI-compatible one) prompted with the fidelity rules."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self.name = f"model:{model.name}"

    def summarize(self, request: SummaryRequest, feedback: str = "") -> str:
        system = SUMMARY_PROMPT.format(
            max_chars=request.max_chars, required="\n".join(f"- {r}" for r in request.required) or "- (none)"
        )
        if request.readings:
            system += READINGS_NOTE.format(line=readings_line(request))
        if feedback:
            system += RETRY_NOTE.format(problems=feedback)
        messages = [Message(role="system", content=system), Message(role="user", content=request.source)]
        response = self.model.chat(messages, [])
        return (response.content or "").strip()


@dataclass
class FidelityMetrics:
    """Counters an operator can expose: every summary is checked, none fails silently."""

    checked: int = 0
    passed_first: int = 0
    repaired: int = 0
    retried: int = 0
    failed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "summaries_checked": self.checked,
            "summaries_passed_first_time": self.passed_first,
            "summaries_repaired": self.repaired,
            "summaries_retried": self.retried,
            "summary_fidelity_failed": self.failed,
        }


@dataclass
class CheckedSummary:
    text: str
    report: FidelityReport
    attempts: int = 1
    repaired: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.report.ok


def repair(text: str, report: FidelityReport, request: SummaryRequest) -> str:
    """Append the missing facts as structured ``fact | ...`` lines, making room if needed.

    Room is made by dropping, earliest first, lines that carry no required
    fact; the facts themselves are never dropped (a repair that still does not
    fit fails the check and is retried).
    """
    facts = [f"fact | {m}" for m in report.missing]
    lines = text.splitlines() if text else []
    keep = [*request.required, *request.readings]
    droppable = [i for i, line in enumerate(lines) if not any(r in line for r in keep)]
    dropped: set[int] = set()
    for i in droppable:
        if len("\n".join([*(x for j, x in enumerate(lines) if j not in dropped), *facts])) <= request.max_chars:
            break
        dropped.add(i)
    return "\n".join([*(x for j, x in enumerate(lines) if j not in dropped), *facts])


def summarize_checked(
    summarizer: Summarizer, request: SummaryRequest, metrics: FidelityMetrics | None = None
) -> CheckedSummary:
    """Summarise, check, repair or retry once; the result says whether it finally passed.

    The summarizer's own errors propagate (a model summarizer's ``ModelError``): the caller decides.
    """
    metrics = metrics if metrics is not None else FidelityMetrics()

    def check(text: str) -> FidelityReport:
        report = check_request(text, request)
        if request.events and not text.strip():
            # Nothing to be unfaithful with, but every event lost: a failure, never a pass.
            report.contradicted.append(f"an empty summary of {len(request.events)} events")
        return report

    # Counted once there is a summary to check: a summarizer that raises (a model outage, ``ModelError``)
    # checked nothing, and its caller may have the request summarised by another (``WorkingMemory``).
    # A J1939 code is read as a code in its one written form: a model may write it as a gateway does.
    text = canonical_codes(summarizer.summarize(request))
    metrics.checked += 1
    report = check(text)
    if report.ok:
        metrics.passed_first += 1
        return CheckedSummary(text=text, report=report)

    if report.repairable:
        fixed = repair(text, report, request)
        fixed_report = check(fixed)
        if fixed_report.ok:
            metrics.repaired += 1
            return CheckedSummary(text=fixed, report=fixed_report, repaired=True, notes=[report.describe()])

    # Invented facts, no compression, too long, or a repair that did not fit: retry once.
    metrics.retried += 1
    retry = canonical_codes(summarizer.summarize(request, feedback=report.describe()))
    retry_report = check(retry)
    result = CheckedSummary(text=retry, report=retry_report, attempts=2, notes=[report.describe()])
    if not retry_report.ok and retry_report.repairable:
        fixed = repair(retry, retry_report, request)
        fixed_report = check(fixed)
        if fixed_report.ok:
            metrics.repaired += 1
            return CheckedSummary(text=fixed, report=fixed_report, attempts=2, repaired=True, notes=result.notes)
    if not result.ok:
        metrics.failed += 1
        log.warning("%s summary failed the fidelity check twice: %s", request.kind, retry_report.describe())
    return result
