"""The in-memory twin of the store: the reference semantics, and a fast test tier."""

from __future__ import annotations

import threading
from datetime import datetime

import numpy as np

from vdoctor.records import MemoryRecord, utc_now
from vdoctor.stores.base import Scored, SimilarQuery, top_k


class InMemoryStore:
    """Dict-backed store; thread-safe so that concurrent agent runs can share it."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], MemoryRecord] = {}
        # Per-VIN keys, so per-vehicle reads do not scan the fleet.
        self._by_vin: dict[str, set[tuple[str, str]]] = {}
        self._lock = threading.Lock()

    def _of(self, vin: str) -> list[MemoryRecord]:
        return [self._rows[key] for key in self._by_vin.get(vin, ())]

    def upsert(self, record: MemoryRecord) -> None:
        with self._lock:
            key = (record.vin, record.session_id)
            self._rows[key] = record.model_copy(deep=True)
            self._by_vin.setdefault(record.vin, set()).add(key)

    def upsert_many(self, records: list[MemoryRecord]) -> None:
        for record in records:
            self.upsert(record)

    def get(self, vin: str, session_id: str) -> MemoryRecord | None:
        with self._lock:
            row = self._rows.get((vin, session_id))
            return row.model_copy(deep=True) if row else None

    def own_history(self, vin: str, since: datetime, limit: int) -> list[MemoryRecord]:
        with self._lock:
            rows = [r for r in self._of(vin) if r.valid and r.concluded_at >= since]
        rows.sort(key=lambda r: (r.concluded_at, r.session_id), reverse=True)
        return [r.model_copy(deep=True) for r in rows[:limit]]

    def similar(self, query: SimilarQuery) -> list[Scored]:
        with self._lock:
            rows = [
                r
                for r in self._rows.values()
                if r.series == query.series and r.vin != query.exclude_vin and r.recheck_ok is True and r.valid
            ]
        if not rows:
            return []
        matrix = np.asarray([r.summary_vec for r in rows], dtype=np.float32)
        return top_k(rows, matrix, query.vector, query.k)

    def set_recheck(self, vin: str, session_id: str, ok: bool) -> bool:
        with self._lock:
            row = self._rows.get((vin, session_id))
            if row is None:
                return False
            self._rows[(vin, session_id)] = row.model_copy(update={"recheck_ok": ok, "updated_at": utc_now()})
            return True

    def soft_delete(self, vin: str) -> int:
        with self._lock:
            hits = [(r.vin, r.session_id) for r in self._of(vin) if r.valid]
            for key in hits:
                self._rows[key] = self._rows[key].model_copy(update={"valid": False, "updated_at": utc_now()})
            return len(hits)

    def history(self, vin: str) -> list[MemoryRecord]:
        with self._lock:
            rows = [r.model_copy(deep=True) for r in self._of(vin)]
        rows.sort(key=lambda r: (r.concluded_at, r.session_id), reverse=True)
        return rows

    def by_prompt_version(self, prompt_version: str, limit: int) -> list[MemoryRecord]:
        with self._lock:
            rows = [r for r in self._rows.values() if r.prompt_version == prompt_version and r.valid]
        rows.sort(key=lambda r: (r.vin, r.session_id))
        return [r.model_copy(deep=True) for r in rows[:limit]]

    def prompt_versions(self) -> list[str]:
        with self._lock:
            return sorted({r.prompt_version for r in self._rows.values() if r.valid})

    def find_duplicate(self, vin: str, root_cause: str, since: datetime) -> MemoryRecord | None:
        with self._lock:
            rows = [r for r in self._of(vin) if r.valid and r.root_cause == root_cause and r.concluded_at >= since]
        if not rows:
            return None
        return max(rows, key=lambda r: (r.concluded_at, r.session_id)).model_copy(deep=True)

    def count(self) -> int:
        with self._lock:
            return len(self._rows)

    def close(self) -> None:
        pass
