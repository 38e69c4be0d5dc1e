"""J1939 trouble codes (SPN/FMI, as trucks and buses send them) through the whole diagnosis: read from the
event, kept as key facts, looked up, summarised and checked, stored, recalled for a similar vehicle."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest

from tests.unit.test_engine import T0, VIN, VIN_B, Harness, alert, recheck
from vdoctor.agent.tools import TOOLS, ToolContext
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.events import canonical_codes
from vdoctor.knowledge import KnowledgePack, load_pack
from vdoctor.knowledge.chunks import codes_in
from vdoctor.lines import RecallEntry
from vdoctor.memory.check import check_stored
from vdoctor.memory.fidelity import check_summary
from vdoctor.memory.request import SummaryRequest
from vdoctor.memory.summarizer import OfflineSummarizer
from vdoctor.models.offline import OfflineModel
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

CODE = "SPN1569-FMI31"


@pytest.fixture
def pack() -> KnowledgePack:
    """Our pack, with a J1939 code that the cell-voltage rule confirms (as a fleet's own table would add)."""
    pack = load_pack()
    pack.entries[CODE] = dataclasses.replace(pack.entries["P0A7F"], code=CODE, source="test")
    return pack


def test_a_j1939_fault_is_diagnosed_stored_and_recalled_for_a_similar_vehicle(pack: KnowledgePack) -> None:
    store = InMemoryStore()
    h = Harness(DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=pack))
    signals = {"cell_voltage_diff_mv": 187}
    first = h.diagnose(alert("a1", T0, codes=["SPN 1569 FMI 31"], signals=signals))
    assert first.phase == "CONCLUDED" and f"dtc://{CODE}" in first.evidence
    [record] = store.history(VIN)
    assert record.dtc_codes == [CODE] and CODE in record.summary  # the fidelity check passed: it was written
    assert not [f for f in first.flags if "fidelity" in f or "omitted" in f]
    h.send(recheck("r1", T0 + timedelta(hours=2), first.session_id))
    # Another vehicle of the series with the same fault recalls the verified case by its code.
    second = h.diagnose(alert("b1", T0 + timedelta(days=1), codes=["spn1569/fmi31"], signals=signals, vin=VIN_B))
    assert [ref.session_id for ref in second.memory.similar] == [first.session_id]
    assert second.phase == "CONCLUDED" and f"case://{VIN}/{first.session_id}" in second.evidence
    # `vdoctor memory check-summary` reads the code in a gateway's form as the write path does.
    _, report = check_stored(store, VIN, first.session_id, record.summary.replace(CODE, "SPN 1569 FMI 31"))
    assert report.ok, report.describe()


def test_a_j1939_code_is_a_key_fact_and_the_summary_check_holds_it(pack: KnowledgePack) -> None:
    h = Harness(DiagnosisEngine(store=InMemoryStore(), model=OfflineModel(), embedder=HashingEmbedder(), pack=pack))
    h.diagnose(alert("a1", T0, codes=["SPN520210 FMI3"], signals={"sig_mv": 1}))
    session = h.session()
    assert session is not None
    assert "code SPN520210-FMI3" in [f.render().split(":")[0] for f in session.working.key_facts]
    source = f"2026-11-01 08:15 | alert {CODE} cell_voltage_diff_mv=187 | investigating | dtc://{CODE}"
    good = f"2026-11-01 08:15 | alert {CODE} cell_voltage_diff_mv=187 | investigating | dtc://{CODE}"
    assert check_summary(good, [CODE], source).ok
    assert check_summary(good.replace(CODE, "P0A7F"), [CODE], source).missing == [CODE]
    assert "SPN9-FMI1" in check_summary(good + " SPN9-FMI1", [CODE], source).invented


def test_recall_entries_and_knowledge_queries_read_j1939_codes() -> None:
    text = (
        f"- [similar] case://{VIN}/{VIN}-20261101T081530 | concluded 2026-11-01 | codes {CODE},P0A7F | P2 | "
        "recheck ok\n  cause: cell imbalance\n  fix: balance the pack\n  summary: s"
    )
    [entry] = RecallEntry.parse_block(text)
    assert list(entry.codes) == [CODE, "P0A7F"]
    assert codes_in(f"what is {CODE.lower()}, and P0A7F?") == {CODE, "P0A7F"}


def test_a_code_table_may_define_j1939_codes(tmp_path: Path) -> None:
    table = tmp_path / "codes.csv"
    table.write_text("code,description\nSPN 3226 FMI 2,Outlet NOx sensor erratic\nSPN 1569,no FMI: skipped\n")
    pack = load_pack(extra_csv=table)
    assert pack.entries["SPN3226-FMI2"].definition_en == "Outlet NOx sensor erratic"
    assert not [c for c, e in pack.entries.items() if e.source != "pack" and c != "SPN3226-FMI2"]
    # The pack's own entries win over a table's, as for OBD codes.
    table.write_text("code,description\nSPN 1569 FMI 31,Engine fuel derate\n")
    assert load_pack(extra_csv=table).entries[CODE].definition_en == "Engine protection torque derate active"


def test_a_j1939_code_the_pack_does_not_hold_is_defined_by_its_spn_and_fmi() -> None:
    """Before, a J1939 code without a pack entry or a table's was unknown: no definition in its key fact, the
    lookup, the summary's source or the recall query. Its SPN and FMI say what it is."""
    pack = load_pack()
    nox = pack.get("spn3226-fmi2")
    assert nox is not None and not nox.actionable and nox.source == "pack:j1939" and nox.family == "emission"
    assert nox.definition_en == "Aftertreatment 1 outlet NOx: data erratic, intermittent or incorrect"
    assert nox.definition_zh == "后处理1出口NOx：数据异常、间歇或错误"
    own = pack.get("SPN520210-FMI3")
    assert own is not None and own.definition_en.startswith("Manufacturer's own SPN 520210: voltage above normal")
    unnamed = pack.get("SPN9-FMI31")
    assert unnamed is not None and unnamed.definition_en == "SPN 9: condition exists"
    assert pack.get("SPN9-FMI25").definition_en == "SPN 9: FMI 25 (reserved)"  # type: ignore[union-attr]
    # An OBD code the pack lacks stays unknown, and a pack entry is the pack's, in any written form of its code.
    assert pack.get("P1234") is None
    for written in ("SPN100-FMI1", "spn100-fmi1", "SPN0100-FMI01"):
        assert pack.get(written) is pack.entries["SPN100-FMI1"]
    # No J1939 code: an SPN past 524287 or an FMI past 31.
    assert pack.get("SPN600000-FMI1") is None and pack.get("SPN9-FMI32") is None and pack.get("SPN-FMI") is None
    assert "SPN3226-FMI2" not in pack.entries  # made definitions are not entries


def test_a_lookup_of_a_full_scan_names_j1939_codes_without_entries_apart(pack: KnowledgePack) -> None:
    """A truck's full scan: 14 of its manufacturer's own codes, then the one the pack concludes on. As entries,
    the made definitions took the lookup's 8 places and the last code was never looked up: the session did
    not conclude (found by a diff review). They are codes the pack lacks, with their meanings beside them."""
    codes = [f"SPN{520200 + i}-FMI9" for i in range(14)]
    lookup = next(tool for tool in TOOLS if tool.spec.name == "lookup_dtc")
    result = lookup.run(ToolContext(pack=pack, session=None), {"codes": [*codes, CODE]})  # type: ignore[arg-type]
    assert [entry["code"] for entry in result["codes"]] == [CODE] and result["unknown"] == codes
    assert len(result["meanings"]) == 8 and result["meanings"][codes[0]].startswith("Manufacturer's own SPN 520200")
    assert "not_looked_up" not in result
    # A code as the model wrote it is named so under "unknown", and its meaning by the code's one form, as its
    # key fact names it (a second code fact, "spn03226-fmi02", never gives way).
    written = lookup.run(ToolContext(pack=pack, session=None), {"codes": ["spn03226-fmi02", "SPN 1 FMI 2"]})  # type: ignore[arg-type]
    assert written["unknown"] == ["spn03226-fmi02", "SPN 1 FMI 2"]
    assert sorted(written["meanings"]) == ["SPN1-FMI2", "SPN3226-FMI2"]
    h = Harness(DiagnosisEngine(store=InMemoryStore(), model=OfflineModel(), embedder=HashingEmbedder(), pack=pack))
    out = h.diagnose(alert("a1", T0, codes=[*codes, CODE], signals={"cell_voltage_diff_mv": 187}))
    assert out.phase == "CONCLUDED" and f"dtc://{CODE}" in out.evidence


def test_the_pack_concludes_common_j1939_faults_by_their_readings() -> None:
    """A truck's low oil pressure (SPN 100, FMI 1) concludes on a reading under the pack's limit, as an OBD
    code's rule does; above it the session investigates."""
    pack = load_pack()
    h = Harness(DiagnosisEngine(store=InMemoryStore(), model=OfflineModel(), embedder=HashingEmbedder(), pack=pack))
    truck = {"series": "HD-T", "text": "机油压力低报警", "codes": ["SPN 100 FMI 1"]}
    low = h.diagnose(alert("t1", T0, signals={"engine_oil_pressure_kpa": 55}, **truck))  # type: ignore[arg-type]
    assert low.phase == "CONCLUDED" and low.priority == "P1" and "oil pump" in (low.root_cause or "")
    assert "dtc://SPN100-FMI1" in low.evidence
    fine = h.diagnose(alert("t2", T0, signals={"engine_oil_pressure_kpa": 240}, vin=VIN_B, **truck))  # type: ignore[arg-type]
    assert fine.phase == "INVESTIGATING"
    assert pack.get("SPN100-FMI1").confirm.describe() == "engine_oil_pressure_kpa<=70"  # type: ignore[union-attr]


class _GatewayWording(OfflineSummarizer):
    """A summary model that writes J1939 codes as a gateway does (``SPN 1569 FMI 31``)."""

    def summarize(self, request: SummaryRequest, feedback: str = "") -> str:
        return super().summarize(request, feedback).replace(CODE, "SPN 1569 FMI 31")


def test_a_summary_that_writes_a_j1939_code_as_a_gateway_does_passes_and_is_stored_in_one_form(
    pack: KnowledgePack,
) -> None:
    # Before, the code written "SPN 1569 FMI 31" was no code to the check: the case summary failed as missing
    # it, and was repaired with a fact line or rewritten.
    store = InMemoryStore()
    engine = DiagnosisEngine(
        store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=pack, summarizer=_GatewayWording()
    )
    out = Harness(engine).diagnose(alert("a1", T0, codes=[CODE], signals={"cell_voltage_diff_mv": 187}))
    assert out.phase == "CONCLUDED"
    assert not [f for f in out.flags if "fidelity" in f], out.flags
    [record] = store.history(VIN)
    assert CODE in record.summary and "SPN 1569" not in record.summary and "fact |" not in record.summary
    assert engine.summary_metrics.passed_first == engine.summary_metrics.checked


def test_j1939_codes_in_free_text_are_written_in_one_form_only_when_in_range() -> None:
    assert canonical_codes("SPN 1569 FMI 31, then spn:190/fmi:2") == "SPN1569-FMI31, then SPN190-FMI2"
    assert (
        canonical_codes("SPN 524288 FMI 1; SPN 1 FMI 32; XSPN 1 FMI 2")
        == "SPN 524288 FMI 1; SPN 1 FMI 32; XSPN 1 FMI 2"
    )
    # The check reads a source's code in any form: a summary may state the code the alert's text wrote.
    source = "2026-11-01 08:15 | alert: fuel derate (SPN 1569 FMI 31) | investigating | -"
    assert check_summary(canonical_codes("fuel derate SPN 1569 FMI 31"), [], source).ok
