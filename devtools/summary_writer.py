"""How the local model server answers a summary request: a deterministic writer of its own.

The ``ModelSummarizer`` sends the summary prompt (rules, the facts that must
appear, the readings line) as the system message and the session's source as
the user message. This writer answers from that text alone, by a route of
its own (not the offline summarizer's event lines): the readings line first,
then each exclusion or voided conclusion as ``excluded: ...`` / ``void: ...``
without a time, then the conclusion in its own wording (``P2, confidence
0.80``), then the root cause and fix copied from the source's conclusion when
they fit. A retry (the prompt carries the checker's findings) leaves the cause
and fix out. Rolling requests get the required facts, one per line, as far as
they fit.

It is no language model: summaries from it test the pipeline and the
checker's tolerance of a layout that is not the offline one (a pipeline check
of the check), not what a real model would write.
"""

from __future__ import annotations

import json
import re
from typing import Any

from vdoctor.models.base import ChatResponse, Message

# The first line of vdoctor.memory.summarizer.SUMMARY_PROMPT: how a summary request is told apart.
SUMMARY_PROMPT_HEAD = "You compress a vehicle diagnosis session into a faithful case record."
_REQUIRED_HEAD = "Facts that must appear verbatim:"
_READINGS_HEAD = "The readings line to copy as it is:"
_MAX_RE = re.compile(r"At most (\d+) characters")
_CODE_RE = re.compile(r"^(?:[PCBU][0-9A-F]{4}|SPN\d{1,6}-FMI\d{1,2})$")
_CONF_RE = re.compile(r"^[01]\.\d\d$")
_KEPT_RE = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}) \| (excluded|void) \| (.+)$")
_TIME_RE = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}) \| ")


def is_summary_request(messages: list[Message]) -> bool:
    return bool(messages) and messages[0].role == "system" and messages[0].content.startswith(SUMMARY_PROMPT_HEAD)


def _section(system: str, head: str) -> list[str]:
    if head not in system:
        return []
    lines = system.split(head, 1)[1].splitlines()[1:]
    out = []
    for line in lines:
        if not line.strip():
            break
        out.append(line)
    return out


def _conclusion(source: str) -> dict[str, Any] | None:
    for line in reversed(source.splitlines()):
        if line.startswith("{") and '"root_cause"' in line:
            try:
                data = json.loads(line)
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def write_summary(messages: list[Message]) -> str:
    system, source = messages[0].content, messages[-1].content
    required = [line[2:] for line in _section(system, _REQUIRED_HEAD) if line.startswith("- ")]
    readings = _section(system, _READINGS_HEAD)
    limit = int(m.group(1)) if (m := _MAX_RE.search(system)) else 300
    retry = "rejected by the fidelity check" in system
    conclusion = _conclusion(source)
    if conclusion is None:
        return _fit([f"fact | {r}" for r in required if r != "(none)"], limit)
    codes = [str(c) for c in conclusion.get("codes", [])]
    others = [r for r in required if _CODE_RE.match(r) and r not in codes]
    confirmation = next((r for r in required if r.startswith("confirmed ")), "")
    conf = next((r for r in required if _CONF_RE.match(r)), f"{float(conclusion.get('confidence', 0)):.2f}")
    evidence = next((r for r in required if "://" in r), "-")
    kept = {m.group(3): m.group(2) for line in source.splitlines() if (m := _KEPT_RE.match(line))}
    when = [m.group(1) for line in source.splitlines() if (m := _TIME_RE.match(line))]
    lines = list(readings)
    lines += [f"{kept[r]}: {r}" for r in required if r in kept]
    also = f" (also {' '.join(others)})" if others else ""
    head = f"{max(when) if when else '-'} | concluded {' '.join(codes)}{also}"
    prio = str(conclusion.get("priority"))
    wordy = f"{head} | {', '.join(x for x in (prio, f'confidence {conf}', confirmation) if x)} | {evidence}"
    terse = f"{head} | {prio} conf {conf}{'; ' + confirmation if confirmation else ''} | {evidence}"
    lines.append(wordy if len("\n".join([*lines, wordy])) <= limit else terse)
    placed = {*codes, *others, confirmation, conf, evidence, str(conclusion.get("priority")), *kept}
    lines += [r for r in required if r not in placed]
    if not retry:
        cause, fix = str(conclusion.get("root_cause", "")), str(conclusion.get("fix_action", ""))
        for extra in (f"cause: {cause}; fix: {fix}", f"cause: {cause}"):
            if len("\n".join([*lines, extra])) <= limit:
                lines.append(extra)
                break
    return "\n".join(lines)


def _fit(lines: list[str], limit: int) -> str:
    out: list[str] = []
    for line in lines:
        if len("\n".join([*out, line])) <= limit:
            out.append(line)
    return "\n".join(out)


def summary_reply(messages: list[Message]) -> ChatResponse:
    text = write_summary(messages)
    return ChatResponse(content=text, prompt_tokens=sum(len(m.content) // 4 for m in messages),
                        completion_tokens=len(text) // 4)  # fmt: skip
