"""The model gate: a subtask's model calls never exceed its slots, whichever model makes them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from pydantic import SecretStr

from vdoctor import assembly
from vdoctor.errors import ConfigError, ModelError
from vdoctor.models.base import ChatResponse, Message, ToolSpec
from vdoctor.models.gate import GatedChatModel, ModelGate, continues_a_run
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
    with pytest.raises(ConfigError, match="VDOCTOR_EXTRA_RUNS"):
        load_settings({"VDOCTOR_EXTRA_RUNS": "-1"})


def test_the_summary_model_takes_the_slots_of_the_gate_it_is_given() -> None:
    settings = load_settings(
        {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}, summarizer="openai", openai_api_key=SecretStr("sk-gate-test")
    )
    gate = ModelGate(5)
    summarizer = assembly.summarizer(settings, gate=gate)
    model = summarizer.model  # type: ignore[attr-defined]
    assert isinstance(model, GatedChatModel) and model.gate is gate
    assert model.continuing  # a run summarises after its ReAct calls
    ungated = assembly.summarizer(settings).model  # type: ignore[attr-defined]
    assert not isinstance(ungated, GatedChatModel)
    model.close()
    ungated.close()


def test_the_engine_calls_its_model_through_a_gate_of_concurrency_slots() -> None:
    settings = load_settings({}, memory_url="memory://", knowledge_url="memory://", embedder="hashing", concurrency=5)
    engine = assembly.build_engine(settings)
    try:
        assert isinstance(engine.model, GatedChatModel) and engine.model.gate.slots == 5
        assert not engine.model.continuing  # its calls continue a run by their messages
    finally:
        engine.close()


def _in_line(gate: ModelGate, call: Callable[[], object], name: str) -> threading.Thread:
    """``call`` on a thread of its own, returned once it waits at ``gate``."""
    waiting = gate.waiting
    caller = threading.Thread(target=call, name=name, daemon=True)
    caller.start()
    deadline = time.monotonic() + 5
    while gate.waiting == waiting and time.monotonic() < deadline:
        time.sleep(0.001)
    assert gate.waiting == waiting + 1, f"{name} never queued"
    return caller


def _queue(gate: ModelGate, name: str, order: list[str], continuing: bool = False) -> threading.Thread:
    """A caller in line at ``gate`` that notes its turn and leaves."""

    def call() -> None:
        gate.acquire(continuing=continuing)
        order.append(name)
        gate.release()

    return _in_line(gate, call, name)


def test_waiting_calls_get_slots_in_order_a_runs_later_calls_first() -> None:
    gate = ModelGate(1)
    gate.acquire()
    order: list[str] = []
    callers = [
        _queue(gate, "open-1", order),
        _queue(gate, "open-2", order),
        _queue(gate, "continue-1", order, continuing=True),
        _queue(gate, "open-3", order),
        _queue(gate, "continue-2", order, continuing=True),
    ]
    gate.release()
    for caller in callers:
        caller.join(timeout=5)
    assert order == ["continue-1", "continue-2", "open-1", "open-2", "open-3"]
    assert gate.waiting == 0


def test_a_freed_slot_goes_to_the_caller_waiting_for_it_not_to_the_next_to_ask() -> None:
    # A semaphore lets the releasing thread take the slot straight back before the waiter it woke runs.
    gate = ModelGate(1)
    gate.acquire()
    order: list[str] = []
    waiter = _queue(gate, "waiter", order)
    gate.release()
    gate.acquire()
    order.append("asked after")
    gate.release()
    waiter.join(timeout=5)
    assert order == ["waiter", "asked after"]


def test_a_call_continues_a_run_once_the_model_has_answered_in_it() -> None:
    opening = [Message(role="system", content="rules"), Message(role="user", content="P0A80")]
    assert not continues_a_run(opening)
    assert continues_a_run([*opening, Message(role="assistant", content="look it up"), Message(role="tool")])


class _Interrupted(Exception):
    pass


def test_an_interrupted_wait_leaves_the_line_or_passes_on_a_slot_handed_over() -> None:
    class InterruptedLock:
        """Taken at once by the gate; the caller's wait on it is interrupted (after ``meanwhile``)."""

        def __init__(self, meanwhile: Callable[[], None]) -> None:
            self.meanwhile = meanwhile
            self.taken = False

        def acquire(self) -> bool:
            if not self.taken:
                self.taken = True
                return True
            self.meanwhile()
            raise _Interrupted

        def release(self) -> None:
            self.taken = False

    # Interrupted in line: it leaves, and the slot freed later is free again.
    gate = ModelGate(1)
    gate.acquire()
    gate._waiter = lambda: InterruptedLock(lambda: None)  # type: ignore[method-assign]
    with pytest.raises(_Interrupted):
        gate.acquire(continuing=True)
    assert gate.waiting == 0
    gate.release()
    # Interrupted just as the slot was handed to it: the slot goes on to the next caller, here none (free).
    gate._waiter = lambda: InterruptedLock(gate.release)  # type: ignore[method-assign]
    gate.acquire()
    with pytest.raises(_Interrupted):
        gate.acquire()
    assert gate.waiting == 0
    del gate._waiter
    taker = threading.Thread(target=gate.acquire, daemon=True)  # waits for ever had the handed-over slot been lost
    taker.start()
    taker.join(timeout=5)
    assert not taker.is_alive()
    gate.release()


def test_a_summary_models_calls_wait_as_a_runs_later_calls_do() -> None:
    class Named:
        def __init__(self, name: str, order: list[str]) -> None:
            self.name, self.order = name, order

        def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
            self.order.append(self.name)
            return ChatResponse(content="ok")

        def close(self) -> None:
            pass

    gate = ModelGate(1)
    order: list[str] = []
    react = GatedChatModel(Named("react, first call", order), gate)
    summary = GatedChatModel(Named("summary", order), gate, continuing=True)
    gate.acquire()
    # The summary's call asks second, with no answer of the model in it.
    callers = [_in_line(gate, lambda m=model: m.chat(MESSAGES, []), model.name) for model in (react, summary)]
    gate.release()
    for caller in callers:
        caller.join(timeout=5)
    assert order == ["summary", "react, first call"]
