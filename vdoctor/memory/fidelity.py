"""Summary fidelity: nothing key lost, nothing invented, nothing contradicted, and real compression.

Run on every summary before it is kept (DESIGN.md §4): every required fact of
the source (codes, key numbers, exclusions, URIs) appears verbatim; every
number, code and URI in the summary appears in the source; and a long source
is compressed at least ``MIN_COMPRESSION``:1. A case summary is also checked
against its session's reading spans and decision records (``meaning.py``):
every reading kept or declared omitted, times of the source only, and the
conclusion, voided conclusions, exclusions, cause and fix as the session
decided them. ``check_request`` runs whichever applies to a request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vdoctor.memory.facts import CODE_RE, split_uris
from vdoctor.memory.meaning import check_case
from vdoctor.memory.request import SummaryRequest

# Sources shorter than this are not worth compressing 5:1 (DESIGN.md §4).
COMPRESSION_MIN_SOURCE_CHARS = 1500
MIN_COMPRESSION = 5.0

# re.ASCII: CJK characters count as \w in Python, and without it the 187 of
# 压差187mV (or the code of 报P0A7F) would never be checked at all. The number
# is (?<![\w.])-?\d+(?:\.\d+)?, written to start with its first character (see
# facts.CODE_RE): - or a digit, what must not precede it, the rest.
_NUMBER_RE = re.compile(r"[-\d](?<![\w.][-\d])(?:(?<=-)\d+|(?<=\d)\d*)(?:\.\d+)?", re.ASCII)


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
    URI of the summary must occur in the source; a source longer than
    ``COMPRESSION_MIN_SOURCE_CHARS`` must be compressed ``MIN_COMPRESSION``:1;
    with ``max_chars`` the summary must also fit in that many characters.
    ``carried``: text kept verbatim beside the summary (the working context's
    key-facts region); a required fact found there is not lost. ``split``:
    ``split_uris(summary)`` when the caller has it already.
    """
    report = FidelityReport()
    report.too_long = max_chars is not None and len(summary) > max_chars
    report.missing = [fact for fact in required if fact not in summary and fact not in carried]
    # Numbers inside a URI (VIN digits, timestamps) are checked as whole URIs.
    source_plain, source_uris = split_uris(source)
    plain, uris = split_uris(summary) if split is None else split
    numbers = _NUMBER_RE.findall(plain)
    source_numbers = _tokens_in(_NUMBER_RE, source_plain, numbers)
    codes = CODE_RE.findall(plain)
    source_codes = _tokens_in(CODE_RE, source, codes)
    known_uris = set(source_uris)
    report.invented = [n for n in numbers if n not in source_numbers]
    report.invented += [c for c in codes if c not in source_codes]
    report.invented += [u for u in uris if u not in known_uris]
    report.ratio = len(source) / max(1, len(summary))
    if len(source) > COMPRESSION_MIN_SOURCE_CHARS:
        report.ratio_ok = report.ratio >= MIN_COMPRESSION
    return report


# Places of the source a summary's number or code is looked up at before the
# source is read whole (a number that is not the source's may be part of many).
_LOOKUPS = 4


def _tokens_in(pattern: re.Pattern[str], source: str, tokens: list[str]) -> set[str]:
    """Those of ``tokens`` that ``pattern.findall(source)`` gives (``_NUMBER_RE`` or ``CODE_RE``).

    A summary has a few numbers and codes, the source many: each is looked up
    at the places of the source that hold its text, and the source is read
    whole only when one of them is undecided after ``_LOOKUPS`` places.
    """
    found: set[str] = set()
    for token in set(tokens):
        verdict = _token_at(pattern, source, token)
        if verdict is None:
            return set(tokens) & set(pattern.findall(source))
        if verdict:
            found.add(token)
    return found


def _token_at(pattern: re.Pattern[str], source: str, token: str) -> bool | None:
    """Whether ``pattern.findall(source)`` gives ``token``; None when ``_LOOKUPS`` places did not tell.

    findall gives the match at every place where the pattern matches, except
    a place inside an earlier match. A match of either pattern holds no place
    where another can start but the one after a number's sign: a match at
    ``at`` is found unless a "-" before it starts a match too.
    """
    at = source.find(token)
    for _ in range(_LOOKUPS):
        if at < 0:
            return False
        m = pattern.match(source, at)
        if m is not None and m.group() == token and not (source[at - 1 : at] == "-" and pattern.match(source, at - 1)):
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
    report.invented += case.invented
    report.contradicted += case.contradicted
    report.readings_checked = case.readings_checked
    report.readings_stated = case.readings_stated
    report.readings_omitted = case.readings_omitted
    return report
