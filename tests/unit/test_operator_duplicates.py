"""An event whose id the vehicle's dedup state holds, through the diagnosis operator and its metrics.

The same event sent again is dropped and counted (``duplicates``); another event under a taken id (its time
differs: a producer that reuses its ids) was dropped the same way, without a word, and is a dead letter.
"""

from __future__ import annotations

import json

import pytest

from operators import diagnosis as op_module
from operators.diagnosis import Applied
from operators.metrics import DiagnosisMetrics
from tests.unit.test_operator_inline_restore import Runtime, alerts, operator
from tests.unit.test_operator_metrics import Group
from vdoctor.events import parse_event
from vdoctor.memory.session import DedupState, StoredDedup
from vdoctor.models.offline import OfflineModel
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit


def test_a_resend_is_counted_and_an_id_reused_by_another_event_is_a_dead_letter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    function = operator(Runtime(), 1, OfflineModel(), InMemoryStore(), monkeypatch)
    [(vin, first_json, first_raw), (_, _, later_raw)] = alerts(1, 2)
    # The ids as the keyed state stores them (the job's path: checked in their text).
    carry, first = function._step(vin, (None, StoredDedup(DedupState().model_dump_json())), (first_json, first_raw))
    assert [kind for kind, _ in first.outputs] == [op_module.DIAGNOSIS] and first.duplicates == 0
    stored = StoredDedup(first.dedup_json)
    carry = (carry[0], stored)

    carry, resend = function._step(vin, carry, (first_json, first_raw))
    assert resend.outputs == [] and resend.duplicates == 1 and resend.dead_letters == 0

    # The later alert of the vehicle, sent under the first one's id.
    reused_raw = json.dumps({**json.loads(later_raw), "event_id": json.loads(first_raw)["event_id"]})
    reused = parse_event(reused_raw)
    carry, refused = function._step(vin, carry, (reused.model_dump_json(), reused_raw))
    assert refused.duplicates == 0 and refused.dead_letters == 1
    [(kind, letter)] = refused.outputs
    assert kind == op_module.DEAD_LETTER
    found = json.loads(letter)
    assert found["raw"] == reused_raw and found["stage"] == "process"
    assert "2026-11-01T08:00:00Z" in found["error"] and "2026-11-01T09:00:00Z" in found["error"]
    # The id stays the processed event's, with its time; the text was edited, never parsed.
    assert refused.dedup_json == first.dedup_json and stored._parsed is None  # noqa: SLF001
    function.close()


class Meter:
    def mark_event(self, n: int = 1) -> None:
        pass


class GroupWithMeter(Group):
    def meter(self, name: str, time_span_in_seconds: int = 60) -> Meter:
        return Meter()


def test_the_metrics_count_duplicates_apart_from_dead_letters() -> None:
    group = GroupWithMeter()
    metrics = DiagnosisMetrics(group, in_flight=lambda: 0, queued=lambda: 0, summary_counts=dict)
    for applied in (Applied(None, "{}", duplicates=1), Applied(None, "{}", dead_letters=1), Applied(None, "{}")):
        metrics.record(applied)
    assert group.counters["duplicates"].count == 1 and group.counters["dead_letters"].count == 1
    assert group.counters["runs"].count == 3
