"""The agent loop's cheaper paths give what the plain ones gave: answers, tool results, the alert block."""

from __future__ import annotations

import json
import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vdoctor.agent.react import FinalAnswer, parse_answer
from vdoctor.agent.tools import MAX_ENTRIES_PER_LOOKUP, Toolbox
from vdoctor.knowledge import load_pack
from vdoctor.lines import ALERT_FENCE, render_alert_block
from vdoctor.memory.session import Reading, SessionState
from vdoctor.records import Phase

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"
AT = datetime(2026, 11, 1, 8, tzinfo=UTC)


def _plain_parse(content: str) -> FinalAnswer | None:
    """``parse_answer`` written plainly: a validated answer, corrected on a copy (the confidence on every path)."""
    start, end = content.find("{"), content.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        answer = FinalAnswer.model_validate(json.loads(content[start : end + 1]))
    except ValueError:
        return None
    if answer.phase is Phase.CONCLUDED and not (answer.root_cause and answer.fix_action and answer.priority):
        answer = answer.model_copy(update={"phase": Phase.INVESTIGATING})
    confidence = 0.0 if math.isnan(answer.confidence) else min(1.0, max(0.0, answer.confidence))
    return answer.model_copy(update={"confidence": confidence})


def test_parse_answer_corrects_in_place_what_a_copy_corrected() -> None:
    rng = random.Random(3)
    for _ in range(300):
        body: dict[str, Any] = {"phase": rng.choice(["CONCLUDED", "INVESTIGATING", "DONE"])}
        for key, values in (
            ("root_cause", [None, "", "cell imbalance"]),
            ("fix_action", [None, "replace module"]),
            ("priority", [None, "P1", "P2", "P9"]),
            ("confidence", [-0.5, 0, 0.3, "0.7", 1.7, 85, math.nan]),
            ("codes", [["P0A7F"], "P0A7F"]),
            ("evidence", [["dtc://P0A7F"]]),
            ("voided", [["old cause"]]),
        ):
            if rng.random() < 0.6:
                body[key] = rng.choice(values)
        content = rng.choice(["", "answer: "]) + json.dumps(body) + rng.choice(["", " done"])
        got, want = parse_answer(content), _plain_parse(content)
        assert (got is None) == (want is None), content
        if got is not None and want is not None:
            assert got.model_dump() == want.model_dump() and got.model_fields_set == want.model_fields_set
    # Defaults are fresh lists per answer.
    a, b = FinalAnswer(phase=Phase.INVESTIGATING), FinalAnswer(phase=Phase.INVESTIGATING)
    a.codes.append("P0A7F")
    assert b.codes == []


def test_tool_results_and_the_alert_block_are_what_json_dumps_writes() -> None:
    session = SessionState(vin=VIN, series="EV-A", session_id=f"{VIN}-s", opened_at=AT, last_event_at=AT)
    for n in range(3):
        ts = AT + timedelta(minutes=n)
        session.add_reading(
            Reading(name="cell_voltage_diff_mv", value=100.0 + n, ts=ts, uri=f"signal://{VIN}/压差@{n}")
        )
    box = Toolbox(load_pack(), session)
    for name, arguments in (
        ("lookup_dtc", {"codes": ["P0A7F", "Z9999"]}),
        ("signal_history", {"signal": "cell_voltage_diff_mv"}),
        ("signal_history", {"signal": ""}),
        ("nope", {}),
    ):
        got = box.call(name, arguments)
        assert got == json.dumps(json.loads(got), ensure_ascii=False, sort_keys=True)
    assert "压差" in box.call("signal_history", {"signal": "cell_voltage_diff_mv"})
    body = {"event_id": "e1", "alert_text": "电池压差 high", "dtc_codes": ["P0A7F"], "signals": {"a": 1.5, "b": 2.0}}
    assert render_alert_block(body) == ALERT_FENCE + json.dumps(body, ensure_ascii=False) + "\n```"


def test_answer_json_dict_is_model_dump_in_json_mode() -> None:
    rng = random.Random(7)
    answers = [FinalAnswer(phase=Phase.INVESTIGATING)]
    for _ in range(500):
        answers.append(
            FinalAnswer(
                phase=rng.choice(list(Phase)),
                root_cause=rng.choice([None, "", "cell imbalance", "压差过大"]),
                fix_action=rng.choice([None, "", "replace the module"]),
                priority=rng.choice([None, "P1", "P2", "P3"]),
                confidence=rng.choice([0.0, -0.0, 0.8, 1.0, -0.5, 3.0, math.nan, math.inf, -math.inf, rng.random()]),
                codes=rng.sample(["P0A7F", "P0AA6", "B1318"], rng.randint(0, 3)),
                evidence=rng.sample(["dtc://P0A7F", "signal://V/x@t", "case://V/s"], rng.randint(0, 3)),
                excluded=rng.sample(["coolant leak", "sensor fault"], rng.randint(0, 2)),
                voided=rng.sample(["cell imbalance"], rng.randint(0, 1)),
            )
        )
    parsed = parse_answer(json.dumps({"phase": "CONCLUDED", "confidence": 0.8, "codes": ["P0A7F"]}))
    assert parsed is not None
    answers.append(parsed)
    for answer in answers:
        fast, plain = answer.json_dict(), answer.model_dump(mode="json")
        # repr: NaN is not equal to itself, and -0.0 equals 0.0; the types too (the phase a plain str).
        assert repr(fast) == repr(plain)
        assert [type(v) for v in fast.values()] == [type(v) for v in plain.values()]
        for key in ("codes", "evidence", "excluded", "voided"):
            assert fast[key] is not getattr(answer, key)  # copies, as the dump's are


def test_a_lookup_answers_8_entries_and_every_code_the_pack_lacks_and_names_the_rest() -> None:
    # Before, codes beyond the 8 of a call were dropped unsaid: a model asking for 12 got 8 answers and no
    # word of the other 4. Then every code counted toward the 8, so a full scan of 48 codes took 6 calls.
    # An entry is some 180 tokens; a code the pack lacks costs its name alone.
    session = SessionState(vin=VIN, series="EV-A", session_id=f"{VIN}-s", opened_at=AT, last_event_at=AT)
    pack = load_pack()
    known = list(pack.entries)[:12]
    lost = [f"U{n:04X}" for n in range(0x0150, 0x0150 + 24)]
    codes = [code for i, k in enumerate(known) for code in (k, lost[2 * i], lost[2 * i + 1])]
    result = json.loads(Toolbox(pack, session).call("lookup_dtc", {"codes": codes}))
    ninth = codes.index(known[MAX_ENTRIES_PER_LOOKUP])
    assert [c["code"] for c in result["codes"]] == known[:MAX_ENTRIES_PER_LOOKUP]
    assert result["unknown"] == [c for c in codes[:ninth] if c in lost]
    assert result["not_looked_up"] == codes[ninth:]
    # A full scan of 100 codes, 2 of them the pack's, is answered in one call.
    scan = ["P0A7F", *(f"U{n:04X}" for n in range(0x0150, 0x0150 + 98)), "U0100"]
    result = json.loads(Toolbox(pack, session).call("lookup_dtc", {"codes": scan}))
    assert [c["code"] for c in result["codes"]] == ["P0A7F", "U0100"] and result["unknown"] == scan[1:-1]
    assert "not_looked_up" not in result


@pytest.mark.parametrize(
    "content",
    [
        '<think>signal_history said {"signal": "cell_voltage_diff_mv", "readings": [{"value": 187}]}</think>\n{ANSWER}',
        "{ANSWER}\nNote: the pack's rule is {cell_voltage_diff_mv >= 100}.",
        "Thinking: {not json} then {ANSWER}",
    ],
)
def test_an_answer_among_other_braces_is_read(content: str) -> None:
    """A reasoning model served without its parser writes its thinking first, quoting a tool result's braces,
    and a note with braces may follow: the span from the first "{" to the last held more than the answer,
    and a valid answer was unparseable_answer (found by an audit)."""
    answer = {"phase": "CONCLUDED", "root_cause": "cell imbalance", "fix_action": "balance the pack",
              "priority": "P2", "confidence": 0.8, "codes": ["P0A7F"], "evidence": ["dtc://P0A7F"]}  # fmt: skip
    parsed = parse_answer(content.replace("{ANSWER}", json.dumps(answer)))
    assert parsed is not None and parsed.phase is Phase.CONCLUDED and parsed.root_cause == "cell imbalance"
    assert parse_answer('{"signal": "x"} and {"codes": []}') is None  # braces, but no answer among them
    # A draft answer in the thinking is not the answer; nor do 19 quoted braces before it hide it.
    draft = json.dumps({**answer, "phase": "INVESTIGATING", "root_cause": "maybe a sensor"})
    drafted = parse_answer(f"<think>first thought: {draft}; no.</think>{json.dumps(answer)}")
    assert drafted is not None and drafted.root_cause == "cell imbalance"
    many = "<think>" + "{readings} " * 19 + "</think> noted {x}. " + json.dumps(answer) + " {done}"
    assert parse_answer(many) is not None
    assert parse_answer("{x} " * 19 + json.dumps(answer) + " {done}") is not None
