"""The knowledge-store role: chunks with scope/version metadata and their vectors.

Every backend implements ``KnowledgeStore``; the contract suite
(``tests/contract/test_knowledge_store_contract.py``) runs over all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from vdoctor.knowledge.chunks import Chunk


@dataclass(frozen=True)
class Hit:
    chunk: Chunk
    score: float


class KnowledgeStore(Protocol):
    def add(self, chunks: list[Chunk], vectors: npt.NDArray[np.float32]) -> int:
        """Insert or replace chunks by chunk_id. Returns how many were written."""
        ...

    def candidates(self, vector: npt.NDArray[np.float32], k: int, scope: str | None, version: str | None) -> list[Hit]:
        """Top-k chunks by inner product among those matching the filters, best first (ties by chunk_id)."""
        ...

    def lexical(self, text: str, k: int, scope: str | None, version: str | None) -> list[Hit]:
        """Top-k chunks by BM25 of ``text``'s tokens (``retrieval.tokens``) among those matching the filters.

        Only chunks sharing a token come back; BM25's corpus is the filtered set. Best first, ties by chunk_id.
        """
        ...

    def with_codes(self, codes: set[str], scope: str | None, version: str | None) -> list[Chunk]:
        """Chunks that hold any of these codes (the exact-match stage for code queries)."""
        ...

    def count(self, scope: str | None = None) -> int: ...

    def close(self) -> None: ...
