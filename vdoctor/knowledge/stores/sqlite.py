"""SQLite knowledge store: chunks with scope/version metadata and float32 vectors.

Search filters in SQL, then scores the filtered chunks in memory: their
vectors with numpy (dense channel), their tokens with BM25 (lexical channel;
the filtered set is the corpus). What a filter selects (chunks, vectors, the
BM25 postings) is cached per (scope, version) and dropped on every write, so
repeated queries do not re-read the table. A knowledge base is a few thousand
chunks (the 18,805-row code table makes 1,198), small enough for that.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import numpy as np
import numpy.typing as npt

from vdoctor.errors import StoreError
from vdoctor.knowledge.chunks import Chunk
from vdoctor.knowledge.stores.base import Hit
from vdoctor.retrieval.bm25 import Bm25Corpus, top_scored
from vdoctor.retrieval.tokens import query_terms, tokens

BUSY_TIMEOUT_MS = 30_000
_SCHEMA = """
CREATE TABLE IF NOT EXISTS knowledge_chunk (
    chunk_id TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    version TEXT NOT NULL,
    text TEXT NOT NULL,
    codes TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    vec BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_knowledge_filter ON knowledge_chunk (scope, version);
"""


class SqliteKnowledgeStore:
    def __init__(self, path: str) -> None:
        self.path = path
        try:
            if path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
            self._conn.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as e:
            raise StoreError(f"cannot open the knowledge store at {path}: {e}") from e
        self._lock = threading.Lock()
        self._cache: dict[tuple[str | None, str | None], tuple[list[Chunk], npt.NDArray[np.float32]]] = {}
        self._lexical: dict[tuple[str | None, str | None], Bm25Corpus] = {}

    def add(self, chunks: list[Chunk], vectors: npt.NDArray[np.float32]) -> int:
        rows = [
            (
                c.chunk_id,
                c.scope,
                c.version,
                c.text,
                json.dumps(c.codes),
                c.tokens,
                np.asarray(v, dtype=np.float32).tobytes(),
            )
            for c, v in zip(chunks, vectors, strict=True)
        ]
        try:
            with self._lock, self._conn:
                self._conn.executemany("INSERT OR REPLACE INTO knowledge_chunk VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
                self._cache.clear()
                self._lexical.clear()
        except sqlite3.Error as e:
            raise StoreError(f"knowledge store {self.path}: {e}") from e
        return len(rows)

    def _filtered(self, scope: str | None, version: str | None) -> tuple[list[Chunk], npt.NDArray[np.float32]]:
        key = (scope, version)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        sql = "SELECT chunk_id, scope, version, text, codes, tokens, vec FROM knowledge_chunk WHERE 1 = 1"
        params: list[str] = []
        if scope is not None:
            sql += " AND scope = ?"
            params.append(scope)
        if version is not None:
            sql += " AND version = ?"
            params.append(version)
        try:
            rows = self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"knowledge store {self.path}: {e}") from e
        chunks = [
            Chunk(chunk_id=r[0], scope=r[1], version=r[2], text=r[3], codes=json.loads(r[4]), tokens=r[5]) for r in rows
        ]
        matrix = (
            np.stack([np.frombuffer(r[6], dtype=np.float32) for r in rows])
            if rows
            else np.zeros((0, 1), dtype=np.float32)
        )
        self._cache[key] = (chunks, matrix)
        return chunks, matrix

    def candidates(self, vector: npt.NDArray[np.float32], k: int, scope: str | None, version: str | None) -> list[Hit]:
        with self._lock:
            chunks, matrix = self._filtered(scope, version)
        if not chunks:
            return []
        scores = matrix @ vector.astype(np.float32)
        top = np.argsort(-scores, kind="stable")[:k]
        hits = [Hit(chunks[i], float(scores[i])) for i in top]
        hits.sort(key=lambda h: (-h.score, h.chunk.chunk_id))  # equal scores in a fixed order
        return hits

    def lexical(self, text: str, k: int, scope: str | None, version: str | None) -> list[Hit]:
        terms = query_terms(text)
        if not terms:
            return []
        with self._lock:
            chunks, _ = self._filtered(scope, version)
            corpus = self._lexical.get((scope, version))
            if corpus is None:
                corpus = self._lexical[(scope, version)] = Bm25Corpus([tokens(c.text) for c in chunks])
        hits = [Hit(chunks[i], score) for i, score in top_scored(corpus.scores(terms), len(chunks))]
        hits.sort(key=lambda h: (-h.score, h.chunk.chunk_id))
        return hits[:k]

    def with_codes(self, codes: set[str], scope: str | None, version: str | None) -> list[Chunk]:
        with self._lock:
            chunks, _ = self._filtered(scope, version)
        return [c for c in chunks if codes & set(c.codes)]

    def count(self, scope: str | None = None) -> int:
        sql = "SELECT COUNT(*) FROM knowledge_chunk"
        params: tuple[str, ...] = ()
        if scope is not None:
            sql, params = sql + " WHERE scope = ?", (scope,)
        with self._lock:
            return int(self._conn.execute(sql, params).fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
