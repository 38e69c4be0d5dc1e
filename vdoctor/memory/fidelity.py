"""Summary fidelity: nothing key lost, nothing invented, and real compression.

Run on every summary before it is kept (DESIGN.md §4): every required fact of
the source (codes, key numbers, exclusions, URIs) appears verbatim; every
number and code in the summary appears in the source; and a long source is
compressed at least ``MIN_COMPRESSION``:1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vdoctor.memory.facts import URI_RE as _URI_RE

# Sources shorter than this are not worth compressing 5:1 (DESIGN.md §4).
COMPRESSION_MIN_SOURCE_CHARS = 1500
MIN_COMPRESSION = 5.0

# re.ASCII: CJK characters count as \w in Python, and without it the 187 of
# 压差187mV (or the code of 报P0A7F) would never be checked at all.
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?", re.ASCII)
_CODE_RE = re.compile(r"\b[PCBU][0-9A-F]{4}\b", re.ASCII)


@dataclass
class FidelityReport:
    missing: list[str] = field(default_factory=list)
    invented: list[str] = field(default_factory=list)
    ratio: float = 0.0
    ratio_ok: bool = True
    too_long: bool = False

    @property
    def ok(self) -> bool:
        return not self.missing and not self.invented and self.ratio_ok and not self.too_long

    def describe(self) -> str:
        """What is wrong, for logs and for the summarizer's retry (never source text beyond the facts)."""
        problems = []
        if self.missing:
            problems.append("missing " + "; ".join(self.missing))
        if self.invented:
            problems.append("not in the source " + "; ".join(self.invented))
        if not self.ratio_ok:
            problems.append(f"compression {self.ratio:.1f}:1 < {MIN_COMPRESSION:.0f}:1")
        if self.too_long:
            problems.append("too long")
        return ", ".join(problems) or "ok"


def _strip_uris(text: str) -> str:
    # Numbers inside a URI (VIN digits, timestamps) are checked as whole URIs.
    return _URI_RE.sub(" ", text)


def check_summary(
    summary: str, required: list[str], source: str, max_chars: int | None = None, carried: str = ""
) -> FidelityReport:
    """Check ``summary`` against its ``source``.

    ``required``: the facts that must appear verbatim (codes, key numbers,
    excluded hypotheses, overturned conclusions, URIs). Every number, code and
    URI of the summary must occur in the source; a source longer than
    ``COMPRESSION_MIN_SOURCE_CHARS`` must be compressed ``MIN_COMPRESSION``:1;
    with ``max_chars`` the summary must also fit in that many characters.
    ``carried``: text kept verbatim beside the summary (the working context's
    key-facts region); a required fact found there is not lost.
    """
    report = FidelityReport()
    report.too_long = max_chars is not None and len(summary) > max_chars
    report.missing = [fact for fact in required if fact not in summary and fact not in carried]
    source_numbers = set(_NUMBER_RE.findall(_strip_uris(source)))
    source_codes = set(_CODE_RE.findall(source))
    source_uris = set(_URI_RE.findall(source))
    plain = _strip_uris(summary)
    report.invented = [n for n in _NUMBER_RE.findall(plain) if n not in source_numbers]
    report.invented += [c for c in _CODE_RE.findall(plain) if c not in source_codes]
    report.invented += [u for u in _URI_RE.findall(summary) if u not in source_uris]
    report.ratio = len(source) / max(1, len(summary))
    if len(source) > COMPRESSION_MIN_SOURCE_CHARS:
        report.ratio_ok = report.ratio >= MIN_COMPRESSION
    return report
