"""A/B metrics on hand-made diagnoses."""

from __future__ import annotations

import pytest

from vdoctor.evaluation.ab import arm_metrics

pytestmark = pytest.mark.unit


def diag(
    vin: str, sid: str, phase: str, tools: int, llm: int, cause: str | None, codes: list[str], injected: int = 0
) -> dict[str, object]:
    return {
        "vin": vin,
        "session_id": sid,
        "phase": phase,
        "tool_calls": tools,
        "llm_calls": llm,
        "root_cause": cause,
        "evidence": [f"dtc://{c}" for c in codes],
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "memory": {"tokens": injected},
    }


def test_metrics_by_hand() -> None:
    diagnoses = [
        diag("V1", "s1", "CONCLUDED", 2, 3, "weak cell", ["P0A7F"]),
        diag("V1", "s2", "INVESTIGATING", 1, 2, None, ["P0A7F"], injected=300),
        diag("V1", "s2", "CONCLUDED", 1, 2, "weak cell", ["P0A7F"], injected=300),  # repeat, consistent
        diag("V1", "s3", "CONCLUDED", 1, 2, "bad sensor", ["P0A7F", "P0AC0"], injected=500),  # repeat, differs
        diag("V2", "s4", "CONCLUDED", 2, 3, "weak cell", ["P0300"]),  # other fault: no repeat
    ]
    rechecks = [
        {"session_id": "s1", "recheck_ok": True},
        {"session_id": "s3", "recheck_ok": False},
        {"session_id": "unknown", "recheck_ok": False},  # not a concluded session: not judged
    ]
    m = arm_metrics("on", diagnoses, rechecks)
    assert (m.events, m.sessions, m.concluded) == (5, 4, 4)
    assert (m.repeat_visits, m.repeat_consistent) == (2, 1)
    assert m.consistency == 0.5
    assert m.tool_calls_per_session == 7 / 4
    assert m.llm_calls_per_session == 12 / 4
    assert m.backtrack_rate == 0.5
    assert m.tokens_per_event == 110
    assert m.injected_max == 500
