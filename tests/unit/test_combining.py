"""The combiner: concurrent callers' requests served by shared calls, each caller getting its own result."""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import wait_until
from vdoctor.combining import Combiner

pytestmark = pytest.mark.unit


class GatedRun:
    """Doubles each item; every call waits for its own gate, so a test decides when a call ends."""

    def __init__(self) -> None:
        self.calls: list[tuple[Hashable, list[int]]] = []
        self.gates: list[threading.Event] = []
        self.fail_items: set[int] = set()
        self.raise_call = False

    def __call__(self, kind: Hashable, items: list[int]) -> list[int | BaseException]:
        gate = threading.Event()
        self.calls.append((kind, list(items)))
        self.gates.append(gate)
        assert gate.wait(5), "the test never opened this call's gate"
        if self.raise_call:
            raise RuntimeError("the whole call failed")
        return [ValueError(f"bad item {i}") if i in self.fail_items else 2 * i for i in items]


def test_a_lone_caller_runs_its_own_request_at_once() -> None:
    run = GatedRun()
    combiner: Combiner[int, int] = Combiner(run, max_size=8)
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(combiner.submit, "k", 21)
        wait_until(lambda: len(run.gates) == 1)
        run.gates[0].set()
        assert result.result(5) == 42
    assert run.calls == [("k", [21])]
    assert (combiner.calls, combiner.size) == (1, 1)


def test_callers_that_wait_share_the_next_call_and_each_gets_its_own_result() -> None:
    run = GatedRun()
    combiner: Combiner[int, int] = Combiner(run, max_size=8)
    with ThreadPoolExecutor(5) as pool:
        first = pool.submit(combiner.submit, "k", 1)
        wait_until(lambda: len(run.gates) == 1)
        waiting = [pool.submit(combiner.submit, "k", i) for i in (2, 3, 4, 5)]
        wait_until(lambda: combiner.waiting == 4)
        run.gates[0].set()
        wait_until(lambda: len(run.gates) == 2)
        run.gates[1].set()
        assert first.result(5) == 2
        assert [f.result(5) for f in waiting] == [4, 6, 8, 10]
    assert run.calls[0] == ("k", [1])
    assert sorted(run.calls[1][1]) == [2, 3, 4, 5]  # one call for the four that waited
    assert (combiner.calls, combiner.size) == (2, 5)


def test_an_error_in_place_of_one_result_reaches_only_its_caller() -> None:
    run = GatedRun()
    run.fail_items = {3}
    combiner: Combiner[int, int] = Combiner(run, max_size=8)
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(combiner.submit, "k", 1)
        wait_until(lambda: len(run.gates) == 1)
        good, bad = pool.submit(combiner.submit, "k", 2), pool.submit(combiner.submit, "k", 3)
        wait_until(lambda: combiner.waiting == 2)
        run.gates[0].set()
        wait_until(lambda: len(run.gates) == 2)
        run.gates[1].set()
        assert first.result(5) == 2 and good.result(5) == 4
        with pytest.raises(ValueError, match="bad item 3"):
            bad.result(5)


def test_a_call_that_raises_fails_every_caller_it_served_and_the_next_call_still_runs() -> None:
    run = GatedRun()
    combiner: Combiner[int, int] = Combiner(run, max_size=8)
    with ThreadPoolExecutor(3) as pool:
        run.raise_call = True
        failed = pool.submit(combiner.submit, "k", 1)
        wait_until(lambda: len(run.gates) == 1)
        run.gates[0].set()
        with pytest.raises(RuntimeError, match="whole call"):
            failed.result(5)
        run.raise_call = False
        later = pool.submit(combiner.submit, "k", 7)
        wait_until(lambda: len(run.gates) == 2)
        run.gates[1].set()
        assert later.result(5) == 14


def test_kinds_never_share_a_call_and_no_call_exceeds_max_size() -> None:
    run = GatedRun()
    combiner: Combiner[int, int] = Combiner(run, max_size=3)
    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(combiner.submit, "a", 0)
        wait_until(lambda: len(run.gates) == 1)
        futures = [pool.submit(combiner.submit, "a" if i % 2 else "b", i, 1) for i in range(1, 8)]
        wait_until(lambda: combiner.waiting == 7)
        deadline = time.monotonic() + 5
        while not all(f.done() for f in [first, *futures]):  # every call's gate opened as it comes
            assert time.monotonic() < deadline, "timed out"
            for gate in list(run.gates):
                gate.set()
            time.sleep(0.005)
        assert [f.result(5) for f in futures] == [2 * i for i in range(1, 8)]
    for kind, items in run.calls:
        assert len(items) <= 3
        assert {"a" if i % 2 or i == 0 else "b" for i in items} == {kind}
