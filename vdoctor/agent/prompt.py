"""Prompt assembly: system instructions, injected memory, working context, current alert."""

from __future__ import annotations

from vdoctor.agent.window import ContextWindow
from vdoctor.events import AlertEvent
from vdoctor.lines import iso, render_alert_block, render_codes_seen
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


def alert_block(alert: AlertEvent, alert_text: str | None = None) -> str:
    """The alert as the model reads it; ``alert_text`` in place of its text (clipped to fit)."""
    body = {
        "event_id": alert.event_id,
        "ts": iso(alert.ts),
        "alert_text": alert.alert_text if alert_text is None else alert_text,
        "dtc_codes": alert.dtc_codes,
        "signals": alert.signals,
    }
    return render_alert_block(body)


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
        # The alert's own text is what gives way (marked as clipped); codes and signals stay whole.
        # Its JSON escapes may cost a few tokens more than the text: the room shrinks until it fits.
        count = working.counter.count
        rest = count(_current(session, alert, alert_block(alert, "")))
        text_room = room - rest
        while True:
            # With no room for any of it, the marker alone says the text was there.
            text = clip_to_tokens(alert.alert_text, text_room, working.counter) or TEXT_LEFT_OUT.format(
                len(alert.alert_text)
            )
            current = _current(session, alert, alert_block(alert, text))
            if text_room <= 0 or count(current) <= room:
                return current
            text_room -= count(current) - room

    current = _current(session, alert, alert_block(alert))
    window = ContextWindow(working, lambda reserve: working.fit(current, clipped, reserve))
    return [Message(role="system", content=system), Message(role="user", content=window.first())], window
