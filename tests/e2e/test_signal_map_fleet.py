"""A fleet that names its signals in Chinese, through the PyFlink job of `vdoctor run` with its signal map
(``VDOCTOR_SIGNAL_NAMES``): each mapped name is read as the knowledge pack's name, so the pack's rule confirms
the fault by it, as for a fleet that sends the pack's names; a reading under a name the map lacks is set
aside: its alert is diagnosed without it (flagged), and its line is a dead letter as well that names the
setting.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.file_job import run_file_job

pytestmark = pytest.mark.e2e

A = "LSVAU2180N2183294"
B = "LSVAU2180N2183295"
MAP = {"单体压差(mV)": "cell_voltage_diff_mv", "电池温度": "pack_temp_c"}


def alert(event_id: str, vin: str, ts: str, signals: dict[str, float]) -> dict:
    return {
        "type": "alert", "event_id": event_id, "vin": vin, "series": "EV-A", "ts": ts,
        "alert_text": "电池包单体压差过大", "dtc_codes": ["P0A7F"], "signals": signals,
    }  # fmt: skip


EVENTS = [
    alert("e-1", A, "2026-11-01T08:00:00Z", {"单体压差(mV)": 87, "电池温度": 35.5}),  # below P0A7F's 100 mV rule
    alert("e-2", B, "2026-11-01T08:30:00Z", {"单体压差(mV)": 150, "绝缘电阻": 520}),  # 绝缘电阻: not in the map
    alert("e-3", A, "2026-11-01T10:00:00Z", {"单体压差（mV）": 187, "电池温度": 36.0}),  # full-width brackets
]


def test_a_fleets_chinese_signal_names_are_read_through_its_map(tmp_path: Path) -> None:
    names = tmp_path / "signal-names.json"
    names.write_text(json.dumps(MAP, ensure_ascii=False), encoding="utf-8")
    diagnoses, dead_letters = run_file_job(EVENTS, tmp_path, {"VDOCTOR_SIGNAL_NAMES": str(names)})
    by_id = {d["event_id"]: d for d in diagnoses}
    # e-2 is diagnosed too, from its code, text and mapped reading, without the one the map lacks.
    assert sorted(by_id) == ["e-1", "e-2", "e-3"]
    assert by_id["e-2"]["flags"] == ["signals_set_aside"]
    assert all("signals_set_aside" not in by_id[i]["flags"] for i in ("e-1", "e-3"))
    assert by_id["e-1"]["phase"] == "INVESTIGATING"
    # 187 mV under the fleet's own name confirmed the pack's rule on cell_voltage_diff_mv.
    assert by_id["e-3"]["phase"] == "CONCLUDED" and by_id["e-3"]["priority"] == "P2"
    assert by_id["e-3"]["evidence"] == ["dtc://P0A7F", f"signal://{A}/cell_voltage_diff_mv@2026-11-01T10:00:00Z"]
    # Its line is kept whole in the dead letters as well, naming the reading set aside and the setting.
    (dead,) = dead_letters
    assert dead["stage"] == "validate" and json.loads(dead["raw"])["event_id"] == "e-2"
    assert "1 reading set aside, not written in Latin letters" in dead["error"] and "'绝缘电阻'" in dead["error"]
    assert "VDOCTOR_SIGNAL_NAMES" in dead["error"]
