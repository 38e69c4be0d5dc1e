"""A truck fleet whose gateways send SAE J1939 codes (SPN and FMI), through the PyFlink job of `vdoctor run`:
a low oil pressure (SPN 100, FMI 1, sent as an object with its occurrence count) with its reading under the
pack's limit concludes at once, as an OBD code's rule does, where the pack held no J1939 entry before; a code
the pack holds no entry for (defined by its SPN and FMI alone) does not conclude the session on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.file_job import run_file_job

pytestmark = pytest.mark.e2e

TRUCK, BUS = "LZZ5CLSB0NA123456", "LKLR1KSE1NB654321"
EVENTS = [
    {"type": "alert", "event_id": "t-1", "vin": TRUCK, "series": "HD-T", "ts": "2026-11-01T08:00:00Z",
     "alert_text": "机油压力低报警", "dtc_codes": [{"spn": 100, "fmi": 1, "oc": 3}],
     "signals": {"engine_oil_pressure_kpa": 55}},
    {"type": "alert", "event_id": "b-1", "vin": BUS, "series": "CITY-B", "ts": "2026-11-01T08:01:00Z",
     "alert_text": "NOx sensor fault", "dtc_codes": ["SPN 3226 FMI 2"], "signals": {}},
]  # fmt: skip


def test_j1939_faults_are_diagnosed_from_the_pack(tmp_path: Path) -> None:
    diagnoses, dead = run_file_job(EVENTS, tmp_path, {})
    assert dead == []
    by_event = {d["event_id"]: d for d in diagnoses}
    oil = by_event["t-1"]
    assert oil["phase"] == "CONCLUDED" and oil["priority"] == "P1" and "oil pump" in oil["root_cause"]
    assert "dtc://SPN100-FMI1" in oil["evidence"]
    nox = by_event["b-1"]
    assert nox["phase"] == "INVESTIGATING" and "dtc://SPN3226-FMI2" in nox["evidence"]
