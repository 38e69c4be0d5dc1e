"""The model gate: a subtask's model calls never exceed its slots, whichever model makes them."""

from __future__ import annotations

import threading
import time

import pytest
from pydantic import SecretStr

from vdoctor import assembly
from vdoctor.errors import ConfigError, ModelError
from vdoctor.models.base import ChatResponse, Message, ToolSpec
from vdoctor.models.gate import GatedChatModel, ModelGate
from vdoctor.settings import RuntimeSettings, load_settings

pytestmark = pytest.mark.unit

MESSAGES = [Message(role="user", content="P0A80")]


class SlowModel:
    """Holds each call ``hold_s`` and records how many calls were inside it at once."""

    def __init__(self, hold_s: float = 0.02, fail: bool = False) -> None:
        self.name = "slow"
        self.hold_s = hold_s
        self.fail = fail
        self.inside = 0
        self.most = 0
        self.calls = 0
        self.closed = False
        self._lock = threading.Lock()

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        with self._lock:
            self.inside += 1
            self.calls += 1
            self.most = max(self.most, self.inside)
        time.sleep(self.hold_s)
        with self._lock:
            self.inside -= 1
        if self.fail:
            raise ModelError("the endpoint is down")
        return ChatResponse(content="ok")

    def close(self) -> None:
        self.closed = True


def _call_from_threads(models: list[GatedChatModel], threads: int) -> list[str]:
    answers: list[str] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        reply = models[i % len(models)].chat(MESSAGES, [])
        with lock:
            answers.append(reply.content or "")

    workers = [threading.Thread(target=call, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=10)
    return answers


def test_calls_beyond_the_slots_wait_and_all_are_answered() -> None:
    inner = SlowModel()
    model = GatedChatModel(inner, ModelGate(4))
    assert _call_from_threads([model], 24) == ["ok"] * 24
    assert inner.most == 4 and inner.calls == 24
    assert model.name == "slow" and "slots=4" in repr(model)


def test_two_models_on_one_gate_share_its_slots() -> None:
    gate = ModelGate(3)
    chat, summary = SlowModel(), SlowModel()
    both = [GatedChatModel(chat, gate), GatedChatModel(summary, gate)]
    inside_both = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal inside_both
        while not stop.is_set():
            inside_both = max(inside_both, chat.inside + summary.inside)
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert len(_call_from_threads(both, 30)) == 30
    finally:
        stop.set()
        watcher.join()
    assert 1 <= inside_both <= 3 and chat.calls == summary.calls == 15


def test_a_failed_call_gives_its_slot_back() -> None:
    failing = GatedChatModel(SlowModel(hold_s=0.0, fail=True), ModelGate(1))
    for _ in range(3):  # with one slot, a slot kept by a failure would hang the second call
        with pytest.raises(ModelError):
            failing.chat(MESSAGES, [])
    failing.close()
    assert failing.inner.closed  # type: ignore[attr-defined]


def test_a_gate_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least 1 slot"):
        ModelGate(0)


def test_runs_in_flight_are_the_slots_plus_a_quarter_unless_set() -> None:
    assert RuntimeSettings().runs_in_flight() == 64 + 16
    assert RuntimeSettings(concurrency=256).runs_in_flight() == 320
    assert RuntimeSettings(concurrency=3).runs_in_flight() == 3  # a quarter of 3 rounds down to none
    assert RuntimeSettings(concurrency=64, extra_runs=0).runs_in_flight() == 64
    assert RuntimeSettings(concurrency=8, extra_runs=40).runs_in_flight() == 48
    assert RuntimeSettings(concurrency=1, extra_runs=5).runs_in_flight() == 1  # inline: one event at a time
    assert load_settings({"VDOCTOR_EXTRA_RUNS": "7"}, concurrency=10).runtime.runs_in_flight() == 17
    with pytest.raises(ConfigError, match="extra_runs"):
        load_settings({"VDOCTOR_EXTRA_RUNS": "-1"})


def test_the_summary_model_takes_the_slots_of_the_gate_it_is_given() -> None:
    settings = load_settings(
        {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}, summarizer="openai", openai_api_key=SecretStr("sk-gate-test")
    )
    gate = ModelGate(5)
    summarizer = assembly.summarizer(settings, gate=gate)
    model = summarizer.model  # type: ignore[attr-defined]
    assert isinstance(model, GatedChatModel) and model.gate is gate
    ungated = assembly.summarizer(settings).model  # type: ignore[attr-defined]
    assert not isinstance(ungated, GatedChatModel)
    model.close()
    ungated.close()


def test_the_engine_calls_its_model_through_a_gate_of_concurrency_slots() -> None:
    settings = load_settings({}, memory_url="memory://", knowledge_url="memory://", embedder="hashing", concurrency=5)
    engine = assembly.build_engine(settings)
    try:
        assert isinstance(engine.model, GatedChatModel) and engine.model.gate.slots == 5
    finally:
        engine.close()
