"""One compute thread per embedding call: a model never oversubscribes the job's cores.

The job already runs its work on the cores it was given (Flink's slots, the
run pool's worker threads); a model that starts its own thread pool on top
made a query take ~400 ms instead of ~25 ms on 2 busy cores (NOTES.md). So:

- BLAS (numpy's matrix products, which the USE model runs on) is limited to
  one thread for the whole process, once, when a model loads. A per-call
  limit is not enough on its own: threadpoolctl's limit restores the
  previous setting when it ends, so two threads limiting and restoring at
  once could leave the other's call running with the library's default;
  with the process's default at one, every restore restores one;
- OpenMP (the e5 engine's C code) reads ``OMP_NUM_THREADS`` when the engine's
  own OpenMP runtime loads: it is set to 1 before the engine is loaded.

``tests/unit/test_embedder_threads.py`` checks BLAS's limit once the model
has loaded, and that many threads embedding at once get the same vectors
without any new thread beside them.
"""

from __future__ import annotations

import os
import threading

import numpy as np
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

# Compute threads per embedding call.
EMBED_THREADS = 1
_lock = threading.Lock()
_pinned = False


def pin_blas_threads() -> None:
    """Limit BLAS to ``EMBED_THREADS`` threads for the rest of the process (idempotent)."""
    global _pinned
    if _pinned:  # every vector scan calls this: no lock once pinned
        return
    with _lock:
        if not _pinned:
            # Not a context: the limit stays (the limiter object is dropped, the setting is not).
            threadpool_limits(limits=EMBED_THREADS, user_api="blas")
            _settle_single_thread_gemm()
            _pinned = True


def _settle_single_thread_gemm() -> None:
    """One float32 product 512 columns wide, so that the narrower ones after it run at full speed.

    Measured with the OpenBLAS 0.3.27 that numpy 2.1's wheel ships (its
    Haswell kernels, on the 2-core AMD EPYC development machine): on one
    thread, a process whose first float32 products are at most 256 columns
    wide runs them at ~11 GFLOP/s, ~3x slower than the ~35 it reaches once
    any product of 384 columns or more has run; from then on they stay fast.
    use-m3's second CNN layers are such products (256 columns): without this,
    ``use_pieces.py``'s pass, which runs no wider product, took ~10 ms a text
    where it takes ~5.5 (``bench/embed_pieces.py``). It costs ~3 ms, once.
    """
    _ = np.ones((64, 512), dtype=np.float32) @ np.ones((512, 512), dtype=np.float32)


def pin_openmp_threads() -> None:
    """Make an OpenMP runtime loaded after this call start with ``EMBED_THREADS`` threads."""
    os.environ["OMP_NUM_THREADS"] = str(EMBED_THREADS)
