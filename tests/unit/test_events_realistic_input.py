"""What a real fleet sends, read as it means it: a part of an alert the job cannot read is set aside, never the
whole alert refused for it, and every error names the value and says why (a review of the input's realism)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vdoctor.errors import EventError
from vdoctor.events import AlertEvent, parse_event, set_aside_error, signal_name
from vdoctor.units import unit_of

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"


def alert(**fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "type": "alert", "event_id": "e-1", "vin": VIN, "series": "EV-A", "ts": "2026-11-01T08:15:30Z",
        "alert_text": "x", "dtc_codes": ["P0A7F"],
    }  # fmt: skip
    data.update(fields)
    return data


def read(raw: str) -> AlertEvent:
    event = parse_event(raw)
    assert isinstance(event, AlertEvent)
    return event


def read_signals(signals: object) -> AlertEvent:
    return read(json.dumps(alert(signals=signals), ensure_ascii=False))


def refused(raw: str) -> str:
    with pytest.raises(EventError) as info:
        parse_event(raw)
    return str(info.value)


# -- 1. punctuation in a signal's name ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "name", "unit"),
    [
        ("Fuel Level #1", "fuel_level_1", None),
        ("Cyl 1 Misfire Count (#)", "cyl_1_misfire_count", None),
        ("Turbo Boost & Vacuum Gauge(psi)", "turbo_boost_vacuum_gauge_psi", "psi"),
        ("Fuel Trim+Bank 1", "fuel_trim_bank_1", None),
        ("O2 Volts*Bank 1, Sensor 2", "o2_volts_bank_1_sensor_2", None),
        ("air=fuel ratio!?", "air_fuel_ratio", None),
        ("'coolant' temp @ {engine} | $c", "coolant_temp_engine_c", "°C"),
    ],
)
def test_punctuation_in_a_name_is_a_word_break(sent: str, name: str, unit: str | None) -> None:
    # Column names of OBD tools' exports: "signals: signal name 'fuel_level_#1' must be snake_case" refused the
    # alert, its codes and good readings with it.
    assert signal_name(sent) == name and unit_of(name) == unit
    event = read_signals({sent: 12.5, "pack_temp_c": 41.5})
    assert event.signals == {name: 12.5, "pack_temp_c": 41.5} and event.dtc_codes == ["P0A7F"]
    assert not event.set_aside


@pytest.mark.parametrize("sent", ["#", "2026_11", "_12v_battery_v", "a" * 97, "Cell " * 20 + "Voltage (V)"])
def test_a_name_that_still_cannot_be_read_is_set_aside_not_the_alert(sent: str) -> None:
    event = read_signals({sent: 3.5, "pack_temp_c": 41.5})
    assert event.signals == {"pack_temp_c": 41.5} and event.dtc_codes == ["P0A7F"]
    assert event.signals_set_aside == {sent: "3.5"}
    reason = set_aside_error(event)
    assert "1 reading set aside, a name that is no signal name" in reason and repr(sent[:40]) in reason
    assert "at most 96 characters" in reason
