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
"Embedders"). It is a cache and nothing more: a read or a write that fails
is logged (once per kind) and the model answers, as without the file; a
write another process holds the file for is skipped. Bounded: past
``QUERY_FILE_ROWS`` the rows written first go first.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from vdoctor.embedders.base import Vectors
from vdoctor.sqlite_wal import enable_wal, is_busy

log = logging.getLogger(__name__)

# The file's name beside the embedded store's file (``EmbeddingSettings.query_vector_file`` "auto").
SUFFIX = ".query-vectors"
# Rows kept: 16,384 x 512 float32 is 32 MB of vectors (use-m3), with their texts.
QUERY_FILE_ROWS = 16_384
# Trim the file back to its bound after this many rows written by this process.
_TRIM_EVERY = 256
# Opening (and making the table) waits this long for other processes opening the file at the same time.
_OPEN_WAIT_S = 30.0
# A write waits this long for another process's write, then is skipped (the next asker writes it).
_WRITE_WAIT_S = 0.2
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
            conn = self._connection()
            if conn is None:
                return {}
            try:
                rows = conn.execute(_GET, (embedder, dim, json.dumps(list(texts)))).fetchall()
            except sqlite3.Error as e:
                self._fail("read", e)
                return {}
        found: dict[str, Vectors] = {}
        for text, blob in rows:
            vector = np.frombuffer(blob, dtype=np.float32) if isinstance(blob, bytes) else None
            if vector is not None and vector.shape == (dim,) and bool(np.isfinite(vector).all()):
                found[str(text)] = vector
        return found

    def put(self, embedder: str, dim: int, vectors: Mapping[str, Vectors]) -> None:
        """Keep the model's vectors (a text the file already holds keeps its row)."""
        rows = [
            (embedder, dim, text, np.ascontiguousarray(vector, dtype=np.float32).tobytes())
            for text, vector in vectors.items()
            if np.shape(vector) == (dim,)
        ]
        if not rows:
            return
        with self._lock:
            conn = self._connection()
            if conn is None:
                return
            try:
                trim = self._written + len(rows) >= _TRIM_EVERY
                with conn:  # one transaction (BEGIN IMMEDIATE: the connection's isolation level), or none
                    conn.executemany(_PUT, rows)
                    if trim:
                        conn.execute(_TRIM, (self.max_rows,))
                self._written = 0 if trim else self._written + len(rows)
            except sqlite3.Error as e:
                if not is_busy(e):
                    self._fail("write", e)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
