"""The long-term memory (L3) contract, run over every store backend.

Backends come from ``STORE_FACTORIES`` in this directory's conftest: the
``store`` fixture is parametrised over all of them.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from tests.contract.conftest import STORE_FACTORIES, skip_on_mem0
from vdoctor.records import MemoryRecord, RecordKind
from vdoctor.stores import STORES, MemoryStore, SimilarQuery

pytestmark = pytest.mark.contract

VIN_A = "LSVAU2180N2183294"
VIN_B = "LSVAU2180N2100001"
VIN_C = "LSVAU2180N2100002"
T0 = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
# After every event of these tests: reads "as of now" see the latest versions.
LATE = T0 + timedelta(days=400)
E1 = [1.0, 0.0, 0.0, 0.0]


def rec(vin: str, hours: int = 0, **overrides: Any) -> MemoryRecord:
    at = T0 + timedelta(hours=hours)
    data: dict[str, Any] = {
        "vin": vin,
        "session_id": f"{vin}-{at:%Y%m%dT%H%M%S}",
        "series": "EV-A",
        "concluded_at": at,
        "summary": f"{at:%Y-%m-%d %H:%M} | concluded P0A7F | P2 conf 0.80; confirmed cell_voltage_diff_mv=187>=100",
        "summary_vec": E1,
        "root_cause": "weak cell group self-discharges",
        "fix_action": "balance the pack; replace the module",
        "priority": "P2",
        "dtc_codes": ["P0A7F"],
        "recheck_ok": None,
        "prompt_version": "case-summary-v1",
        "updated_at": at,
    }
    data.update(overrides)
    return MemoryRecord(**data)


def unit(*xs: float) -> list[float]:
    norm = math.sqrt(sum(x * x for x in xs))
    return [x / norm for x in xs]


def same(a: MemoryRecord | None, b: MemoryRecord) -> None:
    """Field-by-field equality; vectors within float32 precision."""
    assert a is not None
    assert a.model_dump(exclude={"summary_vec"}) == b.model_dump(exclude={"summary_vec"})
    assert a.summary_vec == pytest.approx(b.summary_vec, rel=1e-6, abs=1e-7)


def query(
    vector: list[float], k: int = 5, exclude_vin: str = VIN_A, series: str = "EV-A", as_of: datetime = LATE
) -> SimilarQuery:
    return SimilarQuery(exclude_vin, series, np.asarray(vector, dtype=np.float32), k, as_of)


def test_every_registered_store_is_covered() -> None:
    # A backend in the URL registry without a factory in conftest would skip the whole suite.
    assert set(STORE_FACTORIES) == set(STORES.names)


# -- get / upsert ---------------------------------------------------------------


def test_empty_store(store: MemoryStore) -> None:
    assert store.count() == 0
    assert store.get(VIN_A, f"{VIN_A}-20261101T081530") is None
    assert store.history(VIN_A) == []
    assert store.own_history(VIN_A, T0 - timedelta(days=1), 10, as_of=LATE) == []
    assert store.similar(query(E1)) == []


def test_upsert_then_get(store: MemoryStore) -> None:
    r = rec(VIN_A, recheck_ok=True, dtc_codes=["P0A7F", "P0A80"], summary_vec=unit(0.3, -0.4, 0.5, 0.1))
    store.upsert(r)
    assert store.count() == 1
    same(store.get(VIN_A, r.session_id), r)
    assert store.get(VIN_A, "no-such-session") is None
    assert store.get(VIN_B, r.session_id) is None  # the key is (vin, session_id)


def test_upsert_with_the_same_key_replaces_the_whole_row(store: MemoryStore) -> None:
    first = rec(VIN_A, recheck_ok=True, root_cause="first cause", dtc_codes=["P0A7F"])
    store.upsert(first)
    second = rec(
        VIN_A,
        recheck_ok=None,
        root_cause="second cause",
        fix_action="second fix",
        priority="P1",
        dtc_codes=["P0A80"],
        summary_vec=unit(0, 1, 0, 0),
        prompt_version="case-summary-v2",
    )
    assert second.session_id == first.session_id
    store.upsert(second)
    assert store.count() == 1
    got = store.get(VIN_A, first.session_id)
    same(got, second)
    assert got is not None and got.recheck_ok is None  # replaced, not merged


def test_same_session_id_text_under_two_vins_are_two_rows(store: MemoryStore) -> None:
    a = rec(VIN_A, session_id="shared-session-id-123", root_cause="cause A")
    b = rec(VIN_B, session_id="shared-session-id-123", root_cause="cause B")
    store.upsert(a)
    store.upsert(b)
    assert store.count() == 2
    same(store.get(VIN_A, "shared-session-id-123"), a)
    same(store.get(VIN_B, "shared-session-id-123"), b)


def test_a_milestone_with_no_priority_yet_and_a_record_with_omitted_facts_round_trip(store: MemoryStore) -> None:
    milestone = rec(
        VIN_A,
        session_id=f"{VIN_A}-20261101T081530-m1",
        kind=RecordKind.MILESTONE,
        priority=None,
        root_cause="",
        fix_action="",
        summary="2026-11-02 08:20 | milestone 1 | not concluded; no priority yet; no hypothesis yet | -",
    )
    final = rec(VIN_A, hours=1, omitted=["pack_temp_c=41.5→44°C", "code P1A9A", "excluded: 怀疑线束松动，已排除 @T"])
    store.upsert_many([milestone, final])
    same(store.get(VIN_A, milestone.session_id), milestone)
    same(store.get(VIN_A, final.session_id), final)
    got = store.get(VIN_A, milestone.session_id)
    assert got is not None and got.priority is None and got.kind is RecordKind.MILESTONE


# -- own history -------------------------------------------------------------------


def test_own_history_filters_by_vin_valid_and_since_newest_first(store: MemoryStore) -> None:
    old = rec(VIN_A, hours=0)
    mid = rec(VIN_A, hours=24)
    new = rec(VIN_A, hours=48)
    other = rec(VIN_B, hours=36)
    for r in (mid, other, old, new):
        store.upsert(r)

    got = store.own_history(VIN_A, T0, 10, as_of=LATE)
    assert [r.session_id for r in got] == [new.session_id, mid.session_id, old.session_id]
    # `since` is inclusive: a record concluded exactly then is kept.
    since_mid = store.own_history(VIN_A, T0 + timedelta(hours=24), 10, as_of=LATE)
    assert [r.session_id for r in since_mid] == [new.session_id, mid.session_id]
    after_mid = store.own_history(VIN_A, T0 + timedelta(hours=24, seconds=1), 10, as_of=LATE)
    assert [r.session_id for r in after_mid] == [new.session_id]
    assert [r.session_id for r in store.own_history(VIN_A, T0, 2, as_of=LATE)] == [new.session_id, mid.session_id]
    assert [r.session_id for r in store.own_history(VIN_B, T0, 10, as_of=LATE)] == [other.session_id]
    assert store.own_history("LSVAU2180N2199999", T0, 10, as_of=LATE) == []


def test_own_history_leaves_out_invalid_records(store: MemoryStore) -> None:
    store.upsert(rec(VIN_A, hours=0))
    store.upsert(rec(VIN_A, hours=1, valid=False))
    got = store.own_history(VIN_A, T0, 10, as_of=LATE)
    assert [r.concluded_at for r in got] == [T0]
    assert all(r.valid for r in got)


def test_own_history_includes_unverified_and_failed_cases(store: MemoryStore) -> None:
    # Own history is the vehicle's record as it is; only similar recall filters on recheck.
    for hours, ok in ((0, None), (1, False), (2, True)):
        store.upsert(rec(VIN_A, hours=hours, recheck_ok=ok))
    assert [r.recheck_ok for r in store.own_history(VIN_A, T0, 10, as_of=LATE)] == [True, False, None]


def test_own_history_ties_on_time_are_ordered_by_session_id_descending(store: MemoryStore) -> None:
    a = rec(VIN_A, session_id=f"{VIN_A}-a")
    b = rec(VIN_A, session_id=f"{VIN_A}-b")
    store.upsert(a)
    store.upsert(b)
    assert [r.session_id for r in store.own_history(VIN_A, T0, 10, as_of=LATE)] == [b.session_id, a.session_id]


# -- similar --------------------------------------------------------------------------


def test_similar_returns_only_verified_valid_same_series_other_vehicles(store: MemoryStore) -> None:
    good = rec(VIN_B, recheck_ok=True)
    excluded = [
        rec(VIN_A, recheck_ok=True),  # the asking vehicle itself
        rec(VIN_C, hours=1, recheck_ok=None),  # not rechecked yet
        rec(VIN_C, hours=2, recheck_ok=False),  # recheck failed
        rec(VIN_C, hours=3, recheck_ok=True, series="EV-B"),  # other series
        rec(VIN_C, hours=4, recheck_ok=True, valid=False),  # soft-deleted
        # What a session still open guessed, whatever verdict a store holds for it (one written before
        # rechecks of milestones were refused): no concluded case.
        rec(VIN_C, hours=5, recheck_ok=True, kind=RecordKind.MILESTONE, session_id=f"{VIN_C}-20261101T131530-m1"),
    ]
    for r in (good, *excluded):
        store.upsert(r)
    hits = store.similar(query(E1, k=10))
    assert [(h.record.vin, h.record.session_id) for h in hits] == [(VIN_B, good.session_id)]
    assert hits[0].score == pytest.approx(1.0, abs=1e-6)


def test_similar_is_ranked_by_inner_product_and_cut_at_k(store: MemoryStore) -> None:
    vins = [f"LSVAU2180N21{i:05d}" for i in range(4)]
    # Inner products with e1: 1.0, 0.6, 0.28, 0.0 (inserted out of order).
    vectors = {
        vins[2]: unit(0.28, 0, 0.96, 0),
        vins[0]: unit(1, 0, 0, 0),
        vins[3]: unit(0, 1, 0, 0),
        vins[1]: unit(0.6, 0.8, 0, 0),
    }
    for vin, vec in vectors.items():
        store.upsert(rec(vin, recheck_ok=True, summary_vec=vec))

    hits = store.similar(query(E1, k=10))
    assert [h.record.vin for h in hits] == vins
    assert [h.score for h in hits] == pytest.approx([1.0, 0.6, 0.28, 0.0], abs=1e-6)

    top2 = store.similar(query(E1, k=2))
    assert [h.record.vin for h in top2] == vins[:2]
    assert store.similar(query(E1, k=0)) == []

    # Another direction ranks them differently: e2 favours vins[3], then vins[1].
    by_e2 = store.similar(query(unit(0, 1, 0, 0), k=2))
    assert [h.record.vin for h in by_e2] == [vins[3], vins[1]]
    assert [h.score for h in by_e2] == pytest.approx([1.0, 0.8], abs=1e-6)


def test_similar_also_returns_cases_pointing_away_from_the_query(store: MemoryStore) -> None:
    skip_on_mem0(
        store,
        "Memory.search drops candidates whose similarity is below `threshold`, which it accepts only in [0, 1]: "
        "a case with a negative inner product is never returned",
    )
    away, along = rec(VIN_B, recheck_ok=True, summary_vec=unit(-1, 0, 0, 0)), rec(VIN_C, recheck_ok=True)
    store.upsert(away)
    store.upsert(along)
    hits = store.similar(query(E1, k=10))
    assert [h.record.vin for h in hits] == [VIN_C, VIN_B]
    assert [h.score for h in hits] == pytest.approx([1.0, -1.0], abs=1e-6)


def test_similar_after_a_recheck_and_after_a_soft_delete(store: MemoryStore) -> None:
    r = rec(VIN_B)
    store.upsert(r)
    assert store.similar(query(E1)) == []
    assert store.set_recheck(VIN_B, r.session_id, True, LATE)
    assert [h.record.session_id for h in store.similar(query(E1))] == [r.session_id]
    assert store.soft_delete(VIN_B, LATE) == 1
    assert store.similar(query(E1)) == []


# -- recheck and soft delete --------------------------------------------------------------


def test_set_recheck(store: MemoryStore) -> None:
    r = rec(VIN_A)
    store.upsert(r)
    assert store.set_recheck(VIN_A, "LSVAU2180N2183294-20990101T000000", True, LATE) is False
    assert store.set_recheck(VIN_B, r.session_id, True, LATE) is False  # right session, wrong VIN
    assert store.count() == 1  # an unknown recheck creates nothing

    assert store.set_recheck(VIN_A, r.session_id, True, LATE) is True
    got = store.get(VIN_A, r.session_id)
    assert got is not None and got.recheck_ok is True
    assert got.updated_at >= r.updated_at
    assert got.summary == r.summary and got.root_cause == r.root_cause  # the rest is untouched

    assert store.set_recheck(VIN_A, r.session_id, False, LATE) is True
    got = store.get(VIN_A, r.session_id)
    assert got is not None and got.recheck_ok is False


def test_soft_delete_marks_invalid_keeps_for_audit_and_counts(store: MemoryStore) -> None:
    a1, a2 = rec(VIN_A, hours=0, recheck_ok=True), rec(VIN_A, hours=5, recheck_ok=True)
    b1 = rec(VIN_B, hours=3, recheck_ok=True)
    for r in (a1, a2, b1):
        store.upsert(r)

    assert store.soft_delete(VIN_A, LATE) == 2
    assert store.soft_delete(VIN_A, LATE) == 0  # already invalid: nothing more to delete
    assert store.soft_delete("LSVAU2180N2199999", LATE) == 0
    assert store.count() == 3  # soft: nothing is removed

    history = store.history(VIN_A)
    assert [r.session_id for r in history] == [a2.session_id, a1.session_id]
    assert [r.valid for r in history] == [False, False]
    assert store.own_history(VIN_A, T0 - timedelta(days=1), 10, as_of=LATE) == []
    assert [h.record.vin for h in store.similar(query(E1, exclude_vin=VIN_C))] == [VIN_B]

    # The other vehicle is untouched.
    b = store.get(VIN_B, b1.session_id)
    assert b is not None and b.valid


def test_history_includes_invalid_records_newest_first(store: MemoryStore) -> None:
    store.upsert(rec(VIN_A, hours=0))
    store.upsert(rec(VIN_A, hours=2, valid=False))
    store.upsert(rec(VIN_A, hours=1))
    store.upsert(rec(VIN_B, hours=3))
    history = store.history(VIN_A)
    assert [r.concluded_at for r in history] == [T0 + timedelta(hours=h) for h in (2, 1, 0)]
    assert [r.valid for r in history] == [False, True, True]


# -- isolation ------------------------------------------------------------------------------


def test_per_vin_isolation_over_200_vehicles(store: MemoryStore) -> None:
    vins = [f"LSVAU2180N2{i:06d}" for i in range(200)]
    assert len(set(vins)) == 200
    for i, vin in enumerate(vins):
        for hours in (0, 24):
            store.upsert(
                rec(vin, hours=hours + i % 7, recheck_ok=i % 2 == 0, series=f"EV-{'AB'[i % 2]}", summary_vec=E1)
            )
    assert store.count() == 400

    for vin in vins:
        own = store.own_history(vin, T0 - timedelta(days=1), 10, as_of=LATE)
        assert len(own) == 2
        assert {r.vin for r in own} == {vin}
        assert all(r.session_id.startswith(vin + "-") for r in own)
        assert {r.vin for r in store.history(vin)} == {vin}
    # Similar recall of a verified EV-A vehicle never returns the vehicle itself.
    for vin in vins[:20:2]:
        hits = store.similar(query(E1, k=500, exclude_vin=vin, series="EV-A"))
        assert len(hits) == 2 * 99  # 100 verified EV-A vehicles, less this one, 2 cases each
        assert vin not in {h.record.vin for h in hits}
        assert {h.record.series for h in hits} == {"EV-A"}


# -- round trips ------------------------------------------------------------------------------

HOSTILE = [
    'it\'s a "quoted" cause',
    "'; DROP TABLE case_memory; --",
    "Robert'); DELETE FROM case_memory WHERE ('1'='1",
    "电池包单体压差过大，疑似电芯自放电 ✓ 😀",
    "back\\slash, percent 100% and _underscore_",
    "line one\nline two\ttabbed",
    "NULL",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_round_trip_intact(store: MemoryStore, text: str) -> None:
    r = rec(VIN_A, root_cause=text, fix_action=text, summary=text[:300], dtc_codes=["P0A7F"], prompt_version=text)
    store.upsert(r)
    store.upsert(rec(VIN_B))
    got = store.get(VIN_A, r.session_id)
    same(got, r)
    assert got is not None and got.root_cause == text and got.summary == text[:300]
    assert store.count() == 2  # nothing was dropped or deleted by the text
    assert [x.root_cause for x in store.own_history(VIN_A, T0, 10, as_of=LATE)] == [text]


def test_hostile_vin_and_session_id_are_just_values(store: MemoryStore) -> None:
    store.upsert(rec(VIN_A))
    hostile = "' OR '1'='1"
    assert store.get(hostile, hostile) is None
    assert store.own_history(hostile, T0 - timedelta(days=1), 10, as_of=LATE) == []
    assert store.history(hostile) == []
    assert store.set_recheck(hostile, hostile, True, LATE) is False
    assert store.soft_delete(hostile, LATE) == 0
    got = store.get(VIN_A, rec(VIN_A).session_id)
    assert got is not None and got.valid and got.recheck_ok is None


def test_datetimes_round_trip_at_second_precision_in_utc(store: MemoryStore) -> None:
    # 16:15:30.987654 at +08:00 is 08:15:30 UTC at second precision.
    concluded = datetime(2026, 11, 1, 16, 15, 30, 987654, tzinfo=timezone(timedelta(hours=8)))
    updated = datetime(2026, 11, 2, 1, 2, 3, 500000, tzinfo=UTC)
    r = rec(VIN_A, concluded_at=concluded, updated_at=updated)
    assert r.concluded_at == datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
    store.upsert(r)
    got = store.get(VIN_A, r.session_id)
    assert got is not None
    assert got.concluded_at == datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
    assert got.concluded_at.utcoffset() == timedelta(0)
    assert got.concluded_at.microsecond == 0
    assert got.updated_at == datetime(2026, 11, 2, 1, 2, 3, tzinfo=UTC)
    assert got.updated_at.utcoffset() == timedelta(0)


def test_vectors_and_codes_round_trip(store: MemoryStore) -> None:
    vec = unit(*[((i * 37) % 11 - 5) for i in range(256)])
    r = rec(VIN_A, summary_vec=vec, dtc_codes=["P0A7F", "U0100", "C0035"])
    store.upsert(r)
    got = store.get(VIN_A, r.session_id)
    assert got is not None
    assert len(got.summary_vec) == 256
    assert got.summary_vec == pytest.approx(vec, rel=1e-6, abs=1e-7)
    assert got.dtc_codes == ["P0A7F", "U0100", "C0035"]


# -- batches, prompt versions, dedup -------------------------------------------------------------


def test_upsert_many_writes_every_record_and_replaces_by_key(store: MemoryStore) -> None:
    batch = [rec(VIN_A, hours=h, recheck_ok=True) for h in range(3)] + [rec(VIN_B, hours=1)]
    store.upsert_many(batch)
    assert store.count() == 4
    for r in batch:
        same(store.get(r.vin, r.session_id), r)
    store.upsert_many([rec(VIN_A, hours=0, root_cause="replaced cause")])
    store.upsert_many([])
    assert store.count() == 4
    got = store.get(VIN_A, batch[0].session_id)
    assert got is not None and got.root_cause == "replaced cause" and got.recheck_ok is None


def test_by_prompt_version_lists_valid_records_of_that_version_by_key(store: MemoryStore) -> None:
    v1_b = rec(VIN_B, hours=1, prompt_version="case-summary-v1")
    v1_a_new = rec(VIN_A, hours=9, prompt_version="case-summary-v1")
    v1_a_old = rec(VIN_A, hours=2, prompt_version="case-summary-v1")
    v2 = rec(VIN_C, hours=3, prompt_version="case-summary-v2")
    v1_deleted = rec(VIN_C, hours=4, prompt_version="case-summary-v1", valid=False)
    for r in (v1_b, v2, v1_a_new, v1_deleted, v1_a_old):
        store.upsert(r)
    # Ordered by (vin, session_id): VIN_B (...2100001) sorts before VIN_A (...2183294);
    # VIN_A's older session id (...T101530) before its newer one (...T171530).
    expected = [v1_b.session_id, v1_a_old.session_id, v1_a_new.session_id]
    assert [r.session_id for r in store.by_prompt_version("case-summary-v1", 10)] == expected
    assert [r.session_id for r in store.by_prompt_version("case-summary-v1", 2)] == expected[:2]
    assert [r.session_id for r in store.by_prompt_version("case-summary-v2", 10)] == [v2.session_id]
    assert store.by_prompt_version("case-summary-v9", 10) == []


def test_find_duplicate_same_vin_and_root_cause_within_the_window(store: MemoryStore) -> None:
    cause = "weak cell group self-discharges"
    old = rec(VIN_A, hours=0, root_cause=cause)
    newer = rec(VIN_A, hours=10 * 24, root_cause=cause)
    other_cause = rec(VIN_A, hours=20 * 24, root_cause="coolant pump stalls")
    other_vin = rec(VIN_B, hours=25 * 24, root_cause=cause)
    deleted = rec(VIN_A, hours=15 * 24, root_cause=cause, valid=False)
    for r in (old, newer, other_cause, other_vin, deleted):
        store.upsert(r)
    since = T0 + timedelta(days=1)  # leaves out `old`
    got = store.find_duplicate(VIN_A, cause, since)
    assert got is not None and got.session_id == newer.session_id  # newest valid match; not the deleted one
    assert store.find_duplicate(VIN_A, cause, T0 + timedelta(days=11)) is None  # only the deleted one is newer
    got_old = store.find_duplicate(VIN_A, cause, T0)  # inclusive lower bound
    assert got_old is not None and got_old.session_id == newer.session_id
    assert store.find_duplicate(VIN_A, "no such cause", T0) is None
    got_b = store.find_duplicate(VIN_B, cause, T0)
    assert got_b is not None and got_b.vin == VIN_B
    assert store.find_duplicate(VIN_C, cause, T0) is None
    # Bounded above too (a case that concluded before the newest of its cause): inclusive, the newest before it.
    before = store.find_duplicate(VIN_A, cause, T0, until=T0 + timedelta(days=9))
    assert before is not None and before.session_id == old.session_id
    at = store.find_duplicate(VIN_A, cause, T0, until=T0 + timedelta(days=10))
    assert at is not None and at.session_id == newer.session_id
    assert store.find_duplicate(VIN_A, cause, T0 + timedelta(days=1), until=T0 + timedelta(days=9)) is None
