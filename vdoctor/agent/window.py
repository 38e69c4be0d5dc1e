"""The L1 window of one alert's model calls: its working context and its ReAct steps, within one budget.

The first call of an alert carries the working context (``WorkingMemory.fit``)
in the whole budget. Each later call carries the alert's steps as well: the
model's tool calls and the tools' results. Before such a call the new steps
are counted, and:

- a tool result that would take the steps past ``STEPS_SHARE`` of the budget
  is clipped (its start, and a marker with how many characters were clipped;
  a marker alone when no room is left), so the working context always keeps
  the other part; so is the text a model writes beside its tool calls (its
  reasoning), while the calls themselves are sent whole: they are what the
  results answer;
- when the working context and the steps together are over the budget, the
  working context is fitted again into what the steps leave: its parts give
  way in ``fit``'s order, and key facts never do (``over_budget_tokens``
  then says by how much, and the engine flags the diagnosis).

Each message counts ``MESSAGE_TOKENS`` beside its text: what the chat API adds
for its role and markers. The system message (instructions and the injected
long-term memory, itself within its own 800-token budget) is outside this
window, as before.
"""

from __future__ import annotations

from collections.abc import Callable

from vdoctor.memory.working import WorkingMemory, clip_to_tokens
from vdoctor.models.base import Message

# The most of the working budget an alert's ReAct steps take (the working context keeps the rest).
STEPS_SHARE = 0.5
# What a chat API adds to each message beside its text (its role and the markers around it): OpenAI's
# chat models take 3 tokens a message; counted in the window as 4, for the user message and every step.
MESSAGE_TOKENS = 4
# What stands for a tool result when the steps leave no room for any of it.
RESULT_LEFT_OUT = "[the tool's result, {} characters, left out to fit the working context]"
TOOL_RESULT_CLIPPED = "tool_result_clipped"
MODEL_STEP_CLIPPED = "model_step_clipped"


class ContextWindow:
    """One alert's window: ``context(reserve)`` is its working context fitted with ``reserve`` tokens left
    for the steps; ``first()`` is the first call's user message and ``before_call`` keeps a transcript
    (system message, user message, then the steps) within the budget before each later call."""

    def __init__(self, working: WorkingMemory, context: Callable[[int], str]) -> None:
        self.working = working
        self._context = context
        self.steps_cap = int(working.budget_tokens * STEPS_SHARE)
        self.steps_tokens = 0
        self.clipped_results = 0
        self.clipped_steps = 0
        self._counted = 2  # the transcript's messages counted so far (system and user are not steps)
        self._user: tuple[str, int | None] = ("", None)  # the user message last looked at, and its tokens

    def first(self) -> str:
        return self._context(MESSAGE_TOKENS)

    def before_call(self, transcript: list[Message]) -> None:
        count = self.working.counter.count
        for i in range(self._counted, len(transcript)):
            message = transcript[i]
            if message.role == "tool":
                text = message.content
                room = self.steps_cap - self.steps_tokens - MESSAGE_TOKENS
                if count(text) > room:
                    text = clip_to_tokens(text, room, self.working.counter)
                    if not text and count(left_out := RESULT_LEFT_OUT.format(len(message.content))) <= room:
                        text = left_out
                    transcript[i] = Message(role="tool", content=text, tool_call_id=message.tool_call_id)
                    self.clipped_results += 1
                self.steps_tokens += MESSAGE_TOKENS + count(text)
            else:
                calls = "".join(call.name + call.arguments_json for call in message.tool_calls)
                text = message.content
                if text:
                    room = self.steps_cap - self.steps_tokens - MESSAGE_TOKENS - count(calls)
                    if count(text) > room:
                        text = clip_to_tokens(text, max(room, 0), self.working.counter)
                        transcript[i] = Message(role=message.role, content=text, tool_calls=message.tool_calls)
                        self.clipped_steps += 1
                self.steps_tokens += MESSAGE_TOKENS + (count(text + calls) if text or calls else 0)
        self._counted = len(transcript)
        if not self.steps_tokens:
            return
        user, tokens = self._user
        if tokens is None or transcript[1].content is not user:  # counted once, not at every call
            tokens = count(transcript[1].content)
            self._user = (transcript[1].content, tokens)
        if MESSAGE_TOKENS + tokens + self.steps_tokens > self.working.budget_tokens:
            transcript[1] = Message(role="user", content=self._context(MESSAGE_TOKENS + self.steps_tokens))
