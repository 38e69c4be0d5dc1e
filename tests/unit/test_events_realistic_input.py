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
        ("Fuel Trim+Bank 1", "fuel_trim_plus_bank_1", None),
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


# -- 5. a number with a unit the table does not know ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("12 gal", 12.0), ("15 inHg", 15.0), ("45 psig", 45.0), ("180 lb-ft", 180.0), ("28 mpg", 28.0),
        ("0.8 g/km", 0.8), ("18 kWh/100km", 18.0), ("35 µg/m³", 35.0), ("300 Kelvin", 300.0),
        ("41.5 centigrade", 41.5), ("12\tgal", 12.0),
    ],
)  # fmt: skip
def test_a_number_in_a_unit_the_table_does_not_know_is_kept_its_unit_unknown(text: str, number: float) -> None:
    # Set aside as "text that is no number"; {"value": 12, "unit": "gal"} kept the same reading.
    event = read_signals({"fuel_used": text})
    assert event.signals == {"fuel_used": number} and not event.set_aside
    assert read_signals({"fuel_used": {"value": number, "unit": text.lstrip("0123456789. ")}}).signals == {
        "fuel_used": number
    }


def test_a_number_in_an_unknown_unit_for_a_name_that_declares_one_is_set_aside_naming_both() -> None:
    # Which unit holds is not known: 15 inHg read as 15 kPa would be wrong by a factor of 3.4.
    event = read_signals({"boost_kpa": "15 inHg", "pack_temp_c": 41.5})
    assert event.signals == {"pack_temp_c": 41.5} and event.signals_set_aside == {"boost_kpa": "15 inHg"}
    assert "'boost_kpa' = '15 inHg' (inHg is no unit the job knows, the name's unit is kPa)" in set_aside_error(event)


@pytest.mark.parametrize(
    "signals",
    [[{"name": "boost_kpa", "value": 15, "unit": "inHg"}], {"boost_kpa": {"value": 15, "unit": " inHg"}}],
    ids=["list", "object"],
)
def test_the_object_forms_set_it_aside_as_the_text_form_does(signals: object) -> None:
    # Read as 15 kPa, silently: the text form of the same reading is set aside.
    event = read_signals(signals)
    assert event.signals == {} and event.signals_set_aside == {"boost_kpa": "15 inHg"}
    assert "inHg is no unit the job knows, the name's unit is kPa" in set_aside_error(event)
    # A name that declares no unit keeps the number, its unit unknown, as before.
    assert read_signals([{"name": "boost", "value": 15, "unit": "inHg"}]).signals == {"boost": 15.0}


@pytest.mark.parametrize(
    "text", ["1.2.3", "0x8001", "31.23,121.47", "187 mV high", "1 234", "12 %%", "5 -", "12gal", "12.6e"]
)
def test_text_that_is_no_number_with_a_unit_is_still_set_aside(text: str) -> None:
    event = read_signals({"fuel_used": text})
    assert event.signals == {} and event.signals_set_aside == {"fuel_used": text}
    assert "text that is no number" in set_aside_error(event)


# -- 6. a compound unit in a name's brackets ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "name", "unit"),
    [
        ("Fuel Rate (gal/h)", "fuel_rate_galh", None),
        ("Fuel flow rate/minute(cc/min)", "fuel_flow_rate_minute_ccmin", None),
        ("CO₂ in g/km (Average)(g/km)", "co2_in_g_km_average_gkm", None),
        ("rate (rpm/s)", "rate_rpms", None),
        ("Engine Torque (lb-ft)", "engine_torque_lb_ft", None),
        # A unit the table knows is read whole, as before.
        ("Fuel rate (L/h)", "fuel_rate_lph", "L/h"),
        ("Speed (km/h)", "speed_kmh", "km/h"),
        ("Torque (N.m)", "torque_nm", "N·m"),
        ("Pack Voltage (V)", "pack_voltage_v", "V"),
    ],
)
def test_a_unit_in_brackets_is_read_whole_never_as_its_last_part(sent: str, name: str, unit: str | None) -> None:
    # "Fuel Rate (gal/h)": 3.2 was fuel_rate_gal_h, in hours (key facts showed 3.2h).
    assert signal_name(sent) == name and unit_of(name) == unit
    assert read_signals({sent: 3.2}).signals == {name: 3.2}


# -- 7. a sensor's or bank's letter at a name's end -----------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "text", "name", "number"),
    [
        ("accelerator_pedal_position_d", "18.4 %", "accelerator_pedal_position_d_pct", 18.4),
        ("o2_sensor_a", "0.45 V", "o2_sensor_a_v", 0.45),
        ("tps_a", "0.8 V", "tps_a_v", 0.8),
        ("fuel_rail_pressure_a", "350 kPa", "fuel_rail_pressure_a_kpa", 350.0),
        ("motor_temp_a", "65 °C", "motor_temp_a_c", 65.0),
    ],
)
def test_a_letter_suffix_the_texts_unit_conflicts_with_is_a_sensor_letter(
    sent: str, text: str, name: str, number: float
) -> None:
    # SAE J1979 names sensors and banks by letters (accelerator pedal position D, O2 sensor A): set aside as "in
    # a unit its name does not allow" (the name's unit A, amperes). The text's unit wins, as for phase_c.
    event = read_signals({sent: text})
    assert event.signals == {name: number} and not event.set_aside
    assert read_signals([{"name": sent, "value": number, "unit": text.split()[1]}]).signals == {name: number}


@pytest.mark.parametrize(
    ("sent", "text"), [("battery_v", "41 °C"), ("hvil_loop_v", "5 mA"), ("can_timeout_s", "5 V"), ("trip_m", "35 min")]
)
def test_a_letter_no_sensor_is_named_by_is_the_names_unit(sent: str, text: str) -> None:
    # (A review: battery_v = "41 °C" became a new signal battery_v_c, where it is a conflict with the name's unit.)
    event = read_signals({sent: text, "pack_temp_c": 41.5})
    assert event.signals == {"pack_temp_c": 41.5} and event.signals_set_aside == {sent: text}


def test_a_plus_is_a_word_and_parts_with_digits_or_labels_in_brackets_stay_words() -> None:
    # (A review: HV+ and HV were one name, and so were (1.2) and (12), and (1-12) and (11-2); (Bank-1) read as
    # bank1, renaming a name accepted before.)
    assert signal_name("Isolation Resistance HV+") != signal_name("Isolation Resistance HV")
    assert signal_name("Cell Voltage (1.2)") != signal_name("Cell Voltage (12)")
    assert signal_name("Cell Voltage (1-12)") != signal_name("Cell Voltage (11-2)")
    assert signal_name("O2 Sensor (Bank-1)") == "o2_sensor_bank_1"
    assert (signal_name("Temp (Pre-Cat)"), signal_name("Accel (X-axis)")) == ("temp_pre_cat", "accel_x_axis")


def test_a_letter_suffix_in_a_unit_of_its_quantity_is_still_the_unit() -> None:
    event = read_signals({"pack_temp_c": "105 °F", "tps_a": "800 mA", "trip_distance_m": "1.5 km"})
    assert event.signals == {"pack_temp_c": 40.5555555556, "tps_a": 0.8, "trip_distance_m": 1500.0}
    # A bare degree sign for a temperature is still which degree? not an angle's: set aside.
    assert read_signals({"pack_temp_c": "41.5°"}).signals_set_aside == {"pack_temp_c": "41.5°"}


def test_d_alone_is_no_days() -> None:
    # accelerator_pedal_position_d = 18.4 showed as 18.4d in key facts: days are _days.
    assert unit_of("accelerator_pedal_position_d") is None and unit_of("service_interval_days") == "d"
    assert read_signals({"accelerator_pedal_position_d": 18.4}).signals == {"accelerator_pedal_position_d": 18.4}
    assert read_signals({"service_interval": "30 days"}).signals == {"service_interval_days": 30.0}
    assert read_signals({"service_interval_days": "2 d"}).signals == {"service_interval_days": 2.0}


# -- 2. NaN and Infinity as JSON values -----------------------------------------------------------------------


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_as_a_reading_are_no_reading(literal: str) -> None:
    # Python's json.dumps writes them: the whole line was refused ("NaN is not a valid JSON number"), while the
    # string "NaN" was no reading.
    raw = json.dumps(alert(signals={"pack_temp_c": float("nan"), "soc_pct": 80}))
    raw = raw.replace("NaN", literal)
    event = read(raw)
    assert event.signals == {"soc_pct": 80.0} and not event.set_aside
    for signals in ('{"pack_temp": {"value": %s, "unit": "°C"}}', '[{"name": "pack_temp", "value": %s}]'):
        raw = json.dumps(alert(signals={})).replace('"signals": {}', '"signals": ' + signals % literal)
        assert read(raw).signals == {}


@pytest.mark.parametrize(("field", "says"), [("ts", "ts: NaN is no value"), ("event_id", "event_id: NaN is no")])
def test_nan_elsewhere_is_refused_naming_it(field: str, says: str) -> None:
    raw = json.dumps(alert(**{field: float("nan")}))
    assert says in refused(raw) and "JSON" in refused(raw)


# -- 3. 4. trouble codes as an object, and JSON sent as a string ----------------------------------------------


def test_one_code_object_in_place_of_the_list_is_a_list_of_it() -> None:
    # As XML-to-JSON converters write a list of one: "dtc_codes: Input should be a valid list" refused the alert.
    assert read(json.dumps(alert(dtc_codes={"code": "P0301", "status": "active"}))).dtc_codes == ["P0301"]
    assert read(json.dumps(alert(dtc_codes={"SPN": 1569, "FMI": 31}))).dtc_codes == ["SPN1569-FMI31"]


def test_codes_as_an_objects_keys_are_the_codes() -> None:
    event = read(json.dumps(alert(dtc_codes={"P0301": "confirmed", "U0100": "pending"})))
    assert event.dtc_codes == ["P0301", "U0100"] and not event.set_aside
    event = read(json.dumps(alert(dtc_codes={"P0301": "confirmed", "oil low": "pending"})))
    assert event.dtc_codes == ["P0301"] and list(event.codes_set_aside) == ["oil low"]


def test_json_sent_as_a_string_in_a_field_is_read_as_that_json() -> None:
    # Doubly-encoded payloads: signals were refused ("Input should be a valid dictionary"), codes set aside.
    event = read(json.dumps(alert(signals='{"pack_temp_c": 41.5}', dtc_codes='["P0301","P0302"]')))
    assert (event.signals, event.dtc_codes, event.set_aside) == ({"pack_temp_c": 41.5}, ["P0301", "P0302"], False)
    event = read(json.dumps(alert(signals='[{"name": "pack_temp_c", "value": 41.5}]')))
    assert event.signals == {"pack_temp_c": 41.5}
    # A string that is no JSON object of readings is refused naming it, as a string.
    assert "signals: a string that is no JSON object of readings: 'pack_temp_c=41.5'" in refused(
        json.dumps(alert(signals="pack_temp_c=41.5"))
    )


# -- 8. 9. 10. the VIN, the time and the verdict ---------------------------------------------------------------


@pytest.mark.parametrize("vin", [None, 12345])
def test_a_missing_or_wrong_vin_is_the_one_error(vin: object) -> None:
    data = {"type": "alert", "event_id": "e-04", "ts": "2026-11-01T08:20:00Z", "alert_text": "no vin"}
    if vin is not None:
        data["vin"] = vin
    reason = refused(json.dumps(data))
    assert reason.startswith("vin: ") and "series" not in reason


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (json.dumps(alert(ts="yesterday")), "ts: 'yesterday' is no time"),
        (json.dumps(alert(ts="2026-11-01T24:00:00Z")), "ts: '2026-11-01T24:00:00Z' is no time"),
        (
            json.dumps({"type": "recheck", "event_id": "r", "vin": VIN, "ts": "2026-11-01T08:20:00Z", "recheck_ok": 2}),
            "recheck_ok: 2 is no verdict",
        ),
    ],
)
def test_an_error_names_the_value(raw: str, says: str) -> None:
    assert says in refused(raw)


@pytest.mark.parametrize(
    "vin", ["LSVAU2180N 2183294", "LSVAU2180N-2183294", "LSVAU-2180N-2183294", "lsvau 2180n 2183294"]
)
def test_a_vin_with_inner_blanks_or_dashes_is_the_vin(vin: str) -> None:
    assert read(json.dumps(alert(vin=vin))).vin == VIN
    assert "vin" in refused(json.dumps(alert(vin="LSVAU2180N-218329")))


@pytest.mark.parametrize("unit", ["N/A", "-", "none", "null", "", "unit", "1", "kPa(g)", "kPaG"])
def test_a_mark_of_no_unit_or_the_names_unit_with_a_qualifier_reads_in_the_names_unit(unit: str) -> None:
    # (A review: {"unit": "N/A"} for boost_kpa was set aside as "N/A is no unit the job knows"; it was read in kPa.)
    assert read_signals([{"name": "boost_kpa", "value": 15, "unit": unit}]).signals == {"boost_kpa": 15.0}
    if unit.strip() and unit not in ("-", "1"):
        assert read_signals({"boost_kpa": f"15 {unit}"}).signals == {"boost_kpa": 15.0}


def test_units_spelled_as_data_sheets_write_them_are_read() -> None:
    event = read_signals({"idle_rpm": "700 min-1", "pack_temp_c": "41 degrees C", "fan_speed": "900 min^-1"})
    assert event.signals == {"idle_rpm": 700.0, "pack_temp_c": 41.0, "fan_speed_rpm": 900.0}
