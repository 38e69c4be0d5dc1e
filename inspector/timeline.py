"""A vehicle's medical record: what happened to its long-term records, in event time.

Read from every version of every record (``stores.audit``): a record's first
version is a case concluded (or a milestone of a long session); a later
version that adds merged sessions is the same fault coming back within 30
days; each verdict is a recheck (one that replaces an earlier, different
verdict overturns it); a record invalidated is a soft delete (a scrapped or
transferred vehicle), or for a milestone its session's final record taking
its place.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vdoctor.memory.write_policy import MILESTONE_SEPARATOR
from vdoctor.records import MemoryRecord, RecordKind
from vdoctor.stores.audit import RecordVersion

# Entries at the same event time read in this order.
_ORDER = {"concluded": 0, "milestone": 0, "merged": 1, "recheck": 2, "superseded": 3, "invalidated": 3}


@dataclass(frozen=True)
class Entry:
    at: datetime
    kind: str
    session_id: str
    title: str
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": f"{self.at:%Y-%m-%dT%H:%M:%SZ}",
            "kind": self.kind,
            "session_id": self.session_id,
            "title": self.title,
            "detail": self.detail,
        }


def _when(value: datetime | None) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M}"


def _conclusion(r: MemoryRecord) -> str:
    return f"{', '.join(r.dtc_codes) or 'no code'} {r.priority or 'no priority yet'}"


def _record_entries(versions: list[RecordVersion], finals: dict[str, MemoryRecord]) -> list[Entry]:
    first = versions[0].record
    key = first.session_id
    out: list[Entry] = []
    if first.kind is RecordKind.MILESTONE:
        out.append(Entry(first.concluded_at, "milestone", key, f"milestone of a long session: {_conclusion(first)}",
                         f"opened {_when(first.opened_ts)}; not concluded"))  # fmt: skip
    else:
        out.append(Entry(first.concluded_at, "concluded", key, f"case concluded: {_conclusion(first)}",
                         f"opened {_when(first.opened_ts)}; cause: {first.root_cause}"))  # fmt: skip
    seen: set[tuple[datetime, bool]] = set()
    verdict: bool | None = None  # the verdict in force, None while pending (a merge resets it)
    for i, version in enumerate(versions):
        r = version.record
        new = [s for s in r.merged_sessions if i and s not in versions[i - 1].record.merged_sessions]
        if new:
            out.append(Entry(version.version_from, "merged", key, f"merged: {', '.join(new)} (the same fault again)",
                             f"opened {_when(r.opened_ts)}; {_conclusion(r)}; recheck reset to pending"))  # fmt: skip
            verdict = None
        if r.recheck_ok is not None and r.verified_ts is not None and (r.verified_ts, r.recheck_ok) not in seen:
            seen.add((r.verified_ts, r.recheck_ok))
            overturns = verdict is not None and verdict != r.recheck_ok
            title = "recheck ok: verified" if r.recheck_ok else "recheck failed"
            detail = "overturns the earlier verdict" if overturns else ""
            out.append(Entry(r.verified_ts, "recheck", key, title, detail))
            verdict = r.recheck_ok
    last = versions[-1].record
    if not last.valid and last.invalid_ts is not None:
        base = key.split(MILESTONE_SEPARATOR)[0]
        final = finals.get(base)
        if last.kind is RecordKind.MILESTONE and final is not None:
            out.append(Entry(last.invalid_ts, "superseded", key, "milestone superseded by the final record",
                             final.session_id))  # fmt: skip
        else:
            out.append(Entry(last.invalid_ts, "invalidated", key, "soft delete: kept for audit, never recalled again",
                             "vehicle scrapped or transferred"))  # fmt: skip
    return out


def timeline(versions: list[RecordVersion]) -> list[Entry]:
    """Every entry of the vehicle's medical record, oldest first."""
    by_record: dict[str, list[RecordVersion]] = {}
    for v in versions:
        by_record.setdefault(v.record.session_id, []).append(v)
    finals: dict[str, MemoryRecord] = {}
    for vs in by_record.values():
        last = vs[-1].record
        if last.kind is RecordKind.FINAL:
            for sid in (last.session_id, *last.merged_sessions):
                finals[sid] = last
    entries = [
        e for vs in by_record.values() for e in _record_entries(sorted(vs, key=lambda v: v.version_from), finals)
    ]
    entries.sort(key=lambda e: (e.at, _ORDER[e.kind], e.session_id))
    return entries
