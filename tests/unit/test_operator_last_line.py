"""The diagnosis operator's last line of defence: what fails after an event's run is that event's dead letter.

The engine turns one event's failure into its dead letter (``DiagnosisEngine.on_event``); writing the run's new
state and outputs as JSON comes after, in the operator. A failure there (an audit: a model's half emoji in the
session, which no JSON writer takes) escaped the operator, and the job failed on the same event at every
restart.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from operators import diagnosis as op_module
from tests.unit.test_operator_inline_restore import Runtime, alerts, operator
from vdoctor.memory.session import DedupState
from vdoctor.models.offline import OfflineModel
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit


def test_a_run_whose_outputs_cannot_be_written_is_a_dead_letter_and_the_state_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = Runtime()
    function = operator(runtime, 1, OfflineModel(), InMemoryStore(), monkeypatch)
    engine = function.engine
    on_event = engine.on_event

    def unwritable(*args: Any) -> Any:
        result = on_event(*args)
        [diagnosis] = result.diagnoses
        return replace(result, diagnoses=[diagnosis.model_copy(update={"root_cause": "pump \ud83d"})])

    monkeypatch.setattr(engine, "on_event", unwritable)
    [(vin, event_json, raw)] = alerts(1, 1)
    carry = (None, DedupState())
    after, applied = function._step(vin, carry, (event_json, raw))
    assert after is carry and applied.session_json is None and applied.dead_letters == 1
    [(kind, letter)] = applied.outputs
    assert kind == op_module.DEAD_LETTER
    assert json.loads(letter) == {
        "raw": raw, "stage": "process",
        "error": "processing failed: PydanticSerializationError (its message and traceback are in the job's log)",
    }  # fmt: skip
    # The next event of the vehicle runs as if the failed one had not come.
    monkeypatch.setattr(engine, "on_event", on_event)
    _, next_applied = function._step(vin, after, (event_json, raw))
    assert [kind for kind, _ in next_applied.outputs] == [op_module.DIAGNOSIS]
    function.close()
