"""Summary fidelity: nothing key lost, nothing invented, and real compression.

Run on every summary before it is kept (DESIGN.md §4): every required fact of
the source (codes, key numbers, exclusions, URIs) appears verbatim; every
number and code in the summary appears in the source; and a long source is
compressed at least ``MIN_COMPRESSION``:1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Sources shorter than this are not worth compressing 5:1 (DESIGN.md §4).
COMPRESSION_MIN_SOURCE_CHARS = 1500
MIN_COMPRESSION = 5.0

# re.ASCII: CJK characters count as \w in Python, and without it the 187 of
# 压差187mV (or the code of 报P0A7F) would never be checked at all.
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?", re.ASCII)
_CODE_RE = re.compile(r"\b[PCBU][0-9A-F]{4}\b", re.ASCII)
_URI_RE = re.compile(r"\b(?:dtc|signal|case)://[^\s|]+", re.ASCII)


@dataclass
class FidelityReport:
    missing: list[str] = field(default_factory=list)
    invented: list[str] = field(default_factory=list)
    ratio: float = 0.0
    ratio_ok: bool = True

    @property
    def ok(self) -> bool:
        return not self.missing and not self.invented and self.ratio_ok


def _strip_uris(text: str) -> str:
    # Numbers inside a URI (VIN digits, timestamps) are checked as whole URIs.
    return _URI_RE.sub(" ", text)


def check_summary(summary: str, required: list[str], source: str) -> FidelityReport:
    report = FidelityReport()
    report.missing = [fact for fact in required if fact not in summary]
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
