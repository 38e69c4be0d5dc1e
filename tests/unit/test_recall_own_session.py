"""A session's opening alert run again after a restore recalls what its first run recalled.

The job can stop after an alert's run wrote its case to long-term memory but
before the checkpoint that holds the run's result: the restored job runs the
alert again, from the session state it had before. When that alert opened
the session, the case it wrote concluded at the session's opening time, so
as of that time it exists; recall leaves out the opening session's own
records (and takes an earlier case it was merged into as it was before the
merge), so the diagnosis emitted again is the first one. On the in-memory
store and the embedded SQLite store: the filter sits in recall, over every
backend's read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_engine import alert as engine_alert
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.events import parse_event, session_id_for
from vdoctor.knowledge import KnowledgePack, load_pack
from vdoctor.memory.explain import Outcome, explain_recall
from vdoctor.memory.recall import OWN_HISTORY_LIMIT, SessionRecall, own_history
from vdoctor.memory.session import DedupState, StoredDedup, StoredSession
from vdoctor.models.offline import OfflineModel
from vdoctor.records import Diagnosis, MemoryRecord, MemoryRef, Phase
from vdoctor.stores import MemoryStore
from vdoctor.stores.audit import StoreAudit
from vdoctor.stores.memory import InMemoryStore
from vdoctor.stores.sqlite import SqliteStore

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"
T0 = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
SID_1 = session_id_for(VIN, T0)
# Timings of a run differ between two runs of it; nothing else may.
TIMINGS = {"latency_ms", "model_latency_ms"}


@pytest.fixture(scope="module")
def pack() -> KnowledgePack:
    return load_pack()


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    made: MemoryStore = InMemoryStore() if request.param == "memory" else SqliteStore(str(tmp_path / "m.db"))
    yield made
    made.close()


def run(
    store: MemoryStore, pack: KnowledgePack, payload: dict[str, Any], state: tuple[str | None, str] | None = None
) -> tuple[Diagnosis, tuple[str | None, str]]:
    """One event's run by a fresh engine (a job started or restored), from ``state``; the diagnosis and new state."""
    engine = DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=pack)
    session_json, dedup_json = state or (None, DedupState().model_dump_json())
    raw = json.dumps(payload, ensure_ascii=False)
    session = StoredSession(session_json) if session_json else None
    result = engine.on_event(session, StoredDedup(dedup_json), parse_event(raw), raw)
    assert result.dead_letters == [] and not result.duplicate
    [diagnosis] = result.diagnoses
    after = (result.session.model_dump_json() if result.session else None, result.dedup.model_dump_json())
    return diagnosis, after


def alert(event_id: str, at: datetime) -> dict[str, Any]:
    """187 mV confirms P0A7F (rule: 100 mV): the offline agent concludes the session on this very alert."""
    return engine_alert(event_id, at, signals={"cell_voltage_diff_mv": 187})


def test_the_opening_alert_run_again_recalls_what_its_first_run_did(store: MemoryStore, pack: KnowledgePack) -> None:
    # An earlier case of the vehicle, 40 days before: more than the 30-day merge window, its own record.
    early_at = T0 - timedelta(days=40)
    early, checkpoint = run(store, pack, alert("e-0", early_at))
    assert early.phase is Phase.CONCLUDED
    # The checkpoint is taken here; e-1 then opens a session and concludes it, its case is written, the job stops.
    first, _ = run(store, pack, alert("e-1", T0), checkpoint)
    assert first.phase is Phase.CONCLUDED and first.session_id == SID_1 and first.flags == []
    assert first.memory.own == [MemoryRef(vin=VIN, session_id=session_id_for(VIN, early_at))]
    assert store.count() == 2
    # Restored from the checkpoint, the job runs e-1 again: the session's own case is not its history.
    again, _ = run(store, pack, alert("e-1", T0), checkpoint)
    assert again.model_dump(exclude=TIMINGS) == first.model_dump(exclude=TIMINGS)
    assert store.count() == 2


def test_the_opening_alert_run_again_recalls_a_case_it_merged_into_as_it_was(
    store: MemoryStore, pack: KnowledgePack
) -> None:
    # An earlier case 5 days before, verified: e-1's case has the same cause within 30 days and merges into it.
    early_at = T0 - timedelta(days=5)
    early_sid = session_id_for(VIN, early_at)
    _, checkpoint = run(store, pack, alert("e-0", early_at))
    assert store.set_recheck(VIN, early_sid, True, early_at + timedelta(days=1))
    first, _ = run(store, pack, alert("e-1", T0), checkpoint)
    assert first.flags == ["l3_merged"]
    # The verified case lifts the offline agent's confidence by 0.1 (0.8 -> 0.9).
    assert first.memory.own == [MemoryRef(vin=VIN, session_id=early_sid)]
    assert first.confidence == pytest.approx(0.9)
    merged = store.get(VIN, early_sid)
    assert merged is not None and merged.merged_sessions == [SID_1] and merged.recheck_ok is None
    # Run again: the earlier case as e-1's first run found it (verified), not as e-1's merge left it.
    again, _ = run(store, pack, alert("e-1", T0), checkpoint)
    assert again.model_dump(exclude=TIMINGS) == first.model_dump(exclude=TIMINGS)
    if isinstance(store, StoreAudit):  # the recall explainer shows the same version recall took
        recall = SessionRecall(store, HashingEmbedder(), pack)
        explained = explain_recall(recall, store, VIN, "EV-A", "电池包单体压差过大", ["P0A7F"], T0)
        [entry] = [e for e in explained.own if e.record.session_id == early_sid]
        assert entry.outcome is Outcome.CHOSEN
        assert entry.record.merged_sessions == [] and entry.record.recheck_ok is True


def record(session_id: str, concluded_at: datetime) -> MemoryRecord:
    return MemoryRecord(
        vin=VIN,
        session_id=session_id,
        series="EV-A",
        concluded_at=concluded_at,
        summary=f"case {session_id}",
        summary_vec=[1.0, 0.0],
        root_cause=f"cause of {session_id}",
        fix_action="fix",
        priority="P2",
        prompt_version="v1",
        updated_at=concluded_at,
    )


def test_own_history_leaves_out_the_opening_session_and_still_gives_the_limit(store: MemoryStore) -> None:
    earlier = [record(f"{VIN}-early-{i:02d}", T0 - timedelta(days=i + 1)) for i in range(OWN_HISTORY_LIMIT + 2)]
    store.upsert_many([*earlier, record(SID_1, T0)])
    got = own_history(store, VIN, T0)
    # The newest ten but the opening session's own case (the newest of all).
    assert [r.session_id for r in got] == [r.session_id for r in earlier[:OWN_HISTORY_LIMIT]]
    # A session opening a second later has it in its history.
    later = own_history(store, VIN, T0 + timedelta(seconds=1))
    assert [r.session_id for r in later] == [SID_1, *(r.session_id for r in earlier[: OWN_HISTORY_LIMIT - 1])]


def test_the_explanation_names_the_opening_sessions_own_case(store: MemoryStore) -> None:
    assert isinstance(store, StoreAudit)  # both stores here have the read-only views an explanation reads
    earlier = record(f"{VIN}-early", T0 - timedelta(days=3))
    store.upsert_many([earlier, record(SID_1, T0)])
    recall = SessionRecall(store, HashingEmbedder(), load_pack())
    explained = explain_recall(recall, store, VIN, "EV-A", "电池包单体压差过大", ["P0A7F"], T0)
    fate = {e.record.session_id: e.outcome for e in explained.own}
    assert fate == {SID_1: Outcome.OPENING_SESSION, earlier.session_id: Outcome.CHOSEN}
