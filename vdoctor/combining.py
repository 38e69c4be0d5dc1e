"""Concurrent callers' requests done in one call: whoever finds the worker idle serves everyone waiting.

Hundreds of diagnosis runs share one Python interpreter, and some of their
work goes through one resource at a time: the embedding model, the SQLite
store's write connection. Queued one by one, each caller holds the resource
while it waits to win the GIL back after every call that let go of it, and
the queue grows with every run in flight. So callers leave their requests
here instead:

- a caller that finds the resource idle runs at once, with whatever other
  requests wait (alone: exactly the call it would have made);
- a caller that finds it busy waits; when the call in progress ends, one of
  the waiting callers runs every compatible waiting request in one call (up
  to ``max_size``) and hands each caller its result.

A finished call wakes only the callers it served and the caller that waited
longest (the next to run), each on a condition of its own: with hundreds of
runs in flight, waking every waiter on every call made each of them win the
GIL again only to wait on.

Nothing waits for a batch to fill: a batch is whatever queued while the
resource was busy, so an idle job runs with no added delay, and a loaded one
in larger batches. Requests of different kinds never share a call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(eq=False)  # requests are told apart by identity
class _Request(Generic[Item, Result]):
    kind: Hashable
    item: Item
    size: int
    wake: threading.Condition | None  # None: a request that never waits (``Combiner._alone``)
    done: bool = False
    result: Result | None = None
    error: BaseException | None = None


class Combiner(Generic[Item, Result]):
    """Runs ``run(kind, items)`` for concurrent callers, one call at a time, combining what waits.

    ``run`` returns one result per item, in order, or an exception in place
    of an item's result; if it raises, every item of the call gets that error.
    """

    def __init__(
        self,
        run: Callable[[Hashable, list[Item]], Sequence[Result | BaseException]],
        max_size: int,
    ) -> None:
        self._run = run
        self.max_size = max_size
        # Calls made, and the sizes they carried (``size / calls`` is the mean batch).
        self.calls = 0
        self.size = 0
        self._pending: list[_Request[Item, Result]] = []
        self._busy = False
        self._lock = threading.Lock()

    @property
    def waiting(self) -> int:
        """Requests waiting for a call (the one in progress not counted)."""
        with self._lock:
            return len(self._pending)

    def submit(self, kind: Hashable, item: Item, size: int = 1) -> Result:
        """``item``'s result, run alone or with other callers' items of the same kind."""
        with self._lock:
            alone = not self._busy and not self._pending
            self._busy = self._busy or alone
        if alone:
            return self._alone(kind, item, size)
        wake = threading.Condition(self._lock)
        request: _Request[Item, Result] = _Request(kind, item, size, wake)
        with self._lock:
            self._pending.append(request)
            while not request.done:
                if self._busy:
                    wake.wait()
                    continue
                # Idle: this caller runs its own request and what else waits.
                batch = self._take(request)
                self._busy = True
                self._lock.release()
                try:
                    self._call(batch)
                finally:
                    self._lock.acquire()
                    self._busy = False
                    for served in batch:
                        served.done = True
                        if served.wake is not None:
                            served.wake.notify()
                    self._next()
        if request.error is not None:
            raise request.error
        return cast(Result, request.result)

    def _alone(self, kind: Hashable, item: Item, size: int) -> Result:
        """``submit`` for a caller that found the resource idle and nobody waiting (it is marked busy):
        the call the general path would make (a batch of this one request), without the condition that
        path makes for every request in case it waits, its notification and the batch's bookkeeping
        (the usual case of an idle job: a lone embedding call's own time here went from ~30 to ~17 us)."""
        request: _Request[Item, Result] = _Request(kind, item, size, None)
        try:
            self._call([request])
        finally:
            with self._lock:
                self._busy = False
                self._next()
        if request.error is not None:
            raise request.error
        return cast(Result, request.result)

    def _next(self) -> None:
        """Wake the longest waiter, which runs next (the lock held)."""
        if self._pending:
            wake = self._pending[0].wake
            if wake is not None:
                wake.notify()

    def _take(self, first: _Request[Item, Result]) -> list[_Request[Item, Result]]:
        """The waiting requests of ``first``'s kind, ``first`` first, up to ``max_size`` (``first`` always)."""
        batch, size = [first], first.size
        for request in self._pending:
            if request is first or request.kind != first.kind or size + request.size > self.max_size:
                continue
            batch.append(request)
            size += request.size
        self._pending = [r for r in self._pending if r not in batch]
        return batch

    def _call(self, batch: list[_Request[Item, Result]]) -> None:
        """One call for the batch; each request gets its result, or its error (or the call's)."""
        try:
            results = self._run(batch[0].kind, [request.item for request in batch])
        except BaseException as e:
            for request in batch:
                request.error = e
            return
        if len(results) != len(batch):
            error = RuntimeError(f"a combined call returned {len(results)} results for {len(batch)} requests")
            for request in batch:
                request.error = error
            return
        self.calls += 1
        self.size += sum(request.size for request in batch)
        for request, result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                request.error = result
            else:
                request.result = result
