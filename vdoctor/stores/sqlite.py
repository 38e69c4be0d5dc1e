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

import functools
import json
import logging
import sqlite3
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import numpy as np

from vdoctor.combining import Combiner
from vdoctor.errors import StaleSchema, StoreError
from vdoctor.records import MemoryRecord, utc_now
from vdoctor.retrieval.text import dense_text
from vdoctor.retrieval.tokens import query_terms
from vdoctor.sqlite_wal import enable_wal
from vdoctor.stores.audit import FleetCounts, RecordVersion, count_groups, sort_versions
from vdoctor.stores.base import (
    ChannelHits,
    Scored,
    SimilarQuery,
    StaleVersion,
    check_dimensions,
    check_embedders,
    newest_first,
)
from vdoctor.stores.lexindex import SeriesLexicalIndex
from vdoctor.stores.sqlite_rows import DecodedRows, as_int, eligible_span, epoch, from_epoch, from_row, to_row
from vdoctor.stores.sqlite_schema import (
    HISTORY_SELECT,
    NEXT_SEQ,
    RECORD_COLUMNS,
    RECORD_FIELDS,
    SCHEMA_VERSION,
    migrate,
    next_seq,
    no_priority_marker,
)
from vdoctor.stores.vecindex import PARALLEL_MIN_ROWS, SeriesVectorIndex

log = logging.getLogger(__name__)

# Several Flink subtasks (threads or processes) may write one file: wait for
# the lock rather than fail.
BUSY_TIMEOUT_MS = 30_000
# Page cache of each per-thread read connection, in KiB.
READER_CACHE_KIB = 512
# How the write connection commits (SQLite's PRAGMA synchronous, store URL
# ``?synchronous=``): "full" waits for the disk at every commit; "normal" (the
# default) at most once a second, see ``SqliteStore._writing``.
SYNCHRONOUS = ("normal", "full")
SYNC_EVERY_S = 1.0
# Recall candidates kept decoded (``DecodedRows``): ~3 MB with use-m3's vectors.
DECODED_ROWS = 1024

_COLUMNS = RECORD_COLUMNS
# Upsert in place (keeps the rowid, which names the row in the vector index).
# A record that concludes later than the stored version started moves the
# version's start forward, and the archive trigger keeps the version it replaces.
_UPSERT_HEAD = f"INSERT INTO case_memory ({_COLUMNS}, search_tokens, version_from, seq) VALUES "
_UPSERT_VALUES = ", ".join("?" * (len(RECORD_FIELDS) + 2))
_UPSERT_TAIL = (
    " ON CONFLICT (vin, session_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in [*RECORD_FIELDS[2:], "search_tokens", "seq"])
    + ", version_from = MAX(case_memory.version_from, excluded.version_from)"
)
_UPSERT = f"{_UPSERT_HEAD}({_UPSERT_VALUES}, {NEXT_SEQ}){_UPSERT_TAIL}"
# Upserts of concurrent callers combined into one statement (``SqliteStore._upsert_batch``). The k-th
# row's change seq is the stored one plus k: whether SQLite reads the stored seq once for the statement
# or again for each row (after the trigger moved it for the rows before), every row gets a seq of its
# own, above every earlier one, and the trigger leaves the highest stored.
# Rows one combined upsert writes at most (~25 parameters a row, far under SQLite's 32,766).
MAX_COMBINED_ROWS = 64


@functools.lru_cache(maxsize=MAX_COMBINED_ROWS)
def _combined_upsert(rows: int) -> str:
    """The statement upserting ``rows`` rows (built once per size)."""
    values = (f"({_UPSERT_VALUES}, {next_seq(k)})" for k in range(1, rows + 1))
    return _UPSERT_HEAD + ", ".join(values) + _UPSERT_TAIL


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
WHERE vin = :vin AND session_id = :sid AND (merged_sessions = '[]' OR concluded_at <= :at)"""
# A valid record is set invalid from the event's time (never before its version began); one already invalid
# from a later time, whose version had begun by then, from the event's time (``base.invalidated_earlier``).
_SOFT_DELETE = (
    f"UPDATE case_memory SET valid = 0, invalid_ts = MAX(:at, version_from), updated_at = :now, seq = {NEXT_SEQ} "
    "WHERE vin = :vin AND (valid = 1 OR (invalid_ts > :at AND version_from <= :at))"
)
# What the indexes catch up on (``SqliteStore._catch_up``), in one statement (so one snapshot): the
# current rows changed after :since, then the archived versions (named by their negated rowid), each part
# in change order, then a row of NULLs but for the change seq as of the same snapshot. The order is the
# statement's own ORDER BY (its first column says which part a row is of), never that of subqueries, which
# SQLite may drop. The catch-up runs under the index guard, and every statement lets go of the GIL and
# waits to win it back while holding the guard: a second read of the seq and a second statement for the
# archived versions made three such waits instead of one. In a write-then-recall loop (each recall
# catching up on the case just written) a search took ~4 us less CPU (~49 -> ~45 us, 6 alternating runs).
# A milestone (an open session's guess) is never a similar case: its verdict reads as none (``eligible_span``).
_CHANGED_COLUMNS = "series, vin, CASE WHEN kind = 'final' THEN recheck_ok END, verified_ts, version_from, invalid_ts"
_CHANGED_ROWS = (
    f"SELECT 0, rowid, {_CHANGED_COLUMNS}, NULL, summary_vec, embedder, search_tokens, seq "
    "FROM case_memory WHERE seq > :since UNION ALL "
    f"SELECT 1, -rowid, {_CHANGED_COLUMNS}, version_to, summary_vec, embedder, search_tokens, seq "
    "FROM case_history WHERE seq > :since UNION ALL "
    "SELECT 2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, value FROM vd_meta WHERE key = 'seq' "
    "ORDER BY 1, 13"
)
# A search's hits: (rowid, score), best first (archived versions by their negated rowid).
Hits = list[tuple[int, float]]
# Recall reads leave the summary source out (it is for re-extraction only, and the largest column).
_RECALL_COLUMNS = _COLUMNS.replace(", source,", ", '' AS source,")
# A record's version current at event time :at, not invalidated at or before it.
_AS_OF = "version_from <= :at AND concluded_at <= :at AND (invalid_ts IS NULL OR invalid_ts > :at)"
_AS_OF_ARCHIVED = _AS_OF + " AND version_to > :at"
_VERIFIED = "kind = 'final' AND recheck_ok = 1 AND verified_ts <= :at"
# A vehicle's own records as of :at, keyed as recall's candidates are (archived versions by their negated
# rowid), so both share the decoded rows. At most one version of a record holds at a time: the current
# ones and the archived ones are disjoint, and the newest :limit of each are enough. One statement: most
# vehicles have no archived version, and a second statement cost as much as the first.
_OWN_TAIL = " AND vin = :vin AND concluded_at >= :since ORDER BY concluded_at DESC, session_id DESC LIMIT :limit"
_OWN_HISTORY = (
    f"SELECT * FROM (SELECT rowid, seq, {_RECALL_COLUMNS} FROM case_memory WHERE {_AS_OF}{_OWN_TAIL}) UNION ALL "
    f"SELECT * FROM (SELECT -rowid, seq, {HISTORY_SELECT} FROM case_history WHERE {_AS_OF_ARCHIVED}{_OWN_TAIL})"
)


def _version_of(row: Sequence[object]) -> RecordVersion:
    """A record row followed by (version_from, version_to); a row migrated without a start begins at its conclusion."""
    record = from_row(row[:-2])
    start = record.concluded_at if row[-2] is None else from_epoch(as_int(row[-2]))
    return RecordVersion(record, start, None if row[-1] is None else from_epoch(as_int(row[-1])))


class SqliteStore:
    """SQLite-backed L3 store; one connection guarded by a lock (shared by worker threads)."""

    def __init__(self, path: str, read_only: bool = False, synchronous: str = "normal") -> None:
        """Open (creating and migrating) the file; ``read_only`` opens an existing, current file for reads only.

        ``synchronous``: "normal" (default) or "full", see ``_writing``.

        A read-only store never writes the file (SQLite refuses any write on
        the connection) nor its vector index folder: the index is loaded and
        caught up in memory. A file an older version wrote must be opened
        once read-write (by the job or any ``vdoctor memory`` command) first.
        """
        self.path = path
        self.read_only = read_only
        self._index: SeriesVectorIndex | None = None
        self._lexicon: SeriesLexicalIndex | None = None
        self._index_dir = None if path == ":memory:" else Path(path + ".vecindex")
        self._lexicon_dir = None if path == ":memory:" else Path(path + ".lexindex")
        self._saved_seq = -1
        self._saved_lexicon_seq = -1
        # The write connection's total_changes when the indexes last caught up (``_search``).
        self._changes_seen = -1
        self._decoded = DecodedRows(DECODED_ROWS)
        if synchronous not in SYNCHRONOUS:
            raise StoreError(
                f"sqlite store {path}: synchronous must be one of {', '.join(SYNCHRONOUS)}, not {synchronous!r}"
            )
        # An in-memory database has no disk to sync.
        self._synchronous = "full" if path == ":memory:" else synchronous
        self._synced_at = time.monotonic()
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
                    enable_wal(self._conn, BUSY_TIMEOUT_MS / 1000)
                    self._conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
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
        # Writes go through the one connection above, one at a time. Reads take
        # an idle read connection (or open one) for one statement and give it
        # back, with no lock: in WAL mode readers never wait for each other or
        # for the writer. (A shared connection behind a lock made a lock
        # convoy: the sqlite module lets go of the GIL inside every statement,
        # so the holder had to queue for the GIL again while 63 other
        # vehicles' runs queued for the lock.) There are as many read
        # connections as statements were ever running at once, not one per
        # thread that ever read: each keeps a page cache (up to
        # READER_CACHE_KIB) and its prepared statements. An in-memory database
        # exists only on its own connection, so it keeps the shared one.
        self._lock = threading.Lock()
        self._index_guard = threading.Lock()
        # Idle read connections, the last given back taken first (its cache is warm). A deque's append and
        # pop are atomic, so threads share it without a lock.
        self._idle_readers: deque[sqlite3.Connection] = deque()
        self._readers: list[sqlite3.Connection] = []
        self._search_threads: ThreadPoolExecutor | None = None
        # Concurrent upserts share statements (``_upsert_batch``).
        self._upserts: Combiner[list[tuple[object, ...]], None] = Combiner(self._upsert_batch, MAX_COMBINED_ROWS)

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
        try:
            meta = dict(self._conn.execute("SELECT key, value FROM vd_meta").fetchall())
        except sqlite3.OperationalError as e:
            if "no such table" not in str(e):
                self._conn.close()
                raise
            meta = {}  # (no vd_meta: a file of the releases before it)
        if meta.get("schema") != SCHEMA_VERSION or "epoch" not in meta:
            self._conn.close()
            raise StaleSchema(
                f"the sqlite store at {self.path} has schema {meta.get('schema', 'unversioned')}, this build reads "
                f"{SCHEMA_VERSION}: open it once read-write (e.g. vdoctor memory history) to migrate it"
            )
        return str(meta["epoch"])

    def _new_reader(self) -> sqlite3.Connection:
        conn = self._connect()
        # Small indexed lookups: a small page cache each (sqlite's default is 2 MB per connection).
        conn.execute(f"PRAGMA cache_size = -{READER_CACHE_KIB}")
        with self._lock:
            self._readers.append(conn)
        return conn

    @property
    def read_connections(self) -> int:
        """How many read connections this store has opened: the most statements that ran at once."""
        return len(self._readers)

    def _query(self, sql: str, params: Sequence[object] | Mapping[str, object] = ()) -> list[tuple[object, ...]]:
        try:
            if self.path == ":memory:":
                with self._lock:
                    return self._conn.execute(sql, params).fetchall()
            idle = self._idle_readers
            try:
                reader = idle.pop()
            except IndexError:
                reader = self._new_reader()
            try:
                return reader.execute(sql, params).fetchall()
            finally:
                idle.append(reader)
        except sqlite3.Error as e:
            raise StoreError(f"sqlite store {self.path}: {e}") from e

    @contextmanager
    def _writing(self, begin: bool = True) -> Iterator[sqlite3.Connection]:
        """The write connection, under the write lock, in one transaction (committed, or rolled back on an error).

        ``begin=False`` for a single statement, which SQLite commits by itself.

        In WAL mode with synchronous=NORMAL a commit does not wait for the
        disk (the WAL is synced at SQLite's own checkpoints): ~0.03 ms a
        write here instead of ~1.1 ms, most of which was spent holding the
        write lock that every concluding run queues for. A crash or kill of
        the job loses nothing (the commit is in the OS's cache); a power loss
        or OS crash could lose the commits not yet synced. So the first
        commit a second or more after the last synced one runs with
        synchronous=FULL, which syncs the WAL and with it every commit
        before: on a busy store at most the last second of writes is at
        risk. ``synchronous="full"`` syncs every commit.
        """
        with self._lock:
            sync = self._synchronous == "normal" and time.monotonic() - self._synced_at >= SYNC_EVERY_S
            if sync:
                self._conn.execute("PRAGMA synchronous = FULL")
            try:
                if not begin:
                    yield self._conn
                    return
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            finally:
                if sync:
                    self._conn.execute("PRAGMA synchronous = NORMAL")
                    self._synced_at = time.monotonic()

    def _write(self, sql: str, rows: Sequence[Sequence[object] | Mapping[str, object]]) -> int:
        """Run one statement per parameter row in one transaction (each changed row gets the next seq).

        One row is one statement in autocommit: the sqlite module lets go of
        the GIL inside every statement, and the writer must win it back each
        time while holding the write lock, so a write of four statements
        (begin, seq, upsert, commit) held the lock about four times as long.
        """
        try:
            with self._writing(begin=len(rows) > 1) as conn:
                return sum(int(conn.execute(sql, params).rowcount) for params in rows)
        except sqlite3.Error as e:
            raise StoreError(f"sqlite store {self.path}: {e}") from e

    def upsert(self, record: MemoryRecord) -> None:
        self.upsert_many([record])

    def upsert_many(self, records: list[MemoryRecord]) -> None:
        if records:
            rows = [(*to_row(r, self._no_priority), epoch(r.concluded_at)) for r in records]
            self._upserts.submit("upsert", rows, size=len(rows))

    def _upsert_batch(self, _kind: object, requests: list[list[tuple[object, ...]]]) -> list[Exception | None]:
        """Write the upserts of callers that waited together; one result per caller (None, or its error).

        With hundreds of runs in flight, concluded cases arrive together, and
        one statement a case made the writer win the GIL back once per case
        while holding the write lock, with every other writer queued behind
        it: their rows are one statement here. A combined statement that fails
        (a bad row) must not fail the other callers' rows: each caller's rows
        are then written on their own, and only the bad one's caller gets the error.
        """
        rows = [row for request in requests for row in request]
        if len(requests) > 1 and len({(row[0], row[1]) for row in rows}) == len(rows):
            try:
                with self._writing(begin=False) as conn:
                    conn.execute(_combined_upsert(len(rows)), [value for row in rows for value in row])
                return [None] * len(requests)
            except Exception as e:  # noqa: BLE001 - retried per caller below, where the error reaches its caller
                log.debug("combined upsert of %d rows failed, writing them per caller: %s", len(rows), e)
        results: list[Exception | None] = []
        for request in requests:
            try:
                self._write(_UPSERT, request)
                results.append(None)
            except Exception as e:  # noqa: BLE001 - the caller's own error, raised in its thread
                results.append(e)
        return results

    def get(self, vin: str, session_id: str) -> MemoryRecord | None:
        rows = self._query(f"SELECT {_COLUMNS} FROM case_memory WHERE vin = ? AND session_id = ?", (vin, session_id))
        return from_row(rows[0]) if rows else None

    def own_history(self, vin: str, since: datetime, limit: int, as_of: datetime) -> list[MemoryRecord]:
        params = {"vin": vin, "since": epoch(since), "at": epoch(as_of), "limit": int(limit)}
        decoded = self._decoded.record
        found = [decoded(as_int(r[0]), as_int(r[1]), r[2:]).as_of(as_of) for r in self._query(_OWN_HISTORY, params)]
        return newest_first([r for r in found if r.vin == vin and r.valid], limit)

    # -- similar cases: the vector index -------------------------------------------------

    def _seq(self) -> int:
        return as_int(self._query("SELECT value FROM vd_meta WHERE key = 'seq'")[0][0])

    def _catch_up(self, db_seq: int | None, written: int | None) -> tuple[SeriesVectorIndex, SeriesLexicalIndex]:
        """Load or rebuild both indexes on first use, then apply rows changed up to ``db_seq`` or later
        (None: not read, behind for sure). ``written``: the write connection's total_changes before (None:
        not known)."""
        if self._index is None or self._lexicon is None:
            db_seq = self._seq() if db_seq is None else db_seq
            vectors = SeriesVectorIndex.load(self._index_dir, self._epoch) if self._index_dir else None
            if vectors is None or vectors.seq > db_seq:
                log.info("building the vector index of %s", self.path)
                vectors = SeriesVectorIndex()
                vectors.seq = -1
            else:
                self._saved_seq = vectors.seq
            lexicon = SeriesLexicalIndex.load(self._lexicon_dir, self._epoch) if self._lexicon_dir else None
            if lexicon is None or lexicon.seq > db_seq:
                log.info("building the lexical index of %s", self.path)
                lexicon = SeriesLexicalIndex()
                lexicon.seq = -1
            else:
                self._saved_lexicon_seq = lexicon.seq
            self._index, self._lexicon = vectors, lexicon
        index, lexicon = self._index, self._lexicon
        if db_seq is None or db_seq != index.seq or db_seq != lexicon.seq:
            # Rows the two indexes already hold are applied again: a row's state is whole, so that is harmless.
            since = min(index.seq, lexicon.seq)
            # The seq comes last, read with the rows: rows may have changed since the caller looked, and
            # they are all here.
            *rows, last = self._query(_CHANGED_ROWS, {"since": since})
            for _, rowid, series, vin, ok, verified, start, invalid, end, vec, model, tokens, seq in rows:
                span = eligible_span(ok, verified, start, invalid, end)
                vector = np.frombuffer(vec, dtype=np.float32) if span else None  # type: ignore[call-overload]
                key = int(rowid), str(series), str(vin)  # type: ignore[call-overload]
                index.apply(*key, span, vector, str(model), as_int(seq))
                lexicon.apply(*key, span, str(tokens) if span else None)
            index.seq = lexicon.seq = as_int(last[-1])
        if written is not None:
            self._changes_seen = written
        return index, lexicon

    def _records(
        self, query: SimilarQuery, rowids: set[int], seqs: Mapping[int, int | None]
    ) -> dict[int, MemoryRecord]:
        """The rows named (positive rowids: current versions, negative: archived) that pass every filter,
        each taken as of the query's time and admitted by it.

        ``seqs`` holds the change seq at which the search's index held each row. A row decoded before
        at that seq is that very version, and the index found it under the same filters the statement
        below applies (series, vehicle, verdict, and the version's span around the query's time), so
        it is not read again: only ``query.admits`` checks it once more (by the record's ``admission``,
        worked out when it was decoded). Every other row is read as it is now and filtered again (a row
        that changed since the search is taken in its new version).
        """
        params = {"series": query.series, "vin": query.exclude_vin, "at": epoch(query.as_of)}
        where = f"AND series = :series AND vin <> :vin AND {_VERIFIED} AND "
        found: dict[int, MemoryRecord] = {}
        at, vin, series = query.as_of, query.exclude_vin, query.series
        for table, select, as_of, keys, sign in (
            ("case_memory", _RECALL_COLUMNS, _AS_OF, sorted(r for r in rowids if r > 0), 1),
            ("case_history", HISTORY_SELECT, _AS_OF_ARCHIVED, sorted(r for r in rowids if r < 0), -1),
        ):
            unread = []
            for key, entry in zip(keys, self._decoded.entries(keys, seqs), strict=True):
                if entry is None:
                    unread.append(sign * key)
                    continue
                # ``_admit`` by the record's admission (``query.admits`` of it as of the query's time, and its
                # calls were a good part of a recall's per-candidate cost); taken as of that time (a copy) only
                # when it was invalidated later.
                known, (of_vin, of_series, since, until, invalid) = entry
                if of_vin != vin and of_series == series and since <= at and (until is None or at < until):
                    found[key] = known if invalid is None or invalid <= at else known.as_of(at)
            if not unread:
                continue
            # NOT INDEXED: the rows are fetched by rowid, never by scanning idx_similar's series.
            # The ids travel as one JSON parameter, so the statement's text never changes: every
            # distinct text is a prepared statement that each thread's connection caches (128 of
            # them): with the ids written into the SQL, sqlite's own memory grew by 116 MB between
            # events 4,000 and 14,053 of a 4,000-vehicle fleet at 64 threads (bench/engine_memory.py).
            rows_of = f"FROM {table} NOT INDEXED WHERE rowid IN (SELECT value FROM json_each(:ids)) {where}{as_of}"
            for row in self._query(f"SELECT rowid, seq, {select} {rows_of}", {**params, "ids": json.dumps(unread)}):
                key = sign * as_int(row[0])
                self._admit(query, key, self._decoded.record(key, as_int(row[1]), row[2:]), found)
        return found

    @staticmethod
    def _admit(query: SimilarQuery, key: int, record: MemoryRecord, found: dict[int, MemoryRecord]) -> None:
        """Add ``record`` to ``found``, taken as of the query's time, if the query admits it."""
        record = record.as_of(query.as_of)
        if query.admits(record):
            found[key] = record

    def _search(
        self,
        query: SimilarQuery,
        dense_k: int,
        lexical_k: int,
        meanwhile: Callable[[Hits, Mapping[int, int | None]], None] | None = None,
    ) -> tuple[Hits, Hits, dict[int, int | None]]:
        """Both indexes' hits (rowid, score) for one query, under one catch-up, and the change seq of
        each hit's version in the index (``SeriesVectorIndex.seq_of``), read under the same guard.

        ``meanwhile`` is given the lexical hits and their seqs as soon as they
        are known when the dense scan runs on other threads (a large series),
        and runs while that scan still does (the caller reads their rows).
        """
        terms = query_terms(query.text) if lexical_k > 0 else []
        at = epoch(query.as_of)
        # The change seq is read before the guard: when the indexes are current, the guard is held for the
        # searches alone. Unless this store has written since they caught up (a fleet's recalls mostly
        # follow a case the same process just wrote): they are behind for sure, and the catch-up reads the
        # seq with the rows. Only a hint: a write counted here but not yet committed is seen by the
        # statement of a later search (the seq read then finds it), as before. It is asked only while no
        # write runs (SQLite would make this thread wait for the statement, holding the GIL meanwhile).
        written = None
        if self._lock.acquire(blocking=False):
            try:
                written = self._conn.total_changes
            except sqlite3.Error as e:
                raise StoreError(f"sqlite store {self.path}: {e}") from e
            finally:
                self._lock.release()
        behind = written is not None and written != self._changes_seen and self._index is not None
        db_seq = None if behind else self._seq()
        seqs: dict[int, int | None] = {}
        dense_seqs: dict[int, int | None] = {}
        with self._index_guard:
            index, lexicon = self._catch_up(db_seq, written)
            if dense_k > 0:
                check_dimensions(query, index.dims(query.series))
                check_embedders(query, index.models(query.series))
            helpers = self._helpers()

            def dense_hits() -> Hits:
                if dense_k <= 0:
                    return []
                return index.search(
                    query.series, query.exclude_vin, query.vector, dense_k, at, helper=helpers, seqs=dense_seqs
                )

            # The scans are numpy work that lets go of the GIL, and a scan is memory-bound: the dense one, split
            # in two threads, runs beside the lexical one and the reading of its rows (at 1M records, one after
            # the other they took 16, 9 and 5 ms at p50).
            large = index.rows(query.series, len(query.vector)) >= PARALLEL_MIN_ROWS
            pending = helpers.submit(dense_hits) if dense_k > 0 and terms and large else None
            # Without a scan running beside it, the dense one runs first: most lexical hits are dense hits as
            # well, and their seqs (the same ``seq_of``) then come by column with them, not one by one.
            dense = dense_hits() if pending is None else []
            known = dense_seqs if pending is None else {}
            try:
                lexical = lexicon.search(query.series, query.exclude_vin, terms, lexical_k, at) if terms else []
                seqs.update((rowid, index.seq_of(rowid)) for rowid, _ in lexical if rowid not in known)
                if meanwhile is not None and lexical and pending is not None:
                    meanwhile(lexical, seqs)
            finally:
                if pending is not None:
                    dense = pending.result()
            seqs.update(dense_seqs)
        return dense, lexical, seqs

    def _helpers(self) -> ThreadPoolExecutor:
        """Two threads for a query's scans: its dense scan and half of that scan, while the caller runs the
        lexical one. Called under ``_index_guard`` (not the writers' lock: a search never waits for a write):
        one query searches at a time, so neither thread is ever asked twice at once."""
        if self._search_threads is None:
            self._search_threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="vd-scan")
        return self._search_threads

    def similar(self, query: SimilarQuery) -> list[Scored]:
        return self.channels(query, query.k, 0)[0]

    def lexical(self, query: SimilarQuery) -> list[Scored]:
        return self.channels(query, 0, query.k)[1]

    def channels(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> tuple[list[Scored], list[Scored]]:
        return self.channel_hits(query, dense_k, lexical_k).ranked()

    def channel_hits(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> ChannelHits:
        """``channels`` by columns, unranked (``ChannelHits``): recall ranks the candidates by their fused
        scores, so it needs neither a ``Scored`` per hit nor each channel sorted."""
        # The two channels' winners overlap (on a fleet replay, most lexical hits are dense hits as well):
        # their rows are read once.
        records: dict[int, MemoryRecord] = {}
        read: set[int] = set()

        def read_rows(hits: Hits, seqs: Mapping[int, int | None]) -> None:
            rowids = {rowid for rowid, _ in hits} - read
            records.update(self._records(query, rowids, seqs))
            read.update(rowids)

        dense, lexical, seqs = self._search(query, dense_k, lexical_k, meanwhile=read_rows)
        read_rows(dense + lexical, seqs)
        return ChannelHits(dense, lexical, records, dense_k, lexical_k)

    # -- updates ---------------------------------------------------------------------------

    # -- re-embedding (``vdoctor memory reembed``) -----------------------------------------

    def count_stale(self, embedder: str) -> int:
        # "< OR >" rather than "<>": SQLite answers it from the embedder indexes.
        stale = "WHERE embedder < ? OR embedder > ?"
        return sum(
            as_int(self._query(f"SELECT COUNT(*) FROM {table} {stale}", (embedder, embedder))[0][0])
            for table in ("case_memory", "case_history")
        )

    def stale_versions(self, embedder: str, limit: int) -> list[StaleVersion]:
        found: list[StaleVersion] = []
        for table, archived in (("case_memory", False), ("case_history", True)):
            if len(found) >= limit:
                break
            rows = self._query(
                f"SELECT vin, session_id, version_from, alert_text, dtc_codes, root_cause, fix_action, summary, "
                f"embedder FROM {table} WHERE embedder < ? OR embedder > ? LIMIT ?",
                (embedder, embedder, limit - len(found)),
            )
            found += [
                StaleVersion(
                    str(vin), str(sid), from_epoch(as_int(start)), archived,
                    dense_text(str(alert), json.loads(str(codes)), str(cause), str(fix), str(summary)), str(model),
                )
                for vin, sid, start, alert, codes, cause, fix, summary, model in rows
            ]  # fmt: skip
        return found

    def set_vectors(self, rows: list[tuple[StaleVersion, list[float]]], embedder: str) -> int:
        """One transaction; every row changed gets the next change seq, so both indexes catch up on it."""
        if not rows:
            return 0
        set_current = (
            f"UPDATE case_memory SET summary_vec = ?, embedder = ?, seq = {NEXT_SEQ} "
            "WHERE vin = ? AND session_id = ? AND version_from = ? AND embedder = ?"
        )
        # case_history has no seq trigger: move vd_meta's seq first, then stamp the row with it.
        bump = "UPDATE vd_meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'seq'"
        set_archived = (
            "UPDATE case_history SET summary_vec = ?, embedder = ?, "
            "seq = (SELECT CAST(value AS INTEGER) FROM vd_meta WHERE key = 'seq') "
            "WHERE vin = ? AND session_id = ? AND version_from = ? AND embedder = ?"
        )
        try:
            with self._writing() as conn:
                done = 0
                for version, vector in rows:
                    params = (
                        np.asarray(vector, dtype=np.float32).tobytes(), embedder, version.vin,
                        version.session_id, epoch(version.version_from), version.embedder,
                    )  # fmt: skip
                    if version.archived:
                        conn.execute(bump)
                    done += conn.execute(set_archived if version.archived else set_current, params).rowcount
                return done
        except sqlite3.Error as e:
            raise StoreError(f"sqlite store {self.path}: {e}") from e

    def set_recheck(self, vin: str, session_id: str, ok: bool, at: datetime) -> bool:
        params = {"ok": int(ok), "at": epoch(at), "now": epoch(utc_now()), "vin": vin, "sid": session_id}
        return self._write(_RECHECK, [params]) > 0

    def soft_delete(self, vin: str, at: datetime) -> int:
        return self._write(_SOFT_DELETE, [{"at": epoch(at), "now": epoch(utc_now()), "vin": vin}])

    def history(self, vin: str) -> list[MemoryRecord]:
        rows = self._query(
            f"SELECT {_COLUMNS} FROM case_memory WHERE vin = ? ORDER BY concluded_at DESC, session_id DESC",
            (vin,),
        )
        return [from_row(r) for r in rows]

    def by_prompt_version(self, prompt_version: str, limit: int) -> list[MemoryRecord]:
        rows = self._query(
            f"SELECT {_COLUMNS} FROM case_memory WHERE prompt_version = ? AND valid = 1 "
            "ORDER BY vin, session_id LIMIT ?",
            (prompt_version, limit),
        )
        return [from_row(r) for r in rows]

    def prompt_versions(self) -> list[str]:
        rows = self._query("SELECT DISTINCT prompt_version FROM case_memory WHERE valid = 1")
        return sorted(str(r[0]) for r in rows)

    def find_duplicate(
        self, vin: str, root_cause: str, since: datetime, until: datetime | None = None
    ) -> MemoryRecord | None:
        bounded = "" if until is None else "AND concluded_at <= ? "
        rows = self._query(
            f"SELECT {_COLUMNS} FROM case_memory WHERE vin = ? AND valid = 1 AND root_cause = ? "
            f"AND concluded_at >= ? {bounded}ORDER BY concluded_at DESC, session_id DESC LIMIT 1",
            (vin, root_cause, epoch(since)) + (() if until is None else (epoch(until),)),
        )
        return from_row(rows[0]) if rows else None

    def count(self) -> int:
        return as_int(self._query("SELECT COUNT(*) FROM case_memory")[0][0])

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
        vehicles = as_int(self._query("SELECT COUNT(DISTINCT vin) FROM case_memory")[0][0])
        archived = as_int(self._query("SELECT COUNT(*) FROM case_history")[0][0])
        return FleetCounts(count_groups(groups), vehicles, archived)  # type: ignore[arg-type]

    def recent(self, limit: int) -> list[MemoryRecord]:
        rows = self._query(
            f"SELECT {_RECALL_COLUMNS} FROM case_memory ORDER BY concluded_at DESC, session_id DESC LIMIT ?",
            (int(limit),),
        )
        return [from_row(r) for r in rows]

    def save_index(self) -> None:
        """Persist the vector and lexical indexes (also done on close), so the next start need not rebuild them."""
        with self._index_guard:
            if self.read_only:
                return  # a read-only store writes nothing, not even the index caches
            try:
                if self._index is not None and self._index_dir is not None and self._index.seq != self._saved_seq:
                    self._index.save(self._index_dir, self._epoch)
                    self._saved_seq = self._index.seq
                if (
                    self._lexicon is not None
                    and self._lexicon_dir is not None
                    and self._lexicon.seq != self._saved_lexicon_seq
                ):
                    self._lexicon.save(self._lexicon_dir, self._epoch)
                    self._saved_lexicon_seq = self._lexicon.seq
            except OSError as e:
                # The indexes are caches: losing one costs a rebuild, never data.
                log.warning("could not save the indexes of %s: %s", self.path, e)

    def close(self) -> None:
        self.save_index()
        with self._index_guard:
            if self._search_threads is not None:
                self._search_threads.shutdown()
                self._search_threads = None
        with self._lock:
            for reader in self._readers:
                reader.close()
            self._readers.clear()
            self._idle_readers.clear()
            self._conn.close()
