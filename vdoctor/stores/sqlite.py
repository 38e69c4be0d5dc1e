"""The embedded L3 backend: one SQLite file, no server (the default store).

Vectors are stored as float32 blobs. Similar-case search filters in SQL
(series, verified, valid, other VINs) and scores the candidates with numpy.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from vdoctor.errors import StoreError
from vdoctor.records import MemoryRecord, utc_now
from vdoctor.stores.base import Scored, SimilarQuery, top_k

# Several Flink subtasks (threads or processes) may write one file: wait for
# the lock rather than fail.
BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS case_memory (
    vin TEXT NOT NULL,
    session_id TEXT NOT NULL,
    series TEXT NOT NULL,
    concluded_at INTEGER NOT NULL,
    summary TEXT NOT NULL,
    summary_vec BLOB NOT NULL,
    root_cause TEXT NOT NULL,
    fix_action TEXT NOT NULL,
    priority TEXT NOT NULL,
    dtc_codes TEXT NOT NULL,
    recheck_ok INTEGER,
    prompt_version TEXT NOT NULL,
    valid INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (vin, session_id)
);
CREATE INDEX IF NOT EXISTS idx_similar ON case_memory (series, recheck_ok, valid);
CREATE INDEX IF NOT EXISTS idx_own ON case_memory (vin, concluded_at);
"""

_COLUMNS = (
    "vin, session_id, series, concluded_at, summary, summary_vec, root_cause, fix_action, "
    "priority, dtc_codes, recheck_ok, prompt_version, valid, updated_at"
)


def _epoch(value: datetime) -> int:
    return int(value.timestamp())


def _from_epoch(value: int) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def _to_row(r: MemoryRecord) -> tuple[object, ...]:
    return (
        r.vin,
        r.session_id,
        r.series,
        _epoch(r.concluded_at),
        r.summary,
        np.asarray(r.summary_vec, dtype=np.float32).tobytes(),
        r.root_cause,
        r.fix_action,
        r.priority,
        json.dumps(r.dtc_codes),
        None if r.recheck_ok is None else int(r.recheck_ok),
        r.prompt_version,
        int(r.valid),
        _epoch(r.updated_at),
    )


def _from_row(row: tuple[object, ...]) -> MemoryRecord:
    (vin, sid, series, concluded, summary, vec, cause, fix, prio, codes, ok, pv, valid, upd) = row
    return MemoryRecord(
        vin=str(vin),
        session_id=str(sid),
        series=str(series),
        concluded_at=_from_epoch(int(concluded)),  # type: ignore[call-overload]
        summary=str(summary),
        summary_vec=np.frombuffer(vec, dtype=np.float32).tolist(),  # type: ignore[call-overload]
        root_cause=str(cause),
        fix_action=str(fix),
        priority=prio,  # type: ignore[arg-type]
        dtc_codes=json.loads(str(codes)),
        recheck_ok=None if ok is None else bool(ok),
        prompt_version=str(pv),
        valid=bool(valid),
        updated_at=_from_epoch(int(upd)),  # type: ignore[call-overload]
    )


class SqliteStore:
    """SQLite-backed L3 store; one connection guarded by a lock (shared by worker threads)."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            if path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False, isolation_level=None
            )
            self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as e:
            raise StoreError(f"cannot open the sqlite store at {path}: {e}") from e
        self._lock = threading.Lock()

    def _query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        try:
            with self._lock:
                return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"sqlite store {self.path}: {e}") from e

    def _write(self, sql: str, params: tuple[object, ...]) -> int:
        """Run one statement and return the rows it changed."""
        try:
            with self._lock:
                return self._conn.execute(sql, params).rowcount
        except sqlite3.Error as e:
            raise StoreError(f"sqlite store {self.path}: {e}") from e

    def upsert(self, record: MemoryRecord) -> None:
        placeholders = ", ".join("?" * 14)
        self._write(f"INSERT OR REPLACE INTO case_memory ({_COLUMNS}) VALUES ({placeholders})", _to_row(record))

    def get(self, vin: str, session_id: str) -> MemoryRecord | None:
        rows = self._query(f"SELECT {_COLUMNS} FROM case_memory WHERE vin = ? AND session_id = ?", (vin, session_id))
        return _from_row(rows[0]) if rows else None

    def own_history(self, vin: str, since: datetime, limit: int) -> list[MemoryRecord]:
        rows = self._query(
            f"SELECT {_COLUMNS} FROM case_memory WHERE vin = ? AND valid = 1 AND concluded_at >= ? "
            "ORDER BY concluded_at DESC, session_id DESC LIMIT ?",
            (vin, _epoch(since), limit),
        )
        return [_from_row(r) for r in rows]

    def similar(self, query: SimilarQuery) -> list[Scored]:
        rows = self._query(
            f"SELECT {_COLUMNS} FROM case_memory WHERE series = ? AND recheck_ok = 1 AND valid = 1 AND vin <> ?",
            (query.series, query.exclude_vin),
        )
        if not rows:
            return []
        records = [_from_row(r) for r in rows]
        matrix = np.asarray([r.summary_vec for r in records], dtype=np.float32)
        return top_k(records, matrix, query.vector, query.k)

    def set_recheck(self, vin: str, session_id: str, ok: bool) -> bool:
        changed = self._write(
            "UPDATE case_memory SET recheck_ok = ?, updated_at = ? WHERE vin = ? AND session_id = ?",
            (int(ok), _epoch(utc_now()), vin, session_id),
        )
        return changed > 0

    def soft_delete(self, vin: str) -> int:
        return self._write(
            "UPDATE case_memory SET valid = 0, updated_at = ? WHERE vin = ? AND valid = 1",
            (_epoch(utc_now()), vin),
        )

    def history(self, vin: str) -> list[MemoryRecord]:
        rows = self._query(
            f"SELECT {_COLUMNS} FROM case_memory WHERE vin = ? ORDER BY concluded_at DESC, session_id DESC",
            (vin,),
        )
        return [_from_row(r) for r in rows]

    def count(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM case_memory")[0][0])  # type: ignore[call-overload]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
