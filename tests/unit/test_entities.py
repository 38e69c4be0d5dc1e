"""The long-task grader: every number and entity by token shape, and whole-token presence."""

from __future__ import annotations

import json

import pytest

from vdoctor.evaluation.entities import entities, present

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"


def test_every_scalar_of_a_json_tool_result() -> None:
    result = {"signal": "cell_voltage_diff_mv", "readings": [
        {"value": 62.0, "ts": "2026-11-01T07:46:00Z", "uri": f"signal://{VIN}/cell_voltage_diff_mv@2026-11-01T07:46:00Z"},
        {"value": 88.5, "ok": True, "note": None}]}  # fmt: skip
    assert entities(json.dumps(result)) == {
        "cell_voltage_diff_mv", "62", "88.5", "2026-11-01T07:46:00Z",
        f"signal://{VIN}/cell_voltage_diff_mv@2026-11-01T07:46:00Z",
    }  # fmt: skip


def test_every_token_with_a_digit_and_every_snake_case_name_of_free_text() -> None:
    text = "continuity 0.2 Ω on all 96 sense lines; connector X12, 工单WO-20931, P0A7F, cell 37, pack_temp_c rose."
    assert entities(text) == {"0.2", "96", "X12", "WO-20931", "P0A7F", "37", "pack_temp_c"}
    assert entities("车主来电询问进度 all good") == set()


def test_presence_is_by_whole_token_and_a_number_may_carry_its_unit() -> None:
    assert present("187", "reading 187mV") and present("187", "x=187") and present("46.5", "46.5℃")
    assert not present("187", "1870") and not present("187", "187.5") and not present("12", "X12")
    # A number is not found inside a time or a URI.
    assert not present("20", "2026-11-01 10:20 | alert") and not present("11", f"signal://{VIN}/x@2026-11-01T10:15:00Z")
    assert present("35", "coolant_temp_c=-35")
    assert present("X12", "connector X12.") and not present("X12", "X123")
