"""Query vectors shared through a file: the processes of one machine, and a restarted job, embed a query once.

Each process keeps its own query cache (``cache.QueryCache``). A fleet split over
TaskManagers by VIN asks the same query texts in each of them: over the 1,500
vehicles of ``bench/engine_cpu.py --embedder use-m3`` the model embeds 1,119 of
the 3,207 queries in one process, 1,433 with the fleet over two processes and
1,748 over four; a restarted job embeds them all again. Behind each process's
cache this file keeps every query's vector, by embedder, dimension and text: a
process looks here before it runs the model, and writes what the model gave.

A SQLite file in WAL mode (readers never wait for the writer), by default
beside the embedded store's file (``<db>.query-vectors``, README
"Embedders"), and for a MySQL or Doris store in the user's cache folder
(``user_cache_file``). It is a cache and nothing more: a read or a write that fails
is logged (once per kind) and the model answers, as without the file; a
write another process holds the file for is skipped. Bounded: past
``QUERY_FILE_ROWS`` the rows written first go first.

New vectors are written in batches: a transaction per query the model
embedded cost this process ~30 us of CPU warm (~80 us inside the engine, 2%
of its CPU per alert on ``bench/engine_cpu.py --embed-child``), one of 32
rows ~7 us a row. A vector waits in this process (where ``get`` finds it)
until ``FLUSH_ROWS`` wait, the oldest has waited ``FLUSH_AFTER_S`` when the
next one comes, or the file is closed (also at the interpreter's exit):
another process may embed a text this one embedded a moment ago, and a
process killed loses the rows it had not written, which the model embeds
again.
"""

from __future__ import annotations

import atexit
import json
import logging
import sqlite3
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from vdoctor.embedders.base import Vectors
from vdoctor.sqlite_wal import enable_wal, is_busy

log = logging.getLogger(__name__)

# The file's name beside the embedded store's file (``EmbeddingSettings.query_vector_file`` "auto").
SUFFIX = ".query-vectors"
# Server stores (MySQL, Doris) have no file of their own: "auto" keeps the file in the user's cache folder.
CACHE_NAME = Path("vdoctor") / "query-vectors"


def user_cache_file(environ: Mapping[str, str]) -> Path:
    """The query vector file of the user's cache folder: ``$XDG_CACHE_HOME/vdoctor/query-vectors``, else
    ``~/.cache/vdoctor/query-vectors`` (the XDG base directory rule: a relative XDG_CACHE_HOME is ignored).
    A vector depends on the embedder, its dimension and the text only, never on the store, so every job
    of the machine's user may share the file, whichever server it remembers in."""
    cache = environ.get("XDG_CACHE_HOME", "")
    base = Path(cache) if cache and Path(cache).is_absolute() else Path.home() / ".cache"
    return base / CACHE_NAME


# Rows kept: 16,384 x 512 float32 is 32 MB of vectors (use-m3), with their texts.
QUERY_FILE_ROWS = 16_384
# Trim the file back to its bound after this many rows written by this process.
_TRIM_EVERY = 256
# Opening (and making the table) waits this long for other processes opening the file at the same time.
_OPEN_WAIT_S = 30.0
# A write waits this long for another process's write, then is skipped (the next asker writes it).
_WRITE_WAIT_S = 0.2
# New rows are written once this many wait, or when the oldest has waited this long and another comes.
FLUSH_ROWS = 32
FLUSH_AFTER_S = 2.0
# Rows kept waiting at most (a file that stays busy): past it the oldest are dropped (the model embeds them again).
_MAX_WAITING = 8 * FLUSH_ROWS
_SCHEMA = """CREATE TABLE IF NOT EXISTS query_vectors (
    embedder TEXT NOT NULL, dim INTEGER NOT NULL, text TEXT NOT NULL, vector BLOB NOT NULL,
    UNIQUE (embedder, dim, text)
)"""
_GET = (
    "SELECT text, vector FROM query_vectors WHERE embedder = ? AND dim = ? AND text IN (SELECT value FROM json_each(?))"
)
_PUT = "INSERT OR IGNORE INTO query_vectors (embedder, dim, text, vector) VALUES (?, ?, ?, ?)"
_TRIM = "DELETE FROM query_vectors WHERE rowid <= (SELECT MAX(rowid) FROM query_vectors) - ?"


class QueryVectorFile:
    """Query vectors by (embedder, dimension, text) in a SQLite file that processes share."""

    def __init__(self, path: str | Path, max_rows: int = QUERY_FILE_ROWS) -> None:
        self.path = str(path)
        self.max_rows = max_rows
        self.failures = 0  # reads and writes that failed (the model answered instead)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._unusable = False
        self._warned: set[str] = set()
        self._written = 0
        # Rows not written yet, by (embedder, dim, text), oldest first; when the oldest came (monotonic).
        self._waiting: dict[tuple[str, int, str], bytes] = {}
        self._waiting_since = 0.0
        self._retry_at = 0.0  # after a write the file was busy for, none is tried before this (monotonic)
        _OPEN.add(self)

    def _fail(self, what: str, error: Exception) -> None:
        self.failures += 1
        if what not in self._warned:
            self._warned.add(what)
            log.warning("query vector file %s: %s failed (%s); the model embeds instead", self.path, what, error)

    def _connection(self) -> sqlite3.Connection | None:
        """The open file (created on first use), or None when it cannot be opened (tried once)."""
        if self._conn is None and not self._unusable:
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(
                    self.path, timeout=_OPEN_WAIT_S, check_same_thread=False, isolation_level="IMMEDIATE"
                )
                enable_wal(conn, _OPEN_WAIT_S)
                conn.execute("PRAGMA synchronous = NORMAL")  # a cache: a crash may lose the last rows
                conn.execute(_SCHEMA)
                conn.execute(f"PRAGMA busy_timeout = {int(_WRITE_WAIT_S * 1000)}")
                self._conn = conn
            except (sqlite3.Error, OSError) as e:
                self._unusable = True
                self._fail("open", e)
        return self._conn

    def get(self, embedder: str, dim: int, texts: Sequence[str]) -> dict[str, Vectors]:
        """The vectors the file holds for ``texts`` (those it lacks, or holds malformed, are left out)."""
        if not texts:
            return {}
        with self._lock:
            waiting = {t: self._waiting.get((embedder, dim, t)) for t in texts} if self._waiting else {}
            asked = [t for t in texts if waiting.get(t) is None]
            rows: list[tuple[object, object]] = [(t, blob) for t, blob in waiting.items() if blob is not None]
            conn = self._connection() if asked else None
            if conn is not None:
                try:
                    rows += conn.execute(_GET, (embedder, dim, json.dumps(asked))).fetchall()
                except sqlite3.Error as e:
                    self._fail("read", e)
        found: dict[str, Vectors] = {}
        for text, blob in rows:
            vector = np.frombuffer(blob, dtype=np.float32) if isinstance(blob, bytes) else None
            if vector is not None and vector.shape == (dim,) and bool(np.isfinite(vector).all()):
                found[str(text)] = vector
        return found

    def put(self, embedder: str, dim: int, vectors: Mapping[str, Vectors]) -> None:
        """Keep the model's vectors (a text the file already holds keeps its row): written with the next batch."""
        rows = {
            (embedder, dim, text): np.ascontiguousarray(vector, dtype=np.float32).tobytes()
            for text, vector in vectors.items()
            if np.shape(vector) == (dim,)
        }
        if not rows:
            return
        now = time.monotonic()
        with self._lock:
            if not self._waiting:
                self._waiting_since = now
            self._waiting.update(rows)
            due = len(self._waiting) >= FLUSH_ROWS or now - self._waiting_since >= FLUSH_AFTER_S
            if due and now >= self._retry_at:
                self._flush()

    def flush(self) -> None:
        """Write the rows waiting now."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        """Write the waiting rows in one transaction; with the lock held. Rows a busy file could not take wait
        (the oldest dropped past ``_MAX_WAITING``), and ``put`` tries again ``FLUSH_AFTER_S`` later."""
        if not self._waiting:
            return
        conn = self._connection()
        if conn is None:
            self._waiting.clear()
            return
        rows = [(*key, blob) for key, blob in self._waiting.items()]
        try:
            trim = self._written + len(rows) >= _TRIM_EVERY
            with conn:  # one transaction (BEGIN IMMEDIATE: the connection's isolation level), or none
                conn.executemany(_PUT, rows)
                if trim:
                    conn.execute(_TRIM, (self.max_rows,))
            self._written = 0 if trim else self._written + len(rows)
        except sqlite3.Error as e:
            if is_busy(e):
                self._retry_at = time.monotonic() + FLUSH_AFTER_S
                if len(rows) > _MAX_WAITING:
                    self._waiting = dict(list(self._waiting.items())[-_MAX_WAITING:])
                return
            self._fail("write", e)
        self._waiting.clear()

    def close(self) -> None:
        """Write the waiting rows, then close the file (a later call opens it again)."""
        with self._lock:
            self._flush()
            if self._conn is not None:
                self._conn.close()
                self._conn = None


# Every file still open, closed (its waiting rows written) at the interpreter's exit.
_OPEN: weakref.WeakSet[QueryVectorFile] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for shared in list(_OPEN):
        shared.close()
