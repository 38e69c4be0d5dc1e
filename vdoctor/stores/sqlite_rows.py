"""Rows of the embedded store: records to and from SQLite values (epoch seconds, float32 blobs, JSON lists)."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import numpy as np

from vdoctor.errors import StoreError
from vdoctor.records import MemoryRecord, PackedVector, RecordKind
from vdoctor.retrieval.text import search_tokens
from vdoctor.stores.vecindex import OPEN_END


def epoch(value: datetime) -> int:
    return int(value.timestamp())


def as_int(value: object) -> int:
    """An integer column's value (sqlite hands back int, or str for vd_meta's text values)."""
    if isinstance(value, int | str):
        return int(value)
    raise StoreError(f"sqlite store: expected an integer, got {type(value).__name__}")


def from_epoch(value: int) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def maybe_epoch(value: datetime | None) -> int | None:
    return None if value is None else epoch(value)


def maybe_time(value: object) -> datetime | None:
    return None if value is None else from_epoch(as_int(value))


def to_row(r: MemoryRecord, no_priority: str | None = None) -> tuple[object, ...]:
    return (
        r.vin,
        r.session_id,
        r.series,
        epoch(r.concluded_at),
        r.summary,
        np.asarray(r.summary_vec, dtype=np.float32).tobytes(),
        r.root_cause,
        r.fix_action,
        no_priority if r.priority is None else r.priority,
        json.dumps(r.dtc_codes),
        None if r.recheck_ok is None else int(r.recheck_ok),
        r.prompt_version,
        int(r.valid),
        epoch(r.updated_at),
        r.kind.value,
        json.dumps(r.merged_sessions),
        r.source,
        json.dumps(r.omitted),
        maybe_epoch(r.opened_ts),
        maybe_epoch(r.verified_ts),
        maybe_epoch(r.invalid_ts),
        r.alert_text,
        r.embedder,
        search_tokens(r.alert_text, r.dtc_codes, r.root_cause, r.fix_action, r.summary),
    )


def from_row(row: Sequence[object]) -> MemoryRecord:
    """A record from its row. Rows were validated when written (``upsert``), so they are not validated again."""
    vin, sid, series, concluded, summary, vec, cause, fix, prio, codes = row[:10]
    ok, pv, valid, upd, kind, merged, src, om = row[10:18]
    opened, verified, invalid, alert, embedder = row[18:23]
    return MemoryRecord.from_store(
        vin=str(vin),
        session_id=str(sid),
        series=str(series),
        concluded_at=from_epoch(as_int(concluded)),
        summary=str(summary),
        summary_vec=PackedVector(vec),  # type: ignore[arg-type]  # a BLOB column: bytes
        root_cause=str(cause),
        fix_action=str(fix),
        priority=prio or None,
        dtc_codes=json.loads(str(codes)),
        recheck_ok=None if ok is None else bool(ok),
        prompt_version=str(pv),
        valid=bool(valid),
        updated_at=from_epoch(as_int(upd)),
        kind=RecordKind(str(kind)),
        merged_sessions=json.loads(str(merged)),
        source=str(src),
        omitted=json.loads(str(om)),
        opened_ts=maybe_time(opened),
        verified_ts=maybe_time(verified),
        invalid_ts=maybe_time(invalid),
        alert_text=str(alert),
        embedder=str(embedder),
    )


# No event time is at or after this one: the start of a record that no session ever gets.
NEVER = datetime.max.replace(tzinfo=UTC)
# When a similar-case query admits a decoded record (``admission``): (vin, series, since, until, invalid_ts).
Admission = tuple[str, str, datetime, datetime | None, datetime | None]


def admission(record: MemoryRecord) -> Admission:
    """When ``query.admits(record.as_of(query.as_of))`` holds, worked out once per decoded record.

    It holds exactly when the query's vehicle is not ``vin``, its series is ``series`` and ``since <= at``
    and (``until`` is None or ``at < until``), ``at`` being its time: ``as_of`` drops a verdict given after
    ``at`` and an invalidation after it, and ``admits`` then wants the verdict true, given and the case
    concluded by ``at``, and the record valid. ``invalid_ts``: the record is taken as of ``at`` (a copy)
    when it is after ``at``. A rule added to ``SimilarQuery.admits`` or ``MemoryRecord.as_of`` goes here too.
    """
    verified, invalid = record.verified_ts, record.invalid_ts
    since = NEVER
    final = record.kind is RecordKind.FINAL
    if final and record.recheck_ok is True and verified is not None and (record.valid or invalid is not None):
        since = max(verified, record.concluded_at)
    return record.vin, record.series, since, None if record.valid else invalid, invalid


class DecodedRows:
    """Records decoded from their rows, kept by (row id, change seq), least recently used out first.

    Recall reads its candidates' rows (about 30 per session open on a fleet
    replay, up to 100) to rerank them, and most of them are read again by the
    next session of the same series; own history reads a vehicle's records
    again at each of its session opens (two in three come from here on a
    replay). Decoding a row (three JSON lists, the times, the model) was most
    of a recall's own CPU.
    Every statement that changes a row stamps it with the next change seq, so
    a row read with a seq already seen holds what was decoded then: no entry
    can be stale. A record is immutable, so threads share it. About 3 KB each
    with a 512-dimensional vector (kept as its bytes: ``PackedVector``).
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        # Each with its ``admission``, worked out when it is decoded.
        self._records: OrderedDict[tuple[int, int], tuple[MemoryRecord, Admission]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._records)

    def get(self, key: int, seq: int) -> MemoryRecord | None:
        """The record decoded for (key, seq), if it still is here."""
        entry = self.entries([key], {key: seq})[0]
        return None if entry is None else entry[0]

    def entries(
        self, keys: Sequence[int], seqs: Mapping[int, int | None]
    ) -> list[tuple[MemoryRecord, Admission] | None]:
        """Each key's record with its ``admission``, as ``get(key, seqs[key])`` finds it, in turn (None where
        its seq is not known), under one lock."""
        records = self._records
        found: list[tuple[MemoryRecord, Admission] | None] = []
        with self._lock:
            for key in keys:
                seq = seqs.get(key)
                entry = None
                if seq is not None and (entry := records.get((key, seq))) is not None:
                    records.move_to_end((key, seq))
                found.append(entry)
        return found

    def record(self, key: int, seq: int, row: Sequence[object]) -> MemoryRecord:
        """The record of ``row`` (a ``RECORD_COLUMNS`` row), decoded once per (key, seq)."""
        found = self.get(key, seq)
        if found is not None:
            return found
        record = from_row(row)
        entry = record, admission(record)
        with self._lock:
            self._records[(key, seq)] = entry
            while len(self._records) > self._capacity:
                self._records.popitem(last=False)
        return record


def eligible_span(
    ok: object, verified: object, version_from: object, invalid: object, version_to: object
) -> tuple[int, int] | None:
    """The event-time span [start, end) in which a version is verified and valid (None: never)."""
    if ok != 1 or verified is None or version_from is None:
        return None
    start = max(as_int(verified), as_int(version_from))
    end = min(OPEN_END if invalid is None else as_int(invalid), OPEN_END if version_to is None else as_int(version_to))
    return (start, end) if start < end else None
