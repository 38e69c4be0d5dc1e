"""At most ``--concurrency`` model calls in flight per subtask, however many runs are.

A diagnosis run holds the model for most of its time, but not all of it: it
recalls long-term memory before its first call, and a concluding run
summarises, embeds and writes its case after its last one. If a run held its
slot through that memory work, the model endpoint would see fewer calls in
flight than ``--concurrency`` says (on the concurrency bench at 64 @ 200 ms,
a concluding run spent ~50 ms of its ~470 ms outside the model).

So the operator runs a few more runs than ``--concurrency``
(``RuntimeSettings.extra_runs``), and every model call of a subtask, the
ReAct model's and a summary model's alike, first takes a slot of one
``ModelGate`` of ``--concurrency`` slots. While some runs do their memory
work, the others keep every slot busy; the endpoint never sees more than
``--concurrency`` calls from one subtask. Waiting calls get a slot in
order, a run's later calls before other runs' first ones (``ModelGate``).
A call keeps its slot through its own retries (their backoff included): a
rate-limited endpoint gets fewer calls, not more.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from vdoctor.models.base import ChatModel, ChatResponse, Message, ToolSpec


class ModelGate:
    """``slots`` model calls at a time. Callers beyond them wait, and a slot that frees is handed straight
    to one of them: first to a call that continues a run (``acquire(continuing=True)``), else to one that
    opens a run, each kind first come first served.

    Handing over, rather than freeing the slot for whoever asks next, is what
    keeps the order: with a semaphore, a caller that arrives just as a slot
    frees takes it before the one it woke, and that one waits again at the
    back of the line. With a quarter more runs than slots, a few runs waited
    seconds at the gate while later ones passed, and the job's last vehicles
    finished late.

    Continuing calls go first because their run is part done: it holds a
    worker, its vehicle's later alerts queue behind it, and its memory is
    loaded. Finishing it frees all three; a run that has not called the model
    yet loses nothing by waiting. No opening call waits for ever: a run makes
    a bounded number of calls and the runs in flight are bounded, so the
    continuing calls ahead of it run out.

    On ``bench/concurrency.py`` at 256 @ 1 s (320 runs for 256 slots) the
    ratio to the bound went from 0.88 (semaphore) to 0.92 (one line) to 0.94
    (continuing calls first): README, *Hosted models and concurrency*, *The
    gate's order*.
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"a model gate needs at least 1 slot, got {slots}")
        self.slots = slots
        self._lock = threading.Lock()
        self._free = slots
        # One held lock per waiting caller, oldest first; the caller blocks on it until a slot is handed over.
        self._continuing: deque[Any] = deque()
        self._opening: deque[Any] = deque()

    def acquire(self, continuing: bool = False) -> None:
        """Take a slot, waiting for one if none is free."""
        with self._lock:
            if self._free > 0:  # nobody waits while a slot is free: a slot that frees goes to a waiter first
                self._free -= 1
                return
            waiter = self._waiter()
            waiter.acquire()
            (self._continuing if continuing else self._opening).append(waiter)
        try:
            waiter.acquire()
        except BaseException:  # interrupted while waiting: leave the line, or pass on a slot just handed over
            with self._lock:
                line = self._continuing if continuing else self._opening
                if waiter in line:
                    line.remove(waiter)
                else:
                    self._hand_over()
            raise

    @staticmethod
    def _waiter() -> Any:
        """A lock the waiting caller blocks on (a test's may raise, as an interrupted wait would)."""
        return threading.Lock()

    def release(self) -> None:
        """Give the slot back: to the caller that has waited longest (continuing calls first), else free."""
        with self._lock:
            self._hand_over()

    def _hand_over(self) -> None:
        """Under the lock."""
        if self._continuing:
            self._continuing.popleft().release()
        elif self._opening:
            self._opening.popleft().release()
        else:
            self._free += 1

    @property
    def waiting(self) -> int:
        """Callers waiting for a slot."""
        with self._lock:
            return len(self._continuing) + len(self._opening)

    def __enter__(self) -> ModelGate:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def continues_a_run(messages: list[Message]) -> bool:
    """Whether a call continues a conversation the model has answered in before (a ReAct run's later steps)."""
    return any(m.role == "assistant" for m in messages)


class GatedChatModel:
    """A chat model whose every call holds a slot of ``gate`` (shared with the subtask's other models).

    ``continuing``: every call of this model continues a run (a summary model's: a run summarises after its
    ReAct calls); by default a call continues one when the model has answered in its conversation before.
    """

    def __init__(self, inner: ChatModel, gate: ModelGate, continuing: bool = False) -> None:
        self.inner = inner
        self.gate = gate
        self.name = inner.name
        self.continuing = continuing

    def __repr__(self) -> str:
        return f"GatedChatModel({self.inner!r}, slots={self.gate.slots})"

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        self.gate.acquire(continuing=self.continuing or continues_a_run(messages))
        try:
            return self.inner.chat(messages, tools)
        finally:
            self.gate.release()

    def close(self) -> None:
        self.inner.close()
