"""A fleet's signal map (``VDOCTOR_SIGNAL_NAMES``): the names a fleet sends, read as the names the job reads.

A Chinese fleet names its signals in Chinese (``电池温度``): without a map such a reading is set aside, since
its name has no snake_case form (the alert is diagnosed without it, and its line is a dead letter as well).
A vendor's name in Latin letters (``BMS_CellVdiff``) is read, but under a name no rule of the knowledge pack
tests. With the map both are read as the pack's names, and the pack's rules confirm faults by them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from operators.parse import DEAD_LETTER, EVENT, ParseEvents
from tests.conftest import REPO_ROOT
from tests.unit.test_engine import T0, VIN, alert
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.errors import ConfigError
from vdoctor.events import AlertEvent, parse_event, set_aside_error
from vdoctor.feed_check import check_feed
from vdoctor.knowledge import load_pack
from vdoctor.memory.session import DedupState, SessionState
from vdoctor.models.offline import OfflineModel
from vdoctor.records import DeadLetter, Phase
from vdoctor.settings import load_settings, worker_settings
from vdoctor.signal_map import SignalRenames, check_signal_map, read_signal_map
from vdoctor.stores.memory import InMemoryStore
from vdoctor.units import SIGNAL_NAME_RE

pytestmark = pytest.mark.unit

MAP = {"电池温度": "pack_temp_c", "单体压差(mV)": "cell_voltage_diff_mv", "BMS_CellVdiff": "cell_voltage_diff_mv"}


def line(signals: object, event_id: str = "e-1") -> str:
    return json.dumps(alert(event_id, T0, signals=signals), ensure_ascii=False)  # type: ignore[arg-type]


@pytest.fixture
def rename() -> SignalRenames:
    return SignalRenames(check_signal_map(MAP))


def test_mapped_names_are_read_as_the_names_they_map_to(rename: SignalRenames) -> None:
    # As sent, as the job reads it (full-width brackets and spaces are the same name), and in a reading's object.
    sent = {"电池温度": 41.5, "单体压差（mV） ": 187, "soc_pct": 62}
    assert parse_event(line(sent), None, rename).signals == {
        "pack_temp_c": 41.5, "cell_voltage_diff_mv": 187.0, "soc_pct": 62.0,
    }  # fmt: skip
    as_objects = [{"Name": "电池温度", "Value": "41.5℃"}, {"name": "BMS_CellVdiff", "value": 187, "unit": "mV"}]
    assert parse_event(line(as_objects), None, rename).signals == {"pack_temp_c": 41.5, "cell_voltage_diff_mv": 187.0}
    # A nested reading is found by its path.
    nested = SignalRenames(check_signal_map({"bms.单体压差": "cell_voltage_diff_mv"}))
    assert parse_event(line({"bms": {"单体压差": 187}}), None, nested).signals == {"cell_voltage_diff_mv": 187.0}
    # Without the map: the vendor's name is read under its own name, and the Chinese one has none (set aside).
    assert parse_event(line({"BMS_CellVdiff": 187})).signals == {"bms_cell_vdiff": 187.0}
    unmapped = parse_event(line({"电池温度": 41.5}))
    assert isinstance(unmapped, AlertEvent)
    assert (unmapped.signals, unmapped.signals_set_aside) == ({}, {"电池温度": 41.5})
    assert re.search("not written in Latin letters.*VDOCTOR_SIGNAL_NAMES", set_aside_error(unmapped))


def test_a_name_the_map_lacks_is_set_aside_and_so_are_two_names_read_as_one(
    rename: SignalRenames,
) -> None:
    partly = parse_event(line({"电池温度": 41.5, "电池电压": 398}), None, rename)
    assert isinstance(partly, AlertEvent)
    assert (partly.signals, partly.signals_set_aside) == ({"pack_temp_c": 41.5}, {"电池电压": 398.0})
    assert "1 reading set aside" in set_aside_error(partly) and "'电池电压'" in set_aside_error(partly)
    # The mapped name and the name it maps to, in one alert: which one is the reading is not known, so both are
    # set aside (they refused the alert until this release).
    both = parse_event(line({"电池温度": 41.5, "pack_temp_c": 40}), None, rename)
    assert isinstance(both, AlertEvent) and both.signals == {}
    assert both.signals_set_aside == {"电池温度": "41.5", "pack_temp_c": "40"}
    # A unit sent beside a mapped name is read against that name's unit: converted, or set aside.
    in_volts = parse_event(line([{"name": "BMS_CellVdiff", "value": 0.187, "unit": "V"}]), None, rename)
    assert in_volts.signals == {"cell_voltage_diff_mv": 187.0}
    in_celsius = parse_event(line([{"name": "BMS_CellVdiff", "value": 12, "unit": "°C"}]), None, rename)
    assert isinstance(in_celsius, AlertEvent) and in_celsius.signals_set_aside == {"cell_voltage_diff_mv": "12 °C"}
    assert "°C, the name's unit is mV" in set_aside_error(in_celsius)


def test_a_map_is_read_from_json_or_csv_and_refused_with_the_entry_when_wrong(tmp_path: Path) -> None:
    as_json = tmp_path / "names.json"
    as_json.write_text(json.dumps(MAP, ensure_ascii=False), encoding="utf-8")
    assert read_signal_map(as_json) == MAP
    as_csv = tmp_path / "names.csv"
    # A spreadsheet's export: a byte-order mark, the columns in any order, blank lines, quoted cells.
    as_csv.write_text('\ufeffName,Sent\npack_temp_c,电池温度\n\n"cell_voltage_diff_mv","单体压差(mV)"\n', "utf-8")
    assert read_signal_map(as_csv) == {"电池温度": "pack_temp_c", "单体压差(mV)": "cell_voltage_diff_mv"}

    def refused(path: Path, text: str, match: str) -> None:
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=match):
            read_signal_map(path)

    no_name = r"'电池温度' maps to 'Pack Temp', which is no signal name"
    refused(tmp_path / "a.json", '{"电池温度": "Pack Temp"}', no_name)
    refused(tmp_path / "b.json", '["电池温度", "pack_temp_c"]', "expected a JSON object")
    refused(tmp_path / "c.json", '{"电池温度": ', "not valid JSON")
    refused(tmp_path / "d.json", '{" ": "pack_temp_c"}', "sent name must be non-empty")
    refused(tmp_path / "e.csv", "电池温度,pack_temp_c\n", "first row must name the columns sent and name")
    twice = "sent,name\n电池温度,pack_temp_c\n电池温度,soc_pct\n"
    refused(tmp_path / "f.csv", twice, "line 3: '电池温度' is mapped twice")
    refused(tmp_path / "g.csv", "sent,name\n电池温度\n", "line 2 has no name cell")
    # Two sent names the job reads as one name (Pack Temp, pack_temp) cannot map to two names.
    refused(tmp_path / "h.json", '{"Pack Temp": "pack_temp_c", "pack_temp": "soc_pct"}', "both read as 'pack_temp'")
    with pytest.raises(ValueError, match="cannot be read"):
        read_signal_map(tmp_path / "missing.json")


def test_the_setting_reads_the_file_where_the_job_is_built_and_ships_the_map(tmp_path: Path) -> None:
    path = tmp_path / "names.json"
    path.write_text(json.dumps(MAP, ensure_ascii=False), encoding="utf-8")
    settings = load_settings({"VDOCTOR_SIGNAL_NAMES": str(path)})
    assert settings.runtime.signal_names == MAP
    assert load_settings({}, signal_names=str(path)).runtime.signal_names == MAP
    assert load_settings({}).runtime.signal_names == {}
    # A worker gets the map itself, with no file to read.
    path.unlink()
    assert worker_settings(settings.for_workers(), {}).runtime.signal_names == MAP
    with pytest.raises(ConfigError, match="VDOCTOR_SIGNAL_NAMES: signal map .*cannot be read"):
        load_settings({"VDOCTOR_SIGNAL_NAMES": str(path)})


def test_mapped_readings_confirm_the_packs_rule_as_its_own_names_do(rename: SignalRenames) -> None:
    """P0A7F's rule tests cell_voltage_diff_mv >= 100: a Chinese fleet's 单体压差 confirms it once mapped."""
    engine = DiagnosisEngine(store=InMemoryStore(), model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack())
    session: SessionState | None = None
    dedup = DedupState()
    diagnoses = []
    for event_id, at, diff in (("e-1", T0, 87), ("e-2", T0 + timedelta(hours=2), 187)):
        sent = {"单体压差(mV)": diff, "电池温度": 35.5}
        raw = line(sent, event_id).replace(T0.strftime("%H:%M:%S"), at.strftime("%H:%M:%S"))
        result = engine.on_event(session, dedup, parse_event(raw, None, rename), raw)
        session, dedup = result.session, result.dedup
        assert result.dead_letters == []
        diagnoses += result.diagnoses
    first, second = diagnoses
    assert first.phase is Phase.INVESTIGATING
    assert second.phase is Phase.CONCLUDED
    assert second.evidence == ["dtc://P0A7F", f"signal://{VIN}/cell_voltage_diff_mv@2026-11-01T10:15:30Z"]


def test_an_alert_with_readings_set_aside_is_diagnosed_without_them_flagged_and_kept_as_a_dead_letter(
    rename: SignalRenames,
) -> None:
    # A fleet that has not yet mapped its names still gets its alerts diagnosed, from their codes and text.
    engine = DiagnosisEngine(store=InMemoryStore(), model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack())
    raw = line({"单体压差(mV)": 187, "电池温度": 35.5})
    result = engine.on_event(None, DedupState(), parse_event(raw), raw)
    (diagnosis,) = result.diagnoses
    assert "signals_set_aside" in diagnosis.flags and result.dead_letters == []
    # Without the reading P0A7F's rule has nothing to test (187 mV would confirm it, as once mapped below).
    assert diagnosis.phase is Phase.INVESTIGATING
    mapped = engine.on_event(None, DedupState(), parse_event(raw, None, rename), raw).diagnoses
    assert "signals_set_aside" not in mapped[0].flags
    # The parse stage sends the line to the dead letters as well, whole, with the reason, and the event on.
    stage = ParseEvents()
    stage.open(None)
    out = list(stage.process_element(raw, None))
    assert [kind for kind, *_ in out] == [DEAD_LETTER, EVENT]
    letter = DeadLetter.model_validate_json(out[0][2])
    assert (out[0][1], letter.stage, letter.raw) == ("validate", "validate", raw)
    assert "'单体压差(mV)', '电池温度'" in letter.error and "VDOCTOR_SIGNAL_NAMES" in letter.error
    # With the map, nothing is set aside: the event alone.
    stage = ParseEvents(signal_names=MAP)
    stage.open(None)
    assert [kind for kind, *_ in stage.process_element(raw, None)] == [EVENT]


def test_a_reading_set_aside_is_named_as_sent_the_name_a_map_entry_takes() -> None:
    sent_as = [
        ({"单体压差(mV)": 187}, "单体压差(mV)"),
        ({"bms": {"单体压差": 187}}, "bms.单体压差"),  # nested: by its path
        ([{"name": "电池温度", "value": 41, "unit": "°C"}], "电池温度"),  # an object: its name, its unit apart
        ({"电池温度": {"value": 41, "unit": "°C"}}, "电池温度"),
    ]
    for signals, name in sent_as:
        event = parse_event(line(signals))
        assert isinstance(event, AlertEvent) and list(event.signals_set_aside) == [name], signals
    # check-events shows them as what they are, dead letters, and lists no form they would be read as.
    report = check_feed([line(signals, f"e-{i}") for i, (signals, _) in enumerate(sent_as)])
    assert report.events == {"alert": 4} and report.dead[("validate", "signals")].count == 4
    assert not [form for form in report.forms if form[0] == "signal"]


def test_check_events_reads_a_feed_with_the_jobs_map(tmp_path: Path, rename: SignalRenames) -> None:
    feed = [line({"电池温度": 41.5}), line({"BMS_CellVdiff": 187}, "e-2")]
    report = check_feed(feed, None, None, rename)
    assert report.dead_letters == 0
    assert {(w, r) for (kind, w, r) in report.forms if kind == "signal"} == {
        ("电池温度", "pack_temp_c"), ("BMS_CellVdiff", "cell_voltage_diff_mv"),
    }  # fmt: skip
    assert check_feed(feed).dead_letters == 1
    # The command: the map from its flag (or VDOCTOR_SIGNAL_NAMES); a bad map is a usage error.
    alerts, names = tmp_path / "alerts.jsonl", tmp_path / "names.json"
    alerts.write_text("\n".join(feed) + "\n", encoding="utf-8")
    names.write_text(json.dumps(MAP, ensure_ascii=False), encoding="utf-8")
    command = [sys.executable, "-m", "jobs.cli", "check-events", "--alerts", str(alerts)]
    run = subprocess.run([*command, "--signal-names", str(names)], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "电池温度" in run.stdout and "pack_temp_c" in run.stdout
    assert subprocess.run(command, cwd=REPO_ROOT, capture_output=True, timeout=120).returncode == 1
    names.write_text('{"电池温度": "电池温度"}', encoding="utf-8")
    bad = subprocess.run([*command, "--signal-names", str(names)], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "--signal-names" in bad.stderr and "no signal name" in bad.stderr


def test_the_packs_rule_signals_are_listed_for_a_map() -> None:
    """``vdoctor knowledge signals``: the names a map maps to, for the pack's rules to test them."""
    signals = load_pack().rule_signals()
    assert [e.code for e in signals["cell_voltage_diff_mv"]] == ["P0A7F"]
    assert all(SIGNAL_NAME_RE.match(name) for name in signals)
    run = subprocess.run([sys.executable, "-m", "jobs.cli", "knowledge", "signals", "--json"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    listed = {item["signal"]: item for item in json.loads(run.stdout)}
    assert set(listed) == set(signals)
    assert listed["cell_voltage_diff_mv"]["unit"] == "mV"
    assert listed["cell_voltage_diff_mv"]["rules"][0]["rule"] == "cell_voltage_diff_mv>=100"
    # Every name listed maps: a map to it is accepted.
    assert check_signal_map({f"信号{i}": name for i, name in enumerate(listed)}) is not None
