"""Alerts delivered late, through the PyFlink job of `vdoctor run`.

An alert from before a vehicle's transfer, delivered after it (the vehicle buffered it offline): a dead letter
that names both times, no case of it in long-term memory, and the next owner's sessions diagnosed and written as
any others; the vehicle's keyed state carries the transfer's time. Alerts from days before the open session, and
an alert dated years ahead by a clock that jumped: sessions of their own, as they would be in order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.file_job import run_file_job
from vdoctor.stores.sqlite import SqliteStore

pytestmark = pytest.mark.e2e

A = "LSVAU2180N2183294"


def alert(event_id: str, ts: str, diff_mv: float) -> dict:
    return {
        "type": "alert", "event_id": event_id, "vin": A, "series": "EV-A", "ts": ts,
        "alert_text": "电池包单体压差过大", "dtc_codes": ["P0A7F"], "signals": {"cell_voltage_diff_mv": diff_mv},
    }  # fmt: skip


EVENTS = [
    alert("e-1", "2026-11-01T08:00:00Z", 187),  # the first owner's case, concluded at once
    {"type": "lifecycle", "event_id": "l-1", "vin": A, "ts": "2026-11-04T00:00:00Z", "change": "transferred"},
    alert("e-late-1", "2026-11-03T09:00:00Z", 190),  # buffered before the transfer, delivered after it
    alert("e-2", "2026-11-05T08:00:00Z", 80),  # the next owner's session
    alert("e-late-2", "2026-11-02T10:00:00Z", 195),  # another of the old care, behind the next owner's session
    alert("e-3", "2026-11-05T09:00:00Z", 150),  # which it leaves as it was: this alert concludes it
]  # fmt: skip


def test_an_alert_from_before_a_transfer_is_a_dead_letter_and_the_next_owners_cases_are_written(
    tmp_path: Path,
) -> None:
    diagnoses, dead = run_file_job(EVENTS, tmp_path)
    assert [d["event_id"] for d in diagnoses] == ["e-1", "e-2", "e-3"]
    assert len(dead) == 2 and {d["stage"] for d in dead} == {"process"}
    assert all(f"from before {A} left the fleet's care" in d["error"] for d in dead)
    assert "2026-11-03T09:00:00Z" in dead[0]["error"] and "2026-11-04T00:00:00Z" in dead[0]["error"]
    by_id = {d["event_id"]: d for d in diagnoses}
    # The next owner's session is one session, concluded by e-3, and recalls nothing of the first owner's.
    assert by_id["e-2"]["session_id"] == by_id["e-3"]["session_id"] == f"{A}-20261105T080000"
    assert by_id["e-3"]["phase"] == "CONCLUDED" and by_id["e-2"]["memory"]["own"] == []
    store = SqliteStore(str(tmp_path / "memory.db"))
    try:
        cases = {r.session_id: r.valid for r in store.history(A)}
    finally:
        store.close()
    assert cases == {f"{A}-20261101T080000": False, f"{A}-20261105T080000": True}


def test_buffered_alerts_of_days_ago_and_a_clock_years_ahead_make_sessions_of_their_own(tmp_path: Path) -> None:
    events = [
        alert("live-1", "2026-11-06T08:00:00Z", 80),  # back in coverage: the live alert first
        alert("old-1", "2026-11-02T08:00:00Z", 80),  # then what it buffered four days ago
        alert("old-2", "2026-11-02T09:00:00Z", 150),
        alert("bad-clock", "2030-11-01T00:00:00Z", 80),  # one alert of a clock that jumped
        alert("live-2", "2026-11-06T10:00:00Z", 80),
        alert("live-3", "2026-11-06T11:00:00Z", 150),
    ]
    diagnoses, dead = run_file_job(events, tmp_path)
    assert dead == []
    sessions = {d["event_id"]: d["session_id"].removeprefix(A + "-") for d in diagnoses}
    assert sessions == {
        "live-1": "20261106T080000",
        "old-1": "20261102T080000", "old-2": "20261102T080000",
        "bad-clock": "20301101T000000",
        "live-2": "20261106T100000", "live-3": "20261106T100000",
    }  # fmt: skip
    store = SqliteStore(str(tmp_path / "memory.db"))
    try:
        [case] = store.history(A)
    finally:
        store.close()
    # The live session's conclusion, the same fault within 30 days, merged into the buffered session's case.
    assert case.session_id == f"{A}-20261102T080000" and case.merged_sessions[-1] == f"{A}-20261106T100000"
