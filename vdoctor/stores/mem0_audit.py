"""The read-only views (``stores.audit``) of the mem0 backend; mixed into ``Mem0Store``.

Every version of a record is a Mem0 memory (``mem0_mapping``). The store's
key index keeps, beside each version's memory id and span, the few facts the
views count and order by (``Facts``: series, kind, validity, verdict,
conclusion time), read from the metadata when the folder is opened and set
by every write. So the views ask Mem0 only for the memories they return, by
id (``Memory.get``), and never scan the collection: Mem0's listings have no
order or limit, and in local mode Qdrant reads every point for one.

- ``versions(vin)``: the vehicle's versions;
- ``series_versions``: the series' versions chosen and ordered in the index,
  then read (at most ``limit``);
- ``fleet_counts``: from the index alone;
- ``recent``: the newest current versions chosen in the index, then read.

Spans come from the key index: it holds a repair that a read-only store has
not written (see ``_Folder._repair``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from vdoctor.errors import StoreError
from vdoctor.records import MemoryRecord
from vdoctor.stores.audit import FleetCounts, RecordVersion, count_groups, sort_versions
from vdoctor.stores.mem0_mapping import Facts, Version, from_epoch

if TYPE_CHECKING:
    from vdoctor.stores.mem0_folder import _Folder


class _Reads(Protocol):
    _folder: _Folder


def _facts(version: Version) -> Facts:
    if version.facts is None:
        raise StoreError(f"mem0 store: memory {version.memory_id} has no facts in the key index")
    return version.facts


def _read(folder: _Folder, version: Version) -> RecordVersion:
    end = None if version.end is None else from_epoch(version.end)
    record = folder.read(version).model_copy(update={"source": ""})
    return RecordVersion(record, from_epoch(version.start), end)


class Mem0Audit:
    """``StoreAudit`` for ``Mem0Store``."""

    def versions(self: _Reads, vin: str) -> list[RecordVersion]:
        folder = self._folder
        with folder.lock:
            rows = [folder.keys[(vin, sid)] for sid in folder.by_vin.get(vin, [])]
            return sort_versions([_read(folder, v) for row in rows for v in (*row.archived, row.current)])

    def series_versions(self: _Reads, series: str, limit: int) -> list[RecordVersion]:
        folder = self._folder
        with folder.lock:
            found = [
                (_facts(v).concluded_at, session_id, v.start, v)
                for (_, session_id), row in folder.keys.items()
                for v in (row.current, *row.archived)
                if _facts(v).series == series
            ]
            found.sort(key=lambda f: f[:3], reverse=True)
            return [_read(folder, f[3]) for f in found[: max(limit, 0)]]

    def fleet_counts(self: _Reads) -> FleetCounts:
        folder = self._folder
        with folder.lock:
            current = [_facts(row.current) for row in folder.keys.values()]
            vehicles = len({vin for vin, _ in folder.keys})
            archived = sum(len(row.archived) for row in folder.keys.values())
        groups: dict[tuple[str, str, bool, bool | None], int] = {}
        for f in current:
            group = (f.series, f.kind, f.valid, f.recheck_ok)
            groups[group] = groups.get(group, 0) + 1
        return FleetCounts(
            count_groups([(*group, n) for group, n in sorted(groups.items(), key=str)]), vehicles, archived
        )

    def recent(self: _Reads, limit: int) -> list[MemoryRecord]:
        folder = self._folder
        with folder.lock:
            newest = sorted(
                (
                    (_facts(row.current).concluded_at, session_id, row.current)
                    for (_, session_id), row in folder.keys.items()
                ),
                key=lambda f: f[:2],
                reverse=True,
            )
            return [folder.read(f[2]).model_copy(update={"source": ""}) for f in newest[: max(limit, 0)]]
