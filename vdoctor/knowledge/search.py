"""Knowledge search: rows loaded as embedded chunks, searched in two stages.

Stage 1 takes, among the chunks that pass the scope/version filters, the
lexical channel's top candidates (BM25) and the dense channel's (vector), and
fuses them (``retrieval.hybrid``, the pipeline similar-case recall runs); every
chunk holding a queried code joins them (codes are looked up exactly). Stage 2
adds the share of the query's codes each chunk holds, and keeps the top 5.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt

from vdoctor.embedders import Embedder
from vdoctor.knowledge.chunks import SEARCH_TOP, KnowledgeRow, chunk_rows, codes_in
from vdoctor.knowledge.stores import Hit, KnowledgeStore
from vdoctor.retrieval.hybrid import DENSE_CANDIDATES, LEXICAL_CANDIDATES, ChannelScores, fuse

# Stage 2 adds this times the share of the query's codes a chunk holds to its fused
# score (in [0, 1]): the weight the code term had before the hybrid pipeline. Not
# tuned (no benchmark of ours has code queries with graded answers); a chunk
# holding the code outranks one that only reads alike.
W_CODES = 0.4
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
        vector = self.embedder.embed_queries([query])[0]
        dense = {h.chunk.chunk_id: h for h in self.store.candidates(vector, DENSE_CANDIDATES, scope, version)}
        lexical = {h.chunk.chunk_id: h for h in self.store.lexical(query, LEXICAL_CANDIDATES, scope, version)}
        chunks = {cid: h.chunk for cid, h in {**lexical, **dense}.items()}
        query_codes = codes_in(query)
        if query_codes:
            # A code is looked up exactly: chunks holding it join the candidates
            # even when neither channel ranked them high (a code is 5 characters
            # of a 300-token chunk).
            for chunk in self.store.with_codes(query_codes, scope, version):
                chunks.setdefault(chunk.chunk_id, chunk)
        if not chunks:
            return []
        # A chunk the dense channel did not return still has a dense score: its vector's, computed here.
        missing = [cid for cid in chunks if cid not in dense]
        extra = self._dense_scores(missing, vector, scope, version)
        scores = {
            cid: ChannelScores(
                lexical[cid].score if cid in lexical else None,
                dense[cid].score if cid in dense else extra.get(cid, 0.0),
            )
            for cid in chunks
        }
        fused = fuse(scores)
        rescored = []
        for cid, chunk in chunks.items():
            code_hit = len(query_codes & set(chunk.codes)) / len(query_codes) if query_codes else 0.0
            rescored.append(Hit(chunk, fused[cid] + W_CODES * code_hit))
        rescored.sort(key=lambda h: (-h.score, h.chunk.chunk_id))
        return rescored[:k]

    def _dense_scores(
        self, chunk_ids: list[str], vector: npt.NDArray[np.float32], scope: str | None, version: str | None
    ) -> dict[str, float]:
        """Dense scores of chunks the dense channel did not return (the lexical and code hits)."""
        if not chunk_ids:
            return {}
        wanted = set(chunk_ids)
        # The dense channel over the whole filtered set is exact and cheap at knowledge-base sizes.
        hits = self.store.candidates(vector, self.store.count(scope), scope, version)
        return {h.chunk.chunk_id: h.score for h in hits if h.chunk.chunk_id in wanted}

    def close(self) -> None:
        self.store.close()
