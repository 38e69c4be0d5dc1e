"""Case summaries keep every reading (spans, give-way order) and agree with the session's decisions."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from vdoctor.knowledge import load_pack
from vdoctor.lines import KeyFact, ReadingsLine, ReadingSpan
from vdoctor.memory.fidelity import check_request
from vdoctor.memory.request import CaseDecision, SummaryRequest, request_from_json, request_to_json
from vdoctor.memory.session import MAX_READINGS, Conclusion, Reading, SessionState, TimelineEntry
from vdoctor.memory.summary import summarize_case

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"
URI = f"signal://{VIN}/cell_voltage_diff_mv@2026-11-01T10:15:30Z"


# -- reading spans -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "values", "text"),
    [
        ("cell_voltage_diff_mv", [87, 120, 187], "cell_voltage_diff_mv=87→187mV"),  # first/latest are the extremes
        ("soc_pct", [80, 81, 76, 78], "soc_pct=80→78↓76↑81%"),
        ("pack_temp_c", [41.5], "pack_temp_c=41.5°C"),
        ("pack_temp_c", [41.5, 41.5], "pack_temp_c=41.5°C"),
        ("coolant_temp_c", [-35, -40.5, -30], "coolant_temp_c=-35→-30↓-40.5°C"),
        ("rain_sensor_raw", [3, 5], "rain_sensor_raw=3→5"),  # no known unit: none shown
        ("motor_torque_nm", [216, -96, -71], "motor_torque_nm=216→-71↓-96N·m"),
    ],
)
def test_a_span_states_first_latest_lowest_highest_and_the_unit(name: str, values: list[float], text: str) -> None:
    span = ReadingSpan.of(name, values)
    assert span.render() == text
    assert ReadingSpan.find_all(f"readings: {text} x") == [span]
    assert set(span.values()) == {str(v).removesuffix(".0") for v in (values[0], values[-1], min(values), max(values))}


def test_a_readings_line_parses_back_and_a_span_inside_a_longer_name_is_not_found() -> None:
    line = ReadingsLine((ReadingSpan.of("pack_temp_c", [41.5]), ReadingSpan.of("a_b", [1, 2])))
    assert line.render() == "readings: pack_temp_c=41.5°C a_b=1→2"
    assert ReadingsLine.parse(line.render()) == line
    assert ReadingsLine.parse("alert P0A7F") is None
    assert ReadingSpan.find_all("battery_pack_temp_c=41.5°C")[0].name == "battery_pack_temp_c"
    assert ReadingSpan.find_all("a_b=1→23") == [ReadingSpan("a_b", "1", "23", "1", "23", "")]


def test_a_session_keeps_every_signals_key_readings_beyond_the_readings_it_stores() -> None:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    s = SessionState(vin=VIN, series="EV-A", session_id=f"{VIN}-x", opened_at=t0, last_event_at=t0)
    values = [50.0, 12.0, *([30.0] * (MAX_READINGS + 10)), 99.0, 40.0]
    for i, v in enumerate(values):
        ts = t0 + timedelta(minutes=i)
        s.add_reading(Reading(name="cell_voltage_diff_mv", value=v, ts=ts, uri=f"signal://{VIN}/x@{ts}"))
    assert len(s.readings) == MAX_READINGS and s.readings[0].value == 30.0  # the first two are gone from here
    assert [x.render() for x in s.spans()] == ["cell_voltage_diff_mv=50→40↓12↑99mV"]  # but not from the span


# -- a hand-made case request ------------------------------------------------------------

SOURCE = "\n".join(
    [
        "2026-11-01 08:15 | alert P0A7F cell_voltage_diff_mv=87 pack_temp_c=41.5 | investigating | dtc://P0A7F",
        f"2026-11-01 10:15 | alert P0A7F cell_voltage_diff_mv=187 pack_temp_c=44 | concluded P2 conf 0.80 | {URI}",
        "2026-11-01 09:00 | excluded | 怀疑线束松动，已排除",
        "2026-11-01 09:05 | excluded | harness looseness",
        "2026-11-01 09:30 | void | harness connector X12 conclusion",
        "readings: cell_voltage_diff_mv=87→187mV pack_temp_c=41.5→44°C",
        '{"root_cause":"A weak cell group self-discharges faster than the rest of the pack.",'
        '"fix_action":"Balance the pack; replace the module.","priority":"P2","confidence":0.8}',
        "rule P0A7F: cell_voltage_diff_mv>=100",
    ]
)
DECISION = CaseDecision(
    root_cause="A weak cell group self-discharges faster than the rest of the pack.",
    fix_action="Balance the pack; replace the module.",
    priority="P2",
    confidence="0.80",
    codes=["P0A7F"],
    confirmation="confirmed cell_voltage_diff_mv=187>=100",
    evidence=URI,
    void=["harness connector X12 conclusion"],
    excluded=["怀疑线束松动，已排除", "harness looseness"],
    spans=["cell_voltage_diff_mv=87→187mV", "pack_temp_c=41.5→44°C"],
)
FINAL = f"2026-11-01 10:15 | concluded P0A7F | P2 conf 0.80; confirmed cell_voltage_diff_mv=187>=100 | {URI}"
GOOD = "\n".join(
    [
        "2026-11-01 09:00 | excluded | 怀疑线束松动，已排除 | -",
        "2026-11-01 09:05 | excluded | harness looseness | -",
        "2026-11-01 09:30 | void | harness connector X12 conclusion | -",
        "readings: cell_voltage_diff_mv=87→187mV pack_temp_c=41.5→44°C",
        FINAL,
    ]
)


def request(omitted: list[str] | None = None, readings: list[str] | None = None) -> SummaryRequest:
    return SummaryRequest(
        kind="case",
        source=SOURCE,
        required=["P0A7F", DECISION.confirmation, "P2", "0.80", *DECISION.excluded, DECISION.void[0], URI],
        events=[],
        max_chars=600,  # room for the hand-made cases; the 300 limit is tested with summarize_case
        readings=DECISION.spans if readings is None else readings,
        omitted=omitted or [],
        decision=DECISION,
    )


def test_the_faithful_summary_passes_and_counts_its_readings() -> None:
    report = check_request(GOOD, request())
    assert report.ok, report.describe()
    assert (report.readings_checked, report.readings_stated, report.readings_omitted) == (4, 4, 0)


def test_a_request_survives_its_json_form() -> None:
    assert request_from_json(request_to_json(request())) == request()


def test_a_span_that_gave_way_is_declared_not_missing() -> None:
    summary = GOOD.replace(" pack_temp_c=41.5→44°C", "")
    assert check_request(summary, request()).missing == ["pack_temp_c=41.5→44°C"]
    declared = request(omitted=["pack_temp_c=41.5→44°C"], readings=["cell_voltage_diff_mv=87→187mV"])
    report = check_request(summary, declared)
    assert report.ok and (report.readings_stated, report.readings_omitted) == (2, 2)


@pytest.mark.parametrize(
    ("summary", "kind", "finding"),
    [
        (GOOD.replace("87→187mV", "87→187V"), "contradicted", "cell_voltage_diff_mv=87→187V is not the session's"),
        (GOOD.replace("41.5→44°C", "41.5°C"), "contradicted", "pack_temp_c=41.5°C is not the session's"),
        (GOOD + "\nalso pack_temp_c=43", "invented", "pack_temp_c=43"),
        (GOOD + "\nfan_duty_raw=3", "invented", "reading of fan_duty_raw, a signal the session never had"),
        (GOOD.replace("P2 conf", "P1 conf"), "contradicted", "priority P1 on the conclusion; the session's is P2"),
        (GOOD.replace("conf 0.80", "conf 0.90"), "contradicted", "confidence 0.90; the session's is 0.80"),
        (GOOD.replace(">=100", ">=90"), "contradicted", "'confirmed cell_voltage_diff_mv=187>=90' is not the"),
        (GOOD.replace("09:30 | void |", "09:30 | decision |"), "contradicted", "voided conclusion stated as valid"),
        (GOOD.replace("| excluded | harness", "| suspected | harness"), "contradicted", "excluded hypothesis stated"),
        (GOOD + "\ncause: 怀疑线束松动", "contradicted", "cause or fix that is not the session's"),
        (GOOD + "\nroot cause: corroded ground strap", "invented", "words not in the source: corroded, ground, strap"),
        (GOOD + "\n原因：冷却液泄漏", "invented", "Chinese not in the source"),
        (GOOD.replace("09:00", "09:01"), "invented", "time 2026-11-01 09:01"),
        (GOOD.replace("concluded P0A7F", "P0A7F"), "missing", "concluded P0A7F P2 conf 0.80"),
    ],
    ids=[
        "unit",
        "span-values",
        "bare-reading",
        "unknown-signal",
        "priority",
        "confidence",
        "threshold",
        "void-as-valid",
        "exclusion-unmarked",
        "excluded-as-cause",
        "invented-cause",
        "invented-chinese",
        "time",
        "no-conclusion",
    ],
)
def test_each_way_of_breaking_the_summary_is_found(summary: str, kind: str, finding: str) -> None:
    report = check_request(summary, request())
    assert not report.ok
    assert any(finding in item for item in getattr(report, kind)), report.describe()


def test_the_sessions_own_cause_and_fix_may_be_stated_shortened_and_marked_clauses_are_not_claims() -> None:
    ok = GOOD + "\ncause: weak cell group self-discharges; fix: balance the pack"
    assert check_request(ok, request()).ok, check_request(ok, request()).describe()
    # A voided conclusion that says "caused" is a void clause, not a claim of cause.
    void = GOOD.replace("harness connector X12 conclusion | -", "harness connector X12 conclusion | void")
    assert check_request(void + "\nthe X12 connector caused it, void", request()).contradicted == []


# -- summarize_case: what gives way first ------------------------------------------------


def uri(ts: datetime) -> str:
    return f"signal://{VIN}/cell_voltage_diff_mv@{ts:%Y-%m-%dT%H:%M:%SZ}"


def wide_session(extra_signals: int, void: bool = True) -> SessionState:
    """A concluded P0A7F session with two alerts and many signals besides the confirming one."""
    t1, t2 = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC), datetime(2026, 11, 1, 10, 15, 30, tzinfo=UTC)
    s = SessionState(
        vin=VIN, series="EV-A", session_id=f"{VIN}-20261101T081530", opened_at=t1, last_event_at=t2,
        codes={"P0A7F": 2, "P1A9A": 1, "P0AA6": 1},
    )  # fmt: skip
    for ts, diff in ((t1, 87), (t2, 187)):
        s.add_reading(Reading(name="cell_voltage_diff_mv", value=diff, ts=ts, uri=uri(ts)))
        # P0AA6's rule names isolation_drop_pct: ranked above signals no code names.
        s.add_reading(Reading(name="isolation_drop_pct", value=20 + diff / 10, ts=ts, uri="u"))
        for i in range(extra_signals):
            s.add_reading(Reading(name=f"context_{i}_kpa", value=100 + i + diff, ts=ts, uri="u"))
    s.add_timeline(TimelineEntry(ts=t1, event="alert P0A7F", conclusion="investigating", evidence="dtc://P0A7F"))
    s.add_timeline(
        TimelineEntry(ts=t2, event="alert P0A7F", conclusion="concluded P2 conf 0.80", evidence="dtc://P0A7F")
    )
    facts = ["excluded: 怀疑线束松动，已排除 @2026-11-01T09:00:00Z"]
    facts += ["void: 初判线束腐蚀的结论已作废 @2026-11-01T09:30:00Z"] if void else []
    s.working.key_facts = [KeyFact.parse(f) for f in facts]
    entry = load_pack().get("P0A7F")
    assert entry is not None and entry.root_cause and entry.fix_action
    s.conclude(
        Conclusion(root_cause=entry.root_cause, fix_action=entry.fix_action, priority="P2", confidence=0.8,
                   evidence=["dtc://P0A7F", uri(t2)], codes=["P0A7F"])
    )  # fmt: skip
    return s


def test_parts_give_way_in_the_documented_order_and_the_confirmation_never_does() -> None:
    case = summarize_case(wide_session(2), load_pack())
    # final 161 + readings + exclusion 44 + void 42 > 300 with anything more: the
    # opening line, the signals no code names (the last seen first), the signal
    # another code's rule names, then the codes not concluded (the last seen
    # first) gave way; the exclusion and the void conclusion still fit.
    assert case.omitted == [
        "context_1_kpa=188→288kPa",
        "context_0_kpa=187→287kPa",
        "isolation_drop_pct=28.7→38.7%",
        "code P0AA6",
        "code P1A9A",
    ]
    assert case.text.splitlines()[:3] == [
        "2026-11-01 09:00 | excluded | 怀疑线束松动，已排除 | -",
        "2026-11-01 09:30 | void | 初判线束腐蚀的结论已作废 | -",
        "readings: cell_voltage_diff_mv=87→187mV",
    ]
    assert case.report.ok and (case.report.readings_stated, case.report.readings_omitted) == (2, 6)

    long = wide_session(0)
    excluded = "怀疑电池包冷却板堵塞导致温差，冷却液流量与压差测试均正常，已排除" * 2
    void = "第二次判断为均衡电路故障的结论已作废，均衡电流测量正常" * 2
    long.working.key_facts += [
        KeyFact.parse(f"excluded: {excluded} @2026-11-01T09:40:00Z"),
        KeyFact.parse(f"void: {void} @2026-11-01T09:50:00Z"),
    ]
    case = summarize_case(long, load_pack())
    # Then exclusions (the latest first), then void conclusions (the latest first).
    assert [o.split(":")[0] for o in case.omitted] == [
        "isolation_drop_pct=28.7→38.7%", "code P0AA6", "code P1A9A", "excluded", "excluded", "void",
    ]  # fmt: skip
    assert case.omitted[3].endswith("@2026-11-01T09:40:00Z") and case.omitted[5].endswith("@2026-11-01T09:50:00Z")
    assert "初判线束腐蚀的结论已作废" in case.text
    assert "confirmed cell_voltage_diff_mv=187>=100" in case.text and "cell_voltage_diff_mv=87→187mV" in case.text
    assert len(case.text) <= 300 and case.report.ok, case.report.describe()


def test_the_engine_writes_what_gave_way_on_the_record_and_flags_the_diagnosis() -> None:
    from vdoctor.diagnosis import DiagnosisEngine
    from vdoctor.embedders.hashing import HashingEmbedder
    from vdoctor.events import AlertEvent
    from vdoctor.memory.session import DedupState
    from vdoctor.models.offline import OfflineModel
    from vdoctor.stores import open_store

    store = open_store("memory://")
    engine = DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack())
    signals: dict[str, float] = {f"context_{i}_kpa": 100.0 + i for i in range(20)}
    signals["cell_voltage_diff_mv"] = 187
    alert = AlertEvent(type="alert", event_id="e-1", vin=VIN, series="EV-A", ts=datetime(2026, 11, 1, tzinfo=UTC),
                       alert_text="压差过大", dtc_codes=["P0A7F"], signals=signals)  # fmt: skip
    diagnosis = engine.on_event(None, DedupState(), alert, "{}").diagnoses[0]
    [record] = store.history(VIN)
    assert "summary_omitted" in diagnosis.flags and "summary_fidelity_failed" not in diagnosis.flags
    assert record.omitted and all(o.startswith("context_") for o in record.omitted)
    assert "cell_voltage_diff_mv=187mV" in record.summary and len(record.summary) <= 300


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # A line typed void whose text takes the state back.
        ("| void | harness connector X12 conclusion |", "| void | harness connector X12 conclusion not void |"),
        ("| excluded | harness looseness |", "| excluded | harness looseness, not ruled out |"),
    ],
)
def test_a_state_the_line_takes_back_is_caught(old: str, new: str) -> None:
    assert old in GOOD
    report = check_request(GOOD.replace(old, new), request())
    assert not report.ok and report.contradicted, report


@pytest.mark.parametrize(
    "tail",
    [
        # The session's cause confirmed while other causes are ruled out, on the concluding line.
        "{cause} confirmed, other causes ruled out",
        # A void word elsewhere on the cause's line, about something else.
        "{cause}; the earlier diagnosis of a void reading",
        # A first look that did not conclude, on the line that concludes.
        "an earlier stage not concluded, now confirmed",
    ],
)
def test_faithful_lines_near_the_new_checks_pass(tail: str) -> None:
    """The checks for a conclusion taken back and the own cause ruled out read the clause and the line's other
    marks: these faithful lines a model summarizer may write were rejected by their first versions."""
    cause = request().decision.root_cause  # type: ignore[union-attr]
    report = check_request(GOOD.replace(FINAL, f"{FINAL} | {tail.format(cause=cause)}"), request())
    assert not report.contradicted, report.contradicted


def test_an_excluded_fact_that_holds_its_own_negation_is_faithful_as_written() -> None:
    """The fact "harness ruled out, pump not ruled out yet" restated as is: the negation is the fact's own."""
    text = "harness ruled out, pump not ruled out yet"
    req = request()
    req = replace(req, decision=replace(req.decision, excluded=[*req.decision.excluded, text]))  # type: ignore[arg-type]
    report = check_request(f"{GOOD}\n2026-11-01 09:10 | excluded | {text} | -", req)
    assert not report.contradicted, report.contradicted
