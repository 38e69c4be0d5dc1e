"""The read-only views (``stores.audit``) of the MySQL-protocol backends, ``mysql`` and ``doris``.

Plain SELECTs over ``case_memory`` and its archive ``case_history``, the same
SQL for both dialects; mixed into ``SqlStore``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from vdoctor.records import MemoryRecord
from vdoctor.stores.audit import FleetCounts, RecordVersion, count_groups, sort_versions
from vdoctor.stores.sqltypes import maybe_utc, to_utc

# Record columns in ``sqlbase.COLUMNS`` order, the source left out (it is read by ``get`` only).
_RECORD = (
    "vin, session_id, series, concluded_at, summary, summary_vec, root_cause, fix_action, priority, dtc_codes, "
    "recheck_ok, prompt_version, valid, updated_at, kind, merged_sessions, '' AS source, omitted, "
    "opened_ts, verified_ts, invalid_ts"
)


class _Reads(Protocol):
    table: str

    @property
    def history_table(self) -> str: ...

    def query(self, sql: str, params: Sequence[object] | None = None) -> list[tuple[Any, ...]]: ...

    def from_row(self, row: Sequence[Any]) -> MemoryRecord: ...


def _versions(store: _Reads, where: str, params: Sequence[object], tail: str = "") -> list[RecordVersion]:
    """Current versions (open-ended) and archived ones of the rows ``where`` selects."""
    found: list[RecordVersion] = []
    for table, archived in ((store.table, False), (store.history_table, True)):
        end = "version_to" if archived else "NULL"
        for row in store.query(f"SELECT {_RECORD}, version_from, {end} FROM {table} WHERE {where}{tail}", params):
            record = store.from_row(row[:-2])
            start = record.concluded_at if row[-2] is None else to_utc(row[-2])
            found.append(RecordVersion(record, start, maybe_utc(row[-1])))
    return found


class SqlAudit:
    """``StoreAudit`` for ``SqlStore``."""

    def versions(self: _Reads, vin: str) -> list[RecordVersion]:
        return sort_versions(_versions(self, "vin = %s", [vin]))

    def series_versions(self: _Reads, series: str, limit: int) -> list[RecordVersion]:
        # Each table's newest ``limit``, then the newest ``limit`` of both.
        tail = " ORDER BY concluded_at DESC, session_id DESC, version_from DESC LIMIT %s"
        found = _versions(self, "series = %s", [series, int(limit)], tail)
        found.sort(key=lambda v: (v.record.concluded_at, v.record.session_id, v.version_from), reverse=True)
        return found[:limit]

    def fleet_counts(self: _Reads) -> FleetCounts:
        groups = self.query(
            f"SELECT series, kind, valid, recheck_ok, COUNT(*) FROM {self.table} "
            "GROUP BY series, kind, valid, recheck_ok ORDER BY series, kind, valid, recheck_ok"
        )
        vehicles = int(self.query(f"SELECT COUNT(DISTINCT vin) FROM {self.table}")[0][0])
        archived = int(self.query(f"SELECT COUNT(*) FROM {self.history_table}")[0][0])
        return FleetCounts(count_groups([(g[0], g[1], g[2], g[3], g[4]) for g in groups]), vehicles, archived)

    def recent(self: _Reads, limit: int) -> list[MemoryRecord]:
        rows = self.query(
            f"SELECT {_RECORD} FROM {self.table} ORDER BY concluded_at DESC, session_id DESC LIMIT %s", [int(limit)]
        )
        return [self.from_row(r) for r in rows]
