"""A diagnosis's evidence: the model's addresses, kept only where the session can vouch for them.

The model answers with evidence URIs (the prompt names the forms: ``dtc://<code>``,
``signal://<vin>/<signal>@<ts>``, ``case://<vin>/<session_id>``), and they go to the output, the
session's timeline and the case summary in long-term memory. A model's answer is text it wrote: an
address it made up, another vehicle's case it was never shown, or free text would be stored as
evidence. An address is kept only when it names what this session has:

- ``dtc://<code>``: a code of this session's alerts (``SessionState.codes``; written as the session
  holds it when the model spelled it in another case);
- ``signal://<vin>/<signal>@<ts>``: a reading of this vehicle this session observed
  (``SessionState.readings``, the addresses ``signal_history`` gives). The session keeps its last
  ``MAX_READINGS``; when it has let older ones go, a reading of a signal it tracks (``signals``) at a
  time within the session is kept as well, as it may be one of those;
- ``case://<vin>/<session_id>``: a case recalled for this session (``memory.own`` and ``memory.similar``,
  the cases injected into its context).

These are the only addresses the project writes (the offline model, the tools, the summaries); a
knowledge-base hit has an id, not an address. The rest is dropped, duplicates are dropped, at most
``MAX_EVIDENCE`` are kept, and the caller flags the diagnosis when anything but a duplicate was dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from vdoctor.memory.session import MAX_READINGS, SessionState

# A diagnosis cites a code, the reading that confirms it and the cases it follows (the offline model:
# 2-3 addresses; an open session, a code each): 16 leaves room for a session of many codes, and bounds
# what an answer can put in the output and the timeline.
MAX_EVIDENCE = 16
# Output flag: the answer's evidence held addresses this session cannot vouch for, or more than MAX_EVIDENCE.
EVIDENCE_DROPPED = "evidence_dropped"

DTC = "dtc://"
SIGNAL = "signal://"
CASE = "case://"


@dataclass(frozen=True)
class CheckedEvidence:
    kept: list[str]
    # How many entries were dropped (duplicates not counted: they lose nothing).
    dropped: int


def check_evidence(evidence: list[str], session: SessionState) -> CheckedEvidence:
    """``evidence`` as the session can vouch for it, in the answer's order, deduplicated and bounded."""
    vouch = _Vouch(session)
    kept: list[str] = []
    dropped = 0
    for entry in evidence:
        uri = vouch(entry.strip())
        if uri is None:
            dropped += 1
        elif uri not in kept:
            if len(kept) < MAX_EVIDENCE:
                kept.append(uri)
            else:
                dropped += 1
    return CheckedEvidence(kept, dropped)


class _Vouch:
    """What one session can vouch for, looked up as an answer's addresses ask (every alert's answer is checked:
    building a set of the session's 256 reading addresses for each took ~13 us, the lookups ~2)."""

    def __init__(self, session: SessionState) -> None:
        self.session = session
        # The session holds every reading it observed until it has MAX_READINGS, when it lets the oldest go.
        self.let_go = len(session.readings) >= MAX_READINGS

    def __call__(self, uri: str) -> str | None:
        """``uri`` as the evidence keeps it, or None when the session cannot vouch for it."""
        if uri.startswith(DTC):
            return self._code(uri[len(DTC) :])
        if uri.startswith(SIGNAL):
            # A cited reading is mostly a recent one: the newest first.
            observed = any(reading.uri == uri for reading in reversed(self.session.readings))
            return uri if observed or (self.let_go and self._maybe_let_go(uri)) else None
        if uri.startswith(CASE):
            vin, _, session_id = uri[len(CASE) :].partition("/")
            memory = self.session.memory
            recalled = any(ref.vin == vin and ref.session_id == session_id for ref in (*memory.own, *memory.similar))
            return uri if recalled else None
        return None

    def _code(self, written: str) -> str | None:
        """``dtc://`` and the session's code, as the session holds it (the model may spell it in another case)."""
        codes = self.session.codes
        if written in codes:
            return DTC + written
        upper = written.upper()
        code = next((code for code in codes if code.upper() == upper), None)
        return None if code is None else DTC + code

    def _maybe_let_go(self, uri: str) -> bool:
        """A reading of a signal the session tracks, of its vehicle, at a time within the session."""
        vin, _, rest = uri[len(SIGNAL) :].partition("/")
        name, _, at = rest.rpartition("@")
        if vin != self.session.vin or name not in self.session.signals:
            return False
        try:
            ts = datetime.fromisoformat(at)
        except ValueError:
            return False
        return ts.tzinfo is not None and self.session.opened_at <= ts <= self.session.last_event_at
