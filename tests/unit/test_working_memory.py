"""L1 working memory: key facts, the 6-round window, the 70% trigger, stage ends."""

from __future__ import annotations

import json
import random

import pytest

from vdoctor.lines import KeyFact
from vdoctor.memory.working import KEEP_ROUNDS, Round, WorkingMemory, WorkingState, extract_key_facts
from vdoctor.tokens import EstimatingCounter

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"
URI = f"signal://{VIN}/cell_voltage_diff_mv@2026-11-01T08:15:30Z"


def key_fact_lines(text: str, when: str = "") -> list[str]:
    """The facts of ``text`` as their rendered lines (the form they take in the context)."""
    return [f.render() for f in extract_key_facts(text, when)]


def lines(facts: list[KeyFact]) -> list[str]:
    return [f.render() for f in facts]


def facts(*rendered: str) -> list[KeyFact]:
    return [KeyFact.parse(line) for line in rendered]


# -- key facts ------------------------------------------------------------------


def test_chinese_readings_with_units_are_key_facts() -> None:
    facts = key_fact_lines("电池包压差187mV，温度46.5℃，持续3.2 s", when="2026-11-01T08:15:30Z")
    assert "reading 187mV @2026-11-01T08:15:30Z" in facts
    assert "reading 46.5℃ @2026-11-01T08:15:30Z" in facts
    assert "reading 3.2s @2026-11-01T08:15:30Z" in facts


def test_english_readings_with_units_are_key_facts() -> None:
    facts = key_fact_lines("cell diff 187mV at 46.5℃ for 3.2 s, SOC 12 %, pack 351.2 V")
    for fact in ("reading 187mV", "reading 46.5℃", "reading 3.2s", "reading 12%", "reading 351.2V"):
        assert fact in facts


def test_signal_assignments_are_key_facts() -> None:
    facts = key_fact_lines("cell_voltage_diff_mv=187 pack_temp_c: 41.5", when="T1")
    assert "reading cell_voltage_diff_mv=187 @T1" in facts
    assert "reading pack_temp_c=41.5 @T1" in facts


def test_numbers_inside_identifiers_are_not_readings() -> None:
    # The VIN's digits and the code's digits are not measurements.
    facts = key_fact_lines(f"vin {VIN} code P0A7F")
    assert [f for f in facts if f.startswith("reading ")] == []


def test_codes_are_key_facts_in_english_and_chinese_text() -> None:
    assert key_fact_lines("codes P0A7F and U0100") == ["code P0A7F", "code U0100"]
    facts = key_fact_lines("仪表报P0A7F故障，同时报U0100")
    assert "code P0A7F" in facts
    assert "code U0100" in facts


def test_excluded_hypotheses_are_key_facts() -> None:
    facts = key_fact_lines("Suspected the harness, ruled out. Next: check the module.")
    assert "excluded: Suspected the harness, ruled out" in facts
    zh = key_fact_lines("怀疑线束松动，已排除。下一步检查模组")
    assert "excluded: 怀疑线束松动，已排除" in zh


def test_evidence_uris_are_key_facts() -> None:
    text = f"see {URI}, dtc://P0A7F and case://{VIN}/{VIN}-20261101T081530."
    facts = key_fact_lines(text)
    # A trailing full stop ends the sentence, not the URI.
    assert [f for f in facts if f.startswith("evidence ")] == [
        f"evidence {URI}",
        "evidence dtc://P0A7F",
        f"evidence case://{VIN}/{VIN}-20261101T081530",
    ]


def test_uri_after_chinese_text_is_a_key_fact() -> None:
    facts = key_fact_lines(f"证据{URI}，温度正常")
    assert [f for f in facts if f.startswith("evidence ")] == [f"evidence {URI}"]


def test_decisions_and_ticket_ids_are_key_facts() -> None:
    facts = key_fact_lines("Concluded cell imbalance, confidence 0.8. Opened WO-12345.")
    assert any(f.startswith("decision: ") and f.endswith("confidence 0.8") for f in facts)
    assert "id WO-12345" in facts
    assert "id WO-20931" in key_fact_lines("已开工单WO-20931")


def test_text_without_facts_gives_none() -> None:
    assert key_fact_lines("车主反馈一切正常 all good") == []


# -- the window -------------------------------------------------------------------


def ts(i: int) -> str:
    return f"2026-11-01T{i:02d}:00:00Z"


def small_round(i: int) -> Round:
    return Round(ts=ts(i), user=f"alert {i}", assistant=f"answer {i}\nmore detail {i}")


def test_a_round_whose_codes_and_readings_are_given_keeps_the_same_facts_reading_only_its_alert_text() -> None:
    # The engine's round: the alert's text, then its codes and readings, which it gives as facts read from the
    # alert itself; the text after the alert's own is then not read again, and the key facts are the same.
    alert_text = "电池压差过大，已排除 BMS 采样线松动，工单 WO-88231"
    user = alert_text + "\nP0A7F U0111 cell_voltage_diff_mv=187 pack_temp_c=-3.5 12v_battery_v=12.6"
    given = [KeyFact.code("P0A7F", "Hybrid/EV battery pack deterioration"), KeyFact.code("U0111")]
    given += [KeyFact.signal(n, v, ts(1)) for n, v in (("cell_voltage_diff_mv", 187), ("pack_temp_c", -3.5),
                                                       ("12v_battery_v", 12.6))]  # fmt: skip
    whole, alert_only = WorkingMemory(WorkingState()), WorkingMemory(WorkingState())
    answer = "concluded P0A7F; confirmed cell_voltage_diff_mv=187>=100 signal://V1/cell_voltage_diff_mv@" + ts(1)
    whole.add_round(Round(ts=ts(1), user=user, assistant=answer), given)
    alert_only.add_round(Round(ts=ts(1), user=user, assistant=answer), given, user_text=alert_text)
    assert alert_only.state.key_facts == whole.state.key_facts
    assert alert_only.state.trends == whole.state.trends
    # What only the alert's text says is still read from it: the exclusion and the work order.
    texts = [fact.text for fact in alert_only.state.key_facts]
    assert "WO-88231" in texts and any("BMS 采样线松动" in text for text in texts)


def test_six_rounds_stay_verbatim() -> None:
    wm = WorkingMemory(WorkingState())
    for i in range(1, KEEP_ROUNDS + 1):
        wm.add_round(small_round(i))
    assert KEEP_ROUNDS == 6
    assert [r.ts for r in wm.state.rounds] == [ts(i) for i in range(1, 7)]
    assert wm.state.summary_lines == []
    assert wm.state.compressions == 0


def test_seventh_round_folds_the_oldest_round_into_the_summary() -> None:
    wm = WorkingMemory(WorkingState())
    for i in range(1, 8):
        wm.add_round(small_round(i))
    # 7 rounds > 6: the oldest is folded, and the newest 6 stay verbatim (folding the oldest half left 4).
    assert [r.ts for r in wm.state.rounds] == [ts(i) for i in range(2, 8)]
    assert wm.state.summary_lines == [f"{ts(1)} | alert 1 | answer 1 | -"]
    assert wm.state.compressions == 1
    text = wm.render()
    # Folded rounds keep only their first line; the verbatim rounds keep all.
    assert "more detail 1" not in text
    assert "more detail 7" in text


def test_rounds_never_exceed_six_over_a_long_session() -> None:
    wm = WorkingMemory(WorkingState())
    for i in range(1, 24):
        wm.add_round(small_round(i))
        assert len(wm.state.rounds) == min(i, KEEP_ROUNDS)  # the newest 6, always
    assert wm.state.rounds[-1].ts == ts(23)


def big_round(i: int) -> Round:
    # 277 tokens when rendered: "## Alert at <ts>" 18 + "alert i" 3 + "## Agent" 4
    # + "gist line" 2 + 250 one-token words.
    return Round(ts=ts(i), user=f"alert {i}", assistant="gist line\n" + " ".join(["word"] * 250))


def test_context_is_compressed_past_70_percent_of_the_budget() -> None:
    # Budget 1000 -> trigger at 700 tokens. Two big rounds are 554 tokens, three 831.
    wm = WorkingMemory(WorkingState(), budget_tokens=1000, counter=EstimatingCounter())
    wm.add_round(big_round(1))
    wm.add_round(big_round(2))
    assert len(wm.state.rounds) == 2
    assert wm.state.compressions == 0

    wm.add_round(big_round(3))
    # 3 // 2 = 1 round folded: two remain, plus a one-line summary (554 + 34 tokens).
    assert [r.ts for r in wm.state.rounds] == [ts(2), ts(3)]
    assert wm.state.summary_lines == [f"{ts(1)} | alert 1 | gist line | -"]
    assert wm.state.compressions == 1
    assert wm.tokens() <= 700

    wm.add_round(big_round(4))
    assert [r.ts for r in wm.state.rounds] == [ts(3), ts(4)]
    assert len(wm.state.summary_lines) == 2
    assert wm.tokens() <= 700


def test_context_stays_under_the_trigger_after_every_round() -> None:
    wm = WorkingMemory(WorkingState(), budget_tokens=1000)
    for i in range(1, 15):
        wm.add_round(big_round(i))
        assert wm.tokens() <= 0.7 * 1000


def test_end_stage_folds_every_round() -> None:
    wm = WorkingMemory(WorkingState())
    for i in range(1, 4):
        wm.add_round(small_round(i))
    wm.end_stage()
    assert wm.state.rounds == []
    assert wm.state.summary_lines == [f"{ts(i)} | alert {i} | answer {i} | -" for i in (1, 2, 3)]
    assert wm.state.compressions == 1
    wm.end_stage()  # nothing left to fold: no empty compression
    assert wm.state.compressions == 1


def test_key_facts_survive_every_compression_and_render_last() -> None:
    wm = WorkingMemory(WorkingState(), budget_tokens=1000)
    wm.add_round(
        Round(
            ts=ts(1),
            user="电池包压差187mV P0A7F",
            assistant=f"suspected the harness, ruled out\nevidence {URI}",
        )
    )
    expected = [
        "code P0A7F",
        f"reading 187mV @{ts(1)}",
        f"evidence {URI}",
        f"excluded: suspected the harness, ruled out @{ts(1)}",
    ]
    for i in range(2, 20):
        wm.add_round(big_round(i))
    wm.end_stage()
    assert wm.state.compressions > 2
    assert wm.state.rounds == []
    for fact in expected:
        assert fact in lines(wm.state.key_facts)

    text = wm.render(current="## Current alert\nalert 20")
    facts_at = text.index("## Key facts (never compressed)")
    assert facts_at > text.index("## Current alert")
    assert facts_at > text.index("## Earlier in this session (summary)")
    tail = text[facts_at:]
    for fact in expected:
        assert fact in tail
    assert text.endswith(wm.state.key_facts[-1].render())


def test_state_round_trips_through_json() -> None:
    wm = WorkingMemory(WorkingState())
    for i in range(1, 8):
        wm.add_round(small_round(i))
    restored = WorkingMemory(WorkingState.model_validate_json(wm.state.model_dump_json()))
    assert restored.render() == wm.render()


def test_readings_keep_first_lowest_highest_latest_per_signal() -> None:
    wm = WorkingMemory(WorkingState())
    wm.add_facts(facts("code P0A7F", "excluded: suspected the harness, ruled out"))
    values = [5, 9, 2, 7, 4]
    wm.add_facts(facts(*(f"reading x_mv={v} @{ts(i)}" for i, v in enumerate(values, 1))))
    wm.add_facts(facts(f"reading y_c=1 @{ts(9)}"))
    # x: first 5, highest 9, lowest 2, latest 4 stay; 7 is none of them. y is its own signal.
    assert lines(wm.state.key_facts) == [
        "code P0A7F",
        "excluded: suspected the harness, ruled out",
        f"reading x_mv=5 @{ts(1)}",
        f"reading x_mv=9 @{ts(2)}",
        f"reading x_mv=2 @{ts(3)}",
        f"reading x_mv=4 @{ts(5)}",
        f"reading y_c=1 @{ts(9)}",
    ]


def test_a_repeated_decision_is_kept_once_but_a_changed_one_is_new() -> None:
    wm = WorkingMemory(WorkingState())
    wm.add_facts(facts(f"decision: INVESTIGATING P0A7F (confidence 0.30) @{ts(1)}"))
    wm.add_facts(facts(f"decision: INVESTIGATING P0A7F (confidence 0.30) @{ts(2)}"))
    wm.add_facts(facts(f"decision: CONCLUDED cell imbalance (confidence 0.80) @{ts(3)}"))
    assert lines(wm.state.key_facts) == [
        f"decision: INVESTIGATING P0A7F (confidence 0.30) @{ts(1)}",
        f"decision: CONCLUDED cell imbalance (confidence 0.80) @{ts(3)}",
    ]


def test_key_facts_are_not_repeated() -> None:
    wm = WorkingMemory(WorkingState())
    wm.add_round(Round(ts=ts(1), user="P0A7F 压差187mV", assistant="P0A7F"))
    wm.add_round(Round(ts=ts(2), user="P0A7F", assistant="P0A7F again"))
    assert lines(wm.state.key_facts).count("code P0A7F") == 1


# -- what a long task needs later (issue 14, item 6) -------------------------------------


def test_part_ids_numbered_items_and_counts_are_key_facts() -> None:
    found = key_fact_lines("接插件X12有绿锈；BMS从板CSC3；cell 37 and module 4; step-4; 0.2 Ω on all 96 sense lines")
    for fact in ("id X12", "id CSC3", "id cell 37", "id module 4", "id step-4", "count 96 sense lines"):
        assert fact in found
    assert "count 96根采样线" in key_fact_lines("共96根采样线，导通正常")
    # Not ids: a VIN, a trouble code, a priority, a time, a quantity after a function word, a decimal.
    text = f"vin {VIN} code P0A7F priority P2 at 10:15, lost 3.2 s, confidence 0.85, reached 46.5 in all 3.5"
    assert [f for f in key_fact_lines(text) if f.startswith(("id ", "count "))] == []


def test_a_stated_change_gives_both_readings() -> None:
    assert set(key_fact_lines("The spread grows from 62 to 187 mV.", "T")) == {"reading 187mV @T", "reading 62mV @T"}
    assert "reading 62mV @T" in key_fact_lines("压差从62升至187mV", "T")


def test_a_lookup_keeps_the_rule_that_confirms_the_fault_and_its_priority() -> None:
    from vdoctor.memory.facts import dedupe, extract_tool_facts

    result = json.dumps({"codes": [{"code": "P0A7F", "definition": "pack deterioration", "priority": "P2",
                                    "confirm": "cell_voltage_diff_mv>=100"}], "unknown": []})  # fmt: skip
    looked_up = extract_tool_facts(result)
    assert lines(looked_up) == ["code P0A7F: pack deterioration; confirm cell_voltage_diff_mv>=100; priority P2"]
    # The fact that says more replaces the alert's code with its bare definition.
    assert lines(dedupe([KeyFact.code("P0A7F", "pack deterioration"), *looked_up])) == lines(looked_up)


def test_a_signals_trend_keeps_every_reading_in_time_order_once() -> None:
    wm = WorkingMemory(WorkingState())
    history = [("T3", "121"), ("T1", "62"), ("T2", "88"), ("T5", "187"), ("T4", "150")]
    wm.add_facts([KeyFact.signal("cell_voltage_diff_mv", v, at) for at, v in history])
    wm.add_facts([KeyFact.signal("cell_voltage_diff_mv", v, at) for at, v in history])  # the same history again
    assert lines(wm.trend_facts()) == ["trend cell_voltage_diff_mv: 62 88 121 150 187"]
    # The key facts keep the first, lowest, highest and latest with their times; the trend the rest.
    assert [f for f in lines(wm.state.key_facts) if "=88 " in f] == []  # neither first, lowest, highest nor latest
    assert "trend cell_voltage_diff_mv: 62 88 121 150 187" in wm.render()
    assert "trend" not in WorkingMemory(WorkingState(trends={"x": [("T1", "1"), ("T2", "2")]})).render()


def test_a_trend_is_bounded_keeping_its_first_and_newest_readings() -> None:
    from vdoctor.memory.working import MAX_TREND_POINTS

    wm = WorkingMemory(WorkingState())
    wm.add_facts([KeyFact.signal("pack_temp_c", i, f"T{i:04d}") for i in range(MAX_TREND_POINTS + 10)])
    [trend] = wm.trend_facts()
    values = trend.text.split(": ")[1].split()
    assert len(values) == MAX_TREND_POINTS
    assert values[:2] == ["0", "11"] and values[-1] == str(MAX_TREND_POINTS + 9)


# -- the budget check's shortcut -----------------------------------------------------------


class WholeTextCounter:
    """The offline estimate with neither of its shortcuts: every budget check counts the whole context."""

    name = "estimate-whole-text"

    def count(self, text: str) -> int:
        return EstimatingCounter().count(text)


# Pieces of rounds, most of them a token per character (CJK text, marks, codes) so that
# contexts just under the trigger in tokens are just over it in characters; words and
# numbers make the two part.
PIECES = ["电池包单体压差过大", "，", "P0A7F", "(!)", "电芯", "。", "压差187mV", "electrical ", "46.5 "]
WEIGHTS = [4, 4, 4, 4, 4, 4, 1, 1, 1]


def random_round(rng: random.Random, i: int) -> Round:
    def text(n: int) -> str:
        return "".join(rng.choices(PIECES, WEIGHTS, k=n))

    return Round(ts=ts(i % 24), user=f"alert {i} {text(rng.randint(1, 10))}", assistant=text(rng.randint(10, 150)))


@pytest.mark.parametrize("seed", range(4))
def test_the_trigger_folds_as_a_whole_text_count_would_over_a_long_random_session(seed: int) -> None:
    # The estimate decides a context shorter (in characters) than the trigger is under it
    # without counting it; a twin that counts the whole text every time must fold at the
    # same rounds into the same state, and the count must be the from-scratch one throughout.
    rng = random.Random(seed)
    fast = WorkingMemory(WorkingState(), budget_tokens=2000, counter=EstimatingCounter())
    whole = WorkingMemory(WorkingState(), budget_tokens=2000, counter=WholeTextCounter())
    assert getattr(fast.counter, "most_tokens_per_char", None) and getattr(fast.counter, "additive", False)
    by_tokens = 0
    for i in range(300):
        if rng.random() < 0.05:
            fast.end_stage()
            whole.end_stage()
        else:
            r = random_round(rng, i)
            folds, within_rounds = fast.state.threshold_folds, len(fast.state.rounds) < KEEP_ROUNDS
            fast.add_round(r.model_copy())
            whole.add_round(r.model_copy())
            by_tokens += within_rounds and fast.state.threshold_folds > folds
        assert fast.state == whole.state, f"diverged at step {i}"
        assert fast.tokens() == whole.tokens() == EstimatingCounter().count(fast.render())
    # The trigger, not the round count, folded the context many times.
    assert by_tokens > 50


def test_the_trigger_folds_as_a_whole_text_count_would_at_the_boundary() -> None:
    # A context of about two tokens per character (CJK), swept across the trigger one character
    # at a time: where the characters are more than half the trigger the count decides, and
    # there too a from-scratch count of the whole text must give the same folds.
    budget = 3000  # trigger at 2100 tokens
    folded = 0
    for n in range(1000, 1200):
        round_ = Round(ts=ts(1), user="P0A7F", assistant="电池包单体压差过大，" * (n // 10) + "。" * (n % 10))
        fast = WorkingMemory(WorkingState(), budget_tokens=budget, counter=EstimatingCounter())
        whole = WorkingMemory(WorkingState(), budget_tokens=budget, counter=WholeTextCounter())
        fast.add_round(round_.model_copy())
        whole.add_round(round_.model_copy())
        assert fast.state == whole.state, f"diverged at {n} characters"
        folded += fast.state.threshold_folds
    assert 0 < folded < 1200 - 1000  # the sweep crossed the trigger
