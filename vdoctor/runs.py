"""Many keys' runs in flight at once, one run per key at a time, in order.

``KeyedRunPool`` is the scheduling core of the diagnosis operator, free of
Flink so it can be tested on its own. The operator (the only caller) hands it
each key's items in arrival order; worker threads run ``step(key, carry,
item) -> (carry, result)`` where ``carry`` is the key's memory after the
previous item (a pure function of snapshot and item: workers never see Flink
state). When a key's run finishes, the worker itself queues that key's next
item, so a vehicle with a backlog never waits for the operator.

Completion costs per finished run, never per run in flight: a worker that
finishes a key's run puts the key on a queue of finished keys (once, however
many results pile up behind it), and the operator's ``drain()`` takes exactly
those. The operator polls ``drain()`` from one timer per subtask; nothing is
polled per vehicle.

Scheduling is longest-queue-first: among keys ready to run, the one with the
most items left goes next. Keys with long backlogs bound the job's finish
time, so starting them early keeps every worker busy until the end (a FIFO
pool left ~15% of the bound on the table in the prototype; this one reaches
0.96-0.98).

An ``Admission`` policy may hold a key's next item back until it allows it
to start (``vdoctor.admission``: e.g. until every earlier item that could
change what it would recall has finished, for replays that must not depend
on thread timing). Without one, every ready item may start.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

# Cyclic GC in thread mode stops every worker while it runs. What the job
# loads at start (the knowledge pack, the vector index, modules) lives as long
# as the operator, so it is frozen out of collections; and a young generation
# of 20,000 objects (Python's default is 700) makes collections rarer. In the
# run-pool benchmark's process this cut GC pauses from ~310 ms to ~50 ms per
# 1,920 runs, the longest from 72 ms to 25 ms.
GC_GEN0_THRESHOLD = 20_000


def tune_gc_for_runs() -> None:
    """Freeze everything allocated so far out of the cyclic GC and make young collections rarer.

    The diagnosis operator calls it once the engine is built, when runs are concurrent; the
    benchmarks that stand for the job do the same.
    """
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


Item = TypeVar("Item")
Result = TypeVar("Result")


class RunFailed(Exception):
    """A step raised. The job must fail.

    A step returns what one item's run can survive as its result (the diagnosis engine: a model, embedder
    or store outage as a flagged diagnosis, any other ``Exception`` of one event as a dead letter), so
    what reaches here is what it lets through on purpose, an interrupt or an exit (a ``BaseException``
    that is not an ``Exception``), or a fault outside the item's run (the caller's own code).
    """


@dataclass(frozen=True)
class Ticket(Generic[Item]):
    """One item in the pool: its key, the item, and its arrival number across all keys."""

    key: str
    item: Item
    seq: int


class Admission(Protocol[Item]):
    """Decides when a key's next item may start. Called under the pool's lock: keep it quick, never block."""

    def submitted(self, ticket: Ticket[Item], carry: Any) -> None:
        """The item entered the pool; ``carry`` is its key's memory as known now (earlier items may still run)."""

    def may_start(self, ticket: Ticket[Item], carry: Any) -> bool:
        """The item is next for its key and ``carry`` is exact. False holds it until some run finishes."""

    def finished(self, ticket: Ticket[Item]) -> None:
        """The item's run ended (or it was dropped after its key's run failed)."""


@dataclass
class _Key(Generic[Item, Result]):
    carry: Any
    queue: deque[Ticket[Item]] = field(default_factory=deque)
    finished: list[Result] = field(default_factory=list)
    running: bool = False
    version: int = 0
    # On the queue of finished keys, waiting for the operator's drain().
    done: bool = False
    error: BaseException | None = None


class KeyedRunPool(Generic[Item, Result]):
    """Runs ``step`` over each key's items in order, up to ``concurrency`` keys at once."""

    def __init__(
        self,
        concurrency: int,
        step: Callable[[str, Any, Item], tuple[Any, Result]],
        name: str = "run",
        admission: Admission[Item] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.concurrency = concurrency
        self._step = step
        self._admission = admission
        self._keys: dict[str, _Key[Item, Result]] = {}
        self._ready: list[tuple[int, int, str, int]] = []  # (-queue length, arrival, key, version)
        self._held: set[str] = set()  # keys whose next item the admission policy holds back
        self._done: deque[str] = deque()  # keys with finished results, in the order they finished
        self._arrival = itertools.count()
        self._seq = itertools.count()
        lock = threading.Lock()
        # Workers wait for work on one condition, the operator for results on
        # another: a finished run wakes the operator, never every idle worker.
        self._work_cond = threading.Condition(lock)
        self._done_cond = threading.Condition(lock)
        self._closed = False
        self._running = 0
        self._queued = 0
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(concurrency)
        ]
        for t in self._threads:
            t.start()

    # -- operator side --------------------------------------------------------

    def knows(self, key: str) -> bool:
        """True while the key has items queued, running, or finished but not yet taken."""
        with self._work_cond:
            return key in self._keys

    def start(self, key: str, carry: Any, items: list[Item]) -> None:
        """Begin a key's chain from ``carry`` (its stored memory). The key must be unknown."""
        with self._work_cond:
            if key in self._keys:
                raise ValueError(f"key {key!r} already has work in the pool; use add()")
            entry: _Key[Item, Result] = _Key(carry=carry)
            self._keys[key] = entry
            for item in items:
                self._enqueue(key, entry, item)
            self._push(key, entry)

    def add(self, key: str, item: Item) -> None:
        """Queue one more item behind the key's earlier ones. The key must be known."""
        with self._work_cond:
            entry = self._keys.get(key)
            if entry is None:
                raise ValueError(f"key {key!r} has no work in the pool; use start() with its stored memory")
            self._enqueue(key, entry, item)
            if not entry.running and key not in self._held:
                self._push(key, entry)

    def drain(self) -> list[tuple[str, list[Result]]]:
        """Every key's finished results, oldest first per key; forgets keys with nothing left to do.

        Costs per key with finished results, nothing per run still in flight.
        Raises ``RunFailed`` if a key's run raised.
        """
        with self._work_cond:
            out: list[tuple[str, list[Result]]] = []
            while self._done:
                key = self._done.popleft()
                entry = self._keys[key]
                entry.done = False
                if entry.error is not None:
                    raise RunFailed(f"a run of key {key!r} failed: {entry.error!r}") from entry.error
                out.append((key, entry.finished))
                entry.finished = []
                if not entry.running and not entry.queue:
                    del self._keys[key]
            return out

    def take(self, key: str) -> list[Result]:
        """Finished results of one key, oldest first; forgets the key if nothing is left to do."""
        with self._work_cond:
            entry = self._keys.get(key)
            if entry is None:
                return []
            if entry.error is not None:
                raise RunFailed(f"a run of key {key!r} failed: {entry.error!r}") from entry.error
            done, entry.finished = entry.finished, []
            if entry.done:
                entry.done = False
                self._done.remove(key)
            if not entry.running and not entry.queue:
                del self._keys[key]
            return done

    def wait(self, key: str, timeout_s: float | None = None) -> bool:
        """Block until the key has nothing queued or running. False on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._done_cond:
            while True:
                entry = self._keys.get(key)
                if entry is None or entry.error is not None or (not entry.running and not entry.queue):
                    return True
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._done_cond.wait(remaining)

    def wait_finished(self, timeout_s: float | None = None) -> bool:
        """Block until some key has finished results to drain, or the pool is idle. False on timeout."""
        with self._done_cond:
            return self._done_cond.wait_for(lambda: bool(self._done) or not self._keys, timeout_s)

    @property
    def idle(self) -> bool:
        """Nothing queued, running or waiting to be drained."""
        return not self._keys

    @property
    def in_flight(self) -> int:
        """Runs executing right now."""
        return self._running

    @property
    def queued(self) -> int:
        """Items waiting behind their key's current run or for a free worker."""
        return self._queued

    def close(self) -> None:
        with self._work_cond:
            self._closed = True
            self._work_cond.notify_all()
            self._done_cond.notify_all()
        for t in self._threads:
            t.join(timeout=1.0)

    # -- under the lock ---------------------------------------------------------

    def _enqueue(self, key: str, entry: _Key[Item, Result], item: Item) -> None:
        ticket = Ticket(key, item, next(self._seq))
        entry.queue.append(ticket)
        self._queued += 1
        if self._admission is not None:
            self._admission.submitted(ticket, entry.carry)

    def _push(self, key: str, entry: _Key[Item, Result]) -> None:
        if not entry.queue:
            return
        entry.version += 1
        heapq.heappush(self._ready, (-len(entry.queue), next(self._arrival), key, entry.version))
        self._work_cond.notify()

    def _release_held(self) -> None:
        """Offer every held key again: a finished run may have been what it waited for."""
        held, self._held = self._held, set()
        for key in held:
            entry = self._keys.get(key)
            if entry is not None and not entry.running:
                self._push(key, entry)

    def _finished(self, ticket: Ticket[Item]) -> None:
        if self._admission is not None:
            self._admission.finished(ticket)
            if self._held:
                self._release_held()

    # -- worker side ----------------------------------------------------------

    def _next(self) -> tuple[str, _Key[Item, Result], Ticket[Item]] | None:
        with self._work_cond:
            while True:
                if self._closed:
                    return None
                while self._ready:
                    _, _, key, version = heapq.heappop(self._ready)
                    entry = self._keys.get(key)
                    if entry is None or entry.version != version or entry.running or not entry.queue:
                        continue  # a stale heap entry
                    ticket = entry.queue[0]
                    if self._admission is not None and not self._admission.may_start(ticket, entry.carry):
                        self._held.add(key)
                        continue
                    entry.queue.popleft()
                    entry.running = True
                    self._running += 1
                    self._queued -= 1
                    return key, entry, ticket
                self._work_cond.wait()

    def _work(self) -> None:
        while True:
            job = self._next()
            if job is None:
                return
            key, entry, ticket = job
            try:
                carry, result = self._step(key, entry.carry, ticket.item)
                error = None
            except BaseException as e:  # noqa: BLE001 - handed to the operator thread, which fails the job
                carry, result, error = entry.carry, None, e
            with self._work_cond:
                entry.running = False
                self._running -= 1
                self._finished(ticket)
                if error is not None:
                    entry.error = error
                    self._queued -= len(entry.queue)
                    dropped, entry.queue = entry.queue, deque()
                    for t in dropped:
                        self._finished(t)
                else:
                    entry.carry = carry
                    entry.finished.append(result)  # type: ignore[arg-type]
                    self._push(key, entry)
                if not entry.done:
                    entry.done = True
                    self._done.append(key)
                self._done_cond.notify_all()
