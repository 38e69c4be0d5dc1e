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
