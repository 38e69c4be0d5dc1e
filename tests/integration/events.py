"""Events shared by the Kafka tests; expected values are worked out by hand in each test."""

from __future__ import annotations

A = "LSVAU2180N2183294"  # EV-A, two sessions of the same fault
B = "LSVAU2180N2183295"  # EV-A, a similar vehicle
C = "LFVBA24B5N3000017"  # EV-B, another series


def alert(event_id: str, vin: str, series: str, ts: str, diff_mv: float) -> dict[str, object]:
    return {
        "type": "alert", "event_id": event_id, "vin": vin, "series": series, "ts": ts,
        "alert_text": "电池包单体压差过大", "dtc_codes": ["P0A7F"], "signals": {"cell_voltage_diff_mv": diff_mv},
    }


def recheck(event_id: str, vin: str, session_id: str, ts: str) -> dict[str, object]:
    return {"type": "recheck", "event_id": event_id, "vin": vin, "session_id": session_id, "ts": ts,
            "recheck_ok": True, "note": "压差 12mV, 复检正常"}


# Before a savepoint or crash: A's session 1 concludes, B's session 1 concludes, A's session 2 opens (90 mV, below
# the threshold) and stays open in L2 state across the stop.
PART_1 = [
    alert("e-1", A, "EV-A", "2026-11-01T08:00:00Z", 187),
    alert("e-2", B, "EV-A", "2026-11-02T08:00:00Z", 160),
    alert("e-5", A, "EV-A", "2026-11-10T08:00:00Z", 90),
]
# After the restart: A's case 1 is verified, B's session 2 recalls it, A's session 2 concludes under the
# session id restored from the savepoint or checkpoint, and a replayed e-1 is dropped by the restored dedup state.
PART_2 = [
    recheck("r-1", A, f"{A}-20261101T080000", "2026-11-04T08:00:00Z"),
    alert("e-3", B, "EV-A", "2026-11-12T08:00:00Z", 140),
    alert("e-6", A, "EV-A", "2026-11-10T10:00:00Z", 155),
    alert("e-1", A, "EV-A", "2026-11-01T08:00:00Z", 187),
]
