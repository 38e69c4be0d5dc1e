"""Typed text lines: what one part of the agent writes and another reads back.

Each format has one ``render`` and one ``parse`` here, and nowhere else:

- ``KeyFact``: a never-compressed fact of the working context
  (``code P0A7F: <definition>``, ``reading cell_voltage_diff_mv=187 @<ts>``,
  ``decision: ... @<ts>``, ``void: ... @<ts>``, ``excluded: ... @<ts>``,
  ``id WO-20931``, ``id X12``, ``id cell 37``, ``count 96 sense lines``,
  ``trend cell_voltage_diff_mv: 62 88 121 150 187``, ``evidence signal://...``);
- ``SummaryLine``: one event of a summary, ``time | event | conclusion | evidence URI``;
- ``ReadingSpan`` and ``ReadingsLine``: every signal's first, lowest, highest and
  latest reading with its unit, compactly (``readings: cell_voltage_diff_mv=87→187mV``);
- ``Confirmation``: the evidence a case was concluded on, as a summary states it
  (``confirmed cell_voltage_diff_mv=187>=100``, ``confirmed repeat 3``);
- ``RecallEntry``: one long-term record as injected into the system context;
- the current alert's JSON block and the ``codes seen`` line of the prompt.

The working memory, the summaries, the fidelity check, the milestone writer and
the offline model all go through these types, so a format can only change in one
place. The wire form of a ``KeyFact`` in session state is its rendered line.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import PlainSerializer, PlainValidator

from vdoctor.units import SIGNAL_NAME, unit_of, unit_symbols

# Time format of summary lines (case summaries, rolling folds, the timeline).
SUMMARY_TIME = "%Y-%m-%d %H:%M"
# Time format of evidence URIs, key facts and tool results.
ISO_TIME = "%Y-%m-%dT%H:%M:%SZ"
# A time at the end of a fact: no spaces (ISO or a test's token such as T1).
_AT_RE = re.compile(r"^\S+$")


def fmt_num(value: float) -> str:
    """A number as people write it: 187, not 187.0."""
    return str(int(value)) if float(value).is_integer() else str(value)


# The three formats below are written by isoformat, two to five times faster than
# strftime and the same from year 1000 on (the wall time, whatever the zone, to the
# second or minute); strftime (glibc) leaves an earlier year unpadded, so such a
# time goes through strftime.


def iso(ts: datetime) -> str:
    """The time as ``ISO_TIME`` writes it: ``2026-11-01T10:15:30Z``."""
    return _utc_iso(ts) if ts.tzinfo is UTC and type(ts) is datetime else _iso(ts)


def summary_time(ts: datetime) -> str:
    """The time as ``SUMMARY_TIME`` writes it: ``2026-11-01 10:15``."""
    return _utc_summary_time(ts) if ts.tzinfo is UTC and type(ts) is datetime else _summary_time(ts)


def _iso(ts: datetime) -> str:
    return ts.isoformat()[:19] + "Z" if ts.year >= 1000 else ts.strftime(ISO_TIME)


def _summary_time(ts: datetime) -> str:
    return ts.isoformat(" ", "minutes")[:16] if ts.year >= 1000 else ts.strftime(SUMMARY_TIME)


# An alert's time is written several times in its run (its key facts, its prompt block), and so is each
# reading's (tool results, the case summary's source): each text is made once. isoformat of an aware time
# costs about eight times a look-up by it. Only UTC times of the datetime class itself are looked up: an aware
# time equals, and hashes as, the same instant in another zone, whose wall time (the text) differs, and a
# subclass may write itself otherwise. Every event time is UTC (``events.py``).
_TIME_TEXTS_KEPT = 8192
_utc_iso = functools.lru_cache(maxsize=_TIME_TEXTS_KEPT)(_iso)
_utc_summary_time = functools.lru_cache(maxsize=_TIME_TEXTS_KEPT)(_summary_time)


def day(ts: datetime) -> str:
    """The date as ``%Y-%m-%d`` writes it: ``2026-11-01``."""
    return ts.date().isoformat() if ts.year >= 1000 else ts.strftime("%Y-%m-%d")


def short_time(when: str) -> str:
    """An ISO time (2026-11-01T10:15:30Z) in summary-line form (2026-11-01 10:15)."""
    return when[:16].replace("T", " ") if len(when) >= 16 else (when or "-")


# -- key facts -----------------------------------------------------------------------


class FactKind(StrEnum):
    CODE = "code"
    READING = "reading"
    DECISION = "decision"
    VOID = "void"
    EXCLUDED = "excluded"
    ID = "id"
    EVIDENCE = "evidence"
    COUNT = "count"
    TREND = "trend"


# The kinds under plain names too, for the paths that read one per fact: ``FactKind.CODE``
# is read through the enum metaclass's ``__getattr__`` hook (~60 ns a read; a name, ~5).
CODE_FACT = FactKind.CODE
READING_FACT = FactKind.READING
DECISION_FACT = FactKind.DECISION
VOID_FACT = FactKind.VOID
EXCLUDED_FACT = FactKind.EXCLUDED
ID_FACT = FactKind.ID
EVIDENCE_FACT = FactKind.EVIDENCE
COUNT_FACT = FactKind.COUNT

# Kinds rendered as ``kind: text @time``: a clause of the session's reasoning.
CLAUSE_KINDS = frozenset({FactKind.DECISION, FactKind.VOID, FactKind.EXCLUDED})
_READING_TEXT_RE = re.compile(rf"^(?:({SIGNAL_NAME})=)?(-?\d+(?:\.\d+)?)([^\s@]*)")


@dataclass(frozen=True, slots=True)
class KeyFact:
    """One never-compressed fact.

    ``text`` is what a summary must carry verbatim (the fact's payload): the
    code, the reading (``name=value`` or ``<value><unit>``), the clause, the id
    or the URI. ``note`` is a code's definition; ``at`` when the fact was seen.
    """

    kind: FactKind
    text: str
    note: str = ""
    at: str = ""

    @classmethod
    def code(cls, code: str, definition: str = "") -> KeyFact:
        return cls(CODE_FACT, code, definition.rstrip(": "))

    @classmethod
    def signal(cls, name: str, value: float | str, at: str = "") -> KeyFact:
        number = fmt_num(value) if isinstance(value, int | float) else value
        return cls(READING_FACT, f"{name}={number}", at=at)

    @property
    def payload(self) -> str:
        return self.text

    def render(self) -> str:
        at = f" @{self.at}" if self.at else ""
        if self.kind is CODE_FACT:
            return f"code {self.text}: {self.note}" if self.note else f"code {self.text}"
        if self.kind in CLAUSE_KINDS:
            return f"{self.kind.value}: {self.text}{at}"
        if self.kind is READING_FACT:
            return f"reading {self.text}{at}"
        return f"{self.kind.value} {self.text}"

    def __str__(self) -> str:
        return self.render()

    def reading(self) -> tuple[str, float] | None:
        """(group, value) of a reading: the signal name, or the unit of a reading from free text."""
        return _reading(self.text) if self.kind is READING_FACT else None

    def reading_text(self) -> tuple[str, str] | None:
        """(group, value as written) of a reading."""
        return _reading_text(self.text) if self.kind is READING_FACT else None

    @classmethod
    def trend(cls, group: str, values: list[str]) -> KeyFact:
        """A signal's (or a unit's) readings in time order: ``trend cell_voltage_diff_mv: 62 88 121``."""
        return cls(FactKind.TREND, f"{group}: {' '.join(values)}")

    @staticmethod
    def parse(line: str) -> KeyFact:
        """The fact a rendered line stands for (``ValueError`` for a line of no known kind)."""
        return _parse_fact(line)


# A reading's text is read on every event it stays a key fact (for its trend and for
# condensing): each text is parsed once.
@functools.lru_cache(maxsize=8192)
def _reading_text(text: str) -> tuple[str, str] | None:
    m = _READING_TEXT_RE.match(text)
    if m is None:
        return None
    return m.group(1) or m.group(3), m.group(2)


@functools.lru_cache(maxsize=8192)
def _reading(text: str) -> tuple[str, float] | None:
    found = _reading_text(text)
    return (found[0], float(found[1])) if found else None


_KINDS = {k.value: k for k in FactKind}


@functools.lru_cache(maxsize=65_536)
def _parse_fact(line: str) -> KeyFact:
    head, sep, rest = line.partition(" ")
    if head.endswith(":"):
        clause = _KINDS.get(head[:-1])
        if clause is None or clause not in CLAUSE_KINDS:
            raise ValueError(f"not a key fact: {line[:80]!r}")
        body, at = _split_at(rest)
        return KeyFact(clause, body, at=at)
    kind = _KINDS.get(head)
    if not sep or kind is None or kind in CLAUSE_KINDS:
        raise ValueError(f"not a key fact: {line[:80]!r}")
    if kind is FactKind.CODE:
        code, _, definition = rest.partition(": ")
        return KeyFact(kind, code, definition)
    if kind is FactKind.READING:
        body, at = _split_at(rest)
        return KeyFact(kind, body, at=at)
    return KeyFact(kind, rest)


def _split_at(rest: str) -> tuple[str, str]:
    body, sep, at = rest.rpartition(" @")
    if sep and _AT_RE.match(at):
        return body, at
    return rest, ""


def as_fact(value: Any) -> KeyFact:
    """A ``KeyFact`` from itself or its rendered line (session state stores lines)."""
    if isinstance(value, str):  # first: a restored state's facts are lines
        return _parse_fact(value)
    if isinstance(value, KeyFact):
        return value
    raise ValueError(f"expected a key fact line, got {type(value).__name__}")


# A key fact as a pydantic field: typed in Python, its rendered line in JSON state.
KeyFactField = Annotated[KeyFact, PlainValidator(as_fact), PlainSerializer(KeyFact.render, return_type=str)]


# -- summary lines -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SummaryLine:
    """One line of a summary: ``time | event | conclusion | evidence URI``."""

    ts: str
    event: str
    conclusion: str
    evidence: str = "-"

    def render(self) -> str:
        return f"{self.ts} | {self.event} | {self.conclusion} | {self.evidence or '-'}"

    @staticmethod
    def parse(line: str) -> SummaryLine | None:
        """The line's parts, or None for a line that is not a four-part summary line."""
        parts = line.split(" | ")
        if len(parts) < 4:
            return None
        return SummaryLine(parts[0], " | ".join(parts[1:-2]), parts[-2], parts[-1])


def alert_event(codes: list[str], signals: dict[str, float], max_signals: int | None = None) -> str:
    """The event part of an alert's summary line: ``alert P0A7F cell_voltage_diff_mv=187 ...``."""
    shown = list(signals.items())[:max_signals] if max_signals is not None else list(signals.items())
    return " ".join(["alert", *codes, *(f"{k}={fmt_num(v)}" for k, v in shown)])


def conclusion_text(concluded: bool, priority: str | None, confidence: float, with_confidence: bool = True) -> str:
    """The conclusion part of a summary line: ``concluded P1 conf 0.80`` or ``investigating conf 0.30``."""
    if concluded:
        return f"concluded {priority} conf {confidence:.2f}"
    return f"investigating conf {confidence:.2f}" if with_confidence else "investigating"


def milestone_conclusion(
    priority: str | None, hypothesis: str | None, suspected: list[str], confidence: float | None
) -> str:
    """The conclusion part of a milestone's line: what the open session knew, never a placeholder.

    ``not concluded; P2; leading: suspected P0A7F conf 0.30``, ``... leading: <a
    root cause the answer named> conf 0.40`` or ``not concluded; no priority yet; no hypothesis yet``.
    """
    prio = priority or NO_PRIORITY
    hypothesis = hypothesis or ("suspected " + " ".join(suspected) if suspected else None)
    if not hypothesis:
        return f"not concluded; {prio}; {NO_HYPOTHESIS}"
    conf = f" conf {confidence:.2f}" if confidence is not None else ""
    return f"not concluded; {prio}; leading: {hypothesis}{conf}"


NO_PRIORITY = "no priority yet"
NO_HYPOTHESIS = "no hypothesis yet"


# -- a signal's key readings, compactly -----------------------------------------------------

# A number as ``fmt_num`` writes it (exponents included: 1e-05).
NUM = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
TO_LATEST, LOWEST, HIGHEST = "→", "↓", "↑"
_UNIT_ALT = "|".join(re.escape(u) for u in unit_symbols())
# name=first[→latest][↓lowest][↑highest][unit], then no letter, digit or span mark.
_SPAN_RE = re.compile(
    rf"(?<![A-Za-z0-9_])({SIGNAL_NAME})=({NUM})(?:{TO_LATEST}({NUM}))?(?:{LOWEST}({NUM}))?(?:{HIGHEST}({NUM}))?"
    rf"({_UNIT_ALT})?(?![A-Za-z0-9_.{TO_LATEST}{LOWEST}{HIGHEST}])"
)


@dataclass(frozen=True, slots=True)
class ReadingSpan:
    """One signal's key readings: first, lowest, highest and latest, verbatim, with the unit.

    ``cell_voltage_diff_mv=87→187mV``: first 87, latest 187, and those are the
    extremes. ``soc_pct=80→78↓76↑81%``: first 80, latest 78, lowest 76,
    highest 81. ``pack_temp_c=41.5°C``: one value. ``rain_raw=3→5``: a name
    whose suffix is no known unit shows none. A part left out is what it
    defaults to: latest = first, lowest = min(first, latest), highest =
    max(first, latest); so every one of the four readings is stated, verbatim.
    """

    name: str
    first: str
    latest: str
    lowest: str
    highest: str
    unit: str = ""

    @classmethod
    def of(cls, name: str, values: list[float]) -> ReadingSpan:
        """The span of a signal's readings in time order."""
        if not values:
            raise ValueError(f"a reading span needs at least one reading of {name}")
        return cls(
            name,
            fmt_num(values[0]),
            fmt_num(values[-1]),
            fmt_num(min(values)),
            fmt_num(max(values)),
            unit_of(name) or "",
        )

    def values(self) -> list[str]:
        """The distinct readings the span states (first, lowest, highest, latest), in that order."""
        out = [self.first]
        for value in (self.lowest, self.highest, self.latest):
            if value not in out:
                out.append(value)
        return out

    @property
    def bare(self) -> bool:
        """Whether the span renders as ``name=value``: one reading, no unit."""
        return self.latest == self.first == self.lowest == self.highest and not self.unit

    def render(self) -> str:
        lo, hi = _ends(self.first, self.latest)
        out = f"{self.name}={self.first}"
        if self.latest != self.first:
            out += TO_LATEST + self.latest
        if self.lowest != lo:
            out += LOWEST + self.lowest
        if self.highest != hi:
            out += HIGHEST + self.highest
        return out + self.unit

    def __str__(self) -> str:
        return self.render()

    @staticmethod
    def find_all(text: str) -> list[ReadingSpan]:
        """Every ``name=value...`` span written in ``text`` (a bare ``name=value`` is a one-value span)."""
        return list(_find_spans(text))


# A case's spans are read back from their rendered text three times (its
# decision's spans and its request's readings by the fidelity check, the
# readings line by the summarizer): each text is parsed once. The spans are
# frozen; each caller gets a list of its own.
@functools.lru_cache(maxsize=4096)
def _find_spans(text: str) -> tuple[ReadingSpan, ...]:
    out = []
    for m in _SPAN_RE.finditer(text):
        name, first, latest, low, high, unit = m.groups()
        latest = latest or first
        lo, hi = _ends(first, latest)
        out.append(ReadingSpan(name, first, latest, low or lo, high or hi, unit or ""))
    return tuple(out)


def _ends(first: str, latest: str) -> tuple[str, str]:
    """``sorted((first, latest), key=float)`` without the sort's call: the lower reading, then the higher
    (the first when they are equal)."""
    return (latest, first) if float(latest) < float(first) else (first, latest)


READINGS_PREFIX = "readings: "


@dataclass(frozen=True, slots=True)
class ReadingsLine:
    """The line of a case summary that states every signal's key readings: ``readings: <span> <span> ...``."""

    spans: tuple[ReadingSpan, ...]

    def render(self) -> str:
        return READINGS_PREFIX + " ".join(s.render() for s in self.spans)

    @staticmethod
    def parse(line: str) -> ReadingsLine | None:
        """The spans of a readings line, or None for a line that is not one."""
        if not line.startswith(READINGS_PREFIX):
            return None
        return ReadingsLine(tuple(ReadingSpan.find_all(line[len(READINGS_PREFIX) :])))


# -- the evidence a conclusion rests on ----------------------------------------------------

_CONFIRM_SIGNAL_RE = re.compile(rf"confirmed ({SIGNAL_NAME})=(-?[\d.]+)(>=|<=)(-?[\d.]+)")
_CONFIRM_REPEAT_RE = re.compile(r"confirmed repeat (\d+)")


@dataclass(frozen=True, slots=True)
class Confirmation:
    """``confirmed <signal>=<value><op><threshold>`` or ``confirmed repeat <n>``."""

    signal: str | None = None
    value: str = ""
    op: Literal[">=", "<="] = ">="
    threshold: str = ""
    repeat: int = 0

    def render(self) -> str:
        if self.signal:
            return f"confirmed {self.signal}={self.value}{self.op}{self.threshold}"
        return f"confirmed repeat {self.repeat}"

    @property
    def numbers(self) -> list[str]:
        """The key number the phrase carries (the confirming reading), as a summary must keep it."""
        return [f"{self.signal}={self.value}"] if self.signal else []

    @staticmethod
    def find(text: str) -> Confirmation | None:
        """The first confirmation stated in ``text`` (a summary), if any."""
        sig = _CONFIRM_SIGNAL_RE.search(text)
        if sig:
            op: Literal[">=", "<="] = ">=" if sig.group(3) == ">=" else "<="
            return Confirmation(signal=sig.group(1), value=sig.group(2), op=op, threshold=sig.group(4))
        rep = _CONFIRM_REPEAT_RE.search(text)
        if rep:
            return Confirmation(repeat=int(rep.group(1)))
        return None


# -- long-term memory as injected --------------------------------------------------------

MEMORY_HEADER = "## Long-term memory (this vehicle's history first, then verified similar cases)"
_RECHECK_WORDS: dict[bool | None, str] = {True: "ok", False: "failed", None: "pending"}
# A milestone is a long session's progress, never a conclusion: its head says so.
MILESTONE_STATE = "milestone (not concluded)"
_RECALL_HEAD_RE = re.compile(
    r"^- \[(own|similar)\] case://([^/\s]+)/(\S+) \| (concluded|milestone \(not concluded\)) (\S+) "
    r"\| codes ([A-Z0-9,-]*) \| (P[123]|no priority yet) \| recheck (\w+)$"
)


@dataclass(frozen=True, slots=True)
class RecallEntry:
    """One long-term record as the model sees it in its system context.

    A final record shows its conclusion (``cause:``, ``fix:``); a milestone of a
    long open session says ``milestone (not concluded)``, has no cause or fix
    lines, and its priority may be ``no priority yet``.
    """

    kind: Literal["own", "similar"]
    vin: str
    session_id: str
    concluded: str  # YYYY-MM-DD: when it concluded, or when the milestone was written
    codes: tuple[str, ...]
    priority: str | None
    recheck_ok: bool | None
    cause: str
    fix: str
    summary: str  # summary lines joined with " / "
    milestone: bool = False

    @property
    def case_uri(self) -> str:
        return f"case://{self.vin}/{self.session_id}"

    def render(self) -> str:
        state = MILESTONE_STATE if self.milestone else "concluded"
        head = (
            f"- [{self.kind}] {self.case_uri} | {state} {self.concluded} | codes {','.join(self.codes)} | "
            f"{self.priority or NO_PRIORITY} | recheck {_RECHECK_WORDS[self.recheck_ok]}\n"
        )
        if self.milestone:
            return head + f"  summary: {self.summary}"
        return head + f"  cause: {self.cause}\n  fix: {self.fix}\n  summary: {self.summary}"

    @staticmethod
    def parse_block(text: str) -> list[RecallEntry]:
        """Every entry of a rendered memory block (or of a whole system prompt), in order."""
        entries: list[RecallEntry] = []
        lines = text.splitlines()
        words = {v: k for k, v in _RECHECK_WORDS.items()}
        for i, line in enumerate(lines):
            head = _RECALL_HEAD_RE.match(line)
            if not head or head.group(8) not in words:
                continue
            milestone = head.group(4) != "concluded"
            body: dict[str, str] = {}
            for follow in lines[i + 1 : i + (2 if milestone else 4)]:
                key, _, value = follow.strip().partition(": ")
                body[key] = value
            kind: Literal["own", "similar"] = "own" if head.group(1) == "own" else "similar"
            priority = head.group(7)
            entries.append(
                RecallEntry(
                    kind=kind,
                    vin=head.group(2),
                    session_id=head.group(3),
                    concluded=head.group(5),
                    codes=tuple(filter(None, head.group(6).split(","))),
                    priority=None if priority == NO_PRIORITY else priority,
                    recheck_ok=words[head.group(8)],
                    cause=body.get("cause", ""),
                    fix=body.get("fix", ""),
                    summary=body.get("summary", ""),
                    milestone=milestone,
                )
            )
        return entries


# -- the current alert in the prompt -------------------------------------------------------

ALERT_FENCE = "```json alert\n"
CODES_SEEN_PREFIX = "codes seen: "
# ``json.dumps(body, ensure_ascii=False)`` without building an encoder per call.
_ALERT_JSON = json.JSONEncoder(ensure_ascii=False).encode


def render_alert_block(body: dict[str, Any]) -> str:
    return ALERT_FENCE + _ALERT_JSON(body) + "\n```"


def parse_alert_block(text: str) -> dict[str, Any]:
    """The last alert block's JSON in ``text``; empty when there is none or it is unreadable."""
    start = text.rfind(ALERT_FENCE)
    if start < 0:
        return {}
    body = text[start + len(ALERT_FENCE) :]
    try:
        data = json.loads(body[: body.find("```")])
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def render_codes_seen(codes: dict[str, int]) -> str:
    return CODES_SEEN_PREFIX + ", ".join(f"{c} x{n}" for c, n in codes.items())


def parse_codes_seen(text: str) -> dict[str, int]:
    """Codes and how often the session has seen them, from the prompt's ``codes seen`` line(s)."""
    seen: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith(CODES_SEEN_PREFIX):
            for part in line[len(CODES_SEEN_PREFIX) :].split(","):
                code, _, count = part.strip().partition(" x")
                if code and count.isdigit():
                    seen[code] = int(count)
    return seen
