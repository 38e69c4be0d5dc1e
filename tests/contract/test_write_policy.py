"""Write gates: merge within 30 days, milestones for long sessions, rechecks that follow merges.

Run over every store backend (the contract suite's ``store`` fixture: the
in-memory twin, sqlite, a real MariaDB, and Doris when configured).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.unit.test_engine import SID_1, T0, VIN, Harness, alert, lifecycle, recheck
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.knowledge import load_pack
from vdoctor.memory.write_policy import set_recheck
from vdoctor.models.offline import OfflineModel
from vdoctor.records import Phase, RecordKind
from vdoctor.stores.base import MemoryStore

pytestmark = pytest.mark.contract

CONFIRMING = {"cell_voltage_diff_mv": 187}


@pytest.fixture
def h(store: MemoryStore) -> Harness:
    return Harness(DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack()))


def test_same_fault_within_30_days_updates_the_existing_record(h: Harness, store: MemoryStore) -> None:
    first = h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    h.send(recheck("r-1", T0 + timedelta(days=2), SID_1, ok=True))
    second = h.diagnose(alert("e-2", T0 + timedelta(days=29), signals={"cell_voltage_diff_mv": 150}))
    assert first.phase is second.phase is Phase.CONCLUDED
    assert second.session_id == f"{VIN}-20261130T081530"
    assert "l3_merged" in second.flags
    records = store.history(VIN)
    assert [r.session_id for r in records] == [SID_1]
    merged = records[0]
    assert merged.merged_sessions == [second.session_id]
    assert merged.recheck_ok is None  # the fault came back: no longer verified
    assert "cell_voltage_diff_mv=150" in merged.summary
    assert merged.concluded_at == T0 + timedelta(days=29)


def test_a_session_run_again_keeps_the_verdict_of_its_recheck(h: Harness, store: MemoryStore) -> None:
    """The session's alert again, on fresh state: a restore from before it, or a duplicate older than the
    dedup ids a vehicle keeps. The case it writes again is the same case: its recheck still verifies it."""
    first = h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    assert first.session_id == SID_1 and first.phase is Phase.CONCLUDED
    h.send(recheck("r-1", T0 + timedelta(days=2), SID_1, ok=True))
    again = Harness(h.engine).diagnose(alert("e-1", T0, signals=CONFIRMING))
    assert again.session_id == SID_1 and "l3_merged" not in again.flags
    record = store.get(VIN, SID_1)
    assert record is not None and record.recheck_ok is True
    assert record.verified_ts == T0 + timedelta(days=2)


def test_a_merged_session_run_again_keeps_the_verdict_of_its_recheck(h: Harness, store: MemoryStore) -> None:
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    second = h.diagnose(alert("e-2", T0 + timedelta(days=10), signals=CONFIRMING))
    assert "l3_merged" in second.flags
    h.send(recheck("r-2", T0 + timedelta(days=12), second.session_id, ok=True))
    again = Harness(h.engine).diagnose(alert("e-2", T0 + timedelta(days=10), signals=CONFIRMING))
    assert again.session_id == second.session_id and "l3_merged" in again.flags
    record = store.get(VIN, SID_1)
    assert record is not None and record.merged_sessions == [second.session_id]
    assert record.recheck_ok is True and record.verified_ts == T0 + timedelta(days=12)


def test_a_case_run_again_leaves_a_later_case_merged_into_its_record_since_as_it_is(
    h: Harness, store: MemoryStore
) -> None:
    """A restore from before the first session, after a later one of its cause was merged into its record: the
    first session's case, written again, put its older summary and conclusion over the later one's."""
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    second = h.diagnose(alert("e-2", T0 + timedelta(days=5), signals={"cell_voltage_diff_mv": 150}))
    assert "l3_merged" in second.flags
    before = store.get(VIN, SID_1)
    again = Harness(h.engine).diagnose(alert("e-1", T0, signals=CONFIRMING))
    assert again.session_id == SID_1
    after = store.get(VIN, SID_1)
    assert after == before and after is not None and "cell_voltage_diff_mv=150" in after.summary
    assert after.merged_sessions == [second.session_id] and after.concluded_at == T0 + timedelta(days=5)


def test_a_case_run_again_leaves_its_record_as_it_is_whatever_the_newest_case_of_its_cause(
    h: Harness, store: MemoryStore
) -> None:
    """The first case took in a second one, and a third more than 30 days later is a record of its own. Run again,
    the first case looked past the newest (the third) for a record to merge into, found none concluded by then,
    and was written over its own record: the second case was gone from every record (a review)."""
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    second = h.diagnose(alert("e-2", T0 + timedelta(days=20), signals={"cell_voltage_diff_mv": 150}))
    third = h.diagnose(alert("e-3", T0 + timedelta(days=55), signals={"cell_voltage_diff_mv": 160}))
    assert "l3_merged" in second.flags and "l3_merged" not in third.flags
    before = sorted(store.history(VIN), key=lambda r: r.session_id)
    again = Harness(h.engine).diagnose(alert("e-1", T0, signals=CONFIRMING))
    assert again.session_id == SID_1 and sorted(store.history(VIN), key=lambda r: r.session_id) == before
    assert h.send(recheck("r-2", T0 + timedelta(days=22), second.session_id, ok=True)).dead_letters == []


def test_a_merged_case_run_again_stays_in_the_record_that_took_it_in(h: Harness, store: MemoryStore) -> None:
    """Run again after a later case was merged into the same record: it was written a second time, as a record of
    its own, while still in that record's merged sessions (a review). It is left where it is, said merged."""
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    second = h.diagnose(alert("e-2", T0 + timedelta(days=10), signals={"cell_voltage_diff_mv": 150}))
    h.diagnose(alert("e-3", T0 + timedelta(days=20), signals={"cell_voltage_diff_mv": 160}))
    h.diagnose(alert("e-4", T0 + timedelta(days=55), signals={"cell_voltage_diff_mv": 170}))
    before = sorted(store.history(VIN), key=lambda r: r.session_id)
    again = Harness(h.engine).diagnose(alert("e-2", T0 + timedelta(days=10), signals={"cell_voltage_diff_mv": 150}))
    assert again.session_id == second.session_id and "l3_merged" in again.flags
    assert sorted(store.history(VIN), key=lambda r: r.session_id) == before


def test_a_case_run_again_after_its_vehicle_left_care_stays_invalid(h: Harness, store: MemoryStore) -> None:
    """Transferred after its case, the vehicle's new owner had a case of the same cause: the first case, run again,
    found no valid record to merge into and came back valid, a case of the new owner's vehicle in every recall."""
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    h.send(lifecycle("l-1", T0 + timedelta(days=5), "transferred"))
    owner = Harness(h.engine).diagnose(alert("e-2", T0 + timedelta(days=10), signals={"cell_voltage_diff_mv": 150}))
    assert "l3_merged" not in owner.flags
    before = sorted(store.history(VIN), key=lambda r: r.session_id)
    again = Harness(h.engine).diagnose(alert("e-1", T0, signals=CONFIRMING))
    assert again.session_id == SID_1
    first = store.get(VIN, SID_1)
    assert first is not None and not first.valid and first.invalid_ts == T0 + timedelta(days=5)
    assert [r for r in store.history(VIN) if r.session_id == owner.session_id] == [
        r for r in before if r.session_id == owner.session_id
    ]


def test_a_late_case_is_merged_as_in_order_and_leaves_the_newer_case_of_its_cause_as_it_is(
    h: Harness, store: MemoryStore
) -> None:
    """A case that concluded between two of its cause, delivered after the newer one (a late alert): merged into
    the newest record of its cause, it put its summary over the newer case's and took away its verdict."""
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    newer = h.diagnose(alert("e-3", T0 + timedelta(days=40), signals={"cell_voltage_diff_mv": 160}))
    assert "l3_merged" not in newer.flags
    h.send(recheck("r-3", T0 + timedelta(days=41), newer.session_id, ok=True))
    before = store.get(VIN, newer.session_id)
    late = Harness(h.engine).diagnose(alert("e-2", T0 + timedelta(days=20), signals={"cell_voltage_diff_mv": 150}))
    assert "l3_merged" in late.flags
    assert store.get(VIN, newer.session_id) == before and before is not None and before.recheck_ok is True
    # Merged where it would have been in order: into the case of its cause within the 30 days before it. (In order,
    # the newer case, 20 days after it, would then have merged into that record too: it stays apart, README.)
    first = store.get(VIN, SID_1)
    assert first is not None and first.merged_sessions == [late.session_id]
    assert "cell_voltage_diff_mv=150" in first.summary and first.concluded_at == T0 + timedelta(days=20)


def test_a_late_case_keeps_the_verdict_its_record_was_given_when_it_concluded_or_after(
    h: Harness, store: MemoryStore
) -> None:
    """The first case's recheck, in the second the second case concluded, came before that case, delivered late
    (after a newer case of its cause): the merge took the verdict away. In order, the recheck came after the merge
    (``stale_recheck``: not before the newest merged case) and verified the record."""
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    h.send(recheck("r-1", T0 + timedelta(days=20), SID_1, ok=True))
    h.diagnose(alert("e-3", T0 + timedelta(days=40), signals={"cell_voltage_diff_mv": 160}))
    late = Harness(h.engine).diagnose(alert("e-2", T0 + timedelta(days=20), signals={"cell_voltage_diff_mv": 150}))
    assert "l3_merged" in late.flags
    record = store.get(VIN, SID_1)
    assert record is not None and record.merged_sessions == [late.session_id]
    assert record.recheck_ok is True and record.verified_ts == T0 + timedelta(days=20)
    assert "cell_voltage_diff_mv=150" in record.summary


def test_a_case_in_order_resets_a_verdict_dated_after_it(h: Harness, store: MemoryStore) -> None:
    """A recheck misdated a year ahead: the fault that came back, in order, still takes the verdict away (a case
    written at its conclusion is not late; kept, that verdict verified every recurrence for a year: a review)."""
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    h.send(recheck("r-1", T0 + timedelta(days=400), SID_1, ok=True))
    second = h.diagnose(alert("e-2", T0 + timedelta(days=10), signals={"cell_voltage_diff_mv": 150}))
    assert "l3_merged" in second.flags
    record = store.get(VIN, SID_1)
    assert record is not None and record.recheck_ok is None and record.verified_ts is None


def test_same_fault_after_30_days_is_a_new_record(h: Harness, store: MemoryStore) -> None:
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    later = h.diagnose(alert("e-2", T0 + timedelta(days=31), signals=CONFIRMING))
    assert "l3_merged" not in later.flags
    assert sorted(r.session_id for r in store.history(VIN)) == [SID_1, later.session_id]


def test_another_root_cause_within_30_days_is_a_new_record(h: Harness, store: MemoryStore) -> None:
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    other = h.diagnose(alert("e-2", T0 + timedelta(days=3), codes=["P0562"], signals={"battery_voltage_v": 10.9}))
    assert other.phase is Phase.CONCLUDED
    assert len(store.history(VIN)) == 2


def test_recheck_of_a_merged_session_lands_on_the_merged_record(h: Harness, store: MemoryStore) -> None:
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    second = h.diagnose(alert("e-2", T0 + timedelta(days=10), signals=CONFIRMING))
    result = h.send(recheck("r-2", T0 + timedelta(days=12), second.session_id, ok=True))
    assert result.dead_letters == []
    record = store.get(VIN, SID_1)
    assert record is not None and record.recheck_ok is True


def verdict(store: MemoryStore) -> tuple[bool | None, datetime | None]:
    """The first session's record's recheck_ok and verified_ts."""
    record = store.get(VIN, SID_1)
    assert record is not None
    return record.recheck_ok, record.verified_ts


def test_a_recheck_from_before_the_fault_came_back_is_a_dead_letter_and_verifies_nothing(
    h: Harness, store: MemoryStore
) -> None:
    """A workshop's verdict on the first repair that arrives after the fault came back (a later session of
    the same cause merged into the record): it must not verify the record's new version, whose own recheck
    is still to come. It is a dead letter that says so, not lost."""
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    second = h.diagnose(alert("e-2", T0 + timedelta(days=10), signals=CONFIRMING))
    assert "l3_merged" in second.flags
    late = h.send(recheck("r-1", T0 + timedelta(days=5), SID_1, ok=True))
    [letter] = late.dead_letters
    assert letter.stage == "process" and "before the fault came back" in letter.error
    assert second.session_id in letter.error
    assert verdict(store) == (None, None)
    # The same without a session id (a workshop's system that knows the vehicle): its case as of then.
    unnamed = {**recheck("r-2", T0 + timedelta(days=6), SID_1, ok=True), "session_id": None}
    assert "before the fault came back" in h.send(unnamed).dead_letters[0].error
    # The new session's own recheck verifies the record.
    assert h.send(recheck("r-3", T0 + timedelta(days=12), second.session_id, ok=True)).dead_letters == []
    assert verdict(store) == (True, T0 + timedelta(days=12))


def test_a_recheck_of_the_first_session_after_the_fault_came_back_verifies_the_record(
    h: Harness, store: MemoryStore
) -> None:
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    h.diagnose(alert("e-2", T0 + timedelta(days=10), signals=CONFIRMING))
    assert h.send(recheck("r-1", T0 + timedelta(days=12), SID_1, ok=False)).dead_letters == []
    assert verdict(store) == (False, T0 + timedelta(days=12))


def test_a_late_recheck_of_a_record_never_merged_still_counts_from_its_conclusion(
    h: Harness, store: MemoryStore
) -> None:
    # Only a fault that came back makes a verdict stale: a recheck dated before its own case's conclusion
    # (clocks apart) is applied from the conclusion, as before.
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    assert h.send(recheck("r-1", T0 - timedelta(minutes=5), SID_1, ok=True)).dead_letters == []
    assert verdict(store) == (True, T0)


def test_recheck_of_a_sessions_own_record_is_one_write_and_an_unknown_session_none(
    h: Harness, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.diagnose(alert("e-1", T0, signals=CONFIRMING))
    reads: list[str] = []
    for name in ("get", "history"):
        read = getattr(store, name)
        monkeypatch.setattr(store, name, lambda *args, _name=name, _read=read: reads.append(_name) or _read(*args))
    assert set_recheck(store, VIN, SID_1, True, T0 + timedelta(days=2))
    assert reads == []  # the record is not read before its write
    record = store.get(VIN, SID_1)
    assert record is not None and record.recheck_ok is True
    reads.clear()
    assert not set_recheck(store, VIN, "no-such-session", True, T0 + timedelta(days=3))
    assert reads == ["get", "history"]  # only then: its own record (a stale verdict), then the merged ones


def test_long_session_writes_milestones_superseded_by_the_final_record(h: Harness, store: MemoryStore) -> None:
    # Below-threshold readings every 20 h keep the session open (expiry is 48 h without an alert).
    for i, hours in enumerate((0, 20, 40, 60)):
        d = h.diagnose(alert(f"e-{i}", T0 + timedelta(hours=hours), signals={"cell_voltage_diff_mv": 60}))
        assert d.phase is Phase.INVESTIGATING
    # 40 h: one full day open -> milestone 1; 60 h: two days -> milestone 2.
    milestones = [r for r in store.history(VIN) if r.kind is RecordKind.MILESTONE]
    assert sorted(r.session_id for r in milestones) == [f"{SID_1}-m1", f"{SID_1}-m2"]
    assert all(r.valid and r.root_cause == "" and len(r.summary) <= 300 for r in milestones)
    assert "cell_voltage_diff_mv=60" in milestones[0].summary
    final = h.diagnose(alert("e-9", T0 + timedelta(hours=70), signals=CONFIRMING))
    assert final.phase is Phase.CONCLUDED
    by_id = {r.session_id: r for r in store.history(VIN)}
    assert by_id[SID_1].kind is RecordKind.FINAL and by_id[SID_1].valid
    assert not by_id[f"{SID_1}-m1"].valid and not by_id[f"{SID_1}-m2"].valid  # superseded, kept for audit


def test_a_milestone_carries_what_the_session_knew_then_and_is_never_recalled_as_concluded(
    h: Harness, store: MemoryStore
) -> None:
    # P0A7F is known (P2): the open session suspects it. P1XXX alone is unknown: no priority, no hypothesis.
    for i, hours in enumerate((0, 20, 40)):
        h.diagnose(alert(f"e-{i}", T0 + timedelta(hours=hours), signals={"cell_voltage_diff_mv": 60}))
    other = "LSVAU2180N2100009"
    for i, hours in enumerate((0, 20, 40)):
        h.diagnose(alert(f"o-{i}", T0 + timedelta(hours=hours), codes=["P1ABC"], signals={}, vin=other))
    [known] = [r for r in store.history(VIN) if r.kind is RecordKind.MILESTONE]
    [unknown] = [r for r in store.history(other) if r.kind is RecordKind.MILESTONE]
    assert known.priority == "P2" and known.root_cause == "" and known.fix_action == ""
    assert known.summary.splitlines()[-1] == (
        "2026-11-02 24:15 | milestone 1 | not concluded; P2; leading: suspected P0A7F conf 0.30 | -".replace(
            "2026-11-02 24:15", f"{T0 + timedelta(hours=40):%Y-%m-%d %H:%M}"
        )
    )
    assert "readings: cell_voltage_diff_mv=60mV" in known.summary
    assert unknown.priority is None
    assert unknown.summary.endswith("| milestone 1 | not concluded; no priority yet; no hypothesis yet | -")
    # A new session of the vehicle recalls the milestone as what it is, with no cause or fix.
    recalled = h.engine.recall.for_alert(other, "EV-A", "again", ["P1ABC"], T0 + timedelta(days=5))
    head = f"- [own] case://{other}/{unknown.session_id} | milestone (not concluded) "
    assert head in recalled.text and "no priority yet | recheck pending" in recalled.text
    assert "cause:" not in recalled.text and "concluded 20" not in recalled.text


def test_a_session_that_never_concludes_writes_no_final_record(h: Harness, store: MemoryStore) -> None:
    h.diagnose(alert("e-1", T0, signals={"cell_voltage_diff_mv": 60}))
    h.diagnose(alert("e-2", T0 + timedelta(hours=5), signals={"cell_voltage_diff_mv": 70}))
    h.diagnose(alert("e-3", T0 + timedelta(days=5), codes=[], signals={}))  # the first session expired
    assert store.history(VIN) == []
