"""A fleet whose platform sends states beside its numbers (a charger's state, a gear), through the PyFlink job of
`vdoctor run`: the alert is diagnosed from its numbers, codes and text, flagged ``signals_set_aside``, and its line
goes to the dead letters as well, naming each state; an alert without states is untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.file_job import run_file_job

pytestmark = pytest.mark.e2e

A = "LSVAU2180N2183294"
B = "LSVAU2180N2183295"


def alert(event_id: str, vin: str, signals: dict) -> dict:
    return {
        "type": "alert", "event_id": event_id, "vin": vin, "series": "EV-A", "ts": "2026-11-01T08:00:00Z",
        "alert_text": "电池包单体压差过大", "dtc_codes": ["P0A7F"], "signals": signals,
    }  # fmt: skip


def test_states_are_set_aside_and_the_alert_is_diagnosed_from_its_numbers(tmp_path: Path) -> None:
    events = [
        alert("e-1", A, {"cell_voltage_diff_mv": 187, "charging_state": "CHARGING", "gear": "P"}),
        alert("e-2", B, {"cell_voltage_diff_mv": 187}),
    ]
    diagnoses, dead = run_file_job(events, tmp_path)
    by_id = {d["event_id"]: d for d in diagnoses}
    assert set(by_id) == {"e-1", "e-2"}
    # The same numbers and codes give the same conclusion; only the flag tells them apart.
    assert by_id["e-1"]["phase"] == by_id["e-2"]["phase"] == "CONCLUDED"
    assert by_id["e-1"]["root_cause"] == by_id["e-2"]["root_cause"] is not None
    assert by_id["e-1"]["flags"] == ["signals_set_aside"] and by_id["e-2"]["flags"] == []
    (letter,) = dead
    assert letter["stage"] == "validate" and json.loads(letter["raw"])["event_id"] == "e-1"
    assert "2 readings set aside, text that is no number" in letter["error"]
    assert "'charging_state' = 'CHARGING'" in letter["error"] and "'gear' = 'P'" in letter["error"]
