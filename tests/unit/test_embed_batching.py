"""Concurrent embedding calls share model calls, and every caller still gets exactly its own rows."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.conftest import wait_until
from vdoctor.assembly import embedder as embedder_from
from vdoctor.embedders import EmbedderConfig, open_embedder
from vdoctor.embedders.batching import CoalescingEmbedder
from vdoctor.embedders.cache import QueryCache
from vdoctor.settings import load_settings

pytestmark = pytest.mark.unit

DIM = 4


class SlowModel:
    """A model whose row for a text is known in advance, and which records every call it gets."""

    name = "slow"
    dim = DIM

    def __init__(self, seconds: float = 0.0, fail_on: str | None = None) -> None:
        self.seconds = seconds
        self.fail_on = fail_on
        self.calls: list[tuple[str, list[str]]] = []
        self.active = 0
        self.most_active = 0
        self._lock = threading.Lock()

    @staticmethod
    def row(kind: str, text: str) -> np.ndarray:
        return np.array([len(text), sum(map(ord, text)) % 97, kind == "embed_queries", 1.0], dtype=np.float32)

    def _call(self, kind: str, texts: list[str]) -> np.ndarray:
        with self._lock:
            self.calls.append((kind, list(texts)))
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        try:
            time.sleep(self.seconds)
            if self.fail_on in texts:
                raise RuntimeError(f"model failed on {self.fail_on}")
            return np.stack([self.row(kind, t) for t in texts])
        finally:
            with self._lock:
                self.active -= 1

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._call("embed", texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._call("embed_queries", texts)


def test_a_caller_alone_makes_exactly_the_call_it_would_have_made() -> None:
    model = SlowModel()
    embedder = CoalescingEmbedder(model)
    rows = embedder.embed(["a", "bb"])
    assert model.calls == [("embed", ["a", "bb"])]
    assert np.array_equal(rows, np.stack([SlowModel.row("embed", "a"), SlowModel.row("embed", "bb")]))
    assert embedder.embed([]).shape == (0, DIM)
    assert len(model.calls) == 1  # nothing to embed: no call


def test_callers_that_wait_share_one_call_and_each_gets_its_own_rows() -> None:
    model = SlowModel(seconds=0.05)
    embedder = CoalescingEmbedder(model)
    texts = [f"text {i}" for i in range(24)]
    start = threading.Barrier(len(texts))

    def call(text: str) -> np.ndarray:
        start.wait()
        return embedder.embed_queries([text])

    with ThreadPoolExecutor(len(texts)) as pool:
        got = list(pool.map(call, texts))
    for text, rows in zip(texts, got, strict=True):
        assert rows.shape == (1, DIM)
        assert np.array_equal(rows[0], SlowModel.row("embed_queries", text))
    # The first caller runs alone; the 23 that queued behind it need far fewer calls than 23.
    assert len(model.calls) < 8
    assert sorted(t for _, batch in model.calls for t in batch) == sorted(texts)
    assert model.most_active == 1  # the model is never called twice at once
    assert embedder.calls == len(model.calls) and embedder.texts == len(texts)


def test_a_text_left_by_many_callers_for_one_call_is_embedded_once() -> None:
    """An alert storm: many vehicles open sessions on the same alert at once."""
    model = GatedModel()
    embedder = CoalescingEmbedder(model)
    texts = ["first"] + ["battery module offline"] * 12 + ["coolant low", "coolant low", "first"]
    with ThreadPoolExecutor(len(texts)) as pool:
        first = pool.submit(embedder.embed_queries, [texts[0]])
        wait_until(lambda: len(model.gates) == 1)  # the first caller is in the model; the rest wait
        rest = [pool.submit(embedder.embed_queries, [text]) for text in texts[1:]]
        wait_until(lambda: embedder.waiting == len(texts) - 1)
        model.gates[0].set()
        wait_until(lambda: len(model.gates) == 2)
        model.gates[1].set()
        got = [first.result(5), *(f.result(5) for f in rest)]
    assert model.calls[1] == ("embed_queries", ["battery module offline", "coolant low", "first"])
    for text, rows in zip(texts, got, strict=True):
        np.testing.assert_array_equal(rows, SlowModel.row("embed_queries", text)[None, :])
    assert embedder.repeats == len(texts) - 1 - 3
    # One caller's own repeats, alone: one model row per distinct text, every row in place.
    rows = CoalescingEmbedder(SlowModel()).embed(["x", "y", "x"])
    np.testing.assert_array_equal(rows, np.stack([SlowModel.row("embed", t) for t in ("x", "y", "x")]))


def test_stored_texts_and_queries_never_share_a_call() -> None:
    model = SlowModel(seconds=0.02)
    embedder = CoalescingEmbedder(model)
    jobs = [("embed", f"case {i}") if i % 2 else ("embed_queries", f"query {i}") for i in range(16)]
    start = threading.Barrier(len(jobs))

    def call(job: tuple[str, str]) -> np.ndarray:
        kind, text = job
        start.wait()
        return getattr(embedder, kind)([text])[0]

    with ThreadPoolExecutor(len(jobs)) as pool:
        got = list(pool.map(call, jobs))
    for (kind, text), row in zip(jobs, got, strict=True):
        assert np.array_equal(row, SlowModel.row(kind, text))
    for kind, batch in model.calls:
        assert all(t.startswith("case" if kind == "embed" else "query") for t in batch)


def test_a_call_never_holds_more_than_max_batch_texts_beyond_its_first_caller() -> None:
    model = SlowModel(seconds=0.02)
    embedder = CoalescingEmbedder(model, max_batch=5)
    start = threading.Barrier(20)

    def call(i: int) -> np.ndarray:
        start.wait()
        return embedder.embed([f"t{i}a", f"t{i}b"])

    with ThreadPoolExecutor(20) as pool:
        got = list(pool.map(call, range(20)))
    assert all(len(batch) <= 5 for _, batch in model.calls)
    assert all(np.array_equal(rows[1], SlowModel.row("embed", f"t{i}b")) for i, rows in enumerate(got))
    # One caller with more texts than the cap still gets them, in one call of its own.
    assert len(embedder.embed([f"x{i}" for i in range(9)])) == 9


def test_a_failed_call_fails_each_of_its_callers_and_the_next_calls_work() -> None:
    model = SlowModel(seconds=0.05, fail_on="bad")
    embedder = CoalescingEmbedder(model)
    texts = ["first", *[f"ok {i}" for i in range(6)], "bad"]
    start = threading.Barrier(len(texts))
    outcomes: dict[str, str] = {}

    def call(text: str) -> None:
        start.wait()
        try:
            embedder.embed([text])
            outcomes[text] = "rows"
        except RuntimeError as e:
            outcomes[text] = str(e)

    with ThreadPoolExecutor(len(texts)) as pool:
        list(pool.map(call, texts))
    failed_call = next(batch for _, batch in model.calls if "bad" in batch)
    for text in texts:
        assert outcomes[text] == ("model failed on bad" if text in failed_call else "rows")
    assert np.array_equal(embedder.embed(["after"])[0], SlowModel.row("embed", "after"))


def test_the_default_model_is_shared_behind_the_query_cache_and_batches_match_single_calls() -> None:
    model = open_embedder("use-m3")
    assert isinstance(model, QueryCache) and isinstance(model.model, CoalescingEmbedder)
    # A deterministic replay's embedder: the same loaded model, every call its own.
    alone_calls = open_embedder("use-m3", EmbedderConfig(share_calls=False))
    assert isinstance(alone_calls, QueryCache) and alone_calls.model is model.model.model
    assert open_embedder("use-m3") is model
    texts = ["电池包单体压差过大", "coolant pump stall at idle", "高压绝缘电阻过低", "lost communication with ECM"] * 4
    alone = {t: model.model.embed([t])[0] for t in set(texts)}
    start = threading.Barrier(len(texts))

    def call(text: str) -> np.ndarray:
        start.wait()
        return model.embed([text])[0]

    with ThreadPoolExecutor(len(texts)) as pool:
        rows = list(pool.map(call, texts))
    # A text embedded within a batch differs from the same text alone by float rounding only.
    assert all(np.allclose(row, alone[t], atol=1e-6) for t, row in zip(texts, rows, strict=True))


def test_a_deterministic_replay_embeds_every_text_alone() -> None:
    """Batches depend on which runs embed at once, and a batch changes a vector's float rounding."""
    job = embedder_from(load_settings({}))
    replay = embedder_from(load_settings({"VDOCTOR_DETERMINISTIC": "true"}))
    assert isinstance(job, QueryCache) and isinstance(job.model, CoalescingEmbedder)
    assert isinstance(replay, QueryCache) and not isinstance(replay.model, CoalescingEmbedder)


class GatedModel(SlowModel):
    """Each call waits until the test lets it finish."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: list[threading.Event] = []

    def _call(self, kind: str, texts: list[str]) -> np.ndarray:
        gate = threading.Event()
        with self._lock:
            self.gates.append(gate)
        assert gate.wait(10), "the test never let the call finish"
        return super()._call(kind, texts)


def test_the_longest_waiter_calls_the_model_next() -> None:
    model = GatedModel()
    shared = CoalescingEmbedder(model)
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(shared.embed, ["a"])
        wait_until(lambda: len(model.gates) == 1)  # "a" is in the model
        query = pool.submit(shared.embed_queries, ["b"])
        wait_until(lambda: shared.waiting == 1)
        stored = pool.submit(shared.embed, ["c"])
        wait_until(lambda: shared.waiting == 2)
        model.gates[0].set()
        # "b" waited longest: it goes next, though "c" is of the finished call's kind.
        wait_until(lambda: len(model.gates) == 2)
        model.gates[1].set()
        wait_until(lambda: len(model.gates) == 3)
        model.gates[2].set()
        results = [first.result(5), query.result(5), stored.result(5)]
    assert model.calls == [("embed", ["a"]), ("embed_queries", ["b"]), ("embed", ["c"])]
    np.testing.assert_array_equal(results[1][0], SlowModel.row("embed_queries", "b"))
    np.testing.assert_array_equal(results[2][0], SlowModel.row("embed", "c"))
