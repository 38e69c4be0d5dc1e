"""The agent loop's cheaper paths give what the plain ones gave: answers, tool results, the alert block."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vdoctor.agent.react import FinalAnswer, parse_answer
from vdoctor.agent.tools import Toolbox
from vdoctor.knowledge import load_pack
from vdoctor.lines import ALERT_FENCE, render_alert_block
from vdoctor.memory.session import Reading, SessionState
from vdoctor.records import Phase

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"
AT = datetime(2026, 11, 1, 8, tzinfo=UTC)


def _plain_parse(content: str) -> FinalAnswer | None:
    """``parse_answer`` as it was: a validated answer, corrected on a copy."""
    start, end = content.find("{"), content.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        answer = FinalAnswer.model_validate(json.loads(content[start : end + 1]))
    except ValueError:
        return None
    if answer.phase is Phase.CONCLUDED and not (answer.root_cause and answer.fix_action and answer.priority):
        return answer.model_copy(update={"phase": Phase.INVESTIGATING})
    return answer.model_copy(update={"confidence": min(1.0, max(0.0, answer.confidence))})


def test_parse_answer_corrects_in_place_what_a_copy_corrected() -> None:
    rng = random.Random(3)
    for _ in range(300):
        body: dict[str, Any] = {"phase": rng.choice(["CONCLUDED", "INVESTIGATING", "DONE"])}
        for key, values in (
            ("root_cause", [None, "", "cell imbalance"]),
            ("fix_action", [None, "replace module"]),
            ("priority", [None, "P1", "P2", "P9"]),
            ("confidence", [-0.5, 0, 0.3, "0.7", 1.7]),
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
