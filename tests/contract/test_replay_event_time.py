"""The event-time fleet through the diagnosis engine, in file order, on every store backend.

The file (tests/fleets/event_time.py) puts other vehicles' later conclusions,
rechecks, a merge, an overturned verdict and a scrapping before the sessions
that must not see them. Every recalled (session, case) pair must be one the
file allows; sessions whose whole past precedes them in the file get exactly
what it allows, each case in its version of the time (the merged vehicle's
case is recalled with the reading of the version that held then).
"""

from __future__ import annotations

import pytest

from tests.fleets import event_time as fleet
from tests.unit.test_engine import Harness
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.knowledge import load_pack
from vdoctor.lines import RecallEntry
from vdoctor.models.offline import OfflineModel
from vdoctor.stores.base import MemoryStore

pytestmark = pytest.mark.contract


def test_no_session_recalls_what_became_true_after_it_opened(store: MemoryStore) -> None:
    engine = DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack(),
                             injection_budget_tokens=fleet.BUDGET)  # fmt: skip
    h = Harness(engine)
    events = fleet.events()
    allowed, exact, leaks = fleet.allowed(events), fleet.complete_past(events), fleet.future_only(events)
    texts: dict[str, str] = {}
    for event in events:
        result = h.send(event)
        assert result.dead_letters == [], result.dead_letters
        for d in result.diagnoses:
            session = h.session(d.vin)
            assert session is not None and session.session_id == d.session_id
            texts[d.session_id] = session.memory_text
    assert len(h.diagnoses) == sum(e["type"] == "alert" for e in events) == len(allowed)
    assert all(d.phase == "CONCLUDED" for d in h.diagnoses)  # every session concluded at its alert
    assert sum(len(x) for x in leaks.values()) >= 10  # the file does hold futures to leak
    for d in h.diagnoses:
        ok = allowed[d.session_id]
        own = tuple(r.session_id for r in d.memory.own)
        similar = {(r.vin, r.session_id) for r in d.memory.similar}
        assert set(own) <= set(ok.own) and similar <= ok.similar, d.session_id
        if d.session_id in exact:
            assert (own, similar) == (ok.own, ok.similar), d.session_id
        # Each recalled case in the version that held when the session opened.
        for entry in RecallEntry.parse_block(texts[d.session_id]):
            reading = ok.readings[(entry.vin, entry.session_id)]
            assert f"cell_voltage_diff_mv={reading:g}" in entry.summary, (d.session_id, entry.session_id)
    a1 = next(d for d in h.diagnoses if d.session_id == fleet.session_id(fleet.A1, fleet.day(10)))
    assert (fleet.M, fleet.session_id(fleet.M, fleet.day(5))) in {(r.vin, r.session_id) for r in a1.memory.similar}
    assert "cell_voltage_diff_mv=151" in texts[a1.session_id] and "=163" not in texts[a1.session_id]
