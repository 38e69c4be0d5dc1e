"""A vehicle's stored state that this release cannot read is set aside to the dead letters; the vehicle goes on.

The session and the dedup ids live in keyed state as JSON text. A text that is not the JSON of its model (written
by a release whose format this one does not read, or damaged) failed every later event of the vehicle (the
session: each alert a dead letter, the state written back unchanged, so its TTL never ran out while the vehicle
sent) or the job (the dedup ids: raised outside the engine's catch, at every restart). Now the text goes to a
``process`` dead letter, whole, with what was wrong, and the event runs without it.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from operators import diagnosis as op_module
from operators.diagnosis import Applied
from operators.metrics import DiagnosisMetrics
from tests.unit.test_engine_failures import (
    SID_1,
    T0,
    VIN,
    Harness,
    UpsertDownStore,
    alert,
    engine,
    lifecycle,
)
from tests.unit.test_operator_duplicates import GroupWithMeter
from tests.unit.test_operator_inline_restore import Runtime, alerts, operator
from vdoctor.diagnosis import RunStats
from vdoctor.events import parse_event
from vdoctor.knowledge import KnowledgePack, load_pack
from vdoctor.memory.session import DedupState, StoredDedup, StoredSession, split_seen
from vdoctor.models.offline import OfflineModel
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def pack() -> KnowledgePack:
    return load_pack()


def damaged_sessions(text: str, phase: str = '"phase":"INVESTIGATING"') -> dict[str, str]:
    """A stored session's text damaged where each read meets it: its head (phase and times, read for every alert),
    its body (read when an alert continues it), and not JSON at all."""
    assert phase in text and '"alerts":1,' in text
    return {
        "head": text.replace(phase, '"phase":"TRIAGE"', 1),
        "body": text.replace('"alerts":1,', '"alerts":"one",', 1),
        "cut": text[: len(text) // 2],
    }


@pytest.mark.parametrize("damage", ["head", "body", "cut"])
def test_an_unreadable_stored_session_is_set_aside_and_the_alert_is_diagnosed(pack: KnowledgePack, damage: str) -> None:
    h = Harness(engine(pack))
    h.diagnose(alert("e-1", T0, 87))  # (87 mV: not confirmed, the session stays open)
    stored, ids = h.state[VIN]
    assert stored is not None
    bad = damaged_sessions(stored)[damage]
    h.state[VIN] = (bad, ids)

    result = h.send(alert("e-2", T0 + timedelta(hours=1), 88))
    [diagnosis] = result.diagnoses
    [letter] = result.dead_letters
    assert letter.stage == "process" and letter.raw == bad
    assert letter.error.startswith(f"the stored session of {VIN} cannot be read by this release (")
    assert letter.error.endswith("set aside here, its text as raw; event e-2 ran without it")
    assert result.stats.set_aside == 1
    # The alert ran as the vehicle's first: a new session (its id its own second's, not the one set aside).
    assert diagnosis.session_id == f"{VIN}-20261101T091530" != SID_1
    # The next alert finds the new session and reads it: no more letters.
    later = h.send(alert("e-3", T0 + timedelta(hours=2), 89))
    assert later.dead_letters == [] and [d.session_id for d in later.diagnoses] == [diagnosis.session_id]


def concluded_and_damaged(pack: KnowledgePack) -> dict[str, tuple[Harness, str]]:
    """A concluded session (an alert much later opens a new one, reading only its id and care) damaged where those
    reads meet it: a date that does not exist where it left the fleet's care, an escape JSON has not in its id."""
    found = {}
    for damage in ("left care", "id escape"):
        h = Harness(engine(pack))
        h.diagnose(alert("e-1", T0, 187))
        stored, ids = h.state[VIN]
        assert stored is not None and stored.endswith(',"left_care_at":null}')
        if damage == "left care":
            bad = stored.removesuffix(',"left_care_at":null}') + ',"left_care_at":"2026-02-30T00:00:00Z"}'
        else:
            bad = stored.replace('"session_id":"', '"session_id":"\\q', 1)
        h.state[VIN] = (bad, ids)
        found[damage] = (h, bad)
    return found


@pytest.mark.parametrize("damage", ["left care", "id escape"])
def test_a_stored_session_damaged_where_its_quick_reads_meet_it_is_set_aside(pack: KnowledgePack, damage: str) -> None:
    """The quick reads (a regex, then the value) raised a plain ValueError: every alert a dead letter (a review)."""
    h, bad = concluded_and_damaged(pack)[damage]
    result = h.send(alert("e-2", T0 + timedelta(days=3), 88))
    assert len(result.diagnoses) == 1 and [x.raw for x in result.dead_letters] == [bad]
    assert h.send(alert("e-3", T0 + timedelta(days=3, hours=1), 88)).dead_letters == []


def test_a_lifecycle_event_sets_a_session_aside_before_it_writes(pack: KnowledgePack) -> None:
    """Its first try soft-deleted the vehicle's cases and then met the session: the second did it again (a review)."""
    h, bad = concluded_and_damaged(pack)["id escape"]
    deletes: list[str] = []
    store = h.engine.store
    real = store.soft_delete
    store.soft_delete = lambda vin, at: deletes.append(vin) or real(vin, at)  # type: ignore[method-assign]
    result = h.send(lifecycle("e-2", T0 + timedelta(days=3)))
    assert [x.raw for x in result.dead_letters] == [bad] and deletes == [VIN]


def test_a_deterministic_replay_asks_an_unreadable_session_whether_it_waits_without_failing() -> None:
    """The replay's admission asks on a worker, outside its run: the error ended the worker thread (a review)."""
    from vdoctor.replay_order import ReplayOrder

    raw = json.dumps(alert("e-2", T0, 88), ensure_ascii=False)
    item = (parse_event(raw).model_dump_json(), raw)
    assert ReplayOrder(store_was_empty=True).waits((StoredSession("{not json"), DedupState()), item)


def test_the_letter_of_a_state_of_thousands_of_problems_is_bounded(pack: KnowledgePack) -> None:
    text = '{"seen":{' + ",".join(f'"e-{k}":"2026-11-01T08:00:00Z"' for k in range(2048)) + "}}"
    h = Harness(engine(pack))
    h.state[VIN] = (None, text)
    [letter] = h.send(alert("e-1", T0, 87)).dead_letters
    assert letter.raw == text and len(letter.error) < 1000


def waiting_case_damaged(pack: KnowledgePack) -> tuple[Harness, UpsertDownStore, str, str]:
    """A vehicle whose concluded case waits for its write (the store was down), its stored session then damaged
    in its body: the harness, the store (up again), the damaged text and the dedup ids."""
    store = UpsertDownStore()
    store.down = True
    h = Harness(engine(pack, store=store))
    assert h.diagnose(alert("e-1", T0, 187)).flags == ["l3_write_failed"]
    stored, ids = h.state[VIN]
    assert stored is not None and StoredSession(stored).l3_pending
    bad = damaged_sessions(stored, '"phase":"CONCLUDED"')["body"]
    h.state[VIN] = (bad, ids)
    store.down = False
    return h, store, bad, ids


def test_a_waiting_case_in_an_unreadable_session_is_set_aside_by_a_lifecycle_event(pack: KnowledgePack) -> None:
    h, store, bad, _ = waiting_case_damaged(pack)
    result = h.send(lifecycle("e-2", T0 + timedelta(hours=1)))
    [letter] = result.dead_letters
    assert letter.raw == bad and result.session is not None and result.session.left_care_at is not None
    assert store.upserts == 1  # (the case is in the letter's text, not written)


@pytest.mark.parametrize(
    "text", ['{"seen":5}', '{"seen":{"e-1":"at eight"}}', '{"seen":{"e-1":\u00b2}}', '{"seen":{"e-1":1', "null"]
)
def test_unreadable_stored_dedup_ids_are_set_aside_and_the_event_is_diagnosed(pack: KnowledgePack, text: str) -> None:
    h = Harness(engine(pack))
    h.state[VIN] = (None, text)
    result = h.send(alert("e-1", T0, 87))
    assert len(result.diagnoses) == 1
    [letter] = result.dead_letters
    assert letter.raw == text and letter.stage == "process"
    assert letter.error.startswith(f"the stored dedup ids of {VIN} cannot be read by this release (")
    assert letter.error.endswith("the vehicle's event ids start again from this event")
    # The ids start again from this event: it is held, and sent again it is a duplicate.
    assert [split_seen(t)[0] for t in result.dedup.seen.values()] == [int(T0.timestamp())]
    assert list(result.dedup.seen) == ["e-1"]
    again = h.send(alert("e-1", T0, 87))
    assert again.duplicate and again.dead_letters == [] and again.diagnoses == []


def test_both_unreadable_are_two_letters(pack: KnowledgePack) -> None:
    h = Harness(engine(pack))
    h.diagnose(alert("e-1", T0, 87))
    stored = h.state[VIN][0]
    assert stored is not None
    h.state[VIN] = (damaged_sessions(stored)["body"], "[]")
    result = h.send(alert("e-2", T0 + timedelta(hours=1), 88))
    assert [x.raw for x in result.dead_letters] == ["[]", damaged_sessions(stored)["body"]]
    assert result.stats.set_aside == 2 and len(result.diagnoses) == 1


def test_a_waiting_case_in_an_unreadable_session_is_set_aside_by_its_retry(pack: KnowledgePack) -> None:
    """A try read the session, failed, and kept it: it was tried again for the retries' whole horizon in vain."""
    h, _, bad, ids = waiting_case_damaged(pack)
    result = h.engine.retry_case(StoredSession(bad), StoredDedup(ids), VIN)
    assert result.session is None and result.stats.set_aside == 1
    [letter] = result.dead_letters
    assert letter.raw == bad and letter.error.endswith("its case, if it holds one, is not written")
    assert VIN in letter.error


def test_the_operator_emits_the_letter_and_counts_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the operator's step, as the job runs it: unreadable ids raised out of the step and failed the job."""
    function = operator(Runtime(), 1, OfflineModel(), InMemoryStore(), monkeypatch)
    [(vin, event_json, raw)] = alerts(1, 1)
    carry, applied = function._step(vin, (None, StoredDedup('{"seen":5}')), (event_json, raw))
    kinds = [kind for kind, _ in applied.outputs]
    assert kinds == [op_module.DIAGNOSIS, op_module.DEAD_LETTER] and applied.dead_letters == 1
    assert json.loads(applied.outputs[1][1])["raw"] == '{"seen":5}'
    assert DedupState.model_validate_json(applied.dedup_json).seen  # the ids start again, readable
    group = GroupWithMeter()
    metrics = DiagnosisMetrics(group, in_flight=lambda: 0, queued=lambda: 0, summary_counts=dict)
    # (The run's counts alone: the stand-in group has no histograms.)
    metrics.record(
        Applied(None, "{}", dead_letters=applied.dead_letters, stats=RunStats(set_aside=applied.stats.set_aside))
    )
    metrics.record(Applied(None, "{}"))
    assert group.counters["states_set_aside"].count == 1 and group.counters["dead_letters"].count == 1
    function.close()


def test_a_step_whose_outputs_fail_after_a_state_was_set_aside_keeps_that_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The outputs that failed held the set-aside letter: the state left with them, unseen (a review). It is kept as it
    was; the next event sets it aside again."""
    function = operator(Runtime(), 1, OfflineModel(), InMemoryStore(), monkeypatch)
    [(vin, first_json, first_raw), (_, later_json, later_raw)] = alerts(1, 2)
    _, applied = function._step(vin, (None, StoredDedup(DedupState().model_dump_json())), (first_json, first_raw))
    assert applied.session_json is not None
    bad = applied.session_json.replace('"alerts":1,', '"alerts":"one",', 1)
    run = function.engine.on_event

    def half_emoji(*args: object) -> object:
        result = run(*args)
        result.diagnoses[0].root_cause = "battery \ud83d"  # a model's half emoji: the diagnosis cannot be written
        return result

    function.engine.on_event = half_emoji
    _, refused = function._step(vin, (StoredSession(bad), StoredDedup(applied.dedup_json)), (later_json, later_raw))
    assert refused.session_json == bad and refused.dead_letters == 1
    function.close()
