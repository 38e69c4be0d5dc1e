"""A diagnosis's evidence keeps only the addresses its session can vouch for (``vdoctor.agent.evidence``).

The model's answer is text it wrote: an address it made up, another vehicle's case it was never shown, or
free text must not reach the output, the session's timeline or the case summary in long-term memory.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.unit.test_engine import SID_1, T0, VIN, VIN_B, Harness, alert, conclude_first_case, iso, recheck
from vdoctor.agent.evidence import EVIDENCE_DROPPED, MAX_EVIDENCE, check_evidence
from vdoctor.diagnosis import DiagnosisEngine, signal_uri
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.knowledge import KnowledgePack, load_pack
from vdoctor.memory.session import MAX_READINGS, Reading, SessionState
from vdoctor.models.base import ChatResponse, Message, ToolSpec
from vdoctor.models.offline import OfflineModel
from vdoctor.records import MemoryRef, MemoryUse, Phase
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

SID_B = f"{VIN_B}-20261001T071005"
OWN = f"{VIN}-20261001T071005"
SIMILAR = f"{VIN_B}-20260901T071005"


@pytest.fixture(scope="module")
def pack() -> KnowledgePack:
    return load_pack()


def session(**fields: object) -> SessionState:
    base: dict[str, object] = dict(vin=VIN, series="EV-A", session_id=SID_1, opened_at=T0, last_event_at=T0,
                                   codes={"P0A7F": 1, "SPN1569-FMI31": 1})  # fmt: skip
    return SessionState.model_validate(base | fields)


def reading(name: str, value: float, hours: int = 0) -> Reading:
    at = T0 + timedelta(hours=hours)
    return Reading(name=name, value=value, ts=at, uri=signal_uri(VIN, name, iso(at)))


def test_the_sessions_codes_readings_and_recalled_cases_are_kept_and_nothing_else() -> None:
    observed = reading("cell_voltage_diff_mv", 187)
    s = session(
        readings=[observed],
        memory=MemoryUse(own=[MemoryRef(vin=VIN, session_id=OWN)], similar=[MemoryRef(vin=VIN_B, session_id=SIMILAR)]),
    )
    kept = [
        "dtc://P0A7F",
        "dtc://SPN1569-FMI31",
        observed.uri,
        f"case://{VIN}/{OWN}",
        f"case://{VIN_B}/{SIMILAR}",
    ]
    refused = [
        "dtc://P0300",  # a code no alert of the session sent
        f"signal://{VIN}/pack_temp_c@2030-01-01T00:00:00Z",  # a reading never observed
        f"signal://{VIN}/cell_voltage_diff_mv@{iso(T0 + timedelta(hours=1))}",  # an observed signal, another time
        f"signal://{VIN_B}/cell_voltage_diff_mv@{iso(T0)}",  # another vehicle's reading
        f"case://{VIN_B}/{SID_B}",  # another vehicle's case, never recalled
        f"case://{VIN}/{SID_1}",  # this session itself: no case yet
        "see the workshop manual p.12",
        "kb://P0A7F",
        "x" * 2000,
    ]
    checked = check_evidence([refused[0], *kept[:2], *refused[1:], *kept[2:]], s)
    assert checked.kept == kept and checked.dropped == len(refused)


def test_a_code_in_another_case_is_kept_as_the_session_writes_it_and_duplicates_go_unflagged() -> None:
    checked = check_evidence(["dtc://p0a7f", " dtc://P0A7F ", "dtc://P0A7F"], session())
    assert checked.kept == ["dtc://P0A7F"] and checked.dropped == 0


def test_evidence_past_its_bound_is_dropped_and_counted() -> None:
    codes = {f"P{n:04d}": 1 for n in range(MAX_EVIDENCE + 4)}
    checked = check_evidence([f"dtc://{code}" for code in codes], session(codes=codes))
    assert checked.kept == [f"dtc://{code}" for code in list(codes)[:MAX_EVIDENCE]] and checked.dropped == 4


def test_a_reading_the_session_may_have_let_go_is_kept_when_its_signal_and_time_are_the_sessions() -> None:
    # MAX_READINGS readings kept, one an hour from T0+1h: the reading at T0 may be one the session let go.
    kept = [reading("cell_voltage_diff_mv", 100 + i, hours=1 + i) for i in range(MAX_READINGS)]
    last = T0 + timedelta(hours=MAX_READINGS)
    span = {"cell_voltage_diff_mv": {"first": 99, "latest": 355, "lowest": 99, "highest": 355}}
    s = session(readings=kept, signals=span, last_event_at=last)
    at_t0 = f"signal://{VIN}/cell_voltage_diff_mv@{iso(T0)}"
    refused = [
        f"signal://{VIN}/cell_voltage_diff_mv@{iso(T0 - timedelta(hours=1))}",  # before the session opened
        f"signal://{VIN}/cell_voltage_diff_mv@{iso(last + timedelta(hours=1))}",  # after its last event
        f"signal://{VIN}/pack_temp_c@{iso(T0)}",  # a signal the session does not track
        f"signal://{VIN_B}/cell_voltage_diff_mv@{iso(T0)}",  # another vehicle
        f"signal://{VIN}/cell_voltage_diff_mv@noon",
        f"signal://{VIN}/cell_voltage_diff_mv@2026-11-01T08:15:30",  # a time without its zone
    ]
    checked = check_evidence([at_t0, *refused], s)
    assert checked.kept == [at_t0] and checked.dropped == len(refused)
    # A session that let no reading go holds every one it observed: the same address is refused there.
    assert check_evidence([at_t0], session(readings=kept[:3], signals=span, last_event_at=last)).kept == []


class Scripted:
    """A model that answers at once with a conclusion citing ``evidence``."""

    name = "scripted"

    def __init__(self, evidence: list[str]) -> None:
        self.evidence = evidence

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        answer = {"phase": "CONCLUDED", "root_cause": "weak cell", "fix_action": "replace module",
                  "priority": "P2", "confidence": 0.9, "codes": ["P0A7F"], "evidence": self.evidence}  # fmt: skip
        return ChatResponse(content=json.dumps(answer))

    def close(self) -> None:
        """Nothing to release."""


def test_a_diagnosis_keeps_the_evidence_its_session_vouches_for_and_is_flagged_for_the_rest(
    pack: KnowledgePack,
) -> None:
    """The audit's answer: another vehicle's case never recalled, free text, a reading never observed."""
    store = InMemoryStore()
    engine = DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=pack)
    h = Harness(engine)
    conclude_first_case(h)
    h.send(recheck("r-1", T0 + timedelta(days=2), SID_1))
    at = T0 + timedelta(days=3)
    observed = f"signal://{VIN}/cell_voltage_diff_mv@{iso(at)}"
    engine.model = Scripted(
        [
            f"case://{VIN_B}/{SID_B}",
            "see the workshop manual p.12",
            f"signal://{VIN}/pack_temp_c@2030-01-01T00:00:00Z",
            "dtc://p0a7f",
            observed,
            f"case://{VIN}/{SID_1}",  # recalled: the vehicle's own verified case
            *["x" * 2000] * 50,
        ]
    )
    d = h.diagnose(alert("e-3", at, signals={"cell_voltage_diff_mv": 187}))
    assert d.phase is Phase.CONCLUDED and d.memory.own == [MemoryRef(vin=VIN, session_id=SID_1)]
    assert d.evidence == ["dtc://P0A7F", observed, f"case://{VIN}/{SID_1}"]
    assert EVIDENCE_DROPPED in d.flags
    # The timeline's address (what the stored case summary shows) and the conclusion hold the same.
    s = h.session()
    assert s is not None and s.conclusion is not None
    assert s.timeline[-1].evidence == "dtc://P0A7F" and s.conclusion.evidence == d.evidence
    facts = repr(s.working.key_facts)
    assert SID_B not in facts and "workshop" not in facts and "pack_temp_c" not in facts


def test_the_offline_models_evidence_passes_unflagged(harness_offline: Harness) -> None:
    first, second = conclude_first_case(harness_offline)
    harness_offline.send(recheck("r-1", T0 + timedelta(days=2), SID_1))
    again = harness_offline.diagnose(alert("e-3", T0 + timedelta(days=3), signals={"cell_voltage_diff_mv": 187}))
    assert f"case://{VIN}/{SID_1}" in again.evidence
    assert all(EVIDENCE_DROPPED not in d.flags for d in (first, second, again))


@pytest.fixture
def harness_offline(pack: KnowledgePack) -> Harness:
    return Harness(DiagnosisEngine(store=InMemoryStore(), model=OfflineModel(), embedder=HashingEmbedder(), pack=pack))
