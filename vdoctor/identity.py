"""Values computed from an object that is never changed in place, kept by the object's identity.

Recall hands the same decoded record to every session that finds it (the
embedded store keeps the records it decoded: ``stores/sqlite_rows.py``), and
what recall derives from a record (its vector as an array, its rendered
entry) was computed again at every session open. Records are immutable by
convention (a record taken as of an earlier time is a copy), so what is
derived from one object stays true for it.

An entry holds its object, so the object's id cannot be taken by another
object while the entry is here; the oldest entries go first past ``capacity``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class KeptByIdentity(Generic[K, V]):
    """``make(obj)``, computed once per object while it is kept, the oldest entry out first.

    Threads may share one: an entry is added under a lock, and ``make`` may run twice for one object in a
    race. ``hits`` and ``misses`` are counted without the lock (figures for a bench, not exact under
    threads). With a store that returns a new record object on every query (the server backends), nothing
    is found again: the entries, bounded by ``capacity``, then only keep objects alive for a while.
    """

    def __init__(self, make: Callable[[K], V], capacity: int) -> None:
        self._make = make
        self._capacity = capacity
        self._kept: dict[int, tuple[K, V]] = {}
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._kept)

    def __call__(self, obj: K) -> V:
        kept = self._kept.get(id(obj))
        if kept is not None and kept[0] is obj:
            self.hits += 1
            return kept[1]
        self.misses += 1
        value = self._make(obj)
        with self._lock:
            self._kept[id(obj)] = (obj, value)
            while len(self._kept) > self._capacity:
                del self._kept[next(iter(self._kept))]
        return value
