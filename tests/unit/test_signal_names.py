"""Signal names that start with digits, as fleets name their low-voltage rails (``12v_battery_v``).

Before, such an alert was a dead letter. Accepting it at the door was not enough: the key-fact reader, the
fidelity check and the readings parser took the name's start for a number, so a faithful "11.2 V" of
``12v_battery_v=11.2`` was an invented reading and a note's ``12v_battery_v = 11.2`` no fact.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from tests.unit.test_engine import T0, VIN, Harness, alert, recheck
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.knowledge import KnowledgePack, load_pack
from vdoctor.knowledge.pack import ConfirmRule
from vdoctor.lines import FactKind, ReadingSpan
from vdoctor.memory.facts import extract_text_facts
from vdoctor.memory.fidelity import check_summary
from vdoctor.models.offline import OfflineModel
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

RAIL = "12v_battery_v"


@pytest.fixture
def pack() -> KnowledgePack:
    """Our pack, with B1318 confirmed by the 12 V rail's own name (as a fleet's code table may write it)."""
    pack = load_pack()
    rule = ConfirmRule(signal=RAIL, op="<=", threshold=11.5)
    pack.entries["B1318"] = dataclasses.replace(pack.entries["B1318"], confirm=rule)
    return pack


def test_a_rail_named_by_its_voltage_is_diagnosed_kept_as_a_key_fact_and_stored(pack: KnowledgePack) -> None:
    store = InMemoryStore()
    h = Harness(DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=pack))
    signals = {RAIL: 11.2, "48v_bus_v": 47.1, "2nd_row_temp_c": 24.5}
    out = h.diagnose(alert("a1", T0, codes=["B1318"], signals=signals, text="12V battery low"))
    assert out.phase == "CONCLUDED"
    assert f"signal://{VIN}/{RAIL}@2026-11-01T08:15:30Z" in out.evidence  # the rule read the rail's reading
    assert not [f for f in out.flags if "fidelity" in f or "omitted" in f], out.flags
    session = h.session()
    assert session is not None
    facts = [f.render() for f in session.working.key_facts]
    for name, value in (("12v_battery_v", "11.2"), ("48v_bus_v", "47.1"), ("2nd_row_temp_c", "24.5")):
        assert f"reading {name}={value} @2026-11-01T08:15:30Z" in facts
    [record] = store.history(VIN)
    assert f"{RAIL}=11.2" in record.summary and "confirmed 12v_battery_v=11.2<=11.5" in record.summary
    # A later session of the vehicle recalls the case with the reading whole.
    h.send(recheck("r1", T0 + timedelta(hours=2), out.session_id))
    later = h.diagnose(alert("a2", T0 + timedelta(days=3), codes=["B1318"], signals={RAIL: 11.0}))
    assert [ref.session_id for ref in later.memory.own] == [out.session_id]


SOURCE = (
    f"2026-11-01 08:15 | alert B1318 {RAIL}=11.2→10.9 | investigating | dtc://B1318\n"
    f"reading {RAIL}=11.2 @2026-11-01T08:15:30Z"
)


@pytest.mark.parametrize(
    "summary",
    [f"B1318: {RAIL} 11.2 V", f"B1318: {RAIL}=11.2→10.9", f"B1318: the 12 V battery at 10.9 V ({RAIL})"],
)
def test_the_fidelity_check_reads_the_rails_readings_with_their_unit(summary: str) -> None:
    report = check_summary(summary, ["B1318"], SOURCE)
    assert report.ok, report.describe()


@pytest.mark.parametrize(
    ("summary", "invented"),
    [(f"B1318: {RAIL} 13.2 V", "13.2"), (f"B1318: {RAIL} 11.2 mV", "reading 11.2 mV"), ("B1318: 48v_bus_v=11.2", "48")],
)
def test_a_reading_the_source_lacks_is_still_invented(summary: str, invented: str) -> None:
    report = check_summary(summary, ["B1318"], SOURCE)
    assert not report.ok and invented in report.invented, report.describe()


def test_a_note_that_names_a_rail_gives_its_reading_as_a_fact() -> None:
    facts = extract_text_facts("复检: 12v_battery_v = 12.6, 48v_bus_v: 47")
    assert [(f.kind, f.text) for f in facts] == [
        (FactKind.READING, "12v_battery_v=12.6"),
        (FactKind.READING, "48v_bus_v=47"),
    ]


def test_readings_lines_and_rules_read_the_whole_name() -> None:
    [span] = ReadingSpan.find_all(f"{RAIL}=11.2→10.9↓10.9 48_=1 2026_11=3")
    assert (span.name, span.first, span.latest) == (RAIL, "11.2", "10.9")
    assert ConfirmRule.parse(f"{RAIL}<=11.5") == ConfirmRule(signal=RAIL, op="<=", threshold=11.5)


def test_a_voltage_rating_is_no_reading() -> None:
    # Before, the pack's own root cause of B1318 ("12 V battery is discharged ...") gave every such session
    # a key fact "reading 12V": no reading of the vehicle.
    texts = {
        "12 V battery is discharged by a parasitic drain": [],
        "the 48V system sags to 44.1 V": ["44.1V"],
        "pack at 750 V on an 800V platform, 12V蓄电池亏电": ["750V"],
        "battery voltage 11.6 V, 13.2V电压正常": ["11.6V", "13.2V"],
        "a 50 A supply": ["50A"],
    }
    for text, readings in texts.items():
        assert [f.text for f in extract_text_facts(text) if f.kind is FactKind.READING] == readings, text
