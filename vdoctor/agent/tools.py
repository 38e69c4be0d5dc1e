"""The agent's tools: knowledge lookups and the session's signal history.

A toolbox is built per agent run over one vehicle's session, so a tool can
only ever see that vehicle's data.
"""

from __future__ import annotations

import json
from typing import Any

from vdoctor.agent.model import ToolSpec
from vdoctor.knowledge import KnowledgePack
from vdoctor.memory.session import SessionState

# A tool result is injected into the context: keep it small.
MAX_READINGS_RETURNED = 12
MAX_CODES_PER_LOOKUP = 8

SPECS = [
    ToolSpec(
        name="lookup_dtc",
        description="Look up diagnostic trouble codes: definition, fault family, likely root "
        "cause, fix action, priority and the evidence that confirms the fault.",
        parameters={
            "type": "object",
            "properties": {"codes": {"type": "array", "items": {"type": "string"}}},
            "required": ["codes"],
        },
    ),
    ToolSpec(
        name="signal_history",
        description="Readings of one signal (e.g. cell_voltage_diff_mv) in this vehicle's "
        "open diagnosis session, oldest first, with evidence URIs.",
        parameters={
            "type": "object",
            "properties": {"signal": {"type": "string"}},
            "required": ["signal"],
        },
    ),
]


class Toolbox:
    """Tools bound to one session."""

    def __init__(self, pack: KnowledgePack, session: SessionState) -> None:
        self.pack = pack
        self.session = session

    @property
    def specs(self) -> list[ToolSpec]:
        return SPECS

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run a tool; bad arguments come back as an error result the model can read."""
        if name == "lookup_dtc":
            result = self._lookup_dtc(arguments.get("codes"))
        elif name == "signal_history":
            result = self._signal_history(arguments.get("signal"))
        else:
            result = {"error": f"unknown tool {name!r}; tools: lookup_dtc, signal_history"}
        return json.dumps(result, ensure_ascii=False, sort_keys=True)

    def _lookup_dtc(self, codes: object) -> dict[str, Any]:
        if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
            return {"error": "codes must be a list of strings"}
        found: list[dict[str, object]] = []
        unknown: list[str] = []
        for code in codes[:MAX_CODES_PER_LOOKUP]:
            entry = self.pack.get(code)
            if entry is None:
                unknown.append(code)
            else:
                found.append(entry.as_tool_result())
        return {"codes": found, "unknown": unknown}

    def _signal_history(self, signal: object) -> dict[str, Any]:
        if not isinstance(signal, str) or not signal:
            return {"error": "signal must be a signal name such as cell_voltage_diff_mv"}
        readings = self.session.readings_of(signal)[-MAX_READINGS_RETURNED:]
        return {
            "signal": signal,
            "readings": [{"value": r.value, "ts": r.ts.strftime("%Y-%m-%dT%H:%M:%SZ"), "uri": r.uri} for r in readings],
        }
