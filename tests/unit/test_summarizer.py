"""Structured key facts, the three compression triggers, and the summarizer's
check / repair / retry / flag path with a scripted summary model."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.events import AlertEvent
from vdoctor.knowledge import load_pack
from vdoctor.lines import KeyFact, SummaryLine
from vdoctor.memory.facts import extract_answer_facts, extract_text_facts, extract_tool_facts
from vdoctor.memory.fidelity import check_summary
from vdoctor.memory.session import DedupState
from vdoctor.memory.summarizer import (
    SUMMARY_PROMPT_VERSION,
    FidelityMetrics,
    ModelSummarizer,
    OfflineSummarizer,
    SummaryRequest,
    repair,
    summarize_checked,
)
from vdoctor.memory.working import Round, WorkingMemory, WorkingState
from vdoctor.models.base import ChatResponse, Message, ToolSpec
from vdoctor.models.offline import OfflineModel
from vdoctor.stores import open_store

pytestmark = pytest.mark.unit


def lines(facts: list[KeyFact]) -> list[str]:
    return [f.render() for f in facts]


VIN = "LSVAU2180N2183294"
URI = f"signal://{VIN}/cell_voltage_diff_mv@2026-11-01T10:15:30Z"


@dataclass
class ScriptedModel:
    """A ChatModel that answers from a script and keeps what it was sent."""

    answers: list[str]
    name: str = "scripted"
    sent: list[list[Message]] = field(default_factory=list)

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        self.sent.append(list(messages))
        assert tools == []
        return ChatResponse(content=self.answers[min(len(self.sent) - 1, len(self.answers) - 1)])


# -- structured key facts ------------------------------------------------------------


def test_lookup_result_gives_codes_with_definitions() -> None:
    result = json.dumps(
        {"codes": [{"code": "P0A7F", "definition": "Hybrid battery pack deterioration"}], "unknown": ["P1234"]}
    )
    assert lines(extract_tool_facts(result, "T1")) == ["code P0A7F: Hybrid battery pack deterioration"]


def test_signal_history_gives_readings_with_times() -> None:
    result = json.dumps(
        {"signal": "cell_voltage_diff_mv", "readings": [{"value": 187.0, "ts": "2026-11-01T10:15:30Z", "uri": URI}]}
    )
    assert lines(extract_tool_facts(result)) == ["reading cell_voltage_diff_mv=187 @2026-11-01T10:15:30Z"]


def test_a_tool_result_in_prose_is_read_as_text() -> None:
    assert lines(extract_tool_facts("工单WO-20931 已关闭，压差12mV", "T9")) == ["reading 12mV @T9", "id WO-20931"]


def test_answer_gives_decision_exclusions_voids_and_evidence() -> None:
    answer = {
        "phase": "CONCLUDED",
        "root_cause": "cell imbalance",
        "confidence": 0.8,
        "codes": ["P0A7F"],
        "evidence": [URI],
        "excluded": ["harness looseness"],
        "voided": ["step-4 harness conclusion"],
    }
    assert lines(extract_answer_facts(answer, "T2")) == [
        "code P0A7F",
        "decision: CONCLUDED cell imbalance (confidence 0.8) @T2",  # as the answer wrote it
        f"evidence {URI}",
        "excluded: harness looseness @T2",
        "void: step-4 harness conclusion @T2",
    ]


@pytest.mark.parametrize(
    ("text", "fact"),
    [
        (
            "The step-4 conclusion is void: continuity is normal.",
            "void: The step-4 conclusion is void: continuity is normal @T",
        ),
        ("第4步的结论已作废，线束导通正常。", "void: 第4步的结论已作废，线束导通正常 @T"),
        ("初判被推翻", "void: 初判被推翻 @T"),
    ],
    ids=["english", "chinese-作废", "chinese-推翻"],
)
def test_overturned_conclusions_are_key_facts(text: str, fact: str) -> None:
    assert fact in lines(extract_text_facts(text, "T"))


def test_all_three_units_of_the_issue_in_one_chinese_sentence() -> None:
    facts = lines(extract_text_facts("压差187mV，温度46.5℃，持续3.2 s", "T"))
    assert [f for f in facts if f.startswith("reading")] == ["reading 187mV @T", "reading 46.5℃ @T", "reading 3.2s @T"]


# -- triggers ------------------------------------------------------------------------


def _round(i: int, words: int = 5) -> Round:
    return Round(ts=f"2026-11-01T{i:02d}:00:00Z", user=f"alert {i} P0A7F", assistant="ok " + "word " * words)


def test_each_trigger_is_counted() -> None:
    wm = WorkingMemory(WorkingState(), budget_tokens=1000)
    for i in range(1, 8):  # the 7th round passes the 6-round window: one threshold fold
        wm.add_round(_round(i))
    assert (wm.state.threshold_folds, wm.state.stage_folds, wm.state.session_folds) == (1, 0, 0)
    wm.end_stage()
    assert (wm.state.threshold_folds, wm.state.stage_folds, wm.state.session_folds) == (1, 1, 0)
    wm.add_round(_round(8))
    wm.close_session("2026-11-01 08:00 | concluded P0A7F | P2 conf 0.80 | dtc://P0A7F")
    assert (wm.state.threshold_folds, wm.state.stage_folds, wm.state.session_folds) == (1, 1, 1)
    # The whole session is now its case summary; key facts stay.
    assert wm.state.rounds == []
    assert wm.state.summary_lines == ["2026-11-01 08:00 | concluded P0A7F | P2 conf 0.80 | dtc://P0A7F"]
    assert "code P0A7F" in lines(wm.state.key_facts)
    # Three summaries were written and checked: the threshold fold (the oldest round) and end_stage's fold of
    # the 6 rounds left, in two pieces (a summary holds at most 300 characters, and their lines are longer). The round
    # left when the session closed is not folded first (the case summary replaces that fold at once).
    assert wm.metrics.checked == 3 and wm.metrics.failed == 0


def test_token_trigger_folds_before_the_round_limit() -> None:
    # 2 rounds of ~510 tokens pass 70% of a 1000 budget long before 6 rounds.
    wm = WorkingMemory(WorkingState(), budget_tokens=1000)
    wm.add_round(_round(1, words=500))
    assert wm.state.threshold_folds == 0
    wm.add_round(_round(2, words=500))
    assert wm.state.threshold_folds >= 1
    assert wm.tokens() <= 700


def test_with_no_rounds_left_the_oldest_summary_lines_give_way() -> None:
    state = WorkingState(
        summary_lines=[f"line {i} " + "word " * 100 for i in range(8)], key_facts=[KeyFact.code("P0A7F")]
    )
    wm = WorkingMemory(state, budget_tokens=1000)
    assert wm.compress_oldest_half()
    assert [ln.split(" word")[0] for ln in wm.state.summary_lines] == ["line 4", "line 5", "line 6", "line 7"]
    assert lines(wm.state.key_facts) == ["code P0A7F"]


# -- summarizer: check, repair, retry, flag ------------------------------------------------

SOURCE = (
    f"2026-11-01 10:15 | alert P0A7F cell_voltage_diff_mv=187 | concluded P2 conf 0.80 | {URI}\n怀疑线束松动，已排除"
)
REQUIRED = ["P0A7F", "cell_voltage_diff_mv=187", "怀疑线束松动，已排除"]
GOOD = f"2026-11-01 10:15 | concluded P0A7F | cell_voltage_diff_mv=187; 怀疑线束松动，已排除 | {URI}"


def request() -> SummaryRequest:
    return SummaryRequest(
        kind="case",
        source=SOURCE,
        required=REQUIRED,
        events=[SummaryLine("2026-11-01 10:15", "concluded P0A7F", "P2", URI)],
    )


def test_a_faithful_model_summary_passes_first_time() -> None:
    model = ScriptedModel([GOOD])
    metrics = FidelityMetrics()
    out = summarize_checked(ModelSummarizer(model), request(), metrics)
    assert out.ok and out.text == GOOD and out.attempts == 1
    assert metrics.as_dict() == {
        "summaries_checked": 1,
        "summaries_passed_first_time": 1,
        "summaries_repaired": 0,
        "summaries_retried": 0,
        "summary_fidelity_failed": 0,
    }
    system = model.sent[0][0].content
    assert "one line per event, `time | event | conclusion | evidence URI`" in system
    assert "At most 300 characters" in system
    assert "- 怀疑线束松动，已排除" in system
    assert model.sent[0][1].content == SOURCE


def test_a_summary_missing_an_exclusion_is_repaired_with_a_fact_line() -> None:
    dropped = GOOD.replace("; 怀疑线束松动，已排除", "")
    metrics = FidelityMetrics()
    out = summarize_checked(ModelSummarizer(ScriptedModel([dropped])), request(), metrics)
    assert out.ok and out.repaired
    assert out.text == dropped + "\nfact | 怀疑线束松动，已排除"
    assert metrics.repaired == 1 and metrics.retried == 0


def test_an_invented_number_is_retried_with_the_findings() -> None:
    model = ScriptedModel([GOOD.replace("=187", "=178"), GOOD])
    metrics = FidelityMetrics()
    out = summarize_checked(ModelSummarizer(model), request(), metrics)
    assert out.ok and out.attempts == 2 and out.text == GOOD
    assert metrics.retried == 1 and metrics.failed == 0
    assert "not in the source 178" in model.sent[1][0].content


def test_a_summary_that_fails_twice_is_flagged_and_counted() -> None:
    model = ScriptedModel([GOOD + " 温度99℃"])
    metrics = FidelityMetrics()
    out = summarize_checked(ModelSummarizer(model), request(), metrics)
    assert not out.ok
    assert out.report.invented == ["99"]
    assert metrics.failed == 1 and metrics.retried == 1
    assert len(model.sent) == 2  # one retry, no more


def test_offline_summarizer_keeps_the_first_chosen_lines_within_the_limit() -> None:
    events = [SummaryLine(f"t{i}", "e" * 90, "c", "-") for i in range(5)]
    text = OfflineSummarizer().summarize(
        SummaryRequest(kind="case", source="", required=[], events=events, max_chars=300, keep_first=(0,))
    )
    # Each line is 102 characters: line 0 (kept first), then the newest that fit (4), in time order.
    assert text.splitlines() == [events[0].render(), events[4].render()]


def test_fidelity_checker_on_hand_made_summaries() -> None:
    assert check_summary(GOOD, REQUIRED, SOURCE).ok
    lost = check_summary(GOOD.replace("怀疑线束松动，已排除", ""), REQUIRED, SOURCE)
    assert lost.missing == ["怀疑线束松动，已排除"]
    # A fact kept beside the summary (the key-facts region) is not lost.
    assert check_summary(
        GOOD.replace("怀疑线束松动，已排除", ""), REQUIRED, SOURCE, carried="excluded: 怀疑线束松动，已排除"
    ).ok
    other = URI.replace("10:15:30", "11:15:30")
    assert check_summary(GOOD.replace(URI, other), [], SOURCE).invented == [other]
    assert check_summary(GOOD, REQUIRED, SOURCE, max_chars=50).too_long


# -- in the engine: flagged, counted, never written ---------------------------------------------


def _alert() -> AlertEvent:
    return AlertEvent(
        type="alert",
        event_id="e-1",
        vin=VIN,
        series="EV-A",
        ts=datetime(2026, 11, 1, 10, 15, 30, tzinfo=UTC),
        alert_text="电池包单体压差过大",
        dtc_codes=["P0A7F"],
        signals={"cell_voltage_diff_mv": 187},
    )


def test_engine_flags_a_failing_case_summary_and_keeps_it_out_of_long_term_memory() -> None:
    store = open_store("memory://")
    liar = ModelSummarizer(ScriptedModel([f"2026-11-01 10:15 | concluded P0A7F | 压差999mV | {URI}"]))
    engine = DiagnosisEngine(
        store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack(), summarizer=liar
    )
    result = engine.on_event(None, DedupState(), _alert(), "{}")
    diagnosis = result.diagnoses[0]
    assert diagnosis.phase == "CONCLUDED"
    assert "summary_fidelity_failed" in diagnosis.flags
    assert engine.summary_metrics.failed >= 1
    assert store.history(VIN) == []


def test_engine_stores_the_prompt_version_with_the_case() -> None:
    store = open_store("memory://")
    engine = DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack())
    result = engine.on_event(None, DedupState(), _alert(), "{}")
    assert result.diagnoses[0].flags == []
    [record] = store.history(VIN)
    assert record.prompt_version == SUMMARY_PROMPT_VERSION == "case-summary-v3"
    assert "P0A7F" in record.summary and "cell_voltage_diff_mv=187" in record.summary
    # The session's working memory was compressed into the case summary.
    assert result.session is not None
    assert result.session.working.summary_lines == record.summary.splitlines()
    assert result.session.working.session_folds == 1


@dataclass
class Recording:
    inner: OfflineModel
    name: str = "recording"
    sent: list[list[Message]] = field(default_factory=list)

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        self.sent.append(list(messages))
        return self.inner.chat(messages, tools)


def test_working_memory_carries_over_between_alerts_of_a_session_through_the_state_json() -> None:
    pack = load_pack()
    model = Recording(OfflineModel())
    engine = DiagnosisEngine(store=open_store("memory://"), model=model, embedder=HashingEmbedder(), pack=pack)
    first = _alert().model_copy(
        update={
            "ts": datetime(2026, 11, 1, 8, 0, 0, tzinfo=UTC),
            "alert_text": "维修站反馈：怀疑线束松动，已排除",
            "signals": {"cell_voltage_diff_mv": 60},
        }
    )
    second = _alert().model_copy(
        update={
            "event_id": "e-2",
            "ts": datetime(2026, 11, 1, 9, 0, 0, tzinfo=UTC),
            "signals": {"cell_voltage_diff_mv": 70},
        }
    )
    one = engine.on_event(None, DedupState(), first, "{}")
    assert one.diagnoses[0].phase == "INVESTIGATING"  # 60 mV is below the 100 mV rule
    assert one.session is not None
    # The operator keeps the session as JSON in Flink state: go through it.
    restored = type(one.session).model_validate_json(one.session.model_dump_json())
    before = len(model.sent)
    engine.on_event(restored, one.dedup, second, "{}")

    context = model.sent[before][-1].content
    facts_at = context.index("## Key facts (never compressed)")
    assert facts_at > context.index("## Current alert")
    tail = context[facts_at:]
    entry = pack.get("P0A7F")
    assert entry is not None
    for fact in (
        # The lookup's definition, with the rule that confirms the fault and its priority.
        f"code P0A7F: {entry.definition_en}; confirm cell_voltage_diff_mv>=100; priority P2",
        "reading cell_voltage_diff_mv=60 @2026-11-01T08:00:00Z",
        "excluded: 维修站反馈：怀疑线束松动，已排除 @2026-11-01T08:00:00Z",
        "decision: INVESTIGATING P0A7F (confidence 0.3) @2026-11-01T08:00:00Z",
    ):
        assert fact in tail
    # The first alert's round is still verbatim (2 rounds < 6, far below 70% of 4000).
    assert "## Alert at 2026-11-01T08:00:00Z" in context


def test_repair_makes_room_by_dropping_lines_without_required_facts() -> None:
    chatter = "2026-11-01 09:00 | driver called | all good | -"
    text = f"{chatter}\n{GOOD.replace('; 怀疑线束松动，已排除', '')}"
    req = SummaryRequest(kind="case", source=SOURCE, required=REQUIRED, events=[], max_chars=len(text) + 5)
    report = check_summary(text, REQUIRED, SOURCE, req.max_chars)
    assert report.missing == ["怀疑线束松动，已排除"]
    repaired = repair(text, report, req)
    # The chatter line carries no required fact: it gives way to the fact line.
    assert repaired == GOOD.replace("; 怀疑线束松动，已排除", "") + "\nfact | 怀疑线束松动，已排除"
    assert check_summary(repaired, REQUIRED, SOURCE, req.max_chars).ok


def test_a_rolling_fold_that_fails_is_flagged_on_that_alert() -> None:
    # A summary model that invents a reading in every fold.
    liar = ModelSummarizer(ScriptedModel(["2026-11-01T01:00:00Z | alert | 压差999mV | -"]))
    metrics = FidelityMetrics()
    wm = WorkingMemory(WorkingState(), summarizer=liar, metrics=metrics)
    for i in range(1, 8):
        wm.add_round(_round(i))
    assert wm.state.threshold_folds == 1
    assert wm.state.fidelity_failures == 1
    assert metrics.failed == 1 and metrics.retried == 1


def test_engine_flags_the_alert_whose_rolling_fold_failed() -> None:
    liar = ModelSummarizer(ScriptedModel(["2026-11-01T01:00:00Z | alert | 压差999mV | -"]))
    engine = DiagnosisEngine(
        store=open_store("memory://"),
        model=OfflineModel(),
        embedder=HashingEmbedder(),
        pack=load_pack(),
        summarizer=liar,
    )
    session, dedup = None, DedupState()
    flagged: list[int] = []
    for i in range(8):
        alert = _alert().model_copy(
            update={
                "event_id": f"e-{i}",
                "ts": datetime(2026, 11, 1, 8 + i, 0, 0, tzinfo=UTC),
                "signals": {"cell_voltage_diff_mv": 50 + i},  # below the 100 mV rule: no conclusion
            }
        )
        result = engine.on_event(session, dedup, alert, "{}")
        session, dedup = result.session, result.dedup
        if "summary_fidelity_failed" in result.diagnoses[0].flags:
            flagged.append(i)
    assert session is not None and session.working.fidelity_failures >= 1
    # Exactly the alerts whose fold failed are flagged, and each failure is counted.
    assert len(flagged) == session.working.threshold_folds == engine.summary_metrics.failed
    assert flagged
