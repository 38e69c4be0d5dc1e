"""L1 working memory held to its budget: what the model gets fits 4000 tokens, key facts never go silently,
and every folded event keeps its summary line (DESIGN.md §4)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.unit.test_engine import T0, VIN, Harness, alert, iso
from vdoctor.agent.prompt import signal_families, summarise_signals
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.knowledge import KnowledgePack, load_pack
from vdoctor.lines import KeyFact, SummaryLine, parse_alert_block
from vdoctor.memory.summarizer import OfflineSummarizer, SummaryRequest, summarize_checked
from vdoctor.memory.working import (
    MAX_KEY_FACTS,
    Round,
    WorkingMemory,
    WorkingState,
    clip_to_tokens,
)
from vdoctor.models.base import ChatResponse, Message, ToolSpec
from vdoctor.models.offline import OfflineModel
from vdoctor.stores.memory import InMemoryStore
from vdoctor.tokens import DEFAULT_COUNTER

pytestmark = pytest.mark.unit

BUDGET = 4000  # DESIGN.md §4: the working context's token budget


class _Recording(OfflineModel):
    """The offline model, recording the user message of every call."""

    def __init__(self) -> None:
        super().__init__()
        self.users: list[str] = []

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        self.users.append(next(m.content for m in messages if m.role == "user"))
        return super().chat(messages, tools)


@pytest.fixture(scope="module")
def pack() -> KnowledgePack:
    return load_pack()


def engine(pack: KnowledgePack) -> tuple[Harness, _Recording, InMemoryStore]:
    model = _Recording()
    store = InMemoryStore()
    return Harness(DiagnosisEngine(store=store, model=model, embedder=HashingEmbedder(), pack=pack)), model, store


# -- the budget ----------------------------------------------------------------------


def test_the_prompt_of_alerts_with_64_signals_stays_within_the_budget(pack: KnowledgePack) -> None:
    # The review's input: 64 signals an alert, unknown codes keep the session open; by the 5th alert the
    # key facts alone were 3523 tokens and the user message 5242.
    h, model, _ = engine(pack)
    codes = [f"P1{n:03d}" for n in range(4)]
    for i in range(8):
        signals = {f"sig{j}_mv": 100 + ((i * 37 + j * 11) % 97) for j in range(64)}
        h.diagnose(alert(f"e{i}", T0 + timedelta(minutes=30 * i), codes=codes, signals=signals, text="压差" * 20))
    assert model.users
    for user in model.users:
        assert DEFAULT_COUNTER.count(user) <= BUDGET
    # What did not fit is said, not left out silently; codes are never left out.
    last = model.users[-1]
    assert "not shown to fit the working context" in last
    assert all(f"code {c}" in last for c in codes)


def test_a_long_alert_text_is_clipped_with_a_marker_to_fit(pack: KnowledgePack) -> None:
    # The review's input: one alert with a 3996-character text made a 4153-token message.
    h, model, _ = engine(pack)
    h.diagnose(alert("e0", T0, codes=["P0A7F"], signals={"cell_voltage_diff_mv": 62}, text="电池包单体压差过大" * 444))
    first = model.users[0]
    assert DEFAULT_COUNTER.count(first) <= BUDGET
    assert "more characters clipped to fit the working context" in first
    # The codes and signals of the alert are whole; its text is clipped, not dropped.
    assert '"dtc_codes": ["P0A7F"]' in first
    assert '"cell_voltage_diff_mv": 62' in first
    assert "电池包单体压差过大" * 100 in first


def test_fit_leaves_trend_lines_out_before_any_key_fact() -> None:
    state = WorkingState()
    memory = WorkingMemory(state, budget_tokens=BUDGET)
    # 10 signals with 20 readings each: a trend line each, and 4 readings each as key facts.
    for t in range(20):
        at = f"2026-11-01T{t:02d}:00:00Z"
        memory.add_facts([KeyFact.signal(f"sig{s}_mv", 100 + (t * 7 + s) % 50, at) for s in range(10)])
    memory.add_facts([KeyFact.code("P0A7F", "Hybrid battery pack deterioration")])
    everything = memory.render()
    facts = [f.render() for f in state.key_facts]
    # A budget that holds the key facts but not the trends as well.
    budget = DEFAULT_COUNTER.count(everything) - 20
    memory = WorkingMemory(state, budget_tokens=budget)
    text = memory.fit()
    assert DEFAULT_COUNTER.count(text) <= budget
    assert all(line in text for line in facts)
    assert "trend lines not shown to fit the working context" in text
    assert memory.over_budget_tokens == 0


def test_key_facts_that_alone_exceed_the_budget_are_kept_and_flagged() -> None:
    state = WorkingState()
    memory = WorkingMemory(state, budget_tokens=100)
    memory.add_facts([KeyFact.code(f"P1{n:03d}") for n in range(40)])
    memory.add_facts([KeyFact.parse("excluded: suspected the harness, ruled out @2026-11-01T08:15:30Z")])
    text = memory.fit("## Current alert\nsomething")
    assert all(f.render() in text for f in state.key_facts)
    assert memory.over_budget_tokens == DEFAULT_COUNTER.count(text) - 100 > 0


def test_fit_folds_the_verbatim_rounds_first() -> None:
    state = WorkingState()
    memory = WorkingMemory(state, budget_tokens=1000)
    for i in range(3):
        memory.add_round(Round(ts=f"2026-11-01T0{i}:00:00Z", user="检查连接器 " * 20, assistant="investigating"))
    assert len(state.rounds) == 3  # under the 70% trigger without the current alert
    current = "## Current alert\n" + "电池包单体压差过大" * 22
    assert DEFAULT_COUNTER.count(memory.render(current)) > 1000
    text = memory.fit(current)
    assert DEFAULT_COUNTER.count(text) <= 1000
    assert current in text  # whole: folding the oldest round was enough
    assert len(state.rounds) == 2
    assert state.summary_lines[0].startswith("2026-11-01T00:00:00Z | 检查连接器")
    assert memory.over_budget_tokens == 0


def test_clip_to_tokens_marks_what_it_clipped() -> None:
    text = "电池包单体压差过大" * 50
    clipped = clip_to_tokens(text, 100, DEFAULT_COUNTER)
    assert DEFAULT_COUNTER.count(clipped) <= 100
    kept = clipped.split("…[")[0]
    assert text.startswith(kept) and kept
    assert f"…[{len(text) - len(kept)} more characters clipped" in clipped
    assert clip_to_tokens("short", 100, DEFAULT_COUNTER) == "short"


# -- key facts never evicted silently --------------------------------------------------


def test_an_exclusion_and_a_ticket_id_survive_eleven_rounds_of_twenty_part_ids() -> None:
    state = WorkingState()
    memory = WorkingMemory(state)
    memory.add_round(
        Round(ts="2026-11-01T08:00:00Z", user="suspected the harness, ruled out; 工单 WO-12345", assistant="noted")
    )
    for i in range(1, 12):
        parts = " ".join(f"K{i * 100 + k}" for k in range(20))
        memory.add_round(Round(ts=f"2026-11-01T{8 + i:02d}:00:00Z", user="检查连接器 " + parts, assistant="checking"))
    shown = [f.render() for f in state.key_facts]
    assert "excluded: suspected the harness, ruled out @2026-11-01T08:00:00Z" in shown
    assert "id WO-12345" in shown
    assert "id K1119" in shown and "id K100" in shown  # 220 part ids, none given way
    assert state.dropped_facts == [] and state.dropped_fact_count == 0


def test_an_exclusion_of_the_first_alert_reaches_the_concluded_case(pack: KnowledgePack) -> None:
    h, _, store = engine(pack)
    text = "suspected the harness, ruled out; 工单 WO-12345"
    h.diagnose(alert("c0", T0, signals={"cell_voltage_diff_mv": 62}, text=text))
    for i in range(1, 12):
        parts = " ".join(f"K{i * 100 + k}" for k in range(20))
        h.diagnose(alert(f"c{i}", T0 + timedelta(minutes=20 * i), signals={"cell_voltage_diff_mv": 70}, text=parts))
    session = h.session()
    assert session is not None
    assert "id WO-12345" in [f.render() for f in session.working.key_facts]
    h.diagnose(alert("cz", T0 + timedelta(minutes=240), signals={"cell_voltage_diff_mv": 187}))
    record = store.history(VIN)[0]
    assert "suspected the harness, ruled out" in record.summary + "\n".join(record.omitted)
    # The work order the session named reaches the record: in its summary, or listed whole as omitted.
    assert "WO-12345" in record.summary or "id WO-12345" in record.omitted


def test_a_diagnosis_whose_context_stayed_over_the_budget_is_flagged(pack: KnowledgePack) -> None:
    """Key facts are never left out: a context they alone put over the budget goes whole, and the output says so."""
    store = InMemoryStore()
    engine = DiagnosisEngine(
        store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=pack, working_budget_tokens=300
    )
    h = Harness(engine)
    codes = [f"P1{n:03d}" for n in range(32)]  # codes are key facts: 32 of them and their definitions
    first = h.diagnose(alert("b0", T0, signals={"cell_voltage_diff_mv": 62}, codes=codes))
    assert "working_over_budget" in first.flags
    roomy = Harness(DiagnosisEngine(store=InMemoryStore(), model=OfflineModel(), embedder=HashingEmbedder(), pack=pack))
    assert "working_over_budget" not in roomy.diagnose(alert("b0", T0, signals={"cell_voltage_diff_mv": 62})).flags


def test_readings_beyond_the_cap_give_way_oldest_first_and_are_recorded() -> None:
    state = WorkingState()
    memory = WorkingMemory(state)
    memory.add_facts([KeyFact.signal("pack_temp_c", 41.5, "2026-11-01T00:00:00Z")])
    # 60 signals, 4 readings each (first, lowest, highest, latest stay): 240 readings, 41 over the cap.
    for t, value in enumerate((50, 10, 90, 60)):
        at = f"2026-11-01T0{t + 1}:00:00Z"
        memory.add_facts([KeyFact.signal(f"sig{s}_mv", value + s, at) for s in range(60)])
    readings = [f for f in state.key_facts if f.kind.value == "reading"]
    assert len(readings) == MAX_KEY_FACTS
    # A signal seen once keeps its reading; the oldest readings of signals seen again went first.
    assert "reading pack_temp_c=41.5 @2026-11-01T00:00:00Z" in [f.render() for f in readings]
    assert state.dropped_fact_count == 41
    # The 4th alert's 60 readings made 241: the first alert's readings of sig0..sig40 went, in order.
    assert state.dropped_facts == [f"reading sig{s}_mv={50 + s} @2026-11-01T01:00:00Z" for s in range(41)]


# -- every folded event keeps its line ------------------------------------------------


def test_the_rolling_summary_of_8_alerts_with_20_signals_has_a_line_per_folded_event(pack: KnowledgePack) -> None:
    h, _, _ = engine(pack)
    times = [T0 + timedelta(minutes=30 * i) for i in range(8)]
    for i, at in enumerate(times):
        h.diagnose(alert(f"e{i}", at, signals={f"sig{j}_mv": 100 + j for j in range(20)}))
    session = h.session()
    assert session is not None
    working = session.working
    folded = [iso(at) for at in times[: len(times) - len(working.rounds)]]
    assert folded
    assert working.fidelity_failures == 0
    for ts in folded:
        line = next(line for line in working.summary_lines if line.startswith(ts))
        parsed = SummaryLine.parse(line)
        assert parsed is not None and parsed.event.startswith("alert P0A7F sig0_mv=100")
        assert parsed.evidence == "dtc://P0A7F"
        assert len(line) <= 300


def test_a_fold_of_six_long_events_keeps_a_line_for_each() -> None:
    state = WorkingState()
    memory = WorkingMemory(state)
    event = "alert P0A7F " + " ".join(f"sig{j}_mv={100 + j}" for j in range(20))
    for i in range(6):
        at = f"2026-11-01T0{i}:00:00Z"
        round_ = Round(ts=at, user="压差", assistant="-", event=event, conclusion="investigating", evidence="-")
        memory.add_round(round_)
    memory.end_stage()
    assert [line[:20] for line in state.summary_lines] == [f"2026-11-01T0{i}:00:00Z" for i in range(6)]
    assert all(line.endswith("| investigating | -") and "…" in line for line in state.summary_lines)
    assert state.fidelity_failures == 0


def test_an_empty_summary_of_events_fails_the_check() -> None:
    line = SummaryLine("2026-11-01T08:15:30Z", "alert P0A7F", "investigating", "-")
    request = SummaryRequest(kind="rolling", source=line.render(), required=[], events=[line], max_chars=300)

    class _Empty:
        name = "empty"

        def summarize(self, request: SummaryRequest, feedback: str = "") -> str:
            return ""

    assert not summarize_checked(_Empty(), request).ok
    assert summarize_checked(OfflineSummarizer(), request).ok


def test_an_alert_text_with_no_room_left_is_replaced_by_a_marker_not_dropped() -> None:
    from vdoctor.agent.prompt import build_window
    from vdoctor.events import AlertEvent
    from vdoctor.memory.session import SessionState

    text = "电池包单体压差过大" * 100
    event = AlertEvent(type="alert", event_id="e", vin=VIN, series="EV-A", ts=T0, alert_text=text, dtc_codes=["P0A7F"])
    session = SessionState(vin=VIN, series="EV-A", session_id="s", opened_at=T0, last_event_at=T0)
    memory = WorkingMemory(session.working, budget_tokens=200)
    memory.add_facts([KeyFact.code(f"P1{n:03d}") for n in range(60)])  # key facts alone are over the budget
    user = build_window(session, event, memory)[0][1].content
    assert f"[the alert's text, {len(text)} characters, left out to fit the working context]" in user
    assert memory.over_budget_tokens > 0


# -- every call of an alert: the working context and the ReAct steps (agent.window) ------


class _Calls(OfflineModel):
    """The offline model, recording the messages of every call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[Message]] = []

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        self.calls.append(list(messages))
        return super().chat(messages, tools)


def _window_tokens(messages: list[Message]) -> int:
    """The user message and the steps after it (the model's tool calls and the tools' results), each with
    the tokens a chat API adds to a message (OpenAI: 3)."""
    count = DEFAULT_COUNTER.count
    steps = 0
    for m in messages[2:]:
        calls = "".join(c.name + json.dumps(c.arguments, ensure_ascii=False) for c in m.tool_calls)
        steps += 3 + (count(m.content + calls) if m.content or calls else 0)
    return 3 + count(messages[1].content) + steps


def test_every_call_of_an_alert_keeps_its_context_and_steps_within_the_budget(pack: KnowledgePack) -> None:
    # 16 known codes: their lookup alone is ~2,500 tokens. Before, the first call fitted 4,000 tokens and
    # the second carried the lookup on top of them.
    model = _Calls()
    h = Harness(DiagnosisEngine(store=InMemoryStore(), model=model, embedder=HashingEmbedder(), pack=pack))
    codes = list(pack.entries)[:16]
    flags: list[str] = []
    for i in range(4):
        signals = {f"sig{j}_mv": 100 + ((i * 37 + j * 11) % 97) for j in range(16)}
        out = h.diagnose(alert(f"e{i}", T0 + timedelta(minutes=30 * i), codes=codes, signals=signals, text="压差" * 20))
        flags += out.flags
    later = [messages for messages in model.calls if len(messages) > 2]
    assert later, "the model was never called with tool results"
    assert max(DEFAULT_COUNTER.count(m.content) for ms in later for m in ms if m.role == "tool") > BUDGET // 4
    for messages in model.calls:
        assert _window_tokens(messages) <= BUDGET
    # The lookup was clipped with a marker, and the output says so; the key facts were read from the whole
    # result: every code's definition is in the session's working memory.
    assert "tool_result_clipped" in flags
    assert any("more characters clipped to fit the working context" in m.content for ms in later for m in ms)
    session = h.session(VIN)
    assert session is not None
    facts = session.working.key_facts
    for code in codes:
        assert any(f.render().startswith(f"code {code}: {pack.entries[code].definition_en}") for f in facts), code
    assert "working_over_budget" not in flags


def test_a_short_alert_is_not_refitted_nor_clipped(pack: KnowledgePack) -> None:
    model = _Calls()
    h = Harness(DiagnosisEngine(store=InMemoryStore(), model=model, embedder=HashingEmbedder(), pack=pack))
    out = h.diagnose(alert("e0", T0, codes=["P0A7F"], signals={"cell_voltage_diff_mv": 187}))
    assert len(model.calls) >= 2 and "tool_result_clipped" not in out.flags
    # The user message of every call is the first call's: nothing was over the budget.
    assert {ms[1].content for ms in model.calls} == {model.calls[0][1].content}


def test_the_offline_model_takes_a_clipped_lookup_as_unknown_and_does_not_ask_again(pack: KnowledgePack) -> None:
    model = _Calls()
    engine = DiagnosisEngine(
        store=InMemoryStore(), model=model, embedder=HashingEmbedder(), pack=pack, working_budget_tokens=800
    )
    out = Harness(engine).diagnose(alert("e0", T0, codes=list(pack.entries)[:8], signals={"sig_mv": 1}))
    assert "tool_result_clipped" in out.flags and "iteration_cap" not in out.flags
    lookups = [c for ms in model.calls for m in ms for c in m.tool_calls if c.name == "lookup_dtc"]
    assert len({c.id for c in lookups}) == 1


# -- an alert of hundreds of signals (a battery snapshot) ----------------------------


def _snapshot(i: int) -> dict[str, float]:
    """An 800 V pack's BMS snapshot: 192 cell voltages (cell 17 the weakest), 32 module temperatures, the pack."""
    cells = {f"cell_{n}_voltage_v": 3.90 + (n * 7 + i) % 5 / 100 for n in range(1, 193)}
    cells["cell_17_voltage_v"] = 3.71 - i / 100
    modules = {f"module_{n}_temp_c": 30.0 + (n + i) % 4 for n in range(1, 33)}
    return cells | modules | {"pack_voltage_v": 750.7, "pack_current_a": -12.5, "soc_pct": 71}


def test_an_alert_of_227_signals_fits_by_summarising_its_signal_families(pack: KnowledgePack) -> None:
    model = _Calls()
    h = Harness(DiagnosisEngine(store=InMemoryStore(), model=model, embedder=HashingEmbedder(), pack=pack))
    flags: list[str] = []
    for i in range(3):
        out = h.diagnose(alert(f"e{i}", T0 + timedelta(minutes=30 * i), codes=["P0A7F"], signals=_snapshot(i)))
        flags += out.flags
    for messages in model.calls:
        assert _window_tokens(messages) <= BUDGET
    assert "working_over_budget" not in flags
    block = parse_alert_block(model.calls[-1][1].content)
    # The families are summarised by their exact extremes, naming the signals that hold them; the pack's own
    # readings stay whole.
    assert block["signal_families"]["cell_{1-192}_voltage_v"] == (
        "192 signals, lowest 3.69 (cell_17_voltage_v), highest 3.94 (cell_1_voltage_v); signal_history reads each"
    )
    assert set(block["signal_families"]) == {"cell_{1-192}_voltage_v", "module_{1-32}_temp_c"}
    assert block["signals"] == {"pack_voltage_v": 750.7, "pack_current_a": -12.5, "soc_pct": 71}
    # Every reading of the summarised families in this alert is still the session's (it keeps its newest 256
    # readings, as many as an alert may carry): signal_history reads each; the spans keep every signal's
    # first, lowest, highest and latest reading of the session for its case summary.
    session = h.session(VIN)
    assert session is not None
    assert all(session.readings_of(name)[-1].value == value for name, value in _snapshot(2).items())
    cell_17 = session.signals["cell_17_voltage_v"]
    assert (cell_17.first, cell_17.lowest, cell_17.latest) == (3.71, 3.69, 3.69)


def test_signals_whole_when_they_fit_and_a_family_only_of_two_or_more() -> None:
    assert signal_families(["cell_1_v", "cell_2_v", "cell_3_v", "cell_5_v", "soc_pct", "temp1"]) == [
        ("cell_{1-3,5}_v", ["cell_1_v", "cell_2_v", "cell_3_v", "cell_5_v"])
    ]
    # Numbers written with leading zeros are listed as written; the last number of a name is its index.
    assert signal_families(["m1_cell_01_v", "m1_cell_02_v"]) == [
        ("m1_cell_{01,02}_v", ["m1_cell_01_v", "m1_cell_02_v"])
    ]
    assert summarise_signals({"cell_1_v": 3.9, "cell_2_v": 3.8}, lambda s: True) is None
    shown = summarise_signals({"cell_1_v": 3.9, "cell_2_v": 3.8, "soc_pct": 70}, lambda s: s is not None)
    assert shown is not None and shown.signals == {"soc_pct": 70}
    assert shown.families == {
        "cell_{1-2}_v": "2 signals, lowest 3.8 (cell_2_v), highest 3.9 (cell_1_v); signal_history reads each"
    }


# -- a full scan: dozens of codes, a few of them the pack's ----------------------------

_THE_PACKS = ["U0100", "U0121", "U0140", "P0562", "P0A7F"]


def _full_scan(n: int) -> list[str]:
    """A full scan after a 12 V dip: ``n`` codes, lost-communication codes the pack lacks and 5 it has."""
    lost = [f"U{c:04X}" for c in range(0x0150, 0x0150 + n - len(_THE_PACKS))]
    step = len(lost) // len(_THE_PACKS)
    return [code for i, known in enumerate(_THE_PACKS) for code in (known, *lost[i * step : (i + 1) * step])] + lost[
        len(_THE_PACKS) * step :
    ]


@pytest.mark.parametrize("n", [32, 64])
def test_a_full_scan_is_looked_up_in_one_call_and_concluded_within_the_budget(pack: KnowledgePack, n: int) -> None:
    # Before, a lookup answered 8 codes a call, known or not: 32 codes took 4 lookups, the signal's history
    # was then clipped and the session did not conclude; and over 32 codes was a dead letter.
    model = _Calls()
    h = Harness(DiagnosisEngine(store=InMemoryStore(), model=model, embedder=HashingEmbedder(), pack=pack))
    codes = _full_scan(n)
    assert len(set(codes)) == n
    signals = {"cell_voltage_diff_mv": 187, "battery_voltage_v": 12.4}
    out = h.diagnose(alert("e0", T0, codes=codes, signals=signals, text="整车扫描: 低压掉电后多个模块失去通讯"))
    assert out.phase == "CONCLUDED" and out.root_cause == pack.entries["P0A7F"].root_cause
    assert "tool_result_clipped" not in out.flags and "working_over_budget" not in out.flags
    lookups = [c for ms in model.calls for m in ms for c in m.tool_calls if c.name == "lookup_dtc"]
    assert len({c.id for c in lookups}) == 1
    for messages in model.calls:
        assert _window_tokens(messages) <= BUDGET
    session = h.session(VIN)
    assert session is not None
    rendered = [f.render() for f in session.working.key_facts]
    assert all(any(r == f"code {c}" or r.startswith(f"code {c}:") for r in rendered) for c in codes)


def test_an_alert_of_128_codes_is_diagnosed_within_the_budget(pack: KnowledgePack) -> None:
    # The most an alert may carry. Its lookup does not fit the steps' half of the budget whole: it is clipped
    # and flagged, and every call still keeps within the budget, with every code a key fact.
    model = _Calls()
    h = Harness(DiagnosisEngine(store=InMemoryStore(), model=model, embedder=HashingEmbedder(), pack=pack))
    codes = _full_scan(128)
    out = h.diagnose(alert("e0", T0, codes=codes, signals={"cell_voltage_diff_mv": 187}))
    assert "working_over_budget" not in out.flags and "tool_result_clipped" in out.flags
    for messages in model.calls:
        assert _window_tokens(messages) <= BUDGET
    session = h.session(VIN)
    assert session is not None
    assert {f.render().split(":")[0] for f in session.working.key_facts} >= {f"code {c}" for c in codes}


class _Reasoning(_Calls):
    """A model that writes long reasoning beside each tool call (a lookup), then answers."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        from vdoctor.models.base import ToolCall

        self.calls.append(list(messages))
        n = len(self.calls)
        if n <= self.steps:
            reasoning = "我认为需要再查一次故障码定义，" * 150  # ~4,500 tokens of the model's own text
            return ChatResponse(content=reasoning, tool_calls=(ToolCall(f"c{n}", "lookup_dtc", {"codes": ["P0A7F"]}),))
        return ChatResponse(content=json.dumps({"phase": "INVESTIGATING", "priority": "P2", "confidence": 0.3}))


def test_the_models_own_reasoning_is_clipped_to_keep_the_window_within_the_budget(pack: KnowledgePack) -> None:
    """Only tool results were clipped: a model that reasons at length beside its tool calls sent windows of
    15,000 tokens against a budget of 4,000, flagged at most working_over_budget (found by an audit)."""
    model = _Reasoning(steps=3)
    h = Harness(DiagnosisEngine(store=InMemoryStore(), model=model, embedder=HashingEmbedder(), pack=pack))
    out = h.diagnose(alert("e0", T0))
    assert len(model.calls) == 4
    for messages in model.calls:
        assert _window_tokens(messages) <= BUDGET
    assert "model_step_clipped" in out.flags and "working_over_budget" not in out.flags
    # The calls themselves go whole: every lookup the model asked for was answered.
    assert [c.name for ms in model.calls[-1:] for m in ms for c in m.tool_calls] == ["lookup_dtc"] * 3


def test_a_long_session_keeps_its_key_facts_and_every_call_within_the_budget(pack: KnowledgePack) -> None:
    """One vehicle reports the same fault below its rule every 10 minutes, its session open for 100 alerts.
    The round's free text, tool results and all, was read for key facts: every reading's URI in a
    signal_history result became an evidence fact, which never gives way, and the key facts alone passed
    the budget from the 65th alert (found by an audit). The tool results are read by key alone now: a
    reading's URI is a key fact only where an answer cites it."""
    model = _Calls()
    h = Harness(DiagnosisEngine(store=InMemoryStore(), model=model, embedder=HashingEmbedder(), pack=pack))
    flags: set[str] = set()
    for i in range(100):
        signals = {"cell_voltage_diff_mv": 50 + (i * 7) % 41, "pack_temp_c": 30 + i % 15, "soc_pct": 80 - i % 50}
        out = h.diagnose(alert(f"e{i}", T0 + timedelta(minutes=10 * i), signals=signals))
        assert out.phase == "INVESTIGATING"
        flags.update(out.flags)
    session = h.session(VIN)
    assert session is not None and session.alerts == 100
    evidence = [f.payload for f in session.working.key_facts if f.kind.value == "evidence"]
    assert evidence == ["dtc://P0A7F"]  # the one the answers cite
    assert max(_window_tokens(messages) for messages in model.calls) <= BUDGET
    # Folded rounds are checked against the facts as they were read: no fold failed for a URI not carried.
    assert not flags & {"working_over_budget", "summary_fidelity_failed"}, flags


class _HistoryThenDown(OfflineModel):
    """Asks for the signal's history at each alert, then is down (a timeout) when given the result; with
    ``cap``, never answers at all, so the iteration cap ends each run."""

    def __init__(self, cap: bool = False) -> None:
        super().__init__()
        self.cap, self.calls = cap, 0

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        from vdoctor.errors import ModelError
        from vdoctor.models.base import ToolCall

        self.calls += 1
        if messages[-1].role == "tool" and not self.cap:
            raise ModelError("model endpoint: timeout")
        call = ToolCall(id=f"c{self.calls}", name="signal_history", arguments={"signal": "cell_voltage_diff_mv"})
        return ChatResponse(content=None, tool_calls=(call,))


class _Down(OfflineModel):
    """Answers the first alert, then is down at every call."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        from vdoctor.errors import ModelError

        if self.down:
            raise ModelError("model endpoint: 503")
        return super().chat(messages, tools)


@pytest.mark.parametrize("cap", [False, True], ids=["down-after-a-tool-call", "iteration-cap"])
def test_a_run_that_ends_without_a_reply_adds_no_key_facts_of_its_prompt_or_tool_results(
    pack: KnowledgePack, cap: bool
) -> None:
    """A run that ended without the model's reply had the transcript's last message, a tool result, taken as
    the reply: every reading's URI in it became an evidence fact again, one more each alert (found by a diff
    review)."""
    h = Harness(DiagnosisEngine(store=InMemoryStore(), model=_HistoryThenDown(cap), embedder=HashingEmbedder(),
                                pack=pack))  # fmt: skip
    for i in range(60):
        out = h.diagnose(alert(f"e{i}", T0 + timedelta(minutes=10 * i), signals={"cell_voltage_diff_mv": 50 + i % 40}))
        assert ("iteration_cap" if cap else "model_failed") in out.flags
    session = h.session(VIN)
    assert session is not None
    assert [f for f in session.working.key_facts if f.kind.value == "evidence"] == []
    assert "working_over_budget" not in out.flags


def test_a_model_down_at_its_first_call_adds_no_key_facts_read_back_from_the_prompt(pack: KnowledgePack) -> None:
    """The model down at an alert's first call: the transcript's last message, the alert's prompt, was taken
    as the reply, and its rendered key facts were read back as new ones, "decision: decision: ...", which
    never give way: 99 key facts after 60 such alerts, past the budget (found by a diff review)."""
    model = _Down()
    h = Harness(DiagnosisEngine(store=InMemoryStore(), model=model, embedder=HashingEmbedder(), pack=pack))
    text = "维修站反馈：怀疑高压线束松动，已排除"
    h.diagnose(alert("e0", T0, codes=["P0A7F"], signals={"cell_voltage_diff_mv": 60}, text=text))
    before = len(h.session(VIN).working.key_facts)  # type: ignore[union-attr]
    model.down = True
    for i in range(1, 40):
        at = T0 + timedelta(minutes=10 * i)
        out = h.diagnose(alert(f"e{i}", at, codes=["P0A7F"], signals={"cell_voltage_diff_mv": 60 + i}, text="例行上报"))
        assert out.flags == ["model_failed"]
    facts = [f.render() for f in h.session(VIN).working.key_facts]  # type: ignore[union-attr]
    assert not [f for f in facts if f.startswith(("decision: decision", "excluded: excluded"))], facts
    assert len([f for f in facts if f.startswith("excluded:")]) == 1
    assert len(facts) <= before + 8  # the readings the alerts added, bounded per signal
