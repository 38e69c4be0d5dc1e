"""A fleet whose platform writes numbers with a comma, through the PyFlink job of `vdoctor run`: the one form
that could mean two numbers a thousand times apart (``398,125``) is set aside, its alert diagnosed without it
and its line a dead letter that names the setting, and with ``VDOCTOR_NUMBER_COMMA`` it is read as the fleet
writes it, into the diagnosis and the stored case."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.e2e.file_job import run_file_job

pytestmark = pytest.mark.e2e

VIN = "LSVAU2180N2183294"
EVENTS = [
    {
        "type": "alert", "event_id": "e-1", "vin": VIN, "series": "EV-A", "ts": "2026-11-01T08:00:00Z",
        "alert_text": "电池包单体压差过大", "dtc_codes": ["P0A7F"],
        # A European platform's export: a decimal comma, points grouping thousands.
        "signals": {"cell_voltage_diff_mv": "187", "pack_voltage_v": "398,125", "odometer_km": "12.345,6"},
    },
]  # fmt: skip


def summaries(out: Path) -> list[str]:
    with sqlite3.connect(out / "memory.db") as conn:
        return [row[0] for row in conn.execute("SELECT summary FROM case_memory")]


def test_without_the_setting_the_ambiguous_reading_is_set_aside_and_a_dead_letter_names_it(tmp_path: Path) -> None:
    diagnoses, dead = run_file_job(EVENTS, tmp_path, {"VDOCTOR_NUMBER_COMMA": None})
    # The alert is diagnosed from its codes, text and other readings (until this release it was lost whole).
    assert [d["event_id"] for d in diagnoses] == ["e-1"] and "signals_set_aside" in diagnoses[0]["flags"]
    assert len(dead) == 1
    assert dead[0]["stage"] == "validate" and json.loads(dead[0]["raw"])["event_id"] == "e-1"
    assert "398125 or 398.125?" in dead[0]["error"] and "VDOCTOR_NUMBER_COMMA" in dead[0]["error"]


# Read as thousands, 398,125 V is no pack's voltage, but it is a number: the job reads what the fleet says it
# writes, and the summary keeps the reading as read.
@pytest.mark.parametrize(
    ("comma", "read"), [("decimal", "pack_voltage_v=398.125V"), ("thousands", "pack_voltage_v=398125V")]
)
def test_with_the_setting_the_fleets_numbers_are_read_as_it_writes_them(tmp_path: Path, comma: str, read: str) -> None:
    diagnoses, dead = run_file_job(EVENTS, tmp_path, {"VDOCTOR_NUMBER_COMMA": comma})
    assert dead == [] and [d["event_id"] for d in diagnoses] == ["e-1"]
    assert diagnoses[0]["phase"] == "CONCLUDED"
    (summary,) = summaries(tmp_path)
    assert read in summary and "odometer_km=12345.6km" in summary
