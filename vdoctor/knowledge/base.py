"""Knowledge store interface, its registry, and the two-stage search over it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import numpy as np

from vdoctor.embed import Embedder
from vdoctor.errors import UnknownStoreScheme
from vdoctor.knowledge.chunks import SEARCH_CANDIDATES, SEARCH_TOP, Chunk, KnowledgeRow, chunk_rows, codes_in, words

# Reranker weights, as for case recall: vector gist, exact code hits, word overlap.
W_VECTOR, W_CODES, W_LEXICAL = 0.5, 0.4, 0.1
# Embedding is the slow part of a load: embed this many chunks per batch.
EMBED_BATCH = 256


@dataclass(frozen=True)
class Hit:
    chunk: Chunk
    score: float


class KnowledgeStore(Protocol):
    def add(self, chunks: list[Chunk], vectors: np.ndarray) -> int:
        """Insert or replace chunks by chunk_id. Returns how many were written."""
        ...

    def candidates(self, vector: np.ndarray, k: int, scope: str | None, version: str | None) -> list[Hit]:
        """Top-k chunks by inner product among those matching the filters."""
        ...

    def with_codes(self, codes: set[str], scope: str | None, version: str | None) -> list[Chunk]:
        """Chunks that hold any of these codes (the exact-match stage for code queries)."""
        ...

    def count(self, scope: str | None = None) -> int: ...

    def close(self) -> None: ...


def _open_sqlite(url: str) -> KnowledgeStore:
    from vdoctor.knowledge.sqlite_store import SqliteKnowledgeStore

    path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
    return SqliteKnowledgeStore(path or ":memory:")


def _open_memory(url: str) -> KnowledgeStore:
    from vdoctor.knowledge.memory_store import InMemoryKnowledgeStore

    return InMemoryKnowledgeStore()


_REGISTRY: dict[str, Callable[[str], KnowledgeStore]] = {"sqlite": _open_sqlite, "memory": _open_memory}


def open_knowledge(url: str) -> KnowledgeStore:
    scheme = urlsplit(url).scheme
    opener = _REGISTRY.get(scheme)
    if opener is None:
        raise UnknownStoreScheme(
            f"unknown knowledge URL scheme {scheme!r}; valid schemes: {', '.join(sorted(_REGISTRY))}"
        )
    return opener(url)


class KnowledgeBase:
    """Loads rows as embedded chunks, and searches them in two stages."""

    def __init__(self, store: KnowledgeStore, embedder: Embedder) -> None:
        self.store = store
        self.embedder = embedder

    def load(
        self, rows: Iterable[KnowledgeRow], version: str, progress: Callable[[int, int], None] | None = None
    ) -> int:
        chunks = chunk_rows(rows, version)
        written = 0
        for start in range(0, len(chunks), EMBED_BATCH):
            batch = chunks[start : start + EMBED_BATCH]
            written += self.store.add(batch, self.embedder.embed([c.text for c in batch]))
            if progress is not None:
                progress(start + len(batch), len(chunks))
        return written

    def search(
        self, query: str, scope: str | None = None, version: str | None = None, k: int = SEARCH_TOP
    ) -> list[Hit]:
        vector = self.embedder.embed([query])[0]
        candidates = self.store.candidates(vector, SEARCH_CANDIDATES, scope, version)
        query_codes = codes_in(query)
        if query_codes:
            # A code is looked up exactly: chunks holding it join the candidates
            # even when the vector stage missed them (a code is 5 characters of
            # a 300-token chunk, too little for an n-gram vector to find).
            have = {h.chunk.chunk_id for h in candidates}
            for chunk in self.store.with_codes(query_codes, scope, version):
                if chunk.chunk_id not in have:
                    candidates.append(Hit(chunk, 0.0))
        query_words = words(query)
        rescored = []
        for hit in candidates:
            code_hit = len(query_codes & set(hit.chunk.codes)) / len(query_codes) if query_codes else 0.0
            lexical = len(query_words & words(hit.chunk.text)) / len(query_words) if query_words else 0.0
            rescored.append(Hit(hit.chunk, W_VECTOR * hit.score + W_CODES * code_hit + W_LEXICAL * lexical))
        rescored.sort(key=lambda h: (-h.score, h.chunk.chunk_id))
        return rescored[:k]

    def close(self) -> None:
        self.store.close()
