"""L2 session memory: the open diagnosis session of one vehicle.

The session lives in Flink keyed state as a JSON snapshot of ``SessionState``;
the operator loads it, hands it to the domain logic and stores it back. All
fields are bounded so that a vehicle that alerts for weeks cannot grow its
state without limit.

Expiry is judged on the events' own timestamps (48 h without an alert), so a
replay of weeks of alerts behaves like the live stream; Flink's state TTL,
which runs on processing time, only bounds the state's size on top of that.
"""

from __future__ import annotations

import json
import re
from datetime import datetime

from pydantic import BaseModel, Field, ValidationError

from vdoctor.limits import SESSION_TTL
from vdoctor.lines import ReadingSpan, SummaryLine, summary_time
from vdoctor.memory.working import WorkingState
from vdoctor.records import MAX_ALERT_TEXT_CHARS, MemoryUse, Phase, Priority

# Bounds on the per-session lists kept in state.
MAX_READINGS = 256
# Signals whose key readings (first, lowest, highest, latest) a session tracks
# for its case summary, whatever MAX_READINGS let go of; the first this many
# names seen (an alert carries at most 64). Further names are counted.
MAX_SIGNAL_SPANS = 256
MAX_TIMELINE = 64
# Event ids remembered per vehicle, newest kept: a replay of a vehicle's last
# 2048 events is caught whatever their timestamps. The dedup state's TTL in
# Flink (operators/diagnosis.py) forgets vehicles that went quiet.
MAX_DEDUP_IDS = 2048


class UnreadableState(ValueError):
    """A vehicle's stored state (``what``: "session" or "dedup ids") that this release cannot read: its text
    (``text``) is not the JSON of its model (``error`` says where). Kept whole, it failed every later event of the
    vehicle (the session) or the job (the dedup ids); the engine sets it aside instead (``DiagnosisEngine.on_event``).
    """

    def __init__(self, what: str, text: str, error: ValidationError) -> None:
        super().__init__(f"the stored {what} cannot be read: {error}")
        self.what, self.text, self.error = what, text, error


class Reading(BaseModel):
    """A signal reading with its unit-bearing name, time and evidence URI."""

    name: str
    value: float
    ts: datetime
    uri: str


class SignalSpan(BaseModel):
    """A signal's first, lowest, highest and latest reading in the session (the key readings).

    First and latest by the readings' event times, not by when they arrived: a reading delivered late (a
    vehicle that stored its data while out of coverage, a second gateway) was taken as the latest, and the
    summary gave a trend that went the wrong way (120 -> 150 for readings of 120, 250, then a late 150 between
    them). ``first_at``, ``latest_at``: their times (epoch seconds); None in a state written before they were
    kept, where the order of arrival stands in for them.
    """

    first: float
    latest: float
    lowest: float
    highest: float
    first_at: int | None = None
    latest_at: int | None = None

    @classmethod
    def of(cls, value: float, at: int) -> SignalSpan:
        return cls(first=value, latest=value, lowest=value, highest=value, first_at=at, latest_at=at)

    def add(self, value: float, at: int | None = None) -> None:
        # Written to the fields' dict, as pydantic's own validation leaves them (no assignment to validate): its
        # __setattr__ cost ~0.5 us a field, and an alert may carry 256 readings.
        fields = self.__dict__
        if at is None or self.latest_at is None or at >= self.latest_at:
            fields["latest"], fields["latest_at"] = value, at
        if at is not None and self.first_at is not None and at < self.first_at:
            fields["first"], fields["first_at"] = value, at
        if value < self.lowest:
            fields["lowest"] = value
        elif value > self.highest:
            fields["highest"] = value

    def span(self, name: str) -> ReadingSpan:
        return ReadingSpan.of(name, [self.first, self.lowest, self.highest, self.latest])


class TimelineEntry(BaseModel):
    """One line of the case: ``time | event | conclusion | evidence URI``."""

    ts: datetime
    event: str
    conclusion: str
    evidence: str

    def line(self) -> SummaryLine:
        return SummaryLine(summary_time(self.ts), self.event, self.conclusion, self.evidence)


class Conclusion(BaseModel):
    root_cause: str
    fix_action: str
    priority: Priority
    confidence: float
    evidence: list[str]
    codes: list[str]


class SessionState(BaseModel):
    """Everything the job keeps about one vehicle's open diagnosis session."""

    vin: str
    series: str
    session_id: str
    phase: Phase = Phase.INVESTIGATING
    opened_at: datetime
    last_event_at: datetime
    # The symptom as reported: the opening alert's text, bounded (``opening_text``). The
    # session's long-term records are found by it (``retrieval.text``).
    alert_text: str = ""
    alerts: int = 0
    # Mutable defaults by factory: a literal [], {} or model is deep-copied on every validation.
    codes: dict[str, int] = Field(default_factory=dict)
    readings: list[Reading] = Field(default_factory=list)
    timeline: list[TimelineEntry] = Field(default_factory=list)
    working: WorkingState = Field(default_factory=WorkingState)
    memory_text: str = ""
    memory: MemoryUse = Field(default_factory=MemoryUse)
    conclusion: Conclusion | None = None
    l3_written: bool = False
    # The concluded case's write failed for a reason outside it (the store, the embedder or the summary
    # model down): the vehicle's next alert tries it again before it opens its own session.
    l3_pending: bool = False
    milestones_written: int = 0
    # Key readings per signal, in order of first appearance (see SignalSpan).
    signals: dict[str, SignalSpan] = Field(default_factory=dict)
    signals_untracked: int = 0
    # What the session knows before it concludes: the latest answer's priority
    # and its leading hypothesis (a root cause it names, or the codes it
    # suspects) with its confidence; none until an answer gives one.
    priority: Priority | None = None
    hypothesis: str | None = None
    suspected: list[str] = Field(default_factory=list)
    hypothesis_confidence: float | None = None
    # The event time of the vehicle's last lifecycle event (it left the fleet's care: scrapped, transferred),
    # carried from session to session while the vehicle's state lasts. An alert from before it, delivered
    # after it (a vehicle that buffered its alerts offline), is not diagnosed: its case was of the care that
    # ended, and written now it would be valid, recalled by the next owner's sessions. The last field, so
    # ``StoredSession`` reads it from the end of the text without a parse.
    left_care_at: datetime | None = None

    def accepts_alert_at(self, now: datetime) -> bool:
        if _far_before(self.opened_at, now):
            return self.phase is Phase.INVESTIGATING and self.alerts > 1
        return _accepts_alert_at(self.phase, self.last_event_at, now)

    def add_reading(self, reading: Reading, at: int | None = None) -> None:
        """Keep ``reading``; ``at``: its time in epoch seconds, when the caller has it (an alert's share one)."""
        self.readings.append(reading)
        del self.readings[:-MAX_READINGS]
        span = self.signals.get(reading.name)
        if at is None:
            at = int(reading.ts.timestamp())
        if span is not None:
            span.add(reading.value, at)
        elif len(self.signals) < MAX_SIGNAL_SPANS:
            self.signals[reading.name] = SignalSpan.of(reading.value, at)
        else:
            self.signals_untracked += 1

    def spans(self) -> list[ReadingSpan]:
        """Every tracked signal's key readings, in order of first appearance."""
        return [s.span(name) for name, s in self.signals.items()]

    def add_timeline(self, entry: TimelineEntry) -> None:
        self.timeline.append(entry)
        if len(self.timeline) > MAX_TIMELINE:
            # Keep the opening entry: it names how the case started.
            self.timeline = self.timeline[:1] + self.timeline[-(MAX_TIMELINE - 1) :]

    def note_answer(
        self, priority: Priority | None, root_cause: str | None, codes: list[str], confidence: float
    ) -> None:
        """What the session now knows from an answer: its priority and leading hypothesis (or none).

        The hypothesis is the answer's root cause, or the codes it suspects when
        it names a priority for them; an answer with neither has none.
        """
        self.priority = priority
        self.hypothesis = root_cause or None
        self.suspected = list(codes) if priority and not root_cause else []
        self.hypothesis_confidence = confidence if self.hypothesis or self.suspected else None

    def readings_of(self, name: str) -> list[Reading]:
        return [r for r in self.readings if r.name == name]

    def conclude(self, conclusion: Conclusion) -> None:
        if self.phase is not Phase.INVESTIGATING:
            raise ValueError(f"cannot conclude a session in phase {self.phase}; allowed: INVESTIGATING")
        self.phase = Phase.CONCLUDED
        self.conclusion = conclusion


def _accepts_alert_at(phase: Phase, last_event_at: datetime, now: datetime) -> bool:
    """Whether an alert at ``now`` continues a session in ``phase`` whose last event was at ``last_event_at``:
    one open, at most ``SESSION_TTL`` after its last event. An alert from longer than that before the session
    opened (``_far_before``) is decided by the session's alerts (``SessionState.accepts_alert_at``)."""
    return phase is Phase.INVESTIGATING and not now - last_event_at > SESSION_TTL


def _far_before(opened_at: datetime, now: datetime) -> bool:
    """Whether an alert at ``now`` is more than ``SESSION_TTL`` before a session opened at ``opened_at``.

    Such an alert joins a session of two alerts or more: it is the stray one (a clock reset to 2000, an alert
    buffered for days), and the session open holds. A session of one alert gives way to it: that alert may
    be the stray one (a clock that jumped years ahead once: every later alert, dated right, joined its
    session, and the case was written dated years ahead), or the live alert of a vehicle that then sends what
    it buffered days ago, which had come in order as a session of its own. Either way the session ended
    holds one alert's work.
    """
    return opened_at - now > SESSION_TTL


class _SessionHead(BaseModel):
    """The fields of a stored session that decide whether an alert continues it (the rest is not read)."""

    phase: Phase = Phase.INVESTIGATING
    opened_at: datetime
    last_event_at: datetime


# A JSON string, escapes included.
_JSON_STR = r'"[^"\\]*(?:\\.[^"\\]*)*"'
# The start of the JSON that ``SessionState.model_dump_json`` writes: its first fields in their order, to the last
# event time, with the times as it writes a UTC time to the second (every event time the job keeps). Read so, a
# stored session's phase and times cost a tenth of a parse of its head by ``_SessionHead``, which reads any other
# text.
_UTC_SECOND = r'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"'
_HEAD_RE = re.compile(
    rf'\{{"vin":{_JSON_STR},"series":{_JSON_STR},"session_id":{_JSON_STR},"phase":"({"|".join(Phase)})",'
    rf'"opened_at":{_UTC_SECOND},"last_event_at":{_UTC_SECOND}'
)


# The end of the JSON ``SessionState.model_dump_json`` writes: its last field, ``left_care_at``.
_LEFT_CARE_NONE = ',"left_care_at":null}'
_LEFT_CARE_RE = re.compile(rf',"left_care_at":{_UTC_SECOND}\}}$')
_SESSION_ID_RE = re.compile(rf'\{{"vin":{_JSON_STR},"series":{_JSON_STR},"session_id":({_JSON_STR})')


def _stored_head(text: str) -> tuple[Phase, datetime, datetime]:
    """A stored session's phase, opening and last event time, as ``SessionState.model_validate_json`` reads them."""
    found = _HEAD_RE.match(text)
    if found is not None:
        try:
            return Phase(found[1]), datetime.fromisoformat(found[2]), datetime.fromisoformat(found[3])
        except ValueError:  # no such date: the parse below says so as a full read would
            pass
    head = _SessionHead.model_validate_json(text)
    return head.phase, head.opened_at, head.last_event_at


class StoredSession:
    """A session as the job's keyed state holds it, ``SessionState``'s JSON, parsed only when an alert continues it.

    Most events that find a stored session do not continue it: a recheck or a
    duplicate hands it back as it is, a lifecycle event ends it, and an alert
    after it concluded or expired opens a new session, reading only its phase
    and last event time. The engine reads the session (``load``) only for an
    alert it accepts; a session handed back unread is stored again as the same
    text (``model_dump_json``), not parsed and written again.
    """

    __slots__ = ("json", "_head")

    def __init__(self, json: str) -> None:
        self.json = json
        self._head: tuple[Phase, datetime, datetime] | None = None

    def accepts_alert_at(self, now: datetime) -> bool:
        """``SessionState.accepts_alert_at`` of the stored session, read from its phase and times (and, for an
        alert from long before the session opened, which is rare, from the whole session)."""
        if self._head is None:
            try:
                self._head = _stored_head(self.json)
            except ValidationError as e:
                raise UnreadableState("session", self.json, e) from e
        phase, opened_at, last_event_at = self._head
        if _far_before(opened_at, now):
            return self.load().accepts_alert_at(now)
        return _accepts_alert_at(phase, last_event_at, now)

    def load(self) -> SessionState:
        try:
            return SessionState.model_validate_json(self.json)
        except ValidationError as e:
            raise UnreadableState("session", self.json, e) from e

    @property
    def l3_pending(self) -> bool:
        """``SessionState.l3_pending`` of the stored session, read from its JSON without a parse: the key with
        its quotes unescaped is nowhere else in the text (a quote inside a JSON string is escaped)."""
        return '"l3_pending":true' in self.json

    @property
    def left_care_at(self) -> datetime | None:
        """``SessionState.left_care_at`` of the stored session, read from the end of its JSON (its last field)."""
        text = self.json
        if text.endswith(_LEFT_CARE_NONE):
            return None
        found = _LEFT_CARE_RE.search(text, len(text) - 64)
        if found is not None:
            try:
                return datetime.fromisoformat(found[1])
            except ValueError:  # no such date: the parse says what is wrong (``UnreadableState``)
                return self.load().left_care_at
        if '"left_care_at":' not in text:  # a session stored by a release before the field (unescaped: a key)
            return None
        return self.load().left_care_at

    @property
    def session_id(self) -> str:
        """The stored session's id, read from the start of its JSON (``SessionState`` writes it third)."""
        found = _SESSION_ID_RE.match(self.json)
        if found is not None:
            try:
                session_id: str = json.loads(found[1])
                return session_id
            except ValueError:  # an escape JSON has not: the parse says what is wrong (``UnreadableState``)
                pass
        return self.load().session_id

    def model_dump_json(self) -> str:
        """The stored text: what the session's state holds (the session was not read, so it did not change)."""
        return self.json


def opening_text(alert_text: str) -> str:
    """What a session keeps of its opening alert's text: at most ``MAX_ALERT_TEXT_CHARS`` characters."""
    return alert_text[:MAX_ALERT_TEXT_CHARS]


# A dedup entry's value: the event's time in epoch seconds, shifted left by ``MARK_BITS``, with the event's
# content mark (``vdoctor.events.content_mark``) in the bits it leaves; an entry written before the marks is the
# plain seconds, below ``MARKED_FROM`` (any marked value of a time the contract accepts, 2000 to 2200, is above it).
MARK_BITS = 16
MARKED_FROM = 1 << 34


def seen_value(ts: datetime, mark: int | None) -> int:
    """A dedup entry's value for an event of time ``ts`` and content mark ``mark`` (None: no mark)."""
    second = int(ts.timestamp())
    return second if mark is None else (second << MARK_BITS) | (mark & ((1 << MARK_BITS) - 1))


def split_seen(value: int) -> tuple[int, int | None]:
    """A dedup entry's value as (event time in epoch seconds, content mark or None for an entry without one)."""
    if value < MARKED_FROM:
        return value, None
    return value >> MARK_BITS, value & ((1 << MARK_BITS) - 1)


class DedupState(BaseModel):
    """Event ids already processed for one vehicle, with their event time and content mark (``seen_value``)."""

    seen: dict[str, int] = Field(default_factory=dict)

    def check_and_add(self, event_id: str, ts: datetime, mark: int | None = None) -> bool:
        """True if the id is new (and records it); False for a replayed duplicate."""
        if event_id in self.seen:
            return False
        self.seen[event_id] = seen_value(ts, mark)
        if len(self.seen) > MAX_DEDUP_IDS:
            # dicts keep insertion order: drop the oldest-seen id.
            del self.seen[next(iter(self.seen))]
        return True

    def seen_at(self, event_id: str) -> int | None:
        """The value (``split_seen``) the id was first processed with, or None if it is not held."""
        return self.seen.get(event_id)

    def discard(self, event_id: str) -> None:
        """Forget the id (if held), so that the event counts as new when it comes again.

        For an event that was not processed (a dead letter): it may be sent again. An older id that
        its ``check_and_add`` pushed out of a full list stays out (the list then holds one id fewer).
        """
        self.seen.pop(event_id, None)


# What pydantic's JSON writes escaped in a string (quote, backslash, control characters), or cannot write
# (a lone surrogate). ``StoredDedup`` handles in the text only ids with none of these.
_ESCAPED_RE = re.compile(r'[\x00-\x1f"\\\ud800-\udfff]')
_DEDUP_HEAD = '{"seen":{'  # ``DedupState.model_dump_json``'s text up to its first id


class StoredDedup:
    """A vehicle's dedup ids as the job's keyed state holds them, ``DedupState``'s JSON, parsed only if needed.

    A busy vehicle's state holds ``MAX_DEDUP_IDS`` ids (~90 KB of JSON); parsing
    and writing it again on every event cost far more than the event's check.
    ``check_and_add`` answers as ``DedupState.check_and_add`` on the parsed state
    and ``model_dump_json`` gives the text the state's would, by editing the
    text: pydantic writes ``{"seen":{"<id>":<secs>,...}}`` compactly, in the
    dict's (insertion) order, so an id is seen iff ``"<id>":`` occurs after
    the dict's ``{``; an add appends an entry before the closing braces and an
    eviction cuts the first entry. That holds while no string needs escaping:
    without a backslash in the text a quote in it only delimits an id, so a
    match starts at an id's opening quote, unless it starts at a closing one,
    which ``:`` follows: hence no id starting with ``:``. Any other text or id
    is parsed into ``DedupState`` and handled by it from then on. (The shape
    checks look for escapes, not for other writers' JSON: the state holds only
    text that ``model_dump_json`` wrote.)
    """

    __slots__ = ("json", "_ids", "_parsed")

    def __init__(self, json: str) -> None:
        self.json = json
        self._ids: int | None = None  # ids in the text, once counted; -1: not text this class edits
        self._parsed: DedupState | None = None

    def _count(self) -> int:
        """The number of ids in the text, or -1 if the text is not of the plain shape the fast path edits."""
        if self._ids is None:
            text = self.json
            plain = text.startswith(_DEDUP_HEAD) and text.endswith("}}") and "\\" not in text
            # Every quote delimits a key: "seen" and one per id.
            self._ids = text.count('"') // 2 - 1 if plain else -1
        return self._ids

    def _edits_text(self, event_id: str) -> bool:
        """Whether ``event_id`` is answered by editing the stored text: not parsed yet, a plain text, an id with
        nothing JSON escapes and no leading ``:``."""
        return (
            self._parsed is None
            and not event_id.startswith(":")
            and not _ESCAPED_RE.search(event_id)
            and self._count() >= 0
        )

    def load(self) -> DedupState:
        if self._parsed is None:
            try:
                self._parsed = DedupState.model_validate_json(self.json)
            except ValidationError as e:
                raise UnreadableState("dedup ids", self.json, e) from e
        return self._parsed

    @property
    def seen(self) -> dict[str, int]:
        return self.load().seen

    def check_and_add(self, event_id: str, ts: datetime, mark: int | None = None) -> bool:
        """``DedupState.check_and_add`` on the stored ids."""
        if not self._edits_text(event_id):
            return self.load().check_and_add(event_id, ts, mark)
        ids = self._count()
        text = self.json
        key = f'"{event_id}":'
        if text.find(key, len(_DEDUP_HEAD)) != -1:
            return False
        if ids >= MAX_DEDUP_IDS:  # the add passes the bound: the oldest (first) entry goes
            end = text.find(",", text.index('"', len(_DEDUP_HEAD) + 1))  # its value is digits: the first comma
            kept = text[end + 1 : -2] if end != -1 else ""
        else:
            kept = text[len(_DEDUP_HEAD) : -2]
            self._ids = ids + 1
        self.json = f"{_DEDUP_HEAD}{kept}{',' if kept else ''}{key}{seen_value(ts, mark)}}}}}"
        return True

    def seen_at(self, event_id: str) -> int | None:
        """``DedupState.seen_at`` on the stored ids: the entry's value read from the text."""
        if not self._edits_text(event_id):
            return self.load().seen_at(event_id)
        text = self.json
        key = f'"{event_id}":'
        start = text.find(key, len(_DEDUP_HEAD))
        if start == -1:
            return None
        start += len(key)
        end = text.find(",", start)  # the entry's value is digits: the next comma, or the closing braces, ends it
        value = text[start : end if end != -1 else len(text) - 2]
        if not (value.isascii() and value.isdigit()):  # not what ``model_dump_json`` writes: the parse says
            return self.load().seen_at(event_id)
        return int(value)

    def discard(self, event_id: str) -> None:
        """``DedupState.discard`` on the stored ids: the id's entry is cut from the text."""
        if not self._edits_text(event_id):
            self.load().discard(event_id)
            return
        text = self.json
        key = f'"{event_id}":'
        start = text.find(key, len(_DEDUP_HEAD))
        if start == -1:
            return
        end = text.find(",", start + len(key))  # the entry's value is digits: the next comma ends it
        if end != -1:  # an entry before others: it goes with the comma after it
            self.json = text[:start] + text[end + 1 :]
        else:  # the last entry: it goes with the comma before it, if any
            self.json = text[: start - 1 if start > len(_DEDUP_HEAD) else start] + "}}"
        self._ids = self._count() - 1

    def model_dump_json(self) -> str:
        """``DedupState.model_dump_json`` of the ids: the stored text, as edited."""
        return self._parsed.model_dump_json() if self._parsed is not None else self.json
