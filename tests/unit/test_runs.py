"""KeyedRunPool: per-key order, one run per key at a time, many keys at once, failures surface."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from vdoctor.runs import KeyedRunPool, RunFailed

pytestmark = pytest.mark.unit


class Recorder:
    """A step that appends the item to the key's carry and tracks concurrency per key and overall."""

    def __init__(self, hold_s: float = 0.0) -> None:
        self.hold_s = hold_s
        self.lock = threading.Lock()
        self.active: dict[str, int] = {}
        self.max_per_key = 0
        self.max_total = 0
        self.total = 0

    def __call__(self, key: str, carry: tuple[str, ...], item: str) -> tuple[tuple[str, ...], str]:
        with self.lock:
            self.active[key] = self.active.get(key, 0) + 1
            self.total += 1
            self.max_per_key = max(self.max_per_key, self.active[key])
            self.max_total = max(self.max_total, self.total)
        time.sleep(self.hold_s)
        with self.lock:
            self.active[key] -= 1
            self.total -= 1
        new = (*carry, item)
        return new, f"{key}:{'+'.join(new)}"


def drain(pool: KeyedRunPool[Any, Any], keys: list[str]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {k: [] for k in keys}
    for k in keys:
        assert pool.wait(k, timeout_s=10)
        out[k] += pool.take(k)
    return out


def test_each_key_runs_in_order_chained_on_its_previous_result() -> None:
    step = Recorder(hold_s=0.01)
    pool: KeyedRunPool[str, str] = KeyedRunPool(4, step)
    try:
        pool.start("a", ("a0",), ["a1"])
        pool.start("b", (), ["b1", "b2"])
        pool.add("a", "a2")
        pool.add("a", "a3")
        out = drain(pool, ["a", "b"])
    finally:
        pool.close()
    # Each result sees exactly the items before it, in arrival order, from its own start carry.
    assert out["a"] == ["a:a0+a1", "a:a0+a1+a2", "a:a0+a1+a2+a3"]
    assert out["b"] == ["b:b1", "b:b1+b2"]
    assert step.max_per_key == 1


def test_many_keys_run_at_once_up_to_the_concurrency() -> None:
    step = Recorder(hold_s=0.05)
    pool: KeyedRunPool[str, str] = KeyedRunPool(8, step)
    keys = [f"k{i}" for i in range(20)]
    try:
        for k in keys:
            pool.start(k, (), ["x", "y"])
        out = drain(pool, keys)
    finally:
        pool.close()
    assert all(out[k] == [f"{k}:x", f"{k}:x+y"] for k in keys)
    assert step.max_total == 8  # 20 keys ready, 8 workers: all busy, never more
    assert step.max_per_key == 1


def test_take_forgets_a_key_only_when_nothing_is_left() -> None:
    gate = threading.Event()

    def step(key: str, carry: int, item: int) -> tuple[int, int]:
        gate.wait(5)
        return carry + item, carry + item

    pool: KeyedRunPool[int, int] = KeyedRunPool(2, step)
    try:
        pool.start("a", 0, [1, 2])
        assert pool.knows("a") and pool.drain() == []
        assert pool.take("a") == []  # running: nothing yet, key still known
        assert pool.knows("a")
        with pytest.raises(ValueError, match="use add"):
            pool.start("a", 0, [3])
        gate.set()
        assert pool.wait("a", timeout_s=5)
        assert pool.take("a") == [1, 3]
        assert not pool.knows("a")
        with pytest.raises(ValueError, match="use start"):
            pool.add("a", 4)
    finally:
        gate.set()
        pool.close()


def test_longest_queue_goes_first() -> None:
    order: list[str] = []
    gate = threading.Event()

    def step(key: str, carry: None, item: str) -> tuple[None, str]:
        if item == "block":
            gate.wait(5)
        order.append(key)
        return None, item

    pool: KeyedRunPool[str, str] = KeyedRunPool(1, step)
    try:
        pool.start("blocker", None, ["block"])  # occupies the only worker
        time.sleep(0.05)
        pool.start("short", None, ["s1"])
        pool.start("long", None, ["l1", "l2", "l3"])
        gate.set()
        drain(pool, ["blocker", "short", "long"])
    finally:
        pool.close()
    # With one worker: the key with 3 queued items starts before the one with 1.
    assert order[0] == "blocker"
    assert order[1] == "long"
    assert order.index("short") > 1


def test_a_failing_step_is_raised_on_take_and_stops_that_key_only() -> None:
    def step(key: str, carry: None, item: str) -> tuple[None, str]:
        if item == "boom":
            raise KeyError("bug")
        return None, item

    pool: KeyedRunPool[str, str] = KeyedRunPool(2, step)
    try:
        pool.start("bad", None, ["ok", "boom", "never"])
        pool.start("good", None, ["g1", "g2"])
        assert pool.wait("bad", timeout_s=5) and pool.wait("good", timeout_s=5)
        assert pool.take("good") == ["g1", "g2"]
        with pytest.raises(RunFailed, match="bad"):
            pool.take("bad")
        assert pool.queued == 0
    finally:
        pool.close()


def test_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        KeyedRunPool(0, lambda k, c, i: (c, i))


def test_drain_hands_over_exactly_the_finished_keys_once_each() -> None:
    gates = {k: threading.Event() for k in ("a", "b", "c")}

    def step(key: str, carry: int, item: int) -> tuple[int, str]:
        gates[key].wait(5)
        return carry + 1, f"{key}{carry + 1}"

    pool: KeyedRunPool[int, str] = KeyedRunPool(3, step)
    try:
        pool.start("a", 0, [1, 2])
        pool.start("b", 0, [1])
        pool.start("c", 0, [1])
        assert pool.drain() == []  # all three running: nothing to hand over, nothing polled per key
        gates["b"].set()
        assert pool.wait("b", timeout_s=5)
        assert pool.wait_finished(timeout_s=5)
        assert pool.drain() == [("b", ["b1"])]
        assert not pool.knows("b")  # nothing left: forgotten on the drain that emptied it
        assert pool.drain() == []  # handed over once
        gates["a"].set()
        assert pool.wait("a", timeout_s=5)
        # a's two runs finished one after the other: one entry, both results in order.
        assert pool.drain() == [("a", ["a1", "a2"])]
        assert pool.knows("c") and not pool.idle
        gates["c"].set()
        assert pool.wait("c", timeout_s=5)
        assert pool.drain() == [("c", ["c1"])]
        assert pool.idle
        assert pool.wait_finished(timeout_s=0.01)  # idle: nothing to wait for
    finally:
        for g in gates.values():
            g.set()
        pool.close()


def test_a_key_added_to_after_its_results_were_drained_chains_on_its_latest_carry() -> None:
    pool: KeyedRunPool[str, str] = KeyedRunPool(2, lambda k, c, i: ((*c, i), "+".join((*c, i))))
    try:
        pool.start("a", (), ["x"])
        assert pool.wait("a", timeout_s=5)
        assert pool.drain() == [("a", ["x"])]
        # Forgotten: the operator restarts the chain from what it stored.
        pool.start("a", ("x",), ["y"])
        pool.add("a", "z")
        assert pool.wait("a", timeout_s=5)
        assert pool.drain() == [("a", ["x+y", "x+y+z"])]
    finally:
        pool.close()


def test_a_failing_step_fails_the_drain() -> None:
    def step(key: str, carry: None, item: str) -> tuple[None, str]:
        if item == "boom":
            raise KeyError("bug")
        return None, item

    pool: KeyedRunPool[str, str] = KeyedRunPool(2, step)
    try:
        pool.start("bad", None, ["boom", "never"])
        assert pool.wait("bad", timeout_s=5)
        with pytest.raises(RunFailed, match="bad"):
            pool.drain()
        assert pool.queued == 0
    finally:
        pool.close()
