"""An embedding call computes on one thread: the models never start pools that compete for the job's cores."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from threadpoolctl import threadpool_info  # type: ignore[import-untyped]

from vdoctor.embedders import open_embedder
from vdoctor.embedders.threads import EMBED_THREADS

pytestmark = pytest.mark.unit

TEXTS = ["电池包单体压差过大", "coolant pump stall at idle", "高压绝缘电阻过低", "lost communication with ECM"]


def _os_threads() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def test_use_m3_runs_blas_on_one_thread_and_many_callers_get_the_same_vectors() -> None:
    model = open_embedder("use-m3")
    assert open_embedder("use-m3") is model  # loaded once per process
    alone = model.embed(TEXTS)
    # BLAS is limited for the whole process once the model loads, not per call.
    assert {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"} == {EMBED_THREADS}
    before = _os_threads()
    seen_during: list[int] = []
    barrier = threading.Barrier(8)

    def call(i: int) -> np.ndarray:
        barrier.wait()
        out = model.embed([TEXTS[i % len(TEXTS)]])[0]
        seen_during.append(_os_threads())
        return out

    with ThreadPoolExecutor(8) as pool:
        rows = list(pool.map(call, range(32)))
    for i, row in enumerate(rows):
        assert np.allclose(row, alone[i % len(TEXTS)], atol=1e-6)
    # The 8 callers and nothing else: no BLAS or OpenMP pool appeared beside them.
    assert max(seen_during) <= before + 8
