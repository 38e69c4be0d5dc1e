"""The offline model: deterministic, no network, no API key.

It plays the part of a careful diagnostician over the same messages and tools
a hosted model gets, so the whole pipeline (tools, memory, budgets, token
accounting) runs for real in the demo, the tests and the benchmarks:

1. Codes it knows nothing about are looked up (``lookup_dtc``), unless the
   vehicle's own verified history, or a verified case of a similar vehicle,
   already names the fault: memory saves the lookup.
2. For a fault confirmed by a signal it reads that signal's history in the
   session (``signal_history``) and concludes when a reading meets the rule.
   A fault confirmed by repetition concludes when the code has been seen often
   enough in the session.
3. Otherwise it keeps the session INVESTIGATING until more evidence arrives.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from vdoctor.knowledge.pack import ConfirmRule
from vdoctor.lines import Confirmation, RecallEntry, parse_alert_block, parse_codes_seen
from vdoctor.models.base import ChatResponse, Message, ToolCall, ToolSpec
from vdoctor.tokens import DEFAULT_COUNTER, TokenCounter

# Confidence of a conclusion by the kind of evidence, and the lift a verified
# earlier case of the same fault gives it.
CONFIDENCE_SIGNAL = 0.8
CONFIDENCE_REPEAT = 0.7
CONFIDENCE_MEMORY_LIFT = 0.1
CONFIDENCE_MAX = 0.95
CONFIDENCE_SUSPECTED = 0.3
CONFIDENCE_UNKNOWN = 0.1


@dataclass
class _Fault:
    code: str
    root_cause: str
    fix_action: str
    priority: str
    signal: str | None
    op: str
    threshold: float
    repeat: int
    case_uri: str | None = None


def _parse_memory(system: str) -> dict[str, _Fault]:
    """Verified faults named by the memory block, by code (own history before similar)."""
    faults: dict[str, _Fault] = {}
    for entry in RecallEntry.parse_block(system):
        # Only verified conclusions; a milestone (never verified) concluded nothing.
        if entry.recheck_ok is not True or entry.milestone or entry.priority is None:
            continue
        confirmed = Confirmation.find(entry.summary)
        if confirmed is None or not entry.cause or not entry.fix:
            continue
        for code in entry.codes:
            faults.setdefault(
                code,
                _Fault(
                    code=code,
                    root_cause=entry.cause,
                    fix_action=entry.fix,
                    priority=entry.priority,
                    signal=confirmed.signal,
                    op=confirmed.op,
                    threshold=float(confirmed.threshold) if confirmed.signal else 0.0,
                    repeat=confirmed.repeat,
                    case_uri=entry.case_uri,
                ),
            )
    return faults


def _fault_from_lookup(item: dict[str, Any]) -> _Fault | None:
    rule = ConfirmRule.parse(str(item.get("confirm", "")))
    if not item.get("root_cause") or rule is None:
        return None
    return _Fault(
        code=str(item["code"]),
        root_cause=str(item["root_cause"]),
        fix_action=str(item["fix_action"]),
        priority=str(item["priority"]),
        signal=rule.signal,
        op=rule.op,
        threshold=rule.threshold,
        repeat=rule.repeat,
    )


def _parse_user(text: str) -> tuple[dict[str, Any], dict[str, int]]:
    return parse_alert_block(text), parse_codes_seen(text)


class OfflineModel:
    """A deterministic rule-following model that speaks the ChatModel protocol."""

    name = "offline-rules-v1"

    def __init__(self, counter: TokenCounter = DEFAULT_COUNTER) -> None:
        self.counter = counter
        self._calls = 0

    def close(self) -> None:
        """Nothing to release: no connections."""

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        prompt_tokens = sum(self.counter.count(m.content) for m in messages) + sum(
            self.counter.count(json.dumps(t.parameters)) + self.counter.count(t.description) for t in tools
        )
        content, calls = self._decide(messages, tools)
        out_text = content or json.dumps([c.arguments for c in calls])
        return ChatResponse(
            content=content,
            tool_calls=tuple(calls),
            prompt_tokens=prompt_tokens,
            completion_tokens=self.counter.count(out_text) + 4 * len(calls),
        )

    def _decide(self, messages: list[Message], tools: list[ToolSpec]) -> tuple[str | None, list[ToolCall]]:
        system = next((m.content for m in messages if m.role == "system"), "")
        last_user = max(i for i, m in enumerate(messages) if m.role == "user")
        alert, seen = _parse_user(messages[last_user].content)
        codes = list(dict.fromkeys([*alert.get("dtc_codes", []), *seen]))
        remembered = _parse_memory(system)

        looked_up: dict[str, _Fault | None] = {}
        histories: dict[str, list[dict[str, Any]]] = {}
        searched = False
        asked: dict[str, ToolCall] = {}  # this alert's tool calls, by id
        for m in messages[last_user + 1 :]:
            asked.update((c.id, c) for c in m.tool_calls)
            if m.role != "tool":
                continue
            try:
                result = json.loads(m.content)
            except ValueError:  # a result clipped to fit the working context: taken as telling nothing
                result = _nothing_found(asked.get(m.tool_call_id or ""))
            for item in result.get("codes", []):
                looked_up[str(item["code"])] = _fault_from_lookup(item)
            for code in result.get("unknown", []):
                looked_up[str(code)] = None
            if "signal" in result and "readings" in result:
                histories[str(result["signal"])] = list(result["readings"])
            if "hits" in result:
                searched = True

        to_lookup = [c for c in codes if c not in remembered and c not in looked_up]
        if to_lookup:
            return None, [self._call("lookup_dtc", {"codes": to_lookup})]

        unknown = [c for c in codes if c not in remembered and looked_up.get(c) is None]
        can_search = any(t.name == "search_knowledge" for t in tools)
        if unknown and can_search and not searched:
            # Codes the pack cannot act on: see what the knowledge base says of them.
            return None, [self._call("search_knowledge", {"query": " ".join(unknown)})]

        faults = [remembered.get(c) or looked_up.get(c) for c in codes]
        known = [f for f in faults if f is not None]
        for fault in known:
            if fault.signal and fault.signal not in histories:
                return None, [self._call("signal_history", {"signal": fault.signal})]

        for fault in known:
            evidence = self._confirming_evidence(fault, histories, seen)
            if evidence is None:
                continue
            base = CONFIDENCE_SIGNAL if fault.signal else CONFIDENCE_REPEAT
            memory_case = remembered.get(fault.code)
            if memory_case is not None:
                base += CONFIDENCE_MEMORY_LIFT
                if memory_case.case_uri:
                    evidence.append(memory_case.case_uri)
            answer = {
                "phase": "CONCLUDED",
                "root_cause": fault.root_cause,
                "fix_action": fault.fix_action,
                "priority": fault.priority,
                "confidence": round(min(base, CONFIDENCE_MAX), 2),
                "codes": [fault.code],
                "evidence": [f"dtc://{fault.code}", *evidence],
            }
            return json.dumps(answer, ensure_ascii=False), []

        suspect = known[0] if known else None
        answer = {
            "phase": "INVESTIGATING",
            "root_cause": None,
            "fix_action": None,
            "priority": suspect.priority if suspect else None,
            "confidence": CONFIDENCE_SUSPECTED if suspect else CONFIDENCE_UNKNOWN,
            "codes": codes,
            "evidence": [f"dtc://{c}" for c in codes],
        }
        return json.dumps(answer, ensure_ascii=False), []

    @staticmethod
    def _confirming_evidence(
        fault: _Fault, histories: dict[str, list[dict[str, Any]]], seen: dict[str, int]
    ) -> list[str] | None:
        if fault.signal:
            for reading in reversed(histories.get(fault.signal, [])):
                value = float(reading["value"])
                ok = value >= fault.threshold if fault.op == ">=" else value <= fault.threshold
                if ok:
                    return [str(reading["uri"])]
            return None
        if fault.repeat and seen.get(fault.code, 0) >= fault.repeat:
            return []
        return None

    def _call(self, name: str, arguments: dict[str, Any]) -> ToolCall:
        self._calls += 1
        return ToolCall(id=f"call_{self._calls}", name=name, arguments=arguments)


def _nothing_found(call: ToolCall | None) -> dict[str, Any]:
    """What a tool result that could not be read (clipped to fit the working context) is taken to say: the
    codes looked up are unknown, the signal has no readings, the search found nothing."""
    if call is None:
        return {}
    arguments = call.arguments
    if call.name == "lookup_dtc":
        return {"unknown": list(arguments.get("codes", []))}
    if call.name == "signal_history":
        return {"signal": arguments.get("signal", ""), "readings": []}
    if call.name == "search_knowledge":
        return {"hits": []}
    return {}
