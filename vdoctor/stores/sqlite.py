"""The embedded L3 backend: one SQLite file, no server (the default store).

Vectors are stored as float32 blobs. Each record's current version lives in
``case_memory``, the versions it replaced in ``case_history`` (schema and
migration: ``sqlite_schema``). Similar-case search runs on an exact
per-series vector index kept beside the file (``<db>.vecindex/``, see
``vecindex``) that masks out, at query time, every version that was not
verified and valid at the asking session's event time; the winning rows are
then read back from SQL with every filter (series, other VINs, event times)
applied again.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from vdoctor.errors import StoreError
from vdoctor.records import MemoryRecord, utc_now
from vdoctor.stores.audit import FleetCounts, RecordVersion, count_groups, sort_versions
from vdoctor.stores.base import Scored, SimilarQuery, newest_first
from vdoctor.stores.sqlite_schema import (
    HISTORY_SELECT,
    NEXT_SEQ,
    RECORD_COLUMNS,
    RECORD_FIELDS,
    SCHEMA_VERSION,
    migrate,
    no_priority_marker,
)
from vdoctor.stores.vecindex import OPEN_END, SeriesVectorIndex

log = logging.getLogger(__name__)

# Several Flink subtasks (threads or processes) may write one file: wait for
# the lock rather than fail.
BUSY_TIMEOUT_MS = 30_000
# Page cache of each per-thread read connection, in KiB.
READER_CACHE_KIB = 512

_COLUMNS = RECORD_COLUMNS
# Upsert in place (keeps the rowid, which names the row in the vector index).
# A record that concludes later than the stored version started moves the
# version's start forward, and the archive trigger keeps the version it replaces.
_UPSERT = (
    f"INSERT INTO case_memory ({_COLUMNS}, version_from, seq) VALUES ({', '.join('?' * len(RECORD_FIELDS))}, ?, "
    f"{NEXT_SEQ}) ON CONFLICT (vin, session_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in [*RECORD_FIELDS[2:], "seq"])
    + ", version_from = MAX(case_memory.version_from, excluded.version_from)"
)
# A recheck (``base.recheck_write`` in SQL; every right-hand side reads the old row):
# a first verdict sets it at its time, the same verdict again changes nothing,
# an overturned verdict starts a new version (the trigger archives the old one).
_RECHECK = f"""UPDATE case_memory SET
    verified_ts = CASE WHEN recheck_ok IS NULL OR recheck_ok <> :ok THEN MAX(:at, version_from) ELSE verified_ts END,
    version_from = CASE WHEN recheck_ok IS NULL OR recheck_ok = :ok THEN version_from
                   ELSE MAX(:at, version_from) END,
    updated_at = CASE WHEN recheck_ok = :ok THEN updated_at ELSE :now END,
    recheck_ok = :ok,
    seq = {NEXT_SEQ}
WHERE vin = :vin AND session_id = :sid"""
_SOFT_DELETE = (
    f"UPDATE case_memory SET valid = 0, invalid_ts = MAX(?, version_from), updated_at = ?, seq = {NEXT_SEQ} "
    "WHERE vin = ? AND valid = 1"
)
# Recall reads leave the summary source out (it is for re-extraction only, and the largest column).
_RECALL_COLUMNS = _COLUMNS.replace(", source,", ", '' AS source,")
# A record's version current at event time :at, not invalidated at or before it.
_AS_OF = "version_from <= :at AND concluded_at <= :at AND (invalid_ts IS NULL OR invalid_ts > :at)"
_AS_OF_ARCHIVED = _AS_OF + " AND version_to > :at"
_VERIFIED = "recheck_ok = 1 AND verified_ts <= :at"


def _epoch(value: datetime) -> int:
    return int(value.timestamp())


def _int(value: object) -> int:
    """An integer column's value (sqlite hands back int, or str for vd_meta's text values)."""
    if isinstance(value, int | str):
        return int(value)
    raise StoreError(f"sqlite store: expected an integer, got {type(value).__name__}")


def _from_epoch(value: int) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def _maybe_epoch(value: datetime | None) -> int | None:
    return None if value is None else _epoch(value)


def _maybe_time(value: object) -> datetime | None:
    return None if value is None else _from_epoch(_int(value))


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
        _maybe_epoch(r.opened_ts),
        _maybe_epoch(r.verified_ts),
        _maybe_epoch(r.invalid_ts),
    )


def _from_row(row: Sequence[object]) -> MemoryRecord:
    vin, sid, series, concluded, summary, vec, cause, fix, prio, codes = row[:10]
    ok, pv, valid, upd, kind, merged, src, om = row[10:18]
    opened, verified, invalid = row[18:21]
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
        opened_ts=_maybe_time(opened),
        verified_ts=_maybe_time(verified),
        invalid_ts=_maybe_time(invalid),
    )


def _version_of(row: Sequence[object]) -> RecordVersion:
    """A record row followed by (version_from, version_to); a row migrated without a start begins at its conclusion."""
    record = _from_row(row[:-2])
    start = record.concluded_at if row[-2] is None else _from_epoch(_int(row[-2]))
    return RecordVersion(record, start, _maybe_time(row[-1]))


def _span(
    ok: object, verified: object, version_from: object, invalid: object, version_to: object
) -> tuple[int, int] | None:
    """The event-time span [start, end) in which a version is verified and valid (None: never)."""
    if ok != 1 or verified is None or version_from is None:
        return None
    start = max(_int(verified), _int(version_from))
    end = min(OPEN_END if invalid is None else _int(invalid), OPEN_END if version_to is None else _int(version_to))
    return (start, end) if start < end else None


class SqliteStore:
    """SQLite-backed L3 store; one connection guarded by a lock (shared by worker threads)."""

    def __init__(self, path: str, read_only: bool = False) -> None:
        """Open (creating and migrating) the file; ``read_only`` opens an existing, current file for reads only.

        A read-only store never writes the file (SQLite refuses any write on
        the connection) nor its vector index folder: the index is loaded and
        caught up in memory. A file an older version wrote must be opened
        once read-write (by the job or any ``vdoctor memory`` command) first.
        """
        self.path = path
        self.read_only = read_only
        self._index: SeriesVectorIndex | None = None
        self._index_dir = None if path == ":memory:" else Path(path + ".vecindex")
        self._saved_seq = -1
        if read_only and (path == ":memory:" or not Path(path).is_file()):
            raise StoreError(f"cannot open the sqlite store at {path} read-only: no such file")
        try:
            if read_only:
                self._conn = self._connect()
                self._epoch = self._check_current()
            else:
                if path != ":memory:":
                    Path(path).parent.mkdir(parents=True, exist_ok=True)
                self._conn = sqlite3.connect(
                    path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False, isolation_level=None
                )
                self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                if path != ":memory:":
                    self._conn.execute("PRAGMA journal_mode = WAL")
                migrate(self._conn)
                # The epoch names this database, so an index folder copied from
                # another file is never mistaken for this one's.
                self._conn.execute(
                    "INSERT OR IGNORE INTO vd_meta (key, value) VALUES ('epoch', ?)", (uuid.uuid4().hex,)
                )
                self._epoch = str(self._conn.execute("SELECT value FROM vd_meta WHERE key = 'epoch'").fetchone()[0])
            # How this file writes "no priority yet": NULL, or '' in a file whose column predates it.
            self._no_priority = no_priority_marker(self._conn)
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

    def _connect(self) -> sqlite3.Connection:
        """A connection for reads: read-only (``mode=ro``) when the store is."""
        if self.read_only:
            uri = Path(self.path).resolve().as_uri() + "?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
        else:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return conn

    def _check_current(self) -> str:
        """A read-only file must have the current schema (it cannot be migrated); returns its epoch."""
        meta = dict(self._conn.execute("SELECT key, value FROM vd_meta").fetchall())
        if meta.get("schema") != SCHEMA_VERSION or "epoch" not in meta:
            raise StoreError(
                f"the sqlite store at {self.path} has schema {meta.get('schema', 'unversioned')}, this build reads "
                f"{SCHEMA_VERSION}: open it once read-write (e.g. vdoctor memory history) to migrate it"
            )
        return str(meta["epoch"])

    def _reader(self) -> sqlite3.Connection | None:
        """This thread's read connection; None for an in-memory database (use the shared one)."""
        if self.path == ":memory:":
            return None
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            # Small indexed lookups: a small page cache each (sqlite's default is
            # 2 MB per connection, 128 MB for 64 worker threads).
            conn.execute(f"PRAGMA cache_size = -{READER_CACHE_KIB}")
            with self._lock:
                self._readers.append(conn)
            self._local.conn = conn
        return conn

    def _query(self, sql: str, params: Sequence[object] | Mapping[str, object] = ()) -> list[tuple[object, ...]]:
        try:
            reader = self._reader()
            if reader is not None:
                return reader.execute(sql, params).fetchall()
            with self._lock:
                return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"sqlite store {self.path}: {e}") from e

    def _write(self, sql: str, rows: Sequence[Sequence[object] | Mapping[str, object]]) -> int:
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
            self._write(_UPSERT, [(*_to_row(r, self._no_priority), _epoch(r.concluded_at)) for r in records])

    def get(self, vin: str, session_id: str) -> MemoryRecord | None:
        rows = self._query(f"SELECT {_COLUMNS} FROM case_memory WHERE vin = ? AND session_id = ?", (vin, session_id))
        return _from_row(rows[0]) if rows else None

    def own_history(self, vin: str, since: datetime, limit: int, as_of: datetime) -> list[MemoryRecord]:
        params = {"vin": vin, "since": _epoch(since), "at": _epoch(as_of), "limit": int(limit)}
        # At most one version of a record holds at a time: the current ones and the
        # archived ones are disjoint, and the newest ``limit`` of both are enough.
        tail = " AND vin = :vin AND concluded_at >= :since ORDER BY concluded_at DESC, session_id DESC LIMIT :limit"
        rows = self._query(f"SELECT {_RECALL_COLUMNS} FROM case_memory WHERE {_AS_OF}{tail}", params)
        rows += self._query(f"SELECT {HISTORY_SELECT} FROM case_history WHERE {_AS_OF_ARCHIVED}{tail}", params)
        found = [_from_row(r).as_of(as_of) for r in rows]
        return newest_first([r for r in found if r.vin == vin and r.valid], limit)

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
            changed = "recheck_ok, verified_ts, version_from, invalid_ts"
            rows = self._query(
                f"SELECT rowid, series, vin, {changed}, NULL, summary_vec FROM case_memory WHERE seq > ? ORDER BY seq",
                (index.seq,),
            )
            # Archived versions are named by their negated rowid.
            rows += self._query(
                f"SELECT -rowid, series, vin, {changed}, version_to, summary_vec FROM case_history WHERE seq > ?",
                (index.seq,),
            )
            for rowid, series, vin, ok, verified, start, invalid, end, vec in rows:
                span = _span(ok, verified, start, invalid, end)
                vector = np.frombuffer(vec, dtype=np.float32) if span else None  # type: ignore[call-overload]
                index.apply(int(rowid), str(series), str(vin), span, vector)  # type: ignore[call-overload]
            index.seq = db_seq
        return index

    def similar(self, query: SimilarQuery) -> list[Scored]:
        # The change seq is read before the guard: when the index is current
        # (the usual case), the guard is held for the search alone.
        at = _epoch(query.as_of)
        db_seq = self._seq()
        with self._index_guard:
            hits = self._catch_up(db_seq).search(query.series, query.exclude_vin, query.vector, query.k, at)
        if not hits:
            return []
        scores = dict(hits)
        params = {"series": query.series, "vin": query.exclude_vin, "at": at}
        where = f"AND series = :series AND vin <> :vin AND {_VERIFIED} AND "
        rows = []
        for table, select, as_of, ids in (
            ("case_memory", _RECALL_COLUMNS, _AS_OF, [r for r in scores if r > 0]),
            ("case_history", HISTORY_SELECT, _AS_OF_ARCHIVED, [-r for r in scores if r < 0]),
        ):
            if ids:
                sign = 1 if table == "case_memory" else -1
                rows += [
                    (sign * _int(row[0]), row[1:])
                    for row in self._query(
                        # NOT INDEXED: the winners are fetched by rowid, never by scanning idx_similar's series.
                        f"SELECT rowid, {select} FROM {table} NOT INDEXED WHERE rowid IN ({', '.join(map(str, ids))}) "
                        f"{where}{as_of}",
                        params,
                    )
                ]
        found = [Scored(_from_row(row).as_of(query.as_of), scores[rowid]) for rowid, row in rows]
        found = [s for s in found if query.admits(s.record)]
        # Ties broken by the record, never by insertion order (deterministic replays).
        found.sort(key=lambda s: (-s.score, s.record.vin, s.record.session_id))
        return found[: query.k]

    # -- updates ---------------------------------------------------------------------------

    def set_recheck(self, vin: str, session_id: str, ok: bool, at: datetime) -> bool:
        params = {"ok": int(ok), "at": _epoch(at), "now": _epoch(utc_now()), "vin": vin, "sid": session_id}
        return self._write(_RECHECK, [params]) > 0

    def soft_delete(self, vin: str, at: datetime) -> int:
        return self._write(_SOFT_DELETE, [(_epoch(at), _epoch(utc_now()), vin)])

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

    # -- read-only views (stores.audit) -----------------------------------------------------

    def _versions(
        self, where: str, params: Sequence[object], tail: str = "", tail_params: Sequence[object] = ()
    ) -> list[RecordVersion]:
        """Current versions (open-ended) and archived ones of the rows ``where`` selects, in one query."""
        rows = self._query(
            f"SELECT {_RECALL_COLUMNS}, version_from, NULL FROM case_memory WHERE {where} "
            f"UNION ALL SELECT {HISTORY_SELECT}, version_from, version_to FROM case_history WHERE {where}{tail}",
            [*params, *params, *tail_params],
        )
        return [_version_of(row) for row in rows]

    def versions(self, vin: str) -> list[RecordVersion]:
        return sort_versions(self._versions("vin = ?", (vin,)))

    def series_versions(self, series: str, limit: int) -> list[RecordVersion]:
        tail = " ORDER BY concluded_at DESC, session_id DESC, version_from DESC LIMIT ?"
        return self._versions("series = ?", (series,), tail, (int(limit),))

    def fleet_counts(self) -> FleetCounts:
        groups = self._query(
            "SELECT series, kind, valid, recheck_ok, COUNT(*) FROM case_memory "
            "GROUP BY series, kind, valid, recheck_ok ORDER BY series, kind, valid, recheck_ok"
        )
        vehicles = _int(self._query("SELECT COUNT(DISTINCT vin) FROM case_memory")[0][0])
        archived = _int(self._query("SELECT COUNT(*) FROM case_history")[0][0])
        return FleetCounts(count_groups(groups), vehicles, archived)  # type: ignore[arg-type]

    def recent(self, limit: int) -> list[MemoryRecord]:
        rows = self._query(
            f"SELECT {_RECALL_COLUMNS} FROM case_memory ORDER BY concluded_at DESC, session_id DESC LIMIT ?",
            (int(limit),),
        )
        return [_from_row(r) for r in rows]

    def save_index(self) -> None:
        """Persist the vector index (also done on close), so the next start need not rebuild it."""
        with self._index_guard:
            if self._index is None or self._index_dir is None or self._index.seq == self._saved_seq:
                return
            if self.read_only:
                return  # a read-only store writes nothing, not even the index cache
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
