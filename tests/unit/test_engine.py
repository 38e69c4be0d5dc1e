"""The per-vehicle diagnosis engine, driven through an in-memory harness.

The harness plays the Flink operator: per VIN it keeps the session and dedup
snapshots, round-trips them through JSON between events (as keyed state
would), and collects what the engine emits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vdoctor.diagnosis import DiagnosisEngine, StepResult
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.errors import StoreError
from vdoctor.events import parse_event
from vdoctor.knowledge import KnowledgePack, load_pack
from vdoctor.memory.request import SummaryRequest
from vdoctor.memory.session import DedupState, SessionState
from vdoctor.memory.summarizer import OfflineSummarizer
from vdoctor.models.offline import OfflineModel
from vdoctor.records import DeadLetter, Diagnosis, MemoryRef, Phase
from vdoctor.retrieval.text import case_text, dense_text
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"
VIN_B = "LSVAU2180N2100001"
VIN_C = "LSVAU2180N2100002"
VIN_D = "LSVAU2180N2100003"
T0 = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
SID_1 = f"{VIN}-20261101T081530"  # opened by the alert at T0


def iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def alert(
    event_id: str,
    at: datetime,
    codes: list[str] | None = None,
    signals: dict[str, float] | None = None,
    *,
    vin: str = VIN,
    series: str = "EV-A",
    text: str = "电池包单体压差过大",
) -> dict[str, Any]:
    return {
        "type": "alert",
        "event_id": event_id,
        "vin": vin,
        "series": series,
        "ts": iso(at),
        "alert_text": text,
        "dtc_codes": ["P0A7F"] if codes is None else codes,
        "signals": {} if signals is None else signals,
    }


def recheck(event_id: str, at: datetime, session_id: str, ok: bool = True, *, vin: str = VIN) -> dict[str, Any]:
    return {
        "type": "recheck",
        "event_id": event_id,
        "vin": vin,
        "session_id": session_id,
        "ts": iso(at),
        "recheck_ok": ok,
        "note": "压差 12mV, 复检正常",
    }


def lifecycle(event_id: str, at: datetime, change: str = "scrapped", *, vin: str = VIN) -> dict[str, Any]:
    return {"type": "lifecycle", "event_id": event_id, "vin": vin, "ts": iso(at), "change": change}


@dataclass
class Harness:
    engine: DiagnosisEngine
    state: dict[str, tuple[str | None, str]] = field(default_factory=dict)
    diagnoses: list[Diagnosis] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)

    def send(self, payload: dict[str, Any]) -> StepResult:
        raw = json.dumps(payload, ensure_ascii=False)
        event = parse_event(raw)
        session_json, dedup_json = self.state.get(event.vin, (None, DedupState().model_dump_json()))
        session = SessionState.model_validate_json(session_json) if session_json else None
        dedup = DedupState.model_validate_json(dedup_json)
        result = self.engine.on_event(session, dedup, event, raw)
        self.state[event.vin] = (
            result.session.model_dump_json() if result.session else None,
            result.dedup.model_dump_json(),
        )
        self.diagnoses += result.diagnoses
        self.dead_letters += result.dead_letters
        return result

    def diagnose(self, payload: dict[str, Any]) -> Diagnosis:
        result = self.send(payload)
        assert result.dead_letters == []
        assert len(result.diagnoses) == 1
        return result.diagnoses[0]

    def session(self, vin: str = VIN) -> SessionState | None:
        session_json = self.state[vin][0]
        return SessionState.model_validate_json(session_json) if session_json else None


@pytest.fixture(scope="module")
def pack() -> KnowledgePack:
    return load_pack()


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def harness(store: InMemoryStore, pack: KnowledgePack) -> Harness:
    return Harness(DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=pack))


def conclude_first_case(h: Harness) -> tuple[Diagnosis, Diagnosis]:
    """P0A7F at T0 with 87 mV (below the 100 mV rule), then 2 h later with 187 mV."""
    first = h.diagnose(alert("e-1", T0, signals={"cell_voltage_diff_mv": 87}))
    second = h.diagnose(alert("e-2", T0 + timedelta(hours=2), signals={"cell_voltage_diff_mv": 187}))
    return first, second


# -- one session ----------------------------------------------------------------


def test_two_alerts_investigate_then_conclude_and_write_one_case(
    harness: Harness, store: InMemoryStore, pack: KnowledgePack
) -> None:
    entry = pack.get("P0A7F")
    assert entry is not None
    first, second = conclude_first_case(harness)

    assert first.phase is Phase.INVESTIGATING
    assert first.session_id == SID_1
    assert first.root_cause is None and first.fix_action is None
    assert first.event_id == "e-1"

    assert second.phase is Phase.CONCLUDED
    assert second.session_id == SID_1  # the session of the FIRST alert
    assert second.root_cause == entry.root_cause
    assert second.fix_action == entry.fix_action
    assert second.priority == entry.priority == "P2"
    assert second.confidence == pytest.approx(0.8)
    uri_187 = f"signal://{VIN}/cell_voltage_diff_mv@2026-11-01T10:15:30Z"
    assert second.evidence == ["dtc://P0A7F", uri_187]
    # lookup_dtc, then signal_history, then the answer.
    assert second.tool_calls == 2
    assert second.llm_calls == 3
    assert second.prompt_tokens > 0 and second.completion_tokens > 0

    assert store.count() == 1
    rec = store.get(VIN, SID_1)
    assert rec is not None
    assert rec.series == "EV-A"
    assert rec.concluded_at == T0 + timedelta(hours=2)
    assert rec.root_cause == entry.root_cause
    assert rec.priority == "P2"
    assert rec.dtc_codes == ["P0A7F"]
    assert rec.recheck_ok is None
    assert rec.valid
    assert "cell_voltage_diff_mv=187" in rec.summary
    assert len(rec.summary) <= 300


def test_a_written_case_is_embedded_from_its_summary_words_not_its_readings(
    harness: Harness, store: InMemoryStore
) -> None:
    conclude_first_case(harness)
    rec = store.get(VIN, SID_1)
    assert rec is not None and "cell_voltage_diff_mv=187" in rec.summary and "signal://" in rec.summary
    embedded = dense_text(rec.alert_text, rec.dtc_codes, rec.root_cause, rec.fix_action, rec.summary)
    assert rec.alert_text in embedded and rec.root_cause in embedded and "cell_voltage_diff_mv" in embedded
    assert "187" not in embedded and "signal://" not in embedded and "2026-11-01" not in embedded
    assert rec.summary_vec == pytest.approx([float(x) for x in HashingEmbedder().embed([embedded])[0]], abs=1e-6)
    whole = case_text(rec.alert_text, rec.dtc_codes, rec.root_cause, rec.fix_action, rec.summary)
    assert rec.summary_vec != pytest.approx([float(x) for x in HashingEmbedder().embed([whole])[0]], abs=1e-6)


def test_an_intermediate_guess_is_never_written(harness: Harness, store: InMemoryStore) -> None:
    harness.diagnose(alert("e-1", T0, signals={"cell_voltage_diff_mv": 87}))
    harness.diagnose(alert("e-2", T0 + timedelta(hours=1), signals={"cell_voltage_diff_mv": 95}))
    assert store.count() == 0


def test_duplicate_event_id_produces_no_output(harness: Harness, store: InMemoryStore) -> None:
    payload = alert("e-1", T0, signals={"cell_voltage_diff_mv": 87})
    harness.diagnose(payload)
    replay = harness.send(payload)
    assert replay.duplicate
    assert replay.diagnoses == [] and replay.dead_letters == []
    harness.diagnose(alert("e-2", T0 + timedelta(hours=2), signals={"cell_voltage_diff_mv": 187}))
    # A replay of the concluding alert after the conclusion: still nothing.
    again = harness.send(alert("e-2", T0 + timedelta(hours=2), signals={"cell_voltage_diff_mv": 187}))
    assert again.duplicate and again.diagnoses == []
    assert [d.event_id for d in harness.diagnoses] == ["e-1", "e-2"]
    assert store.count() == 1
    session = harness.session()
    assert session is not None and session.alerts == 2


def test_an_id_taken_by_an_event_of_another_time_is_a_dead_letter_not_a_dropped_duplicate(
    harness: Harness, store: InMemoryStore
) -> None:
    """A producer that reuses its ids (a counter started again) sends another event under a taken id: its time
    differs from the processed event's. It was dropped as a duplicate without a word; it is a dead letter naming
    both times, and the id stays the first event's (a resend of that one is still a duplicate)."""
    first = alert("e-1", T0, signals={"cell_voltage_diff_mv": 87})
    harness.diagnose(first)
    reused = alert("e-1", T0 + timedelta(hours=3), signals={"cell_voltage_diff_mv": 187})
    result = harness.send(reused)
    assert result.diagnoses == [] and result.duplicate
    assert [d.stage for d in result.dead_letters] == ["process"]
    reason = result.dead_letters[0].error
    assert "'e-1'" in reason and iso(T0) in reason and iso(T0 + timedelta(hours=3)) in reason, reason
    assert "id of its own" in reason
    assert result.dead_letters[0].raw == json.dumps(reused, ensure_ascii=False)
    resend = harness.send(first)
    assert resend.duplicate and resend.dead_letters == [] and resend.diagnoses == []
    # Sent again with an id of its own, the event is diagnosed.
    harness.diagnose(alert("e-1b", T0 + timedelta(hours=3), signals={"cell_voltage_diff_mv": 187}))
    assert [d.event_id for d in harness.diagnoses] == ["e-1", "e-1b"]


def test_an_id_taken_by_another_event_of_the_same_second_is_a_dead_letter(harness: Harness) -> None:
    """Ids made of the event's time (or a counter started again) give two events of one second one id: the second
    event was dropped as the first sent again, without a word. The dedup ids keep a mark of each event's content:
    another content under a taken id and second is a dead letter; the same event sent again is still dropped."""
    first = alert("e-1", T0, signals={"cell_voltage_diff_mv": 87})
    harness.diagnose(first)
    other = alert("e-1", T0, signals={"cell_voltage_diff_mv": 187})
    result = harness.send(other)
    assert result.diagnoses == [] and result.duplicate
    [letter] = result.dead_letters
    assert letter.raw == json.dumps(other, ensure_ascii=False)
    assert f"an event of {iso(T0)} too, but this one says something else" in letter.error, letter.error
    resend = harness.send(first)
    assert resend.duplicate and resend.dead_letters == [] and resend.diagnoses == []
    assert [d.event_id for d in harness.diagnoses] == ["e-1"]


def test_the_same_event_written_another_way_is_still_the_same_event_sent_again(harness: Harness) -> None:
    """The mark is of the content as the line sends it, not as the job parses it: a producer that writes the same
    event again with its keys, codes or readings in another order, its numbers as floats, its time to the
    millisecond, or fields of its own added, sends the same event (a review found the first marks told them apart)."""
    first = {**alert("e-1", T0, signals={"cell_voltage_diff_mv": 87, "soc_pct": 55}), "dtc_codes": ["P0A7F", "P0300"]}
    harness.diagnose(first)
    again = {
        "receivedAt": "2026-11-01T08:15:31Z",
        "signals": {"soc_pct": 55.0, "cell_voltage_diff_mv": 87.0},
        "dtc_codes": ["P0300", "P0A7F"],
        **{k: v for k, v in first.items() if k not in ("signals", "dtc_codes", "ts")},
        "ts": iso(T0).replace("Z", ".000Z"),
    }
    result = harness.send(again)
    assert result.duplicate and result.dead_letters == [] and result.diagnoses == []


def test_a_content_mark_is_of_the_line_as_sent() -> None:
    from vdoctor.events import content_mark

    line = {"type": "alert", "event_id": "e-1", "vin": VIN, "ts": "2026-11-01T08:00:00Z", "alert_text": "x",
            "dtc_codes": ["P0A7F"], "signals": [{"name": "bms_dv", "value": 187}]}  # fmt: skip
    mark = content_mark(json.dumps(line))
    assert content_mark(json.dumps(dict(reversed(line.items())), indent=2)) == mark
    assert content_mark(json.dumps({**line, "eventId": "e-1", "gateway": "gw-7"}).replace('"event_id"', '"x"')) == mark
    assert content_mark(json.dumps({**line, "signals": [{"name": "bms_dv", "value": 188}]})) != mark
    assert content_mark(json.dumps({**line, "alert_text": "y"})) != mark
    assert 0 <= mark < 1 << 16 and content_mark("not json") == content_mark("not json")


def test_an_id_taken_before_the_content_marks_is_judged_by_its_time_alone(harness: Harness) -> None:
    """Dedup ids a release before the marks wrote hold the event's second alone: any event of that second under
    the id is taken as the one sent again, as then."""
    from vdoctor.memory.session import DedupState

    vin, (session, _) = VIN, harness.state.get(VIN, (None, ""))
    harness.state[vin] = (session, DedupState(seen={"e-1": int(T0.timestamp())}).model_dump_json())
    again = harness.send(alert("e-1", T0, signals={"cell_voltage_diff_mv": 187}))
    assert again.duplicate and again.dead_letters == [] and again.diagnoses == []
    later = harness.send(alert("e-1", T0 + timedelta(seconds=1), signals={"cell_voltage_diff_mv": 187}))
    assert later.duplicate and [d.stage for d in later.dead_letters] == ["process"]


def test_alert_within_48h_joins_the_open_session(harness: Harness) -> None:
    harness.diagnose(alert("e-1", T0, signals={"cell_voltage_diff_mv": 87}))
    later = harness.diagnose(alert("e-2", T0 + timedelta(hours=47), signals={"cell_voltage_diff_mv": 90}))
    assert later.session_id == SID_1


def test_alert_49h_after_an_open_session_opens_a_new_one(harness: Harness, store: InMemoryStore) -> None:
    harness.diagnose(alert("e-1", T0, signals={"cell_voltage_diff_mv": 87}))
    late = harness.diagnose(alert("e-2", T0 + timedelta(hours=49), signals={"cell_voltage_diff_mv": 88}))
    # 2026-11-01 08:15:30 + 49 h = 2026-11-03 09:15:30.
    assert late.session_id == f"{VIN}-20261103T091530"
    assert late.phase is Phase.INVESTIGATING
    assert store.count() == 0  # nothing is written for the expired, unconcluded session
    session = harness.session()
    assert session is not None and session.alerts == 1


def test_alert_without_codes_stays_investigating(harness: Harness, store: InMemoryStore) -> None:
    out = harness.diagnose(alert("e-1", T0, codes=[], signals={"pack_temp_c": 41.5}, text="仪表提示电池温度偏高"))
    assert out.phase is Phase.INVESTIGATING
    assert out.root_cause is None and out.fix_action is None and out.priority is None
    assert out.tool_calls == 0
    assert store.count() == 0


def test_alert_after_a_conclusion_opens_a_new_session(harness: Harness) -> None:
    conclude_first_case(harness)
    nxt = harness.diagnose(alert("e-3", T0 + timedelta(hours=3), signals={"cell_voltage_diff_mv": 20}))
    assert nxt.session_id == f"{VIN}-20261101T111530"


# -- memory across sessions and vehicles --------------------------------------------


def test_second_session_recalls_the_verified_case_and_needs_fewer_tools(harness: Harness, store: InMemoryStore) -> None:
    _, first_conclusion = conclude_first_case(harness)
    result = harness.send(recheck("r-1", T0 + timedelta(days=2), SID_1, ok=True))
    assert result.diagnoses == [] and result.dead_letters == []
    rec = store.get(VIN, SID_1)
    assert rec is not None and rec.recheck_ok is True

    again = harness.diagnose(alert("e-3", T0 + timedelta(days=3), signals={"cell_voltage_diff_mv": 187}))
    assert again.session_id == f"{VIN}-20261104T081530"
    assert again.memory.injected
    assert again.memory.own == [MemoryRef(vin=VIN, session_id=SID_1)]
    assert again.memory.similar == []
    assert 0 < again.memory.tokens <= 800
    assert again.phase is Phase.CONCLUDED
    # Memory names the fault: no lookup_dtc, only signal_history.
    assert again.tool_calls == 1 < first_conclusion.tool_calls == 2
    assert f"case://{VIN}/{SID_1}" in again.evidence
    assert again.confidence == pytest.approx(0.9)  # 0.8 lifted by 0.1 for the verified case


def test_other_vehicle_sees_the_case_as_similar_only_after_the_recheck(harness: Harness) -> None:
    conclude_first_case(harness)
    before = harness.diagnose(alert("b-1", T0 + timedelta(days=1), vin=VIN_B, signals={"cell_voltage_diff_mv": 150}))
    assert before.memory.similar == []
    assert before.memory.own == []
    assert before.tool_calls == 2  # no verified case to lean on

    harness.send(recheck("r-1", T0 + timedelta(days=2), SID_1, ok=True))

    after = harness.diagnose(alert("c-1", T0 + timedelta(days=3), vin=VIN_C, signals={"cell_voltage_diff_mv": 150}))
    assert after.memory.similar == [MemoryRef(vin=VIN, session_id=SID_1)]
    assert after.memory.own == []  # another vehicle's history is never its own
    assert after.phase is Phase.CONCLUDED
    assert after.tool_calls == 1

    other_series = harness.diagnose(
        alert("d-1", T0 + timedelta(days=3), vin=VIN_D, series="EV-B", signals={"cell_voltage_diff_mv": 150})
    )
    assert other_series.memory.similar == []


def test_failed_recheck_keeps_the_case_out_of_similar_recall(harness: Harness, store: InMemoryStore) -> None:
    conclude_first_case(harness)
    harness.send(recheck("r-1", T0 + timedelta(days=2), SID_1, ok=False))
    rec = store.get(VIN, SID_1)
    assert rec is not None and rec.recheck_ok is False
    out = harness.diagnose(alert("c-1", T0 + timedelta(days=3), vin=VIN_C, signals={"cell_voltage_diff_mv": 150}))
    assert out.memory.similar == []


def test_recheck_for_an_unknown_session_is_a_process_dead_letter(harness: Harness) -> None:
    payload = recheck("r-9", T0, f"{VIN}-20250101T000000")
    result = harness.send(payload)
    assert result.diagnoses == []
    assert len(result.dead_letters) == 1
    letter = result.dead_letters[0]
    assert letter.stage == "process"
    assert letter.raw == json.dumps(payload, ensure_ascii=False)
    assert f"{VIN}-20250101T000000" in letter.error


def test_a_recheck_naming_no_session_verifies_the_vehicles_newest_case(harness: Harness, store: InMemoryStore) -> None:
    # A workshop's system knows the vehicle and when it rechecked it, not this job's session ids: its recheck
    # (no session_id, no type) verifies the vehicle's newest case concluded before it. Until this release it was a
    # dead letter ("session_id: Field required").
    conclude_first_case(harness)
    workshop = {"vin": VIN, "ts": iso(T0 + timedelta(days=2)), "recheck_ok": "PASS", "event_id": "w-1"}
    result = harness.send(workshop)
    assert result.dead_letters == [] and result.diagnoses == []
    rec = store.get(VIN, SID_1)
    assert rec is not None and rec.recheck_ok is True
    after = harness.diagnose(alert("c-1", T0 + timedelta(days=3), vin=VIN_C, signals={"cell_voltage_diff_mv": 150}))
    assert after.memory.similar == [MemoryRef(vin=VIN, session_id=SID_1)]
    # A vehicle with no case in the 90 days before the recheck: a process dead letter that says so.
    for vin, at in ((VIN_B, T0 + timedelta(days=2)), (VIN, T0 + timedelta(days=95))):
        result = harness.send({"vin": vin, "ts": iso(at), "recheck_ok": True, "event_id": f"w-{vin}-{at:%j}"})
        assert [d.stage for d in result.dead_letters] == ["process"], vin
        assert "no valid concluded case in the 90 days before it" in result.dead_letters[0].error


def test_recheck_naming_another_vehicles_session_is_a_dead_letter(harness: Harness, store: InMemoryStore) -> None:
    conclude_first_case(harness)
    result = harness.send(recheck("r-9", T0 + timedelta(days=1), SID_1, vin=VIN_B))
    assert [d.stage for d in result.dead_letters] == ["process"]
    rec = store.get(VIN, SID_1)
    assert rec is not None and rec.recheck_ok is None


def test_scrapped_vehicle_records_are_invalid_and_never_recalled(harness: Harness, store: InMemoryStore) -> None:
    conclude_first_case(harness)
    harness.send(recheck("r-1", T0 + timedelta(days=2), SID_1, ok=True))
    result = harness.send(lifecycle("l-1", T0 + timedelta(days=3)))
    assert result.diagnoses == [] and result.dead_letters == []
    # No session open: the state keeps only when the vehicle left the fleet's care.
    assert result.session is not None and result.session.phase is Phase.CONCLUDED
    assert result.session.left_care_at == T0 + timedelta(days=3)

    history = store.history(VIN)
    assert [r.session_id for r in history] == [SID_1]
    assert all(not r.valid for r in history)

    own = harness.diagnose(alert("e-9", T0 + timedelta(days=4), signals={"cell_voltage_diff_mv": 187}))
    assert own.memory.own == []
    other = harness.diagnose(alert("c-1", T0 + timedelta(days=4), vin=VIN_C, signals={"cell_voltage_diff_mv": 187}))
    assert other.memory.similar == []


def test_an_alert_from_before_a_lifecycle_event_delivered_after_it_is_a_dead_letter_and_writes_no_case(
    harness: Harness, store: InMemoryStore
) -> None:
    conclude_first_case(harness)
    left = T0 + timedelta(days=3)
    harness.send(lifecycle("l-1", left, "transferred"))
    # A vehicle that buffered its alerts offline sends one from before the transfer.
    late = harness.send(alert("e-late", T0 + timedelta(days=2), signals={"cell_voltage_diff_mv": 190}))
    assert late.diagnoses == [] and [d.stage for d in late.dead_letters] == ["process"]
    error = late.dead_letters[0].error
    assert "from before LSVAU2180N2183294 left the fleet's care" in error
    assert "2026-11-04T08:15:30Z" in error and "2026-11-03T08:15:30Z" in error
    assert [(r.session_id, r.valid) for r in store.history(VIN)] == [(SID_1, False)]

    # The next owner's session: diagnosed, writes a valid case, and carries the lifecycle event's time.
    harness.diagnose(alert("n-1", left, signals={"cell_voltage_diff_mv": 87}))
    new_owner = harness.diagnose(alert("n-2", left + timedelta(hours=1), signals={"cell_voltage_diff_mv": 187}))
    assert new_owner.phase is Phase.CONCLUDED and new_owner.memory.own == []
    session = harness.session()
    assert session is not None and session.left_care_at == left and session.opened_at == left
    valid = [r.session_id for r in store.history(VIN) if r.valid]
    assert valid == [session.session_id]

    # Another late alert of the old care, now behind the next owner's session: still not diagnosed, and the
    # session is left as it was; the same event sent again is judged again (a dead letter's id is not kept).
    before = harness.state[VIN][0]
    for _ in range(2):
        again = harness.send(alert("e-late", T0 + timedelta(days=2), signals={"cell_voltage_diff_mv": 190}))
        assert again.diagnoses == [] and [d.stage for d in again.dead_letters] == ["process"]
        assert harness.state[VIN][0] == before
    # The lifecycle event delivered last sets the time, whatever it is: one misdated years ahead holds every
    # later alert back (a dead letter each, kept to be sent again) until the fleet system sends it corrected.
    harness.send(lifecycle("l-2", left + timedelta(days=4 * 365)))
    marker = harness.session()
    assert marker is not None and marker.left_care_at == left + timedelta(days=4 * 365)
    assert marker.session_id == session.session_id
    held = harness.send(alert("n-3", left + timedelta(days=2)))
    assert held.diagnoses == [] and "left the fleet's care" in held.dead_letters[0].error
    harness.send(lifecycle("l-2-corrected", left + timedelta(days=1)))
    assert harness.diagnose(alert("n-3", left + timedelta(days=2))).session_id == sid(left + timedelta(days=2))


def sid(at: datetime) -> str:
    return f"{VIN}-{at:%Y%m%dT%H%M%S}"


def test_an_alert_from_more_than_48_h_before_the_open_session_opened_is_a_session_of_its_own(
    harness: Harness, store: InMemoryStore
) -> None:
    """A vehicle back in coverage sends a live alert, then what it buffered days ago: had they come in order, the
    buffered ones would have been a session of their own; they joined the live one, dated by it. A session of
    one alert gives way to such an alert; one of more holds, and the alert joins it (``session._far_before``)."""
    live = T0 + timedelta(days=5)
    assert harness.diagnose(alert("live-1", live, signals={"cell_voltage_diff_mv": 87})).session_id == sid(live)
    old = T0 + timedelta(days=1)
    buffered = [
        harness.diagnose(alert("old-1", old, signals={"cell_voltage_diff_mv": 87})),
        harness.diagnose(alert("old-2", old + timedelta(hours=1), signals={"cell_voltage_diff_mv": 187})),
    ]
    assert [d.session_id for d in buffered] == [sid(old), sid(old)]  # one session, in order among themselves
    assert buffered[1].phase is Phase.CONCLUDED
    [case] = store.history(VIN)
    assert case.session_id == sid(old) and case.concluded_at == old + timedelta(hours=1)
    # The next live alert: more than 48 h after the buffered session's last event, a session of its own again.
    after = harness.diagnose(alert("live-2", live + timedelta(hours=1), signals={"cell_voltage_diff_mv": 87}))
    assert after.session_id == sid(live + timedelta(hours=1))
    # A late alert within 48 h before the session opened still joins it (one that was buffered for hours).
    near = harness.diagnose(alert("near", live + timedelta(hours=1) - timedelta(hours=47)))
    assert near.session_id == after.session_id
    # A session of two alerts or more holds: an alert from a clock reset to 2000 is the stray one, and joins it.
    reset = harness.diagnose(alert("rtc-reset", datetime(2000, 1, 1, tzinfo=UTC)))
    then = harness.diagnose(alert("live-3", live + timedelta(hours=2)))
    assert reset.session_id == then.session_id == after.session_id
    session = harness.session()
    assert session is not None and session.alerts == 4 and session.opened_at == live + timedelta(hours=1)


def test_one_alert_dated_years_ahead_does_not_take_the_vehicles_later_alerts_with_it(harness: Harness) -> None:
    """A telematics unit whose clock jumped once (no GNSS time yet): its session, dated 2030, took every later
    alert of the vehicle, dated right, as a late one, and never ended."""
    ahead = harness.diagnose(alert("bad-clock", T0 + timedelta(days=4 * 365), signals={"cell_voltage_diff_mv": 87}))
    right = [
        harness.diagnose(alert(f"e-{i}", T0 + timedelta(hours=i), signals={"cell_voltage_diff_mv": 87}))
        for i in range(3)
    ]
    assert ahead.session_id != right[0].session_id
    assert {d.session_id for d in right} == {sid(T0)}
    session = harness.session()
    assert session is not None and session.alerts == 3 and session.opened_at == T0


def test_every_diagnosis_keeps_injected_memory_within_800_tokens(harness: Harness) -> None:
    # Ten verified cases of other vehicles plus the vehicle's own history.
    for i in range(10):
        vin = f"LSVAU2180N21{i:05d}"
        harness.diagnose(alert(f"{i}-1", T0, vin=vin, signals={"cell_voltage_diff_mv": 87}))
        harness.diagnose(alert(f"{i}-2", T0 + timedelta(hours=1), vin=vin, signals={"cell_voltage_diff_mv": 187}))
        harness.send(recheck(f"{i}-r", T0 + timedelta(days=1), f"{vin}-20261101T081530", vin=vin))
    assert harness.dead_letters == []
    out = harness.diagnose(alert("x-1", T0 + timedelta(days=2), signals={"cell_voltage_diff_mv": 187}))
    assert 0 < out.memory.tokens <= 800
    assert 1 <= len(out.memory.similar) <= 5
    assert all(ref.vin != VIN for ref in out.memory.similar)
    assert all(d.memory.tokens <= 800 for d in harness.diagnoses)


def test_restore_from_a_checkpoint_and_replay_neither_loses_nor_duplicates(
    harness: Harness, store: InMemoryStore, pack: KnowledgePack
) -> None:
    harness.diagnose(alert("e-1", T0, signals={"cell_voltage_diff_mv": 87}))
    checkpoint = dict(harness.state)  # snapshots are immutable JSON strings
    concluded = harness.diagnose(alert("e-2", T0 + timedelta(hours=2), signals={"cell_voltage_diff_mv": 187}))
    written = store.get(VIN, SID_1)

    # The job fails after e-2 reached L3; a new engine restores the checkpoint
    # taken after e-1 and the source replays e-2.
    restored = Harness(
        DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=pack), state=checkpoint
    )
    replayed = restored.diagnose(alert("e-2", T0 + timedelta(hours=2), signals={"cell_voltage_diff_mv": 187}))

    assert replayed.phase is Phase.CONCLUDED
    # The same output, again (downstream dedups on event_id); only the run's timings differ.
    timings = {"latency_ms", "model_latency_ms"}
    assert replayed.model_dump(exclude=timings) == concluded.model_dump(exclude=timings)
    assert store.count() == 1  # the upsert by (vin, session_id) is idempotent
    again = store.get(VIN, SID_1)
    assert again is not None and written is not None
    assert again.model_dump(exclude={"updated_at"}) == written.model_dump(exclude={"updated_at"})


# -- per-run numbers for the operator's metrics -----------------------------------------


class RefusingStore(InMemoryStore):
    """Long-term memory that takes reads but refuses every write."""

    def upsert(self, record: Any) -> None:
        raise StoreError("disk full")

    def upsert_many(self, records: Any) -> None:
        raise StoreError("disk full")


def test_run_stats_report_recall_and_long_term_writes(harness: Harness) -> None:
    opened = harness.send(alert("e-1", T0, signals={"cell_voltage_diff_mv": 87}))
    # Opening a session recalls (nothing yet); an investigating alert writes nothing.
    assert opened.stats.recall_ms is not None and opened.stats.recall_ms >= 0
    assert (opened.stats.recalled_own, opened.stats.recalled_similar) == (0, 0)
    assert opened.stats.write_ms is None and opened.stats.embed_ms is None and not opened.stats.write_failed
    concluded = harness.send(alert("e-2", T0 + timedelta(hours=2), signals={"cell_voltage_diff_mv": 187}))
    # Same session: no recall; the conclusion is written once.
    assert concluded.stats.recall_ms is None
    assert concluded.stats.write_ms is not None and not concluded.stats.write_failed
    assert concluded.stats.embed_ms is not None and concluded.stats.embed_ms > 0
    again = harness.send(alert("e-3", T0 + timedelta(days=3), signals={"cell_voltage_diff_mv": 187}))
    assert (again.stats.recalled_own, again.stats.recalled_similar) == (1, 0)  # the case of e-2
    assert harness.send(recheck("r-1", T0 + timedelta(days=4), SID_1)).stats.recall_ms is None


def test_run_stats_report_a_failed_write(pack: KnowledgePack) -> None:
    h = Harness(DiagnosisEngine(store=RefusingStore(), model=OfflineModel(), embedder=HashingEmbedder(), pack=pack))
    h.send(alert("e-1", T0, signals={"cell_voltage_diff_mv": 87}))
    concluded = h.send(alert("e-2", T0 + timedelta(hours=2), signals={"cell_voltage_diff_mv": 187}))
    assert "l3_write_failed" in concluded.diagnoses[0].flags
    assert concluded.stats.write_failed and concluded.stats.write_ms is not None


def test_a_conclusion_written_at_once_is_summarised_as_a_case_without_folding_its_rounds_first(
    store: InMemoryStore, pack: KnowledgePack
) -> None:
    kinds: list[str] = []

    class Counting(OfflineSummarizer):
        def summarize(self, request: SummaryRequest, feedback: str = "") -> str:
            kinds.append(request.kind)
            return super().summarize(request, feedback)

    h = Harness(
        DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=pack, summarizer=Counting())
    )
    conclude_first_case(h)
    # One summary, the case's: a fold of the concluding stage's rounds (a summary model's call) would be
    # replaced by the case summary in the same event, so it is not made.
    assert kinds == ["case"]
    session = h.session()
    assert session is not None and store.count() == 1
    working = session.working
    assert (working.stage_folds, working.session_folds, working.rounds) == (0, 1, [])
    assert working.summary_lines == store.get(VIN, SID_1).summary.splitlines()  # type: ignore[union-attr]
