"""The ReAct loop: the model reasons, calls tools, reads results, and answers.

The loop is capped: a model that keeps calling tools is stopped and the
session stays INVESTIGATING with a flag, rather than spending without bound.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from vdoctor.agent.tools import Toolbox
from vdoctor.agent.window import ContextWindow
from vdoctor.errors import ModelError
from vdoctor.events import MAX_DTC_CODES
from vdoctor.memory.working import clip_text
from vdoctor.models.base import MAX_CALL_ID_CHARS, ChatModel, Message, ToolCall
from vdoctor.records import Phase, Priority

# Lookup, signal history, a knowledge search and a retry fit well within 6
# model turns; more means the model is going round in circles.
MAX_ITERATIONS = 6
# Output flag of a run whose model call failed for good.
MODEL_FAILED = "model_failed"
# The most characters an answer's root cause or fix, or one of its excluded or voided hypotheses, keeps; the
# most hypotheses of each list, and codes (as many as an alert carries). A cause and its fix are a few
# sentences. A runaway generation wrote pages, and the diagnosis carrying them could pass what the outputs'
# topic takes (a record over the producer's 1 MB fails the sink, and the job at every restart, as a dead
# letter did), while L1 and the case summary kept re-reading them. Cut, never inside a number
# (``working.clip_text``), and flagged ``answer_clipped``.
MAX_ANSWER_TEXT_CHARS = 1_000
MAX_ANSWER_HYPOTHESES = 32
ANSWER_CLIPPED = "answer_clipped"
# The most characters of one tool call (its id, name and arguments as JSON), and the most calls of one model
# step. The tools read at most a few codes, a signal's name and a query of 500 characters; a model's call
# goes back to it whole in the transcript of its next call (the results answer it), so one runaway call
# (a query of 240 KB) made that call ~200,000 tokens, which no model takes: the rest of the run failed. A
# call over the bound is not run: it is echoed without its arguments, and its result says why; calls past
# the most a step may have are left out of the transcript (each call echoed needs its result). Flagged
# ``model_step_clipped``, as a model's text clipped beside its calls is.
MAX_TOOL_CALL_CHARS = 2_000
MAX_TOOL_CALLS_PER_STEP = 16
CALL_NOT_RUN = "not run: the call's id, name and arguments take {} characters, over the {} a call may have"
_JSON_OBJECT_RE = re.compile(r"\{.*\}", re.DOTALL)


class FinalAnswer(BaseModel):
    phase: Phase
    root_cause: str | None = None
    fix_action: str | None = None
    priority: Priority | None = None
    confidence: float = 0.0
    # Mutable defaults by factory: a literal [] is deep-copied on every validation.
    codes: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    excluded: list[str] = Field(default_factory=list)
    # Earlier conclusions the model now overturns: kept in key facts as void.
    voided: list[str] = Field(default_factory=list)

    def json_dict(self) -> dict[str, Any]:
        """``model_dump(mode="json")`` written out (the phase as its value, lists copied).

        Once per alert, for the key-fact reader: pydantic's dump took ~10 us there, this ~2.
        """
        return {
            "phase": self.phase.value,
            "root_cause": self.root_cause,
            "fix_action": self.fix_action,
            "priority": self.priority,
            "confidence": self.confidence,
            "codes": list(self.codes),
            "evidence": list(self.evidence),
            "excluded": list(self.excluded),
            "voided": list(self.voided),
        }


@dataclass
class AgentRun:
    answer: FinalAnswer
    transcript: list[Message]
    llm_calls: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    tools_used: list[str] = field(default_factory=list)
    # Each tool result as the tool gave it (the transcript's may be clipped to fit the window): key facts
    # are read from these.
    tool_results: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    error: str | None = None
    # Tool calls not run, or left out, for their size or number (``MAX_TOOL_CALL_CHARS``, ``..._PER_STEP``).
    clipped_calls: int = 0


def clamp_confidence(value: float) -> float:
    """A model's confidence as a diagnosis holds it: within [0, 1]; a NaN (``json`` reads one) is none, 0."""
    if value != value:
        return 0.0
    return min(1.0, max(0.0, value))


def _answer_in(content: str) -> FinalAnswer | None:
    """The answer object in a reply: the span from its first "{" to its last "}", as most replies are (the
    object alone, or fenced in prose); else the first object that is an answer, read from each of the first
    ``_ANSWER_STARTS`` "{" on. A reasoning model served without its parser writes its thinking first (a
    ``<think>`` block quoting a tool result's braces, or a draft answer: left out), and a note with braces may
    follow the answer: the span then held more than the object, and a valid answer was
    ``unparseable_answer`` (found by an audit)."""
    if "<think>" in content:  # a reasoning model's thinking, which may quote braces and draft answers
        content = _THINK_RE.sub("", content)
    match = _JSON_OBJECT_RE.search(content)
    if not match:
        return None
    try:
        return FinalAnswer.model_validate(json.loads(match.group(0)))
    except (ValueError, ValidationError, RecursionError):  # RecursionError: JSON nested deeper than json reads
        pass
    start = -1
    for _ in range(_ANSWER_STARTS):
        start = content.find("{", start + 1)
        if start < 0:
            break
        try:
            value, _end = _DECODER.raw_decode(content, start)
            if isinstance(value, dict) and "phase" in value:
                return FinalAnswer.model_validate(value)
        except (ValueError, ValidationError, RecursionError):
            continue
    return None


# How many "{" of a reply are tried as an answer's start, after the whole span (``_answer_in``).
_ANSWER_STARTS = 64
_THINK_RE = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)
_DECODER = json.JSONDecoder()


def parse_answer(content: str) -> FinalAnswer | None:
    """The model's final answer, or None when it is not one (the run is then flagged ``unparseable_answer``).

    Whatever the reply holds, the answer returned fits a ``Diagnosis``: wrong types and values outside
    the contract (a priority other than P1-P3, evidence that is not a list of strings) make it None, and
    the confidence is clamped to [0, 1] on every path (a model may answer 85 for 0.85).
    """
    answer = _answer_in(content)
    if answer is None:
        return None
    # The answer was just validated and is this call's own: it is corrected in place.
    if answer.phase is Phase.CONCLUDED and not (answer.root_cause and answer.fix_action and answer.priority):
        # A conclusion without a cause, a fix and a priority is only a guess.
        answer.phase = Phase.INVESTIGATING
    answer.confidence = clamp_confidence(answer.confidence)
    return answer


def clip_answer(answer: FinalAnswer) -> bool:
    """Bound the answer's texts in place (``MAX_ANSWER_TEXT_CHARS``, ``MAX_ANSWER_HYPOTHESES``); whether any was."""
    clipped = False
    for name in ("root_cause", "fix_action"):
        text = getattr(answer, name)
        if text is not None and len(text) > MAX_ANSWER_TEXT_CHARS:
            setattr(answer, name, clip_text(text, MAX_ANSWER_TEXT_CHARS))
            clipped = True
    bounds = (("excluded", MAX_ANSWER_HYPOTHESES), ("voided", MAX_ANSWER_HYPOTHESES), ("codes", MAX_DTC_CODES))
    for name, most in bounds:
        items: list[str] = getattr(answer, name)
        kept = [clip_text(item, MAX_ANSWER_TEXT_CHARS) for item in items[:most]]
        if kept != items:
            setattr(answer, name, kept)
            clipped = True
    return clipped


def _not_run(call: ToolCall, step: int, index: int) -> ToolCall:
    """A call over ``MAX_TOOL_CALL_CHARS`` as the transcript echoes it: without its arguments, its name and id
    cut (an id too long for that is named by its step and its place in it, as ``unique_call_ids`` names a
    call without one, so that its result still answers it and no other call of the run has it: by its place
    alone, two steps' calls shared one)."""
    call_id = call.id if len(call.id) <= MAX_CALL_ID_CHARS else f"call{(step + 1) * 1000 + index:05d}"
    return replace(call, id=call_id, name=call.name[:64], arguments={})


def run_react(
    model: ChatModel,
    toolbox: Toolbox,
    messages: list[Message],
    max_iterations: int = MAX_ITERATIONS,
    window: ContextWindow | None = None,
) -> AgentRun:
    """The ReAct loop of one alert. ``window`` (``build_window``'s) keeps each call after the first within
    the working budget: the steps so far counted, a long tool result clipped, the working context fitted again."""
    transcript = list(messages)
    run = AgentRun(answer=FinalAnswer(phase=Phase.INVESTIGATING), transcript=transcript)
    for step in range(max_iterations):
        if window is not None:
            window.before_call(transcript)
        try:
            response = model.chat(transcript, toolbox.specs)
        except ModelError as e:
            # The model is down or refused (after its retries): the session stays
            # INVESTIGATING and the output says why; the next alert tries again.
            run.llm_calls += 1
            run.flags.append(MODEL_FAILED)
            run.error = str(e)
            return run
        run.llm_calls += 1
        run.prompt_tokens += response.prompt_tokens
        run.completion_tokens += response.completion_tokens
        run.latency_ms += response.latency_ms
        if response.tool_calls:
            calls = response.tool_calls[:MAX_TOOL_CALLS_PER_STEP]
            run.clipped_calls += len(response.tool_calls) - len(calls)
            texts = [call.arguments_json for call in calls]
            sizes = [len(call.id) + len(call.name) + len(text) for call, text in zip(calls, texts, strict=True)]
            if max(sizes) > MAX_TOOL_CALL_CHARS:
                calls = tuple(
                    _not_run(call, step, i) if size > MAX_TOOL_CALL_CHARS else call
                    for i, (call, size) in enumerate(zip(calls, sizes, strict=True))
                )
            transcript.append(Message(role="assistant", content=response.content or "", tool_calls=calls))
            for call, text, size in zip(calls, texts, sizes, strict=True):
                run.tool_calls += 1
                if size > MAX_TOOL_CALL_CHARS:
                    run.clipped_calls += 1
                    run.tools_used.append(f"{call.name}(not run: {size} characters)")
                    result = json.dumps({"error": CALL_NOT_RUN.format(size, MAX_TOOL_CALL_CHARS)})
                else:
                    run.tools_used.append(f"{call.name}({text})")
                    result = toolbox.call(call.name, call.arguments)
                run.tool_results.append(result)
                transcript.append(Message(role="tool", content=result, tool_call_id=call.id))
            continue
        transcript.append(Message(role="assistant", content=response.content or ""))
        answer = parse_answer(response.content or "")
        if answer is None:
            run.flags.append("unparseable_answer")
        else:
            if clip_answer(answer):
                run.flags.append(ANSWER_CLIPPED)
            run.answer = answer
        return run
    run.flags.append("iteration_cap")
    return run
