"""Units from a signal name's suffix: known ones named, unknown ones kept as unknown."""

from __future__ import annotations

import pytest

from vdoctor.units import UNIT_CACHE_NAMES, UNITS, unit_of, unit_suffix

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "unit"),
    [
        ("cell_voltage_diff_mv", "mV"),
        ("pack_temp_c", "°C"),
        ("insulation_res_kohm", "kΩ"),
        ("cell_res_mohm", "mΩ"),
        ("motor_power_kw", "kW"),
        ("energy_used_kwh", "kWh"),
        ("charge_time_h", "h"),
        ("brake_pressure_bar", "bar"),
        ("speed_kmh", "km/h"),
        ("motor_torque_nm", "N·m"),
        ("soc_pct", "%"),
        ("coolant_flow_lph", "L/h"),
    ],
)
def test_known_suffixes_name_their_unit(name: str, unit: str) -> None:
    assert unit_of(name) == unit


@pytest.mark.parametrize("name", ["cell_voltage_diff", "wheel_slip_ratio", "odometer", "mv", "x_zz"])
def test_an_unknown_suffix_or_a_bare_unit_is_unknown(name: str) -> None:
    assert unit_of(name) is None


def test_units_are_remembered_for_at_most_the_bound_of_names() -> None:
    names = [f"signal_{i}_mv" for i in range(UNIT_CACHE_NAMES + 10)]
    assert [unit_of(name) for name in names] == ["mV"] * len(names)
    assert [unit_of(name) for name in names[-3:]] == ["mV"] * 3  # remembered
    assert unit_of.cache_info().currsize <= UNIT_CACHE_NAMES


def test_every_unit_has_a_suffix_that_declares_it() -> None:
    # A reading sent with its unit apart ({"name": "pack_temp", "unit": "°C"}) is named by this suffix.
    for symbol in set(UNITS.values()):
        assert unit_of(f"reading_{unit_suffix(symbol)}") == symbol, symbol
    assert [unit_suffix(s) for s in ("°C", "%", "km/h", "s", "h")] == ["c", "pct", "kmh", "s", "h"]
