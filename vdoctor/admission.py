"""Admission policies for ``KeyedRunPool``: when may a key's next item start.

The pool already keeps one run per key at a time, in arrival order. A policy
adds an order across keys where results would otherwise depend on thread
timing. ``EarlierFirst`` is the shape a deterministic replay needs (issue 13):
"a run that opens a session waits until every run with an earlier event time
(and earlier arrival) that could still write or verify a case has finished".
The operator supplies the three questions from its domain:

- ``waits(carry, item)``: must this item wait for earlier ones? Asked when it
  is next for its key, with the key's exact memory (e.g. an alert that opens
  a session, so it will recall long-term memory).
- ``blocks(carry, item)``: could this item change what a waiting one sees?
  Asked when it arrives, with its key's memory as known then, so it must err
  towards True (e.g. any recheck, lifecycle event, or alert that may conclude).
- ``event_time(item)``: its place in time; a waiting item waits only for
  blockers that arrived before it and are not later in event time.
- ``may_wait(item)`` (optional): could this item turn out to wait? Asked when
  it arrives, before its key's memory is exact, so it errs towards True. With
  it the order holds the other way too: a blocker does not start while an
  item that arrived before it, is not earlier in event time and waits (or may
  still turn out to) has not finished, so a later arrival's write is never
  seen by an earlier one's recall. An item found not to wait when it starts
  stops holding anyone.

Items only ever wait for items that arrived before them, so the oldest
unfinished item can always run: no deadlock.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from vdoctor.runs import Ticket

Item = TypeVar("Item")


class EarlierFirst(Generic[Item]):
    """An ``Admission``: waiting items start after every earlier, not-later blocker has finished."""

    def __init__(
        self,
        waits: Callable[[Any, Item], bool],
        blocks: Callable[[Any, Item], bool],
        event_time: Callable[[Item], Any],
        may_wait: Callable[[Item], bool] | None = None,
    ) -> None:
        self._waits = waits
        self._blocks = blocks
        self._event_time = event_time
        self._may_wait = may_wait
        # Unfinished blockers, sorted by (event time, arrival number).
        self._blockers: list[tuple[Any, int]] = []
        self._index: dict[int, tuple[Any, int]] = {}
        # Unfinished items that wait or may (with ``may_wait``), sorted the same way.
        self._waiters: list[tuple[Any, int]] = []
        self._waiter_index: dict[int, tuple[Any, int]] = {}

    @property
    def unfinished_blockers(self) -> int:
        return len(self._blockers)

    @property
    def unfinished_waiters(self) -> int:
        return len(self._waiters)

    def submitted(self, ticket: Ticket[Item], carry: Any) -> None:
        entry = (self._event_time(ticket.item), ticket.seq)
        if self._blocks(carry, ticket.item):
            bisect.insort(self._blockers, entry)
            self._index[ticket.seq] = entry
        if self._may_wait is not None and self._may_wait(ticket.item):
            bisect.insort(self._waiters, entry)
            self._waiter_index[ticket.seq] = entry

    def may_start(self, ticket: Ticket[Item], carry: Any) -> bool:
        blocker = self._index.get(ticket.seq)
        if blocker is not None and self._waiters:
            # An earlier arrival that waits and is not earlier in event time must not see this one's writes.
            for _, seq in self._waiters[bisect.bisect_left(self._waiters, (blocker[0], -1)) :]:
                if seq < ticket.seq:
                    return False
        if not self._waits(carry, ticket.item):
            self._drop(self._waiters, self._waiter_index, ticket.seq)  # it turned out not to wait
            return True
        when = self._event_time(ticket.item) if blocker is None else blocker[0]
        for t, seq in self._blockers:
            if t > when:
                return True  # sorted by event time: nothing further is earlier
            if seq < ticket.seq:
                return False  # an earlier arrival, not later in event time, still unfinished
        return True

    def finished(self, ticket: Ticket[Item]) -> None:
        self._drop(self._blockers, self._index, ticket.seq)
        self._drop(self._waiters, self._waiter_index, ticket.seq)

    @staticmethod
    def _drop(entries: list[tuple[Any, int]], index: dict[int, tuple[Any, int]], seq: int) -> None:
        entry = index.pop(seq, None)
        if entry is not None:
            del entries[bisect.bisect_left(entries, entry)]
