"""Input events (DESIGN.md §3.1): what is accepted, how it is normalised, and
why a bad line goes to the dead letters (stage and field named)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any

import pytest

from vdoctor.errors import EventError
from vdoctor.events import (
    EVENT_ADAPTER,
    MAX_DTC_CODES,
    MAX_SIGNALS,
    AlertEvent,
    LifecycleEvent,
    RecheckEvent,
    number_comma,
    parse_event,
    session_id_for,
    set_aside_error,
    signal_name,
    time_zone,
)
from vdoctor.lines import ReadingSpan
from vdoctor.memory.session import MAX_READINGS
from vdoctor.units import unit_of

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"


def alert(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "type": "alert",
        "event_id": "e-000123",
        "vin": VIN,
        "series": "EV-A",
        "ts": "2026-11-01T08:15:30Z",
        "alert_text": "电池包单体压差过大",
        "dtc_codes": ["P0A7F"],
        "signals": {"cell_voltage_diff_mv": 187, "pack_temp_c": 41.5},
    }
    data.update(overrides)
    return data


def recheck(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "type": "recheck",
        "event_id": "r-77",
        "vin": VIN,
        "session_id": f"{VIN}-20261101T081530",
        "ts": "2026-11-05T10:00:00Z",
        "recheck_ok": True,
        "note": "压差 12mV, 复检正常",
    }
    data.update(overrides)
    return data


def lifecycle(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "type": "lifecycle",
        "event_id": "l-9",
        "vin": VIN,
        "ts": "2026-12-01T00:00:00Z",
        "change": "scrapped",
    }
    data.update(overrides)
    return data


def rejected(raw: str, naive_zone: tzinfo | None = None) -> EventError:
    with pytest.raises(EventError) as info:
        parse_event(raw, naive_zone)
    return info.value


def set_aside(raw: str, name: str, number_comma: str | None = None, kind: str | None = None) -> AlertEvent:
    """The alert of ``raw``, read without its reading ``name`` (text that is no number, or a number it cannot
    read in its name's unit), which it sets aside with its text: the dead letter's reason names it. ``kind``:
    the kind of reason it is kept with (``signals_set_aside_why``)."""
    event = parse_event(raw, number_comma=number_comma)
    assert isinstance(event, AlertEvent) and name in event.signals_set_aside, (raw, event)
    assert name not in event.signals and f"'{name}'" in set_aside_error(event)
    if kind is not None:
        assert event.signals_set_aside_why[name][0] == kind, event.signals_set_aside_why
    return event


def code_aside(raw: str, says: str = "", dtc_numbers: str = "uds") -> AlertEvent:
    """The alert of ``raw``, read without the one code it cannot read, which it sets aside with why: its dead
    letter's reason names the field and ``says``. Until this release such a code refused the whole alert."""
    event = parse_event(raw, dtc_numbers=dtc_numbers)
    assert isinstance(event, AlertEvent) and len(event.codes_set_aside) == 1, (raw, event)
    reason = set_aside_error(event)
    assert reason.startswith("dtc_codes: 1 code set aside") and says in reason, reason
    return event


# -- valid events ---------------------------------------------------------------


def test_alert_from_the_design_example_parses() -> None:
    event = parse_event(json.dumps(alert(), ensure_ascii=False))
    assert isinstance(event, AlertEvent)
    assert event.vin == VIN
    assert event.series == "EV-A"
    assert event.ts == datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
    assert event.alert_text == "电池包单体压差过大"
    assert event.dtc_codes == ["P0A7F"]
    assert event.signals == {"cell_voltage_diff_mv": 187.0, "pack_temp_c": 41.5}


def test_ts_is_normalised_to_utc_with_second_precision() -> None:
    # 16:15:30.7 at +08:00 is 08:15:30.7 UTC; the fraction is dropped, not rounded up.
    event = parse_event(json.dumps(alert(ts="2026-11-01T16:15:30.7+08:00")))
    assert event.ts == datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
    assert event.ts.utcoffset() == timedelta(0)
    assert event.ts.microsecond == 0


def test_ts_with_negative_offset_crosses_midnight() -> None:
    # 20:00 at -05:00 is 01:00 the next day in UTC.
    event = parse_event(json.dumps(lifecycle(ts="2026-11-30T20:00:00-05:00")))
    assert event.ts == datetime(2026, 12, 1, 1, 0, 0, tzinfo=UTC)


def test_unknown_fields_are_ignored() -> None:
    event = parse_event(json.dumps(alert(firmware="v1.2.3", extra={"nested": [1, 2]})))
    assert isinstance(event, AlertEvent)
    assert not hasattr(event, "firmware")
    assert "firmware" not in event.model_dump()


def test_dtc_codes_are_uppercased_and_deduplicated_in_order() -> None:
    event = parse_event(json.dumps(alert(dtc_codes=["p0a7f", " P0A80 ", "P0A7F", "p0a80", "u0100"])))
    assert isinstance(event, AlertEvent)
    assert event.dtc_codes == ["P0A7F", "P0A80", "U0100"]


def test_alert_optional_fields_default_to_empty() -> None:
    data = alert()
    for key in ("alert_text", "dtc_codes", "signals"):
        del data[key]
    event = parse_event(json.dumps(data))
    assert isinstance(event, AlertEvent)
    assert event.alert_text == ""
    assert event.dtc_codes == []
    assert event.signals == {}


@pytest.mark.parametrize(
    "line",
    [
        {"vin": VIN, "ts": "2026-11-01T08:15:30Z", "lat": 31.2, "lon": 121.4, "speed": 60},  # a position report
        {"vin": VIN, "ts": "2026-11-01T08:15:30Z", "heartbeat": 1},
        # An alert whose codes and text come under names of the platform's own: diagnosed with nothing before.
        {"vin": VIN, "ts": "2026-11-01T08:15:31Z", "faultCodes": ["P0A7F"], "message": "cell imbalance"},
        {"vin": VIN, "ts": "2026-11-01T08:15:31Z", "alert_text": "  ", "dtc_codes": [], "signals": {}},
    ],
)
def test_a_line_without_a_type_and_with_nothing_of_an_alert_is_a_dead_letter_naming_its_fields(
    line: dict[str, Any],
) -> None:
    with pytest.raises(EventError) as raised:
        parse_event(json.dumps(line))
    assert raised.value.stage == "validate"
    said = str(raised.value)
    assert "a line without a type is read as an alert, and this one has none of an alert's" in said
    for own in set(line) - {"vin", "ts", "alert_text", "dtc_codes", "signals"}:
        assert repr(own) in said
    assert "'vin'" not in said


def test_two_lines_without_a_type_or_an_id_in_one_second_are_not_one_event() -> None:
    # Each had the content id of its contract fields alone, and the second was dropped as a duplicate of the
    # first: now neither is an alert (both dead letters, each with its own line), and an alert with content
    # has an id of that content.
    first = {"vin": VIN, "ts": "2026-11-01T08:15:31Z", "faultCodes": ["P0A7F"]}
    second = {"vin": VIN, "ts": "2026-11-01T08:15:31Z", "faultCodes": ["P0A80"]}
    for line in (first, second):
        with pytest.raises(EventError):
            parse_event(json.dumps(line))
    a = parse_event(json.dumps({**first, "dtc_codes": ["P0A7F"]}))
    b = parse_event(json.dumps({**second, "dtc_codes": ["P0A80"]}))
    assert a.event_id != b.event_id


def test_an_alert_typed_as_one_is_diagnosed_even_bare() -> None:
    # The producer said the vehicle raised an alarm: its details may be missing, the alarm is not.
    for kind in ("alert", "alarm", "故障"):
        event = parse_event(json.dumps({"type": kind, "vin": VIN, "ts": "2026-11-01T08:15:30Z"}))
        assert isinstance(event, AlertEvent) and not event.says_anything()


def test_an_alert_with_only_readings_set_aside_is_still_an_alert() -> None:
    event = parse_event(json.dumps({"vin": VIN, "ts": "2026-11-01T08:15:30Z", "signals": {"电池温度": 41}}))
    assert isinstance(event, AlertEvent) and event.signals_set_aside == {"电池温度": 41.0}


@pytest.mark.parametrize(
    ("codes", "read"),
    [
        # A Chinese input method's punctuation and full-width forms: each was "not a trouble code".
        (["P0A7F，P0A80"], ["P0A7F", "P0A80"]),
        (["P0A7F、P0A80"], ["P0A7F", "P0A80"]),
        (["P0A7F；P0A80"], ["P0A7F", "P0A80"]),
        (["P0A7F：电池组电压不平衡"], ["P0A7F"]),
        (["P0A7F-电池组电压不平衡"], ["P0A7F"]),
        (["Ｐ０Ａ７Ｆ"], ["P0A7F"]),
        # A separator with an empty description after it, as an export with an empty column writes it.
        (["P0A7F -"], ["P0A7F"]),
        (["P0A7F:"], ["P0A7F"]),
        (["P0A7F-"], ["P0A7F"]),
        (["P0A7F-1B"], ["P0A7F"]),  # still a failure type
    ],
)
def test_code_entries_as_chinese_input_methods_and_exports_write_them(codes: list[str], read: list[str]) -> None:
    event = parse_event(json.dumps(alert(dtc_codes=codes), ensure_ascii=False))
    assert isinstance(event, AlertEvent) and event.dtc_codes == read


def test_a_code_entry_naming_another_code_in_its_description_is_still_no_code() -> None:
    event = code_aside(json.dumps(alert(dtc_codes=["P0A7F：见P0A80"]), ensure_ascii=False), "is not a trouble code")
    assert event.dtc_codes == []


@pytest.mark.parametrize("code", ["XYZ", "P0A7F-1B2", "SPN 524288 FMI 1", "SPN 1569 FMI 32", "1569-31"])
def test_a_code_the_job_cannot_read_is_set_aside_and_the_alert_read_with_its_other_codes(code: str) -> None:
    event = code_aside(json.dumps(alert(dtc_codes=["P0A80", code])), f"{code!r} is not a trouble code")
    assert event.dtc_codes == ["P0A80"] and list(event.codes_set_aside) == [code]
    # The event as the job hands it on, and reads it back from state: the same.
    assert EVENT_ADAPTER.validate_json(event.model_dump_json()) == event


@pytest.mark.parametrize(
    "vin", [f"{VIN[:10]}\u200b{VIN[10:]}", "".join(chr(ord(c) + 0xFEE0) for c in VIN), f"\ufeff{VIN}"]
)
def test_a_vin_in_full_width_or_with_a_character_of_no_width_is_the_vin(vin: str) -> None:
    # Copied from a web page or a spreadsheet: refused with a message that showed the VIN as if it were fine.
    assert parse_event(json.dumps(alert(vin=vin), ensure_ascii=False)).vin == VIN
    from vdoctor.events import key_vin

    assert key_vin(vin) == VIN  # the Kafka record key: the same vehicle


def test_a_full_width_vins_series_is_its_ascii_one() -> None:
    # The series taken from the VIN was taken from it as sent: 'ＬＳＶＡＵ２１８', a series of its own for recall.
    data = {k: v for k, v in alert(vin="".join(chr(ord(c) + 0xFEE0) for c in VIN)).items() if k != "series"}
    assert parse_event(json.dumps(data, ensure_ascii=False)).series == VIN[:8]  # type: ignore[union-attr]


@pytest.mark.parametrize("vin", ["0" * 17, "1" * 17, "A" * 17])
def test_a_placeholder_vin_is_a_dead_letter(vin: str) -> None:
    # Terminals not yet bound to a vehicle send one: they would all have shared one vehicle's sessions and memory.
    with pytest.raises(EventError, match="is a placeholder"):
        parse_event(json.dumps(alert(vin=vin)))


def test_integer_and_negative_signal_values_are_numbers() -> None:
    event = parse_event(json.dumps(alert(signals={"pack_temp_c": -12, "soh_pct": 88.5})))
    assert isinstance(event, AlertEvent)
    assert event.signals == {"pack_temp_c": -12.0, "soh_pct": 88.5}


def test_recheck_parses() -> None:
    event = parse_event(json.dumps(recheck(), ensure_ascii=False))
    assert isinstance(event, RecheckEvent)
    assert event.session_id == f"{VIN}-20261101T081530"
    assert event.recheck_ok is True
    assert event.note == "压差 12mV, 复检正常"
    assert event.ts == datetime(2026, 11, 5, 10, 0, 0, tzinfo=UTC)


def test_recheck_false_is_kept_as_false() -> None:
    event = parse_event(json.dumps(recheck(recheck_ok=False)))
    assert isinstance(event, RecheckEvent)
    assert event.recheck_ok is False


@pytest.mark.parametrize("change", ["scrapped", "transferred"])
def test_lifecycle_parses(change: str) -> None:
    event = parse_event(json.dumps(lifecycle(change=change)))
    assert isinstance(event, LifecycleEvent)
    assert event.change == change
    assert event.vin == VIN


# -- stage "parse" ----------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "not json",
        '{"type": "alert", "vin": ',
        "{'type': 'alert'}",
    ],
    ids=["empty", "text", "truncated", "single-quotes"],
)
def test_invalid_json_fails_at_parse(raw: str) -> None:
    assert rejected(raw).stage == "parse"


def test_a_key_given_twice_in_one_object_fails_at_parse_naming_it() -> None:
    # json keeps the last of two equal keys without a word: two VINs, or two readings of one name, would be read
    # as whichever came last.
    line = json.dumps(alert())
    for raw, key in (
        (line.replace('"vin": ', '"vin": "LSVAU2180N2183295", "vin": ', 1), "vin"),
        (line.replace('"signals": {', '"signals": {"pack_temp_c": 99, "pack_temp_c": 41, ', 1), "pack_temp_c"),
    ):
        error = rejected(raw)
        assert error.stage == "parse" and f"the key '{key}' is given twice" in str(error), raw


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_literals_are_no_reading_and_refused_elsewhere_at_validate(literal: str) -> None:
    # Not JSON, but Python's json.dumps writes them: a reading's is no reading, as the text "NaN" is.
    raw = json.dumps(alert(signals={"cell_voltage_diff_mv": 1})).replace(
        '"cell_voltage_diff_mv": 1', f'"cell_voltage_diff_mv": {literal}'
    )
    assert literal in raw
    event = parse_event(raw)
    assert isinstance(event, AlertEvent) and event.signals == {} and not event.set_aside
    error = rejected(json.dumps(alert()).replace('"e-000123"', literal))
    assert error.stage == "validate" and f"event_id: {literal} is no value" in str(error)


@pytest.mark.parametrize("raw", ["[]", json.dumps([alert()]), "42", '"alert"', "null"])
def test_json_that_is_not_an_object_fails_at_parse(raw: str) -> None:
    assert rejected(raw).stage == "parse"


# -- stage "validate", with the field named ----------------------------------------

_DROP = object()


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (alert(vin="LSVAU2180N218329"), "vin"),  # 16 characters
        (alert(vin="LSVAU2180N21832941"), "vin"),  # 18 characters
        (alert(vin="LSVAU2180N218329I"), "vin"),
        (alert(vin="LSVAU2180N218329O"), "vin"),
        (alert(vin="LSVAU2180N218329Q"), "vin"),
        (alert(ts=_DROP), "ts"),
        (alert(ts="2026-11-01T08:15:30"), "ts"),
        (alert(ts="yesterday"), "ts"),
        (alert(ts=True), "ts"),
        (alert(ts="1970-01-01T00:00:00Z"), "ts"),
        (alert(ts="2200-01-01T00:00:00Z"), "ts"),
        (alert(ts="0001-01-01T00:00:00+01:00"), "ts"),
        (alert(ts="9999-12-31T23:59:59-01:00"), "ts"),
        (alert(ts="17620000001"), "ts"),
        (alert(alert_text="压" * 4001), "alert_text"),
        (alert(signals={f"cell_{i}_voltage_v": 3.9 for i in range(1, MAX_SIGNALS + 2)}), "signals"),
        (alert(dtc_codes=[f"U{n:04X}" for n in range(MAX_DTC_CODES + 1)]), "dtc_codes"),
        (alert(series=["EV-A"]), "series"),
        (recheck(session_id="LSVAU-1"), "session_id"),
        (recheck(recheck_ok=_DROP), "recheck_ok"),
        (lifecycle(change="stolen"), "change"),
        (lifecycle(event_id=""), "event_id"),
    ],
    ids=[
        "vin-16-chars",
        "vin-18-chars",
        "vin-with-I",
        "vin-with-O",
        "vin-with-Q",
        "missing-ts",
        "naive-ts",
        "garbage-ts",
        "boolean-ts",
        "clock-not-set-1970",
        "ts-after-2199",
        "ts-before-year-1-in-utc",
        "ts-after-year-9999-in-utc",
        "epoch-digits-read-as-year-2528",
        "alert-text-too-long",
        "more-signals-than-the-session-keeps",
        "more-than-128-codes",
        "alert-series-a-list",
        "recheck-session-id-too-short",
        "recheck-without-result",
        "lifecycle-stolen",
        "empty-event-id",
    ],
)
def test_contract_violations_fail_at_validate_naming_the_field(payload: dict[str, Any], field: str) -> None:
    payload = {k: v for k, v in payload.items() if v is not _DROP}
    error = rejected(json.dumps(payload, ensure_ascii=False))
    assert error.stage == "validate"
    # describe_validation_error writes one "field: problem" item per error.
    fields = [part.split(": ", 1)[0] for part in str(error).split("; ")]
    assert field in fields, str(error)


@pytest.mark.parametrize(
    "name",
    [
        "cell_voltage_diff", "insulation_res_kohm", "motor_power_kw", "brake_pressure_bar", "coolant_flow_lph", "x1",
        "12v_battery_v", "48v_bus_v", "2nd_row_temp_c", "12_v_battery",
    ],
)  # fmt: skip
def test_any_snake_case_signal_is_accepted_whatever_its_unit(name: str) -> None:
    event = parse_event(json.dumps(alert(signals={name: 12.5, "pack_temp_c": 41.5})))
    assert isinstance(event, AlertEvent) and event.signals[name] == 12.5


def test_an_epoch_millisecond_counter_is_a_reading_but_1e300_is_not() -> None:
    event = parse_event(json.dumps(alert(signals={"gps_fix_time_ms": 1_764_000_000_000})))
    assert isinstance(event, AlertEvent)
    # Set aside, the alert read without it (it refused the alert until this release).
    set_aside(json.dumps(alert(signals={"pack_temp_c": 1e300})), "pack_temp_c", kind="range")


def test_a_whole_battery_snapshot_is_an_alert_not_a_dead_letter() -> None:
    # A BMS snapshot of an 800 V pack: 192 cell voltages, 32 module temperatures and the pack's own readings.
    # Before, anything over 64 signals was a dead letter. The session keeps every reading of an alert.
    signals = {f"cell_{i}_voltage_v": 3.91 for i in range(1, 193)} | {f"module_{i}_temp_c": 31 for i in range(1, 33)}
    signals |= {"pack_voltage_v": 750.7, "pack_current_a": -12.5, "soc_pct": 71}
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent) and len(event.signals) == 227
    assert MAX_SIGNALS == MAX_READINGS  # signal_history can read every signal of the largest alert


def test_a_full_scan_of_128_codes_is_an_alert_not_a_dead_letter() -> None:
    # A full scan after a 12 V dip lists dozens of lost-communication codes. Before, over 32 was a dead letter.
    codes = [f"U{n:04X}" for n in range(0x0100, 0x0100 + MAX_DTC_CODES)]
    event = parse_event(json.dumps(alert(dtc_codes=codes)))
    assert isinstance(event, AlertEvent) and event.dtc_codes == codes and MAX_DTC_CODES == 128


def test_a_platforms_alarms_without_type_id_or_series_are_read() -> None:
    # A telematics platform's feed of alarms names none of the contract's own fields. Until this release each
    # line was a dead letter ("type: must be one of ...", "event_id: Field required", "series: Field required").
    bare = {k: v for k, v in alert().items() if k not in ("type", "event_id", "series")}
    event = parse_event(json.dumps(bare))
    assert isinstance(event, AlertEvent) and event.series == VIN[:8] == "LSVAU218"
    assert event.event_id.startswith("h-") and event.signals == {"cell_voltage_diff_mv": 187.0, "pack_temp_c": 41.5}
    # The id is the event's content: the same event sent again (its fields in any order) has it, another not.
    again = parse_event(json.dumps(dict(reversed(list(bare.items())))))
    assert again.event_id == event.event_id
    assert parse_event(json.dumps(bare | {"ts": "2026-11-01T08:15:31Z"})).event_id != event.event_id
    # A platform's own fields (a time it received the event) are not the event: a resend still has its id.
    assert parse_event(json.dumps(bare | {"received_at": "2026-11-01T08:15:33Z"})).event_id == event.event_id
    assert parse_event(json.dumps(bare | {"alert_text": "another text"})).event_id != event.event_id
    assert parse_event(json.dumps(alert(event_id=None))).event_id.startswith("h-")
    # An alert's type as platforms name it; with no type, the fields give it.
    for kind in ("ALARM", "warning", "Fault", "报警", "告警", "故障"):
        assert isinstance(parse_event(json.dumps(alert(type=kind), ensure_ascii=False)), AlertEvent), kind
    no_type = {k: v for k, v in recheck().items() if k != "type"}
    assert isinstance(parse_event(json.dumps(no_type, ensure_ascii=False)), RecheckEvent)
    no_type = {k: v for k, v in lifecycle().items() if k != "type"}
    assert isinstance(parse_event(json.dumps(no_type)), LifecycleEvent)
    # A series sent is kept; a VIN that is none is still refused (and gives no series).
    assert parse_event(json.dumps(alert(series="EV-B"))).series == "EV-B"  # type: ignore[union-attr]
    error = rejected(json.dumps({k: v for k, v in bare.items()} | {"vin": "LSVAU2180N218329"}))
    assert error.stage == "validate" and "vin" in str(error)


def test_alert_text_of_exactly_4000_chars_is_accepted() -> None:
    event = parse_event(json.dumps(alert(alert_text="压" * 4000), ensure_ascii=False))
    assert isinstance(event, AlertEvent)
    assert len(event.alert_text) == 4000


@pytest.mark.parametrize("type_", ["telemetry", 7, ""])
def test_unknown_type_fails_at_validate_naming_type(type_: str | int) -> None:
    payload = alert(type=type_)
    error = rejected(json.dumps(payload))
    assert error.stage == "validate"
    assert str(error).startswith("type:")
    for valid in ("alert", "recheck", "lifecycle"):
        assert valid in str(error)


# -- session ids ------------------------------------------------------------------


def test_session_id_format_in_utc() -> None:
    assert session_id_for(VIN, datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)) == f"{VIN}-20261101T081530"


def test_session_id_converts_offsets_to_utc() -> None:
    # 2026-11-01 00:05:09 at +08:00 is 2026-10-31 16:05:09 UTC.
    opened = datetime(2026, 11, 1, 0, 5, 9, tzinfo=timezone(timedelta(hours=8)))
    assert session_id_for(VIN, opened) == f"{VIN}-20261031T160509"


def test_session_id_is_deterministic_and_matches_the_parsed_alert() -> None:
    first = parse_event(json.dumps(alert(ts="2026-11-01T16:15:30.7+08:00")))
    again = parse_event(json.dumps(alert(ts="2026-11-01T08:15:30Z")))
    assert session_id_for(first.vin, first.ts) == session_id_for(again.vin, again.ts)
    assert session_id_for(first.vin, first.ts) == f"{VIN}-20261101T081530"


# -- what a real fleet sends, read as the contract's form ---------------------------


def test_a_lower_case_vin_is_the_same_vehicle() -> None:
    event = parse_event(json.dumps(alert(vin=" lsvau2180n2183294 ")))
    assert event.vin == VIN


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        (1_762_000_000, datetime(2025, 11, 1, 12, 26, 40, tzinfo=UTC)),  # Unix seconds
        (1_762_000_000_123, datetime(2025, 11, 1, 12, 26, 40, tzinfo=UTC)),  # Unix milliseconds
        (1_762_000_000.5, datetime(2025, 11, 1, 12, 26, 40, tzinfo=UTC)),
        ("1762000000", datetime(2025, 11, 1, 12, 26, 40, tzinfo=UTC)),  # the same digits as a string
        # Microseconds and nanoseconds (Java's Instant, Go's UnixNano, OpenTelemetry): dead letters until this
        # release ("dates after 9999 are not supported").
        (1_762_000_000_123_456, datetime(2025, 11, 1, 12, 26, 40, tzinfo=UTC)),
        ("1762000000123456", datetime(2025, 11, 1, 12, 26, 40, tzinfo=UTC)),
        (1.762000000123456e15, datetime(2025, 11, 1, 12, 26, 40, tzinfo=UTC)),
        (1_762_000_000_123_456_789, datetime(2025, 11, 1, 12, 26, 40, tzinfo=UTC)),
        ("1762000000123456789", datetime(2025, 11, 1, 12, 26, 40, tzinfo=UTC)),
        (946_684_800_000_000, datetime(2000, 1, 1, tzinfo=UTC)),  # the first second read, in microseconds
        ("2000-01-01T00:00:00Z", datetime(2000, 1, 1, tzinfo=UTC)),
        ("2199-12-31T23:59:59Z", datetime(2199, 12, 31, 23, 59, 59, tzinfo=UTC)),
    ],
)
def test_unix_times_are_read_as_seconds_or_milliseconds_within_the_bounds(ts: object, expected: datetime) -> None:
    assert parse_event(json.dumps(alert(ts=ts))).ts == expected


def test_a_time_out_of_range_is_a_dead_letter_saying_why() -> None:
    error = rejected(json.dumps(alert(ts="1970-01-01T00:00:00Z")))
    assert error.stage == "validate" and "is the vehicle's clock set?" in str(error)
    # In any unit: 1985 in microseconds and in nanoseconds, digits of no unit's range (past 2199 in each).
    for ts in (500_000_000_000_000, 500_000_000_000_000_000, 99_999_999_999_999, 9_999_999_999_999_999_999, 10**20):
        error = rejected(json.dumps(alert(ts=ts)))
        assert error.stage == "validate" and "ts" in str(error), ts
    # Near the year 1, the conversion to UTC itself overflows: still a validation error, not a crash.
    assert rejected(json.dumps(recheck(ts="0001-01-01T00:00:00+01:00"))).stage == "validate"
    assert rejected(json.dumps(lifecycle(ts="0001-01-01T00:00:00+01:00"))).stage == "validate"


def test_uds_trouble_codes_are_read_as_their_obd_code() -> None:
    event = parse_event(json.dumps(alert(dtc_codes=["P0A7F-1B", "p0a7f1b", "U0100-00", "P0300"])))
    assert isinstance(event, AlertEvent)
    assert event.dtc_codes == ["P0A7F", "U0100", "P0300"]


def test_a_dtc_as_its_bytes_is_read_as_its_code() -> None:
    # A gateway reading DTCs over UDS reports each as three bytes (the third its failure type), in hex or as a
    # number; an OBD tool as two. The top two bits are the letter (P, C, B, U). Each was a dead letter.
    for entry, code in (
        ("0x0A7F1B", "P0A7F"), ("0x0a7f", "P0A7F"), ("0xC10000", "U0100"), ("0x4123", "C0123"), ("0x9318", "B1318"),
        (0x0A7F1B, "P0A7F"), (0xC10087, "U0100"),
    ):  # fmt: skip
        event = parse_event(json.dumps(alert(dtc_codes=[entry])))
        assert isinstance(event, AlertEvent) and event.dtc_codes == [code], entry
    event = parse_event(json.dumps(alert(dtc_codes=["0x0A7F1B, 0xC10000", {"dtc": 0x030000, "status": 8}])))
    assert isinstance(event, AlertEvent) and event.dtc_codes == ["P0A7F", "U0100", "P0300"]
    # Not a DTC: another count of hex digits, a number out of three bytes' range, a fraction, a truth value.
    for entry in ("0x0A7F1", "0x0A7F1B00", -1, 0x1000000, 3.5, True):
        code_aside(json.dumps(alert(dtc_codes=[entry])))


def test_a_fleet_that_sends_obds_two_byte_codes_as_numbers_says_so() -> None:
    # An OBD dongle reports Mode 03's codes as two bytes: 768 is 0x0300, P0300. Read as three bytes (UDS, the
    # default) the same number is another code, P0003 (0x000300), and nothing can tell them apart: the fleet
    # says which it sends (VDOCTOR_DTC_NUMBERS=obd).
    sent = [768, {"code": 0x0A7F}, 0xC100, 0x4123, 0x9318, 0, "0x0A7F1B", "P0420"]
    event = parse_event(json.dumps(alert(dtc_codes=sent)), dtc_numbers="obd")
    assert isinstance(event, AlertEvent)
    # 0 pads a Mode 03 reply: no code. Text reads as it always does.
    assert event.dtc_codes == ["P0300", "P0A7F", "U0100", "C0123", "B1318", "P0420"]
    as_uds = parse_event(json.dumps(alert(dtc_codes=[768])))
    assert isinstance(as_uds, AlertEvent) and as_uds.dtc_codes == ["P0003"]
    # A platform that writes every number as a float sends 768.0: the same code, either way.
    for numbers, code in (("obd", "P0300"), ("uds", "P0003")):
        floats = parse_event(json.dumps(alert(dtc_codes=[768.0, {"dtc": 768.0}])), dtc_numbers=numbers)
        assert isinstance(floats, AlertEvent) and floats.dtc_codes == [code]
    # A fraction or a float too large to be exact is no code, named in at most 24 characters.
    for entry in (768.5, 1e300, {"code": 2.5}, 10**40):
        reason = set_aside_error(code_aside(json.dumps(alert(dtc_codes=[entry]))))
        assert re.search(r"set aside: [0-9.e+]{1,23}…? is not a trouble code", reason), reason
    # A number of three bytes is no OBD code: set aside, its dead letter naming the setting.
    for entry in (0x0A7F1B, 0x10000, -1):
        says = "is not a trouble code: an OBD DTC is a number of two bytes (VDOCTOR_DTC_NUMBERS=obd"
        code_aside(json.dumps(alert(dtc_codes=[entry])), says, dtc_numbers="obd")
    with pytest.raises(ValueError, match="dtc_numbers must be one of uds, obd"):
        parse_event(json.dumps(alert()), dtc_numbers="OBD")


def test_trouble_codes_as_gateways_write_them() -> None:
    # A failure type and status byte, a name before the code, its state after it: the code is its five characters.
    sent = [
        "P0A7F 1B", "P0A7F:1B-08", "P0A7F.1B", "U0100 87", "DTC B1318", "C0035 (active)", "P0562-16 [08]",
        "U0073 pending", "dtc: P0301 confirmed",
    ]  # fmt: skip
    event = parse_event(json.dumps(alert(dtc_codes=sent)))
    assert isinstance(event, AlertEvent)
    assert event.dtc_codes == ["P0A7F", "U0100", "B1318", "C0035", "P0562", "U0073", "P0301"]
    # Several codes in one string, each read as one of the list (repeats once).
    event = parse_event(json.dumps(alert(dtc_codes=["P0300,P0301", "P0302; P0300", "U0100 U0121", "P0A7F-1B|P0AFA"])))
    assert isinstance(event, AlertEvent)
    assert event.dtc_codes == ["P0300", "P0301", "P0302", "U0100", "U0121", "P0A7F", "P0AFA"]
    joined = parse_event(json.dumps(alert(dtc_codes=["SPN 1569 FMI 31, SPN 520 FMI 3 OC 2"])))
    assert isinstance(joined, AlertEvent) and joined.dtc_codes == ["SPN1569-FMI31", "SPN520-FMI3"]
    # Still no code: words before one, a description holding another code (which is which is not known), one
    # piece of a list that is none, and a list past the bound.
    for bad in ("garbage P0A7F", "P0A7F misfire P0300", "P0300 - P0301", "P0A7FX", "P0300, oil low", "0x0A7"):
        code_aside(json.dumps(alert(dtc_codes=[bad])), "is not a trouble code")
    error = rejected(json.dumps(alert(dtc_codes=[",".join(f"U{n:04X}" for n in range(129))])))
    assert error.stage == "validate" and "129 trouble codes: at most 128" in str(error)


def test_a_code_with_its_description_or_no_code_at_all_is_read_as_scan_tools_and_gateways_write_them() -> None:
    # Scan tools export a code with its description after it; a J1939 gateway writes a state, a status byte
    # and a conversion method as OBD gateways do. Each was a dead letter.
    sent = [
        "P0A80 - Replace Hybrid Battery Pack", "U0100 Lost Communication With ECM/PCM A", "P0301: Cylinder 1 Misfire",
        "SPN 1569 FMI 31 active", "SPN 100 FMI 1 (Condition Exists)", "SPN 110 FMI 0 [08]", "SPN:190 FMI:2 CM:0 OC:5",
    ]  # fmt: skip
    event = parse_event(json.dumps(alert(dtc_codes=sent)))
    assert isinstance(event, AlertEvent) and event.dtc_codes == [
        "P0A80", "U0100", "P0301", "SPN1569-FMI31", "SPN100-FMI1", "SPN110-FMI0", "SPN190-FMI2",
    ]  # fmt: skip
    # A code that says there is none, as a reading's text does, or an object whose code is null: no code.
    for none in ("", "N/A", "None", "无", ["", "-"], [{"code": "", "description": "no fault"}], [{"code": None}]):
        event = parse_event(json.dumps(alert(dtc_codes=none), ensure_ascii=False))
        assert isinstance(event, AlertEvent) and event.dtc_codes == [], none
    event = parse_event(json.dumps(alert(dtc_codes=["P0A80", "N/A", {"dtcCode": "U0100"}])))
    assert isinstance(event, AlertEvent) and event.dtc_codes == ["P0A80", "U0100"]
    # A null code field beside the code (one schema for every kind of code) hides nothing.
    entries = [{"code": None, "spn": 1569, "fmi": 31}, {"code": "", "dtc": "P0300"}]
    event = parse_event(json.dumps(alert(dtc_codes=entries)))
    assert isinstance(event, AlertEvent) and event.dtc_codes == ["SPN1569-FMI31", "P0300"]
    # Codes after a code are codes of a list, in any form, not its description.
    for listed, codes in (
        ("SPN1569-FMI31 SPN520-FMI2", ["SPN1569-FMI31", "SPN520-FMI2"]), ("P0A7F1B P0A801B", ["P0A7F", "P0A80"]),
        ("P0300 0x0A801B", ["P0300", "P0A80"]), ("P0300 SPN1569-FMI31", ["P0300", "SPN1569-FMI31"]),
    ):  # fmt: skip
        event = parse_event(json.dumps(alert(dtc_codes=[listed])))
        assert isinstance(event, AlertEvent) and event.dtc_codes == codes, listed
    # An entry past the length of a code and its description is none (and a hostile one is refused in linear
    # time: the blanks before a description are never backtracked over).
    for entry in ("P0A80 - " + "x" * 300, "P0300" + " " * 16000 + "X\nY", "SPN1-FMI2" + " " * 16000 + "X\nY"):
        code_aside(json.dumps(alert(dtc_codes=[entry])), "is not a trouble code")
    # A J1939 object's SPN and FMI are whole numbers: a sign is no code, not dropped.
    for entry in ({"spn": 1569, "fmi": -3}, {"spn": -1569, "fmi": 31}):
        code_aside(json.dumps(alert(dtc_codes=[entry])), "must be whole numbers")


def test_j1939_codes_are_read_in_one_written_form() -> None:
    # As gateways of trucks and buses send them; an occurrence count is left out (it is no part of the code).
    sent = ["SPN 1569 FMI 31", "spn1569/fmi31", "SPN:1569-FMI:31", "SPN 520210 FMI 3 OC 7", "SPN0 FMI0", "P0A7F"]
    event = parse_event(json.dumps(alert(dtc_codes=sent)))
    assert isinstance(event, AlertEvent)
    assert event.dtc_codes == ["SPN1569-FMI31", "SPN520210-FMI3", "SPN0-FMI0", "P0A7F"]
    code_aside(json.dumps(alert(dtc_codes=["SPN 1569"])), "not a trouble code like P0A7F or SPN1569-FMI31")


def test_signals_as_fleets_send_them() -> None:
    signals = {
        "pack_temp_C": "41.5",  # upper-case unit, number as text
        "Vehicle.Speed": 62,  # a VSS path
        "soc-pct": " 80 ",
        "charging": True,
        "dc_link_v": None,  # no value from the sensor: left out
        "ambient_temp_c": "\u22125.5",  # the typeset minus, as some locales' number formatting writes it
    }
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent)
    assert event.signals == {
        "pack_temp_c": 41.5, "vehicle_speed": 62.0, "soc_pct": 80.0, "charging": 1.0, "ambient_temp_c": -5.5,
    }  # fmt: skip
    # A number as text is held to the same rules as a number (in range), and is written in plain decimal digits:
    # other text is no number, and is set aside.
    set_aside(json.dumps(alert(signals={"pack_temp_c": "1e300"})), "pack_temp_c", kind="range")
    for text in ("1_000", "١٢٣", "0x1A", "inf", "nan%", "n/a V"):
        set_aside(json.dumps(alert(signals={"pack_temp_c": text})), "pack_temp_c")
    assert parse_event(json.dumps(alert(signals={"pack_temp_c": "-4.5e1"}))).signals == {"pack_temp_c": -45.0}
    # Two names of one alert that read as the same signal: which one is the reading is not known, so both are set
    # aside (they refused the alert until this release).
    set_aside(json.dumps(alert(signals={"Pack_Temp_C": 41, "pack_temp_c": 42})), "Pack_Temp_C", kind="twice")


def test_text_that_says_there_is_no_value_is_no_reading() -> None:
    # A CSV's empty cell, "N/A", "--", pandas' NaN, GB/T 32960's 无效 ("invalid"): the sensor gave no value, as
    # null says. Until this release each made the whole alert a dead letter ("is not a number").
    for text in ("", " ", "N/A", "n/a", "NA", "-", "--", "---", "null", "None", "NaN", "nan", "无", "无效"):
        event = parse_event(json.dumps(alert(signals={"pack_temp_c": text, "soc_pct": 80})))
        assert isinstance(event, AlertEvent) and event.signals == {"soc_pct": 80.0}, text
    # So in a list of readings, with or without a unit beside it.
    readings = [{"name": "pack_temp", "value": "N/A", "unit": "°F"}, {"name": "soc", "value": "--", "unit": "%"}]
    event = parse_event(json.dumps(alert(signals=readings)))
    assert isinstance(event, AlertEvent) and event.signals == {}


def test_numbers_written_with_commas_are_read_where_they_can_mean_one_number() -> None:
    # Spreadsheets and platforms in other locales: a decimal comma, thousands grouped by commas or by points.
    # Until this release each was a dead letter ("is not a number (nor one with a known unit)").
    for text, number in (
        ("41,5", 41.5), ("-3,25", -3.25), ("0,187", 0.187), ("1234,567", 1234.567), ("12,345,678", 12345678.0),
        ("12,345.6", 12345.6), ("12.345,6", 12345.6), ("+1,000,000.5", 1000000.5),
    ):  # fmt: skip
        event = parse_event(json.dumps(alert(signals={"trip_energy_kwh": text})))
        assert isinstance(event, AlertEvent) and event.signals == {"trip_energy_kwh": number}, text
    # With a unit after it, converted as any number is.
    event = parse_event(json.dumps(alert(signals={"cell_voltage_diff_mv": "0,187 V", "pack_voltage_v": "1.234,5 V"})))
    assert isinstance(event, AlertEvent) and event.signals == {"cell_voltage_diff_mv": 187.0, "pack_voltage_v": 1234.5}
    # One comma before three digits: 12345 or 12.345, a thousand times apart; set aside, naming both.
    for text in ("12,345", "12,345 km"):
        event = set_aside(json.dumps(alert(signals={"odometer_km": text})), "odometer_km")
        assert "12345 or 12.345?" in set_aside_error(event), text
    for text in ("1,2,3", "41,5,6", ",5", "5,", "warm, 41.5"):  # no number: set aside
        set_aside(json.dumps(alert(signals={"odometer_km": text})), "odometer_km")


def test_a_fleet_that_says_how_it_writes_a_comma_has_its_ambiguous_numbers_read() -> None:
    # A fleet knows its own convention: a US platform's "1,200" rpm groups thousands, a German one's "1,013"
    # bar has a decimal comma. Told which (VDOCTOR_NUMBER_COMMA), the job reads the one form that could be
    # either; until this release every such reading made its alert a dead letter whatever the fleet said.
    signals = {"engine_rpm": "1,200", "odometer_km": "12,345 km", "brake_pressure_bar": "1,013"}
    line = json.dumps(alert(signals=signals))
    unset = set_aside(line, "engine_rpm")
    assert unset.signals_set_aside == signals
    assert "1200 or 1.200?" in set_aside_error(unset) and "VDOCTOR_NUMBER_COMMA" in set_aside_error(unset)
    thousands = parse_event(line, number_comma="thousands")
    assert isinstance(thousands, AlertEvent)
    assert thousands.signals == {"engine_rpm": 1200.0, "odometer_km": 12345.0, "brake_pressure_bar": 1013.0}
    decimal = parse_event(line, number_comma="decimal")
    assert isinstance(decimal, AlertEvent)
    assert decimal.signals == {"engine_rpm": 1.2, "odometer_km": 12.345, "brake_pressure_bar": 1.013}
    # The same in a list of readings with their units, converted to the name's unit after it is read.
    readings = [{"name": "Cell Voltage Diff", "value": "0,187", "unit": "V"}, {"name": "pack_v", "value": "1,013"}]
    read = parse_event(json.dumps(alert(signals=readings)), number_comma="decimal")
    assert isinstance(read, AlertEvent) and read.signals == {"cell_voltage_diff_v": 0.187, "pack_v": 1.013}
    listed = [{"name": "pack_voltage_mv", "value": "3,610", "unit": "V"}]
    assert rejected(json.dumps(alert(signals=listed))).stage == "validate"
    read = parse_event(json.dumps(alert(signals=listed)), number_comma="decimal")
    assert isinstance(read, AlertEvent) and read.signals == {"pack_voltage_mv": 3610.0}
    # Every form that means one number reads the same whatever the setting says.
    for comma in ("decimal", "thousands"):
        for text, number in (("41,5", 41.5), ("0,187", 0.187), ("12,345,678", 12345678.0), ("12.345,6", 12345.6)):
            event = parse_event(json.dumps(alert(signals={"odometer_km": text})), number_comma=comma)
            assert isinstance(event, AlertEvent) and event.signals == {"odometer_km": number}, (comma, text)
    # No number stays no number (set aside).
    for text in ("1,2,3", ",5", "5,"):
        set_aside(json.dumps(alert(signals={"odometer_km": text})), "odometer_km", number_comma="thousands")
    with pytest.raises(ValueError, match="number_comma must be one of decimal, thousands"):
        parse_event(line, number_comma="comma")
    assert number_comma(" Decimal ") == "decimal"
    with pytest.raises(ValueError, match="VDOCTOR_NUMBER_COMMA must be decimal"):
        number_comma("european")


def test_a_reading_as_an_object_under_its_name_is_read_with_its_unit() -> None:
    # {"name": {"value": ..., "unit": ...}}, keys in any case: one reading, its unit read as beside a list's
    # reading (the name's suffix when it has none, converted to the name's, refused in another quantity's).
    # Until this release it was read as two readings, "<name>.value" and "<name>.unit", and a dead letter.
    signals = {
        "pack_temp_c": {"value": 41.5, "unit": "°C"}, "inlet_temp": {"Value": 105, "Unit": "°F"},
        "bms": {"cell_v": {"value": 3610, "unit": "mV"}, "soc_pct": {"value": "N/A"}},
        "odometer_km": {"value": "10 mi"},
    }  # fmt: skip
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent)
    assert event.signals == {"pack_temp_c": 41.5, "inlet_temp_f": 105.0, "bms_cell_v": 3.61, "odometer_km": 16.09344}
    # In a unit its name does not allow, it is set aside as the same reading written "12 °C" is (it refused the
    # alert until this release).
    event = set_aside(json.dumps(alert(signals={"cell_voltage_diff_mv": {"value": 12, "unit": "°C"}})),
                      "cell_voltage_diff_mv", kind="unit")  # fmt: skip
    assert event.signals_set_aside == {"cell_voltage_diff_mv": "12 °C"}
    # An object with another number in it and no unit is a nested payload, read by its paths as before.
    event = parse_event(json.dumps(alert(signals={"sensor": {"value": 1, "ts": 1762000000}})))
    assert isinstance(event, AlertEvent) and event.signals == {"sensor_value": 1.0, "sensor_ts": 1762000000.0}
    # What a platform writes beside a reading (its time, quality, status) is left out with it, and its unit may
    # be under units or uom: the time made the alert a dead letter ("pack_temp_timestamp is not a number"), and
    # the quality turned the value into pack_temp_value and set the unit aside as a state.
    signals = {
        "pack_temp": {"value": 41.5, "unit": "°C", "timestamp": "2026-11-01T08:15:30Z", "ts": 1762000000},
        "coolant_temp": {"Value": 88, "Quality": "GOOD"}, "cell_v": {"value": 3.61, "units": "V"},
    }  # fmt: skip
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent) and event.signals_set_aside == {}
    assert event.signals == {"pack_temp_c": 41.5, "coolant_temp": 88.0, "cell_v": 3.61}
    listed = [{"name": "Pack Temp", "value": 41.5, "UoM": "°C", "quality": "GOOD"}]
    event = parse_event(json.dumps(alert(signals=listed)))
    assert isinstance(event, AlertEvent) and event.signals == {"pack_temp_c": 41.5}
    # A null unit field beside one that names it: the one that names it.
    event = parse_event(json.dumps(alert(signals={"pack_temp_c": {"value": 41, "unit": None, "uom": "°F"}})))
    assert isinstance(event, AlertEvent) and event.signals == {"pack_temp_c": 5.0}


def test_a_reading_sent_as_text_with_its_unit_is_the_number() -> None:
    # The unit the name declares, as people write it; or any known unit where the name declares none, which
    # becomes its suffix as a unit given beside the value does (battery_voltage in V: battery_voltage_v).
    signals = {
        "cell_voltage_diff_mv": "187 mV", "pack_temp_c": "41.5℃", "inlet_temp_c": "38 °C", "soc_pct": "80%",
        "speed_kmh": "62 km/h", "insulation_res_kohm": "500kΩ", "insulation_res_megohm": "5 MΩ",
        "energy_kwh": "12 KWH", "torque_nm": "120 N·m", "battery_voltage": "12.6V",
    }  # fmt: skip
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent)
    assert event.signals == {
        "cell_voltage_diff_mv": 187.0, "pack_temp_c": 41.5, "inlet_temp_c": 38.0, "soc_pct": 80.0, "speed_kmh": 62.0,
        "insulation_res_kohm": 500.0, "insulation_res_megohm": 5.0, "energy_kwh": 12.0, "torque_nm": 120.0,
        "battery_voltage_v": 12.6,
    }  # fmt: skip
    # Another unit of the same quantity: converted to the name's (to 12 significant digits, so that 0.187 V is
    # 187 mV and not 187.00000000000003). Until this release each was a dead letter.
    converted = {
        "cell_voltage_diff_mv": "0.187 V", "pack_temp_c": "105 °F", "coolant_kpa": "1.1 bar", "speed_kmh": "20 m/s",
        "idle_min": "3 hrs", "insulation_res_kohm": "0.5 MΩ", "pack_voltage_v": "398500 mV", "oil_temp_f": "100 °C",
    }  # fmt: skip
    event = parse_event(json.dumps(alert(signals=converted)))
    assert isinstance(event, AlertEvent)
    assert event.signals == {
        "cell_voltage_diff_mv": 187.0, "pack_temp_c": 40.5555555556, "coolant_kpa": 110.0, "speed_kmh": 72.0,
        "idle_min": 180.0, "insulation_res_kohm": 500.0, "pack_voltage_v": 398.5, "oil_temp_f": 212.0,
    }  # fmt: skip
    # A unit of another quantity, or one that differs from the name's by its case alone (mΩ and MΩ: a name's
    # suffix is lower case, so _mohm may mean either, a factor of a billion): which one is right is not known,
    # and the reading is set aside, naming both.
    for name, text, said in (
        ("cell_voltage_diff_mv", "12 °C", "(°C, the name's unit is mV)"),
        ("insulation_res_mohm", "5 MΩ", "(MΩ, the name's unit is mΩ)"),
        ("soc_pct", "80 V", "(V, the name's unit is %)"),
    ):
        event = set_aside(json.dumps(alert(signals={name: text})), name)
        assert said in set_aside_error(event), text
    # No number, or words that are no unit: set aside.
    for text in ("12.6 volts please", "12 34", "12.6e", "12abc", "3,6,7 V", "V 12.6"):
        set_aside(json.dumps(alert(signals={"battery_voltage": text})), "battery_voltage")


def test_a_unit_in_its_compatibility_characters_is_the_same_unit() -> None:
    # The micro sign and the Greek mu, the ohm sign and the Greek omega, full-width letters and the squared
    # units of CJK fonts are the same units to the people who type them. The ohm sign keeps megohms apart.
    signals = {
        "leak_current_ua": "12 \u03bcA", "standby_current_ua": "9 \u00b5A", "insulation_res_megohm": "5 M\u2126",
        "insulation_res_mohm": "5 m\u2126", "isolation_kohm": "480\u33c0",
        "coolant_kpa": "110 \uff4b\uff30\uff41", "cell_voltage_diff_mv": "187\u33b7", "ground_res_megohm": "2 MOhm",
    }  # fmt: skip
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent)
    assert event.signals == {
        "leak_current_ua": 12.0, "standby_current_ua": 9.0, "insulation_res_megohm": 5.0, "insulation_res_mohm": 5.0,
        "isolation_kohm": 480.0, "coolant_kpa": 110.0, "cell_voltage_diff_mv": 187.0, "ground_res_megohm": 2.0,
    }  # fmt: skip
    # Megohms written with the ohm sign are no milliohms: a milliohm name sets them aside, as with the omega.
    event = set_aside(json.dumps(alert(signals={"insulation_res_mohm": "5 M\u2126"})), "insulation_res_mohm")
    assert "(M\u03a9, the name's unit is m\u03a9)" in set_aside_error(event)
    # A unit given beside the value (a list of readings) is read the same way, and names the unit.
    listed = [{"name": "Leak Current", "value": 12, "unit": "\u03bcA"}, {"name": "Iso", "value": 5, "unit": "M\u2126"}]
    event = parse_event(json.dumps(alert(signals=listed)))
    assert isinstance(event, AlertEvent) and event.signals == {"leak_current_ua": 12.0, "iso_megohm": 5.0}


def test_a_unit_with_a_slash_is_read_in_any_case() -> None:
    # Litres and kilometres as people type them: "l/min" was a dead letter, "L/min" was read.
    signals = {"coolant_flow_lpm": "12 l/min", "fuel_rate_lph": "3.5 l/h", "speed_kmh": "62 KM/H",
               "accel_mps2": "1.2 m/s2", "flow": "4 L/MIN"}  # fmt: skip
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent)
    assert event.signals == {"coolant_flow_lpm": 12.0, "fuel_rate_lph": 3.5, "speed_kmh": 62.0, "accel_mps2": 1.2,
                             "flow_lpm": 4.0}  # fmt: skip
    listed = [{"name": "Coolant Flow", "value": 12, "unit": "l/min"}]
    event = parse_event(json.dumps(alert(signals=listed)))
    assert isinstance(event, AlertEvent) and event.signals == {"coolant_flow_lpm": 12.0}


def test_units_as_telemetry_writes_them_are_read() -> None:
    # Engine speed as Chinese data sheets write it, plurals and spelled-out units, relative humidity: each was a
    # dead letter ("not a number, nor one with a known unit").
    signals = {"engine_rpm": "3000 r/min", "motor_speed": "4500 rev/min", "accel_mps2": "1.2 m/s^2",
               "torque_nm": "210 N.m", "ground_res_ohm": "3 ohms", "iso_kohm": "480 kOhms", "oil_temp_f": "212 degF",
               "engine_hours_h": "1250 hrs", "idle": "12 mins", "service_due": "30 days", "trip_mi": "12 miles",
               "speed_kmh": "62 kmph", "cabin_humidity_pct": "45 %RH"}  # fmt: skip
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent)
    assert event.signals["engine_rpm"] == 3000.0 and event.signals["cabin_humidity_pct"] == 45.0
    assert len(event.signals) == len(signals)
    # A unit written so is still read against the name's: hours in minutes, and no reading of another quantity.
    event = parse_event(json.dumps(alert(signals={"idle_min": "3 hrs", "trip_km": "12 miles"})))
    assert isinstance(event, AlertEvent) and event.signals == {"idle_min": 180.0, "trip_km": 19.312128}
    event = set_aside(json.dumps(alert(signals={"trip_km": "3 hrs"})), "trip_km")
    assert "(h, the name's unit is km)" in set_aside_error(event)


def test_units_spelled_as_platforms_and_data_sheets_write_them() -> None:
    # Each was a dead letter ("not a number, nor one with a known unit").
    signals = {
        "pack_voltage_v": "398.5 V DC", "aux_v": "12.6VDC", "dcdc_v": "13.8 volts", "pack_current_a": "150 amps",
        "idle_min": "5 minutes", "pack_temp_c": "41.5 \u00baC", "cabin_temp_c": "21 \u02daC",
        "oil_temp_c": "100 Celsius", "engine_rpm": "1200 U/min", "motor_rpm": "3000 1/min", "heater_w": "1500 watts",
    }  # fmt: skip
    event = parse_event(json.dumps(alert(signals=signals), ensure_ascii=False))
    assert isinstance(event, AlertEvent) and event.signals == {
        "pack_voltage_v": 398.5, "aux_v": 12.6, "dcdc_v": 13.8, "pack_current_a": 150.0, "idle_min": 5.0,
        "pack_temp_c": 41.5, "cabin_temp_c": 21.0, "oil_temp_c": 100.0, "engine_rpm": 1200.0, "motor_rpm": 3000.0,
        "heater_w": 1500.0,
    }  # fmt: skip


def test_milli_and_mega_are_read_by_their_written_case() -> None:
    # "mW" was read case-blind as megawatts, a billion times the reading; hPa was no unit at all.
    signals = {"heater_power_w": "50 mW", "ambient_kpa": "1013 hPa", "Barometric Pressure (hPa)": 1013,
               "RF Power (mW)": 20, "charger_power_mw": "1200 kW"}  # fmt: skip
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent) and event.signals == {
        "heater_power_w": 0.05, "ambient_kpa": 101.3, "barometric_pressure_hpa": 1013.0, "rf_power_milliw": 20.0,
        "charger_power_mw": 1.2,
    }  # fmt: skip
    # A name is lower case: _mw stays megawatts (a megawatt charger's power), in any case it is written in, and
    # milliwatts have a suffix of their own, as megohms do.
    assert [unit_of(name) for name in ("rf_power_milliw", "charger_power_mw", "barometric_pressure_hpa")] == [
        "mW", "MW", "hPa",
    ]  # fmt: skip
    assert [signal_name(n) for n in ("gridPowerMW", "GRID_POWER_MW", "Power (mW)", "heaterPowermW")] == [
        "grid_power_mw", "grid_power_mw", "power_milliw", "heater_power_milliw",
    ]  # fmt: skip
    # In one case throughout, a unit is read case-blind as before; a written case that says neither is no unit
    # of the table, never megapascals: the reading is set aside.
    event = parse_event(json.dumps(alert(signals={"brake_kpa": "5 MPA", "pack_kwh": "60 KWh"})))
    assert isinstance(event, AlertEvent) and event.signals == {"brake_kpa": 5000.0, "pack_kwh": 60.0}
    set_aside(json.dumps(alert(signals={"brake_pressure_mpa": "5 mPa"})), "brake_pressure_mpa")


def test_a_suffix_that_may_be_a_word_is_one_when_the_reading_is_sent_in_another_quantity() -> None:
    # _min is minutes or a minimum, _c degrees Celsius or phase C, _t tonnes or a temperature: a reading sent in
    # a unit of another quantity says which. It is read in its own unit, under its name with that unit's
    # suffix, where it used to make the alert a dead letter ("is in V, its name's unit is min"): minimum cell
    # voltages and temperatures are what every battery pack reports.
    signals = {
        "cell_voltage_min": "3.21 V", "cell_temp": {"min": "-5 °C", "max": 41}, "motor_current_phase_c": "150 A",
        "cells_3_t": {"value": 20, "unit": "°C"},
    }  # fmt: skip
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent) and event.signals == {
        "cell_voltage_min_v": 3.21, "cell_temp_min_c": -5.0, "cell_temp_max": 41.0, "motor_current_phase_c_a": 150.0,
        "cells_3_t_c": 20.0,
    }  # fmt: skip
    listed = [{"name": "Cell Voltage Min", "value": 3210, "unit": "mV"}, {"name": "Cell Temp Min", "value": "-5"}]
    event = parse_event(json.dumps(alert(signals=listed)))
    assert isinstance(event, AlertEvent) and event.signals == {"cell_voltage_min_mv": 3210.0, "cell_temp_min": -5.0}
    # In the suffix's own quantity it is its unit still, converted as before.
    event = parse_event(json.dumps(alert(signals={"idle_min": "3 hrs", "pack_temp_c": "105 °F"})))
    assert isinstance(event, AlertEvent) and event.signals == {"idle_min": 180.0, "pack_temp_c": 40.5555555556}
    # A suffix that is a unit only, or a unit of the same quantity in another case (mΩ, MΩ), is its unit still:
    # a reading in another is set aside. A suffix elsewhere is the unit it spells: pack_temp_c sent in volts is
    # a reading in the wrong unit.
    for signals in ({"cell_voltage_diff_mv": "12 °C"}, {"insulation_res_mohm": "5 MΩ"}, {"soc_pct": "80 V"},
                    {"pack_temp_c": "106.7 V"}, {"pack_current_a": "41 °C"}):  # fmt: skip
        ((name, _),) = signals.items()
        set_aside(json.dumps(alert(signals=signals)), name)
    # A renamed reading whose new name another reading of the alert has: the earlier one is kept, the later set
    # aside (the whole alert was refused).
    event = parse_event(json.dumps(alert(signals={"cell_voltage_min": "3.21 V", "cell_voltage_min_v": 3.3})))
    assert isinstance(event, AlertEvent) and event.signals["cell_voltage_min_v"] == 3.21
    assert event.signals_set_aside == {"cell_voltage_min_v": "3.3"}


def test_signal_names_of_flattened_payloads_and_tables() -> None:
    # An array's items and a table's columns, as a telematics platform flattens or exports them.
    signals = {
        "battery.cells[3].temp_c": 41,  # a flattened array item
        "cell_v[12]": 3.61,
        "BMS/PackVolt": 398,
        "bms:soc": 80,
        "Pack Voltage (V)": 398.5,  # a table's column with its unit
        "Cell Temp [7] (°C)": 39,
        "SOC (%)": 80.5,
        "soh%": 97,
        "inverter_temp_°C": 55,
    }
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent)
    assert event.signals == {
        "battery_cells_3_temp_c": 41.0, "cell_v_12": 3.61, "bms_pack_volt": 398.0, "bms_soc": 80.0,
        "pack_voltage_v": 398.5, "cell_temp_7_c": 39.0, "soc_pct": 80.5, "soh_pct": 97.0, "inverter_temp_c": 55.0,
    }  # fmt: skip
    # The units in brackets are read as any name's suffix.
    assert [unit_of(n) for n in ("pack_voltage_v", "cell_temp_7_c", "soc_pct")] == ["V", "°C", "%"]
    # Still no name: nothing but an index (set aside, its alert kept); brackets inside brackets are parts too.
    set_aside(json.dumps(alert(signals={"[3]": 1})), "[3]", kind="form")
    event = parse_event(json.dumps(alert(signals={"a(b[1])": 1})))
    assert isinstance(event, AlertEvent) and event.signals == {"a_b_1": 1.0}
    # Two readings under one name: both set aside, which one is the reading is not known.
    event = set_aside(json.dumps(alert(signals={"cell_v[12]": 3.6, "cell_v_12": 3.7})), "cell_v[12]", kind="twice")
    assert set(event.signals_set_aside) == {"cell_v[12]", "cell_v_12"} and event.signals == {}


def test_readings_nested_in_objects_and_arrays_are_read_by_their_paths() -> None:
    # A platform's payload as it nests readings (GB/T 32960's decoded data, an OEM's API): each reading named by
    # its path as a flattening platform writes it (a key after a ".", an array's item by its index from 0), so the
    # same payload flattened or not is read alike. Each such alert was a dead letter ("should be a valid number").
    nested = {
        "bms": {"PackTemp": "41.5 °C", "soc_pct": 80, "cell_v": [3.61, 3.62], "faults": {}},
        "modules": [{"temp_c": 30.5}, {"temp_c": None}],
        "speed_kmh": 62,
    }
    flattened = {"bms.PackTemp": "41.5 °C", "bms.soc_pct": 80, "bms.cell_v[0]": 3.61, "bms.cell_v[1]": 3.62,
                 "modules[0].temp_c": 30.5, "speed_kmh": 62}  # fmt: skip
    expected = {"bms_pack_temp_c": 41.5, "bms_soc_pct": 80.0, "bms_cell_v_0": 3.61, "bms_cell_v_1": 3.62,
                "modules_0_temp_c": 30.5, "speed_kmh": 62.0}  # fmt: skip
    for signals in (nested, flattened):
        event = parse_event(json.dumps(alert(signals=signals)))
        assert isinstance(event, AlertEvent) and event.signals == expected
    # A nested reading is read as any: its value checked (text that is no number set aside), its name unique,
    # their count bounded.
    set_aside(json.dumps(alert(signals={"bms": {"soc_pct": "80 warm"}})), "bms.soc_pct")
    set_aside(json.dumps(alert(signals={"bms": {"soc_pct": 80}, "bms_soc_pct": 81})), "bms_soc_pct", kind="twice")
    error = rejected(json.dumps(alert(signals={"cells": [3.6] * (MAX_SIGNALS + 1)})))
    assert error.stage == "validate" and "at most 256 items" in str(error)


def test_an_array_item_has_the_unit_of_its_arrays_name() -> None:
    # A battery snapshot's cell voltages as one array under a name with its unit (cell_voltage_v[3] once
    # flattened): each item is named by its index after the array's name, and read in the array's unit. Until
    # this release the index ended the name, so its unit went unread: "3620 mV" was taken as 3620 of no unit,
    # and a reading in another quantity's unit was not refused.
    signals = {"bms": {"cell_voltage_v": [3.61, "3620 mV"]}, "cell_temps_c": [[20, "70 °F"]], "cells": [1]}
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent)
    assert event.signals == {
        "bms_cell_voltage_v_0": 3.61, "bms_cell_voltage_v_1": 3.62,
        "cell_temps_c_0_0": 20.0, "cell_temps_c_0_1": 21.1111111111, "cells_0": 1.0,
    }  # fmt: skip
    assert [unit_of(n) for n in ("bms_cell_voltage_v_1", "cell_temps_c_0_1", "cells_0", "gear_2")] == [
        "V", "°C", None, None,
    ]  # fmt: skip
    # Spans, key facts and the fidelity check read the unit from the name alike.
    assert ReadingSpan.of("bms_cell_voltage_v_1", [3.62]).render() == "bms_cell_voltage_v_1=3.62V"
    event = set_aside(json.dumps(alert(signals={"cell_voltage_v": ["12 °C"]})), "cell_voltage_v[0]")
    assert "'cell_voltage_v[0]' = '12 °C' (°C, the name's unit is V)" in set_aside_error(event)


def test_camel_case_signal_names_are_read_as_snake_case_with_their_units() -> None:
    # A Java or JavaScript platform's names: each word a part of its own, the unit at the end as one, so that
    # the unit is read and the knowledge pack's signals (cell_voltage_diff_mv) are found.
    signals = {
        "cellVoltageDiff_mV": 187, "HVBattTempC": 41.5, "tirePressureKPa": 230, "insulationResMOhm": 5,
        "isoRes_mOhm": 80, "energyKWh": 12, "engineRPM": 2100, "SOCPct": 80, "12VBatteryV": 12.6,
        "accelX": 0.2, "Leak Current (µA)": 9,
    }  # fmt: skip
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent)
    assert event.signals == {
        "cell_voltage_diff_mv": 187.0, "hv_batt_temp_c": 41.5, "tire_pressure_kpa": 230.0,
        "insulation_res_megohm": 5.0, "iso_res_mohm": 80.0, "energy_kwh": 12.0, "engine_rpm": 2100.0,
        "soc_pct": 80.0, "12v_battery_v": 12.6, "accel_x": 0.2, "leak_current_ua": 9.0,
    }  # fmt: skip
    assert [unit_of(n) for n in event.signals] == ["mV", "°C", "kPa", "MΩ", "mΩ", "kWh", "rpm", "%", "V", None, "µA"]
    # State of charge and health as battery people write them: no unit read into them (SoC is not so_c, °C).
    for given, read in (("batterySoC", "battery_soc"), ("SoH", "soh"), ("DoD_pct", "dod_pct"), ("SoCPct", "soc_pct"),
                        ("HVBattSoC", "hv_batt_soc"), ("packTempC", "pack_temp_c")):  # fmt: skip
        assert signal_name(given) == read, given
    assert unit_of(signal_name("batterySoC")) is None
    # Megohms however the word before them is written: a whole word, after a word, with the ohm sign.
    for given in ("ResMohm", "resMΩ", "Res_MOhm", "insulationResMOhm", "Iso (MΩ)"):
        assert unit_of(signal_name(given)) == "MΩ", given
    assert unit_of(signal_name("res_mOhm")) == "mΩ"
    # Names already in one case, or in words, read as before.
    for given, read in (("PACK_TEMP_C", "pack_temp_c"), ("Pack Voltage (V)", "pack_voltage_v"), ("12V Battery",
                        "12v_battery"), ("Cell Voltage Diff (mV)", "cell_voltage_diff_mv")):  # fmt: skip
        assert signal_name(given) == read
    # A long camelCase name grows by its words' underscores: one of 64 characters is still read.
    long_name = "hvBatteryManagementSystemCellVoltageDifferenceMaximumValue_mV"
    read = signal_name(long_name)
    assert read == "hv_battery_management_system_cell_voltage_difference_maximum_value_mv" and len(read) > 64
    event = parse_event(json.dumps(alert(signals={long_name: 187})))
    assert isinstance(event, AlertEvent) and event.signals == {read: 187.0}
    event = parse_event(json.dumps(alert(signals={"a" * 97: 1, "pack_temp_c": 41})))
    assert isinstance(event, AlertEvent) and event.signals == {"pack_temp_c": 41.0}
    assert event.signals_set_aside_why == {"a" * 97: ("form", "97 characters once read")}
    # The same signal in two spellings of one alert: which one is the reading is not known (both set aside).
    event = set_aside(json.dumps(alert(signals={"packTempC": 41, "pack_temp_c": 42})), "packTempC", kind="twice")
    assert event.signals_set_aside == {"packTempC": "41", "pack_temp_c": "42"}


def test_a_units_prefix_glued_to_its_quantity_is_read_as_the_units() -> None:
    # A platform that writes the unit after the word with no capital of its own (cellVoltagemV): the prefix is
    # the unit's, so the reading is in millivolts. Until this release the name was cell_voltagem_v, in volts:
    # 3610 mV read as 3610 V, and the knowledge pack's rules never saw the signal by its name.
    for given, read, unit in (
        ("cellVoltagemV", "cell_voltage_mv", "mV"), ("packCurrentmA", "pack_current_ma", "mA"),
        ("CellVoltmV", "cell_volt_mv", "mV"), ("packPowerkW", "pack_power_kw", "kW"),
        ("energykWh", "energy_kwh", "kWh"), ("insulationkOhm", "insulation_kohm", "kΩ"),
        ("CellResmOhm", "cell_res_mohm", "mΩ"), ("tirePressurekPa", "tire_pressure_kpa", "kPa"),
        ("leakCurrentuA", "leak_current_ua", "µA"),
    ):  # fmt: skip
        assert (signal_name(given), unit_of(signal_name(given))) == (read, unit), given
    # Only after a word that names a quantity: other words may end in m or k before a unit of their own.
    for given, read in (("systemV", "system_v"), ("packV", "pack_v"), ("alarmA", "alarm_a"),
                        ("packVoltageV", "pack_voltage_v")):  # fmt: skip
        assert signal_name(given) == read, given
    event = parse_event(json.dumps(alert(signals={"cellVoltageDiffmV": 187})))
    assert isinstance(event, AlertEvent) and event.signals == {"cell_voltage_diff_mv": 187.0}


def test_units_glued_to_a_name_or_written_with_a_slash_are_read_as_its_suffix() -> None:
    # A unit symbol outside ASCII right after a camelCase word: a part of its own, with its prefix. Before, the
    # micro sign joined the word before it and leakCurrentµA read as amperes, a million times its value.
    for given, read, unit in (
        ("leakCurrentµA", "leak_current_ua", "µA"), ("leakCurrentμA", "leak_current_ua", "µA"),
        ("cellResistancemΩ", "cell_resistance_mohm", "mΩ"), ("isoResistancekΩ", "iso_resistance_kohm", "kΩ"),
        ("insulationResMΩ", "insulation_res_megohm", "MΩ"), ("insulationΩ", "insulation_ohm", "Ω"),
        ("packTemp℃", "pack_temp_c", "°C"), ("packTemp°C", "pack_temp_c", "°C"), ("oilTemp°F", "oil_temp_f", "°F"),
        # A unit with a slash is its suffix: speed_km/h read as hours before, and "62 km/h" was refused for it.
        ("speed_km/h", "speed_kmh", "km/h"), ("Vehicle Speed (km/h)", "vehicle_speed_kmh", "km/h"),
        ("Fuel rate (L/h)", "fuel_rate_lph", "L/h"), ("accel_m/s²", "accel_mps2", "m/s²"),
        ("consumption_L/100km", "consumption_l100km", "L/100km"),
    ):  # fmt: skip
        assert (signal_name(given), unit_of(signal_name(given))) == (read, unit), given
    # A slash between words is a separator, as before; so is a degree sign that is not a temperature's.
    for given, read in (("BMS/PackVolt", "bms_pack_volt"), ("cells[3]/temp", "cells_3_temp"),
                        ("steeringAngle°", "steering_angle"), ("res_mΩ", "res_mohm"), ("A/C_pressure", "a_c_pressure"),
                        ("valve_a/h", "valve_a_h"), ("EngineSpeed(r/min)", "engine_speed_rpm")):  # fmt: skip
        assert signal_name(given) == read, given
    sent = {"speed_km/h": "62 km/h", "leakCurrentµA": "9 µA"}
    event = parse_event(json.dumps(alert(signals=sent), ensure_ascii=False))
    assert isinstance(event, AlertEvent) and event.signals == {"speed_kmh": 62.0, "leak_current_ua": 9.0}


def test_signal_names_outside_ascii_are_read_in_latin_letters() -> None:
    # A European export's accented names, an IME's full-width forms, unit symbols in a name.
    signals = {
        "Température batterie (°C)": 41.5,
        "Öltemperatur": 96,
        "Straße_Speed (km/h)": 62,
        "ＳＯＣ（％）": 80,
        "Insulation Resistance (MΩ)": 2.5,
        "contact_res (mΩ)": 0.8,
        "insulation_res_kΩ": 480,
        "leak_current_µA": 12,
        "motor_temp_℃": 77,
    }
    event = parse_event(json.dumps(alert(signals=signals), ensure_ascii=False))
    assert isinstance(event, AlertEvent)
    assert event.signals == {
        "temperature_batterie_c": 41.5, "oltemperatur": 96.0, "strasse_speed_kmh": 62.0, "soc_pct": 80.0,
        "insulation_resistance_megohm": 2.5, "contact_res_mohm": 0.8, "insulation_res_kohm": 480.0,
        "leak_current_ua": 12.0, "motor_temp_c": 77.0,
    }  # fmt: skip
    # MΩ and mΩ stay apart, as every unit the name now declares.
    assert [unit_of(n) for n in ("insulation_resistance_megohm", "contact_res_mohm", "leak_current_ua")] == [
        "MΩ", "mΩ", "µA",
    ]  # fmt: skip
    # Two spellings of one name are one name, as with case.
    raw = json.dumps(alert(signals={"Température_c": 40, "temperature_c": 41}), ensure_ascii=False)
    set_aside(raw, "Température_c", kind="twice")
    # Another script has no Latin form: the reading is set aside, and the alert is read without it.
    for name in ("电池温度", "temp_батареи", "温度_c"):
        event = parse_event(json.dumps(alert(signals={name: 41.5, "pack_temp_c": 40}), ensure_ascii=False))
        assert isinstance(event, AlertEvent), name
        assert (event.signals, event.signals_set_aside) == ({"pack_temp_c": 40.0}, {name: 41.5}), name
        reason = set_aside_error(event)
        assert "not written in Latin letters" in reason and "VDOCTOR_SIGNAL_NAMES" in reason and repr(name) in reason
    # Its reading is still a reading: one out of range is set aside as such, as under any name.
    set_aside(json.dumps(alert(signals={"电池温度": 1e300}), ensure_ascii=False), "电池温度", kind="range")


def test_a_reading_sent_as_a_state_is_set_aside_and_the_alert_diagnosed_without_it() -> None:
    # Telematics platforms send states beside the numbers: a charger's state, a gear, a door. A reading is a
    # number (DESIGN 3.1), so a state is set aside as a name in another script is: the alert is read without
    # it, and its line goes to the dead letters as well, naming it. Until this release one such reading made
    # the whole alert a dead letter.
    signals = {"charging_state": "CHARGING", "gear": "D", "bms": {"contactor": "closed"}, "pack_temp_c": "41,5"}
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent) and event.signals == {"pack_temp_c": 41.5}
    assert event.signals_set_aside == {"charging_state": "CHARGING", "gear": "D", "bms.contactor": "closed"}
    reason = set_aside_error(event)
    assert "3 readings set aside, text that is no number" in reason and "'gear' = 'D'" in reason
    assert "not written in Latin letters" not in reason
    # So in a list of readings.
    listed = [{"name": "Door", "value": "OPEN"}, {"name": "Pack Temp", "value": 41.5, "unit": "°C"}]
    event = parse_event(json.dumps(alert(signals=listed)))
    assert isinstance(event, AlertEvent) and event.signals == {"pack_temp_c": 41.5}
    assert event.signals_set_aside == {"Door": "OPEN"}
    # A state whose reading names a unit other than its name's is set aside as well, not converted (a
    # charger's power in kW sent as "IDLE" while the name says W), and its name is kept as sent.
    listed = [{"name": "charger_power_w", "value": "IDLE", "unit": "kW"}, {"name": "soc_pct", "value": "81 %"}]
    event = parse_event(json.dumps(alert(signals=listed)))
    assert isinstance(event, AlertEvent) and event.signals == {"soc_pct": 81.0}
    assert event.signals_set_aside == {"charger_power_w": "IDLE"}
    for text in ("1.2 kW please", "inf"):  # text that is no number beside another unit: set aside as well
        listed = [{"name": "charger_power_w", "value": text, "unit": "kW"}]
        set_aside(json.dumps(alert(signals=listed)), "charger_power_w")
    # Both kinds in one alert name both, and survive the round trip through the operator's state.
    both = parse_event(json.dumps(alert(signals={"电池温度": 41.5, "gear": "R"}), ensure_ascii=False))
    assert isinstance(both, AlertEvent) and both.signals_set_aside == {"电池温度": 41.5, "gear": "R"}
    assert "'电池温度'; text that is no number (a reading is a number): 'gear' = 'R'" in set_aside_error(both)
    assert EVENT_ADAPTER.validate_json(both.model_dump_json()) == both
    # So is text with a digit that reads as no number: metadata a platform keeps among its readings (a firmware
    # version, a status word, a position) and numbers in a form the job does not read. Until this release each
    # refused the whole alert, so one such field made every alert of its platform a dead letter.
    signals = {"firmware_version": "1.2.3", "status_word": "0x8001", "location": "31.23,121.47",
               "cell_voltage_diff_mv": "187 mV high", "pack_temp_c": 41.5}  # fmt: skip
    event = parse_event(json.dumps(alert(signals=signals)))
    assert isinstance(event, AlertEvent) and event.signals == {"pack_temp_c": 41.5}
    assert event.signals_set_aside == {k: v for k, v in signals.items() if k != "pack_temp_c"}
    assert "4 readings set aside" in set_aside_error(event)
    for text in ("12.6 volts please", "inf", "-Infinity", "nan%", "n/a V"):
        set_aside(json.dumps(alert(signals={"cell_voltage_diff_mv": text})), "cell_voltage_diff_mv")
    # So is a number in a unit its name does not allow (test_events_fleet_readings), and a number out of range
    # (it refused the alert until this release).
    set_aside(json.dumps(alert(signals={"cell_voltage_diff_mv": "12 °C"})), "cell_voltage_diff_mv")
    set_aside(json.dumps(alert(signals={"cell_voltage_diff_mv": "1e300"})), "cell_voltage_diff_mv", kind="range")


def test_readings_set_aside_survive_the_events_round_trip_through_state_and_name_each_reading() -> None:
    # The operator keeps a vehicle's pending events as their JSON: read back, they still say what was set aside.
    raw = json.dumps(alert(signals={"电池温度": 41.5, "单体压差": 187, "soc_pct": 80}), ensure_ascii=False)
    event = parse_event(raw)
    assert isinstance(event, AlertEvent)
    again = EVENT_ADAPTER.validate_json(event.model_dump_json())
    assert again == event and again.signals_set_aside == {"电池温度": 41.5, "单体压差": 187.0}
    assert "2 readings set aside" in set_aside_error(event) and "'电池温度', '单体压差'" in set_aside_error(event)
    many = parse_event(json.dumps(alert(signals={f"温度{i}": i for i in range(8)}), ensure_ascii=False))
    assert isinstance(many, AlertEvent) and many.signals == {}
    assert "8 readings set aside" in set_aside_error(many) and "and 3 more" in set_aside_error(many)
    # An alert whose names are all snake_case sets nothing aside.
    plain = parse_event(json.dumps(alert(signals={"soc_pct": 80})))
    assert isinstance(plain, AlertEvent) and plain.signals_set_aside == {}


def test_an_event_time_without_a_zone_is_read_in_the_fleets_zone_when_one_is_set() -> None:
    # GB/T 32960 terminals send Beijing time, and many platforms pass it on as it came.
    for written in ("2026-11-01 16:15:30", "2026-11-01T16:15:30", "2026-11-01T16:15:30.250", "20261101T161530"):
        error = rejected(json.dumps(alert(ts=written)))
        assert error.stage == "validate" and "has no timezone" in str(error) and "VDOCTOR_NAIVE_TS_ZONE" in str(error)
        for zone in ("Asia/Shanghai", "+08:00", "UTC+8"):
            event = parse_event(json.dumps(alert(ts=written)), time_zone(zone))
            assert event.ts == datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC), (written, zone)
    # A time that writes its zone, or a Unix time, is read as it is, whatever the fleet's zone.
    shanghai = time_zone("Asia/Shanghai")
    assert parse_event(json.dumps(alert(ts="2026-11-01T08:15:30Z")), shanghai).ts.hour == 8
    assert parse_event(json.dumps(alert(ts="2026-11-01T08:15:30-05:00")), shanghai).ts.hour == 13
    assert parse_event(json.dumps(recheck(ts=1762000000)), shanghai).ts == datetime(2025, 11, 1, 12, 26, 40, tzinfo=UTC)
    # Every kind of event; and the bounds and a bad date are still checked.
    assert parse_event(json.dumps(lifecycle(ts="2026-11-01 16:15:30")), shanghai).ts.hour == 8
    assert rejected(json.dumps(alert(ts="1999-12-31 23:00:00")), shanghai).stage == "validate"
    assert "month" in str(rejected(json.dumps(alert(ts="2026-13-01 08:00:00")), shanghai))
    # Daylight saving time: a repeated hour is read as its first occurrence, a skipped one as past the change.
    berlin = time_zone("Europe/Berlin")
    assert parse_event(json.dumps(alert(ts="2026-10-25 02:30:00")), berlin).ts.hour == 0  # CEST, UTC+2
    assert parse_event(json.dumps(alert(ts="2026-03-29 02:30:00")), berlin).ts.hour == 1  # 03:30 CEST
    assert parse_event(json.dumps(alert(ts="2026-07-01 12:00:00")), berlin).ts.hour == 10


def test_readings_and_codes_sent_as_lists_of_objects() -> None:
    # A platform that writes readings as name/value/unit objects, codes as objects or one code as a string.
    readings = [
        {"name": "Pack Temp", "value": 41.5, "unit": "°C"},  # the unit becomes the name's suffix
        {"name": "soc", "value": "80", "unit": "%"},
        {"Name": "Vehicle Speed", "Value": 62, "Unit": "km/h"},  # keys in any case
        {"name": "cell_voltage_diff_mv", "value": "187 mV", "unit": "mV"},  # the name's own unit
        {"name": "pack_voltage_v", "value": 398500, "unit": "mV"},  # another of its quantity's: converted
        {"name": "coolant_temp_c", "value": "203", "unit": "°F"},
        {"name": "wheel_ticks", "value": 3, "unit": "counts"},  # a unit not in the table: left unknown
        {"name": "dcdc_output_v", "value": None, "unit": "V"},  # no value: left out, as a null reading
    ]
    codes = [{"code": "P0A7F", "status": "active"}, {"DTC": "u0100-87"}, "P0562", {"spn": 1569, "fmi": 31}]
    event = parse_event(json.dumps(alert(signals=readings, dtc_codes=codes), ensure_ascii=False))
    assert isinstance(event, AlertEvent)
    assert event.signals == {
        "pack_temp_c": 41.5, "soc_pct": 80.0, "vehicle_speed_kmh": 62.0, "cell_voltage_diff_mv": 187.0,
        "pack_voltage_v": 398.5, "coolant_temp_c": 95.0, "wheel_ticks": 3.0,
    }  # fmt: skip
    assert event.dtc_codes == ["P0A7F", "U0100", "P0562", "SPN1569-FMI31"]
    one = parse_event(json.dumps(alert(dtc_codes="P0300, P0301", signals=[])))
    assert isinstance(one, AlertEvent) and one.dtc_codes == ["P0300", "P0301"] and one.signals == {}
    # A unit other than the name's: set aside, as in the text's form (it refused the alert until this release).
    for readings in (
        [{"name": "cell_voltage_diff_mv", "value": 12, "unit": "°C"}],
        [{"name": "insulation_res_mohm", "value": 5, "unit": "MΩ"}, {"name": "soc_pct", "value": 50}],
    ):
        event = set_aside(json.dumps(alert(signals=readings)), readings[0]["name"], kind="unit")  # type: ignore[arg-type]
        assert event.signals == ({"soc_pct": 50.0} if len(readings) > 1 else {})
    # A code object without its code, a J1939 code out of range: set aside, the alert read with its other codes.
    for entry, says in (({"status": "active"}, 'needs a "code"'), ({"spn": 600000, "fmi": 3}, "is not a trouble code")):
        assert code_aside(json.dumps(alert(dtc_codes=[entry, "P0300"])), says).dtc_codes == ["P0300"]
    # Still dead letters, each saying why: an object without its name or value, and values that are no readings
    # or codes at all.
    for signals, dtc_codes, says in (
        ([{"value": 3, "unit": "V"}], [], 'needs a "name" and a "value"'),
        ([{"name": "soc"}], [], 'needs a "name" and a "value"'),
        ([1, 2], [], "valid dictionary"),
        ({}, 42, "valid list"),
    ):
        error = rejected(json.dumps(alert(signals=signals, dtc_codes=dtc_codes)))
        assert error.stage == "validate" and says in str(error), (signals, dtc_codes, str(error))


def test_a_platforms_own_spelling_of_the_contracts_fields() -> None:
    # A Java platform's camelCase, an export's PascalCase and headings: the same alert.
    spelled = {
        "Type": "Alert", "eventId": "e-1", "VIN": "lsvau2180n2183294", "Series": "EV-A",
        "TS": "2026-11-01T08:15:30Z", "alertText": "Cell imbalance", "DTCCodes": ["P0A7F"],
        "Signals": {"cellVoltageDiff_mV": 187}, "receivedAt": "2026-11-01T08:15:31Z",  # not a field: left out
    }  # fmt: skip
    event = parse_event(json.dumps(spelled))
    assert isinstance(event, AlertEvent)
    assert (event.event_id, event.vin, event.series, event.alert_text, event.dtc_codes) == (
        "e-1", "LSVAU2180N2183294", "EV-A", "Cell imbalance", ["P0A7F"],
    )  # fmt: skip
    recheck = parse_event(json.dumps({"type": "recheck", "EventId": "r-1", "vin": "LSVAU2180N2183294",
                                      "ts": "2026-11-02T08:00:00Z", "sessionId": "LSVAU2180N2183294-20261101T081530",
                                      "recheckOK": True}))  # fmt: skip
    assert isinstance(recheck, RecheckEvent) and recheck.recheck_ok
    # Two spellings of one field: which one holds the value is not known.
    error = rejected(json.dumps(alert(eventId="e-2")))
    assert error.stage == "validate" and "given twice" in str(error)


def test_a_recheck_verdict_in_the_words_workshops_write() -> None:
    for written, verdict in (("PASS", True), ("ok", True), ("合格", True), (" Failed ", False), ("NG", False),
                             ("不合格", False), ("yes", True), ("0", False), (True, True), ("NOK", False),
                             ("n.i.O.", False), ("i.O.", True), ("Success", True), ("failure", False)):  # fmt: skip
        event = parse_event(json.dumps(recheck(recheck_ok=written), ensure_ascii=False))
        assert isinstance(event, RecheckEvent) and event.recheck_ok is verdict, written
    for unknown in ("maybe", "pending", "", 2):
        assert rejected(json.dumps(recheck(recheck_ok=unknown))).stage == "validate", unknown


def test_a_lifecycle_change_in_the_words_fleet_systems_write() -> None:
    scrapped = [("Scrapped", "scrapped"), ("write-off", "scrapped"), ("报废", "scrapped")]
    transferred = [("sold", "transferred"), ("ownership_change", "transferred"), ("过户", "transferred")]
    for written, change in scrapped + transferred:
        event = parse_event(json.dumps(lifecycle(change=written), ensure_ascii=False))
        assert isinstance(event, LifecycleEvent) and event.change == change, written
    for unknown in ("repaired", "", "stolen"):
        assert rejected(json.dumps(lifecycle(change=unknown))).stage == "validate", unknown


def test_event_times_as_platforms_and_exports_write_them() -> None:
    at = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
    # A zone after a blank, and a date written with / or . (its zone given).
    for written in (
        "2026-11-01 08:15:30 UTC",
        "2026-11-01 08:15:30 gmt",
        "2026-11-01 16:15:30 +08:00",
        "2026-11-01 16:15:30 +0800",
        "2026/11/01T08:15:30Z",
        "2026.11.01 16:15:30+08:00",
        "2026-11-01T16:15:30+08:00 ",
        " 2026-11-01T08:15:30Z",
    ):  # fmt: skip (blanks around: left out)
        assert parse_event(json.dumps(alert(ts=written))).ts == at, written
    assert parse_event(json.dumps(alert(ts=" 1793520930 "))).ts == datetime.fromtimestamp(1793520930, UTC)
    # UTC glued to the time, and UTC or GMT with an offset after it, as Java, JavaScript and Chinese platforms
    # write them: each was a dead letter.
    for written in ("2026-11-01T08:15:30UTC", "2026-11-01 16:15:30 GMT+8", "2026-11-01 16:15:30 UTC+08:00",
                    "2026-11-01 16:15:30 UTC+0800", "2026-11-01 13:45:30 GMT+5:30",
                    "2026-11-01 03:15:30 GMT-5"):  # fmt: skip
        assert parse_event(json.dumps(alert(ts=written))).ts == at, written
    # Without a zone (a Chinese platform's export, GB/T 32960's YYYYMMDDhhmmss as text or as a number):
    # read in the fleet's zone, and a dead letter naming the setting while none is set.
    shanghai = time_zone("Asia/Shanghai")
    local: list[object] = ["2026/11/01 16:15:30", "2026/11/1 16:15:30", "2026-11-1 16:15:30", "20261101161530"]
    for written in [*local, 20261101161530]:
        assert parse_event(json.dumps(alert(ts=written)), shanghai).ts == at, written
        assert "VDOCTOR_NAIVE_TS_ZONE" in str(rejected(json.dumps(alert(ts=written)))), written
    assert parse_event(json.dumps(alert(ts="2026/11/1 8:15:30")), time_zone("UTC")).ts == at
    # Still refused: a month 13, a compact time that is no date, and text around a time.
    for bad in ("2026/13/01 08:15:30", "20261301081530", "at 2026/11/01 08:15:30", "2026/11/01 08:15:30 CET"):
        assert rejected(json.dumps(alert(ts=bad)), shanghai).stage == "validate", bad
    # A Unix time in milliseconds is still one: 13 digits, never the 14 of a compact time.
    assert parse_event(json.dumps(alert(ts=1762000000000))).ts == datetime(2025, 11, 1, 12, 26, 40, tzinfo=UTC)


def test_event_times_as_java_and_iso_basic_write_them() -> None:
    # Java's ZonedDateTime.toString(): the zone's name in brackets after the offset (the offset decides), or
    # after a local time (read in that zone); ISO 8601's basic format (AWS, iCalendar). Each was a dead letter.
    at = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
    for ts in (
        "2026-11-01T16:15:30.123+08:00[Asia/Shanghai]", "2026-11-01T08:15:30Z[UTC]",
        "2026-11-01T16:15:30.123456789+08:00[Asia/Shanghai]", "2026-11-01T16:15:30[Asia/Shanghai]",
        "2026-11-01T09:15:30[Europe/Berlin]", "20261101T081530Z", "20261101T161530+0800", "20261101T081530.5Z",
    ):  # fmt: skip
        assert parse_event(json.dumps(alert(ts=ts))).ts == at, ts
    # A basic time without a zone is read as any: in the fleet's zone, or a dead letter naming the setting.
    assert parse_event(json.dumps(alert(ts="20261101T161530")), time_zone("Asia/Shanghai")).ts == at
    assert "VDOCTOR_NAIVE_TS_ZONE" in str(rejected(json.dumps(alert(ts="20261101T161530"))))
    # A name that is no zone, or brackets around nothing that is a time: refused.
    for ts in ("2026-11-01T16:15:30[Mars/Base]", "[Asia/Shanghai]", "2026-11-01T16:15:30+08:00[", "20261301T081530Z"):
        assert rejected(json.dumps(alert(ts=ts))).stage == "validate", ts


def test_event_times_with_the_months_name_as_http_mail_and_javascript_write_them() -> None:
    at = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
    # RFC 2822 (HTTP, e-mail, JavaScript's toUTCString), JavaScript's Date.toString() with its zone's name in
    # brackets, and the month first as US exports write it. Each was a dead letter.
    for written in ("Sun, 01 Nov 2026 08:15:30 GMT", "Sun Nov 01 2026 16:15:30 GMT+0800 (China Standard Time)",
                    "1 Nov 2026 16:15:30 +0800", "Nov 1, 2026 08:15:30 UTC", "Sunday, 1 November 2026 08:15:30 Z",
                    "sun, 01 nov 2026 03:15:30 -05:00"):  # fmt: skip
        assert parse_event(json.dumps(alert(ts=written))).ts == at, written
    # Without a zone: read in the fleet's zone, as any time without one, or a dead letter naming the setting.
    assert parse_event(json.dumps(alert(ts="Sun, 01 Nov 2026 16:15:30")), time_zone("Asia/Shanghai")).ts == at
    assert "VDOCTOR_NAIVE_TS_ZONE" in str(rejected(json.dumps(alert(ts="Sun, 01 Nov 2026 16:15:30"))))
    # Still refused: a zone's abbreviation (CST is China's or the US Central's), a month that is none, a 31 February.
    for bad in ("Sun, 01 Nov 2026 08:15:30 CST", "Sun, 01 Foo 2026 08:15:30 GMT", "Sat, 31 Feb 2026 08:15:30 GMT"):
        assert rejected(json.dumps(alert(ts=bad))).stage == "validate", bad


@pytest.mark.parametrize("name", ["Beijing", "asia/shanghai", "+15:00", "", "../../etc/passwd"])
def test_a_zone_that_is_none_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="time zone|hours from UTC"):
        time_zone(name)


def test_null_for_an_optional_field_is_its_empty_value() -> None:
    event = parse_event(json.dumps(alert(alert_text=None, dtc_codes=None, signals=None)))
    assert isinstance(event, AlertEvent)
    assert (event.alert_text, event.dtc_codes, event.signals) == ("", [], {})
    checked = parse_event(json.dumps(recheck(note=None)))
    assert isinstance(checked, RecheckEvent) and checked.note == ""


def test_ids_sent_as_numbers_and_names_in_another_case() -> None:
    event = parse_event(json.dumps(alert(type="Alert", event_id=12345)))
    assert isinstance(event, AlertEvent) and event.event_id == "12345"
    # A platform that writes every number as a float sends 12345.0: the same id, and the same series code.
    floated = parse_event(json.dumps(alert(event_id=12345.0, series=301.0)))
    assert isinstance(floated, AlertEvent) and (floated.event_id, floated.series) == ("12345", "301")
    # Refused, saying why: a fraction is no id, and above 2**53 a float no longer tells two ids apart.
    for value, reason in ((12.5, "a whole number"), (2.0**53, "send it as a string")):
        error = rejected(json.dumps(alert(event_id=value)))
        assert error.stage == "validate" and "event_id" in str(error) and reason in str(error), value
    left = parse_event(json.dumps(lifecycle(type="LIFECYCLE", change="Scrapped")))
    assert isinstance(left, LifecycleEvent) and left.change == "scrapped"


def test_series_codes_as_numbers_messages_as_lists_and_null_codes() -> None:
    # A model code sent as a whole number (as an event id may be), a platform that sends each active warning as
    # a message of a list, and a null among the codes: each was a dead letter ("should be a valid string").
    event = parse_event(json.dumps(alert(series=301, alert_text=["ABS灯亮", " ESP故障 ", None, ""],
                                         dtc_codes=["P0A7F", None]), ensure_ascii=False))  # fmt: skip
    assert isinstance(event, AlertEvent)
    assert (event.series, event.alert_text, event.dtc_codes) == ("301", "ABS灯亮; ESP故障", ["P0A7F"])
    # Still refused: a series that is no code (true, 3.5), and a text that is a number or holds one.
    for field, value in (("series", True), ("series", 3.5), ("alert_text", 42), ("alert_text", ["a", 3])):
        error = rejected(json.dumps(alert(**{field: value})))
        assert error.stage == "validate" and field in str(error), (field, value)


# -- lesser forms a fleet sends (audit) ---------------------------------------------------------------------


def test_one_field_under_two_spellings_with_one_value_is_that_field() -> None:
    # {"vin": X, "VIN": X} was a dead letter ("given twice"); two values still are (which one holds is not known).
    assert parse_event(json.dumps({**alert(), "VIN": VIN})).vin == VIN
    with pytest.raises(EventError, match="given twice with another value"):
        parse_event(json.dumps({**alert(), "VIN": VIN[:-1] + "5"}))


def test_a_j1939_code_whose_numbers_come_as_whole_floats_is_read() -> None:
    event = parse_event(json.dumps(alert(dtc_codes=[{"spn": 1569.0, "fmi": 31.0}])))
    assert isinstance(event, AlertEvent) and event.dtc_codes == ["SPN1569-FMI31"]


@pytest.mark.parametrize(("word", "ok"), [("已修复", True), ("未修复", False), ("不正常", False), ("Yes", True)])
def test_verdicts_in_the_words_of_chinese_workshop_systems(word: str, ok: bool) -> None:
    line = {"type": "recheck", "event_id": "r-1", "vin": VIN, "ts": "2026-11-05T10:00:00Z", "recheck_ok": word}
    event = parse_event(json.dumps(line, ensure_ascii=False))
    assert isinstance(event, RecheckEvent) and event.recheck_ok is ok


def test_a_word_that_is_no_verdict_is_named_with_the_words_that_are() -> None:
    line = {"type": "recheck", "event_id": "r-1", "vin": VIN, "ts": "2026-11-05T10:00:00Z", "recheck_ok": "maybe"}
    says = r"recheck_ok: 'maybe' is no verdict: true or false \(1 or 0\), or a word such as"
    with pytest.raises(EventError, match=says):
        parse_event(json.dumps(line))


def test_a_missing_field_names_the_fields_the_line_has_that_are_none_of_the_contracts() -> None:
    data = {k: v for k, v in alert().items() if k != "ts"} | {"timestamp": "2026-11-01T08:15:30Z"}
    with pytest.raises(EventError, match=r"^ts: Field required \(the line's fields that are none of the contract's: "
                       r"'timestamp'\)$"):  # fmt: skip
        parse_event(json.dumps(data))


def test_half_a_character_in_a_text_is_read_as_a_replacement_character() -> None:
    # A JavaScript producer cut an emoji in two: the alert lost all its text, codes and readings to it.
    raw = json.dumps(alert(alert_text="x")).replace('"alert_text": "x"', '"alert_text": "pack hot \\ud83d"')
    event = parse_event(raw)
    assert isinstance(event, AlertEvent) and event.alert_text == "pack hot \ufffd" and event.dtc_codes == ["P0A7F"]
    assert "\ufffd" in event.model_dump_json()  # writable as state and outputs


def test_a_zero_among_codes_sent_as_numbers_is_no_code_and_a_recheck_may_name_its_session_in_lower_case() -> None:
    """`[0, 0, 687899]` (a list padded with zeros) was read as P0000 and P0A7F; a recheck naming
    `lsvau...-20261101t081530` passed parsing and was refused as naming another vehicle's session (an audit)."""
    padded = parse_event(json.dumps(alert(dtc_codes=[0, 0, 687899, 255])))
    assert isinstance(padded, AlertEvent) and padded.dtc_codes == ["P0A7F"]
    recheck = {"type": "recheck", "event_id": "r-1", "vin": "lsvau2180n2183294", "ts": "2026-11-05T10:00:00Z",
               "session_id": "lsvau2180n2183294-20261101t081530", "recheck_ok": True}  # fmt: skip
    read = parse_event(json.dumps(recheck))
    assert isinstance(read, RecheckEvent) and read.session_id == "LSVAU2180N2183294-20261101T081530"


def test_what_the_job_sets_aside_is_never_the_lines_to_say() -> None:
    """A line that held `codes_set_aside` or `signals_set_aside` (any spelling) made its own dead letter and
    flags (found by a review): they are the job's, filled as it reads the line."""
    line = alert(dtc_codes=["P0A7F"])
    line |= {"codesSetAside": {"<b>": "x"}, "signals_set_aside": {"a": "b"}, "signals_set_aside_why": {"a": ["x", "y"]}}
    event = parse_event(json.dumps(line))
    assert isinstance(event, AlertEvent) and not event.set_aside and event.codes_set_aside == {}
    assert event.signals_set_aside == {} and event.signals_set_aside_why == {}


def test_a_milestones_session_id_keeps_its_suffix_as_written() -> None:
    recheck = {"type": "recheck", "event_id": "r-1", "vin": "LSVAU2180N2183294", "ts": "2026-11-05T10:00:00Z",
               "session_id": "lsvau2180n2183294-20261101t081530-m1", "recheck_ok": True}  # fmt: skip
    read = parse_event(json.dumps(recheck))
    assert isinstance(read, RecheckEvent) and read.session_id == "LSVAU2180N2183294-20261101T081530-m1"


def test_the_same_code_sent_many_times_is_one_code_not_past_the_bound() -> None:
    """["P0A7F"] * 500 (a gateway that repeats its active list) refused the alert as 500 codes (an audit), and
    so did 130 failure types of one code (a review)."""
    event = parse_event(json.dumps(alert(dtc_codes=["P0A7F"] * 500 + ["U0100"])))
    assert isinstance(event, AlertEvent) and event.dtc_codes == ["P0A7F", "U0100"]
    types = parse_event(json.dumps(alert(dtc_codes=[f"P0A7F-{n:02X}" for n in range(130)])))
    assert isinstance(types, AlertEvent) and types.dtc_codes == ["P0A7F"]
    too_many = alert(dtc_codes=[f"U{n:04X}" for n in range(MAX_DTC_CODES + 1)])
    assert "129 trouble codes: at most 128" in str(rejected(json.dumps(too_many)))
