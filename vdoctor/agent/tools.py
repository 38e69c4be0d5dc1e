"""The agent's tools: knowledge lookups and the session's signal history.

A toolbox is built per agent run over one vehicle's session, so a tool can
only ever see that vehicle's data.
"""

from __future__ import annotations

import json
from typing import Any

from vdoctor.agent.model import ToolSpec
from vdoctor.knowledge import KnowledgePack
from vdoctor.knowledge.base import KnowledgeBase
from vdoctor.knowledge.chunks import codes_in
from vdoctor.memory.session import SessionState

# A tool result is injected into the context: keep it small.
MAX_READINGS_RETURNED = 12
MAX_CODES_PER_LOOKUP = 8
MAX_QUERY_CHARS = 500
MAX_HIT_CHARS = 400

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
    ToolSpec(
        name="search_knowledge",
        description="Search the knowledge base (code tables, repair rules) by free text or codes; "
        "optional scope filter such as dtc:generic, dtc:FORD or rules. Returns the best chunks.",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string"}, "scope": {"type": "string"}},
            "required": ["query"],
        },
    ),
]


class Toolbox:
    """Tools bound to one session."""

    def __init__(self, pack: KnowledgePack, session: SessionState, knowledge: KnowledgeBase | None = None) -> None:
        self.pack = pack
        self.session = session
        self.knowledge = knowledge

    @property
    def specs(self) -> list[ToolSpec]:
        return SPECS if self.knowledge is not None else [s for s in SPECS if s.name != "search_knowledge"]

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run a tool; bad arguments come back as an error result the model can read."""
        if name == "lookup_dtc":
            result = self._lookup_dtc(arguments.get("codes"))
        elif name == "signal_history":
            result = self._signal_history(arguments.get("signal"))
        elif name == "search_knowledge" and self.knowledge is not None:
            result = self._search_knowledge(arguments.get("query"), arguments.get("scope"))
        else:
            names = ", ".join(s.name for s in self.specs)
            result = {"error": f"unknown tool {name!r}; tools: {names}"}
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

    def _search_knowledge(self, query: object, scope: object) -> dict[str, Any]:
        if not isinstance(query, str) or not query.strip():
            return {"error": "query must be a non-empty string"}
        if scope is not None and not isinstance(scope, str):
            return {"error": "scope must be a string such as dtc:generic"}
        if self.knowledge is None:
            return {"error": "no knowledge base is configured"}
        query = query[:MAX_QUERY_CHARS]
        wanted = codes_in(query)
        hits = []
        for h in self.knowledge.search(query, scope=scope or None):
            # A chunk is 200-400 tokens; when the query names codes, only their lines matter.
            lines = [ln for ln in h.chunk.text.splitlines() if wanted and ln.split(":", 1)[0] in wanted]
            text = "\n".join(lines) if lines else h.chunk.text[:MAX_HIT_CHARS]
            hits.append(
                {
                    "chunk_id": h.chunk.chunk_id,
                    "scope": h.chunk.scope,
                    "version": h.chunk.version,
                    "score": round(h.score, 3),
                    "text": text,
                }
            )
        return {"hits": hits}
