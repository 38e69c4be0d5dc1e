"""The query-vector cache: a query seen before is not embedded again, and gets the very vector the model gave."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from vdoctor.embedders.base import Vectors
from vdoctor.embedders.cache import QueryCache
from vdoctor.embedders.hashing import HashingEmbedder

pytestmark = pytest.mark.unit


class Counting:
    """The hashing embedder, counting the texts it is asked to embed."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(32)
        self.name, self.dim = self.inner.name, self.inner.dim
        self.queries: list[str] = []
        self.passages: list[str] = []

    def embed(self, texts: list[str]) -> Vectors:
        self.passages += texts
        return self.inner.embed(texts)

    def embed_queries(self, texts: list[str]) -> Vectors:
        self.queries += texts
        return self.inner.embed_queries(texts)


def test_a_repeated_query_is_embedded_once_with_the_same_vector() -> None:
    model = Counting()
    cache = QueryCache(model)
    first = cache.embed_queries(["电池温度过高", "charging fault"])
    again = cache.embed_queries(["charging fault", "电池温度过高", "charging fault", "new text"])
    assert model.queries == ["charging fault", "电池温度过高", "new text"]
    np.testing.assert_array_equal(again[1], first[0])
    np.testing.assert_array_equal(again[0], first[1])
    np.testing.assert_array_equal(
        again, model.inner.embed_queries(["charging fault", "电池温度过高", "charging fault", "new text"])
    )
    assert (cache.hits, cache.misses) == (3, 3)
    assert cache.name == model.name and cache.dim == model.dim


def test_stored_texts_always_go_to_the_model() -> None:
    model = Counting()
    cache = QueryCache(model)
    cache.embed(["case one"])
    cache.embed(["case one"])
    assert model.passages == ["case one", "case one"] and model.queries == []


def test_the_least_recently_used_query_leaves_first() -> None:
    model = Counting()
    cache = QueryCache(model, size=2)
    cache.embed_queries(["a"])
    cache.embed_queries(["b"])
    cache.embed_queries(["a"])  # a is now the most recent
    cache.embed_queries(["c"])  # b leaves
    cache.embed_queries(["a", "b"])
    assert model.queries == ["a", "b", "c", "b"]


def test_a_caller_changing_its_vectors_does_not_change_the_cache() -> None:
    cache = QueryCache(Counting())
    got = cache.embed_queries(["x"])
    got[0, :] = 0.0
    assert float(np.linalg.norm(cache.embed_queries(["x"])[0])) > 0.99
    assert cache.embed_queries([]).shape == (0, 32)


def test_threads_share_it() -> None:
    model = Counting()
    cache = QueryCache(model, size=8)
    texts = [f"alert {i % 12}" for i in range(400)]
    want = {t: model.inner.embed_queries([t])[0] for t in set(texts)}
    bad: list[str] = []

    def work(part: list[str]) -> None:
        for text in part:
            if not np.array_equal(cache.embed_queries([text])[0], want[text]):
                bad.append(text)

    threads = [threading.Thread(target=work, args=(texts[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == [] and cache.hits + cache.misses == 400 and len(cache._vectors) <= 8
