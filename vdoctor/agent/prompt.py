"""Prompt assembly: system instructions, injected memory, working context, current alert."""

from __future__ import annotations

import re
from collections.abc import Callable

from vdoctor.agent.window import ContextWindow
from vdoctor.events import AlertEvent
from vdoctor.lines import fmt_num, iso, render_alert_block, render_codes_seen
from vdoctor.memory.session import SessionState
from vdoctor.memory.working import WorkingMemory, clip_to_tokens
from vdoctor.models.base import Message

PROMPT_VERSION = "diagnose-v2"

SYSTEM_PROMPT = """You are the on-board diagnosis agent for one vehicle of a fleet.
Diagnose the vehicle's alerts with the tools: look up trouble codes, read the
session's signal history, and conclude only when the evidence confirms a known
fault. Use the long-term memory below: the vehicle's own history first, then
verified cases of similar vehicles. Never mention or guess about other
vehicles' data beyond the verified cases given to you.

The context ends with the session's key facts: they are exact and never
compressed. A conclusion listed there as void was overturned: never rely on it.

Answer with one JSON object and nothing else:
{"phase": "CONCLUDED" | "INVESTIGATING", "root_cause": str | null,
 "fix_action": str | null, "priority": "P1" | "P2" | "P3" | null,
 "confidence": 0.0-1.0, "codes": [str], "evidence": [uri],
 "excluded": [hypotheses ruled out], "voided": [earlier conclusions now overturned]}
Evidence URIs: dtc://<code>, signal://<vin>/<signal>@<ts>, case://<vin>/<session_id>."""


def alert_block(alert: AlertEvent, alert_text: str | None = None, summarised: SummarisedSignals | None = None) -> str:
    """The alert as the model reads it; ``alert_text`` in place of its text (clipped to fit), ``summarised``
    in place of its signals (families of them summarised to fit)."""
    body: dict[str, object] = {
        "event_id": alert.event_id,
        "ts": iso(alert.ts),
        "alert_text": alert.alert_text if alert_text is None else alert_text,
        "dtc_codes": alert.dtc_codes,
        "signals": alert.signals if summarised is None else summarised.signals,
    }
    if summarised is not None:
        body["signal_families"] = summarised.families
    return render_alert_block(body)


# A signal of an indexed family (cell_1_voltage_v ... cell_192_voltage_v): its name but for its last number.
_INDEXED_RE = re.compile(r"^(.*?)([0-9]+)([^0-9]*)$")
FAMILY_LINE = "{n} signals, lowest {low} ({low_name}), highest {high} ({high_name}); signal_history reads each"


def _numbers(digits: list[str]) -> str:
    """``1-96,98`` for the digit runs of a family's names (a run written with leading zeros is listed as is)."""
    if any(d != str(int(d)) for d in digits):
        return ",".join(digits)
    values = sorted(int(d) for d in digits)
    runs: list[str] = []
    start = prev = values[0]
    for v in values[1:]:
        if v != prev + 1:
            runs.append(str(start) if start == prev else f"{start}-{prev}")
            start = v
        prev = v
    runs.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(runs)


def signal_families(names: list[str]) -> list[tuple[str, list[str]]]:
    """The indexed families of two or more signals among ``names``, largest first (then by first appearance):
    each as its pattern (``cell_{1-192}_voltage_v``) and its names in their order."""
    members: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for name in names:
        if (m := _INDEXED_RE.match(name)) is not None:
            members.setdefault((m[1], m[3]), []).append((name, m[2]))
    families = [
        (f"{head}{{{_numbers([d for _, d in found])}}}{tail}", [n for n, _ in found])
        for (head, tail), found in members.items()
        if len(found) > 1
    ]
    return sorted(families, key=lambda f: -len(f[1]))


class SummarisedSignals:
    """An alert's signals as its block shows them when they do not fit whole: some families summarised by
    their lowest and highest reading (``families``, by pattern), the other signals each on its own."""

    def __init__(self, signals: dict[str, float], families: list[tuple[str, list[str]]]) -> None:
        gone = {name for _, names in families for name in names}
        self.signals = {k: v for k, v in signals.items() if k not in gone}
        self.families: dict[str, str] = {}
        for pattern, names in families:
            low, high = min(names, key=signals.__getitem__), max(names, key=signals.__getitem__)
            self.families[pattern] = FAMILY_LINE.format(
                n=len(names), low=fmt_num(signals[low]), low_name=low, high=fmt_num(signals[high]), high_name=high
            )


def summarise_signals(
    signals: dict[str, float], fits: Callable[[SummarisedSignals | None], bool]
) -> SummarisedSignals | None:
    """The alert's signals as few families summarised as ``fits``, the largest family first (all of them
    when even that does not fit); None when the signals fit whole or form no family.

    A summarised family loses no reading of the alert: the session keeps its newest 256 readings, as many
    as an alert may carry (``signal_history`` reads them), and the alert's readings are key facts as well
    (which give way only after this, ``WorkingMemory.fit``).
    """
    families = signal_families(list(signals)) if len(signals) > 1 else []
    if not families or fits(None):
        return None
    done: list[tuple[str, list[str]]] = []
    shown = None
    for family in families:
        done.append(family)
        if fits(shown := SummarisedSignals(signals, done)):
            break
    return shown


# What stands for an alert's text when the working budget leaves no room for any of it.
TEXT_LEFT_OUT = "[the alert's text, {} characters, left out to fit the working context]"


def _current(session: SessionState, alert: AlertEvent, block: str) -> str:
    return (
        f"## Current alert\n{block}\n"
        f"## Session\nvin: {session.vin}; series: {session.series}; "
        f"session_id: {session.session_id}; alerts so far: {session.alerts}\n"
        f"{render_codes_seen(session.codes)}"
    )


def build_window(
    session: SessionState, alert: AlertEvent, working: WorkingMemory
) -> tuple[list[Message], ContextWindow]:
    """The first model call's messages (system: instructions and injected memory; user: the working
    context), and the window that keeps the alert's later calls within the working budget (``agent.window``)."""
    system = SYSTEM_PROMPT
    if session.memory_text:
        system += "\n\n" + session.memory_text

    def clipped(room: int) -> str:
        # The alert's own text gives way first (marked as clipped), then its signals' families
        # (``summarise_signals``); its codes stay whole. The text's JSON escapes may cost a few tokens
        # more than the text: the room shrinks until it fits.
        count = working.counter.count
        marker = TEXT_LEFT_OUT.format(len(alert.alert_text))
        summarised = summarise_signals(
            alert.signals, lambda s: count(_current(session, alert, alert_block(alert, marker, s))) <= room
        )
        rest = count(_current(session, alert, alert_block(alert, "", summarised)))
        text_room = room - rest
        while True:
            # With no room for any of it, the marker alone says the text was there.
            text = clip_to_tokens(alert.alert_text, text_room, working.counter) or marker
            current = _current(session, alert, alert_block(alert, text, summarised))
            if text_room <= 0 or count(current) <= room:
                return current
            text_room -= count(current) - room

    current = _current(session, alert, alert_block(alert))
    window = ContextWindow(working, lambda reserve: working.fit(current, clipped, reserve))
    return [Message(role="system", content=system), Message(role="user", content=window.first())], window
