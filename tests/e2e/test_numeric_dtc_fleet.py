"""A fleet of OBD dongles that sends Mode 03's trouble codes as numbers of two bytes (768 is 0x0300, P0300),
through the PyFlink job of `vdoctor run`: read as three bytes, as UDS gateways send them (the default), the
same number is another code (P0003), and with ``VDOCTOR_DTC_NUMBERS=obd`` it is the code the dongle meant,
the one the diagnosis works from. A number of three bytes is then no code: set aside, its alert diagnosed
without it, and its line a dead letter that names the setting; the job goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.file_job import run_file_job

pytestmark = pytest.mark.e2e

VIN = "LSVAU2180N2183294"
EVENTS = [
    {"type": "alert", "event_id": "e-1", "vin": VIN, "series": "ICE-B", "ts": "2026-11-01T08:00:00Z",
     "alert_text": "engine shaking at idle", "dtc_codes": [0x0300, 0]},
    {"type": "alert", "event_id": "e-2", "vin": VIN, "series": "ICE-B", "ts": "2026-11-01T08:05:00Z",
     "alert_text": "engine shaking at idle", "dtc_codes": [0x0A7F1B]},
]  # fmt: skip


@pytest.mark.parametrize(("numbers", "code"), [(None, "P0003"), ("obd", "P0300")])
def test_codes_sent_as_numbers_are_read_as_the_fleet_says_it_sends_them(
    tmp_path: Path, numbers: str | None, code: str
) -> None:
    diagnoses, dead = run_file_job(EVENTS, tmp_path, {"VDOCTOR_DTC_NUMBERS": numbers})
    first = next(d for d in diagnoses if d["event_id"] == "e-1")
    assert f"dtc://{code}" in first["evidence"]
    assert "P0000" not in json.dumps(first)  # 0 pads a list: no code, either way
    assert [d["event_id"] for d in diagnoses] == ["e-1", "e-2"]
    if numbers is None:  # three bytes: 0x0A7F1B is P0A7F
        assert dead == []
        return
    # Two bytes: 0x0A7F1B is no OBD code: set aside, the alert diagnosed from its text, its line a dead letter.
    assert "codes_set_aside" in diagnoses[1]["flags"]
    assert len(dead) == 1 and json.loads(dead[0]["raw"])["event_id"] == "e-2"
    assert "VDOCTOR_DTC_NUMBERS=obd" in dead[0]["error"] and dead[0]["stage"] == "validate"
