"""Readings as fleets send them (DESIGN.md §3.1): a reading the job cannot read sets itself aside, not its alert;
a unit written in a reading's text is kept as the object form keeps it; a decimal comma's fleet groups thousands
with points; a statistic's ``_min`` is no minutes; a hemisphere's letter is a coordinate's sign."""

from __future__ import annotations

import json

import pytest

from vdoctor.events import EVENT_ADAPTER, AlertEvent, parse_event, set_aside_error
from vdoctor.feed_check import check_feed
from vdoctor.lines import ReadingSpan
from vdoctor.units import unit_of

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"


def line(signals: object) -> str:
    return json.dumps(
        {
            "type": "alert", "event_id": "e-1", "vin": VIN, "series": "EV-A", "ts": "2026-11-01T08:15:30Z",
            "alert_text": "x", "dtc_codes": ["P0A7F"], "signals": signals,
        },
        ensure_ascii=False,
    )  # fmt: skip


def read(signals: object, number_comma: str | None = None) -> AlertEvent:
    event = parse_event(line(signals), number_comma=number_comma)
    assert isinstance(event, AlertEvent)
    return event


# -- 1. a reading that cannot be read is set aside, its alert diagnosed ---------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "detail"),
    [
        ("pack_temp_c", "41.5°", "°, the name's unit is °C"),
        ("coolant_temp_deg", "90 °C", "°C, the name's unit is °"),
        ("insulation_res_mohm", "5 MΩ", "MΩ, the name's unit is mΩ"),
    ],
)
def test_a_reading_in_a_unit_its_name_does_not_allow_is_set_aside_and_the_alert_kept(
    name: str, text: str, detail: str
) -> None:
    # One such reading made the whole alert a dead letter: its codes, text and other readings were lost.
    event = read({name: text, "soc_pct": 80})
    assert (event.signals, event.dtc_codes) == ({"soc_pct": 80.0}, ["P0A7F"])
    assert event.signals_set_aside == {name: text}
    reason = set_aside_error(event)
    assert f"1 reading set aside, in a unit its name does not allow: {name!r} = {text!r} ({detail})" in reason
    assert "no number" not in reason
    # The reason survives the round trip through state (the operator keeps pending events as their JSON).
    again = EVENT_ADAPTER.validate_json(event.model_dump_json())
    assert again == event and set_aside_error(again) == reason


def test_a_comma_number_that_reads_two_ways_is_set_aside_naming_both_and_the_setting() -> None:
    event = read({"engine_rpm": "3,000 rpm", "gear": "D", "pack_temp_c": "41.5°"})
    assert event.signals == {} and event.dtc_codes == ["P0A7F"]
    assert event.signals_set_aside == {"engine_rpm": "3,000 rpm", "gear": "D", "pack_temp_c": "41.5°"}
    reason = set_aside_error(event)
    assert reason.startswith("signals: 3 readings set aside, text that is no number (a reading is a number): 'gear'")
    assert "'engine_rpm' = '3,000 rpm' (3000 or 3.000?)" in reason and "VDOCTOR_NUMBER_COMMA" in reason
    assert "in a unit its name does not allow: 'pack_temp_c' = '41.5°'" in reason
    # With the setting it is read.
    assert read({"engine_rpm": "3,000 rpm"}, number_comma="thousands").signals == {"engine_rpm": 3000.0}


def test_where_nothing_collects_readings_set_aside_an_unreadable_reading_still_refuses() -> None:
    # Validated without the parser's context (no place to set a reading aside), the reading refuses as before.
    base = json.loads(line({}))
    for signals, says in (
        ({"pack_temp_c": "41.5°"}, "is in °, its name's unit is °C"),
        ({"engine_rpm": "3,000"}, "3000 or 3.000?"),
    ):
        with pytest.raises(ValueError, match=says):
            AlertEvent.model_validate({**base, "signals": signals})


def test_check_events_counts_the_line_as_an_event_and_a_dead_letter_with_the_reason() -> None:
    report = check_feed([line({"pack_temp_c": "41.5°", "soc_pct": 80})])
    assert report.events["alert"] == 1 and report.dead_letters == 1
    assert "in a unit its name does not allow" in json.dumps(report.as_json(), ensure_ascii=False)


def test_a_reading_no_vehicle_reads_is_set_aside_and_the_alert_kept() -> None:
    """Out of range (an unset 64-bit counter, a number past a double's range in the JSON), or what its quantity
    cannot be: it refused the whole alert, its codes and text with it, or (below zero, below absolute zero)
    was read, and a state of health of -5% met the pack's rule for replacing the pack, P1 (found by an audit)."""
    for signals, name, why in (
        ({"cell_voltage_diff_mv": "1e300"}, "cell_voltage_diff_mv", "out of range"),
        ({"odometer_m": 18446744073709551615}, "odometer_m", "out of range"),
        ({"soh_pct": -5}, "soh_pct", "below zero"),
        ({"soc": "-3 %"}, "soc_pct", "below zero"),  # (named by the unit in its text)
        ({"pack_temp_c": -300}, "pack_temp_c", "below absolute zero (-273.15 °C)"),
        ({"coolant_temp_f": "-500"}, "coolant_temp_f", "below absolute zero (-459.67 °F)"),
        ({"insulation_res_kohm": -1}, "insulation_res_kohm", "below zero (0 kΩ)"),
        ({"odometer_km": -5}, "odometer_km", "below zero"),
        # Under an index, a qualifier or a word of another name for the quantity (a review).
        ({"soc_pct": [-5]}, "soc_pct_0", "below zero"),
        ({"soc_min_pct": -5}, "soc_min_pct", "below zero"),
        ({"odometer_reading_km": -5}, "odometer_reading_km", "below zero"),
        ({"isolation_kohm": -1}, "isolation_kohm", "below zero (0 kΩ)"),
    ):
        event = read({**signals, "cell_temp_c": 30})
        assert event.signals == {"cell_temp_c": 30.0} and event.dtc_codes == ["P0A7F"], signals
        assert list(event.signals_set_aside) == [name] and event.signals_set_aside_why[name] == ("range", why)
        assert "a number no vehicle reads" in set_aside_error(event)
    raw = line({"x": 1}).replace('{"x": 1}', '{"x": 1e400}')
    assert parse_event(raw).signals_set_aside == {"x": "inf"}  # type: ignore[union-attr]
    # Past a double's range in text too, with a unit or not, and converted past it (a review found them
    # refusing the alert), and a whole number of 400 digits.
    for signals in ({"pack_temp_c": "1e400"}, {"pack_temp_c": "1e400 °F"}, {"odometer_m": "1e308 km"},
                    [{"name": "pack_temp_c", "value": "1e400", "unit": "°C"}]):  # fmt: skip
        event = read(signals)
        assert event.signals == {} and list(event.signals_set_aside_why.values()) == [("range", "out of range")]
    huge = parse_event(line({"x": 1}).replace('{"x": 1}', '{"x": 1' + "0" * 400 + "}"))
    assert huge.signals_set_aside_why == {"x": ("range", "out of range")}  # type: ignore[union-attr]
    # Below zero where a quantity may be: a fuel trim, a temperature in °F, a current, a torque; and where the
    # name does not say it measures what its suffix or a word of it could (a review found each set aside): a
    # phase-C current, differences and changes, a chip's (SoC's) temperature.
    kept = {"fuel_trim_pct": -12.0, "ambient_temp_f": -40.0, "pack_current_a": -120.0, "motor_torque_nm": -80.0,
            "i_phase_c": -400.0, "delta_t_k": -2.0, "cell_temp_diff_k": -2.0, "soc_delta_pct": -5.0,
            "soh_change_pct": -1.0, "soc_temp_c": -5.0, "tbox_soc_temp_c": -5.0, "odometer_delta_km": -5.0,
            "insulation_res_change_kohm": -5.0, "soc_max_c": -5.0, "soc_total_ah": -5.0, "soc_raw": -5.0,
            "soc_v": -0.5}  # fmt: skip
    assert read(kept).signals == kept


# -- 2. a unit written in the text of a reading whose name declares none ---------------------------------------


def test_a_unit_written_in_the_text_is_kept_as_the_object_form_keeps_it() -> None:
    # "0.5 MΩ" and "500 kΩ" were both kept as insulation_res, 0.5 and 500: a thousand times apart in memory,
    # while {"value": 0.5, "unit": "MΩ"} was insulation_res_megohm.
    as_object = read({"insulation_res": {"value": 0.5, "unit": "MΩ"}}).signals
    assert as_object == {"insulation_res_megohm": 0.5}
    assert read({"insulation_res": "0.5 MΩ"}).signals == as_object
    assert read({"insulation_res": "500 kΩ"}).signals == {"insulation_res_kohm": 500.0}
    listed = [{"name": "Insulation Res", "value": 500, "unit": "kΩ"}]
    assert read(listed).signals == read({"Insulation Res": "500 kΩ"}).signals == {"insulation_res_kohm": 500.0}
    assert read({"soc": "85%", "bms": {"pack_temp": "41.5 °C"}}).signals == {"soc_pct": 85.0, "bms_pack_temp_c": 41.5}
    # A number without a unit keeps the name as sent (its unit unknown), and a name that declares a unit keeps it.
    assert read({"insulation_res": "500", "cell_voltage_diff_mv": "0.187 V"}).signals == {
        "insulation_res": 500.0, "cell_voltage_diff_mv": 187.0,
    }  # fmt: skip
    # The name it takes another reading of the alert has (a display text beside its raw value): the earlier one
    # is kept and the later set aside, in either order; the whole alert was refused (found by a diff review).
    first = read({"battery_voltage": "12.6 V", "battery_voltage_v": 12.5})
    assert first.signals == {"battery_voltage_v": 12.6} and first.signals_set_aside == {"battery_voltage_v": "12.5"}
    later = read({"battery_voltage_v": 12.5, "battery_voltage": "12.6 V"})
    assert later.signals == {"battery_voltage_v": 12.5} and later.signals_set_aside == {"battery_voltage": "12.6 V"}
    assert "under the name of an earlier reading of the alert" in set_aside_error(later)
    # Two names that read alike with no unit in their text: which one holds is not known, so both are set aside
    # (they refused the alert until this release).
    both = read({"pack_temp_C": 41.0, "pack_temp_c": 42.0, "soc_pct": 50})
    assert both.signals == {"soc_pct": 50.0}
    assert both.signals_set_aside == {"pack_temp_C": "41.0", "pack_temp_c": "42.0"}
    assert "two readings under one name" in set_aside_error(both)
    # A third reading that a unit in its text names so is set aside with them (it was read: a review).
    three = read({"pack_temp_C": 1, "pack_temp_c": 2, "pack_temp": "3 °C"})
    assert three.signals == {} and set(three.signals_set_aside) == {"pack_temp_C", "pack_temp_c", "pack_temp"}


# -- 3. a fleet that writes a decimal comma groups thousands with points ---------------------------------------


def test_under_a_decimal_comma_points_grouping_digits_twice_or_more_are_thousands() -> None:
    # A German platform writes 1.234.567 km: it was set aside as no number.
    for text, number in (
        ("1.234.567", 1234567.0), ("-1.500.000", -1500000.0), ("123.456,7", 123456.7),
        # Any other point is a decimal one, as machines write numbers whatever the fleet's locale.
        ("3.7", 3.7), ("0.5", 0.5), ("0.500", 0.5), ("1.2345", 1.2345), ("12.5", 12.5), ("1.200e3", 1200.0),
    ):  # fmt: skip
        assert read({"trip_energy": text}, number_comma="decimal").signals == {"trip_energy": number}, text
    # With the unit given beside the value, converted after it is read.
    listed = [{"name": "odometer_km", "value": "1.234.567 m"}, {"name": "pack_voltage_v", "value": "3.7", "unit": "mV"}]
    assert read(listed, number_comma="decimal").signals == {"odometer_km": 1234.567, "pack_voltage_v": 0.0037}
    # Without the setting, or with thousands, a point is a decimal one as before.
    for comma in (None, "thousands"):
        assert read({"odometer": "1.200", "engine_rpm": "3.7"}, number_comma=comma).signals == {
            "odometer": 1.2, "engine_rpm": 3.7,
        }, comma  # fmt: skip


@pytest.mark.parametrize("text", ["1.200 rpm", "3.215 V", "398.500", "-1.500"])
def test_under_a_decimal_comma_one_point_before_three_digits_reads_two_ways_and_is_set_aside(text: str) -> None:
    # 1.200 rpm (twelve hundred) and 3.215 V (a machine's %.3f): read as thousands, 3.215 V became 3215 V, a
    # thousand times the reading, without a word (found by a diff review). Set aside, naming both.
    event = read({"engine_rpm" if "rpm" in text else "pack_voltage_v": text}, number_comma="decimal")
    assert event.signals == {} and list(event.signals_set_aside.values()) == [text]
    digits = text.split()[0]
    assert f"{digits.replace('.', '')} or {digits}?" in set_aside_error(event)


def test_check_events_shows_how_a_point_is_read_under_a_decimal_comma() -> None:
    report = check_feed([line({"odometer_km": "1.234.567 km", "pack_voltage_v": "3.7"})], number_comma="decimal")
    forms = {(f["written"], f["read"]) for f in report.as_json()["read_as"] if f["kind"] == "number"}
    assert forms == {("9.999.999 km", "9999999 km")}
    assert not check_feed([line({"odometer_km": "1.234.567 km"})]).as_json()["read_as"]


# -- 4. a quantity's _min is its minimum; cells_3_t is no tonnes -------------------------------------------------


@pytest.mark.parametrize("name", ["cell_voltage_min", "soc_min", "cell_temp_min", "pack_current_min", "cell_v_min"])
def test_min_after_a_quantity_is_a_minimum_not_minutes(name: str) -> None:
    # cell_voltage_min = 3.21 then 3.18 was kept in memory as "3.21→3.18min".
    assert unit_of(name) is None and unit_of(f"{name}_3") is None
    assert ReadingSpan.of(name, [3.21, 3.18]).render() == f"{name}=3.21→3.18"
    assert read({name: 3.21}).signals == {name: 3.21}
    # Sent with its unit, it is kept under the unit's suffix, as any name that declares none.
    assert read({name: "3.21 V"}).signals == {f"{name}_v": 3.21}


@pytest.mark.parametrize("name", ["idle_min", "charge_time_min", "runtime_min", "duration_min"])
def test_min_after_any_other_word_is_still_minutes(name: str) -> None:
    assert unit_of(name) == "min"
    assert ReadingSpan.of(name, [12, 15]).render() == f"{name}=12→15min"
    assert read({name: "2 h"}).signals == {name: 120.0}


def test_t_after_an_index_is_no_tonnes() -> None:
    # cells[3].t, a flattened array's temperature, was read in tonnes.
    assert unit_of("cells_3_t") is None and unit_of("cells_3_t_0") is None
    assert ReadingSpan.of("cells_3_t", [25, 26]).render() == "cells_3_t=25→26"
    assert read({"cells": [{"t": 25}]}).signals == {"cells_0_t": 25.0}
    assert read({"cells_3_t": {"value": 20, "unit": "°C"}}).signals == {"cells_3_t_c": 20.0}
    # A t elsewhere is tonnes still.
    assert unit_of("payload_t") == "t"


# -- 5. a hemisphere's letter after a coordinate is its sign -----------------------------------------------------


def test_a_hemisphere_after_a_coordinate_gives_its_sign() -> None:
    # "121.47W" was +121.47 (W read as watts) and "33.87S" +33.87: a position on the other side of the globe.
    signals = {"gps_lon": "121.47W", "gps_lat": "33.87S", "latitude": "31.23°N", "lng": "121.47 e",
               "pos": {"lat": "31.23 n", "lon": "121.47东经"}, "home_lon": "2.35西经"}  # fmt: skip
    assert read(signals).signals == {
        "gps_lon": -121.47, "gps_lat": -33.87, "latitude": 31.23, "lng": 121.47, "pos_lat": 31.23, "pos_lon": 121.47,
        "home_lon": -2.35,
    }  # fmt: skip
    # A letter elsewhere is what it was: W after a power is watts, and a coordinate's plain number is as sent.
    assert read({"pack_power": "5W", "gps_lat": 31.23}).signals == {"pack_power_w": 5.0, "gps_lat": 31.23}


@pytest.mark.parametrize(
    ("name", "text", "detail"),
    [
        ("gps_lat", "33.87E", "E, a latitude's hemisphere is N or S"),
        ("gps_lon", "121.47 N", "N, a longitude's is E or W"),
        ("gps_lon", "-121.47W", "W after a signed number"),
    ],
)
def test_a_hemisphere_that_does_not_fit_the_coordinate_is_set_aside(name: str, text: str, detail: str) -> None:
    event = read({name: text, "soc_pct": 80})
    assert event.signals == {"soc_pct": 80.0} and event.signals_set_aside == {name: text}
    assert f"in a unit its name does not allow: {name!r} = {text!r} ({detail})" in set_aside_error(event)


# -- 6. Chinese units and full-width digits -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signals", "read_as"),
    [
        ({"pack_voltage_v": "398.5伏"}, {"pack_voltage_v": 398.5}),
        ({"tire_pressure_kpa": "250千帕"}, {"tire_pressure_kpa": 250.0}),
        ({"speed_kmh": "62 千米/小时"}, {"speed_kmh": 62.0}),
        ({"engine_speed_rpm": "3000转/分"}, {"engine_speed_rpm": 3000.0}),
        ({"insulation_kohm": "5兆欧"}, {"insulation_kohm": 5000.0}),  # converted, as "5 MΩ" is
        ({"pack_voltage": "398.5伏"}, {"pack_voltage_v": 398.5}),  # the unit kept as the name's suffix
        # Full-width digits, point and comma, as a Chinese input method writes them.
        ({"pack_temp_c": "４１．５"}, {"pack_temp_c": 41.5}),
        ({"pack_temp_c": "４１．５℃"}, {"pack_temp_c": 41.5}),
    ],
)
def test_chinese_units_and_full_width_digits_are_read(signals: dict[str, str], read_as: dict[str, float]) -> None:
    # Each was set aside as no number (the alert diagnosed without it, a dead letter kept).
    event = read(signals)
    assert event.signals == read_as and event.signals_set_aside == {}


def test_du_alone_is_not_read_as_a_unit() -> None:
    # 度: degrees Celsius on a thermometer, kilowatt-hours on an electricity bill.
    assert read({"pack_temp_c": "41.5 度"}).signals_set_aside == {"pack_temp_c": "41.5 度"}


@pytest.mark.parametrize(
    ("signals", "read_as"),
    [
        # Lateral and longitudinal in vehicle dynamics: a hemisphere's letters are their units (N, S, W), and
        # lat or lon anywhere in a name made 0.8 s a southern -0.8 (found by a diff review).
        ({"lat_response_time": "0.8 s"}, {"lat_response_time_s": 0.8}),
        ({"lat_dyn_s": "0.8 s"}, {"lat_dyn_s": 0.8}),
        ({"lon_motor_power": "500 W"}, {"lon_motor_power_w": 500.0}),
        ({"brake_force_lon": "1200 N"}, {"brake_force_lon_n": 1200.0}),
        ({"lat_force_n": "-350 N"}, {"lat_force_n": -350.0}),
        # A coordinate: the axis alone, or after a word that says position.
        ({"latitude": "31.2N"}, {"latitude": 31.2}),
        ({"pos_lon_deg": "121.4 W"}, {"pos_lon_deg": -121.4}),
    ],
)
def test_lateral_and_longitudinal_are_no_coordinates(signals: dict[str, str], read_as: dict[str, float]) -> None:
    assert read(signals).signals == read_as
