"""Dates a summary writes short or in words, checked as dates of its source.

A model summarising a session may write a date of it as people do: 11-01 or
11/01 (month first, or day first: 01/11), 2026年11月1日 or 11月1日, Nov 1 or
1 November 2026. The fidelity checks read a full date (2026-11-01) as a time
of the source; a date written so would otherwise be its numbers (11, 01) and
words (Nov, 年), none of them in the source, and the summary would be rejected
as inventing them. ``without_source_dates`` takes out those that are dates of
the source (the year, where written, too); any other stays, to be checked as
numbers and words as before: a date the session never had still fails.
"""

from __future__ import annotations

import functools
import re

_MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec".split()
_MONTH = r"(?P<{}>(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?)"
_DAY_SUFFIX = r"(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s+(?P<{}>\d{{4}}))?"
SHORT_DATE_RE = re.compile(
    r"(?<![\w.:/-])(?P<a>\d{1,2})(?P<sep>[-/])(?P<b>\d{1,2})(?![\w:/-]|\.\d)"  # 11-01, 11/01
    r"|(?:(?P<cy>\d{4})\s*年\s*)?(?P<cm>\d{1,2})\s*月\s*(?P<cd>\d{1,2})\s*[日号]"  # 2026年11月1日
    r"|(?<![A-Za-z])" + _MONTH.format("m1") + r"\s+(?P<d1>\d{1,2})" + _DAY_SUFFIX + _YEAR.format("y1") + r"(?!\w)"
    r"|(?<![\w.])(?P<d2>\d{1,2})" + _DAY_SUFFIX + r"\s+" + _MONTH.format("m2") + _YEAR.format("y2") + r"(?!\w)",
    re.ASCII,
)
# A full date of the source (2026-11-01, 2026/11/1), alone or in a time or a URI.
_FULL_DATE_RE = re.compile(r"(?<!\d)(\d{4})([-/])(\d{1,2})\2(\d{1,2})(?!\d)", re.ASCII)

_Date = tuple[int | None, int, int]


def _meanings(m: re.Match[str]) -> list[_Date]:
    """The (year or None, month, day) a short date may mean: 11/01 is 1 November, or 11 January."""
    if m.group("sep"):
        a, b = int(m.group("a")), int(m.group("b"))
        return [(None, a, b), (None, b, a)]
    if m.group("cm"):
        year = m.group("cy")
        return [(int(year) if year else None, int(m.group("cm")), int(m.group("cd")))]
    month, day, year = m.group("m1", "d1", "y1") if m.group("m1") else m.group("m2", "d2", "y2")
    return [(int(year) if year else None, _MONTHS.index(month[:3].lower()) + 1, int(day))]


@functools.lru_cache(maxsize=4)
def _source_dates(source: str) -> tuple[frozenset[_Date], frozenset[tuple[int, int]]]:
    """The full dates of ``source`` (year, month, day), and their (month, day); read once for the checks of
    one summary, which ask for them up to three times."""
    dates = frozenset((int(y), int(mo), int(d)) for y, _, mo, d in _FULL_DATE_RE.findall(source))
    return dates, frozenset(date[1:] for date in dates)


def without_source_dates(text: str, source: str) -> str:
    """``text`` with each short date that is a date of ``source`` replaced by a space."""
    found = list(SHORT_DATE_RE.finditer(text))
    if not found:
        return text
    dates, days = _source_dates(source)
    pieces, end = [], 0
    for m in found:
        if any((y, mo, d) in dates if y is not None else (mo, d) in days for y, mo, d in _meanings(m)):
            pieces.append(text[end : m.start()])
            end = m.end()
    pieces.append(text[end:])
    return " ".join(pieces)
