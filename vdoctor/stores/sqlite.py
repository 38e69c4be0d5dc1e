"""The embedded L3 backend: one SQLite file, no server (the default store).

Vectors are stored as float32 blobs. Similar-case search runs on an exact
per-series vector index kept beside the file (``<db>.vecindex/``, see
``vecindex``); the winning rows are then read back from SQL with every filter
(series, verified, valid, other VINs) applied again.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from vdoctor.errors import StoreError
from vdoctor.records import MemoryRecord, utc_now
from vdoctor.stores.base import Scored, SimilarQuery
from vdoctor.stores.vecindex import SeriesVectorIndex

log = logging.getLogger(__name__)

# Several Flink subtasks (threads or processes) may write one file: wait for
# the lock rather than fail.
BUSY_TIMEOUT_MS = 30_000
# Page cache of each per-thread read connection, in KiB.
READER_CACHE_KIB = 512

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
    priority TEXT,
    dtc_codes TEXT NOT NULL,
    recheck_ok INTEGER,
    prompt_version TEXT NOT NULL,
    valid INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    kind TEXT NOT NULL DEFAULT 'final',
    merged_sessions TEXT NOT NULL DEFAULT '[]',
    source TEXT NOT NULL DEFAULT '',
    omitted TEXT NOT NULL DEFAULT '[]',
    seq INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (vin, session_id)
);
CREATE INDEX IF NOT EXISTS idx_similar ON case_memory (series, recheck_ok, valid);
CREATE INDEX IF NOT EXISTS idx_own ON case_memory (vin, concluded_at);
CREATE INDEX IF NOT EXISTS idx_prompt ON case_memory (prompt_version);
CREATE TABLE IF NOT EXISTS vd_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO vd_meta (key, value) VALUES ('seq', '0');
"""
# Files written before the change sequence existed get the column on open.
_MIGRATE_SEQ = "ALTER TABLE case_memory ADD COLUMN seq INTEGER NOT NULL DEFAULT 0"
# ... and the write-policy columns (record kind, merged sessions, summary source).
_MIGRATE_COLUMNS = {
    "kind": "ALTER TABLE case_memory ADD COLUMN kind TEXT NOT NULL DEFAULT 'final'",
    "merged_sessions": "ALTER TABLE case_memory ADD COLUMN merged_sessions TEXT NOT NULL DEFAULT '[]'",
    "source": "ALTER TABLE case_memory ADD COLUMN source TEXT NOT NULL DEFAULT ''",
    "omitted": "ALTER TABLE case_memory ADD COLUMN omitted TEXT NOT NULL DEFAULT '[]'",
}
# A milestone may have no priority yet: NULL. Files made before that have
# priority NOT NULL, which SQLite cannot relax in place; there '' stands for it.
_LEGACY_NO_PRIORITY = ""
_SEQ_INDEX = "CREATE INDEX IF NOT EXISTS idx_seq ON case_memory (seq)"
# Every statement that changes a row stamps it with the next change seq, and
# the trigger moves vd_meta's seq along, in the statement's own transaction:
# a one-record write is a single statement (see ``_write``).
_NEXT_SEQ = "(SELECT CAST(value AS INTEGER) + 1 FROM vd_meta WHERE key = 'seq')"
_SEQ_TRIGGERS = [
    f"""CREATE TRIGGER IF NOT EXISTS vd_seq_after_{when.split()[0].lower()} AFTER {when} ON case_memory
    BEGIN UPDATE vd_meta SET value = NEW.seq WHERE key = 'seq' AND CAST(value AS INTEGER) < NEW.seq; END"""
    for when in ("INSERT", "UPDATE OF seq")
]

_COLUMNS = (
    "vin, session_id, series, concluded_at, summary, summary_vec, root_cause, fix_action, "
    "priority, dtc_codes, recheck_ok, prompt_version, valid, updated_at, kind, merged_sessions, source, omitted"
)
_FIELDS = [c.strip() for c in _COLUMNS.split(",")]
# Upsert in place (keeps the rowid, which names the row in the vector index).
_UPSERT = (
    f"INSERT INTO case_memory ({_COLUMNS}, seq) VALUES ({', '.join('?' * len(_FIELDS))}, {_NEXT_SEQ}) "
    "ON CONFLICT (vin, session_id) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in [*_FIELDS[2:], "seq"])
)


def _epoch(value: datetime) -> int:
    return int(value.timestamp())


def _int(value: object) -> int:
    """An integer column's value (sqlite hands back int, or str for vd_meta's text values)."""
    if isinstance(value, int | str):
        return int(value)
    raise StoreError(f"sqlite store: expected an integer, got {type(value).__name__}")


def _from_epoch(value: int) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def _to_row(r: MemoryRecord, no_priority: str | None = None) -> tuple[object, ...]:
    return (
        r.vin,
        r.session_id,
        r.series,
        _epoch(r.concluded_at),
        r.summary,
        np.asarray(r.summary_vec, dtype=np.float32).tobytes(),
        r.root_cause,
        r.fix_action,
        no_priority if r.priority is None else r.priority,
        json.dumps(r.dtc_codes),
        None if r.recheck_ok is None else int(r.recheck_ok),
        r.prompt_version,
        int(r.valid),
        _epoch(r.updated_at),
        r.kind.value,
        json.dumps(r.merged_sessions),
        r.source,
        json.dumps(r.omitted),
    )


def _from_row(row: tuple[object, ...]) -> MemoryRecord:
    vin, sid, series, concluded, summary, vec, cause, fix, prio, codes = row[:10]
    ok, pv, valid, upd, kind, merged, src, om = row[10:18]
    return MemoryRecord(
        vin=str(vin),
        session_id=str(sid),
        series=str(series),
        concluded_at=_from_epoch(_int(concluded)),
        summary=str(summary),
        summary_vec=np.frombuffer(vec, dtype=np.float32).tolist(),  # type: ignore[call-overload]
        root_cause=str(cause),
        fix_action=str(fix),
        priority=prio or None,
        dtc_codes=json.loads(str(codes)),
        recheck_ok=None if ok is None else bool(ok),
        prompt_version=str(pv),
        valid=bool(valid),
        updated_at=_from_epoch(_int(upd)),
        kind=str(kind),
        merged_sessions=json.loads(str(merged)),
        source=str(src),
        omitted=json.loads(str(om)),
    )


class SqliteStore:
    """SQLite-backed L3 store; one connection guarded by a lock (shared by worker threads)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._index: SeriesVectorIndex | None = None
        self._index_dir = None if path == ":memory:" else Path(path + ".vecindex")
        self._saved_seq = -1
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
            info = list(self._conn.execute("PRAGMA table_info(case_memory)"))
            columns = {row[1] for row in info}
            # How this file writes "no priority yet": NULL, or '' in a file whose column predates it.
            self._no_priority = _LEGACY_NO_PRIORITY if any(r[1] == "priority" and r[3] for r in info) else None
            if "seq" not in columns:
                self._conn.execute(_MIGRATE_SEQ)
            for column, statement in _MIGRATE_COLUMNS.items():
                if column not in columns:
                    self._conn.execute(statement)
            self._conn.execute(_SEQ_INDEX)
            for trigger in _SEQ_TRIGGERS:
                self._conn.execute(trigger)
            # The epoch names this database, so an index folder copied from
            # another file is never mistaken for this one's.
            self._conn.execute("INSERT OR IGNORE INTO vd_meta (key, value) VALUES ('epoch', ?)", (uuid.uuid4().hex,))
            self._epoch = str(self._conn.execute("SELECT value FROM vd_meta WHERE key = 'epoch'").fetchone()[0])
        except (sqlite3.Error, OSError) as e:
            raise StoreError(f"cannot open the sqlite store at {path}: {e}") from e
        # Writes go through the one connection above, one at a time. Reads use a
        # connection per thread and no lock: in WAL mode readers never wait for
        # each other or for the writer. (A shared connection behind a lock made
        # a lock convoy: the sqlite module lets go of the GIL inside every
        # statement, so the holder had to queue for the GIL again while 63
        # other vehicles' runs queued for the lock.) An in-memory database
        # exists only on its own connection, so it keeps the shared one.
        self._lock = threading.Lock()
        self._index_guard = threading.Lock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []

    def _reader(self) -> sqlite3.Connection | None:
        """This thread's read connection; None for an in-memory database (use the shared one)."""
        if self.path == ":memory:":
            return None
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            # Small indexed lookups: a small page cache each (sqlite's default is
            # 2 MB per connection, 128 MB for 64 worker threads).
            conn.execute(f"PRAGMA cache_size = -{READER_CACHE_KIB}")
            with self._lock:
                self._readers.append(conn)
            self._local.conn = conn
        return conn

    def _query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        try:
            reader = self._reader()
            if reader is not None:
                return reader.execute(sql, params).fetchall()
            with self._lock:
                return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"sqlite store {self.path}: {e}") from e

    def _write(self, sql: str, rows: list[tuple[object, ...]]) -> int:
        """Run one statement per parameter row in one transaction (each changed row gets the next seq).

        One row is one statement in autocommit: the sqlite module lets go of
        the GIL inside every statement, and the writer must win it back each
        time while holding the write lock, so a write of four statements
        (begin, seq, upsert, commit) held the lock about four times as long.
        """
        try:
            with self._lock:
                if len(rows) == 1:
                    return int(self._conn.execute(sql, rows[0]).rowcount)
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    changed = sum(self._conn.execute(sql, params).rowcount for params in rows)
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                return changed
        except sqlite3.Error as e:
            raise StoreError(f"sqlite store {self.path}: {e}") from e

    def upsert(self, record: MemoryRecord) -> None:
        self.upsert_many([record])

    def upsert_many(self, records: list[MemoryRecord]) -> None:
        if records:
            self._write(_UPSERT, [_to_row(r, self._no_priority) for r in records])

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

    # -- similar cases: the vector index -------------------------------------------------

    def _seq(self) -> int:
        return _int(self._query("SELECT value FROM vd_meta WHERE key = 'seq'")[0][0])

    def _catch_up(self, db_seq: int) -> SeriesVectorIndex:
        """Load or rebuild the index on first use, then apply rows changed up to ``db_seq`` or later."""
        if self._index is None:
            loaded = SeriesVectorIndex.load(self._index_dir, self._epoch) if self._index_dir else None
            if loaded is None or loaded.seq > db_seq:
                log.info("building the vector index of %s", self.path)
                loaded = SeriesVectorIndex()
                loaded.seq = -1
            else:
                self._saved_seq = loaded.seq
            self._index = loaded
        index = self._index
        if db_seq != index.seq:
            db_seq = self._seq()  # rows may have changed since the caller looked: take them all
            rows = self._query(
                "SELECT rowid, series, vin, recheck_ok, valid, summary_vec FROM case_memory WHERE seq > ? ORDER BY seq",
                (index.seq,),
            )
            for rowid, series, vin, ok, valid, vec in rows:
                eligible = ok == 1 and valid == 1
                vector = np.frombuffer(vec, dtype=np.float32) if eligible else None  # type: ignore[call-overload]
                index.apply(int(rowid), str(series), str(vin), eligible, vector)  # type: ignore[call-overload]
            index.seq = db_seq
        return index

    def similar(self, query: SimilarQuery) -> list[Scored]:
        # The change seq is read before the guard: when the index is current
        # (the usual case), the guard is held for the search alone.
        db_seq = self._seq()
        with self._index_guard:
            hits = self._catch_up(db_seq).search(query.series, query.exclude_vin, query.vector, query.k)
        if not hits:
            return []
        scores = dict(hits)
        marks = ", ".join("?" * len(hits))
        rows = self._query(
            f"SELECT rowid, {_COLUMNS} FROM case_memory WHERE rowid IN ({marks}) "
            "AND series = ? AND recheck_ok = 1 AND valid = 1 AND vin <> ?",
            (*scores, query.series, query.exclude_vin),
        )
        found = [Scored(_from_row(row[1:]), scores[int(row[0])]) for row in rows]  # type: ignore[call-overload]
        found.sort(key=lambda s: -s.score)
        return found

    # -- updates ---------------------------------------------------------------------------

    def set_recheck(self, vin: str, session_id: str, ok: bool) -> bool:
        changed = self._write(
            f"UPDATE case_memory SET recheck_ok = ?, updated_at = ?, seq = {_NEXT_SEQ} "
            "WHERE vin = ? AND session_id = ?",
            [(int(ok), _epoch(utc_now()), vin, session_id)],
        )
        return changed > 0

    def soft_delete(self, vin: str) -> int:
        return self._write(
            f"UPDATE case_memory SET valid = 0, updated_at = ?, seq = {_NEXT_SEQ} WHERE vin = ? AND valid = 1",
            [(_epoch(utc_now()), vin)],
        )

    def history(self, vin: str) -> list[MemoryRecord]:
        rows = self._query(
            f"SELECT {_COLUMNS} FROM case_memory WHERE vin = ? ORDER BY concluded_at DESC, session_id DESC",
            (vin,),
        )
        return [_from_row(r) for r in rows]

    def by_prompt_version(self, prompt_version: str, limit: int) -> list[MemoryRecord]:
        rows = self._query(
            f"SELECT {_COLUMNS} FROM case_memory WHERE prompt_version = ? AND valid = 1 "
            "ORDER BY vin, session_id LIMIT ?",
            (prompt_version, limit),
        )
        return [_from_row(r) for r in rows]

    def prompt_versions(self) -> list[str]:
        rows = self._query("SELECT DISTINCT prompt_version FROM case_memory WHERE valid = 1")
        return sorted(str(r[0]) for r in rows)

    def find_duplicate(self, vin: str, root_cause: str, since: datetime) -> MemoryRecord | None:
        rows = self._query(
            f"SELECT {_COLUMNS} FROM case_memory WHERE vin = ? AND valid = 1 AND root_cause = ? "
            "AND concluded_at >= ? ORDER BY concluded_at DESC, session_id DESC LIMIT 1",
            (vin, root_cause, _epoch(since)),
        )
        return _from_row(rows[0]) if rows else None

    def count(self) -> int:
        return _int(self._query("SELECT COUNT(*) FROM case_memory")[0][0])

    def save_index(self) -> None:
        """Persist the vector index (also done on close), so the next start need not rebuild it."""
        with self._index_guard:
            if self._index is None or self._index_dir is None or self._index.seq == self._saved_seq:
                return
            try:
                self._index.save(self._index_dir, self._epoch)
                self._saved_seq = self._index.seq
            except OSError as e:
                # The index is a cache: losing it costs a rebuild, never data.
                log.warning("could not save the vector index of %s: %s", self.path, e)

    def close(self) -> None:
        self.save_index()
        with self._lock:
            for reader in self._readers:
                reader.close()
            self._readers.clear()
            self._conn.close()
