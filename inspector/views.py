"""What each page shows, as JSON-able data: the HTML page renders it, ``/api/`` returns it as it is.

Every read goes through the store's read interfaces (``MemoryStore`` and its
read-only views, ``StoreAudit``); the recall explainer runs the job's own
recall (``vdoctor.memory.explain``); the fidelity findings are those of
``vdoctor memory check-summary`` on the stored summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from inspector.outputs import JobOutputs
from inspector.timeline import timeline
from vdoctor.errors import NothingToCheck
from vdoctor.events import given_codes, given_time, given_vin
from vdoctor.memory.check import check_stored, report_dict
from vdoctor.memory.explain import explain_recall, vehicle_series
from vdoctor.memory.recall import SessionRecall
from vdoctor.memory.request import request_from_json
from vdoctor.memory.write_policy import record_key_for_session
from vdoctor.records import MemoryRecord
from vdoctor.stores.audit import RecordVersion, StoreAudit
from vdoctor.stores.base import MemoryStore

# Newest conclusions on the fleet page.
RECENT_CONCLUSIONS = 20


class NotFound(Exception):
    """No such vehicle, record or page (404)."""


class BadInput(Exception):
    """A parameter that cannot be used (400); the message says which and why."""


class Moved(Exception):
    """A session merged into another record: its page is that record's (a redirect)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.session_id = session_id


@dataclass
class Inspector:
    """What the pages read: the store (read-only), its views, the job's recall, the job's outputs."""

    store: MemoryStore
    audit: StoreAudit
    recall: SessionRecall
    # The memory URL as it may be shown (no password).
    memory: str
    outputs: JobOutputs | None = None


def _iso(value: datetime | None) -> str | None:
    return None if value is None else f"{value:%Y-%m-%dT%H:%M:%SZ}"


def check_vin(vin: str) -> str:
    """A VIN as the job reads an event's (``events.given_vin``), or a ``NotFound``."""
    try:
        return given_vin(vin)
    except ValueError:
        raise NotFound(f"not a VIN: {vin[:40]!r} (17 characters, digits and capitals but I, O, Q)") from None


def event_time(text: str | None) -> datetime:
    """An ``at`` parameter (``events.given_time``, as the memory commands read ``--as-of``); default now. One
    outside 2000-2199 was a 500 (an ``OverflowError``), or an ``as_of`` that is no ISO time (found by an
    audit)."""
    if not text:
        return datetime.now(UTC).replace(microsecond=0)
    try:
        return given_time(text)
    except ValueError as e:
        raise BadInput(f"at: {e}") from None


def _record(r: MemoryRecord) -> dict[str, Any]:
    return r.public_dict()


def _version(v: RecordVersion) -> dict[str, Any]:
    r = v.record
    return {
        "from": _iso(v.version_from),
        "to": _iso(v.version_to),
        "current": v.current,
        "concluded_at": _iso(r.concluded_at),
        "opened_ts": _iso(r.opened_ts),
        "summary": r.summary,
        "root_cause": r.root_cause,
        "priority": r.priority,
        "recheck_ok": r.recheck_ok,
        "verified_ts": _iso(r.verified_ts),
        "valid": r.valid,
        "invalid_ts": _iso(r.invalid_ts),
        "merged_sessions": r.merged_sessions,
    }


def fleet(ins: Inspector) -> dict[str, Any]:
    counts = ins.audit.fleet_counts()
    return {
        "memory": ins.memory,
        "counts": {
            "records": counts.records,
            "vehicles": counts.vehicles,
            "final": counts.final,
            "milestones": counts.milestones,
            "invalid": counts.invalid,
            "verified": counts.final_with_recheck(True),
            "failed": counts.final_with_recheck(False),
            "pending": counts.final_with_recheck(None),
            "verified_share": round(counts.verified_share, 4),
            "archived_versions": counts.archived_versions,
            "by_series": counts.by_series(),
        },
        "recent": [_record(r) for r in ins.audit.recent(RECENT_CONCLUSIONS)],
        "outputs": ins.outputs.summary() if ins.outputs else None,
    }


def vehicle(ins: Inspector, vin: str) -> dict[str, Any]:
    vin = check_vin(vin)
    versions = ins.audit.versions(vin)
    by_record: dict[str, list[RecordVersion]] = {}
    for v in versions:
        by_record.setdefault(v.record.session_id, []).append(v)
    records = []
    for vs in by_record.values():
        current = next((v for v in vs if v.current), vs[-1])
        records.append({**_record(current.record), "versions": [_version(v) for v in vs]})
    records.sort(key=lambda r: (r["concluded_at"], r["session_id"]), reverse=True)
    latest = records[0] if records else None
    diagnoses = ins.outputs.for_sessions(vin) if ins.outputs else None
    return {
        "memory": ins.memory,
        "vin": vin,
        "series": latest["series"] if latest else None,
        "records": records,
        "timeline": [e.to_dict() for e in timeline(versions)],
        "archived_versions": sum(not v.current for v in versions),
        "diagnoses": diagnoses,
        "recall_codes": latest["dtc_codes"] if latest else [],
    }


def _source(record: MemoryRecord) -> dict[str, Any] | None:
    if not record.source:
        return None
    try:
        request = request_from_json(record.source)
    except (ValueError, KeyError, TypeError) as e:
        return {"unreadable": f"the stored source cannot be read: {type(e).__name__}"}
    decision = request.decision
    return {
        "kind": request.kind,
        "max_chars": request.max_chars,
        "required": request.required,
        "readings": request.readings,
        "omitted": request.omitted,
        "events": [
            {"ts": e.ts, "event": e.event, "conclusion": e.conclusion, "evidence": e.evidence} for e in request.events
        ],  # fmt: skip
        "decision": None
        if decision is None
        else {
            "root_cause": decision.root_cause,
            "fix_action": decision.fix_action,
            "priority": decision.priority,
            "confidence": decision.confidence,
            "codes": decision.codes,
            "other_codes": decision.other_codes,
            "confirmation": decision.confirmation,
            "evidence": decision.evidence,
            "void": decision.void,
            "excluded": decision.excluded,
        },  # fmt: skip
        "text": request.source,
        "chars": len(request.source),
    }


def case(ins: Inspector, vin: str, session_id: str) -> dict[str, Any]:
    vin = check_vin(vin)
    key = record_key_for_session(ins.store, vin, session_id)
    if key is None:
        raise NotFound(f"no long-term record of {vin} holds session {session_id[:80]}")
    if key != session_id:
        raise Moved(key)
    record = ins.store.get(vin, key)
    if record is None:
        raise NotFound(f"no long-term record {key}")
    try:
        checked, report = check_stored(ins.store, vin, key, record.summary)
        fidelity: dict[str, Any] = {"checked": True, **report_dict(checked, report), "describe": report.describe()}
    except NothingToCheck as e:
        fidelity = {"checked": False, "reason": str(e)}
    versions = [v for v in ins.audit.versions(vin) if v.record.session_id == key]
    sessions = {key, *record.merged_sessions}
    return {
        "memory": ins.memory,
        "vin": vin,
        "record": _record(record),
        "summary_lines": record.summary.splitlines(),
        "source": _source(record),
        "fidelity": fidelity,
        "versions": [_version(v) for v in versions],
        "diagnoses": ins.outputs.for_sessions(vin, sessions) if ins.outputs else None,
    }


def _score_columns(candidates: list[dict[str, Any]]) -> list[str]:
    """Score names in table order: the channels' first, then the rerank and its parts."""
    names = list(dict.fromkeys(k for c in candidates for k in c["scores"]))
    first = [n for n in names if not n.startswith("rerank")]
    return first + [n for n in names if n == "rerank"] + [n for n in names if n.startswith("rerank.")]


def recall(ins: Inspector, vin: str, params: dict[str, str], require_symptom: bool) -> dict[str, Any]:
    """The recall explainer; without a symptom, the form alone (or a 400 for ``/api/``)."""
    vin = check_vin(vin)
    symptom = params.get("symptom", "").strip()
    try:  # read as the job reads an alert's entry (``P0A7F, U0121``, ``SPN 1569 FMI 31``), as the CLI's --codes
        written = params.get("codes", "").strip()
        codes = given_codes([written] if written else [])
    except ValueError as e:
        raise BadInput(f"codes: {e}") from None
    at = event_time(params.get("at"))
    series = vehicle_series(ins.store, vin, params.get("series", "").strip() or None)
    form = {"symptom": symptom, "codes": " ".join(codes), "at": _iso(at), "series": series}
    if not symptom:
        if require_symptom:
            raise BadInput("give symptom=<the alert text> (and codes=..., at=<ISO time>, series=... as needed)")
        return {"memory": ins.memory, "vin": vin, "form": form, "explanation": None}
    explained = explain_recall(ins.recall, ins.audit, vin, series, symptom, codes, at).to_dict()
    explained["explain"]["score_columns"] = _score_columns(explained["explain"]["candidates"])
    return {"memory": ins.memory, "vin": vin, "form": form, "explanation": explained}
