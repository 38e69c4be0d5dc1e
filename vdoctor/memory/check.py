"""Check any summary text against a long-term record's stored source (``vdoctor memory check-summary``).

Every final record keeps the request its summary was written from (source,
required facts, reading spans, decision records); the same checks that ran
when it was written run on any text given here, so a summary edited by
hand, or written by another model, can be checked before it replaces one.
"""

from __future__ import annotations

from typing import Any

from vdoctor.errors import NothingToCheck
from vdoctor.events import canonical_codes
from vdoctor.memory.fidelity import FidelityReport, check_request
from vdoctor.memory.request import request_from_json
from vdoctor.memory.write_policy import record_key_for_session
from vdoctor.records import MemoryRecord
from vdoctor.stores.base import MemoryStore


def check_stored(store: MemoryStore, vin: str, session_id: str, summary: str) -> tuple[MemoryRecord, FidelityReport]:
    """The record holding ``session_id`` (itself, or the record it was merged into) and ``summary``'s report."""
    key = record_key_for_session(store, vin, session_id)
    record = store.get(vin, key) if key else None
    if record is None:
        raise NothingToCheck(f"no long-term record of {vin} holds session {session_id}")
    if not record.source:
        raise NothingToCheck(
            f"record {record.session_id} keeps no source to check against (a milestone, or written before "
            "sources were kept)"
        )
    # As the write path checks a summary: its J1939 codes in their one written form (``summarize_checked``).
    return record, check_request(canonical_codes(summary), request_from_json(record.source))


def report_dict(record: MemoryRecord, report: FidelityReport) -> dict[str, Any]:
    """What ``check-summary --json`` prints."""
    return {
        "vin": record.vin,
        "session_id": record.session_id,
        "faithful": report.ok,
        "missing": report.missing,
        "invented": report.invented,
        "contradicted": report.contradicted,
        "too_long": report.too_long,
        "compression_ok": report.ratio_ok,
        "readings": {
            "checked": report.readings_checked,
            "stated": report.readings_stated,
            "omitted": report.readings_omitted,
        },
    }
