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
long-term memory holds its record already (a later try or alert wrote it).
Other letters (events') are counted and left alone. Running it again writes
nothing twice.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import ValidationError

from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.errors import StoreError
from vdoctor.events import describe_validation_error
from vdoctor.memory.session import DedupState, SessionState
from vdoctor.records import DeadLetter, RecordKind
from vdoctor.stores.base import MemoryStore
from vdoctor.stores.retry import RetryingStore


class Outcome(StrEnum):
    WRITTEN = "written"
    ALREADY = "already in long-term memory"
    CHECK_FAILED = "not written: its summary failed the fidelity check (never written)"
    NOT_WRITTEN = "not written: long-term memory or a model failed (the log says which); run again"
    UNREADABLE = "unreadable session: mend its text in the letter and run again"
    CUT = "session cut at the dead letters' bound: its whole text is not in the letter"
    NO_CASE = "a session with no case waiting"


# The outcomes that leave a case unwritten that could still be: the command exits 1.
UNFINISHED = frozenset({Outcome.NOT_WRITTEN, Outcome.UNREADABLE, Outcome.CUT})


@dataclass
class Found:
    """One letter that holds a session: its line in the file, the vehicle and session (when readable), the outcome,
    and what is wrong with an unreadable one."""

    line: int
    vin: str
    session_id: str
    outcome: Outcome
    why: str = ""
    # The vehicle's records set invalid after this case concluded (a lifecycle event since): their time.
    left_care_after: str = ""


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
                | ({"left_care_after": f.left_care_after} if f.left_care_after else {})
                for f in self.sessions
            ],
            "counts": {outcome.name.lower(): n for outcome, n in self.counts.items()},
        }

    def render(self) -> str:
        lines = [f"{self.letters} dead letters read, {len(self.sessions)} with a vehicle's session"]
        if self.not_letters:
            lines.append(f"{self.not_letters} lines that are no dead letter (left alone)")
        for found in self.sessions:
            what = f"{found.vin} {found.session_id}".strip() or "(no session id)"
            lines.append(f"  line {found.line}: {what}: {found.outcome.value}")
            if found.why:
                lines.append(f"    {found.why}")
            if found.left_care_after:
                lines.append(
                    f"    {found.vin} has records set invalid from {found.left_care_after}, after this case: if it "
                    "left the fleet's care then, set this case invalid with them: vdoctor memory forget --vin "
                    f"{found.vin} --change scrapped|transferred --at {found.left_care_after}"
                )
        counts = self.counts
        lines.append(
            "written {}, already there {}, check failed {}, not written {}, unreadable {}, cut {}, no case {}".format(
                *(counts[o] for o in Outcome)
            )
        )
        return "\n".join(lines)


def _session_like(raw: str) -> bool:
    """Whether a letter's raw is a vehicle's session (``SessionState``'s JSON, or text that starts as it does),
    not an event."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return raw.startswith('{"vin":')
    return isinstance(data, dict) and {"vin", "session_id", "phase"} <= data.keys()


def _named(raw: str) -> tuple[str, str]:
    """The vehicle and session an unreadable session's text names, where it can be read as far as that."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return "", ""
    if not isinstance(data, dict):
        return "", ""
    vin, session_id = data.get("vin"), data.get("session_id")
    return (vin if isinstance(vin, str) else "", session_id if isinstance(session_id, str) else "")


def _letter(line: str) -> DeadLetter | None:
    try:
        return DeadLetter.model_validate_json(line)
    except ValidationError:
        return None


def write_waiting(
    lines: Iterable[str], engine: DiagnosisEngine, progress: Callable[[WaitingReport], None] | None = None
) -> WaitingReport:
    """Write the waiting case of every session in ``lines`` (a dead-letter file) that long-term memory does not hold
    yet, with ``engine``'s store, summarizer and embedder."""
    report = WaitingReport()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        letter = _letter(line)
        if letter is None:
            report.not_letters += 1
            continue
        report.letters += 1
        if letter.stage != "process" or not _session_like(letter.raw):
            continue
        report.sessions.append(_write_one(number, letter, engine))
        if progress is not None:
            progress(report)
    return report


def _write_one(number: int, letter: DeadLetter, engine: DiagnosisEngine) -> Found:
    try:
        session = SessionState.model_validate_json(letter.raw)
    except ValidationError as e:
        vin, session_id = _named(letter.raw)
        if letter.raw_truncated:
            why = f"{letter.raw_chars} characters, sha256 {letter.raw_sha256}"
            return Found(number, vin, session_id, Outcome.CUT, why)
        return Found(number, vin, session_id, Outcome.UNREADABLE, describe_validation_error(e))
    found = Found(number, session.vin, session.session_id, Outcome.NO_CASE)
    if not session.l3_pending:
        return found
    try:
        if _once(engine).get(session.vin, session.session_id) is not None:
            found.outcome = Outcome.ALREADY
            return found
    except StoreError as e:
        found.outcome, found.why = Outcome.NOT_WRITTEN, str(e)
        return found
    after = engine.retry_case(session, DedupState(), session.vin).session
    if not isinstance(after, SessionState) or after.l3_pending:
        found.outcome = Outcome.NOT_WRITTEN
        return found
    if not after.l3_written:
        found.outcome = Outcome.CHECK_FAILED
        return found
    found.outcome = Outcome.WRITTEN
    found.left_care_after = _left_care_after(engine, session)
    return found


def _once(engine: DiagnosisEngine) -> MemoryStore:
    """The engine's store, asked once (not through its retries, which wait out an outage for minutes), as a try
    of ``retry_case`` asks it."""
    store = engine.store
    return store.inner if isinstance(store, RetryingStore) else store


def _left_care_after(engine: DiagnosisEngine, session: SessionState) -> str:
    """The latest time from which the vehicle's other records were set invalid after this case concluded (a
    lifecycle event since, which the case, written now, missed), or ""."""
    concluded = session.last_event_at
    try:
        records = _once(engine).history(session.vin)
    except StoreError:
        return ""
    times = [
        r.invalid_ts
        for r in records
        # (Final records: a milestone is set invalid by its session's final record too.)
        if r.kind is RecordKind.FINAL and r.session_id != session.session_id and not r.valid
        and r.invalid_ts is not None and r.invalid_ts >= concluded
    ]  # fmt: skip
    return f"{min(times):%Y-%m-%dT%H:%M:%SZ}" if times else ""
