"""The read-only views (``stores.audit``) of the mem0 backend; mixed into ``Mem0Store``.

Every version of a record is a Mem0 memory (``mem0_mapping``), so the views
read memories and take each version's span from the store's key index (the
index is what the store trusts: it holds spans an interrupted write left for
the next writer to repair). What each view asks Mem0:

- ``versions(vin)``: the vehicle's memories by id, from the key index (one
  ``Memory.get`` per version), as own history reads them;
- ``series_versions``: one ``Memory.get_all`` filtered on the series, ordered
  and cut here (Mem0's listings have no order or limit);
- ``fleet_counts`` and ``recent``: one ``Memory.get_all`` of the whole
  collection, counted, ordered and cut here. In local mode Qdrant reads every
  point for it, as long as opening the folder takes (seconds at 10k records).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from vdoctor.records import MemoryRecord
from vdoctor.stores.audit import FleetCounts, RecordVersion, count_groups, sort_versions
from vdoctor.stores.base import newest_first
from vdoctor.stores.mem0_mapping import AGENT_ID, Version, from_epoch, from_item, key

if TYPE_CHECKING:
    from vdoctor.stores.mem0 import _Folder


class _Reads(Protocol):
    _folder: _Folder


def _as_audit(record: MemoryRecord, version: Version) -> RecordVersion:
    end = None if version.end is None else from_epoch(version.end)
    return RecordVersion(record.model_copy(update={"source": ""}), from_epoch(version.start), end)


def _listing(store: _Reads, filters: dict[str, Any]) -> list[tuple[MemoryRecord, Version, bool]]:
    """(record, span from the key index, current?) of every stored version matching the filters."""
    folder = store._folder
    with folder.lock:
        if folder.memory is None or not folder.keys:
            return []
        rows = folder.keys.values()
        spans = {v.memory_id: (v, v is row.current) for row in rows for v in (row.current, *row.archived)}
        with folder.guard("get_all"):
            out = folder.memory.get_all(
                filters={"agent_id": AGENT_ID, **filters}, top_k=folder.total() + 1, show_expired=True
            )
    found = []
    for item in out["results"]:
        span = spans.get(str(item["id"]))
        if span is not None:  # a memory some other Mem0 tool added is not a version of ours
            found.append((from_item(item)[0], *span))
    return found


class Mem0Audit:
    """``StoreAudit`` for ``Mem0Store``."""

    def versions(self: _Reads, vin: str) -> list[RecordVersion]:
        folder = self._folder
        with folder.lock:
            rows = [folder.keys[(vin, sid)] for sid in folder.by_vin.get(vin, [])]
            found = [_as_audit(folder.read(v), v) for row in rows for v in (*row.archived, row.current)]
        return sort_versions(found)

    def series_versions(self: _Reads, series: str, limit: int) -> list[RecordVersion]:
        found = [_as_audit(r, v) for r, v, _ in _listing(self, {key("series"): series})]
        found.sort(key=lambda v: (v.record.concluded_at, v.record.session_id, v.version_from), reverse=True)
        return found[: max(limit, 0)]

    def fleet_counts(self: _Reads) -> FleetCounts:
        listed = _listing(self, {})
        current = [r for r, _, is_current in listed if is_current]
        groups: dict[tuple[str, str, bool, bool | None], int] = {}
        for r in current:
            group = (r.series, r.kind.value, r.valid, r.recheck_ok)
            groups[group] = groups.get(group, 0) + 1
        return FleetCounts(
            count_groups([(*group, n) for group, n in sorted(groups.items(), key=str)]),
            vehicles=len({r.vin for r in current}),
            archived_versions=len(listed) - len(current),
        )

    def recent(self: _Reads, limit: int) -> list[MemoryRecord]:
        current = [r.model_copy(update={"source": ""}) for r, _, is_current in _listing(self, {}) if is_current]
        return newest_first(current, max(limit, 0))
