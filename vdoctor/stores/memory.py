"""The in-memory twin of the store: the reference semantics, and a fast test tier.

Each record is its current version (with the event time it started,
``version_from``) plus the versions it replaced (``[version_from,
version_to)``). A read as of T takes, per record, the one version whose span
holds T, then applies the event-time filters to it (``base`` module doc).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from vdoctor.records import MemoryRecord, utc_now
from vdoctor.retrieval.bm25 import Bm25Corpus, top_scored
from vdoctor.retrieval.text import record_dense_text, record_text
from vdoctor.retrieval.tokens import query_terms, tokens
from vdoctor.stores.audit import FleetCounts, RecordVersion, count_groups, sort_versions
from vdoctor.stores.base import (
    Scored,
    SimilarQuery,
    StaleVersion,
    check_dimensions,
    check_embedders,
    effective_at,
    invalidated_earlier,
    newest_duplicate,
    newest_first,
    recheck_write,
    separate_channels,
    stale_recheck,
    top_k,
    upsert_version_from,
)


@dataclass
class _Versions:
    current: MemoryRecord
    current_from: datetime
    # (version_from, version_to, record) of the versions this record replaced, oldest first.
    archived: list[tuple[datetime, datetime, MemoryRecord]] = field(default_factory=list)

    def archive(self, until: datetime) -> None:
        if until > self.current_from:
            self.archived = [a for a in self.archived if a[0] != self.current_from]
            self.archived.append((self.current_from, until, self.current))

    def at(self, t: datetime) -> MemoryRecord | None:
        """The version current at ``t``, taken as of ``t``; None before the record existed."""
        if self.current_from <= t:
            return self.current.as_of(t)
        for start, end, record in self.archived:
            if start <= t < end:
                return record.as_of(t)
        return None


class InMemoryStore:
    """Dict-backed store; thread-safe so that concurrent agent runs can share it."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], _Versions] = {}
        # Per-VIN keys, so per-vehicle reads do not scan the fleet.
        self._by_vin: dict[str, set[tuple[str, str]]] = {}
        self._lock = threading.Lock()

    def _of(self, vin: str) -> list[_Versions]:
        return [self._rows[key] for key in self._by_vin.get(vin, ())]

    def upsert(self, record: MemoryRecord) -> None:
        with self._lock:
            key = (record.vin, record.session_id)
            copy = record.model_copy(deep=True)
            row = self._rows.get(key)
            if row is None:
                self._rows[key] = _Versions(copy, copy.concluded_at)
                self._by_vin.setdefault(record.vin, set()).add(key)
                return
            start = upsert_version_from(row.current_from, record.concluded_at)
            row.archive(start)
            row.current, row.current_from = copy, start

    def upsert_many(self, records: list[MemoryRecord]) -> None:
        for record in records:
            self.upsert(record)

    def get(self, vin: str, session_id: str) -> MemoryRecord | None:
        with self._lock:
            row = self._rows.get((vin, session_id))
            return row.current.model_copy(deep=True) if row else None

    def own_history(self, vin: str, since: datetime, limit: int, as_of: datetime) -> list[MemoryRecord]:
        with self._lock:
            seen = [r for row in self._of(vin) if (r := row.at(as_of)) is not None]
        rows = [r for r in seen if r.valid and since <= r.concluded_at <= as_of]
        return [r.model_copy(deep=True, update={"source": ""}) for r in newest_first(rows, limit)]

    def _admitted(self, query: SimilarQuery) -> list[MemoryRecord]:
        with self._lock:
            seen = [r for row in self._rows.values() if (r := row.at(query.as_of)) is not None]
        return [r.model_copy(update={"source": ""}) for r in seen if query.admits(r)]

    def similar(self, query: SimilarQuery) -> list[Scored]:
        rows = self._admitted(query)
        check_dimensions(query, {len(r.summary_vec) for r in rows})
        check_embedders(query, {r.embedder for r in rows})
        if not rows:
            return []
        matrix = np.asarray([r.summary_vec for r in rows], dtype=np.float32)
        return top_k(rows, matrix, query.vector, query.k)

    def lexical(self, query: SimilarQuery) -> list[Scored]:
        """Exact BM25 over the admitted records (the reference the other backends approximate)."""
        rows = self._admitted(query)
        terms = query_terms(query.text)
        if not rows or not terms:
            return []
        scores = Bm25Corpus([tokens(record_text(r)) for r in rows]).scores(terms)
        return [Scored(rows[i], score) for i, score in top_scored(scores, query.k)]

    def channels(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> tuple[list[Scored], list[Scored]]:
        return separate_channels(self, query, dense_k, lexical_k)

    def _stale(self, embedder: str) -> list[StaleVersion]:
        with self._lock:
            found = []
            for row in self._rows.values():
                versions = [(row.current_from, False, row.current)]
                versions += [(start, True, record) for start, _, record in row.archived]
                found += [
                    StaleVersion(r.vin, r.session_id, start, archived, record_dense_text(r), r.embedder)
                    for start, archived, r in versions
                    if r.embedder != embedder
                ]
        return found

    def count_stale(self, embedder: str) -> int:
        return len(self._stale(embedder))

    def stale_versions(self, embedder: str, limit: int) -> list[StaleVersion]:
        return self._stale(embedder)[:limit]

    def set_vectors(self, rows: list[tuple[StaleVersion, list[float]]], embedder: str) -> int:
        done = 0
        with self._lock:
            for version, vector in rows:
                row = self._rows.get((version.vin, version.session_id))
                if row is None:
                    continue
                update = {"summary_vec": list(vector), "embedder": embedder}
                if not version.archived:
                    if row.current_from == version.version_from and row.current.embedder == version.embedder:
                        row.current = row.current.model_copy(update=update)
                        done += 1
                    continue
                for i, (start, end, record) in enumerate(row.archived):
                    if start == version.version_from and record.embedder == version.embedder:
                        row.archived[i] = (start, end, record.model_copy(update=update))
                        done += 1
        return done

    def set_recheck(self, vin: str, session_id: str, ok: bool, at: datetime) -> bool:
        with self._lock:
            row = self._rows.get((vin, session_id))
            if row is None:
                return False
            cur = row.current
            if stale_recheck(bool(cur.merged_sessions), cur.concluded_at, at):
                return False
            change = recheck_write(cur.recheck_ok, cur.verified_ts, row.current_from, ok, at)
            if change.noop:
                return True
            if change.archive:
                row.archive(change.version_from)
            row.current = cur.model_copy(
                update={"recheck_ok": ok, "verified_ts": change.verified_ts, "updated_at": utc_now()}
            )
            row.current_from = change.version_from
            return True

    def soft_delete(self, vin: str, at: datetime) -> int:
        with self._lock:
            hits = [
                row
                for row in self._of(vin)
                if row.current.valid or invalidated_earlier(row.current.invalid_ts, row.current_from, at)
            ]
            for row in hits:
                invalid = effective_at(at, row.current_from)
                row.current = row.current.model_copy(
                    update={"valid": False, "invalid_ts": invalid, "updated_at": utc_now()}
                )
            return len(hits)

    def history(self, vin: str) -> list[MemoryRecord]:
        with self._lock:
            rows = [row.current.model_copy(deep=True) for row in self._of(vin)]
        return newest_first(rows, len(rows))

    def by_prompt_version(self, prompt_version: str, limit: int) -> list[MemoryRecord]:
        with self._lock:
            rows = [r.current for r in self._rows.values() if r.current.prompt_version == prompt_version]
        rows = [r for r in rows if r.valid]
        rows.sort(key=lambda r: (r.vin, r.session_id))
        return [r.model_copy(deep=True) for r in rows[:limit]]

    def prompt_versions(self) -> list[str]:
        with self._lock:
            return sorted({r.current.prompt_version for r in self._rows.values() if r.current.valid})

    def find_duplicate(
        self, vin: str, root_cause: str, since: datetime, until: datetime | None = None
    ) -> MemoryRecord | None:
        with self._lock:
            found = newest_duplicate((r.current for r in self._of(vin)), root_cause, since, until)
        return None if found is None else found.model_copy(deep=True)

    def count(self) -> int:
        with self._lock:
            return len(self._rows)

    # -- read-only views (stores.audit) -------------------------------------------------

    def _versions(self, rows: list[_Versions]) -> list[RecordVersion]:
        out = [RecordVersion(r.current.model_copy(update={"source": ""}), r.current_from, None) for r in rows]
        for r in rows:
            out += [RecordVersion(rec.model_copy(update={"source": ""}), a, b) for a, b, rec in r.archived]
        return out

    def versions(self, vin: str) -> list[RecordVersion]:
        with self._lock:
            return sort_versions(self._versions(self._of(vin)))

    def series_versions(self, series: str, limit: int) -> list[RecordVersion]:
        with self._lock:
            found = self._versions([r for r in self._rows.values() if r.current.series == series])
        found.sort(key=lambda v: (v.record.concluded_at, v.record.session_id, v.version_from), reverse=True)
        return found[:limit]

    def fleet_counts(self) -> FleetCounts:
        with self._lock:
            rows = [r.current for r in self._rows.values()]
            archived = sum(len(r.archived) for r in self._rows.values())
        groups: dict[tuple[object, object, object, object], int] = {}
        for r in rows:
            key = (r.series, r.kind.value, r.valid, r.recheck_ok)
            groups[key] = groups.get(key, 0) + 1
        return FleetCounts(
            count_groups([(*key, n) for key, n in sorted(groups.items(), key=str)]),
            vehicles=len({r.vin for r in rows}),
            archived_versions=archived,
        )

    def recent(self, limit: int) -> list[MemoryRecord]:
        with self._lock:
            rows = [r.current.model_copy(update={"source": ""}) for r in self._rows.values()]
        return newest_first(rows, limit)

    def close(self) -> None:
        pass
