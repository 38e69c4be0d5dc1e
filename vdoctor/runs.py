"""Many keys' runs in flight at once, one run per key at a time, in order.

``KeyedRunPool`` is the scheduling core of the diagnosis operator, free of
Flink so it can be tested on its own. The operator (the only caller) hands it
each key's items in arrival order; worker threads run ``step(key, carry,
item) -> (carry, result)`` where ``carry`` is the key's memory after the
previous item (a pure function of snapshot and item: workers never see Flink
state). When a key's run finishes, the worker itself queues that key's next
item, so a vehicle with a backlog never waits for the operator. Finished
results wait, in order, until the operator ``take``s them on its own thread.

Scheduling is longest-queue-first: among keys ready to run, the one with the
most items left goes next. Keys with long backlogs bound the job's finish
time, so starting them early keeps every worker busy until the end (a FIFO
pool left ~15% of the bound on the table in the prototype; this one reaches
0.96-0.98).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

# Smoothing of the run-time estimate the operator uses to time its first poll.
EWMA_ALPHA = 0.2


class RunFailed(Exception):
    """A step raised: a bug, not a model or store outage (those are results). The job must fail."""


@dataclass
class _Key(Generic[Item, Result]):
    carry: Any
    queue: deque[Item] = field(default_factory=deque)
    finished: list[Result] = field(default_factory=list)
    running: bool = False
    started: float = 0.0
    version: int = 0
    error: BaseException | None = None


class KeyedRunPool(Generic[Item, Result]):
    """Runs ``step`` over each key's items in order, up to ``concurrency`` keys at once."""

    def __init__(
        self,
        concurrency: int,
        step: Callable[[str, Any, Item], tuple[Any, Result]],
        name: str = "run",
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.concurrency = concurrency
        self._step = step
        self._keys: dict[str, _Key[Item, Result]] = {}
        self._ready: list[tuple[int, int, str, int]] = []  # (-queue length, arrival, key, version)
        self._arrival = itertools.count()
        self._cond = threading.Condition()
        self._closed = False
        self._running = 0
        self._queued = 0
        self.mean_run_s = 0.0
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(concurrency)
        ]
        for t in self._threads:
            t.start()

    # -- operator side --------------------------------------------------------

    def knows(self, key: str) -> bool:
        """True while the key has items queued, running, or finished but not yet taken."""
        with self._cond:
            return key in self._keys

    def start(self, key: str, carry: Any, items: list[Item]) -> None:
        """Begin a key's chain from ``carry`` (its stored memory). The key must be unknown."""
        with self._cond:
            if key in self._keys:
                raise ValueError(f"key {key!r} already has work in the pool; use add()")
            entry: _Key[Item, Result] = _Key(carry=carry, queue=deque(items))
            self._keys[key] = entry
            self._queued += len(items)
            self._push(key, entry)

    def add(self, key: str, item: Item) -> None:
        """Queue one more item behind the key's earlier ones. The key must be known."""
        with self._cond:
            entry = self._keys.get(key)
            if entry is None:
                raise ValueError(f"key {key!r} has no work in the pool; use start() with its stored memory")
            entry.queue.append(item)
            self._queued += 1
            if not entry.running:
                self._push(key, entry)

    def has_finished(self, key: str) -> bool:
        with self._cond:
            entry = self._keys.get(key)
            return entry is not None and (bool(entry.finished) or entry.error is not None)

    def take(self, key: str) -> list[Result]:
        """Finished results of the key, oldest first; forgets a key with nothing left to do."""
        with self._cond:
            entry = self._keys.get(key)
            if entry is None:
                return []
            if entry.error is not None:
                raise RunFailed(f"a run of key {key!r} failed: {entry.error!r}") from entry.error
            done, entry.finished = entry.finished, []
            if not entry.running and not entry.queue:
                del self._keys[key]
            return done

    def wait(self, key: str, timeout_s: float | None = None) -> bool:
        """Block until the key has nothing queued or running. False on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while True:
                entry = self._keys.get(key)
                if entry is None or entry.error is not None or (not entry.running and not entry.queue):
                    return True
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)

    def eta_s(self, key: str) -> float:
        """About when the key's next result will be ready, in seconds from now (0: ready or unknown).

        The operator times its polls by this, so that vehicles waiting for a
        free worker are not polled every few milliseconds for nothing.
        """
        with self._cond:
            entry = self._keys.get(key)
            if entry is None or entry.finished or entry.error is not None:
                return 0.0
            if entry.running:
                return max(0.0, self.mean_run_s - (time.perf_counter() - entry.started))
            # Waiting for a worker: roughly the time to work through what is queued.
            return self.mean_run_s * (1.0 + self._queued / self.concurrency)

    @property
    def in_flight(self) -> int:
        """Runs executing right now."""
        return self._running

    @property
    def queued(self) -> int:
        """Items waiting behind their key's current run or for a free worker."""
        return self._queued

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=1.0)

    # -- worker side ----------------------------------------------------------

    def _push(self, key: str, entry: _Key[Item, Result]) -> None:
        entry.version += 1
        heapq.heappush(self._ready, (-len(entry.queue), next(self._arrival), key, entry.version))
        self._cond.notify()

    def _next(self) -> tuple[str, _Key[Item, Result], Item] | None:
        with self._cond:
            while True:
                if self._closed:
                    return None
                while self._ready:
                    _, _, key, version = heapq.heappop(self._ready)
                    entry = self._keys.get(key)
                    if entry is None or entry.version != version or entry.running or not entry.queue:
                        continue  # a stale heap entry
                    entry.running = True
                    entry.started = time.perf_counter()
                    self._running += 1
                    self._queued -= 1
                    return key, entry, entry.queue.popleft()
                self._cond.wait()

    def _work(self) -> None:
        while True:
            job = self._next()
            if job is None:
                return
            key, entry, item = job
            started = time.perf_counter()
            try:
                carry, result = self._step(key, entry.carry, item)
                error = None
            except BaseException as e:  # noqa: BLE001 - handed to the operator thread, which fails the job
                carry, result, error = entry.carry, None, e
            elapsed = time.perf_counter() - started
            with self._cond:
                if self.mean_run_s:
                    self.mean_run_s += EWMA_ALPHA * (elapsed - self.mean_run_s)
                else:
                    self.mean_run_s = elapsed
                entry.running = False
                self._running -= 1
                if error is not None:
                    entry.error = error
                    self._queued -= len(entry.queue)
                    entry.queue.clear()
                else:
                    entry.carry = carry
                    entry.finished.append(result)  # type: ignore[arg-type]
                    if entry.queue:
                        self._push(key, entry)
                self._cond.notify_all()
