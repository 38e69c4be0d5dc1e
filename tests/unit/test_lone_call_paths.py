"""The paths of a lone call (one query; a combiner found idle) give what the general paths give."""

from __future__ import annotations

import random
import threading
from collections.abc import Hashable

import numpy as np
import pytest

from tests.unit.test_query_cache import Counting
from vdoctor.combining import Combiner
from vdoctor.embedders.base import Vectors
from vdoctor.embedders.cache import QueryCache

pytestmark = pytest.mark.unit


def test_one_query_gets_what_the_general_path_gives_with_the_same_counts_and_order() -> None:
    rng = random.Random(23)
    vocabulary = [f"alert {i} 单体压差过大" for i in range(40)]
    fast_model, plain_model = Counting(), Counting()
    fast, plain = QueryCache(fast_model, size=16), QueryCache(plain_model, size=16)
    for _ in range(2000):
        text = rng.choice(vocabulary)
        got, expected = fast.embed_queries([text]), plain._many([text])
        assert got.tobytes() == expected.tobytes()
        assert (got.shape, got.dtype, got.flags.c_contiguous) == (expected.shape, expected.dtype, True)
        assert got.flags.writeable and not np.shares_memory(got, fast._vectors[text])
        assert (fast.hits, fast.misses, list(fast._vectors)) == (plain.hits, plain.misses, list(plain._vectors))
    assert fast_model.queries == plain_model.queries
    assert fast.hits > 500 and fast.misses > 500  # both ways taken, with evictions


def test_a_model_that_answers_one_query_with_other_than_one_row_fails_the_call() -> None:
    class TwoRows(Counting):
        def embed_queries(self, texts: list[str]) -> Vectors:
            return np.zeros((2, self.dim), dtype=np.float32)

    cache = QueryCache(TwoRows())
    with pytest.raises(ValueError):
        cache.embed_queries(["x"])
    assert len(cache._vectors) == 0


def test_a_lone_caller_gets_its_result_or_its_error_and_the_counts_of_the_general_path() -> None:
    def run(kind: Hashable, items: list[int]) -> list[int | BaseException]:
        if kind == "raise":
            raise RuntimeError("the whole call failed")
        return [ValueError(f"bad {i}") if i < 0 else 2 * i for i in items]

    combiner: Combiner[int, int] = Combiner(run, max_size=8)
    assert combiner.submit("k", 21, size=3) == 42
    with pytest.raises(ValueError, match="bad -1"):
        combiner.submit("k", -1)
    with pytest.raises(RuntimeError, match="whole call"):
        combiner.submit("raise", 1)
    assert (combiner.calls, combiner.size, combiner.waiting) == (2, 4, 0)
    assert not combiner._busy and combiner.submit("k", 5) == 10  # an error left it idle


def test_callers_that_come_while_a_lone_call_runs_wait_and_are_served_next() -> None:
    started, release = threading.Event(), threading.Event()
    calls: list[list[int]] = []

    def run(kind: Hashable, items: list[int]) -> list[int | BaseException]:
        calls.append(list(items))
        if len(calls) == 1:
            started.set()
            assert release.wait(5)
        return [2 * i for i in items]

    combiner: Combiner[int, int] = Combiner(run, max_size=8)
    results: dict[int, int] = {}
    first = threading.Thread(target=lambda: results.update({1: combiner.submit("k", 1)}))
    first.start()
    assert started.wait(5)
    others = [threading.Thread(target=lambda i=i: results.update({i: combiner.submit("k", i)})) for i in (2, 3, 4)]
    for thread in others:
        thread.start()
    while combiner.waiting < 3:
        threading.Event().wait(0.001)
    release.set()
    for thread in [first, *others]:
        thread.join(5)
    assert results == {1: 2, 2: 4, 3: 6, 4: 8}
    assert calls[0] == [1] and sorted(calls[1]) == [2, 3, 4] and len(calls) == 2
