"""Summary fidelity: nothing key lost, nothing invented, nothing contradicted, and real compression.

Run on every summary before it is kept (DESIGN.md §4): every required fact of
the source (codes, key numbers, exclusions, URIs) appears verbatim; every
number, code, URI and time in the summary appears in the source (the numbers a
source's times and URIs are made of count only as those whole times and URIs),
every reading (a number with a unit) is a reading of the source with that
unit; and a long source is compressed at least ``MIN_COMPRESSION``:1. A case summary is also checked
against its session's reading spans and decision records (``meaning.py``):
every reading kept or declared omitted, times of the source only, and the
conclusion, voided conclusions, exclusions, cause and fix as the session
decided them. ``check_request`` runs whichever applies to a request.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass, field

from vdoctor.events import canonical_codes
from vdoctor.lines import _SPAN_RE
from vdoctor.memory.dates import without_source_dates
from vdoctor.memory.facts import CODE_RE, split_uris
from vdoctor.memory.meaning import check_case
from vdoctor.memory.request import SummaryRequest
from vdoctor.units import UNITS, unit_of, unit_symbols

# Sources shorter than this are not worth compressing 5:1 (DESIGN.md §4).
COMPRESSION_MIN_SOURCE_CHARS = 1500
MIN_COMPRESSION = 5.0

# re.ASCII: CJK characters count as \w in Python, and without it the 187 of
# 压差187mV (or the code of 报P0A7F) would never be checked at all. The number
# is (?<![\w.])-?\d+(?:\.\d+)?, written to start with its first character (see
# facts.CODE_RE): - or a digit, what must not precede it, the rest.
_NUMBER = r"[-\d](?<![\w.][-\d])(?:(?<=-)\d+|(?<=\d)\d*)(?:\.\d+)?"
_NUMBER_RE = re.compile(_NUMBER, re.ASCII)

# A time: a date (2026-11-01, 2026/11/01) with or without its clock (" " or "T", seconds, a fraction, Z
# or an offset), or a clock alone (08:15, 08:15:30). A summary's time is checked whole against the
# source's times, and the numbers a time of the source is made of (the 15 and 30 of 08:15:30) are none
# a summary may state: "pack 15℃" is no reading of the source. Every match starts at a digit that no
# [\w.] (a clock alone: nor ":") precedes, so none starts inside another: the time around a place of the
# source is found by a scan from ``_TIME_REACH`` characters before it (no time is that long).
_TIME_RE = re.compile(
    r"\d(?<![\w.]\d)(?:\d{3}(?P<sep>[-/])\d{1,2}(?P=sep)\d{1,2}"
    r"(?P<clock>[ T]\d{1,2}:\d{2}(?::(?P<sec>\d{2}(?:\.\d{1,9})?))?(?:Z|[+-]\d{2}:?\d{2})?)?(?!\w)"
    r"|(?<!:\d)\d?:\d{2}(?::(?P<bare_sec>\d{2}(?:\.\d{1,9})?))?Z?(?![\w:]))",
    re.ASCII,
)
_TIME_REACH = 48
# Every unit the project reads (``vdoctor.units``), also as people type some of them: ℃, ℉, Ω as the
# ohm sign, µ as the Greek mu. ``_unit`` folds them (NFKC), so 41.5℃ is the 41.5°C of pack_temp_c=41.5.
_UNITS = frozenset(
    {
        *unit_symbols(),
        *(unicodedata.normalize("NFKC", u) for u in unit_symbols()),
        *(u.replace("\u03a9", "\u2126") for u in unit_symbols()),
        "\u2103",
        "\u2109",
    }
)
# A word of unit characters right after a number, then looked up in ``_UNITS`` (a word that is no unit,
# the cells of "3 cells", makes no reading): one character class is a tenth of the time of trying every
# unit in turn after every number.
_UNIT_WORD = r"([A-Za-z%°\u2103\u2109\u03a9\u2126\u00b5\u03bc][A-Za-z0-9/·²°\u03a9\u2126]*)(?!_)"
# A reading in text: a number and its unit (30 mV, 压差187mV, 41.5 °C).
_READING_RE = re.compile(rf"({_NUMBER})[ \u00a0]?{_UNIT_WORD}", re.ASCII)
_UNIT_AFTER_RE = re.compile(rf"[ \u00a0]?{_UNIT_WORD}", re.ASCII)
# What may stand between a span's "=" and one of its numbers (cell_voltage_diff_mv=87→187mV).
_SPAN_CHARS = frozenset("0123456789.-+e→↓↑")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
# The unit of the digits a signal's name starts with (the 12 V of 12v_battery_v, a unit suffix of
# ``vdoctor.units`` then "_"): a summary's "12 V battery" is the source's when its names have it.
_NAME_UNIT = r"([a-z]+)_[a-z0-9]"
_NAME_UNIT_RE = re.compile(_NAME_UNIT, re.ASCII)
_NAME_READING_RE = re.compile(f"({_NUMBER}){_NAME_UNIT}", re.ASCII)


@dataclass
class FidelityReport:
    missing: list[str] = field(default_factory=list)
    invented: list[str] = field(default_factory=list)
    ratio: float = 0.0
    ratio_ok: bool = True
    too_long: bool = False
    # Stated, but not as the session has it: a reading's values or unit, the
    # priority, a voided conclusion as valid, a cause or fix of its own.
    contradicted: list[str] = field(default_factory=list)
    # Case summaries: every signal's first, lowest, highest and latest reading.
    readings_checked: int = 0
    readings_stated: int = 0
    readings_omitted: int = 0

    @property
    def ok(self) -> bool:
        return not self.missing and not self.invented and not self.contradicted and self.ratio_ok and not self.too_long

    @property
    def repairable(self) -> bool:
        """Only facts are missing: appending them is a faithful repair."""
        return bool(self.missing) and not self.invented and not self.contradicted

    def describe(self) -> str:
        """What is wrong, for logs and for the summarizer's retry (never source text beyond the facts)."""
        problems = []
        if self.missing:
            problems.append("missing " + "; ".join(self.missing))
        if self.invented:
            problems.append("not in the source " + "; ".join(self.invented))
        if self.contradicted:
            problems.append("not as the session decided " + "; ".join(self.contradicted))
        if not self.ratio_ok:
            problems.append(f"compression {self.ratio:.1f}:1 < {MIN_COMPRESSION:.0f}:1")
        if self.too_long:
            problems.append("too long")
        return ", ".join(problems) or "ok"


def check_summary(
    summary: str,
    required: list[str],
    source: str,
    max_chars: int | None = None,
    carried: str = "",
    split: tuple[str, list[str]] | None = None,
) -> FidelityReport:
    """Check ``summary`` against its ``source``.

    ``required``: the facts that must appear verbatim (codes, key numbers,
    excluded hypotheses, overturned conclusions, URIs). Every number, code and
    URI of the summary must occur in the source, a time as a time of the source, a reading (a number
    with a unit) as a reading of the source in that unit; a source longer than
    ``COMPRESSION_MIN_SOURCE_CHARS`` must be compressed ``MIN_COMPRESSION``:1;
    with ``max_chars`` the summary must also fit in that many characters.
    ``carried``: text kept verbatim beside the summary (the working context's
    key-facts region); a required fact found there is not lost. ``split``:
    ``split_uris(summary)`` when the caller has it already.
    """
    report = FidelityReport()
    report.too_long = max_chars is not None and len(summary) > max_chars
    report.missing = [fact for fact in required if fact not in summary and fact not in carried]
    # Numbers inside a URI (VIN digits, timestamps) are checked as whole URIs, and those of a time as whole
    # times: neither is a number of the source's that a summary may state on its own.
    source_plain, source_uris = split_uris(source)
    plain, uris = split_uris(summary) if split is None else split
    plain, times = _split_times(plain)
    numbers = _NUMBER_RE.findall(plain)
    source_numbers = _tokens_in(_NUMBER_RE, source_plain, numbers, times=True)
    if any(n not in source_numbers for n in numbers) and (dated := without_source_dates(plain, source_plain)) != plain:
        # A date of the source written short or in words (11-01, 11月1日) is that date, not its numbers:
        # looked for only when a number would otherwise not be the source's (most summaries have none).
        plain, numbers = dated, _NUMBER_RE.findall(dated)
    codes = CODE_RE.findall(plain)
    # The source's J1939 codes as a summary writes them (``summarize_checked`` writes them in one form).
    j1939 = any(code[0] == "S" for code in codes)
    source_codes = _tokens_in(CODE_RE, canonical_codes(source) if j1939 else source, codes)
    known_uris = set(source_uris)
    report.invented = [f"time {t.group()}" for t in times if not _time_in(source_plain, t)]
    report.invented += [n for n in numbers if n not in source_numbers]
    report.invented += [c for c in codes if c not in source_codes]
    report.invented += [u for u in uris if u not in known_uris]
    # A reading whose number is no number of the source is reported as that number, once.
    report.invented += _readings_not_in(plain, source_plain, set(numbers) - source_numbers)
    report.ratio = len(source) / max(1, len(summary))
    if len(source) > COMPRESSION_MIN_SOURCE_CHARS:
        report.ratio_ok = report.ratio >= MIN_COMPRESSION
    return report


def _split_times(text: str) -> tuple[str, list[re.Match[str]]]:
    """``_TIME_RE.sub(" ", text)`` and the times it took out (a summary is short: scanned whole)."""
    times = list(_TIME_RE.finditer(text))
    if not times:
        return text, times
    pieces, end = [], 0
    for t in times:
        pieces.append(text[end : t.start()])
        end = t.end()
    pieces.append(text[end:])
    return " ".join(pieces), times


_TimeKey = tuple[tuple[int, ...] | None, tuple[int, ...] | None, str | None]


def _time_parts(m: re.Match[str]) -> tuple[str | None, str | None, str | None]:
    """(date, HH:MM, seconds) of a ``_TIME_RE`` match as written; None for a part it lacks."""
    text, clock = m.group(), m.group("clock")
    if m.group("sep") is None:
        date, clock = None, text
    elif clock:
        date, clock = text[: len(text) - len(clock)], clock[1:]
    else:
        date = text
    return date, clock[: clock.index(":") + 3] if clock else None, m.group("sec") or m.group("bare_sec")


def _time_key(m: re.Match[str]) -> _TimeKey:
    """(date, hour and minute, seconds) of a ``_TIME_RE`` match: 2026/11/1 is the date of 2026-11-01."""
    date, hm, seconds = _time_parts(m)
    return (
        tuple(int(x) for x in date.replace("/", "-").split("-")) if date else None,
        tuple(int(x) for x in hm.split(":")) if hm else None,
        seconds,
    )


def _time_around(source: str, at: int) -> re.Match[str] | None:
    """The time of ``source`` (``_TIME_RE`` as a scan of the whole source finds it) that holds place ``at``."""
    for m in _TIME_RE.finditer(source, max(0, at - _TIME_REACH), at + _TIME_REACH):
        if m.end() > at:
            return m if m.start() <= at else None
    return None


# What stands next to every number of a time: the date's separators, the clock's colons, an offset's sign.
_TIME_MARKS = ":-/+"


def _in_time(source: str, at: int, end: int) -> bool:
    """Whether the number at ``at``..``end`` of ``source`` is part of a time (most numbers are not, and
    have none of ``_TIME_MARKS`` next to them: no time is read around those)."""
    before, after = source[at - 1 : at], source[end : end + 1]
    if not ((before and before in _TIME_MARKS) or (after and after in _TIME_MARKS)):
        return False
    return _time_around(source, at) is not None


def _time_in(source: str, time: re.Match[str]) -> bool:
    """Whether ``source`` has the time a summary states: the same date, clock and seconds, as far as the
    summary states them (2026-11-01 10:15 is a time of 2026-11-01T10:15:30Z; 10:15 alone too).

    Looked up from the places that hold its text (date and clock with " " or "T" between them).
    """
    date, hm, _ = _time_parts(time)
    want: _TimeKey | None = None
    needles = [f"{date}{sep}{hm}" for sep in " T"] if date and hm else [date or hm or time.group()]
    for needle in needles:
        at = source.find(needle)
        while at >= 0:
            # The same text as a time of the source (mostly so) is the same time.
            if (m := _TIME_RE.match(source, at)) is not None and m.group() == time.group():
                return True
            m = _time_around(source, at)
            want = _time_key(time) if want is None else want
            if m is not None and all(w is None or w == h for w, h in zip(want, _time_key(m), strict=True)):
                return True
            at = source.find(needle, at + 1)
    return False


@functools.lru_cache(maxsize=256)
def _unit(symbol: str) -> str:
    """A unit as written, folded (℃ is °C, the ohm sign is Ω); the empty string for none."""
    return unicodedata.normalize("NFKC", symbol)


def _readings_not_in(plain: str, source: str, not_numbers: set[str]) -> list[str]:
    """The readings of ``plain`` (a summary without URIs and times) that are no reading of ``source``.

    A reading is a number with a unit: one in text (30 mV, 41.5℃), or every number of a span written with
    its unit (cell_voltage_diff_mv=87→187mV: 87 mV and 187 mV). It must be a reading of the source with
    the same number, as written, and the same unit: a number with that unit, or one of a span or signal
    assignment whose unit is that one, written or by its name's suffix (pack_temp_c=41.5 is 41.5°C).
    No unit is converted to another. A span the source has verbatim holds readings of the source.
    Readings of ``not_numbers`` (no numbers of the source) are not looked up: they are reported as numbers.
    """
    wanted: dict[tuple[str, str], str] = {}  # (number, folded unit) -> as the summary writes it
    in_spans: set[int] = set()  # where the numbers of the spans with a unit start: read with their span
    for m in _SPAN_RE.finditer(plain) if "=" in plain else ():
        if not m.group(6):
            continue
        in_spans.update(m.start(g) for g in (2, 3, 4, 5))
        if not _span_in(source, m.group()):
            for value in dict.fromkeys(v for v in m.group(2, 3, 4, 5) if v):
                wanted.setdefault((value, _unit(m.group(6))), f"{m.group(1)}={value}{m.group(6)}")
    for m in _READING_RE.finditer(plain):
        if m.group(2) in _UNITS and m.start() not in in_spans:
            wanted.setdefault((m.group(1), _unit(m.group(2))), m.group())
    for key in [key for key in wanted if key[0] in not_numbers]:
        del wanted[key]
    if not wanted:
        return []
    everything: set[tuple[str, str]] | None = None  # the source's readings, read whole when first needed
    invented = []
    for (value, unit), written in wanted.items():
        verdict = _reading_at(source, value, unit)
        if verdict is None:
            everything = _source_readings(source) if everything is None else everything
            verdict = (value, unit) in everything
        if not verdict:
            invented.append(f"reading {written}")
    return invented


def _span_in(source: str, span: str) -> bool:
    """Whether ``source`` writes the span ``span`` (a match of ``_SPAN_RE``) as a span of its own."""
    at = source.find(span)
    while at >= 0:
        m = _SPAN_RE.match(source, at)
        if m is not None and m.end() == at + len(span):
            return True
        at = source.find(span, at + 1)
    return False


def _reading_at(source: str, value: str, unit: str) -> bool | None:
    """Whether ``source`` has ``value`` in ``unit`` (folded); None when ``_LOOKUPS`` places did not tell."""
    at = source.find(value)
    for _ in range(_LOOKUPS):
        if at < 0:
            return False
        if _number_is(source, at, value) and unit in _units_at(source, at, at + len(value)):
            return True
        at = source.find(value, at + 1)
    return None if at >= 0 else False


def _number_is(source: str, at: int, value: str) -> bool:
    """Whether ``_NUMBER_RE.findall(source)`` gives ``value`` at place ``at`` (see ``_token_at``)."""
    m = _NUMBER_RE.match(source, at)
    return (
        m is not None
        and m.group() == value
        and not (source[at - 1 : at] == "-" and _NUMBER_RE.match(source, at - 1) is not None)
    )


def _units_at(source: str, at: int, end: int) -> set[str]:
    """The units (folded) of the number at ``at``..``end`` of ``source``: the one written after it, and
    that of the span or signal assignment it is a number of."""
    units = set()
    if (after := _UNIT_AFTER_RE.match(source, end)) is not None and after.group(1) in _UNITS:
        units.add(_unit(after.group(1)))
    elif (name := _NAME_UNIT_RE.match(source, end)) is not None and name.group(1) in UNITS:
        units.add(_unit(UNITS[name.group(1)]))
    # Back over the span's marks and numbers to its "=", then over its name.
    eq = at
    while eq > 0 and at - eq < _TIME_REACH and source[eq - 1] in _SPAN_CHARS:
        eq -= 1
    if source[eq - 1 : eq] == "=":
        start = eq - 1
        while start > 0 and source[start - 1] in _NAME_CHARS:
            start -= 1
        m = _SPAN_RE.match(source, start)
        if m is not None and at in (m.start(g) for g in (2, 3, 4, 5)):
            units.add(_unit(m.group(6) or unit_of(m.group(1)) or ""))
    return units


def _source_readings(source: str) -> set[tuple[str, str]]:
    """Every reading of ``source`` as (number, folded unit), read whole (see ``_readings_not_in``)."""
    found = {(value, _unit(unit)) for value, unit in _READING_RE.findall(source) if unit in _UNITS}
    found.update((value, _unit(UNITS[unit])) for value, unit in _NAME_READING_RE.findall(source) if unit in UNITS)
    for m in _SPAN_RE.finditer(source):
        unit = m.group(6) or unit_of(m.group(1))
        if unit:
            found.update((v, _unit(unit)) for v in m.group(2, 3, 4, 5) if v)
    return found


# Places of the source a summary's number or code is looked up at before the
# source is read whole (a number that is not the source's may be part of many).
_LOOKUPS = 4


def _tokens_in(pattern: re.Pattern[str], source: str, tokens: list[str], times: bool = False) -> set[str]:
    """Those of ``tokens`` that ``pattern.findall(source)`` gives (``_NUMBER_RE`` or ``CODE_RE``); with
    ``times``, of ``source`` without its times (``_TIME_RE.sub(" ", source)``).

    A summary has a few numbers and codes, the source many: each is looked up
    at the places of the source that hold its text, and the source is read
    whole only when one of them is undecided after ``_LOOKUPS`` places.
    """
    found: set[str] = set()
    for token in set(tokens):
        verdict = _token_at(pattern, source, token, times)
        if verdict is None:
            return set(tokens) & set(pattern.findall(_TIME_RE.sub(" ", source) if times else source))
        if verdict:
            found.add(token)
    return found


def _token_at(pattern: re.Pattern[str], source: str, token: str, times: bool = False) -> bool | None:
    """Whether ``pattern.findall(source)`` gives ``token``; None when ``_LOOKUPS`` places did not tell.

    findall gives the match at every place where the pattern matches, except
    a place inside an earlier match. A match of either pattern holds no place
    where another can start but the one after a number's sign: a match at
    ``at`` is found unless a "-" before it starts a match too. With ``times``, a
    place inside a time of the source does not count.
    """
    at = source.find(token)
    for _ in range(_LOOKUPS):
        if at < 0:
            return False
        m = pattern.match(source, at)
        if (
            m is not None
            and m.group() == token
            and not (source[at - 1 : at] == "-" and pattern.match(source, at - 1))
            and not (times and _in_time(source, at, m.end()))
        ):
            return True
        at = source.find(token, at + 1)
    return None if at >= 0 else False


def check_request(summary: str, request: SummaryRequest) -> FidelityReport:
    """Every check that applies to ``request``: the verbatim and invention checks, and for a case its
    readings, times and decision records (``meaning.check_case``)."""
    split = split_uris(summary)  # for both checks
    report = check_summary(summary, request.required, request.source, request.max_chars, request.carried, split)
    if request.kind != "case":
        return report
    case = check_case(summary, request, split[0])
    report.missing += [m for m in case.missing if m not in report.missing]
    report.invented += [i for i in case.invented if i not in report.invented]
    report.contradicted += case.contradicted
    report.readings_checked = case.readings_checked
    report.readings_stated = case.readings_stated
    report.readings_omitted = case.readings_omitted
    return report
