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
``--concurrency`` calls from one subtask. A call keeps its slot through its
own retries (their backoff included): a rate-limited endpoint gets fewer
calls, not more.
"""

from __future__ import annotations

import threading

from vdoctor.models.base import ChatModel, ChatResponse, Message, ToolSpec


class ModelGate:
    """``slots`` model calls at a time; callers beyond them wait until a call ends."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"a model gate needs at least 1 slot, got {slots}")
        self.slots = slots
        self._free = threading.BoundedSemaphore(slots)

    def __enter__(self) -> ModelGate:
        self._free.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._free.release()


class GatedChatModel:
    """A chat model whose every call holds a slot of ``gate`` (shared with the subtask's other models)."""

    def __init__(self, inner: ChatModel, gate: ModelGate) -> None:
        self.inner = inner
        self.gate = gate
        self.name = inner.name

    def __repr__(self) -> str:
        return f"GatedChatModel({self.inner!r}, slots={self.gate.slots})"

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        with self.gate:
            return self.inner.chat(messages, tools)

    def close(self) -> None:
        self.inner.close()
