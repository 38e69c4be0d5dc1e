"""The embedder role: text -> fixed-dimension, L2-normalised float32 vectors.

Vectors are normalised so that every store can rank by inner product (cosine).
Some models embed what is searched for and what is stored differently (e5's
``query: `` and ``passage: `` prefixes): ``embed`` is for what a store keeps
(case texts, knowledge chunks), ``embed_queries`` for what is looked up with
it; symmetric models give the same vector for both.

Every embedder is held to one contract (``tests/contract/test_embedder_contract.py``):
its dimension, unit norm, determinism, a batch giving the same vectors as
texts one by one, and the same vectors from many threads at once.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

# Dimension of the hashing embedder, and the one the OpenAI embedder asks its
# endpoint for: 256 keeps a 1M-record float32 matrix at 1 GB.
DEFAULT_DIM = 256
# A batch of embeddings: float32, one L2-normalised row per text.
Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    dim: int
    name: str

    def embed(self, texts: list[str]) -> Vectors:
        """Vectors of texts to be stored and searched (passages): float32, shape (len(texts), dim), unit rows."""
        ...

    def embed_queries(self, texts: list[str]) -> Vectors:
        """Vectors of texts to search with (queries); the same shape and norm as ``embed``."""
        ...


def embedder_id(embedder: Embedder) -> str:
    """What a record keeps of the embedder that made its vector: ``<name>/<dim>``.

    Vectors of two embedders cannot be compared, even at the same dimension;
    stores refuse to search a set that mixes them (``memory reembed`` fixes it).
    """
    return f"{embedder.name}/{embedder.dim}"


def normalised(rows: npt.NDArray[np.floating[Any]]) -> Vectors:
    """Rows scaled to unit length (an all-zero row stays zero), as float32."""
    out = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)
