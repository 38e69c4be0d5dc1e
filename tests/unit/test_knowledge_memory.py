"""Knowledge memory: chunking, metadata filters, two-stage search, and the agent's tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA
from vdoctor.agent.prompt import build_window
from vdoctor.agent.react import run_react
from vdoctor.agent.tools import Toolbox
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.events import parse_event, session_id_for
from vdoctor.knowledge import load_pack
from vdoctor.knowledge.chunks import CHUNK_MAX_TOKENS, KnowledgeRow, chunk_rows, rows_from_csv, rows_from_pack
from vdoctor.knowledge.search import KnowledgeBase
from vdoctor.knowledge.stores import open_knowledge_store
from vdoctor.memory.session import Reading, SessionState
from vdoctor.memory.working import WorkingMemory
from vdoctor.models.offline import OfflineModel
from vdoctor.tokens import EstimatingCounter

pytestmark = pytest.mark.unit

DTC_CSV = SHARED_DATA / "dtc" / "dtc_codes.csv"


def _rows(n: int, prefix: str = "P0A", scope: str = "dtc:generic") -> list[KnowledgeRow]:
    # Each row: "P0A" "0" "A" "00" -> P,0,A,00 = 4 tokens, ":" 1, 20 four-letter words 20: 25 + 1 separator.
    return [KnowledgeRow(f"{prefix}{i:02X}", f"{prefix}{i:02X}: " + " ".join(["word"] * 20), scope) for i in range(n)]


def test_chunks_stay_within_budget_cut_at_row_boundaries_and_keep_scopes_apart() -> None:
    rows = _rows(40) + _rows(3, prefix="P0B", scope="dtc:FORD")
    chunks = chunk_rows(rows, version="v1")
    counter = EstimatingCounter()
    assert all(counter.count(c.text) <= CHUNK_MAX_TOKENS for c in chunks)
    assert {c.scope for c in chunks} == {"dtc:generic", "dtc:FORD"}
    assert all(len({r.split(":")[0][:1] for r in c.text.splitlines()}) == 1 for c in chunks)
    # every row lands in exactly one chunk, whole
    lines = [line for c in chunks for line in c.text.splitlines()]
    assert sorted(lines) == sorted(r.text for r in rows)
    generic = [c for c in chunks if c.scope == "dtc:generic"]
    # 26 tokens a row: 15 rows (390) fill a 400-token chunk; 40 rows -> 15 + 15 + 10
    assert [len(c.codes) for c in generic] == [15, 15, 10]
    assert generic[0].chunk_id == "dtc:generic/v1/P0A00-P0A0E"


def test_search_filters_on_scope_and_version_before_ranking(tmp_path: Path) -> None:
    base = KnowledgeBase(open_knowledge_store(f"sqlite:///{tmp_path}/k.db"), HashingEmbedder())
    base.load([KnowledgeRow("P0A7F", "P0A7F: Hybrid battery pack deterioration", "dtc:generic")], "2025Q2")
    base.load([KnowledgeRow("P0A7F", "P0A7F: Battery module imbalance (maker text)", "dtc:AUDI")], "2025Q2")
    base.load([KnowledgeRow("P0A7F", "P0A7F: Old wording of the battery rule", "dtc:generic")], "2024Q4")
    hits = base.search("P0A7F battery", scope="dtc:generic", version="2025Q2")
    assert [h.chunk.text for h in hits] == ["P0A7F: Hybrid battery pack deterioration"]
    assert {h.chunk.scope for h in base.search("P0A7F battery")} == {"dtc:generic", "dtc:AUDI"}
    assert base.search("P0A7F", scope="rules") == []


def test_rerank_puts_the_chunk_naming_the_code_first() -> None:
    base = KnowledgeBase(open_knowledge_store("memory://"), HashingEmbedder())
    rows = [
        KnowledgeRow(f"P03{i:02d}", f"P03{i:02d}: Cylinder {i} misfire detected", "dtc:generic") for i in range(1, 9)
    ]
    rows.append(KnowledgeRow("C0035", "C0035: Left front wheel speed sensor circuit", "dtc:generic"))
    base.load(rows, "v1")
    top = base.search("C0035 wheel speed")[0]
    assert "C0035" in top.chunk.codes


def test_pack_rules_load_as_chunks_with_cause_fix_and_evidence() -> None:
    chunks = chunk_rows(rows_from_pack(load_pack()), version="pack")
    text = "\n".join(c.text for c in chunks)
    assert "P0A7F:" in text and "confirmed by cell_voltage_diff_mv>=" in text
    assert all(c.scope == "rules" for c in chunks)


def test_whole_shared_dtc_table_loads_and_is_searchable(tmp_path: Path) -> None:
    if not DTC_CSV.is_file():
        pytest.fail(f"the DTC table is expected beside the checkout at {DTC_CSV}")
    rows = list(rows_from_csv(DTC_CSV))
    assert len(rows) == 18805  # every row of the table has a valid code and a description
    base = KnowledgeBase(open_knowledge_store(f"sqlite:///{tmp_path}/k.db"), HashingEmbedder())
    written = base.load(rows, "2026.02")
    assert written == base.store.count() > 18805 // 60  # about 15 codes per chunk at most 400 tokens
    generic = [r.code for r in rows if r.scope == "dtc:generic"]
    for code in generic[:: len(generic) // 50]:  # a code is found exactly, whatever the vector says
        assert code in base.search(code, scope="dtc:generic")[0].chunk.codes
    top = base.search("P0420", scope="dtc:generic")[0]
    assert any(
        line.startswith("P0420: Catalyst System Efficiency Below Threshold") for line in top.chunk.text.splitlines()
    )


def _session_with(alert_line: str) -> tuple[SessionState, object]:
    alert = parse_event(alert_line)
    session = SessionState(
        vin=alert.vin,
        series=alert.series,
        session_id=session_id_for(alert.vin, alert.ts),
        opened_at=alert.ts,
        last_event_at=alert.ts,
        alerts=1,
        codes={c: 1 for c in alert.dtc_codes},
    )
    for name, value in alert.signals.items():
        session.add_reading(Reading(name=name, value=value, ts=alert.ts, uri=f"signal://{alert.vin}/{name}@x"))
    return session, alert


def test_agent_searches_knowledge_for_a_code_the_pack_cannot_act_on() -> None:
    base = KnowledgeBase(open_knowledge_store("memory://"), HashingEmbedder())
    base.load([KnowledgeRow("P1A23", "P1A23: Auxiliary heater fuel pump circuit open", "dtc:generic")], "v1")
    line = json.dumps(
        {
            "type": "alert",
            "event_id": "e1",
            "vin": "LSVAU2180N2183294",
            "series": "EV-A",
            "ts": "2026-11-01T08:00:00Z",
            "alert_text": "heater fault",
            "dtc_codes": ["P1A23"],
        }
    )
    session, alert = _session_with(line)
    messages, _ = build_window(session, alert, WorkingMemory(session.working))
    run = run_react(OfflineModel(), Toolbox(load_pack(), session, base), messages)
    assert [t.split("(")[0] for t in run.tools_used] == ["lookup_dtc", "search_knowledge"]
    tool_results = [m.content for m in run.transcript if m.role == "tool"]
    assert "Auxiliary heater fuel pump circuit open" in tool_results[1]
    assert run.answer.phase.value == "INVESTIGATING"
    # without a knowledge base the tool is not offered and not called
    run2 = run_react(OfflineModel(), Toolbox(load_pack(), session, None), messages)
    assert [t.split("(")[0] for t in run2.tools_used] == ["lookup_dtc"]
