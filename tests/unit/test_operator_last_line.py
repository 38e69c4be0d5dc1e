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
    assert after == carry and applied.session_json is None and applied.dead_letters == 1
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


def test_a_live_session_the_failed_run_changed_is_kept_as_it_was_before_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Within a chain of runs a vehicle's session is carried live, and an alert's run changes it in place: the
    fallback wrote that changed session again (failing the same way, or keeping half a run) until it kept the
    session's text from before the run (found by a review)."""
    runtime = Runtime()
    function = operator(runtime, 1, OfflineModel(), InMemoryStore(), monkeypatch)
    engine = function.engine
    on_event = engine.on_event
    [(vin, first_json, first_raw), (_, second_json, second_raw)] = alerts(1, 2)
    carry, first = function._step(vin, (None, DedupState()), (first_json, first_raw))
    assert carry[0] is not None and not isinstance(carry[0], str) and first.session_json is not None

    def unwritable(*args: Any) -> Any:
        result = on_event(*args)
        result.session.alerts += 1000  # (a change in place, as the failed run's own)
        [diagnosis] = result.diagnoses
        return replace(result, diagnoses=[diagnosis.model_copy(update={"root_cause": "pump \ud83d"})])

    monkeypatch.setattr(engine, "on_event", unwritable)
    kept, refused = function._step(vin, carry, (second_json, second_raw))
    assert refused.dead_letters == 1 and refused.session_json == first.session_json
    assert kept[0] is not None and kept[0].model_dump_json() == first.session_json
    monkeypatch.setattr(engine, "on_event", on_event)
    _, again = function._step(vin, kept, (second_json, second_raw))  # sent again: run, and counted once
    assert [kind for kind, _ in again.outputs] == [op_module.DIAGNOSIS]
    assert json.loads(again.session_json or "{}")["alerts"] == json.loads(first.session_json)["alerts"] + 1
    function.close()


def test_an_engine_dead_letter_that_cannot_be_written_keeps_the_session_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's own dead letters and duplicates gave no session as found, and the fallback then cleared the
    vehicle's open session (found by a review): a store error whose message holds half an emoji."""
    from vdoctor.errors import StoreError

    runtime = Runtime()
    function = operator(runtime, 1, OfflineModel(), InMemoryStore(), monkeypatch)
    engine = function.engine
    [(vin, first_json, first_raw), (_, second_json, second_raw)] = alerts(1, 2)
    carry, first = function._step(vin, (None, DedupState()), (first_json, first_raw))

    def down(*args: Any) -> Any:
        raise StoreError("store down \ud83d")

    monkeypatch.setattr(engine, "_on_alert", down)
    kept, refused = function._step(vin, carry, (second_json, second_raw))
    assert refused.dead_letters == 1 and refused.session_json == first.session_json
    assert kept[0] is not None and kept[0].model_dump_json() == first.session_json
    # A duplicate keeps its id: the event it repeats was processed.
    monkeypatch.undo()
    monkeypatch.setattr(op_module, "build_engine", lambda settings: engine)
    _, duplicate = function._step(vin, carry, (first_json, first_raw))
    assert duplicate.outputs == [] and "e-0-0" in duplicate.dedup_json
    function.close()


def test_the_engine_lets_a_memory_error_through() -> None:
    """A worker out of memory is the worker's failure, not the event's: it was one event's dead letter."""
    from datetime import UTC, datetime

    from tests.unit.test_engine import Harness, alert
    from vdoctor.diagnosis import DiagnosisEngine
    from vdoctor.embedders.hashing import HashingEmbedder
    from vdoctor.knowledge import load_pack

    engine = DiagnosisEngine(store=InMemoryStore(), model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack())

    def out_of_memory(*args: Any) -> Any:
        raise MemoryError

    engine._on_alert = out_of_memory  # type: ignore[method-assign]
    with pytest.raises(MemoryError):
        Harness(engine).send(alert("e-1", datetime(2026, 11, 1, 8, tzinfo=UTC)))
