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
    ) -> None:
        self._waits = waits
        self._blocks = blocks
        self._event_time = event_time
        # Unfinished blockers, sorted by (event time, arrival number).
        self._blockers: list[tuple[Any, int]] = []
        self._index: dict[int, tuple[Any, int]] = {}

    @property
    def unfinished_blockers(self) -> int:
        return len(self._blockers)

    def submitted(self, ticket: Ticket[Item], carry: Any) -> None:
        if self._blocks(carry, ticket.item):
            entry = (self._event_time(ticket.item), ticket.seq)
            bisect.insort(self._blockers, entry)
            self._index[ticket.seq] = entry

    def may_start(self, ticket: Ticket[Item], carry: Any) -> bool:
        if not self._waits(carry, ticket.item):
            return True
        when = self._event_time(ticket.item)
        for t, seq in self._blockers:
            if t > when:
                return True  # sorted by event time: nothing further is earlier
            if seq < ticket.seq:
                return False  # an earlier arrival, not later in event time, still unfinished
        return True

    def finished(self, ticket: Ticket[Item]) -> None:
        entry = self._index.pop(ticket.seq, None)
        if entry is not None:
            del self._blockers[bisect.bisect_left(self._blockers, entry)]
