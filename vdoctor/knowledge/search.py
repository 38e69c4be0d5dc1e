"""Knowledge search: rows loaded as embedded chunks, searched in two stages.

Stage 1 ranks the chunks that pass the scope/version filters by vector (and
adds every chunk holding a queried code: codes are looked up exactly); stage 2
reranks the candidates by vector score, code hits and word overlap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from vdoctor.embedders import Embedder
from vdoctor.knowledge.chunks import SEARCH_CANDIDATES, SEARCH_TOP, KnowledgeRow, chunk_rows, codes_in, words
from vdoctor.knowledge.stores import Hit, KnowledgeStore

# Reranker weights, as for case recall: vector gist, exact code hits, word overlap.
W_VECTOR, W_CODES, W_LEXICAL = 0.5, 0.4, 0.1
# Embedding is the slow part of a load: embed this many chunks per batch.
EMBED_BATCH = 256


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
