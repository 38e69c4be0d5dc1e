"""Signals in units outside the first nine suffixes, through the PyFlink job (issue 13, item 1).

A fleet file written the way another fleet reports: kΩ, kW, bar, kWh, L/min,
degrees, km, µs, MΩ and suffixes nobody has a table for. Every valid alert is
diagnosed, nothing is dead-lettered for a unit, every confirmed case reaches
long-term memory with its readings verbatim (the summary's fidelity check
keeps numbers of unknown units too), and the rechecks that name those
sessions find them.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.e2e

# Signals besides the confirming one: units the old list did not have, and unknown suffixes.
EXTRA = [
    {"insulation_res_kohm": 480.0, "motor_power_kw": 85.5, "brake_pressure_bar": 12.3},
    {"battery_energy_kwh": 51.2, "coolant_flow_lpm": 9.5, "steering_angle_deg": -4.5},
    {"odometer_km": 48211.0, "gate_delay_us": 3.2, "hv_bus_megohm": 2.1},
    {"wiper_cycles_qz": 7.0, "mystery_reading_xyz": 0.25, "humidity_rh": 63.0},
    {"cabin_co2_ppm": 910.0, "pump_speed_rpm": 2900.0, "tyre_pressure_psi": 33.5},
    {"dcdc_power_w": 1650.0, "inverter_freq_khz": 10.0, "flux_level_t": 0.8},
]


def vin(i: int) -> str:
    return f"LNBUNXT00000000{i:02d}"


def events() -> list[dict]:  # type: ignore[type-arg]
    out: list[dict] = []  # type: ignore[type-arg]
    for i, extra in enumerate(EXTRA):
        opened = f"2026-11-{i + 2:02d}T08:00:00Z"
        out.append({"type": "alert", "event_id": f"u-{i}", "vin": vin(i), "series": "EV-U", "ts": opened,
                    "alert_text": "cell voltage imbalance", "dtc_codes": ["P0A7F"],
                    "signals": {"cell_voltage_diff_mv": 150 + i, **extra}})  # fmt: skip
        out.append({"type": "recheck", "event_id": f"r-{i}", "vin": vin(i),
                    "session_id": f"{vin(i)}-202611{i + 2:02d}T080000", "ts": f"2026-11-{i + 3:02d}T08:00:00Z",
                    "recheck_ok": True})  # fmt: skip
    # Confirmed by repetition, readings in unknown units only.
    for k in range(2):
        out.append({"type": "alert", "event_id": f"rep-{k}", "vin": vin(20), "series": "EV-U",
                    "ts": f"2026-11-20T0{8 + k}:00:00Z", "alert_text": "ABS module offline", "dtc_codes": ["U0121"],
                    "signals": {"abs_supply_vv": 9.1 + k, "frame_loss_qq": 12.0 + k}})  # fmt: skip
    out.append({"type": "recheck", "event_id": "rep-r", "vin": vin(20), "session_id": f"{vin(20)}-20261120T080000",
                "ts": "2026-11-21T08:00:00Z", "recheck_ok": True})  # fmt: skip
    # An alert that does not conclude: still diagnosed.
    out.append({"type": "alert", "event_id": "open-1", "vin": vin(30), "series": "EV-U",
                "ts": "2026-11-22T08:00:00Z", "alert_text": "odd readings", "dtc_codes": [],
                "signals": {"stack_temp_k": 310.0, "z_bar": 1.5}})  # fmt: skip
    return out


def test_every_alert_with_any_unit_is_diagnosed_and_its_recheck_finds_the_case(tmp_path: Path) -> None:
    evs = events()
    alerts = tmp_path / "units.jsonl"
    alerts.write_text("".join(json.dumps(e) + "\n" for e in evs))
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(alerts), "--out", str(tmp_path),
         "--memory", f"sqlite:///{tmp_path}/memory.db"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    diags = [json.loads(x) for x in (tmp_path / "diagnoses.jsonl").read_text().splitlines()]
    dead = [json.loads(x) for x in (tmp_path / "dead_letters.jsonl").read_text().splitlines()]
    assert dead == []  # no alert for its units, and no recheck for a missing case
    assert sorted(d["event_id"] for d in diags) == sorted(e["event_id"] for e in evs if e["type"] == "alert")
    by_id = {d["event_id"]: d for d in diags}
    assert all(by_id[f"u-{i}"]["phase"] == "CONCLUDED" for i in range(len(EXTRA)))
    assert [by_id["rep-0"]["phase"], by_id["rep-1"]["phase"], by_id["open-1"]["phase"]] == [
        "INVESTIGATING", "CONCLUDED", "INVESTIGATING"]  # fmt: skip
    assert not [d for d in diags if "summary_fidelity_failed" in d["flags"] or "l3_write_failed" in d["flags"]]
    with sqlite3.connect(tmp_path / "memory.db") as conn:
        rows = dict(conn.execute("SELECT vin, summary FROM case_memory WHERE recheck_ok = 1").fetchall())
    assert sorted(rows) == sorted([vin(i) for i in range(len(EXTRA))] + [vin(20)])  # every recheck landed
    for i in range(len(EXTRA)):
        assert f"cell_voltage_diff_mv={150 + i}" in rows[vin(i)]
