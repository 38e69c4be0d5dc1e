"""Recall in event time (DESIGN.md §4), run over every store backend.

A session opening at T sees only what was true at T: cases concluded at or
before T, similar cases verified at or before T, nothing invalidated at or
before T, each record in its version current at T (a merge keeps the earlier
version), and nothing that happened to that version after T. Expected values
are worked out by hand from the writes of each test.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.contract.test_store_contract import E1, T0, VIN_A, VIN_B, VIN_C, query, rec, unit
from vdoctor.records import MemoryRecord
from vdoctor.stores import MemoryStore

pytestmark = pytest.mark.contract

E2 = [0.0, 1.0, 0.0, 0.0]
WINDOW = timedelta(days=730)


def t(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def own(store: MemoryStore, vin: str, at: datetime) -> list[MemoryRecord]:
    return store.own_history(vin, at - WINDOW, 10, as_of=at)


def similar(store: MemoryStore, at: datetime, vector: list[float] = E1, asking: str = VIN_A) -> list[MemoryRecord]:
    return [s.record for s in store.similar(query(vector, k=10, exclude_vin=asking, as_of=at))]


def keys(records: list[MemoryRecord]) -> list[tuple[str, str]]:
    return [(r.vin, r.session_id) for r in records]


def seen(records: list[MemoryRecord]) -> list[dict[str, Any]]:
    """What a session is given of each record (the clock time of the last write left out)."""
    return [r.model_dump(exclude={"updated_at", "summary_vec", "source"}) for r in records]


def test_a_case_exists_from_its_conclusion_on(store: MemoryStore) -> None:
    b = rec(VIN_B, hours=10, recheck_ok=True, source='{"request": "kept for re-extraction"}')
    store.upsert(b)  # verified at its conclusion (no verification time given)
    assert own(store, VIN_B, t(9)) == [] and similar(store, t(9)) == []
    assert keys(own(store, VIN_B, t(10))) == keys(similar(store, t(10))) == [(VIN_B, b.session_id)]
    # Recall reads leave the summary source out; the record keeps it.
    assert own(store, VIN_B, t(10))[0].source == similar(store, t(10))[0].source == ""
    stored = store.get(VIN_B, b.session_id)
    assert stored is not None and stored.source == b.source


def test_similar_cases_need_a_verification_at_or_before_the_session(store: MemoryStore) -> None:
    b = rec(VIN_B, hours=0)
    store.upsert(b)
    assert store.set_recheck(VIN_B, b.session_id, True, t(5))
    assert similar(store, t(4)) == []
    [hit] = similar(store, t(5))
    assert (hit.recheck_ok, hit.verified_ts) == (True, t(5))
    # Own history shows the case before it was verified as unverified: the verdict is in its future.
    [before] = own(store, VIN_B, t(4))
    assert (before.recheck_ok, before.verified_ts) == (None, None)
    assert own(store, VIN_B, t(5))[0].recheck_ok is True


def test_an_invalidated_record_is_recalled_until_its_invalidation(store: MemoryStore) -> None:
    b = rec(VIN_B, hours=0, recheck_ok=True)
    store.upsert(b)
    assert store.soft_delete(VIN_B, t(8)) == 1
    for reader in (own(store, VIN_B, t(7)), similar(store, t(7))):
        assert keys(reader) == [(VIN_B, b.session_id)]
        assert (reader[0].valid, reader[0].invalid_ts) == (True, None)  # the scrapping is in its future
    assert own(store, VIN_B, t(8)) == [] and similar(store, t(8)) == []
    [stored] = store.history(VIN_B)
    assert (stored.valid, stored.invalid_ts) == (False, t(8))


def test_a_lifecycle_event_sent_again_dated_earlier_moves_the_invalidation_earlier(store: MemoryStore) -> None:
    """A lifecycle event misdated years ahead (a clock that jumped) set the vehicle's case invalid from then,
    so it was recalled until then, by the next owner's sessions too. The fleet system sends it again dated
    right: it set nothing (the case was invalid already). A record is invalid from the earliest lifecycle
    event at a time its version had begun by; a case of the care after that event keeps its own."""
    b = rec(VIN_B, hours=0, recheck_ok=True)
    store.upsert(b)
    misdated = t(24 * 365 * 30)
    assert store.soft_delete(VIN_B, misdated) == 1
    assert keys(similar(store, t(9))) == [(VIN_B, b.session_id)]  # recalled: the invalidation is decades ahead
    assert store.soft_delete(VIN_B, t(8)) == 1
    assert own(store, VIN_B, t(8)) == [] and similar(store, t(8)) == []
    assert keys(own(store, VIN_B, t(7))) == keys(similar(store, t(7))) == [(VIN_B, b.session_id)]
    # The next owner's case, concluded after the event and set invalid by the misdated one delivered late.
    after = rec(VIN_B, hours=10, recheck_ok=True)
    store.upsert(after)
    assert store.soft_delete(VIN_B, misdated) == 1
    # The right time again, or any time before either version: neither changes.
    assert store.soft_delete(VIN_B, t(8)) == 0 and store.soft_delete(VIN_B, t(9)) == 0
    invalid_from = lambda: {r.session_id: r.invalid_ts for r in store.history(VIN_B)}  # noqa: E731
    assert invalid_from() == {b.session_id: t(8), after.session_id: misdated}
    assert keys(own(store, VIN_B, t(11))) == [(VIN_B, after.session_id)]
    # A genuine later event (scrapped at hour 12) ends the next owner's case there, not the first one's.
    assert store.soft_delete(VIN_B, t(12)) == 1
    assert invalid_from() == {b.session_id: t(8), after.session_id: t(12)}
    assert own(store, VIN_B, t(12)) == []


def test_a_merge_keeps_the_earlier_version(store: MemoryStore) -> None:
    first = rec(VIN_B, hours=0, summary="version one: cell_voltage_diff_mv=187", summary_vec=E1)
    store.upsert(first)
    store.set_recheck(VIN_B, first.session_id, True, t(2))
    later_session = f"{VIN_B}-later"
    merged = rec(VIN_B, hours=240, session_id=first.session_id, summary="version two: cell_voltage_diff_mv=150",
                 summary_vec=E2, merged_sessions=[later_session], opened_ts=t(239))  # fmt: skip
    store.upsert(merged)

    [v1] = own(store, VIN_B, t(100))
    assert (v1.summary, v1.concluded_at, v1.recheck_ok, v1.merged_sessions) == (first.summary, t(0), True, [])
    [v2] = own(store, VIN_B, t(240))
    assert (v2.summary, v2.concluded_at, v2.recheck_ok, v2.merged_sessions) == (merged.summary, t(240), None,
                                                                                 [later_session])  # fmt: skip
    assert v2.opened_ts == t(239)
    # Similar recall finds the earlier version by its own vector, while it held; the new one is not verified.
    [hit] = store.similar(query(E1, k=10, as_of=t(100)))
    assert (hit.record.summary, hit.score) == (first.summary, pytest.approx(1.0, abs=1e-6))
    assert similar(store, t(240), E2) == [] and similar(store, t(240), E1) == []
    stored = store.get(VIN_B, first.session_id)
    assert stored is not None and stored.summary == merged.summary and store.count() == 1


def test_a_recheck_after_a_merge_verifies_the_new_version_from_its_time(store: MemoryStore) -> None:
    first = rec(VIN_B, hours=0, summary="version one", summary_vec=E1, recheck_ok=True)
    store.upsert(first)
    store.upsert(rec(VIN_B, hours=240, session_id=first.session_id, summary="version two", summary_vec=E2))
    assert store.set_recheck(VIN_B, first.session_id, True, t(250))
    assert similar(store, t(249), E2) == []
    assert [r.summary for r in similar(store, t(250), E2)] == ["version two"]
    assert [r.summary for r in similar(store, t(100), E2)] == ["version one"]  # still the earlier version then
    assert [r.summary for r in own(store, VIN_B, t(245))] == ["version two"]


def test_an_overturned_verdict_starts_a_new_version(store: MemoryStore) -> None:
    b = rec(VIN_B, hours=0)
    store.upsert(b)
    store.set_recheck(VIN_B, b.session_id, True, t(2))
    store.set_recheck(VIN_B, b.session_id, False, t(6))
    assert [len(similar(store, t(h))) for h in (1, 2, 5, 6, 8)] == [0, 1, 1, 0, 0]
    assert [own(store, VIN_B, t(h))[0].recheck_ok for h in (1, 4, 6)] == [None, True, False]
    store.set_recheck(VIN_B, b.session_id, True, t(9))
    assert [len(similar(store, t(h))) for h in (3, 7, 9)] == [1, 0, 1]
    assert [own(store, VIN_B, t(h))[0].verified_ts for h in (3, 7, 9)] == [t(2), t(6), t(9)]


def test_the_same_verdict_again_changes_nothing(store: MemoryStore) -> None:
    b = rec(VIN_B, hours=0)
    store.upsert(b)
    store.set_recheck(VIN_B, b.session_id, True, t(2))
    assert store.set_recheck(VIN_B, b.session_id, True, t(6))
    assert [r.verified_ts for r in similar(store, t(3))] == [t(2)]


def test_a_change_older_than_the_record_takes_effect_at_the_record(store: MemoryStore) -> None:
    b = rec(VIN_B, hours=5)
    store.upsert(b)
    store.set_recheck(VIN_B, b.session_id, True, t(1))  # a recheck stamped before the conclusion
    assert similar(store, t(4)) == []
    assert [r.verified_ts for r in similar(store, t(5))] == [t(5)]
    store.soft_delete(VIN_B, t(0))
    assert own(store, VIN_B, t(5)) == [] and store.history(VIN_B)[0].invalid_ts == t(5)


def _fleet_writes(store: MemoryStore, upto: float | None) -> None:
    """A fleet's writes in event-time order; only those at or before ``upto`` hours when given."""
    b1, c1 = rec(VIN_B, hours=0, summary_vec=E1), rec(VIN_C, hours=1, summary_vec=unit(1, 1, 0, 0))
    writes: list[tuple[float, Any]] = [
        (0, lambda: store.upsert(b1)),
        (1, lambda: store.upsert(c1)),
        (2, lambda: store.set_recheck(VIN_B, b1.session_id, True, t(2))),
        (3, lambda: store.set_recheck(VIN_C, c1.session_id, True, t(3))),
        (4, lambda: store.upsert(rec(VIN_A, hours=4))),
        # After the reads' time: another conclusion, a merge, rechecks, a scrapping.
        (20, lambda: store.upsert(rec(VIN_B, hours=20, session_id=b1.session_id, summary="merged", summary_vec=E2))),
        (21, lambda: store.upsert(rec(VIN_C, hours=21, recheck_ok=True))),
        (22, lambda: store.set_recheck(VIN_C, c1.session_id, False, t(22))),
        (23, lambda: store.set_recheck(VIN_B, b1.session_id, True, t(23))),
        (24, lambda: store.soft_delete(VIN_C, t(24))),
        (25, lambda: store.soft_delete(VIN_A, t(25))),
    ]
    for at, write in writes:
        if upto is None or at <= upto:
            write()


def _reads(store: MemoryStore, at: datetime) -> list[list[dict[str, Any]]]:
    return [seen(own(store, v, at)) for v in (VIN_A, VIN_B, VIN_C)] + [
        seen(similar(store, at, vec, asking)) for vec in (E1, E2) for asking in (VIN_A, VIN_B)
    ]


def test_reads_as_of_t_are_the_same_before_and_after_later_writes(store: MemoryStore) -> None:
    # What makes replays deterministic: a session opening at T gets the same
    # memory whether or not events later than T have been applied yet.
    _fleet_writes(store, upto=10)
    before = {h: _reads(store, t(h)) for h in (0, 2, 3, 5, 10)}
    assert before[5][1] and before[5][4]  # not vacuous: B's own case, and B's case for A
    _fleet_writes(store, upto=None)  # everything again (the early writes are re-runs), then the later ones
    assert {h: _reads(store, t(h)) for h in before} == before
    assert _reads(store, t(30)) != before[10]  # the later writes did change what later sessions see


def test_re_running_a_vehicles_writes_changes_no_read(store: MemoryStore) -> None:
    # A restored job re-runs the events after its checkpoint: the store ends as it was.
    _fleet_writes(store, upto=None)
    reads = {h: _reads(store, t(h)) for h in (0, 3, 20, 21, 22, 23, 24, 30)}
    _fleet_writes(store, upto=None)
    assert {h: _reads(store, t(h)) for h in reads} == reads


def test_the_top_k_is_taken_among_what_was_true_then(store: MemoryStore) -> None:
    # Closer cases from after the session (concluded later, or verified later)
    # must not take the top-k places of the case that was there: the filters
    # come before the top-k (for sqlite: inside the vector index's scan).
    past = rec(VIN_B, hours=0, recheck_ok=True, summary_vec=unit(0.6, 0.8, 0, 0))
    store.upsert(past)
    for i, vin in enumerate(f"LSVAU2180N21{n:05d}" for n in range(10, 16)):
        if i % 2:
            store.upsert(rec(vin, hours=50 + i, recheck_ok=True, summary_vec=E1))  # concluded later
        else:
            later = rec(vin, hours=0, summary_vec=E1)
            store.upsert(later)
            store.set_recheck(vin, later.session_id, True, t(50 + i))  # verified later
    hits = store.similar(query(E1, k=1, as_of=t(10)))
    assert [(h.record.vin, round(h.score, 4)) for h in hits] == [(VIN_B, 0.6)]
    assert len(store.similar(query(E1, k=10, as_of=t(60)))) == 7
