"""A fleet whose clocks send local time without a zone (GB/T 32960 terminals send Beijing time), through the
PyFlink job of `vdoctor run`: with ``VDOCTOR_NAIVE_TS_ZONE`` its events are read in that zone, and session ids,
rechecks, session expiry and recall all run on the same UTC times as a fleet that writes the zone (in ISO form,
a Chinese export's 2026/11/4 16:00:00 or GB/T 32960's 20261105160000); without it
each such event is a dead letter that names the setting, and the job goes on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.file_job import run_file_job

pytestmark = pytest.mark.e2e

A = "LSVAU2180N2183294"
B = "LSVAU2180N2183295"
ZONE = "Asia/Shanghai"  # UTC+8 all year


def alert(event_id: str, vin: str, ts: str, diff_mv: float) -> dict:
    return {
        "type": "alert", "event_id": event_id, "vin": vin, "series": "EV-A", "ts": ts,
        "alert_text": "电池包单体压差过大", "dtc_codes": ["P0A7F"], "signals": {"cell_voltage_diff_mv": diff_mv},
    }  # fmt: skip


EVENTS = [
    alert("e-1", A, "2026-11-01 16:00:00", 187),  # 08:00 UTC: A's session concludes at once
    # The recheck names the session by its id, which is in UTC, as every output gives it.
    {"type": "recheck", "event_id": "r-1", "vin": A, "session_id": f"{A}-20261101T080000",
     "ts": "2026/11/4 16:00:00", "recheck_ok": True, "note": "压差 12mV, 复检正常"},
    # B's session opens after A's case was verified, below the rule; its time as GB/T 32960 platforms keep it.
    alert("e-2", B, "20261105160000", 80),
    alert("e-3", B, "2026-11-05T08:30:00Z", 150),  # the same fleet may write the zone: 16:30 in Beijing
]  # fmt: skip


def _run(out: Path, zone: str | None) -> tuple[list[dict], list[dict]]:
    return run_file_job(EVENTS, out, {"VDOCTOR_NAIVE_TS_ZONE": zone})


def test_local_times_are_read_in_the_fleets_zone(tmp_path: Path) -> None:
    diagnoses, dead = _run(tmp_path / "zoned", ZONE)
    assert dead == []
    by_id = {d["event_id"]: d for d in diagnoses}
    assert by_id["e-1"]["session_id"] == f"{A}-20261101T080000"
    # B's two alerts, 16:00 local (20261105160000) and 08:30Z, are 30 minutes apart: one session, opened at 08:00 UTC.
    assert by_id["e-2"]["session_id"] == by_id["e-3"]["session_id"] == f"{B}-20261105T080000"
    # The recheck found A's session by its UTC id, and verified it before B's session opened.
    assert {"vin": A, "session_id": f"{A}-20261101T080000"} in by_id["e-2"]["memory"]["similar"]


def test_without_the_zone_a_local_time_is_a_dead_letter_that_names_the_setting(tmp_path: Path) -> None:
    diagnoses, dead = _run(tmp_path / "unzoned", None)
    assert [d["event_id"] for d in diagnoses] == ["e-3"]  # the one event that writes its zone
    assert len(dead) == 3 and {d["stage"] for d in dead} == {"validate"}
    assert all("has no timezone" in d["error"] and "VDOCTOR_NAIVE_TS_ZONE" in d["error"] for d in dead)
    assert sorted(json.loads(d["raw"])["event_id"] for d in dead) == ["e-1", "e-2", "r-1"]
