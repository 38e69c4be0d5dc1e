"""Cases left waiting in the dead letters, written to long-term memory: ``vdoctor memory write-waiting``.

A concluded case whose write failed waits in its vehicle's session state, and
the job tries it again for up to 7 days. Two kinds of ``process`` dead letter
carry such a session's text as their raw, and nothing wrote the case from
there:

- the tries stopped at their horizon (``the concluded case of VIN was tried
  for 7 days ...``): the vehicle's next alert within the state's TTL tries it
  once more, but a vehicle silent past the TTL loses it;
- a stored session this release could not read was set aside (``the stored
  session of VIN cannot be read by this release ...``): mended by hand, its
  text can be read again.

``write_waiting`` reads a dead-letter file (the job's ``dead_letters.jsonl``,
or a dump of its dead-letter topic), finds the letters whose raw is a session
with a case waiting (``SessionState.l3_pending``), and writes each case as a
try of the job's retry timer does (``DiagnosisEngine.retry_case``: the case
summarised, checked and embedded again, behind the same quality gates), unless
long-term memory holds it already (under its own id, or merged into an earlier
record of the same cause: a later try or alert wrote it; a record under its
id of another alert is another session's, written over as the job would).
Other letters
(events') are counted and left alone. Running it again writes nothing twice.

A case is merged as the job would have merged it in order (``write_final``:
into the newest record of its cause concluded within the 30 days up to it, a
newer case of its cause left as it is), but written as a record of its own
(``write_policy.write_alone``) where that record concluded in the same second
(which came first, the letters cannot tell: merged, the case could put its
summary over a newer case's) or was verified since the case concluded (merged,
the verdict would be reset). A vehicle that left the fleet's care
after the case concluded (a lifecycle event set its cases of then invalid,
which the waiting case missed) has the case written invalid from the same
time. The store tells it from the vehicle's other cases: with none, it cannot. A store that does not
answer stops the run: the letters after it are reported, not tried (each try
would wait out the store's connect timeout).

The job's state does not learn of a case written here, but the job's next try
of it, or the vehicle's next alert, finds it in long-term memory and leaves it as
written (``DiagnosisEngine._case_held``): a case written invalid stays invalid.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from pydantic import ValidationError

from vdoctor.diagnosis import DiagnosisEngine, holds_case
from vdoctor.errors import StoreError
from vdoctor.events import describe_validation_error
from vdoctor.memory.session import DedupState, SessionState
from vdoctor.memory.write_policy import DEDUP_WINDOW, WriteFinal, write_alone, write_final
from vdoctor.records import DeadLetter, RecordKind
from vdoctor.stores.base import MemoryStore


class Outcome(StrEnum):
    WRITTEN = "written"
    ALREADY = "already in long-term memory"
    CHECK_FAILED = "not written: its summary failed the fidelity check (never written)"
    NOT_WRITTEN = "not written: long-term memory or a model failed; run again"
    NOT_TRIED = "not tried: long-term memory did not answer for an earlier case; run again"
    UNREADABLE = "unreadable session with a case waiting: mend its text in the letter and run again"
    CUT = "session cut at the dead letters' bound: its whole text is not in the letter"
    NO_CASE = "no case waiting"


# The outcomes that leave a case unwritten that could still be: the command exits 1.
UNFINISHED = frozenset({Outcome.NOT_WRITTEN, Outcome.NOT_TRIED, Outcome.UNREADABLE, Outcome.CUT})


@dataclass
class Found:
    """One letter that holds a session: its line in the file, the vehicle and session (when readable), the outcome,
    and why (a failure, what is wrong with an unreadable text)."""

    line: int
    vin: str
    session_id: str
    outcome: Outcome
    why: str = ""
    # The time from which the case was set invalid (its vehicle left the fleet's care after it concluded).
    invalid_from: str = ""


@dataclass
class WaitingReport:
    letters: int = 0  # dead letters read
    not_letters: int = 0  # lines that are no dead letter (not JSON, or not its fields)
    sessions: list[Found] = field(default_factory=list)

    @property
    def counts(self) -> Counter[Outcome]:
        return Counter(found.outcome for found in self.sessions)

    @property
    def unfinished(self) -> int:
        return sum(1 for found in self.sessions if found.outcome in UNFINISHED)

    def as_json(self) -> dict[str, object]:
        return {
            "letters": self.letters,
            "not_letters": self.not_letters,
            "sessions": [
                {"line": f.line, "vin": f.vin, "session_id": f.session_id, "outcome": f.outcome.name.lower()}
                | ({"why": f.why} if f.why else {})
                | ({"invalid_from": f.invalid_from} if f.invalid_from else {})
                for f in self.sessions
            ],
            "counts": {outcome.name.lower(): n for outcome, n in self.counts.items()},
        }

    def render(self) -> str:
        lines = [f"{self.letters} dead letters read, {len(self.sessions)} with a vehicle's session"]
        if self.not_letters:
            lines.append(f"{self.not_letters} lines that are no dead letter (left alone)")
        for found in self.sessions:
            what = f"{found.vin} {found.session_id}".strip() or "(no vehicle named)"
            lines.append(f"  line {found.line}: {what}: {found.outcome.value}")
            if found.invalid_from:
                lines.append(
                    f"    set invalid from {found.invalid_from}, with the vehicle's cases of then: it left the fleet's "
                    "care after this case concluded"
                )
            if found.why:
                lines.append(f"    {found.why}")
        counts = self.counts
        lines.append(", ".join(f"{outcome.name.lower().replace('_', ' ')} {counts[outcome]}" for outcome in Outcome))
        return "\n".join(lines)


class _StoreDown(Exception):
    """The store did not answer a case's read: the run goes no further."""


def _session_named(raw: str) -> tuple[str, str] | None:
    """The vehicle and session a letter's raw names ("" where it cannot be read as far as that) when it is a
    vehicle's session (``SessionState``'s JSON, or text that names a vehicle and a session as it does: an
    unreadable one, or one mended by hand); None when it is not (an event)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return ("", "") if '"vin"' in raw and '"session_id"' in raw else None
    if not isinstance(data, dict) or not {"vin", "session_id", "phase"} <= data.keys():
        return None
    vin, session_id = data["vin"], data["session_id"]
    return (vin if isinstance(vin, str) else "", session_id if isinstance(session_id, str) else "")


def _letter(line: str) -> DeadLetter | None:
    try:
        return DeadLetter.model_validate_json(line)
    except ValidationError:
        return None


# Progress at least every this many lines (a file of events' letters has few sessions).
PROGRESS_LINES = 10_000


def write_waiting(
    lines: Iterable[str], engine: DiagnosisEngine, progress: Callable[..., None] | None = None
) -> WaitingReport:
    """Write the waiting case of every session in ``lines`` (a dead-letter file) that long-term memory does not hold
    yet, with ``engine``'s store, summarizer and embedder. ``progress(report)`` as the file is read (every
    ``PROGRESS_LINES``), ``progress(report, written, to_write)`` as its cases are written."""
    report = WaitingReport()
    to_write: list[tuple[Found, SessionState]] = []
    for number, line in enumerate(lines, start=1):
        if progress is not None and number % PROGRESS_LINES == 0:
            progress(report)
        if not line.strip():
            continue
        letter = _letter(line)
        if letter is None:
            report.not_letters += 1
            continue
        report.letters += 1
        named = _session_named(letter.raw) if letter.stage == "process" else None
        if named is None:
            continue
        found, waiting = _read(number, letter, named)
        report.sessions.append(found)
        if waiting is not None:
            to_write.append((found, waiting))
    # In the order the cases concluded, as the job writes a vehicle's cases, whatever the file's order: a case is
    # merged into an earlier one of its cause, never an earlier one into it.
    to_write.sort(key=lambda pair: (pair[1].last_event_at, pair[1].session_id, pair[0].line))
    down = ""
    for done, (found, waiting) in enumerate(to_write, start=1):
        if down:
            found.outcome, found.why = Outcome.NOT_TRIED, down
        else:
            try:
                _write_one(found, waiting, engine)
            except _StoreDown as e:
                found.outcome, found.why = Outcome.NOT_WRITTEN, str(e.__cause__)
                down = f"at line {found.line}: {e.__cause__}"
        if progress is not None:
            progress(report, done, len(to_write))
    return report


def _read(number: int, letter: DeadLetter, named: tuple[str, str]) -> tuple[Found, SessionState | None]:
    """A session letter's vehicle and session (``named``: as far as its text can be read), and the session when it
    has a case waiting (its outcome is then ``_write_one``'s)."""
    try:
        session = SessionState.model_validate_json(letter.raw)
    except ValidationError as e:
        vin, session_id = named
        if '"l3_pending":true' not in letter.raw and not letter.raw_truncated:
            return Found(number, vin, session_id, Outcome.NO_CASE, "(an unreadable session)"), None
        if letter.raw_truncated:
            why = f"{letter.raw_chars} characters, sha256 {letter.raw_sha256}"
            return Found(number, vin, session_id, Outcome.CUT, why), None
        return Found(number, vin, session_id, Outcome.UNREADABLE, describe_validation_error(e)), None
    found = Found(number, session.vin, session.session_id, Outcome.NO_CASE)
    return found, session if session.l3_pending and session.conclusion is not None else None


def _write_one(found: Found, session: SessionState, engine: DiagnosisEngine) -> None:
    """Write the case unless long-term memory holds it. Raises ``_StoreDown`` when the store does not answer the
    first read."""
    once = engine.store_once
    try:
        view = _vehicle_view(once, session)
    except StoreError as e:
        raise _StoreDown() from e
    if view.held:
        # As the job does for a case it finds written: its milestones superseded (a write whose upsert took and whose
        # superseding failed left them valid).
        try:
            engine.found_held(once, session)
        except StoreError as e:
            raise _StoreDown() from e
        found.outcome = Outcome.ALREADY
        return
    # The write gates' merge, as the job would have written the case then, unless the record it would merge into
    # is no earlier case of its cause (``_VehicleView.merge_harms``), or the vehicle left the fleet's care since.
    write: WriteFinal = write_final
    if view.merge_harms or view.invalid_from is not None:
        write = functools.partial(write_alone, invalid_from=view.invalid_from)
    # (A text that says both waiting and written: the case is not in long-term memory, so it waits.)
    live = session.model_copy(update={"l3_written": False}) if session.l3_written else session
    # Without the engine's pause after a store that did not answer (``pause=False``): meant for the job's many
    # tries, it would turn the next cases away untried, unreported; this run stops at such a store instead.
    after = engine.retry_case(live, DedupState(), session.vin, write=write, pause=False, check_held=False).session
    if not isinstance(after, SessionState) or after.l3_pending:
        found.outcome = Outcome.NOT_WRITTEN
        return
    if not after.l3_written:
        found.outcome = Outcome.CHECK_FAILED
        return
    found.outcome = Outcome.WRITTEN
    if view.invalid_from is not None:
        found.invalid_from = f"{view.invalid_from:%Y-%m-%dT%H:%M:%SZ}"


@dataclass
class _VehicleView:
    held: bool  # a record holds the session's case (``holds_case``, the job's rule): its own, or one it was merged into
    # The record the write gates would merge the case into concluded in the same second (which of the two came
    # first, the file cannot tell; merged, the case could put its summary over a newer case's), or was verified
    # no earlier than the case concluded (merged, the verdict would be reset, as for a case written at its
    # conclusion: ``write_final``).
    merge_harms: bool
    invalid_from: datetime | None  # when its vehicle left the fleet's care after it concluded, if it did


def _vehicle_view(store: MemoryStore, session: SessionState) -> _VehicleView:
    """What long-term memory holds of the session's vehicle, as it bears on writing the case.

    The vehicle left the fleet's care after the case concluded when its other cases were set invalid since (a
    lifecycle event, or ``memory forget``, which the case, written late, missed): the first such time. With no
    other case of the vehicle, that cannot be told.
    """
    concluded = session.last_event_at
    # (Final records: a milestone is set invalid by its session's final record too.)
    finals = [r for r in store.history(session.vin) if r.kind is RecordKind.FINAL]
    held = any(holds_case(r, session) for r in finals)
    merge_harms = False
    if not held and session.conclusion is not None:
        # The record the gates would take, as the store finds it (its own comparison of causes and times): the
        # newest of its cause concluded within the window up to the case (``write_final``, for a case older than
        # the newest of its cause).
        target = store.find_duplicate(
            session.vin, session.conclusion.root_cause, concluded - DEDUP_WINDOW, until=concluded
        )
        merge_harms = target is not None and (
            target.concluded_at >= concluded or (target.verified_ts is not None and target.verified_ts >= concluded)
        )
    times = [r.invalid_ts for r in finals if not r.valid and r.invalid_ts is not None and r.invalid_ts >= concluded]
    return _VehicleView(held, merge_harms, min(times) if times else None)
