"""A model that fails for good (after its retries) yields a flagged diagnosis, never a crash."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.errors import ModelError
from vdoctor.events import parse_event
from vdoctor.knowledge import load_pack
from vdoctor.memory.session import DedupState
from vdoctor.models.base import ChatResponse, Message, ToolSpec
from vdoctor.records import Phase
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

VIN = "LSVAU2180N2183294"
LINE = (
    f'{{"type": "alert", "event_id": "e-1", "vin": "{VIN}", "series": "EV-A", "ts": "2026-11-01T08:00:00Z", '
    '"alert_text": "压差过大", "dtc_codes": ["P0A7F"], "signals": {"cell_voltage_diff_mv": 187}}'
)


class DownModel:
    name = "down"

    def __init__(self) -> None:
        self.calls = 0

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        self.calls += 1
        raise ModelError("chat model down: gave up after 4 attempts; last error: HTTP 503")


def test_model_failure_flags_the_diagnosis_and_keeps_the_session_investigating() -> None:
    model = DownModel()
    store = InMemoryStore()
    engine = DiagnosisEngine(store=store, model=model, embedder=HashingEmbedder(), pack=load_pack())
    result = engine.on_event(None, DedupState(), parse_event(LINE), LINE)
    [diagnosis] = result.diagnoses
    assert diagnosis.flags == ["model_failed"]
    assert diagnosis.phase is Phase.INVESTIGATING and diagnosis.root_cause is None
    assert diagnosis.llm_calls == 1 and diagnosis.tool_calls == 0 and model.calls == 1
    assert diagnosis.latency_ms >= 0.0 and result.dead_letters == []
    # The alert still counts in the session, so the next alert can conclude with a working model.
    assert result.session is not None and result.session.alerts == 1
    assert result.session.opened_at == datetime(2026, 11, 1, 8, tzinfo=UTC)
    assert store.count() == 0
