"""Summary fidelity (nothing lost, nothing invented, real compression) and the
case summary written to long-term memory."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from vdoctor.knowledge import load_pack
from vdoctor.lines import KeyFact
from vdoctor.memory.fidelity import check_summary
from vdoctor.memory.session import Conclusion, Reading, SessionState, TimelineEntry
from vdoctor.memory.summary import summarize_case
from vdoctor.records import Phase

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"
URI_187 = f"signal://{VIN}/cell_voltage_diff_mv@2026-11-01T10:15:30Z"
SOURCE = "\n".join(
    [
        "2026-11-01 08:15 | alert P0A7F cell_voltage_diff_mv=87 | investigating | dtc://P0A7F",
        f"2026-11-01 10:15 | alert P0A7F cell_voltage_diff_mv=187 | concluded P2 conf 0.80 | {URI_187}",
        "车主反馈：电池包单体压差187mV，温度41.5℃",
    ]
)
REQUIRED = ["P0A7F", "cell_voltage_diff_mv=187", "P2", "0.80"]
GOOD = f"2026-11-01 10:15 | concluded P0A7F | P2 conf 0.80; cell_voltage_diff_mv=187 | {URI_187}"


def test_good_summary_passes() -> None:
    report = check_summary(GOOD, REQUIRED, SOURCE)
    assert report.missing == []
    assert report.invented == []
    assert report.ok


def test_chinese_summary_with_source_numbers_passes() -> None:
    report = check_summary(GOOD + "\n压差187mV，温度41.5℃", REQUIRED, SOURCE)
    assert report.invented == []
    assert report.ok


def test_missing_code_fails() -> None:
    report = check_summary(GOOD.replace("concluded P0A7F", "concluded"), REQUIRED, SOURCE)
    assert report.missing == ["P0A7F"]
    assert report.invented == []
    assert not report.ok


def test_missing_number_fails() -> None:
    summary = GOOD.replace("cell_voltage_diff_mv=187", "cell voltage diff high")
    report = check_summary(summary, REQUIRED, SOURCE)
    assert report.missing == ["cell_voltage_diff_mv=187"]
    assert not report.ok


def test_invented_number_fails() -> None:
    # The source says 187; a summary that says 178 both loses 187 and invents 178.
    report = check_summary(GOOD.replace("=187", "=178"), REQUIRED, SOURCE)
    assert report.missing == ["cell_voltage_diff_mv=187"]
    assert report.invented == ["178"]
    assert not report.ok


@pytest.mark.parametrize(
    ("extra", "invented"),
    [
        ("\n压差178mV", ["178"]),
        ("\n温度45.1℃", ["45.1"]),
        ("\n报P0300故障", ["P0300"]),
    ],
    ids=["chinese-number", "chinese-decimal", "chinese-code"],
)
def test_invented_facts_in_chinese_text_fail(extra: str, invented: list[str]) -> None:
    report = check_summary(GOOD + extra, REQUIRED, SOURCE)
    assert report.missing == []
    assert report.invented == invented
    assert not report.ok


def test_invented_code_fails() -> None:
    report = check_summary(GOOD + " (also P0300)", REQUIRED, SOURCE)
    assert report.invented == ["P0300"]
    assert not report.ok


def test_invented_uri_fails() -> None:
    other = f"case://{VIN}/{VIN}-20261001T000000"
    report = check_summary(GOOD + f" | {other}", REQUIRED, SOURCE)
    assert report.invented == [other]
    assert not report.ok


def test_numbers_of_a_vin_or_code_are_not_numbers() -> None:
    # 2180 and 2183294 inside the VIN, 0 and 7 inside P0A7F are not readings.
    source = f"vin {VIN} code P0A7F reading 5"
    report = check_summary(f"{VIN} P0A7F 5", [], source)
    assert report.invented == []


def test_compression_ratio_applies_only_to_sources_over_1500_chars() -> None:
    summary = "s" * 301
    at_limit = check_summary(summary, [], "x" * 1500)
    assert at_limit.ratio_ok  # 1500 chars: too short for the 5:1 rule
    over = check_summary(summary, [], "x" * 1501)
    assert over.ratio == pytest.approx(1501 / 301)
    assert not over.ratio_ok  # 4.99:1 < 5:1
    assert not over.ok
    assert check_summary("s" * 300, [], "x" * 1501).ratio_ok  # 5.003:1


# -- summarize_case -------------------------------------------------------------

T1 = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
T2 = datetime(2026, 11, 1, 10, 15, 30, tzinfo=UTC)
URI_87 = f"signal://{VIN}/cell_voltage_diff_mv@2026-11-01T08:15:30Z"


def concluded_session(filler_alerts: int = 0) -> SessionState:
    session = SessionState(
        vin=VIN,
        series="EV-A",
        session_id=f"{VIN}-20261101T081530",
        opened_at=T1,
        last_event_at=T2,
        alerts=2,
        codes={"P0A7F": 2},
    )
    session.add_reading(Reading(name="cell_voltage_diff_mv", value=87, ts=T1, uri=URI_87))
    session.add_reading(Reading(name="cell_voltage_diff_mv", value=187, ts=T2, uri=URI_187))
    session.add_reading(
        Reading(name="pack_temp_c", value=41.5, ts=T2, uri=f"signal://{VIN}/pack_temp_c@2026-11-01T10:15:30Z")
    )
    session.add_timeline(
        TimelineEntry(
            ts=T1, event="alert P0A7F cell_voltage_diff_mv=87", conclusion="investigating", evidence="dtc://P0A7F"
        )
    )
    for i in range(filler_alerts):
        # Long alerts between the first and the concluding one.
        session.add_timeline(
            TimelineEntry(
                ts=T1, event=f"alert P0A7F {'x' * 200} {i}", conclusion="investigating", evidence="dtc://P0A7F"
            )
        )
    session.add_timeline(
        TimelineEntry(
            ts=T2,
            event="alert P0A7F cell_voltage_diff_mv=187 pack_temp_c=41.5",
            conclusion="concluded P2 conf 0.80",
            evidence="dtc://P0A7F",
        )
    )
    pack = load_pack()
    entry = pack.get("P0A7F")
    assert entry is not None and entry.root_cause and entry.fix_action
    session.conclude(
        Conclusion(
            root_cause=entry.root_cause,
            fix_action=entry.fix_action,
            priority="P2",
            confidence=0.8,
            evidence=["dtc://P0A7F", URI_187],
            codes=["P0A7F"],
        )
    )
    return session


def test_summary_of_a_concluded_session() -> None:
    session = concluded_session()
    assert session.phase is Phase.CONCLUDED
    case = summarize_case(session, load_pack())

    opening = "2026-11-01 08:15 | alert P0A7F cell_voltage_diff_mv=87 | investigating | dtc://P0A7F"
    readings = "readings: cell_voltage_diff_mv=87→187mV pack_temp_c=41.5°C"
    final = f"2026-11-01 10:15 | concluded P0A7F | P2 conf 0.80; confirmed cell_voltage_diff_mv=187>=100 | {URI_187}"
    # 84 + 58 + 161 + 2 newlines = 305 > 300: the opening alert line gives way
    # first (its code and reading are on the other two lines).
    assert (len(opening), len(readings), len(final)) == (84, 58, 161)
    assert case.text == f"{readings}\n{final}"
    assert case.omitted == []  # the opening line held no fact of its own
    assert case.required == ["P0A7F", "confirmed cell_voltage_diff_mv=187>=100", "P2", "0.80", URI_187]
    assert (case.report.readings_checked, case.report.readings_stated, case.report.readings_omitted) == (3, 3, 0)
    assert case.report.ok, case.report


def test_summary_lines_are_time_event_conclusion_uri_and_one_readings_line() -> None:
    case = summarize_case(concluded_session(), load_pack())
    for line in case.text.splitlines():
        if line.startswith("readings: "):
            continue
        time, event, conclusion, uri = line.split(" | ")
        assert datetime.strptime(time, "%Y-%m-%d %H:%M")
        assert event and conclusion
        assert uri.startswith(("dtc://", "signal://", "case://"))
    assert sum(line.startswith("readings: ") for line in case.text.splitlines()) == 1


def test_summary_of_a_long_session_stays_within_300_chars() -> None:
    # 70 fillers overflow the 64-entry timeline; the opening and the concluding entries stay.
    session = concluded_session(filler_alerts=70)
    assert len(session.timeline) == 64
    case = summarize_case(session, load_pack())
    assert len(case.text) <= 300
    assert len(case.source) > 1500
    assert case.report.ratio >= 5
    assert "cell_voltage_diff_mv=187" in case.text
    assert case.report.ok, case.report


def test_summary_of_a_repeat_confirmed_code() -> None:
    pack = load_pack()
    entry = pack.get("P0A1F")
    assert entry is not None and entry.confirm is not None and entry.confirm.repeat == 2
    session = SessionState(
        vin=VIN, series="EV-A", session_id=f"{VIN}-20261101T081530", opened_at=T1, last_event_at=T2, alerts=2
    )
    session.add_timeline(TimelineEntry(ts=T1, event="alert P0A1F", conclusion="investigating", evidence="dtc://P0A1F"))
    session.add_timeline(
        TimelineEntry(
            ts=T2, event="alert P0A1F", conclusion=f"concluded {entry.priority} conf 0.70", evidence="dtc://P0A1F"
        )
    )
    session.conclude(
        Conclusion(
            root_cause=str(entry.root_cause),
            fix_action=str(entry.fix_action),
            priority=entry.priority or "P1",
            confidence=0.7,
            evidence=["dtc://P0A1F"],
            codes=["P0A1F"],
        )
    )
    case = summarize_case(session, pack)
    assert case.text.splitlines()[-1] == (
        f"2026-11-01 10:15 | concluded P0A1F | {entry.priority} conf 0.70; confirmed repeat 2 | dtc://P0A1F"
    )
    assert case.report.ok, case.report


def test_an_open_session_is_not_summarised() -> None:
    session = SessionState(vin=VIN, series="EV-A", session_id=f"{VIN}-20261101T081530", opened_at=T1, last_event_at=T1)
    with pytest.raises(ValueError, match="CONCLUDED"):
        summarize_case(session, load_pack())


def test_a_session_concludes_once() -> None:
    session = concluded_session()
    with pytest.raises(ValueError, match="INVESTIGATING"):
        session.conclude(session.conclusion)  # type: ignore[arg-type]


def test_case_summary_keeps_exclusions_and_void_conclusions() -> None:
    session = concluded_session()
    session.working.key_facts = [
        KeyFact.parse(line)
        for line in (
            "code P0A7F",
            "excluded: 怀疑线束松动，已排除 @2026-11-01T09:00:00Z",
            "void: 初判线束腐蚀的结论已作废 @2026-11-01T09:30:00Z",
        )
    ]
    case = summarize_case(session, load_pack())
    excluded = "2026-11-01 09:00 | excluded | 怀疑线束松动，已排除 | -"
    void = "2026-11-01 09:30 | void | 初判线束腐蚀的结论已作废 | -"
    final = f"2026-11-01 10:15 | concluded P0A7F | P2 conf 0.80; confirmed cell_voltage_diff_mv=187>=100 | {URI_187}"
    readings = "readings: cell_voltage_diff_mv=87→187mV"
    # With the opening line gone: excluded 44 + void 42 + readings 58 + final
    # 161 + 3 newlines = 308 > 300. Next to give way are the readings of a
    # signal no code's rule names (pack_temp_c; P0A7F's rule names the
    # confirming cell_voltage_diff_mv, which never gives way): 289 characters.
    assert (len(excluded), len(void), len(final)) == (44, 42, 161)
    assert case.text == f"{excluded}\n{void}\n{readings}\n{final}"
    assert case.omitted == ["pack_temp_c=41.5°C"]
    assert "怀疑线束松动，已排除" in case.required and "初判线束腐蚀的结论已作废" in case.required
    assert (case.report.readings_checked, case.report.readings_stated, case.report.readings_omitted) == (3, 2, 1)
    assert case.report.ok, case.report
