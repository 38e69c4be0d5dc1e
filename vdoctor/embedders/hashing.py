"""The hashing embedder: hashed character n-grams (fast tests; no model at all).

It hashes character 1- to 3-grams into a fixed number of buckets, so it needs
no model and costs almost nothing, for Chinese (no word boundaries) as well as
English. Vectors are normalised, so inner product is cosine. It knows no
meaning: a symptom told in other words finds little (R@5 0.12 on the Chinese
queries of bench/vehicle_retrieval.py); the product's default is a real model
(``use.py``). It is symmetric: queries and stored texts embed alike.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from vdoctor.embedders.base import DEFAULT_DIM, Vectors

# Character 1- to 3-grams: 1-grams carry Chinese words' meaning, 2/3-grams
# carry English morphology and codes such as P0A7F.
NGRAM_SIZES = (1, 2, 3)
_SPACE_RE = re.compile(r"\s+")


def _bucket(gram: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(gram.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    # The sign bit spreads collisions around zero instead of piling them up.
    return value % dim, (1.0 if (value >> 63) & 1 else -1.0)


class HashingEmbedder:
    """Deterministic hashed character n-gram embedder (no network, no model files)."""

    name = "hash-ngram-v1"

    def __init__(self, dim: int = DEFAULT_DIM) -> None:
        self.dim = dim
        self._cache: dict[str, tuple[int, float]] = {}

    def _miss(self, gram: str) -> tuple[int, float]:
        """Bucket and sign of a gram not in the cache yet (``embed`` looks there first)."""
        hit = _bucket(gram, self.dim)
        if len(self._cache) < 500_000:
            self._cache[gram] = hit
        return hit

    def embed(self, texts: list[str]) -> Vectors:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            norm = _SPACE_RE.sub(" ", text.lower()).strip()
            grams = [norm[i : i + n] for n in NGRAM_SIZES for i in range(len(norm) - n + 1)]
            # Whitespace is collapsed to single spaces, so the only all-space gram is " ".
            cached = self._cache.get
            hits = [cached(gram) or self._miss(gram) for gram in grams if gram != " "]
            if not hits:
                continue
            buckets, signs = zip(*hits, strict=True)
            # Sums of +-1 are exact in float64 and float32 alike: same vector as adding one by one.
            out[row] = np.bincount(buckets, weights=signs, minlength=self.dim)
            length = float(np.linalg.norm(out[row]))
            if length > 0:
                out[row] /= length
        return out

    def embed_queries(self, texts: list[str]) -> Vectors:
        return self.embed(texts)
