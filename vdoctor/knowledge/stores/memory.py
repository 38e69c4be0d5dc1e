"""In-memory twin of the knowledge store."""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

from vdoctor.knowledge.chunks import Chunk
from vdoctor.knowledge.stores.base import Hit
from vdoctor.retrieval.bm25 import Bm25Corpus, top_scored
from vdoctor.retrieval.tokens import query_terms, tokens


def _matches(chunk: Chunk, scope: str | None, version: str | None) -> bool:
    return (scope is None or chunk.scope == scope) and (version is None or chunk.version == version)


class InMemoryKnowledgeStore:
    def __init__(self) -> None:
        self._rows: dict[str, tuple[Chunk, npt.NDArray[np.float32]]] = {}
        self._lock = threading.Lock()

    def add(self, chunks: list[Chunk], vectors: npt.NDArray[np.float32]) -> int:
        with self._lock:
            for chunk, vec in zip(chunks, vectors, strict=True):
                self._rows[chunk.chunk_id] = (chunk, np.asarray(vec, dtype=np.float32))
        return len(chunks)

    def candidates(self, vector: npt.NDArray[np.float32], k: int, scope: str | None, version: str | None) -> list[Hit]:
        with self._lock:
            rows = [
                (c, v)
                for c, v in self._rows.values()
                if (scope is None or c.scope == scope) and (version is None or c.version == version)
            ]
        hits = [Hit(c, float(v @ vector)) for c, v in rows]
        hits.sort(key=lambda h: (-h.score, h.chunk.chunk_id))
        return hits[:k]

    def lexical(self, text: str, k: int, scope: str | None, version: str | None) -> list[Hit]:
        with self._lock:
            rows = sorted((c for c, _ in self._rows.values() if _matches(c, scope, version)), key=lambda c: c.chunk_id)
        terms = query_terms(text)
        if not rows or not terms:
            return []
        scores = Bm25Corpus([tokens(c.text) for c in rows]).scores(terms)
        return [Hit(rows[i], score) for i, score in top_scored(scores, k)]

    def with_codes(self, codes: set[str], scope: str | None, version: str | None) -> list[Chunk]:
        with self._lock:
            return [
                c
                for c, _ in self._rows.values()
                if codes & set(c.codes)
                and (scope is None or c.scope == scope)
                and (version is None or c.version == version)
            ]

    def count(self, scope: str | None = None) -> int:
        with self._lock:
            return sum(1 for c, _ in self._rows.values() if scope is None or c.scope == scope)

    def close(self) -> None:
        pass
