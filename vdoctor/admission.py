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

- ``scopes(item)`` (optional): (what a waiting item reads, what a blocker
  may change) as sets of scope names, None for everything; asked when it
  arrives, after ``blocks``. An item waits only for items whose scopes meet
  its own (e.g. a vehicle series: recall reads one series' cases).

Items only ever wait for items that arrived before them, so the oldest
unfinished item can always run: no deadlock.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from vdoctor.runs import Ticket

Item = TypeVar("Item")


Scopes = frozenset[str] | None
# Where items of unknown scope (None: every scope) are kept.
_ANY = ""


class _Unfinished:
    """Unfinished items per scope, each scope's sorted by (event time, arrival number)."""

    def __init__(self) -> None:
        self.by_scope: dict[str, list[tuple[Any, int]]] = {}
        self.where: dict[int, tuple[tuple[Any, int], tuple[str, ...]]] = {}

    def __len__(self) -> int:
        return len(self.where)

    def add(self, seq: int, when: Any, scopes: Scopes) -> None:
        entry = (when, seq)
        keys = (_ANY,) if scopes is None else tuple(scopes)
        for key in keys:
            bisect.insort(self.by_scope.setdefault(key, []), entry)
        self.where[seq] = (entry, keys)

    def drop(self, seq: int) -> None:
        found = self.where.pop(seq, None)
        if found is None:
            return
        entry, keys = found
        for key in keys:
            entries = self.by_scope[key]
            del entries[bisect.bisect_left(entries, entry)]
            if not entries:
                del self.by_scope[key]

    def meeting(self, scopes: Scopes) -> list[list[tuple[Any, int]]]:
        """The sorted lists of items whose scopes meet ``scopes``."""
        if scopes is None:
            return list(self.by_scope.values())
        return [self.by_scope[k] for k in (*scopes, _ANY) if k in self.by_scope]


class EarlierFirst(Generic[Item]):
    """An ``Admission``: waiting items start after every earlier, not-later blocker has finished."""

    def __init__(
        self,
        waits: Callable[[Any, Item], bool],
        blocks: Callable[[Any, Item], bool],
        event_time: Callable[[Item], Any],
        may_wait: Callable[[Item], bool] | None = None,
        scopes: Callable[[Item], tuple[Scopes, Scopes]] | None = None,
    ) -> None:
        self._waits = waits
        self._blocks = blocks
        self._event_time = event_time
        self._may_wait = may_wait
        self._scopes = scopes
        self._blockers = _Unfinished()
        # Unfinished items that wait or may (with ``may_wait``).
        self._waiters = _Unfinished()
        # Per unfinished item: (event time, what it reads, what it may change).
        self._items: dict[int, tuple[Any, Scopes, Scopes]] = {}

    @property
    def unfinished_blockers(self) -> int:
        return len(self._blockers)

    @property
    def unfinished_waiters(self) -> int:
        return len(self._waiters)

    def submitted(self, ticket: Ticket[Item], carry: Any) -> None:
        when = self._event_time(ticket.item)
        blocks = self._blocks(carry, ticket.item)
        reads, changes = self._scopes(ticket.item) if self._scopes is not None else (None, None)
        self._items[ticket.seq] = (when, reads, changes)
        if blocks:
            self._blockers.add(ticket.seq, when, changes)
        if self._may_wait is not None and self._may_wait(ticket.item):
            self._waiters.add(ticket.seq, when, reads)

    def may_start(self, ticket: Ticket[Item], carry: Any) -> bool:
        when, reads, changes = self._items[ticket.seq]
        if ticket.seq in self._blockers.where:
            # An earlier arrival that waits and is not earlier in event time must not see this one's writes.
            for entries in self._waiters.meeting(changes):
                for _, seq in entries[bisect.bisect_left(entries, (when, -1)) :]:
                    if seq < ticket.seq:
                        return False
        if not self._waits(carry, ticket.item):
            self._waiters.drop(ticket.seq)  # it turned out not to wait
            return True
        for entries in self._blockers.meeting(reads):
            for t, seq in entries:
                if t > when:
                    break  # sorted by event time: nothing further is earlier
                if seq < ticket.seq:
                    return False  # an earlier arrival, not later in event time, still unfinished
        return True

    def finished(self, ticket: Ticket[Item]) -> None:
        self._blockers.drop(ticket.seq)
        self._waiters.drop(ticket.seq)
        self._items.pop(ticket.seq, None)
