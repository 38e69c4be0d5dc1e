"""What a long-term case is found by: one text, indexed by both channels and embedded as a passage.

A later session describes a symptom, often in other words and often in
Chinese. The summary alone (``concluded P0A7F | P2 conf 0.80; confirmed
cell_voltage_diff_mv=187>=100 | signal://...``) holds codes, signal names and
numbers, never the symptom: on our vehicle retrieval set no method found a
symptom told in words from the summary alone (hybrid R@5 0.43). The text
below adds the symptom as reported (the opening alert's text), the codes, the
root cause and the fix: hybrid R@5 0.84. The alert text carries the words a
later symptom shares; the cause and fix carry the mechanism a multilingual
model matches across languages.
"""

from __future__ import annotations

from collections.abc import Sequence

from vdoctor.records import MemoryRecord


def case_text(alert_text: str, codes: Sequence[str], root_cause: str, fix_action: str, summary: str) -> str:
    """The indexed text of a case: one part per line, empty parts left out."""
    parts = [alert_text, " ".join(codes), root_cause, fix_action, summary]
    return "\n".join(p for p in (part.strip() for part in parts) if p)


def record_text(record: MemoryRecord) -> str:
    """The indexed text of a stored record."""
    return case_text(record.alert_text, record.dtc_codes, record.root_cause, record.fix_action, record.summary)
