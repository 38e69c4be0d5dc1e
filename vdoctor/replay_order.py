"""Deterministic replays (issue 13, item 3): the diagnosis operator's runs, ordered where thread timing would show.

With many vehicles in flight, what a session recalls from long-term memory
could depend on which other vehicles' runs happened to finish first. Recall
already looks only at what was true at the session's opening time T (event
time: concluded, verified, not invalidated by T), so no run can leak the
future; what is left to thread timing is the past around T: whether the
runs that arrived before the opening one and could change what it sees have
written yet, and whether runs that arrived after it, at the same or an
earlier event time, have written already. At concurrency 1 the answer is
always "every earlier arrival has, no later one has"; ``replay_admission``
makes every concurrency give that answer, with ``EarlierFirst``:

- an item *waits* when it opens a session (an alert its vehicle's session
  does not accept): it starts only after every earlier-arrived *blocker* that
  is not later in event time has finished;
- an item *blocks* when its run can change what another vehicle's recall
  sees: a recheck (verification), a lifecycle event (invalidation), or an
  alert of a vehicle whose earlier case may be verified (its conclusion can
  merge into that record, a new version). Alerts of other vehicles write
  cases that nobody else recalls until a recheck verifies them, so they run
  freely; that keeps most of the concurrency (the replay bench measures it).
- a blocker does not start while an earlier-arrived item that waits (or may:
  an alert not yet started) and is not earlier in event time is unfinished;
- both only within a vehicle series: a session recalls its own series' cases,
  and an event changes only its vehicle's cases, of the series its alerts
  named.

Every write a run makes carries an event time at or after its event's
(conclusion, verification, invalidation: ``MAX(ts, version_from)``), which
is what lets "later in event time" skip the wait. Whether a vehicle's case
may be verified is known from the input when the store starts empty (a
recheck of the vehicle arrived earlier); on a store that already holds cases
every alert counts as a blocker (correct, slower).
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any, NamedTuple

from vdoctor.admission import EarlierFirst
from vdoctor.memory.session import UnreadableState

# (event json, raw line): what the diagnosis operator hands the run pool.
Item = tuple[str, str]
# An event whose time cannot be read sorts first: it waits for nothing and holds nobody back.
UNKNOWN_TIME = float("-inf")


class Facts(NamedTuple):
    kind: str
    vin: str
    series: str
    ts: float  # epoch seconds
    at: datetime | None


@lru_cache(maxsize=8192)
def facts(event_json: str) -> Facts:
    """Type, VIN and event time of a validated event's JSON (``Event.model_dump_json()``)."""
    try:
        data = json.loads(event_json)
        at = datetime.fromisoformat(data["ts"])
        kind, vin, series = (str(data.get(k, "")) for k in ("type", "vin", "series"))
        return Facts(kind, vin, series, at.timestamp(), at)
    except (ValueError, KeyError, TypeError):
        return Facts("", "", "", UNKNOWN_TIME, None)


class ReplayOrder:
    """The operator's three questions for ``EarlierFirst``, over (session, dedup) carries and event items."""

    def __init__(self, store_was_empty: bool) -> None:
        self._store_was_empty = store_was_empty
        # Vehicles with a recheck among the items so far: their cases may be verified from then on.
        self._rechecked: set[str] = set()
        # The series each vehicle's alerts named so far: its cases are of those series.
        self._series: dict[str, set[str]] = {}

    def event_time(self, item: Item) -> float:
        return facts(item[0]).ts

    def may_wait(self, item: Item) -> bool:
        f = facts(item[0])
        return f.kind == "alert" and f.at is not None

    def waits(self, carry: Any, item: Item) -> bool:
        f = facts(item[0])
        if f.kind != "alert" or f.at is None:
            return False
        session = carry[0]
        try:
            return session is None or not session.accepts_alert_at(f.at)
        except UnreadableState:  # (asked by a worker outside its run) the run sets it aside and opens a session
            return True

    def blocks(self, carry: Any, item: Item) -> bool:
        """Asked once per item, in arrival order (``Admission.submitted``)."""
        f = facts(item[0])
        if f.at is None:
            return False
        if f.kind == "alert":
            self._series.setdefault(f.vin, set()).add(f.series)
        if f.kind == "recheck":
            self._rechecked.add(f.vin)
            return True
        if f.kind == "lifecycle":
            return True
        return f.kind == "alert" and (not self._store_was_empty or f.vin in self._rechecked)

    def scopes(self, item: Item) -> tuple[frozenset[str] | None, frozenset[str] | None]:
        """(The series a session opened by this alert recalls, the series whose cases this event may change).

        Asked after ``blocks``. Similar-case recall reads one series; an event changes the cases of its
        vehicle, which are of the series its alerts named (any series when none did yet, or when the store
        held cases before the replay)."""
        f = facts(item[0])
        reads = frozenset((f.series,)) if f.kind == "alert" and f.series else None
        named = self._series.get(f.vin)
        changes = frozenset(named) if named and self._store_was_empty else None
        return reads, changes


def replay_admission(store_was_empty: bool) -> EarlierFirst[Item]:
    """The admission policy that makes a replay's results independent of concurrency (parallelism 1)."""
    order = ReplayOrder(store_was_empty)
    return EarlierFirst(order.waits, order.blocks, order.event_time, may_wait=order.may_wait, scopes=order.scopes)
