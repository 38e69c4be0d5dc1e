"""The embedder role: text -> fixed-dimension, L2-normalised float32 vectors.

Vectors are normalised so that every store can rank by inner product (cosine).
Every embedder is held to one contract (``tests/contract/test_embedder_contract.py``):
its dimension, unit norm, determinism, and a batch giving the same vectors as
texts one by one.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

# Dimension of the offline embedder, and the one the OpenAI embedder asks its
# endpoint for: 256 keeps a 1M-record float32 matrix at 1 GB.
DEFAULT_DIM = 256
# A batch of embeddings: float32, one L2-normalised row per text.
Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    dim: int
    name: str

    def embed(self, texts: list[str]) -> Vectors:
        """Return a float32 array of shape (len(texts), dim), rows L2-normalised."""
        ...
