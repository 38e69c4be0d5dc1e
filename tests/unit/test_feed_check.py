"""``vdoctor check-events``: how the job reads a feed, before it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from vdoctor.events import time_zone
from vdoctor.feed_check import check_feed, render

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"


def alert(**fields: object) -> str:
    event = {"type": "alert", "event_id": "e-1", "vin": VIN, "series": "EV-A", "ts": "2026-11-01T08:15:30Z",
             "alert_text": "cell imbalance", "dtc_codes": ["P0A7F"],
             "signals": {"cell_voltage_diff_mv": 187}}  # fmt: skip
    return json.dumps(event | fields, ensure_ascii=False)


FEED = [
    alert(),
    alert(event_id="e-2", signals={"cells[3].temp_c": 41, "Pack Voltage (V)": 398}),
    alert(event_id="e-3", signals={"cells[7].temp_c": 40}, dtc_codes=["DTC P0A7F-1B (active)"]),
    alert(event_id="e-4", ts="2026/11/01 16:15:30", dtc_codes=[{"code": "P0A7F", "status": "active"}]),
    json.dumps(
        {
            "type": "recheck",
            "eventId": "r-1",
            "vin": VIN,
            "ts": "2026-11-02T08:00:00Z",
            "session_id": f"{VIN}-20261101T081530",
            "recheck_ok": "PASS",
        }
    ),  # fmt: skip
    "",  # blank: skipped, as the job skips it
    "{not json",
    alert(event_id="e-5", vin="LSVAU2180N218329"),
    alert(event_id="e-6", vin="LSVAU2180N21832"),
    alert(event_id="e-7", signals={"电池温度": 41}),
    alert(event_id="e-8", signals=[{"name": "Pack Temp", "value": 41.5, "unit": "°C"}]),
]


def test_the_report_counts_events_groups_dead_letters_and_lists_the_forms_read_as_others() -> None:
    report = check_feed(FEED, time_zone("Asia/Shanghai"))
    # e-7's Chinese signal name has no snake_case form: the alert is read without it, and is a dead letter too.
    assert report.lines == 10 and report.events == {"alert": 6, "recheck": 1}
    assert report.dead_letters == 4
    vin = report.dead[("validate", "vin")]
    assert (vin.count, vin.first_line) == (2, 8) and "ISO 3779" in vin.reason
    assert report.dead[("parse", "")].count == 1 and report.dead[("validate", "signals")].first_line == 10
    forms = report.forms
    # An array's items are one form; each line counts once per form.
    assert forms[("signal", "cells[N].temp_c", "cells_N_temp_c")] == 2
    assert forms[("signal", "Pack Voltage (V)", "pack_voltage_v")] == 1
    assert forms[("code", "DTC <code>-1B (active)", "<code>")] == 1
    assert forms[("code", '{"code", "status"}', "<code>")] == 1
    assert forms[("field", "eventId", "event_id")] == 1
    assert forms[("signal", "Pack Temp [°C]", "pack_temp_c")] == 1  # a reading as an object, its unit apart
    assert forms[("ts", "9999/99/99 99:99:99", "YYYY-MM-DDThh:mm:ssZ")] == 1
    # What the job reads as written is no form of its own.
    assert not any(written == "cell_voltage_diff_mv" for _, written, _ in forms)
    text = render(report, "Asia/Shanghai")
    assert "10 lines: 7 events (alert 6, recheck 1), 4 dead letters" in text
    assert "cells[N].temp_c" in text and "line 8:" in text


def test_without_the_zone_a_local_time_is_a_dead_letter_of_its_own_group() -> None:
    report = check_feed(FEED)
    ts = report.dead[("validate", "ts")]
    assert ts.count == 1 and ts.first_line == 4 and "VDOCTOR_NAIVE_TS_ZONE" in ts.reason


def test_the_command_exits_1_with_dead_letters_and_0_without(tmp_path: Path) -> None:
    feed = tmp_path / "feed.jsonl"
    feed.write_text("\n".join(FEED) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "jobs.cli", "check-events", "--alerts", str(feed), "--json"]
    run = subprocess.run([*command, "--naive-ts-zone", "Asia/Shanghai"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    assert report["dead_letters"] == 4 and report["events"] == {"alert": 6, "recheck": 1}
    assert {"kind": "field", "written": "eventId", "read": "event_id", "lines": 1} in report["read_as"]
    clean = tmp_path / "clean.jsonl"
    clean.write_text(FEED[0] + "\n" + FEED[1] + "\n", encoding="utf-8")
    run = subprocess.run([*command[:5], str(clean)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("2 lines: 2 events (alert 2), 0 dead letters")
    bad_zone = subprocess.run([*command[:5], str(clean), "--naive-ts-zone", "Beijing"], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad_zone.returncode == 2 and "time zone" in bad_zone.stderr


def test_numbers_with_a_comma_are_reported_as_read_and_the_setting_reads_the_ambiguous_one(tmp_path: Path) -> None:
    feed = [
        alert(signals={"pack_voltage_v": "398,5", "odometer_km": "12.345,6"}),
        alert(event_id="e-2", signals=[{"name": "pack_voltage", "value": "398,125", "unit": "V"}]),
    ]
    report = check_feed(feed)
    assert report.dead_letters == 1 and "VDOCTOR_NUMBER_COMMA" in report.dead[("validate", "signals")].reason
    numbers = {(w, r) for (kind, w, r) in report.forms if kind == "number"}
    assert numbers == {("999,9", "999.9"), ("99.999,9", "99999.9")}
    decimal = check_feed(feed, number_comma="decimal")
    assert decimal.dead_letters == 0 and decimal.forms[("number", "999,999", "999.999")] == 1
    assert "a number's lone comma before three digits read as decimal" in render(decimal, None, "decimal")
    # The command takes the job's flag, or its environment variable.
    for read_as in command_read_as(tmp_path, feed, "--number-comma", "VDOCTOR_NUMBER_COMMA", "thousands"):
        assert {"kind": "number", "written": "999,999", "read": "999999", "lines": 1} in read_as
    bad = subprocess.run([*check_events(tmp_path / "feed.jsonl"), "--number-comma", "european"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "must be decimal" in bad.stderr


def check_events(path: Path) -> list[str]:
    """The command that reports the feed at ``path`` as JSON."""
    return [sys.executable, "-m", "jobs.cli", "check-events", "--alerts", str(path), "--json"]


def command_read_as(tmp_path: Path, feed: list[str], flag: str, var: str, value: str) -> list[list[dict]]:
    """The ``read_as`` lists of ``check-events`` over ``feed``, given ``value`` by its flag, then by its variable."""
    path = tmp_path / "feed.jsonl"
    path.write_text("\n".join(feed) + "\n", encoding="utf-8")
    found = []
    for extra, env in (([flag, value], {}), ([], {var: value})):
        run = subprocess.run([*check_events(path), *extra], cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=120, env={**os.environ, **env})  # fmt: skip
        assert run.returncode == 0, run.stderr
        found.append(json.loads(run.stdout)["read_as"])
    return found


def test_readings_nested_in_objects_are_reported_by_their_paths() -> None:
    report = check_feed([alert(signals={"bms": {"PackTemp": 41.5, "cell_v": [3.61, 3.62]}, "soc_pct": 80})])
    assert report.dead_letters == 0
    assert {(w, r) for (kind, w, r) in report.forms if kind == "signal"} == {
        ("bms.PackTemp", "bms_pack_temp"), ("bms.cell_v[N]", "bms_cell_v_N"),
    }  # fmt: skip


def test_readings_as_objects_and_text_that_says_no_value_are_reported_as_read() -> None:
    signals = {"pack_temp": {"value": 105, "unit": "°F"}, "cells": ["N/A", "--"], "soc_pct": "", "dc_v": None}
    report = check_feed([alert(signals=signals), alert(signals=[{"name": "soc", "value": "n/a", "unit": "%"}])])
    assert report.dead_letters == 0
    assert {(w, r) for (kind, w, r) in report.forms if kind == "signal"} == {
        ("pack_temp [°F]", "pack_temp_f"), ('cells[N] = "N/A"', "no reading"), ('cells[N] = "--"', "no reading"),
        ('soc_pct = ""', "no reading"), ('soc = "n/a"', "no reading"),
    }  # fmt: skip


def test_a_bare_nan_reading_is_reported_as_no_reading() -> None:
    """Python's json.dumps writes a missing float as a bare NaN, which the job reads as no reading: the report
    raised on it (its value written as JSON)."""
    line = alert(signals={"pack_temp_c": 41.5}).replace("41.5", "NaN")
    report = check_feed([line, line.replace("NaN", "-Infinity")])
    assert report.dead_letters == 0
    assert {(w, r) for (kind, w, r) in report.forms if kind == "signal"} == {
        ("pack_temp_c = NaN", "no reading"), ("pack_temp_c = -Infinity", "no reading"),
    }  # fmt: skip

def test_a_platforms_alarms_without_the_contracts_fields_are_reported_as_read() -> None:
    bare = json.loads(alert())
    for field in ("type", "event_id", "series"):
        del bare[field]
    report = check_feed([json.dumps(bare), alert(type="ALARM")])
    assert report.dead_letters == 0 and report.events == {"alert": 2}
    assert {(w, r) for (kind, w, r) in report.forms if kind == "field"} == {
        ("no type", "alert"), ("no event_id", "h- and a hash of its fields"),
        ("no series", "series: its VIN's first 8 characters"), ("type ALARM", "alert"),
    }  # fmt: skip


def test_a_dtc_as_its_bytes_is_reported_as_read() -> None:
    report = check_feed([alert(dtc_codes=["0x0A7F1B"]), alert(event_id="e-2", dtc_codes=[0xC10000])])
    assert report.dead_letters == 0
    assert {(w, r) for (kind, w, r) in report.forms if kind == "code"} == {
        ("0x<hex>", "<code>"), ("<number of 3 bytes>", "<code>"),
    }  # fmt: skip


def test_codes_sent_as_numbers_are_reported_as_the_setting_reads_them(tmp_path: Path) -> None:
    # Under uds (the default) a number under 65536 is what an OBD dongle sends, read as another code, alone or
    # in an object: the report says so, and that --dtc-numbers obd reads two bytes; 0 (a Mode 03 reply's
    # padding) is no code, as under obd (it was P0000).
    feed = [alert(dtc_codes=[768]), alert(event_id="e-2", dtc_codes=[{"code": 0x0420}, 0, 369.0])]
    report = check_feed(feed)
    assert report.dead_letters == 0
    assert {(w, r): n for (kind, w, r), n in report.forms.items() if kind == "code"} == {
        ("<number under 65536, read as 3 bytes>", "<code> (--dtc-numbers obd reads 2 bytes)"): 2,
        ('{"code"}', "<code>"): 1, ("0", "no code"): 1,
    }  # fmt: skip
    # The text report shows the whole hint.
    assert "<code> (--dtc-numbers obd reads 2 bytes)" in render(report, None)
    obd = check_feed([*feed, alert(event_id="e-3", dtc_codes=[0x0A7F1B])], dtc_numbers="obd")
    assert {(w, r) for (kind, w, r) in obd.forms if kind == "code"} == {
        ("<number of 2 bytes>", "<code>"), ('{"code"}', "<code>"), ("0", "no code"),
    }  # fmt: skip
    assert obd.dead_letters == 1 and "VDOCTOR_DTC_NUMBERS=obd" in next(iter(obd.dead.values())).reason
    assert "codes sent as numbers read as 2 bytes (OBD)" in render(obd, None, None, "obd")
    # The command takes the job's flag, or its environment variable.
    for read_as in command_read_as(tmp_path, feed, "--dtc-numbers", "VDOCTOR_DTC_NUMBERS", "OBD"):
        assert {"kind": "code", "written": "<number of 2 bytes>", "read": "<code>", "lines": 2} in read_as


def test_a_workshops_recheck_without_a_session_is_reported_as_read() -> None:
    report = check_feed([json.dumps({"vin": VIN, "ts": "2026-11-02T08:00:00Z", "recheck_ok": "PASS", "event_id": "w"})])
    assert report.dead_letters == 0 and report.events == {"recheck": 1}
    assert {(w, r) for (kind, w, r) in report.forms if kind == "field"} == {
        ("no type", "recheck"), ("no session_id", "the vehicle's newest case"),
    }  # fmt: skip


def test_fields_the_contract_does_not_name_are_reported_as_left_out(tmp_path: Path) -> None:
    # A platform that writes its codes under its own name (dtcs) or its text as a message would have its alerts
    # diagnosed without them, and nothing would say so: the report lists each such field with its lines.
    feed = [
        alert(event_id="e-1", dtcs=["P0A80"], message="HV battery fault"),
        alert(event_id="e-2", dtcs=["P0A80"], receivedAt="2026-11-01T08:15:31Z"),
        json.dumps(
            {
                "Type": "alert",
                "eventId": "e-3",
                "VIN": VIN,
                "ts": "2026-11-01T08:15:30Z",
                "alertText": "spelled another way: read",
                "DTCCodes": ["P0A80"],
            }
        ),  # fmt: skip
    ]
    report = check_feed(feed)
    assert report.left_out == {"dtcs": 2, "message": 1, "receivedAt": 1}
    text = render(report, None)
    assert "left out (fields this feed writes that the contract does not name" in text
    assert report.dead_letters == 0 and report.events == {"alert": 3}
    assert "dtcs" in text and "alertText" not in text.split("left out")[1]
    path = tmp_path / "feed.jsonl"
    path.write_text("\n".join(feed) + "\n", encoding="utf-8")
    shown = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "check-events", "--alerts", str(path), "--json"],
        capture_output=True, text=True, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    assert json.loads(shown.stdout)["left_out"][0] == {"field": "dtcs", "lines": 2}
    # Left out by the event's own type: a recheck reads no alert text nor codes.
    recheck = {"type": "recheck", "event_id": "r-1", "vin": VIN, "ts": "2026-11-02T08:00:00Z", "alertText": "x",
               "session_id": f"{VIN}-20261101T081530", "recheck_ok": "PASS", "dtc_codes": []}  # fmt: skip
    assert check_feed([json.dumps(recheck)]).left_out == {"alertText": 1, "dtc_codes": 1}


def test_events_timed_over_a_day_ahead_of_the_clock_are_named_not_refused() -> None:
    # A vehicle clock set to 2099, or the all-ones 32-bit time (2106): the job reads it as sent, and the vehicle's
    # later alerts join the session it opens; the pre-flight check said nothing of it.
    from datetime import UTC, datetime

    base = {"type": "alert", "vin": "LSVAU2180N2183294", "series": "EV-A", "alert_text": "x"}
    lines = [
        json.dumps({**base, "event_id": "e-1", "ts": "2026-11-01T08:15:30Z"}),
        json.dumps({**base, "event_id": "e-2", "ts": "2026-11-02T07:15:30Z"}),  # within the day
        json.dumps({**base, "event_id": "e-3", "ts": 4294967295}),
        json.dumps({**base, "event_id": "e-4", "ts": "2099-01-01T00:00:00Z"}),
    ]
    report = check_feed(lines, now=datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC))
    assert (report.ahead, report.ahead_first, report.dead_letters) == (2, 3, 0)
    assert "ahead of this machine's clock by more than a day: 2 events (the first at line 3)" in render(report, None)
    assert report.as_json()["ahead_of_clock"] == {"events": 2, "first_line": 3}
    assert "ahead of" not in render(check_feed(lines[:2], now=datetime(2026, 11, 1, 8, tzinfo=UTC)), None)
