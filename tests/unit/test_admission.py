"""EarlierFirst inside KeyedRunPool: a waiting item starts only after every earlier, not-later blocker."""

from __future__ import annotations

import random
import threading
import time

import pytest

from vdoctor.admission import EarlierFirst
from vdoctor.runs import KeyedRunPool, Ticket

pytestmark = pytest.mark.unit

# Items are (kind, event time, id): "w" waits, "b" blocks, "n" neither.
Item = tuple[str, int, int]


def policy() -> EarlierFirst[Item]:
    return EarlierFirst(waits=lambda carry, it: it[0] == "w", blocks=lambda carry, it: it[0] == "b",
                        event_time=lambda it: it[1])  # fmt: skip


class Log:
    """A step that records when each item started and finished (a global order), holding for a while."""

    def __init__(self, hold_s: dict[str, float] | None = None) -> None:
        self.hold_s = hold_s or {}
        self.lock = threading.Lock()
        self.clock = 0
        self.started: dict[tuple[str, Item], int] = {}
        self.ended: dict[tuple[str, Item], int] = {}

    def tick(self) -> int:
        with self.lock:
            self.clock += 1
            return self.clock

    def __call__(self, key: str, carry: None, item: Item) -> tuple[None, Item]:
        self.started[key, item] = self.tick()
        time.sleep(self.hold_s.get(key, 0.0))
        self.ended[key, item] = self.tick()
        return None, item


def test_a_waiting_item_holds_until_earlier_blockers_finish_while_others_run() -> None:
    log = Log(hold_s={"slow": 0.2})
    pool: KeyedRunPool[Item, Item] = KeyedRunPool(4, log, admission=policy())
    try:
        pool.start("slow", None, [("b", 10, 0)])  # a blocker that takes a while
        time.sleep(0.02)
        pool.start("opens", None, [("w", 20, 0)])  # arrived later, later in event time: must wait
        pool.start("free", None, [("n", 30, 0)])  # not waiting: runs at once
        pool.start("early", None, [("w", 5, 0)])  # waits, but the blocker is later in event time: runs
        for k in ("slow", "opens", "free", "early"):
            assert pool.wait(k, timeout_s=5)
    finally:
        pool.close()
    assert log.started["opens", ("w", 20, 0)] > log.ended["slow", ("b", 10, 0)]
    assert log.started["free", ("n", 30, 0)] < log.ended["slow", ("b", 10, 0)]
    assert log.started["early", ("w", 5, 0)] < log.ended["slow", ("b", 10, 0)]


def test_a_blocker_that_arrives_later_does_not_hold_an_earlier_waiting_item() -> None:
    gate = threading.Event()

    def step(key: str, carry: None, item: Item) -> tuple[None, Item]:
        if key == "late":
            gate.wait(5)
        return None, item

    pool: KeyedRunPool[Item, Item] = KeyedRunPool(2, step, admission=policy())
    try:
        pool.start("first", None, [("n", 1, 0), ("w", 50, 0)])  # its waiting item is queued behind its first
        pool.start("late", None, [("b", 10, 0)])  # arrives after the waiting item: not waited for
        assert pool.wait("first", timeout_s=2)
        assert pool.knows("late") and not pool.wait("late", timeout_s=0.05)
    finally:
        gate.set()
        pool.close()


def test_random_workloads_never_break_the_rule_and_always_finish() -> None:
    rng = random.Random(7)
    for _ in range(5):
        log = Log()
        admission = policy()
        pool: KeyedRunPool[Item, Item] = KeyedRunPool(8, log, admission=admission)
        arrivals: list[tuple[int, str, Item]] = []
        try:
            for seq in range(200):
                key = f"k{rng.randrange(30)}"
                item = (rng.choice("wbn"), rng.randrange(50), seq)
                arrivals.append((seq, key, item))
                if pool.knows(key):
                    pool.add(key, item)
                else:
                    pool.start(key, None, [item])
            for key in {k for _, k, _ in arrivals}:
                assert pool.wait(key, timeout_s=10)
        finally:
            pool.close()
        assert admission.unfinished_blockers == 0
        for seq, key, item in arrivals:
            if item[0] != "w":
                continue
            for seq2, key2, item2 in arrivals[:seq]:
                if item2[0] == "b" and item2[1] <= item[1]:
                    assert log.started[key, item] > log.ended[key2, item2], (seq, seq2)


def test_tickets_number_items_in_arrival_order_across_keys() -> None:
    seen: list[Ticket[str]] = []

    class Record:
        def submitted(self, ticket: Ticket[str], carry: object) -> None:
            seen.append(ticket)

        def may_start(self, ticket: Ticket[str], carry: object) -> bool:
            return True

        def finished(self, ticket: Ticket[str]) -> None:
            return None

    pool: KeyedRunPool[str, str] = KeyedRunPool(1, lambda k, c, i: (c, i), admission=Record())
    try:
        pool.start("a", None, ["a1", "a2"])
        pool.start("b", None, ["b1"])
        pool.add("a", "a3")
        assert pool.wait("a", timeout_s=5) and pool.wait("b", timeout_s=5)
    finally:
        pool.close()
    assert [(t.key, t.item, t.seq) for t in seen] == [("a", "a1", 0), ("a", "a2", 1), ("b", "b1", 2), ("a", "a3", 3)]


def policy_both_ways() -> EarlierFirst[Item]:
    """Items that may wait are known at arrival ("w" and "m"); "m" turns out not to wait when it starts."""
    return EarlierFirst(waits=lambda carry, it: it[0] == "w", blocks=lambda carry, it: it[0] == "b",
                        event_time=lambda it: it[1], may_wait=lambda it: it[0] in "wm")  # fmt: skip


def test_a_later_blocker_waits_for_an_earlier_waiting_item_not_earlier_in_event_time() -> None:
    # A waiting item at T sees writes at or before T: a later blocker at or before T would show.
    log = Log(hold_s={"opens": 0.2})
    pool: KeyedRunPool[Item, Item] = KeyedRunPool(4, log, admission=policy_both_ways())
    try:
        pool.start("opens", None, [("w", 20, 0)])  # waits (recalls), takes a while
        time.sleep(0.02)
        pool.start("same", None, [("b", 20, 0)])  # a later blocker at the same event time: must wait
        pool.start("before", None, [("b", 10, 0)])  # earlier in event time: its writes would be seen, must wait
        pool.start("maybe", None, [("m", 30, 0)])  # may wait, turns out not to: holds nobody
        pool.start("after", None, [("b", 40, 0)])  # later in event time than every waiting item: runs
        for k in ("opens", "same", "before", "maybe", "after"):
            assert pool.wait(k, timeout_s=5)
    finally:
        pool.close()
    assert log.started["same", ("b", 20, 0)] > log.ended["opens", ("w", 20, 0)]
    assert log.started["before", ("b", 10, 0)] > log.ended["opens", ("w", 20, 0)]
    assert log.started["after", ("b", 40, 0)] < log.ended["opens", ("w", 20, 0)]


def test_random_workloads_keep_both_orders_and_always_finish() -> None:
    rng = random.Random(11)
    for _ in range(5):
        log = Log()
        admission = policy_both_ways()
        pool: KeyedRunPool[Item, Item] = KeyedRunPool(8, log, admission=admission)
        arrivals: list[tuple[int, str, Item]] = []
        try:
            for seq in range(200):
                key = f"k{rng.randrange(30)}"
                item = (rng.choice("wbnm"), rng.randrange(50), seq)
                arrivals.append((seq, key, item))
                if pool.knows(key):
                    pool.add(key, item)
                else:
                    pool.start(key, None, [item])
            for key in {k for _, k, _ in arrivals}:
                assert pool.wait(key, timeout_s=10)
        finally:
            pool.close()
        assert admission.unfinished_blockers == 0 and admission.unfinished_waiters == 0
        for seq, key, item in arrivals:
            for seq2, key2, item2 in arrivals[:seq]:
                if key2 == key:
                    continue
                if item[0] == "w" and item2[0] == "b" and item2[1] <= item[1]:
                    assert log.started[key, item] > log.ended[key2, item2], (seq, seq2)
                if item[0] == "b" and item2[0] == "w" and item2[1] >= item[1]:
                    assert log.started[key, item] > log.ended[key2, item2], (seq, seq2)


def test_items_wait_only_within_their_scopes() -> None:
    # Items are (kind, event time, id); the id names the scope here: 0 -> "A", 1 -> "B", 2 -> every scope.
    def scopes(it: Item) -> tuple[frozenset[str] | None, frozenset[str] | None]:
        scope = None if it[2] == 2 else frozenset("A" if it[2] == 0 else "B")
        return scope, scope

    admission: EarlierFirst[Item] = EarlierFirst(
        waits=lambda carry, it: it[0] == "w", blocks=lambda carry, it: it[0] == "b", event_time=lambda it: it[1],
        may_wait=lambda it: it[0] == "w", scopes=scopes,
    )  # fmt: skip
    log = Log(hold_s={"slow-a": 0.2})
    pool: KeyedRunPool[Item, Item] = KeyedRunPool(4, log, admission=admission)
    try:
        pool.start("slow-a", None, [("b", 10, 0)])  # a blocker in scope A that takes a while
        time.sleep(0.02)
        pool.start("opens-b", None, [("w", 20, 1)])  # opens in scope B: does not wait for A
        pool.start("opens-a", None, [("w", 20, 0)])  # opens in scope A: waits
        pool.start("opens-any", None, [("w", 20, 2)])  # reads every scope: waits
        for k in ("slow-a", "opens-b", "opens-a", "opens-any"):
            assert pool.wait(k, timeout_s=5)
    finally:
        pool.close()
    assert log.started["opens-b", ("w", 20, 1)] < log.ended["slow-a", ("b", 10, 0)]
    assert log.started["opens-a", ("w", 20, 0)] > log.ended["slow-a", ("b", 10, 0)]
    assert log.started["opens-any", ("w", 20, 2)] > log.ended["slow-a", ("b", 10, 0)]
    assert admission.unfinished_blockers == 0 and admission.unfinished_waiters == 0
