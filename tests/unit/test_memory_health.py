"""Memory health on a hand-made diagnoses log."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from vdoctor.evaluation.health import assess, plot
from vdoctor.records import MemoryRecord
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

V1, V2, V3 = "LSVAU2180N2183294", "LSVAU2180N2100001", "LSVAU2180N2100002"


def record(vin: str, sid: str, cause: str, codes: list[str]) -> MemoryRecord:
    return MemoryRecord(
        vin=vin,
        session_id=sid,
        series="EV-A",
        concluded_at=datetime(2026, 10, 1, tzinfo=UTC),
        summary="s",
        summary_vec=[1.0],
        root_cause=cause,
        fix_action="f",
        priority="P2",
        dtc_codes=codes,
        prompt_version="v",
    )


def diag(vin: str, sid: str, phase: str, cause: str | None, codes: list[str], own: list, similar: list) -> str:
    return json.dumps(
        {
            "vin": vin,
            "session_id": sid,
            "phase": phase,
            "root_cause": cause,
            "evidence": [f"dtc://{c}" for c in codes],
            "memory": {"injected": bool(own or similar), "own": own, "similar": similar},
        }
    )


def test_relevance_scores_by_hand(tmp_path: Path) -> None:
    store = InMemoryStore()
    store.upsert(record(V1, f"{V1}-20261001T000000", "weak cell", ["P0A7F"]))  # same cause: 1.0
    store.upsert(record(V2, f"{V2}-20261002T000000", "bad sensor", ["P0A7F"]))  # shared code: 0.5
    store.upsert(record(V3, f"{V3}-20261003T000000", "low 12 V battery", ["P0562"]))  # unrelated: 0
    own = [{"vin": V1, "session_id": f"{V1}-20261001T000000"}]
    similar = [
        {"vin": V2, "session_id": f"{V2}-20261002T000000"},
        {"vin": V3, "session_id": f"{V3}-20261003T000000"},
        {"vin": V3, "session_id": f"{V3}-20200101T000000"},
    ]  # gone from the store
    sid = f"{V1}-20261105T080000"
    log = tmp_path / "diagnoses.jsonl"
    log.write_text(
        "\n".join(
            [
                diag(V1, sid, "INVESTIGATING", None, ["P0A7F"], own, similar),
                diag(V1, sid, "CONCLUDED", "weak cell", ["P0A7F"], own, similar),
                diag(V2, f"{V2}-20261105T080000", "CONCLUDED", "x", ["P0300"], [], []),  # no memory
                diag(V3, f"{V3}-20261105T080000", "INVESTIGATING", None, [], own, []),  # never concluded
            ]
        )
        + "\n"
    )
    report = assess(log, store)
    assert (report.sessions_seen, report.sessions_with_memory, report.sampled) == (2, 1, 1)
    assert report.missing_records == 1
    assert sorted(s.relevance for s in report.scores) == [0.0, 0.5, 1.0]
    assert report.mean("own") == 1.0
    assert report.mean("similar") == 0.25
    assert report.hit_rate() == 2 / 3
    assert report.by_week() == {"2026-W45": 0.5}
    plot(report, tmp_path / "h.png")
    assert (tmp_path / "h.png").read_bytes().startswith(b"\x89PNG")
